//! Feeds arbitrary bytes to the GGUF header parser. Besides "no panic, no huge allocation", a
//! header that parses must survive a write/re-read round trip through `GgufWriter` unchanged,
//! which also exercises the writer on shapes and values no hand-written test thought of.
#![no_main]

use glint_gguf::{Gguf, GgufWriter, TensorSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = Gguf::parse_bytes(data) else {
        return;
    };
    let specs: Vec<TensorSpec> = header
        .tensors
        .iter()
        .map(|t| TensorSpec { name: t.name.clone(), ty: t.ty, dims: t.dims.clone() })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), header.metadata.entries(), &specs)
        .expect("a header the reader accepts must be writable");
    for t in &header.tensors {
        let start = (header.data_offset + t.offset) as usize;
        w.write_tensor(&t.name, &data[start..start + t.n_bytes as usize]).expect("write tensor");
    }
    let bytes = w.finish().expect("finish");
    let again = Gguf::parse_bytes(&bytes).expect("re-read of written file");
    // NaN != NaN, so compare metadata through its bit-exact debug form.
    assert_eq!(format!("{:?}", again.metadata.entries()), format!("{:?}", header.metadata.entries()));
    assert_eq!(again.tensors.len(), header.tensors.len());
    for (a, b) in again.tensors.iter().zip(&header.tensors) {
        assert_eq!((&a.name, a.ty, &a.dims, a.n_bytes), (&b.name, b.ty, &b.dims, b.n_bytes));
        let sa = (again.data_offset + a.offset) as usize;
        let sb = (header.data_offset + b.offset) as usize;
        assert_eq!(&bytes[sa..sa + a.n_bytes as usize], &data[sb..sb + b.n_bytes as usize]);
    }
});
