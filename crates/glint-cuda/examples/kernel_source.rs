//! Writes the exact source NVRTC compiles for each kernel family (common.cuh, the generated
//! quant tables, the family's file) into a directory, for tools that build the kernels
//! outside glint: benches/cuda/kernel_bench.sh compiles them with nvcc to time them alone.
//!
//! `cargo run -p glint-cuda --example kernel_source -- DIR`

use glint_cuda::compile::Family;

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: kernel_source DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    for fam in Family::ALL {
        let path = dir.join(fam.file());
        std::fs::write(&path, fam.source())?;
        println!("{}", path.display());
    }
    Ok(())
}
