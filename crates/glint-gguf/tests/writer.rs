//! The writer: byte-for-byte equality with gguf-py's writer on the fixtures, random round trips
//! through the reader, and its error cases.

mod common;

use common::fixture;
use glint_gguf::{
    write_gguf, Array, GgmlType, Gguf, GgufError, GgufWriter, TensorSpec, Value, ValueType,
};
use proptest::prelude::*;

/// Re-writes a file we read with our writer; gguf-py wrote the original.
fn rewrite(path: &str) -> (Vec<u8>, Vec<u8>) {
    let original = std::fs::read(fixture(path)).unwrap();
    let h = Gguf::parse_bytes(&original).unwrap();
    let specs: Vec<TensorSpec> = h
        .tensors
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            ty: t.ty,
            dims: t.dims.clone(),
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), h.metadata.entries(), &specs).unwrap();
    for t in &h.tensors {
        let start = (h.data_offset + t.offset) as usize;
        w.write_tensor(&t.name, &original[start..start + t.n_bytes as usize])
            .unwrap();
    }
    (original, w.finish().unwrap())
}

#[test]
fn output_is_byte_identical_to_gguf_py() {
    for f in [
        "all_types.gguf",
        "align64.gguf",
        "split-00001-of-00003.gguf",
        "split-00002-of-00003.gguf",
        "split-00003-of-00003.gguf",
    ] {
        let (original, ours) = rewrite(f);
        assert!(
            original == ours,
            "{f}: our writer's bytes differ from gguf-py's"
        );
    }
    // v2.gguf is gguf-py's v3 output with the version patched to 2; we always write v3.
    let (mut original, ours) = rewrite("v2.gguf");
    original[4..8].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(original, ours);
}

#[test]
fn write_gguf_then_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.gguf");
    let md = vec![
        ("general.architecture".to_string(), Value::from("glm-dsa")),
        ("general.alignment".to_string(), Value::U32(16)),
        ("glm-dsa.block_count".to_string(), Value::U32(78)),
    ];
    let a: Vec<u8> = (0..12).collect();
    let b: Vec<u8> = (0..34).map(|i| i * 3).collect();
    let tensors = [
        (
            TensorSpec {
                name: "a".into(),
                ty: GgmlType::F16,
                dims: vec![3, 2],
            },
            &a[..],
        ),
        (
            TensorSpec {
                name: "b".into(),
                ty: GgmlType::Q8_0,
                dims: vec![32],
            },
            &b[..],
        ),
    ];
    write_gguf(&path, &md, &tensors).unwrap();
    let g = Gguf::open(&path).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.metadata().entries(), &md[..]);
    assert_eq!(g.tensor_bytes("a").unwrap().1, &a[..]);
    assert_eq!(g.tensor_bytes("b").unwrap().1, &b[..]);
    assert_eq!(g.tensor("b").unwrap().offset, 16);
}

fn spec(name: &str, ty: GgmlType, dims: &[u64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        ty,
        dims: dims.to_vec(),
    }
}

#[test]
fn writer_errors() {
    let two = [
        spec("a", GgmlType::F32, &[2]),
        spec("b", GgmlType::F32, &[1]),
    ];
    let mut w = GgufWriter::new(Vec::new(), &[], &two).unwrap();
    assert!(matches!(
        w.write_tensor("b", &[0; 4]),
        Err(GgufError::TensorOrder { .. })
    ));
    assert!(matches!(
        w.write_tensor("a", &[0; 4]),
        Err(GgufError::TensorSize {
            expected: 8,
            found: 4,
            ..
        })
    ));
    w.write_tensor("a", &[0; 8]).unwrap();
    assert!(
        matches!(w.finish(), Err(GgufError::MissingTensors { missing: 1, ref first }) if first == "b")
    );

    let mut w = GgufWriter::new(Vec::new(), &[], &two[..1]).unwrap();
    w.write_tensor("a", &[0; 8]).unwrap();
    assert!(matches!(
        w.write_tensor("b", &[0; 4]),
        Err(GgufError::ExtraTensor { .. })
    ));

    let new = |md: &[(String, Value)], t: &[TensorSpec]| {
        GgufWriter::new(Vec::new(), md, t).err().unwrap()
    };
    let kv = |k: &str, v: Value| (k.to_string(), v);
    assert!(matches!(
        new(&[kv("k", 1u8.into()), kv("k", 2u8.into())], &[]),
        GgufError::DuplicateKey { .. }
    ));
    // A mixed array cannot even be built, so no writer can emit one.
    assert!(Array::from_values(ValueType::U8, vec![1u8.into(), 2u16.into()]).is_none());
    assert!(matches!(
        new(&[kv("general.alignment", 24u32.into())], &[]),
        GgufError::InvalidAlignment { value: 24 }
    ));
    assert!(matches!(
        new(&[kv("general.alignment", 32u64.into())], &[]),
        GgufError::WrongType { .. }
    ));
    assert!(matches!(
        new(&[], &[spec("q", GgmlType::Q8_0, &[16])]),
        GgufError::RowNotBlockAligned { .. }
    ));
    assert!(matches!(
        new(&[], &[spec("q", GgmlType::F32, &[1, 1, 1, 1, 1])]),
        GgufError::TooManyDims { .. }
    ));
    assert!(matches!(
        new(
            &[],
            &[
                spec("x", GgmlType::F32, &[1]),
                spec("x", GgmlType::F32, &[1])
            ]
        ),
        GgufError::DuplicateTensor { .. }
    ));
}

// ---------------------------------------------------------------- random round trips

const SCALAR_TYPES: [ValueType; 12] = [
    ValueType::U8,
    ValueType::I8,
    ValueType::U16,
    ValueType::I16,
    ValueType::U32,
    ValueType::I32,
    ValueType::U64,
    ValueType::I64,
    ValueType::F32,
    ValueType::F64,
    ValueType::Bool,
    ValueType::String,
];

fn scalar_of(ty: ValueType) -> BoxedStrategy<Value> {
    match ty {
        ValueType::U8 => any::<u8>().prop_map(Value::U8).boxed(),
        ValueType::I8 => any::<i8>().prop_map(Value::I8).boxed(),
        ValueType::U16 => any::<u16>().prop_map(Value::U16).boxed(),
        ValueType::I16 => any::<i16>().prop_map(Value::I16).boxed(),
        ValueType::U32 => any::<u32>().prop_map(Value::U32).boxed(),
        ValueType::I32 => any::<i32>().prop_map(Value::I32).boxed(),
        ValueType::U64 => any::<u64>().prop_map(Value::U64).boxed(),
        ValueType::I64 => any::<i64>().prop_map(Value::I64).boxed(),
        // Raw bits, so NaN payloads, infinities, -0.0 and subnormals all occur.
        ValueType::F32 => any::<u32>()
            .prop_map(|b| Value::F32(f32::from_bits(b)))
            .boxed(),
        ValueType::F64 => any::<u64>()
            .prop_map(|b| Value::F64(f64::from_bits(b)))
            .boxed(),
        ValueType::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        _ => ".{0,12}".prop_map(Value::String).boxed(),
    }
}

/// Homogeneous arrays of scalars, and arrays of arrays (whose inner arrays may differ in type).
fn array() -> impl Strategy<Value = Value> {
    let leaf = proptest::sample::select(SCALAR_TYPES.to_vec()).prop_flat_map(|ty| {
        proptest::collection::vec(scalar_of(ty), 0..8).prop_map(move |values| {
            Value::Array(Array::from_values(ty, values).expect("homogeneous"))
        })
    });
    leaf.prop_recursive(3, 32, 4, |inner| {
        proptest::collection::vec(inner, 0..4).prop_map(|values| {
            Value::Array(Array::from_values(ValueType::Array, values).expect("arrays"))
        })
    })
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        proptest::sample::select(SCALAR_TYPES.to_vec()).prop_flat_map(scalar_of),
        array()
    ]
}

/// Equality that treats two floats as equal when their bits are.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => {
            x.elem_type() == y.elem_type()
                && x.len() == y.len()
                && x.iter().zip(y.iter()).all(|(p, q)| same(&p, &q))
        }
        _ => a == b,
    }
}

fn tensor() -> impl Strategy<Value = (GgmlType, Vec<u64>)> {
    (
        proptest::sample::select(GgmlType::ALL.to_vec()),
        1u64..3,
        proptest::collection::vec(0u64..4, 0..4),
    )
        .prop_map(|(ty, blocks, rest)| {
            let mut dims = vec![blocks * ty.block_size() as u64];
            dims.extend(rest);
            (ty, dims)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_files_round_trip(
        md in proptest::collection::btree_map(".{1,16}", value(), 0..8),
        align_pow in proptest::option::of(0u32..9),
        tensors in proptest::collection::vec(tensor(), 0..6),
        seed in any::<u64>(),
    ) {
        let mut metadata: Vec<(String, Value)> = md.into_iter().filter(|(k, _)| k != "general.alignment").collect();
        if let Some(p) = align_pow {
            metadata.push(("general.alignment".into(), Value::U32(1 << p)));
        }
        let specs: Vec<TensorSpec> = tensors.iter().enumerate().map(|(i, (ty, dims))| spec(&format!("t{i}"), *ty, dims)).collect();
        let mut state = seed;
        let data: Vec<Vec<u8>> = specs.iter().map(|s| {
            let n = s.ty.row_bytes(s.dims[0]).unwrap() * s.dims[1..].iter().product::<u64>();
            (0..n).map(|_| { state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (state >> 56) as u8 }).collect()
        }).collect();

        let mut w = GgufWriter::new(Vec::new(), &metadata, &specs).unwrap();
        for (s, d) in specs.iter().zip(&data) {
            w.write_tensor(&s.name, d).unwrap();
        }
        let bytes = w.finish().unwrap();
        let h = Gguf::parse_bytes(&bytes).unwrap();
        prop_assert_eq!(h.version, 3);
        prop_assert_eq!(h.alignment, align_pow.map_or(32, |p| 1u64 << p));
        prop_assert_eq!(h.metadata.len(), metadata.len());
        for ((k1, v1), (k2, v2)) in h.metadata.entries().iter().zip(&metadata) {
            prop_assert_eq!(k1, k2);
            prop_assert!(same(v1, v2), "{} differs: {:?} vs {:?}", k1, v1, v2);
        }
        prop_assert_eq!(h.tensors.len(), specs.len());
        for ((t, s), d) in h.tensors.iter().zip(&specs).zip(&data) {
            prop_assert_eq!((&t.name, t.ty, &t.dims), (&s.name, s.ty, &s.dims));
            prop_assert_eq!(t.offset % h.alignment, 0);
            let start = (h.data_offset + t.offset) as usize;
            prop_assert_eq!(&bytes[start..start + d.len()], &d[..]);
        }
    }
}
