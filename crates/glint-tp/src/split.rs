//! One rank's shard of a GGUF tensor, cut from the file's bytes along a declared axis.
//!
//! A tensor `{ne0, ne1, ne2}` is `ne2` slices of `ne1` rows of `ne0` values; quantized rows are
//! blocks along `ne0`. [`Split::Axis`] names the axis that is divided and how many equal runs
//! (`groups`) it holds: a fused tensor whose rows are `[gate; up]` has two, and each run is
//! divided into `world` equal parts of which rank `r` takes part `r`, so rank `r` gets its rows
//! of the gate AND its rows of the up projection (by slot, never by position in the file).

use std::borrow::Cow;

use glint_gguf::GgmlType;

/// How a tensor is divided among the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Every rank binds the whole tensor.
    Replicated,
    /// `axis` (0: the values of a row, 1: rows, 2: slices) holds `groups` equal runs; each is
    /// cut into `world` equal contiguous parts and rank `r` takes part `r` of every run.
    Axis { axis: usize, groups: usize },
}

impl Split {
    pub const ROWS: Split = Split::Axis { axis: 1, groups: 1 };
    pub const COLS: Split = Split::Axis { axis: 0, groups: 1 };
    pub const SLICES: Split = Split::Axis { axis: 2, groups: 1 };
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShardError {
    /// A count the split must respect (heads, experts) that does not divide, even where the
    /// tensor's own dimension would.
    #[error("{name}: {count} {what} do not divide over {world} ranks")]
    Count {
        name: String,
        what: &'static str,
        count: usize,
        world: usize,
    },
    #[error(
        "{name}: dimension ne{axis} = {len} does not divide into {groups} × {world} equal parts \
         (tensor parallelism over {world} ranks)"
    )]
    NotDivisible {
        name: String,
        axis: usize,
        len: usize,
        groups: usize,
        world: usize,
    },
    #[error(
        "{name}: a shard of {part} values per row is not a whole number of {ty} blocks of \
         {block} (ne0 = {len} over {world} ranks); use a type with smaller blocks or fewer ranks"
    )]
    Block {
        name: String,
        ty: GgmlType,
        part: usize,
        block: usize,
        len: usize,
        world: usize,
    },
    #[error("{name}: cannot split axis {axis} of a tensor of dims {dims:?}")]
    Axis {
        name: String,
        axis: usize,
        dims: Vec<usize>,
    },
    #[error("{name}: {bytes} bytes do not hold a {ty} tensor of dims {dims:?}")]
    Bytes {
        name: String,
        ty: GgmlType,
        dims: Vec<usize>,
        bytes: usize,
    },
}

/// One rank's shard: its dims (GGUF order) and bytes (borrowed from the file when contiguous).
#[derive(Debug)]
pub struct Cut<'a> {
    pub dims: Vec<usize>,
    pub bytes: Cow<'a, [u8]>,
}

/// Rank `rank`'s shard of tensor `name` (`ty`, `dims` in GGUF order, `bytes` its data) under
/// `split` over `world` ranks. Fails, naming the tensor and the numbers, when the axis does
/// not divide or a row would be cut inside a quantization block.
pub fn cut<'a>(
    name: &str,
    ty: GgmlType,
    dims: &[usize],
    bytes: &'a [u8],
    split: Split,
    rank: usize,
    world: usize,
) -> Result<Cut<'a>, ShardError> {
    let d3 = [
        dims.first().copied().unwrap_or(1),
        dims.get(1).copied().unwrap_or(1),
        dims.get(2).copied().unwrap_or(1),
    ];
    let row_bytes = ty.row_bytes(d3[0] as u64).map(|b| b as usize);
    let bad_bytes = || ShardError::Bytes {
        name: name.into(),
        ty,
        dims: dims.to_vec(),
        bytes: bytes.len(),
    };
    let row_bytes = row_bytes.ok_or_else(bad_bytes)?;
    if dims.len() > 3 || row_bytes * d3[1] * d3[2] != bytes.len() {
        return Err(bad_bytes());
    }
    let (axis, groups) = match split {
        Split::Axis { axis, groups } if world > 1 => (axis, groups.max(1)),
        _ => {
            return Ok(Cut {
                dims: dims.to_vec(),
                bytes: Cow::Borrowed(bytes),
            })
        }
    };
    if axis > 2 || axis >= dims.len().max(1) && d3[axis] == 1 {
        return Err(ShardError::Axis {
            name: name.into(),
            axis,
            dims: dims.to_vec(),
        });
    }
    let len = d3[axis];
    if !len.is_multiple_of(groups * world) {
        return Err(ShardError::NotDivisible {
            name: name.into(),
            axis,
            len,
            groups,
            world,
        });
    }
    let run = len / groups; // one group's extent along the axis
    let part = run / world; // this rank's extent within a group
    let mut out_dims = d3.to_vec();
    out_dims[axis] = part * groups;
    out_dims.truncate(dims.len().max(axis + 1));
    let bytes = match axis {
        0 => {
            let block = ty.block_size();
            if !part.is_multiple_of(block) {
                return Err(ShardError::Block {
                    name: name.into(),
                    ty,
                    part,
                    block,
                    len,
                    world,
                });
            }
            let part_bytes = part / block * ty.type_size();
            let run_bytes = run / block * ty.type_size();
            let mut v = Vec::with_capacity(part_bytes * groups * d3[1] * d3[2]);
            for row in bytes.chunks_exact(row_bytes) {
                for g in 0..groups {
                    let lo = g * run_bytes + rank * part_bytes;
                    v.extend_from_slice(&row[lo..lo + part_bytes]);
                }
            }
            Cow::Owned(v)
        }
        1 => {
            let slice_bytes = row_bytes * d3[1];
            let (run_b, part_b) = (run * row_bytes, part * row_bytes);
            if d3[2] == 1 && groups == 1 {
                Cow::Borrowed(&bytes[rank * part_b..(rank + 1) * part_b])
            } else {
                let mut v = Vec::with_capacity(part_b * groups * d3[2]);
                for slice in bytes.chunks_exact(slice_bytes) {
                    for g in 0..groups {
                        let lo = g * run_b + rank * part_b;
                        v.extend_from_slice(&slice[lo..lo + part_b]);
                    }
                }
                Cow::Owned(v)
            }
        }
        _ => {
            let slice_bytes = row_bytes * d3[1];
            let (run_b, part_b) = (run * slice_bytes, part * slice_bytes);
            if groups == 1 {
                Cow::Borrowed(&bytes[rank * part_b..(rank + 1) * part_b])
            } else {
                let mut v = Vec::with_capacity(part_b * groups);
                for g in 0..groups {
                    let lo = g * run_b + rank * part_b;
                    v.extend_from_slice(&bytes[lo..lo + part_b]);
                }
                Cow::Owned(v)
            }
        }
    };
    Ok(Cut {
        dims: out_dims,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_a_fused_pair_go_per_group() {
        // {2, 4}: rows 0,1 = gate, rows 2,3 = up; two ranks, groups of 2.
        let v: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let b: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
        let s = Split::Axis { axis: 1, groups: 2 };
        let c = cut("t", GgmlType::F32, &[2, 4], &b, s, 1, 2).unwrap();
        assert_eq!(c.dims, vec![2, 2]);
        let got: Vec<f32> = c
            .bytes
            .chunks_exact(4)
            .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![2.0, 3.0, 6.0, 7.0]);
    }

    #[test]
    fn refusals_name_the_tensor_and_numbers() {
        let b = vec![0u8; 4 * 6];
        let e = cut("blk.0.x", GgmlType::F32, &[6], &b, Split::COLS, 0, 4).unwrap_err();
        assert!(
            e.to_string().contains("blk.0.x") && e.to_string().contains("6"),
            "{e}"
        );
        // Q8_0 rows of 64 over 4 ranks: 16 values per part, inside a 32-value block.
        let b = vec![0u8; 2 * 34 * 3];
        let e = cut("w", GgmlType::Q8_0, &[64, 3], &b, Split::COLS, 0, 4).unwrap_err();
        assert!(
            matches!(
                e,
                ShardError::Block {
                    part: 16,
                    block: 32,
                    ..
                }
            ),
            "{e}"
        );
    }
}
