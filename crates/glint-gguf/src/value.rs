//! Metadata values as GGUF stores them.

use std::fmt;

/// The on-disk type tag of a metadata value (the `gguf_type` enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type for an on-disk tag, or `None` for a tag GGUF does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The tag written to disk.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// gguf-py's `GGUFValueType` name (`UINT8`, `FLOAT32`, ...), so our dumps read like `gguf_dump`.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }

    /// Bytes a scalar of this type takes on disk; `None` for strings and arrays.
    pub fn scalar_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes one value of this type can occupy on disk. The parser multiplies a
    /// declared element count by this before allocating, so a forged count cannot make it
    /// reserve more memory than the file could possibly describe.
    pub(crate) fn min_encoded_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            other => other.scalar_size().unwrap_or(1) as u64,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The elements of an array, stored as a vector of their own type: one byte per `UINT8`
/// rather than a 32-byte [`Value`] each, so a file of large arrays takes about its own size in
/// memory (a 50 MB array of bytes was 1.6 GB as `Vec<Value>`).
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayData {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    /// Arrays of arrays: each inner array has its own element type.
    Array(Vec<Array>),
}

/// Applies `$body` to the vector inside an [`ArrayData`], whatever its element type.
macro_rules! each_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            ArrayData::U8($v) => $body,
            ArrayData::I8($v) => $body,
            ArrayData::U16($v) => $body,
            ArrayData::I16($v) => $body,
            ArrayData::U32($v) => $body,
            ArrayData::I32($v) => $body,
            ArrayData::U64($v) => $body,
            ArrayData::I64($v) => $body,
            ArrayData::F32($v) => $body,
            ArrayData::F64($v) => $body,
            ArrayData::Bool($v) => $body,
            ArrayData::String($v) => $body,
            ArrayData::Array($v) => $body,
        }
    };
}

impl ArrayData {
    /// An empty vector for elements of type `t`, with room for `n`.
    pub fn with_capacity(t: ValueType, n: usize) -> ArrayData {
        match t {
            ValueType::U8 => ArrayData::U8(Vec::with_capacity(n)),
            ValueType::I8 => ArrayData::I8(Vec::with_capacity(n)),
            ValueType::U16 => ArrayData::U16(Vec::with_capacity(n)),
            ValueType::I16 => ArrayData::I16(Vec::with_capacity(n)),
            ValueType::U32 => ArrayData::U32(Vec::with_capacity(n)),
            ValueType::I32 => ArrayData::I32(Vec::with_capacity(n)),
            ValueType::U64 => ArrayData::U64(Vec::with_capacity(n)),
            ValueType::I64 => ArrayData::I64(Vec::with_capacity(n)),
            ValueType::F32 => ArrayData::F32(Vec::with_capacity(n)),
            ValueType::F64 => ArrayData::F64(Vec::with_capacity(n)),
            ValueType::Bool => ArrayData::Bool(Vec::with_capacity(n)),
            ValueType::String => ArrayData::String(Vec::with_capacity(n)),
            ValueType::Array => ArrayData::Array(Vec::with_capacity(n)),
        }
    }

    /// Appends `v`, or hands it back if its type is not the element type.
    pub fn push(&mut self, v: Value) -> std::result::Result<(), Value> {
        match (self, v) {
            (ArrayData::U8(a), Value::U8(x)) => a.push(x),
            (ArrayData::I8(a), Value::I8(x)) => a.push(x),
            (ArrayData::U16(a), Value::U16(x)) => a.push(x),
            (ArrayData::I16(a), Value::I16(x)) => a.push(x),
            (ArrayData::U32(a), Value::U32(x)) => a.push(x),
            (ArrayData::I32(a), Value::I32(x)) => a.push(x),
            (ArrayData::U64(a), Value::U64(x)) => a.push(x),
            (ArrayData::I64(a), Value::I64(x)) => a.push(x),
            (ArrayData::F32(a), Value::F32(x)) => a.push(x),
            (ArrayData::F64(a), Value::F64(x)) => a.push(x),
            (ArrayData::Bool(a), Value::Bool(x)) => a.push(x),
            (ArrayData::String(a), Value::String(x)) => a.push(x),
            (ArrayData::Array(a), Value::Array(x)) => a.push(x),
            (_, v) => return Err(v),
        }
        Ok(())
    }
}

/// A homogeneous array. The element type is kept even for empty arrays because GGUF records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    data: ArrayData,
}

impl Array {
    pub fn new(data: ArrayData) -> Array {
        Array { data }
    }

    /// An array of `elem_type` from loose values; `None` if any value has another type.
    pub fn from_values(elem_type: ValueType, values: Vec<Value>) -> Option<Array> {
        let mut data = ArrayData::with_capacity(elem_type, values.len());
        for v in values {
            data.push(v).ok()?;
        }
        Some(Array { data })
    }

    pub fn elem_type(&self) -> ValueType {
        use ValueType as T;
        match &self.data {
            ArrayData::U8(_) => T::U8,
            ArrayData::I8(_) => T::I8,
            ArrayData::U16(_) => T::U16,
            ArrayData::I16(_) => T::I16,
            ArrayData::U32(_) => T::U32,
            ArrayData::I32(_) => T::I32,
            ArrayData::U64(_) => T::U64,
            ArrayData::I64(_) => T::I64,
            ArrayData::F32(_) => T::F32,
            ArrayData::F64(_) => T::F64,
            ArrayData::Bool(_) => T::Bool,
            ArrayData::String(_) => T::String,
            ArrayData::Array(_) => T::Array,
        }
    }

    /// The elements, typed.
    pub fn data(&self) -> &ArrayData {
        &self.data
    }

    pub fn len(&self) -> usize {
        each_data!(&self.data, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a [`Value`] (strings and inner arrays are cloned).
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match &self.data {
            ArrayData::U8(a) => Value::U8(*a.get(i)?),
            ArrayData::I8(a) => Value::I8(*a.get(i)?),
            ArrayData::U16(a) => Value::U16(*a.get(i)?),
            ArrayData::I16(a) => Value::I16(*a.get(i)?),
            ArrayData::U32(a) => Value::U32(*a.get(i)?),
            ArrayData::I32(a) => Value::I32(*a.get(i)?),
            ArrayData::U64(a) => Value::U64(*a.get(i)?),
            ArrayData::I64(a) => Value::I64(*a.get(i)?),
            ArrayData::F32(a) => Value::F32(*a.get(i)?),
            ArrayData::F64(a) => Value::F64(*a.get(i)?),
            ArrayData::Bool(a) => Value::Bool(*a.get(i)?),
            ArrayData::String(a) => Value::String(a.get(i)?.clone()),
            ArrayData::Array(a) => Value::Array(a.get(i)?.clone()),
        })
    }

    /// The elements as [`Value`]s, one at a time (for generic code; typed code matches
    /// [`Array::data`] and avoids the clones).
    pub fn iter(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Type description such as `[STRING]` or `[[INT32]]`, following `gguf_dump`'s notation.
    pub fn type_name(&self) -> String {
        match &self.data {
            ArrayData::Array(a) => match a.first() {
                Some(inner) => format!("[{}]", inner.type_name()),
                None => "[ARRAY]".to_string(),
            },
            _ => format!("[{}]", self.elem_type().name()),
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// Type description used in error messages and dumps: `UINT32`, `[STRING]`, `[[INT32]]`.
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(a) => a.type_name(),
            other => other.value_type().name().to_string(),
        }
    }

    /// Any integer value widened to `i128`, which holds every GGUF integer type exactly, so
    /// range checks for narrower targets are one comparison. `None` for non-integers.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// F32 or F64 as `f64` (exact for F32); `None` otherwise.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl From<Array> for Value {
    fn from(a: Array) -> Self {
        Value::Array(a)
    }
}
impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}
macro_rules! value_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value { fn from(x: $t) -> Self { Value::$v(x) } }
    )*};
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool);

/// Prints scalars plainly, strings quoted with escapes, and arrays in full; callers that want
/// shortened arrays (dumps of 150k-token vocabularies) truncate themselves.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            // Debug switches to exponent notation for tiny and huge magnitudes (1e-45, not 45
            // digits) and keeps the shortest round-tripping digits.
            Value::F32(v) => write!(f, "{v:?}"),
            Value::F64(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
        }
    }
}
