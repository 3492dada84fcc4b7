//! Text from a file made safe for a terminal. Keys, tensor names and architecture names come
//! from the GGUF, and a forged one could hold ESC sequences (clear the screen, recolour) or
//! newlines that fake extra output lines; they are shown escaped (`\u{1b}`, `\n`) instead.

use std::borrow::Cow;

/// `s` with every control character escaped; borrowed when there is none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn escapes_only_control_characters() {
        assert!(matches!(
            printable("blk.0 ünïcode"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(printable("a\u{1b}[2Jb\nc\t"), "a\\u{1b}[2Jb\\nc\\t");
    }
}
