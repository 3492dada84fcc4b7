//! GGUF v3 writer: header first, then tensor data streamed in declared order, so multi-gigabyte
//! models can be written without holding them in memory or seeking.

use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::parse::{tensor_bytes, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH};
use crate::safe_output::SafeOutput;
use crate::tensor::MAX_DIMS;
use crate::value::{Array, ArrayData, Value};
use crate::GgmlType;

/// Version written by [`GgufWriter`].
pub const WRITE_VERSION: u32 = 3;

/// A tensor to be written: its data follows later through [`GgufWriter::write_tensor`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub ty: GgmlType,
    /// ggml `ne` order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
}

/// Streams one GGUF v3 file.
pub struct GgufWriter<W: Write> {
    w: W,
    tensors: Vec<(String, u64)>,
    next: usize,
    alignment: u64,
}

impl<W: Write> GgufWriter<W> {
    /// Validates everything up front (so a bad spec fails before any byte is written), then
    /// writes the header and the padding up to the data section.
    pub fn new(mut w: W, metadata: &[(String, Value)], tensors: &[TensorSpec]) -> Result<Self> {
        let alignment = check_metadata(metadata)?;
        let mut buf = Vec::new();
        buf.extend_from_slice(b"GGUF");
        buf.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        buf.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        buf.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in metadata {
            put_str(&mut buf, key);
            buf.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut buf, value);
        }
        let mut names = HashSet::new();
        let mut sizes = Vec::with_capacity(tensors.len());
        let mut offset = 0u64;
        for t in tensors {
            if !names.insert(t.name.as_str()) {
                return Err(GgufError::DuplicateTensor {
                    name: t.name.clone(),
                });
            }
            if t.dims.len() > MAX_DIMS {
                return Err(GgufError::TooManyDims {
                    tensor: t.name.clone(),
                    n_dims: t.dims.len() as u32,
                });
            }
            let n_bytes = tensor_bytes(&t.name, t.ty, &t.dims)?;
            put_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&(t.ty as u32).to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            offset = offset
                .checked_add(n_bytes)
                .and_then(|o| o.checked_next_multiple_of(alignment))
                .ok_or_else(|| GgufError::DimsOverflow {
                    tensor: t.name.clone(),
                    dims: t.dims.clone(),
                })?;
            sizes.push((t.name.clone(), n_bytes));
        }
        pad(&mut buf, alignment);
        w.write_all(&buf)?;
        Ok(GgufWriter {
            w,
            tensors: sizes,
            next: 0,
            alignment,
        })
    }

    /// Writes the next declared tensor's bytes and its alignment padding.
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<()> {
        let Some((expected, n_bytes)) = self.tensors.get(self.next) else {
            return Err(GgufError::ExtraTensor {
                name: name.to_string(),
            });
        };
        if expected != name {
            return Err(GgufError::TensorOrder {
                expected: expected.clone(),
                found: name.to_string(),
            });
        }
        if data.len() as u64 != *n_bytes {
            return Err(GgufError::TensorSize {
                name: name.to_string(),
                expected: *n_bytes,
                found: data.len() as u64,
            });
        }
        self.w.write_all(data)?;
        let padded = n_bytes.next_multiple_of(self.alignment);
        let zeros = vec![0u8; (padded - n_bytes) as usize];
        self.w.write_all(&zeros)?;
        self.next += 1;
        Ok(())
    }

    /// Writes the next declared tensor from pieces: `fill` is called with a buffer of up to
    /// `chunk` bytes (and the byte offset into the tensor) until the tensor is complete, so a
    /// multi-GB tensor never needs to be in memory at once.
    pub fn write_tensor_with(
        &mut self,
        name: &str,
        chunk: usize,
        mut fill: impl FnMut(u64, &mut [u8]),
    ) -> Result<()> {
        let Some((expected, n_bytes)) = self.tensors.get(self.next).cloned() else {
            return Err(GgufError::ExtraTensor {
                name: name.to_string(),
            });
        };
        if expected != name {
            return Err(GgufError::TensorOrder {
                expected,
                found: name.to_string(),
            });
        }
        let mut buf = vec![0u8; chunk.max(1).min(n_bytes as usize)];
        let mut done = 0u64;
        while done < n_bytes {
            let len = buf.len().min((n_bytes - done) as usize);
            fill(done, &mut buf[..len]);
            self.w.write_all(&buf[..len])?;
            done += len as u64;
        }
        let padded = n_bytes.next_multiple_of(self.alignment);
        self.w.write_all(&vec![0u8; (padded - n_bytes) as usize])?;
        self.next += 1;
        Ok(())
    }

    /// Flushes and returns the sink; fails if a declared tensor was never written, since the
    /// file would then be truncated.
    pub fn finish(mut self) -> Result<W> {
        if let Some((first, _)) = self.tensors.get(self.next) {
            return Err(GgufError::MissingTensors {
                missing: self.tensors.len() - self.next,
                first: first.clone(),
            });
        }
        self.w.flush()?;
        Ok(self.w)
    }
}

/// Writes a whole GGUF file in one call.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, Value)],
    tensors: &[(TensorSpec, &[u8])],
) -> Result<()> {
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _)| s.clone()).collect();
    // Safe even when `path` is a file the caller has mapped: the bytes go to a temporary
    // that replaces `path` only once complete.
    let mut out = SafeOutput::create(path, &[])?;
    let run = |out: &mut SafeOutput| -> Result<()> {
        let mut w = GgufWriter::new(BufWriter::new(out.file()), metadata, &specs)?;
        for (spec, data) in tensors {
            w.write_tensor(&spec.name, data)?;
        }
        w.finish()?.into_inner().map_err(|e| e.into_error())?;
        Ok(())
    };
    run(&mut out).map_err(|e| e.in_file(path))?;
    Ok(out.commit()?)
}

/// Rejects metadata a reader would refuse (duplicate keys, mixed arrays, bad alignment) and
/// returns the alignment to use.
fn check_metadata(metadata: &[(String, Value)]) -> Result<u64> {
    let mut keys = HashSet::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for (key, value) in metadata {
        if !keys.insert(key.as_str()) {
            return Err(GgufError::DuplicateKey { key: key.clone() });
        }
        check_array(key, value, 0)?;
        if key == ALIGNMENT_KEY {
            alignment = match value {
                Value::U32(a) if a.is_power_of_two() => u64::from(*a),
                Value::U32(a) => {
                    return Err(GgufError::InvalidAlignment {
                        value: u64::from(*a),
                    })
                }
                other => {
                    return Err(GgufError::WrongType {
                        key: key.clone(),
                        expected: "UINT32",
                        found: other.type_name(),
                    })
                }
            };
        }
    }
    Ok(alignment)
}

fn check_array(key: &str, value: &Value, depth: usize) -> Result<()> {
    match value {
        Value::Array(a) => check_nesting(key, a, depth),
        _ => Ok(()),
    }
}

fn check_nesting(key: &str, a: &Array, depth: usize) -> Result<()> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            key: key.to_string(),
            max_depth: MAX_ARRAY_DEPTH,
        });
    }
    // Element types are uniform by construction ([`ArrayData`]); only nesting can be wrong.
    if let ArrayData::Array(inner) = a.data() {
        for v in inner {
            check_nesting(key, v, depth + 1)?;
        }
    }
    Ok(())
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => buf.push(*v),
        Value::I8(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => buf.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => buf.push(u8::from(*v)),
        Value::String(s) => put_str(buf, s),
        Value::Array(a) => put_array(buf, a),
    }
}

fn put_array(buf: &mut Vec<u8>, a: &Array) {
    {
        {
            buf.extend_from_slice(&a.elem_type().id().to_le_bytes());
            buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
            match a.data() {
                ArrayData::U8(v) => buf.extend_from_slice(v),
                ArrayData::I8(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::U16(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::I16(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::U32(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::I32(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::U64(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::I64(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::F32(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::F64(v) => v
                    .iter()
                    .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
                ArrayData::Bool(v) => v.iter().for_each(|&x| buf.push(u8::from(x))),
                ArrayData::String(v) => v.iter().for_each(|x| put_str(buf, x)),
                ArrayData::Array(v) => v.iter().for_each(|x| put_array(buf, x)),
            }
        }
    }
}

fn pad(buf: &mut Vec<u8>, alignment: u64) {
    let len = (buf.len() as u64).next_multiple_of(alignment);
    buf.resize(len as usize, 0);
}
