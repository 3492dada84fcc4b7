//! Key/value metadata with typed accessors.

use std::collections::HashMap;

use crate::error::{GgufError, Result};
use crate::value::{Array, ArrayData, Value};

/// Metadata in file order, with a name index. Keys are unique: the parser rejects duplicates
/// because llama.cpp and gguf-py disagree on which copy wins.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Builds metadata from pairs in order; fails on a repeated key.
    pub fn new(entries: Vec<(String, Value)>) -> Result<Metadata> {
        let mut index = HashMap::with_capacity(entries.len());
        for (i, (k, _)) in entries.iter().enumerate() {
            if index.insert(k.clone(), i).is_some() {
                return Err(GgufError::DuplicateKey { key: k.clone() });
            }
        }
        Ok(Metadata { entries, index })
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Entries in file order as a slice, e.g. to hand to [`crate::GgufWriter::new`].
    pub fn entries(&self) -> &[(String, Value)] {
        &self.entries
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    /// Converters treat every integer type alike because writers are inconsistent about widths
    /// (`split.tensors.count` is INT32 in gguf-py, block counts are UINT32 or UINT64).
    fn get_int<T: TryFrom<i128>>(&self, key: &str, target: &'static str) -> Result<T> {
        let v = self.require(key)?;
        let i = v.as_i128().ok_or_else(|| wrong(key, "an integer", v))?;
        T::try_from(i).map_err(|_| GgufError::ValueOutOfRange {
            key: key.to_string(),
            value: i.to_string(),
            target,
        })
    }

    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.get_int(key, "u32")
    }

    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.get_int(key, "u64")
    }

    pub fn get_i32(&self, key: &str) -> Result<i32> {
        self.get_int(key, "i32")
    }

    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.get_int(key, "i64")
    }

    /// Accepts F32 or F64 (narrowed), since converters write either for epsilons and scales.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| wrong(key, "FLOAT32 or FLOAT64", v))
    }

    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self.require(key)?;
        v.as_f64()
            .ok_or_else(|| wrong(key, "FLOAT32 or FLOAT64", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| wrong(key, "BOOL", v))
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| wrong(key, "STRING", v))
    }

    pub fn get_array(&self, key: &str) -> Result<&Array> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| wrong(key, "ARRAY", v))
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        let v = self.require(key)?;
        match v.as_array().map(Array::data) {
            Some(ArrayData::String(a)) => Ok(a.iter().map(String::as_str).collect()),
            _ => Err(wrong(key, "[STRING]", v)),
        }
    }

    /// Accepts FLOAT32 or FLOAT64 elements.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        let v = self.require(key)?;
        match v.as_array().map(Array::data) {
            Some(ArrayData::F32(a)) => Ok(a.clone()),
            Some(ArrayData::F64(a)) => Ok(a.iter().map(|&x| x as f32).collect()),
            _ => Err(wrong(key, "[FLOAT32]", v)),
        }
    }

    /// Accepts any integer element type whose values all fit in `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        let v = self.require(key)?;
        let wide: Vec<i128> = match v.as_array().map(Array::data) {
            Some(ArrayData::U8(a)) => a.iter().map(|&x| x.into()).collect(),
            Some(ArrayData::I8(a)) => a.iter().map(|&x| x.into()).collect(),
            Some(ArrayData::U16(a)) => a.iter().map(|&x| x.into()).collect(),
            Some(ArrayData::I16(a)) => a.iter().map(|&x| x.into()).collect(),
            Some(ArrayData::U32(a)) => a.iter().map(|&x| x.into()).collect(),
            Some(ArrayData::I32(a)) => return Ok(a.clone()),
            Some(ArrayData::U64(a)) => a.iter().map(|&x| x.into()).collect(),
            Some(ArrayData::I64(a)) => a.iter().map(|&x| x.into()).collect(),
            _ => return Err(wrong(key, "[INT32]", v)),
        };
        wide.into_iter()
            .map(|i| {
                i32::try_from(i).map_err(|_| GgufError::ValueOutOfRange {
                    key: key.to_string(),
                    value: i.to_string(),
                    target: "i32",
                })
            })
            .collect()
    }

    /// `general.architecture`, the prefix of every model-specific key.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// The full key for an architecture-specific setting: `arch_key("block_count")` is
    /// `"glm-dsa.block_count"` for a GLM-5 file.
    pub fn arch_key(&self, suffix: &str) -> Result<String> {
        Ok(format!("{}.{suffix}", self.architecture()?))
    }
}

fn wrong(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_string(),
        expected,
        found: found.type_name(),
    }
}
