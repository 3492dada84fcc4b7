//! Legacy 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).

use super::{f32_to_f16, per_block};
use crate::blocks::*;
use crate::error::QuantError;

/// The value with the largest magnitude (first one on ties), keeping its sign.
///
/// Symmetric formats scale by this signed value so the extreme weight lands exactly on the
/// most negative code (-8 / -16), which has no positive twin.
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// C's float-to-`int8_t` conversion as compiled for x86-64 (truncate toward zero through i32);
/// identical to a plain cast for the in-range values the quantizers produce.
#[inline]
fn trunc_i8(x: f32) -> i8 {
    x as i32 as i8
}

pub(crate) fn quant_q4_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ4_0>(src, out, |x, y| {
        let d = signed_absmax(x) / -8.0;
        let id = inv(d);
        y.d = f32_to_f16(d);
        for j in 0..16 {
            let q0 = (trunc_i8(x[j] * id + 8.5) as i32).min(15) as u8;
            let q1 = (trunc_i8(x[j + 16] * id + 8.5) as i32).min(15) as u8;
            y.qs[j] = q0 | (q1 << 4);
        }
    })
}

pub(crate) fn quant_q4_1(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ4_1>(src, out, |x, y| {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        y.d = f32_to_f16(d);
        y.m = f32_to_f16(min);
        for j in 0..16 {
            let q0 = (trunc_i8((x[j] - min) * id + 0.5) as i32).min(15) as u8;
            let q1 = (trunc_i8((x[j + 16] - min) * id + 0.5) as i32).min(15) as u8;
            y.qs[j] = q0 | (q1 << 4);
        }
    })
}

pub(crate) fn quant_q5_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ5_0>(src, out, |x, y| {
        let d = signed_absmax(x) / -16.0;
        let id = inv(d);
        y.d = f32_to_f16(d);
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = (trunc_i8(x[j] * id + 16.5) as i32).min(31) as u8;
            let q1 = (trunc_i8(x[j + 16] * id + 16.5) as i32).min(31) as u8;
            y.qs[j] = (q0 & 0xf) | ((q1 & 0xf) << 4);
            qh |= ((q0 as u32 & 0x10) >> 4) << j;
            qh |= ((q1 as u32 & 0x10) >> 4) << (j + 16);
        }
        y.qh = qh.to_le_bytes();
    })
}

pub(crate) fn quant_q5_1(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ5_1>(src, out, |x, y| {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        y.d = f32_to_f16(d);
        y.m = f32_to_f16(min);
        let mut qh = 0u32;
        for j in 0..16 {
            // ggml casts straight to uint8_t here (no clamp); through i32 like x86 does.
            let q0 = ((x[j] - min) * id + 0.5) as i32 as u8;
            let q1 = ((x[j + 16] - min) * id + 0.5) as i32 as u8;
            y.qs[j] = (q0 & 0xf) | ((q1 & 0xf) << 4);
            qh |= ((q0 as u32 & 0x10) >> 4) << j;
            qh |= ((q1 as u32 & 0x10) >> 4) << (j + 16);
        }
        y.qh = qh.to_le_bytes();
    })
}

/// Shared by Q8_0 and Q8_1: scale so the largest magnitude maps to 127, round half away from 0.
#[inline]
fn q8_scale(x: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    (d, inv(d))
}

pub(crate) fn quant_q8_0(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ8_0>(src, out, |x, y| {
        let (d, id) = q8_scale(x);
        y.d = f32_to_f16(d);
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i32 as i8;
        }
    })
}

pub(crate) fn quant_q8_1(src: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    per_block::<BlockQ8_1>(src, out, |x, y| {
        let (d, id) = q8_scale(x);
        y.d = f32_to_f16(d);
        let mut sum = 0i32;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i32 as i8;
            sum += *q as i32;
        }
        y.s = f32_to_f16(sum as f32 * d);
    })
}
