//! Steps replayed from CUDA graphs give the same greedy tokens as eager execution (graphs that
//! silently replay stale arguments are how GLM-5 serving went wrong elsewhere), and decoding
//! really replays recordings. Eager is the reference: each op runs as launched.
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};

use glint_cuda::CudaBackend;
use glint_gguf::Gguf;
use glm5_model::Glm5;

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// 48 greedy tokens after a 14-token prompt, one decode step each.
fn greedy(be: CudaBackend, g: &Gguf) -> (Vec<u32>, usize) {
    let mut m = Glm5::load(g, be, 512).unwrap();
    let prompt: Vec<u32> = (1..15).collect();
    let mut next = argmax(&m.forward_last(&prompt, 0).unwrap());
    let mut out = vec![next];
    while out.len() < 48 {
        next = argmax(&m.forward_last(&[next], m.cache_len()).unwrap());
        out.push(next);
    }
    let recorded = m.model().backend().recorded_steps();
    (out, recorded)
}

#[test]
fn greedy_tokens_under_graphs_equal_eager() {
    let dir = match std::env::var_os("GLINT_REPO") {
        Some(root) => PathBuf::from(root).join("fixtures/glm5"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/glm5"),
    };
    for file in ["glm5-tiny-f32.gguf", "llamacpp/glm5-tiny-lc-q4_0.gguf"] {
        let g = Gguf::open(dir.join(file)).unwrap();
        let (eager, none) = greedy(CudaBackend::new(0).unwrap().with_graphs(false), &g);
        let (graphs, recorded) = greedy(CudaBackend::new(0).unwrap().with_graphs(true), &g);
        eprintln!("{file}: {recorded} recorded steps, tokens {graphs:?}");
        assert_eq!(none, 0);
        assert!(recorded >= 1, "{file}: decode never replayed a recording");
        assert_eq!(
            graphs, eager,
            "{file}: greedy tokens under CUDA graphs differ from eager"
        );
    }
}
