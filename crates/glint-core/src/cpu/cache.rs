//! The CPU's paged cache pool: rows stored as f32, f16, bf16, fp8 or q8 (+ a scale per row),
//! read back as f32 rows by attention and the indexer (whose scan reads q8 rows as they are).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::cache_type::{f32_to_fp8, f32_to_q8, fp8_to_f32, q8_scale, CacheType, FP8_MAX};
use crate::error::{try_zeroed, CoreError, Result};

pub struct CpuCache {
    pub(crate) dim: usize,
    pub(crate) rows: usize,
    data: Data,
}

enum Data {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Fp8 { codes: Vec<u8>, scales: Vec<f32> },
    Q8 { codes: Vec<i8>, scales: Vec<f32> },
}

impl CpuCache {
    pub(crate) fn new(rows: usize, dim: usize, ty: CacheType) -> Result<Self> {
        let len = rows.checked_mul(dim).ok_or(CoreError::Param {
            op: "alloc_cache",
            msg: format!("{rows} rows of {dim} values overflow"),
        })?;
        let what = "KV cache";
        let data = match ty {
            CacheType::F32 => Data::F32(try_zeroed(what, len)?),
            CacheType::F16 => Data::F16(try_zeroed(what, len)?),
            CacheType::Bf16 => Data::Bf16(try_zeroed(what, len)?),
            CacheType::Fp8 => Data::Fp8 {
                codes: try_zeroed(what, len)?,
                scales: try_zeroed(what, rows)?,
            },
            CacheType::Q8 => Data::Q8 {
                codes: try_zeroed(what, len)?,
                scales: try_zeroed(what, rows)?,
            },
        };
        Ok(Self { dim, rows, data })
    }

    pub fn cache_type(&self) -> CacheType {
        match self.data {
            Data::F32(_) => CacheType::F32,
            Data::F16(_) => CacheType::F16,
            Data::Bf16(_) => CacheType::Bf16,
            Data::Fp8 { .. } => CacheType::Fp8,
            Data::Q8 { .. } => CacheType::Q8,
        }
    }

    /// The codes (`rows × dim`) and per-row scales, when stored as q8 (the indexer scans them
    /// in place).
    pub(crate) fn as_q8(&self) -> Option<(&[i8], &[f32])> {
        match &self.data {
            Data::Q8 { codes, scales } => Some((codes, scales)),
            _ => None,
        }
    }

    /// The rows as one f32 slice, when stored as f32 (attention reads it in place).
    pub(crate) fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }

    fn check(&self, op: &'static str, r: usize) -> Result<()> {
        if r >= self.rows {
            return Err(CoreError::Index {
                op,
                index: r,
                limit: self.rows,
            });
        }
        Ok(())
    }

    /// Row `r`: in place when stored as f32, else decoded into `tmp[..dim]`.
    pub(crate) fn row<'a>(
        &'a self,
        op: &'static str,
        r: usize,
        tmp: &'a mut [f32],
    ) -> Result<&'a [f32]> {
        self.check(op, r)?;
        let d = self.dim;
        match &self.data {
            Data::F32(v) => Ok(&v[r * d..(r + 1) * d]),
            _ => {
                self.read_row(op, r, tmp)?;
                Ok(&tmp[..d])
            }
        }
    }

    /// Asks the CPU to start loading row `r` (a hint: a row out of range is ignored). The sparse
    /// gather reads 2048 rows scattered over a cache of up to hundreds of MB; issuing the next
    /// rows' loads while one row is copied keeps several DRAM misses in flight.
    pub(crate) fn prefetch_row(&self, r: usize) {
        let d = self.dim;
        let bytes: &[u8] = match &self.data {
            Data::F32(v) => bytemuck::cast_slice(v.get(r * d..(r + 1) * d).unwrap_or(&[])),
            Data::F16(v) => bytemuck::cast_slice(v.get(r * d..(r + 1) * d).unwrap_or(&[])),
            Data::Bf16(v) => bytemuck::cast_slice(v.get(r * d..(r + 1) * d).unwrap_or(&[])),
            Data::Fp8 { codes, .. } => codes.get(r * d..(r + 1) * d).unwrap_or(&[]),
            Data::Q8 { codes, .. } => {
                bytemuck::cast_slice(codes.get(r * d..(r + 1) * d).unwrap_or(&[]))
            }
        };
        #[cfg(target_arch = "x86_64")]
        for line in bytes.chunks(64) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch hint of an address inside a live slice; it never faults.
            unsafe { _mm_prefetch(line.as_ptr() as *const i8, _MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = bytes;
    }

    /// Row `r` decoded into `out[..dim]`.
    pub(crate) fn read_row(&self, op: &'static str, r: usize, out: &mut [f32]) -> Result<()> {
        self.check(op, r)?;
        let d = self.dim;
        let out = &mut out[..d];
        match &self.data {
            Data::F32(v) => out.copy_from_slice(&v[r * d..(r + 1) * d]),
            // The slice conversions check the CPU's F16C once a row, not once a value.
            Data::F16(v) => v[r * d..(r + 1) * d].convert_to_f32_slice(out),
            Data::Bf16(v) => v[r * d..(r + 1) * d].convert_to_f32_slice(out),
            Data::Fp8 { codes, scales } => {
                let s = scales[r];
                out.iter_mut()
                    .zip(&codes[r * d..(r + 1) * d])
                    .for_each(|(o, &c)| *o = fp8_to_f32(c) * s);
            }
            Data::Q8 { codes, scales } => {
                let s = scales[r];
                out.iter_mut()
                    .zip(&codes[r * d..(r + 1) * d])
                    .for_each(|(o, &c)| *o = c as f32 * s);
            }
        }
        Ok(())
    }

    /// Stores `src[..dim]` as row `r`, rounded to the cache type (fp8: scaled by the row's
    /// largest magnitude so it maps to 448).
    pub(crate) fn write_row(&mut self, r: usize, src: &[f32]) -> Result<()> {
        self.check("cache_set_rows", r)?;
        let d = self.dim;
        let src = &src[..d];
        match &mut self.data {
            Data::F32(v) => v[r * d..(r + 1) * d].copy_from_slice(src),
            Data::F16(v) => v[r * d..(r + 1) * d].convert_from_f32_slice(src),
            Data::Bf16(v) => v[r * d..(r + 1) * d].convert_from_f32_slice(src),
            Data::Fp8 { codes, scales } => {
                // Over finite values: an inf saturates to ±448·scale instead of making the
                // scale inf (which would turn every other value of the row into NaN).
                let amax = src
                    .iter()
                    .filter(|x| x.is_finite())
                    .fold(0f32, |m, &x| m.max(x.abs()));
                let scale = if amax > 0.0 { amax / FP8_MAX } else { 1.0 };
                scales[r] = scale;
                codes[r * d..(r + 1) * d]
                    .iter_mut()
                    .zip(src)
                    .for_each(|(o, &x)| *o = f32_to_fp8(x / scale));
            }
            Data::Q8 { codes, scales } => {
                let scale = q8_scale(src);
                scales[r] = scale;
                codes[r * d..(r + 1) * d]
                    .iter_mut()
                    .zip(src)
                    .for_each(|(o, &x)| *o = f32_to_q8(x, scale));
            }
        }
        Ok(())
    }
}
