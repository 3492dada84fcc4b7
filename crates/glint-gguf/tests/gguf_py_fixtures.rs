//! Reads the files gguf-py wrote (fixtures/make_gguf_fixtures.py) and compares everything with
//! gguf-py's own reading of them: metadata values bit for bit, key types, tensor names, types,
//! shapes, offsets, shard indices and bytes.

mod common;

use common::{fixture, hex_decode, json_bits_eq, read_json, value_json};
use glint_gguf::{GgmlType, Gguf};

fn check_against_gguf_py(model: &str, open_path: &str) {
    check_opened(model, &Gguf::open(fixture(open_path)).unwrap());
}

fn check_opened(model: &str, g: &Gguf) {
    let expected = read_json(&format!("{model}.expected.json"));
    let extra = read_json(&format!("{model}.extra.json"));

    assert_eq!(
        u64::from(g.version()),
        expected["version"].as_u64().unwrap()
    );

    let md = expected["metadata"].as_object().unwrap();
    let types = extra["types"].as_object().unwrap();
    let ours: Vec<&str> = g.metadata().iter().map(|(k, _)| k).collect();
    let theirs: Vec<&str> = md.keys().map(String::as_str).collect();
    assert_eq!(ours, theirs, "{model}: keys or key order differ");
    for (key, value) in g.metadata().iter() {
        let got = value_json(value);
        assert!(
            json_bits_eq(&got, &md[key]),
            "{model}: key {key}: ours {got}, gguf-py {}",
            md[key]
        );
        assert_eq!(
            value.type_name(),
            types[key].as_str().unwrap(),
            "{model}: type of {key}"
        );
    }

    let tensors = expected["tensors"].as_array().unwrap();
    let data = extra["tensor_data_hex"].as_object().unwrap();
    assert_eq!(g.tensors().len(), tensors.len());
    for (t, e) in g.tensors().iter().zip(tensors) {
        assert_eq!(t.name, e["name"].as_str().unwrap());
        assert_eq!(
            t.ty,
            GgmlType::from_name(e["type"].as_str().unwrap()).unwrap()
        );
        assert_eq!(t.ty.name(), e["type"].as_str().unwrap());
        let shape: Vec<u64> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, shape, "{model}: shape of {}", t.name);
        assert_eq!(
            t.offset,
            e["offset"].as_u64().unwrap(),
            "{model}: offset of {}",
            t.name
        );
        assert_eq!(
            t.shard as u64,
            e.get("shard").and_then(|s| s.as_u64()).unwrap_or(0)
        );
        let bytes = hex_decode(data[&t.name].as_str().unwrap());
        assert_eq!(g.tensor_data(t), &bytes[..], "{model}: bytes of {}", t.name);
        let (by_name, same) = g.tensor_bytes(&t.name).unwrap();
        assert_eq!((by_name, same), (t, &bytes[..]));
    }
    for (i, (off, align)) in extra["data_offset"]
        .as_array()
        .unwrap()
        .iter()
        .zip(extra["alignment"].as_array().unwrap())
        .enumerate()
    {
        let h = g.shard_header(i).unwrap();
        assert_eq!(
            h.data_offset,
            off.as_u64().unwrap(),
            "{model}: data offset of shard {i}"
        );
        assert_eq!(
            h.alignment,
            align.as_u64().unwrap(),
            "{model}: alignment of shard {i}"
        );
    }
}

#[test]
fn all_value_types_and_tensor_types_match_gguf_py() {
    check_against_gguf_py("all_types", "all_types.gguf");
}

#[test]
fn alignment_64_matches_gguf_py() {
    check_against_gguf_py("align64", "align64.gguf");
}

#[test]
fn version_2_matches_gguf_py() {
    check_against_gguf_py("v2", "v2.gguf");
    assert_eq!(Gguf::open(fixture("v2.gguf")).unwrap().version(), 2);
}

#[test]
fn split_model_opens_from_any_shard() {
    for shard in 1..=3 {
        check_against_gguf_py("split", &format!("split-{shard:05}-of-00003.gguf"));
        let g = Gguf::open(fixture(&format!("split-{shard:05}-of-00003.gguf"))).unwrap();
        let names: Vec<String> = g
            .shard_paths()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "split-00001-of-00003.gguf",
                "split-00002-of-00003.gguf",
                "split-00003-of-00003.gguf"
            ]
        );
    }
}

/// `prefetch` (what a CPU model load runs first) only reads the maps: afterwards every shard's
/// tensors still hold the bytes gguf-py wrote, and the metadata reads as gguf-py's.
#[test]
fn prefetched_model_still_matches_gguf_py() {
    for (model, path) in [
        ("all_types", "all_types.gguf"),
        ("split", "split-00002-of-00003.gguf"),
    ] {
        let g = Gguf::open(fixture(path)).unwrap();
        g.prefetch();
        check_opened(model, &g);
    }
}

#[test]
fn typed_accessors_on_gguf_py_metadata() {
    use glint_gguf::GgufError;
    let g = Gguf::open(fixture("all_types.gguf")).unwrap();
    let md = g.metadata();
    assert_eq!(md.architecture().unwrap(), "glm-dsa");
    assert_eq!(md.arch_key("block_count").unwrap(), "glm-dsa.block_count");
    assert_eq!(md.get_u32(&md.arch_key("block_count").unwrap()).unwrap(), 3);
    // Integer accessors take any integer type whose value fits.
    assert_eq!(md.get_u64("test.u8").unwrap(), 200);
    assert_eq!(md.get_i64("test.i64").unwrap(), i64::MIN);
    assert_eq!(md.get_u64("test.u64").unwrap(), u64::MAX);
    assert_eq!(md.get_i32("test.i16").unwrap(), -32768);
    assert!(
        matches!(md.get_u32("test.u64"), Err(GgufError::ValueOutOfRange { ref key, .. }) if key == "test.u64")
    );
    assert!(matches!(
        md.get_u32("test.i8"),
        Err(GgufError::ValueOutOfRange { .. })
    ));
    assert_eq!(md.get_f32("test.f32").unwrap(), 0.1f32);
    assert_eq!(md.get_f32("test.f64").unwrap(), 0.1f32);
    assert_eq!(md.get_f64("test.f64").unwrap(), 0.1f64);
    assert!(md.get_bool("test.bool_true").unwrap());
    assert_eq!(
        md.get_str("test.unicode").unwrap(),
        "Grüße, 世界 🌍 \"quoted\"\n\ttab"
    );
    assert_eq!(
        md.get_str("unicode.ключ.鍵.🔑").unwrap(),
        "value for a unicode key"
    );
    assert_eq!(
        md.get_str_array("test.arr.string").unwrap(),
        ["a", "", "Grüße", "世界", "🌍"]
    );
    assert_eq!(
        md.get_i32_array("test.arr.i32").unwrap(),
        [i32::MIN, -1, 0, i32::MAX]
    );
    assert_eq!(md.get_i32_array("test.arr.u8").unwrap(), [0, 1, 255]);
    assert!(matches!(
        md.get_i32_array("test.arr.u32"),
        Err(GgufError::ValueOutOfRange { .. })
    ));
    let f = md.get_f32_array("test.arr.f32").unwrap();
    assert_eq!(&f[..3], &[0.1, -2.5, 1e-45]);
    assert_eq!(md.get_array("test.arr.nested_i32").unwrap().len(), 3);
    match md.get_u32("test.string") {
        Err(GgufError::WrongType {
            key,
            expected,
            found,
        }) => {
            assert_eq!(
                (key.as_str(), expected, found.as_str()),
                ("test.string", "an integer", "STRING")
            );
        }
        other => panic!("{other:?}"),
    }
    match md.get_str_array("test.arr.nested_str") {
        Err(GgufError::WrongType { found, .. }) => assert_eq!(found, "[[STRING]]"),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(md.get_str("no.such.key"), Err(GgufError::MissingKey { ref key }) if key == "no.such.key")
    );
    assert!(matches!(
        g.tensor_bytes("nope"),
        Err(GgufError::MissingTensor { .. })
    ));
    let q4 = g.tensor("q4_k.1row").unwrap();
    assert_eq!(
        (q4.n_elements(), q4.row_len(), q4.n_rows(), q4.n_bytes),
        (256, 256, 1, 144)
    );
    let t4 = g.tensor("f32.4d").unwrap();
    assert_eq!((t4.n_elements(), t4.row_len(), t4.n_rows()), (24, 4, 6));
}
