//! Minimal `.npy` (NumPy format v1.0) writer for little-endian float32 arrays.
//!
//! The header is written first and the data streamed after it, so a multi-gigabyte tensor can be
//! dumped without holding it in memory twice.

use std::io::{self, Write};

/// Writes the magic, version and header dict for a C-order `<f4` array of `shape`.
pub fn write_f32_header<W: Write>(w: &mut W, shape: &[usize]) -> io::Result<()> {
    let dims = match shape {
        [] => String::new(),
        [n] => format!("{n},"),
        _ => shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    // Magic (6) + version (2) + length (2) + header must be a multiple of 64, ending in '\n'.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let len = u16::try_from(header.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "npy header longer than 65535 bytes",
        )
    })?;
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(header.as_bytes())
}

/// Appends float32 values in little-endian order.
pub fn write_f32_data<W: Write>(w: &mut W, data: &[f32]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(data.len() * 4);
    for v in data {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    w.write_all(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_numpy() {
        // Bytes produced by numpy 2.4 `np.save` for np.zeros((2, 3), np.float32), header part.
        let mut v = Vec::new();
        write_f32_header(&mut v, &[2, 3]).unwrap();
        let mut want =
            b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
                .to_vec();
        want.extend(std::iter::repeat_n(b' ', 128 - want.len() - 1));
        want.push(b'\n');
        assert_eq!(v, want);
        let mut v = Vec::new();
        write_f32_header(&mut v, &[5]).unwrap();
        assert!(String::from_utf8_lossy(&v).contains("'shape': (5,), }"));
        assert_eq!(v.len() % 64, 0);
    }
}
