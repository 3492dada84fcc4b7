//! 32-element legacy blocks (Q4_0 ... Q8_1, IQ4_NL) and the 1-bit Q1_0.

use super::per_block;
use crate::blocks::*;
use crate::error::QuantError;
use crate::grids::KVALUES_IQ4NL;

pub(crate) fn dequant_q4_0(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ4_0>(b, o, |x, y| {
        let d = x.d.to_f32();
        for j in 0..16 {
            y[j] = d * ((x.qs[j] & 0xf) as i32 - 8) as f32;
            y[j + 16] = d * ((x.qs[j] >> 4) as i32 - 8) as f32;
        }
    })
}

pub(crate) fn dequant_q4_1(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ4_1>(b, o, |x, y| {
        let (d, m) = (x.d.to_f32(), x.m.to_f32());
        for j in 0..16 {
            y[j] = d * (x.qs[j] & 0xf) as f32 + m;
            y[j + 16] = d * (x.qs[j] >> 4) as f32 + m;
        }
    })
}

pub(crate) fn dequant_q5_0(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ5_0>(b, o, |x, y| {
        let d = x.d.to_f32();
        let qh = u32::from_le_bytes(x.qh);
        for j in 0..16 {
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (((x.qs[j] & 0xf) as u32 | h0) as i32 - 16) as f32;
            y[j + 16] = d * (((x.qs[j] >> 4) as u32 | h1) as i32 - 16) as f32;
        }
    })
}

pub(crate) fn dequant_q5_1(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ5_1>(b, o, |x, y| {
        let (d, m) = (x.d.to_f32(), x.m.to_f32());
        let qh = u32::from_le_bytes(x.qh);
        for j in 0..16 {
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = d * ((x.qs[j] & 0xf) as u32 | h0) as f32 + m;
            y[j + 16] = d * ((x.qs[j] >> 4) as u32 | h1) as f32 + m;
        }
    })
}

pub(crate) fn dequant_q8_0(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ8_0>(b, o, |x, y| {
        let d = x.d.to_f32();
        for (y, &q) in y.iter_mut().zip(&x.qs) {
            *y = q as f32 * d;
        }
    })
}

/// Q8_1's `s` field is redundant for dequantization (it caches `d * sum(qs)`).
pub(crate) fn dequant_q8_1(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ8_1>(b, o, |x, y| {
        let d = x.d.to_f32();
        for (y, &q) in y.iter_mut().zip(&x.qs) {
            *y = q as f32 * d;
        }
    })
}

pub(crate) fn dequant_iq4_nl(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ4NL>(b, o, |x, y| {
        let d = x.d.to_f32();
        for j in 0..16 {
            y[j] = d * KVALUES_IQ4NL[(x.qs[j] & 0xf) as usize] as f32;
            y[j + 16] = d * KVALUES_IQ4NL[(x.qs[j] >> 4) as usize] as f32;
        }
    })
}

/// Bit j of `qs` (LSB first) set means `+d`, clear means `-d`.
pub(crate) fn dequant_q1_0(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockQ1_0>(b, o, |x, y| {
        let d = x.d.to_f32();
        for (j, y) in y.iter_mut().enumerate() {
            *y = if (x.qs[j / 8] >> (j % 8)) & 1 != 0 {
                d
            } else {
                -d
            };
        }
    })
}
