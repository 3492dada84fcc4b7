//! Run-time compilation of `kernels/*.cu` by NVRTC, for the GPU that was found, with a disk
//! cache so the second start compiles nothing.
//!
//! The sources are embedded in the binary (`include_str!`), so a `glint` binary carried to a GPU
//! machine needs no source tree. Each file gets `kernels/common.cuh` and, where the file asks for
//! them, tables generated from glint-quant (the IQ grids) prepended: one definition of every
//! table, shared with the CPU kernels.
//!
//! The cache key is a hash of everything that changes the output: the full source text, the
//! target architecture, NVRTC's version, the driver's version and the options. An entry is
//! written to a temporary name and renamed, so a killed process never leaves a torn PTX file.

use std::path::PathBuf;

use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use glint_core::CoreError;

/// One kernel family: a file of `kernels/` and the tables it needs ahead of its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Elementwise,
    Quant,
    Moe,
    Mla,
    Indexer,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Elementwise,
        Family::Quant,
        Family::Moe,
        Family::Mla,
        Family::Indexer,
    ];

    /// The file under `kernels/` (named in compile errors).
    pub fn file(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise.cu",
            Family::Quant => "quant.cu",
            Family::Moe => "moe.cu",
            Family::Mla => "mla.cu",
            Family::Indexer => "indexer.cu",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("../../../kernels/elementwise.cu"),
            Family::Quant => include_str!("../../../kernels/quant.cu"),
            Family::Moe => include_str!("../../../kernels/moe.cu"),
            Family::Mla => include_str!("../../../kernels/mla.cu"),
            Family::Indexer => include_str!("../../../kernels/indexer.cu"),
        }
    }

    /// The full text handed to NVRTC.
    pub fn source(self) -> String {
        let mut s = String::from(include_str!("../../../kernels/common.cuh"));
        if self == Family::Quant {
            s.push_str(&crate::quant_tables::cuda_tables());
        }
        s.push_str(&format!("\n#line 1 \"{}\"\n", self.file()));
        s.push_str(self.body());
        s
    }
}

/// The `--gpu-architecture` for a compute capability: Hopper's `a` variant (wgmma, TMA) on
/// 9.0, the plain virtual architecture elsewhere (kernels test `__CUDA_ARCH__` for sm_80+
/// paths).
pub fn arch_for(major: i32, minor: i32) -> String {
    if (major, minor) == (9, 0) {
        "compute_90a".to_string()
    } else {
        format!("compute_{major}{minor}")
    }
}

/// Where cached PTX lives: `GLINT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/glint/kernels`, else
/// `~/.cache/glint/kernels`. `None` (no cache) when none of them is set.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GLINT_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("glint/kernels"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/glint/kernels"))
}

/// Include paths for NVRTC: the fp16/bf16/fp8 headers live in the toolkit's include folder.
fn include_paths() -> Vec<String> {
    let mut v = Vec::new();
    for var in ["GLINT_CUDA_INCLUDE", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(p) = std::env::var_os(var) {
            let p = PathBuf::from(p);
            let inc = if var == "GLINT_CUDA_INCLUDE" {
                p
            } else {
                p.join("include")
            };
            v.push(inc.to_string_lossy().into_owned());
        }
    }
    v.push("/usr/local/cuda/include".to_string());
    v
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for &b in p.iter().chain(&(p.len() as u64).to_le_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

fn nvrtc_version() -> String {
    // SAFETY: plain out-parameter calls; the library was checked present by the caller.
    unsafe {
        let (mut major, mut minor) = (0, 0);
        let _ = cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor);
        format!("{major}.{minor}")
    }
}

/// Compiles `family` for `arch` (`driver` is the driver version, part of the cache key), or
/// reads it from the disk cache. Returns the PTX and whether it came from the cache.
pub fn compile(family: Family, arch: &str, driver: &str) -> Result<(Ptx, bool), CoreError> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CoreError::Device {
            op: "compiling CUDA kernels",
            msg: "libnvrtc was not found (install the CUDA toolkit's NVRTC, or put it on \
                  LD_LIBRARY_PATH)"
                .into(),
        });
    }
    let src = family.source();
    let includes = include_paths();
    let options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ];
    let nvrtc = nvrtc_version();
    let key = fnv1a(&[
        src.as_bytes(),
        arch.as_bytes(),
        driver.as_bytes(),
        nvrtc.as_bytes(),
        options.join(" ").as_bytes(),
    ]);
    let stem = family.file().trim_end_matches(".cu");
    let cached = cache_dir().map(|d| d.join(format!("{stem}-{arch}-{key:016x}.ptx")));
    if let Some(path) = &cached {
        if let Ok(text) = std::fs::read_to_string(path) {
            tracing::debug!(file = family.file(), path = %path.display(), "kernel cache hit");
            return Ok((Ptx::from_src(text), true));
        }
    }
    let t = std::time::Instant::now();
    let opts = CompileOptions {
        include_paths: includes,
        options,
        name: Some(family.file().to_string()),
        ..Default::default()
    };
    let ptx =
        cudarc::nvrtc::compile_ptx_with_opts(&src, opts).map_err(|e| compile_error(family, e))?;
    tracing::info!(
        file = family.file(),
        arch,
        ms = t.elapsed().as_millis() as u64,
        "compiled kernels"
    );
    if let Some(path) = &cached {
        store(path, &ptx.to_src());
    }
    Ok((ptx, false))
}

fn store(path: &std::path::Path, text: &str) {
    let Some(dir) = path.parent() else { return };
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let res = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, text))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(path = %path.display(), error = %e, "could not write the kernel cache");
    }
}

fn compile_error(family: Family, e: CompileError) -> CoreError {
    let msg = match e {
        CompileError::CompileError { log, .. } => format!(
            "NVRTC could not compile kernels/{}:\n{}",
            family.file(),
            log.to_string_lossy()
        ),
        other => format!("NVRTC failed on kernels/{}: {other:?}", family.file()),
    };
    CoreError::Device {
        op: "compiling CUDA kernels",
        msg,
    }
}
