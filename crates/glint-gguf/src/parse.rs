//! Header parsing: magic, version, metadata, tensor infos, and the consistency checks that make
//! later zero-copy slicing safe.

use std::collections::HashSet;

use crate::cursor::Cursor;
use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::tensor::{TensorInfo, MAX_DIMS};
use crate::value::{Array, ArrayData, Value, ValueType};
use crate::GgmlType;

/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Deepest array-of-array nesting accepted. Real files use at most 2; the bound keeps a forged
/// file from recursing the parser off the stack.
pub const MAX_ARRAY_DEPTH: usize = 8;

const MAGIC: &[u8; 4] = b"GGUF";
/// Smallest possible key/value pair: 8-byte key length, 4-byte type, 1-byte value.
const MIN_KV_BYTES: u64 = 13;
/// Smallest possible tensor info: 8-byte name length, n_dims, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Everything in one GGUF file before its data section.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    /// Tensor infos in file order, all with `shard == 0`.
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset of the data section (end of the tensor infos, aligned up).
    pub data_offset: u64,
}

/// Parses and validates the header of a complete GGUF file held in `bytes`. Tensor data is not
/// read, only bounds-checked against `bytes.len()`.
pub fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut cur = Cursor::new(bytes);
    let magic = cur.take(4, || "magic".into())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = cur.u32(|| "version".into())?;
    check_version(version)?;
    let n_tensors = cur.u64(|| "tensor count".into())?;
    let n_kv = cur.u64(|| "metadata key/value count".into())?;
    let counts_at = cur.pos() - 16;
    let n_kv = cur.check_count(n_kv, MIN_KV_BYTES, counts_at + 8, || {
        "metadata key/value count".into()
    })?;

    let mut entries = Vec::with_capacity(n_kv);
    for i in 0..n_kv {
        let key = cur.string(&|| format!("key of metadata entry {i}"))?;
        let ty_at = cur.pos();
        let ty = cur.u32(|| format!("type of key '{key}'"))?;
        let ty = ValueType::from_id(ty).ok_or_else(|| GgufError::UnknownValueType {
            key: key.clone(),
            id: ty,
            offset: ty_at,
        })?;
        let value = read_value(&mut cur, ty, &key, 0)?;
        entries.push((key, value));
    }
    let metadata = Metadata::new(entries)?;
    let alignment = alignment(&metadata)?;

    let n_tensors = cur.check_count(n_tensors, MIN_TENSOR_INFO_BYTES, counts_at, || {
        "tensor count".into()
    })?;
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut names = HashSet::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let t = read_tensor_info(&mut cur, i, alignment)?;
        if !names.insert(t.name.clone()) {
            return Err(GgufError::DuplicateTensor { name: t.name });
        }
        tensors.push(t);
    }

    let data_offset = cur
        .pos()
        .checked_next_multiple_of(alignment)
        .unwrap_or(u64::MAX);
    check_data_layout(&tensors, data_offset, bytes.len() as u64)?;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

fn check_version(version: u32) -> Result<()> {
    match version {
        2 | 3 => Ok(()),
        // A big-endian writer puts the small version number in the high bytes.
        v if v & 0xFFFF == 0 && matches!(v.swap_bytes(), 1..=3) => Err(GgufError::BigEndian {
            version: v.swap_bytes(),
        }),
        v => Err(GgufError::UnsupportedVersion { version: v }),
    }
}

fn read_value(cur: &mut Cursor<'_>, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
    let what = || format!("value of key '{key}'");
    Ok(match ty {
        ValueType::U8 => Value::U8(cur.u8(what)?),
        ValueType::I8 => Value::I8(cur.u8(what)? as i8),
        ValueType::U16 => Value::U16(cur.u16(what)?),
        ValueType::I16 => Value::I16(cur.u16(what)? as i16),
        ValueType::U32 => Value::U32(cur.u32(what)?),
        ValueType::I32 => Value::I32(cur.u32(what)? as i32),
        ValueType::U64 => Value::U64(cur.u64(what)?),
        ValueType::I64 => Value::I64(cur.u64(what)? as i64),
        ValueType::F32 => Value::F32(f32::from_bits(cur.u32(what)?)),
        ValueType::F64 => Value::F64(f64::from_bits(cur.u64(what)?)),
        ValueType::Bool => match cur.u8(what)? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => {
                return Err(GgufError::InvalidBool {
                    key: key.to_string(),
                    value: b,
                })
            }
        },
        ValueType::String => Value::String(cur.string(&what)?),
        ValueType::Array => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(GgufError::NestingTooDeep {
                    key: key.to_string(),
                    max_depth: MAX_ARRAY_DEPTH,
                });
            }
            let at = cur.pos();
            let id = cur.u32(|| format!("array element type of key '{key}'"))?;
            let elem_type = ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
                key: key.to_string(),
                id,
                offset: at,
            })?;
            let len_at = cur.pos();
            let len = cur.u64(|| format!("array length of key '{key}'"))?;
            let n = cur.check_count(len, elem_type.min_encoded_size(), len_at, || {
                format!("array of key '{key}'")
            })?;
            let mut data = ArrayData::with_capacity(elem_type, n);
            for _ in 0..n {
                // read_value returns a value of exactly `elem_type`, so push cannot refuse it.
                let v = read_value(cur, elem_type, key, depth + 1)?;
                if data.push(v).is_err() {
                    unreachable!("read_value returned another type than {elem_type}");
                }
            }
            Value::Array(Array::new(data))
        }
    })
}

fn alignment(metadata: &Metadata) -> Result<u64> {
    match metadata.get(ALIGNMENT_KEY) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some(Value::U32(a)) => Err(GgufError::InvalidAlignment {
            value: u64::from(*a),
        }),
        Some(other) => Err(GgufError::WrongType {
            key: ALIGNMENT_KEY.to_string(),
            expected: "UINT32",
            found: other.type_name(),
        }),
    }
}

fn read_tensor_info(cur: &mut Cursor<'_>, index: usize, alignment: u64) -> Result<TensorInfo> {
    let name = cur.string(&|| format!("name of tensor {index}"))?;
    let n_dims = cur.u32(|| format!("n_dims of tensor '{name}'"))?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name,
            n_dims,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64(|| format!("dimensions of tensor '{name}'"))?);
    }
    let id = cur.u32(|| format!("type of tensor '{name}'"))?;
    let ty = GgmlType::from_id(id).ok_or_else(|| GgufError::UnknownTensorType {
        tensor: name.clone(),
        id,
    })?;
    let offset = cur.u64(|| format!("data offset of tensor '{name}'"))?;
    let n_bytes = tensor_bytes(&name, ty, &dims)?;
    if !offset.is_multiple_of(alignment) {
        return Err(GgufError::UnalignedTensorOffset {
            tensor: name,
            offset,
            alignment,
        });
    }
    Ok(TensorInfo {
        name,
        ty,
        dims,
        offset,
        n_bytes,
        shard: 0,
    })
}

/// Byte size of a tensor, rejecting shapes ggml could not represent: element counts beyond
/// `i64::MAX` (ggml's `int64_t ne`) and rows that are not whole quantization blocks.
pub(crate) fn tensor_bytes(name: &str, ty: GgmlType, dims: &[u64]) -> Result<u64> {
    let overflow = || GgufError::DimsOverflow {
        tensor: name.to_string(),
        dims: dims.to_vec(),
    };
    // Zero dimensions are skipped so that the product of any subset of dims (n_rows, or
    // n_elements multiplied in any order) is known to fit; a zero-sized tensor with huge other
    // dims is still rejected (found by fuzzing: `[0, 2^40, 2^40]` overflowed `n_rows`).
    let mut nonzero_product: u64 = 1;
    for &d in dims.iter().filter(|&&d| d != 0) {
        nonzero_product = nonzero_product.checked_mul(d).ok_or_else(overflow)?;
    }
    if nonzero_product > i64::MAX as u64 {
        return Err(overflow());
    }
    let row_len = dims.first().copied().unwrap_or(1);
    let block_size = ty.block_size() as u64;
    if !row_len.is_multiple_of(block_size) {
        return Err(GgufError::RowNotBlockAligned {
            tensor: name.to_string(),
            ty,
            row_len,
            block_size,
        });
    }
    let row_bytes = ty.row_bytes(row_len).ok_or_else(overflow)?;
    let n_rows: u64 = dims.iter().skip(1).product();
    row_bytes.checked_mul(n_rows).ok_or_else(overflow)
}

/// Every tensor must lie inside the file and no two may share bytes: slices handed out by the
/// reader are then always valid, and a writer bug that aliases tensors is caught at load.
fn check_data_layout(tensors: &[TensorInfo], data_offset: u64, file_len: u64) -> Result<()> {
    for t in tensors {
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(_), Some(e)) if e <= file_len => {}
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    file_len,
                })
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        if pair[0].offset + pair[0].n_bytes > pair[1].offset {
            return Err(GgufError::OverlappingTensors {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}
