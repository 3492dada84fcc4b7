//! Lattice i-quants (IQ1_S, IQ1_M, IQ2_*, IQ3_*) and IQ4_XS.

use super::per_block;
use crate::blocks::*;
use crate::error::QuantError;
use crate::grids::*;

/// Coordinate `j` (0..8) of a byte-per-coordinate grid entry.
#[inline]
fn coord(entry: u64, j: usize) -> u8 {
    (entry >> (8 * j)) as u8
}

#[inline]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -1.0
    } else {
        1.0
    }
}

pub(crate) fn dequant_iq2_xxs(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ2XXS>(b, o, |x, y| {
        let d = x.d.to_f32();
        for ib in 0..8 {
            let q = &x.qs[4 * ib..4 * ib + 4];
            let idx = (q[0] as u32 | (q[1] as u32) << 16).to_le_bytes();
            let aux = q[2] as u32 | (q[3] as u32) << 16;
            let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
            for l in 0..4 {
                let g = IQ2XXS_GRID[idx[l] as usize];
                let s = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = db * coord(g, j) as f32 * sign(s, j);
                }
            }
        }
    })
}

pub(crate) fn dequant_iq2_xs(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ2XS>(b, o, |x, y| {
        let d = x.d.to_f32();
        for ib in 0..8 {
            let db = [
                d * (0.5 + (x.scales[ib] & 0xf) as f32) * 0.25,
                d * (0.5 + (x.scales[ib] >> 4) as f32) * 0.25,
            ];
            for l in 0..4 {
                let q = x.qs[4 * ib + l];
                let g = IQ2XS_GRID[(q & 511) as usize];
                let s = KSIGNS_IQ2XS[(q >> 9) as usize];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = db[l / 2] * coord(g, j) as f32 * sign(s, j);
                }
            }
        }
    })
}

pub(crate) fn dequant_iq2_s(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ2S>(b, o, |x, y| {
        let d = x.d.to_f32();
        let (qs, signs) = x.qs.split_at(32);
        for ib in 0..8 {
            let db = [
                d * (0.5 + (x.scales[ib] & 0xf) as f32) * 0.25,
                d * (0.5 + (x.scales[ib] >> 4) as f32) * 0.25,
            ];
            for l in 0..4 {
                let idx = qs[4 * ib + l] as usize | (((x.qh[ib] as usize) << (8 - 2 * l)) & 0x300);
                let g = IQ2S_GRID[idx];
                let s = signs[4 * ib + l];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = db[l / 2] * coord(g, j) as f32 * sign(s, j);
                }
            }
        }
    })
}

pub(crate) fn dequant_iq3_xxs(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ3XXS>(b, o, |x, y| {
        let d = x.d.to_f32();
        let (qs, ss) = x.qs.split_at(64);
        for ib in 0..8 {
            let aux = u32::from_le_bytes(ss[4 * ib..4 * ib + 4].try_into().expect("4 bytes"));
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let s = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let g1 = IQ3XXS_GRID[qs[8 * ib + 2 * l] as usize] as u64;
                let g2 = IQ3XXS_GRID[qs[8 * ib + 2 * l + 1] as usize] as u64;
                let out = &mut y[32 * ib + 8 * l..32 * ib + 8 * l + 8];
                for j in 0..4 {
                    out[j] = db * coord(g1, j) as f32 * sign(s, j);
                    out[j + 4] = db * coord(g2, j) as f32 * sign(s, j + 4);
                }
            }
        }
    })
}

pub(crate) fn dequant_iq3_s(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ3S>(b, o, |x, y| {
        let d = x.d.to_f32();
        for ib in 0..8 {
            let sc = x.scales[ib / 2];
            let db = d
                * (1 + 2 * if ib.is_multiple_of(2) {
                    sc & 0xf
                } else {
                    sc >> 4
                }) as f32;
            let qh = x.qh[ib] as usize;
            for l in 0..4 {
                let i1 = x.qs[8 * ib + 2 * l] as usize | ((qh << (8 - 2 * l)) & 256);
                let i2 = x.qs[8 * ib + 2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256);
                let (g1, g2) = (IQ3S_GRID[i1] as u64, IQ3S_GRID[i2] as u64);
                let s = x.signs[4 * ib + l];
                let out = &mut y[32 * ib + 8 * l..32 * ib + 8 * l + 8];
                for j in 0..4 {
                    out[j] = db * coord(g1, j) as f32 * sign(s, j);
                    out[j + 4] = db * coord(g2, j) as f32 * sign(s, j + 4);
                }
            }
        }
    })
}

pub(crate) fn dequant_iq1_s(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ1S>(b, o, |x, y| {
        let d = x.d.to_f32();
        for ib in 0..8 {
            let qh = x.qh[ib];
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for l in 0..4 {
                let idx = x.qs[4 * ib + l] as usize | ((((qh >> (3 * l)) & 7) as usize) << 8);
                let g = IQ1S_GRID[idx];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = dl * (coord(g, j) as i8 as f32 + delta);
                }
            }
        }
    })
}

/// The f16 super-scale of an IQ1_M block, reassembled from the top nibble of each scale u16.
#[inline]
pub fn iq1m_scale(scales: &[u8; 8]) -> f32 {
    let sc = |i: usize| u16::from_le_bytes([scales[2 * i], scales[2 * i + 1]]);
    let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
    half::f16::from_bits(bits).to_f32()
}

pub(crate) fn dequant_iq1_m(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ1M>(b, o, |x, y| {
        let d = iq1m_scale(&x.scales);
        for ib in 0..8 {
            let sc = u16::from_le_bytes([x.scales[2 * (ib / 2)], x.scales[2 * (ib / 2) + 1]]);
            let shift = 6 * (ib % 2);
            let dl1 = d * (2 * ((sc >> shift) & 7) + 1) as f32;
            let dl2 = d * (2 * ((sc >> (shift + 3)) & 7) + 1) as f32;
            let qs = &x.qs[4 * ib..4 * ib + 4];
            let qh = [x.qh[2 * ib] as usize, x.qh[2 * ib + 1] as usize];
            let idx = [
                qs[0] as usize | ((qh[0] << 8) & 0x700),
                qs[1] as usize | ((qh[0] << 4) & 0x700),
                qs[2] as usize | ((qh[1] << 8) & 0x700),
                qs[3] as usize | ((qh[1] << 4) & 0x700),
            ];
            let dsign = |bit: bool| if bit { -IQ1S_DELTA } else { IQ1S_DELTA };
            let delta = [
                dsign(qh[0] & 0x08 != 0),
                dsign(qh[0] & 0x80 != 0),
                dsign(qh[1] & 0x08 != 0),
                dsign(qh[1] & 0x80 != 0),
            ];
            for l in 0..4 {
                let dl = if l < 2 { dl1 } else { dl2 };
                let g = IQ1S_GRID[idx[l]];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = dl * (coord(g, j) as i8 as f32 + delta[l]);
                }
            }
        }
    })
}

pub(crate) fn dequant_iq4_xs(b: &[u8], o: &mut [f32]) -> Result<(), QuantError> {
    per_block::<BlockIQ4XS>(b, o, |x, y| {
        let d = x.d.to_f32();
        for ib in 0..8 {
            let ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) as i32
                | ((((x.scales_h >> (2 * ib)) & 3) as i32) << 4);
            let dl = d * (ls - 32) as f32;
            let q = &x.qs[16 * ib..16 * ib + 16];
            for j in 0..16 {
                y[32 * ib + j] = dl * KVALUES_IQ4NL[(q[j] & 0xf) as usize] as f32;
                y[32 * ib + 16 + j] = dl * KVALUES_IQ4NL[(q[j] >> 4) as usize] as f32;
            }
        }
    })
}
