//! Corrupt and hostile inputs: each must produce its specific error, never a panic or a huge
//! allocation. Files are built byte by byte with `common::Raw` (not with the crate's writer) or
//! cut from gguf-py's fixtures.

mod common;

use common::{fixture, read_json, Raw};
use glint_gguf::{Gguf, GgufError};

fn parse(raw: &Raw) -> GgufError {
    match Gguf::parse_bytes(&raw.0) {
        Ok(h) => panic!("parsed a malformed file: {h:?}"),
        Err(e) => e,
    }
}

/// Start of the data section and end of the last tensor's bytes in one shard, from gguf-py's
/// reading of the fixture.
fn data_end(model: &str, shard: usize) -> (u64, u64) {
    let expected = read_json(&format!("{model}.expected.json"));
    let extra = read_json(&format!("{model}.extra.json"));
    let data_offset = extra["data_offset"][shard].as_u64().unwrap();
    let end = expected["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("shard").map_or(0, |s| s.as_u64().unwrap()) == shard as u64)
        .map(|t| {
            let hex = extra["tensor_data_hex"][t["name"].as_str().unwrap()]
                .as_str()
                .unwrap();
            data_offset + t["offset"].as_u64().unwrap() + hex.len() as u64 / 2
        })
        .max()
        .unwrap();
    (data_offset, end)
}

#[test]
fn truncated_at_every_offset() {
    let files = [
        ("align64", 0, "align64.gguf"),
        ("v2", 0, "v2.gguf"),
        ("all_types", 0, "all_types.gguf"),
        ("split", 1, "split-00002-of-00003.gguf"),
    ];
    for (model, shard, file) in files {
        let bytes = std::fs::read(fixture(file)).unwrap();
        let (data_offset, end) = data_end(model, shard);
        for len in 0..bytes.len() {
            let r = Gguf::parse_bytes(&bytes[..len]);
            let len = len as u64;
            match r {
                Ok(_) => assert!(len >= end, "{file}: cut at {len} < data end {end} parsed"),
                Err(GgufError::TensorOutOfBounds { .. }) => assert!(len < end),
                Err(GgufError::Truncated { .. } | GgufError::LengthTooLarge { .. }) => {
                    assert!(len < data_offset, "{file}: cut at {len} is past the header")
                }
                Err(e) => panic!("{file}: cut at {len}: unexpected {e}"),
            }
            if len >= data_offset && len < end {
                assert!(matches!(r, Err(GgufError::TensorOutOfBounds { .. })));
            }
        }
    }
}

#[test]
fn truncated_files_on_disk_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("align64.gguf")).unwrap();
    for len in [0usize, 3, 4, 7, 23, 100] {
        let path = dir.path().join(format!("cut{len}.gguf"));
        std::fs::write(&path, &bytes[..len]).unwrap();
        let err = Gguf::open(&path).err().unwrap();
        assert!(err.to_string().contains(&format!("cut{len}.gguf")), "{err}");
        assert!(
            matches!(
                err.root(),
                GgufError::Truncated { .. } | GgufError::LengthTooLarge { .. }
            ),
            "{err}"
        );
    }
}

#[test]
fn bad_magic() {
    let e = parse(&Raw::default().bytes(b"GGUG").u32(3).u64(0).u64(0));
    assert!(matches!(e, GgufError::BadMagic { ref found } if found == b"GGUG"));
    let e = parse(&Raw::default().bytes(b"\x89PNG\r\n\x1a\n"));
    assert!(matches!(e, GgufError::BadMagic { .. }));
}

#[test]
fn version_1_and_unknown_versions() {
    for v in [0u32, 1, 4, 0xdead_beef] {
        let e = parse(&Raw::header(v, 0, 0));
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version } if version == v),
            "{e}"
        );
    }
    // A GGUF v1 header has 32-bit counts; it must be refused on the version, not misparsed.
    let v1 = Raw::default().bytes(b"GGUF").u32(1).u32(0).u32(0);
    assert!(matches!(
        parse(&v1),
        GgufError::UnsupportedVersion { version: 1 }
    ));
}

#[test]
fn big_endian_file_from_gguf_py() {
    let err = Gguf::open(fixture("big_endian.gguf")).err().unwrap();
    assert!(
        matches!(err.root(), GgufError::BigEndian { version: 3 }),
        "{err}"
    );
    assert!(matches!(
        parse(&Raw::default().bytes(b"GGUF").bytes(&2u32.to_be_bytes())),
        GgufError::BigEndian { version: 2 }
    ));
}

#[test]
fn huge_lengths_are_refused_before_allocating() {
    let too_large = |r: Raw| assert!(matches!(parse(&r), GgufError::LengthTooLarge { .. }));
    too_large(Raw::header(3, 0, u64::MAX));
    too_large(Raw::header(3, 0, 1 << 40).zeros(64));
    too_large(Raw::header(3, u64::MAX, 0));
    too_large(Raw::header(3, 1 << 40, 0).zeros(64));
    // key length
    too_large(Raw::header(3, 0, 1).u64(u64::MAX).zeros(16));
    too_large(Raw::header(3, 0, 1).u64(1 << 62).zeros(16));
    // string value length
    too_large(Raw::header(3, 0, 1).str("k").u32(8).u64(u64::MAX - 3));
    // array lengths: element count times the smallest element size must fit in the file
    too_large(Raw::header(3, 0, 1).str("k").u32(9).u32(0).u64(u64::MAX));
    too_large(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(10)
            .u64(1 << 61)
            .zeros(100),
    );
    too_large(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(8)
            .u64(1 << 40)
            .zeros(100),
    );
    too_large(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(9)
            .u64(1 << 40)
            .zeros(100),
    );
    // A u8 array declaring exactly one byte more than is left.
    too_large(Raw::header(3, 0, 1).str("k").u32(9).u32(0).u64(5).zeros(4));
    // tensor name length
    too_large(Raw::header(3, 1, 0).u64(1 << 50).zeros(64));
}

#[test]
fn too_many_dims() {
    let e = parse(&Raw::header(3, 1, 0).str("t").u32(5).zeros(64));
    assert!(matches!(e, GgufError::TooManyDims { ref tensor, n_dims: 5 } if tensor == "t"));
    let e = parse(&Raw::header(3, 1, 0).str("t").u32(u32::MAX).zeros(64));
    assert!(matches!(e, GgufError::TooManyDims { .. }));
}

#[test]
fn unknown_tensor_type_names_tensor_and_id() {
    for id in [4u32, 31, 42, 1000] {
        let e = parse(
            &Raw::header(3, 1, 0)
                .tensor("blk.0.w", &[32], id, 0)
                .pad(32)
                .zeros(64),
        );
        assert!(
            matches!(e, GgufError::UnknownTensorType { ref tensor, id: got } if tensor == "blk.0.w" && got == id),
            "{e}"
        );
    }
}

#[test]
fn tensor_data_out_of_bounds() {
    // F32 [4] = 16 bytes, but only 8 follow the header.
    let e = parse(
        &Raw::header(3, 1, 0)
            .tensor("t", &[4], 0, 0)
            .pad(32)
            .zeros(8),
    );
    assert!(matches!(e, GgufError::TensorOutOfBounds { ref tensor, .. } if tensor == "t"));
    // Offset so large that data_offset + offset overflows.
    let e = parse(
        &Raw::header(3, 1, 0)
            .tensor("t", &[4], 0, u64::MAX - 31)
            .pad(32)
            .zeros(64),
    );
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }));
    // Second tensor past the end.
    let e = parse(
        &Raw::header(3, 2, 0)
            .tensor("a", &[8], 0, 0)
            .tensor("b", &[8], 0, 64)
            .pad(32)
            .zeros(64),
    );
    assert!(matches!(e, GgufError::TensorOutOfBounds { ref tensor, .. } if tensor == "b"));
}

#[test]
fn overlapping_tensors() {
    // Two F32 [16] tensors (64 bytes each) at offsets 0 and 32.
    let r = Raw::header(3, 2, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[16], 0, 32)
        .pad(32)
        .zeros(128);
    let e = parse(&r);
    assert!(
        matches!(e, GgufError::OverlappingTensors { ref first, ref second } if first == "a" && second == "b"),
        "{e}"
    );
    // Same offset, declared in the other order.
    let r = Raw::header(3, 2, 0)
        .tensor("x", &[16], 0, 64)
        .tensor("y", &[8], 0, 64)
        .pad(32)
        .zeros(128);
    assert!(matches!(parse(&r), GgufError::OverlappingTensors { .. }));
    // Adjacent is fine, and so is an empty tensor sharing an offset.
    let r = Raw::header(3, 3, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[16], 0, 64)
        .tensor("z", &[0], 0, 64)
        .pad(32)
        .zeros(128);
    Gguf::parse_bytes(&r.0).unwrap();
}

#[test]
fn unaligned_tensor_offset() {
    let r = Raw::header(3, 1, 0)
        .tensor("t", &[1], 0, 4)
        .pad(32)
        .zeros(64);
    assert!(matches!(
        parse(&r),
        GgufError::UnalignedTensorOffset {
            offset: 4,
            alignment: 32,
            ..
        }
    ));
    // With general.alignment = 8 the same offset 8 is fine, 4 is not.
    let r = Raw::header(3, 1, 1)
        .kv_u32("general.alignment", 8)
        .tensor("t", &[1], 0, 8)
        .pad(8)
        .zeros(16);
    assert_eq!(Gguf::parse_bytes(&r.0).unwrap().alignment, 8);
    let r = Raw::header(3, 1, 1)
        .kv_u32("general.alignment", 8)
        .tensor("t", &[1], 0, 4)
        .pad(8)
        .zeros(16);
    assert!(matches!(
        parse(&r),
        GgufError::UnalignedTensorOffset {
            offset: 4,
            alignment: 8,
            ..
        }
    ));
}

#[test]
fn invalid_alignment() {
    for a in [0u32, 3, 48] {
        let r = Raw::header(3, 0, 1).kv_u32("general.alignment", a);
        assert!(
            matches!(parse(&r), GgufError::InvalidAlignment { value } if value == u64::from(a))
        );
    }
    let r = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(10)
        .u64(64);
    assert!(
        matches!(parse(&r), GgufError::WrongType { ref key, .. } if key == "general.alignment")
    );
}

#[test]
fn row_not_multiple_of_block_size() {
    // Q8_0 (id 8) has 32-element blocks; Q4_K (12) has 256.
    let r = Raw::header(3, 1, 0)
        .tensor("q", &[16, 2], 8, 0)
        .pad(32)
        .zeros(128);
    let e = parse(&r);
    assert!(
        matches!(e, GgufError::RowNotBlockAligned { ref tensor, row_len: 16, block_size: 32, .. } if tensor == "q"),
        "{e}"
    );
    let r = Raw::header(3, 1, 0)
        .tensor("k", &[512 + 32], 12, 0)
        .pad(32)
        .zeros(1024);
    assert!(matches!(
        parse(&r),
        GgufError::RowNotBlockAligned {
            block_size: 256,
            ..
        }
    ));
}

#[test]
fn dimension_overflow() {
    let r = Raw::header(3, 1, 0)
        .tensor("t", &[1 << 32, 1 << 32], 0, 0)
        .pad(32);
    assert!(matches!(parse(&r), GgufError::DimsOverflow { .. }));
    let r = Raw::header(3, 1, 0)
        .tensor("t", &[1 << 62, 2], 1, 0)
        .pad(32);
    assert!(matches!(parse(&r), GgufError::DimsOverflow { .. }));
    // Found by fuzzing: a zero dimension made the element count 0 while n_rows overflowed.
    let r = Raw::header(3, 1, 0)
        .tensor("t", &[0, 1 << 40, 1 << 40], 0, 0)
        .pad(32);
    assert!(matches!(parse(&r), GgufError::DimsOverflow { .. }));
}

#[test]
fn duplicate_keys_and_tensors() {
    let r = Raw::header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    assert!(matches!(parse(&r), GgufError::DuplicateKey { ref key } if key == "a.b"));
    let r = Raw::header(3, 2, 0)
        .tensor("w", &[8], 0, 0)
        .tensor("w", &[8], 0, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(parse(&r), GgufError::DuplicateTensor { ref name } if name == "w"));
}

#[test]
fn bad_values() {
    let r = Raw::header(3, 0, 1).str("k").u32(13).u32(0);
    assert!(
        matches!(parse(&r), GgufError::UnknownValueType { ref key, id: 13, offset: 33 } if key == "k")
    );
    let r = Raw::header(3, 0, 1).str("k").u32(9).u32(77).u64(0);
    assert!(matches!(
        parse(&r),
        GgufError::UnknownValueType { id: 77, .. }
    ));
    let r = Raw::header(3, 0, 1).str("k").u32(7).u8(2);
    assert!(matches!(parse(&r), GgufError::InvalidBool { value: 2, .. }));
    let r = Raw::header(3, 0, 1)
        .u64(2)
        .bytes(&[0xff, 0xfe])
        .u32(4)
        .u32(0);
    assert!(matches!(
        parse(&r),
        GgufError::InvalidUtf8 { offset: 32, .. }
    ));
    let r = Raw::header(3, 0, 1).str("k").u32(8).u64(1).u8(0x80);
    assert!(matches!(parse(&r), GgufError::InvalidUtf8 { .. }));
}

#[test]
fn nesting_depth_is_bounded() {
    let nested = |depth: usize| {
        let mut r = Raw::header(3, 0, 1).str("deep").u32(9);
        for _ in 1..depth {
            r = r.u32(9).u64(1);
        }
        r.u32(4).u64(0)
    };
    let ok = Gguf::parse_bytes(&nested(glint_gguf::MAX_ARRAY_DEPTH).0).unwrap();
    assert_eq!(
        ok.metadata
            .get("deep")
            .unwrap()
            .type_name()
            .matches('[')
            .count(),
        glint_gguf::MAX_ARRAY_DEPTH
    );
    let e = parse(&nested(glint_gguf::MAX_ARRAY_DEPTH + 1));
    assert!(matches!(e, GgufError::NestingTooDeep { ref key, .. } if key == "deep"));
    // Far deeper than any stack could take if the parser recursed without a bound.
    assert!(matches!(
        parse(&nested(100_000)),
        GgufError::NestingTooDeep { .. }
    ));
}

#[test]
fn unusual_but_valid_files() {
    // No tensors, no padding after the header.
    let h = Gguf::parse_bytes(&Raw::header(3, 0, 0).0).unwrap();
    assert!(h.tensors.is_empty() && h.metadata.is_empty());
    // Empty array, zero-dimensional tensor (one element), zero-sized tensor.
    let r = Raw::header(3, 2, 1)
        .str("empty")
        .u32(9)
        .u32(8)
        .u64(0)
        .tensor("scalar", &[], 0, 0)
        .tensor("nothing", &[0, 7], 8, 32)
        .pad(32)
        .bytes(&1.5f32.to_le_bytes())
        .zeros(28);
    let h = Gguf::parse_bytes(&r.0).unwrap();
    assert_eq!(h.metadata.get_array("empty").unwrap().len(), 0);
    assert_eq!(
        (
            h.tensors[0].n_elements(),
            h.tensors[0].n_bytes,
            h.tensors[0].row_len()
        ),
        (1, 4, 1)
    );
    assert_eq!((h.tensors[1].n_elements(), h.tensors[1].n_bytes), (0, 0));
}
