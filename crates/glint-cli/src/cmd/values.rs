//! Parsers for numeric flags, so a bad value fails in clap with the flag's name, the value and
//! the allowed range, before any model is opened. `f32::from_str` accepts `nan` and `inf`,
//! which would otherwise slip through and silently change what a setting means.

/// Any finite number (`--temp`; `<= 0` is greedy, so negatives are meaningful).
pub fn finite(s: &str) -> Result<f32, String> {
    let v = parse(s)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{v} is not a finite number"))
    }
}

/// A probability-like fraction in `[0, 1]` (`--top-p`, `--min-p`).
pub fn unit_interval(s: &str) -> Result<f32, String> {
    let v = parse(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside the allowed range 0 to 1"))
    }
}

/// A finite number above zero (`--repeat-penalty`: logits are divided by it).
pub fn positive(s: &str) -> Result<f32, String> {
    let v = parse(s)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} must be a finite number above 0"))
    }
}

fn parse(s: &str) -> Result<f32, String> {
    s.trim()
        .parse::<f32>()
        .map_err(|e| format!("`{s}` is not a number: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(finite("-1"), Ok(-1.0));
        assert!(finite("nan").is_err());
        assert!(finite("inf").is_err());
        assert_eq!(unit_interval("0.95"), Ok(0.95));
        assert!(unit_interval("NaN").is_err());
        assert!(unit_interval("1.5").is_err());
        assert!(unit_interval("-0.1").is_err());
        assert_eq!(positive("1.1"), Ok(1.1));
        assert!(positive("0").is_err());
        assert!(positive("-2").is_err());
        assert!(positive("x").unwrap_err().contains("`x`"));
    }
}
