//! Run-time compilation of `kernels/*.cu` by NVRTC, for the GPU that was found, with a disk
//! cache so the second start compiles nothing.
//!
//! The sources are embedded in the binary (`include_str!`), so a `glint` binary carried to a GPU
//! machine needs no source tree. Each file gets `kernels/common.cuh` and, where the file asks for
//! them, tables generated from glint-quant (the IQ grids) prepended: one definition of every
//! table, shared with the CPU kernels.
//!
//! quant.cu is most of the work (a template instance per weight type and kernel kind), so it is
//! compiled as [`QUANT_PARTS`] programs, each with every [`QUANT_PARTS`]-th kernel line
//! of the file (and all its other kernels, which are small), and [`compile_all`] runs the
//! programs of every family on as many threads as the machine has: a first start on a 16-core
//! GPU host compiles in a fraction of the time one program takes.
//!
//! For a GPU whose architecture NVRTC knows, the programs are compiled to machine code
//! (`sm_90a` cubins on Hopper), not PTX: PTX would leave the driver to translate it when the
//! modules load, one program after another, which took 65-80 s on a fresh H200 machine on top
//! of the compile. `GLINT_CUDA_JIT=1` asks for PTX anyway. `GLINT_NVRTC_LINEINFO=1` adds source
//! lines to the code (`--generate-line-info`) for Nsight Compute's per-line view.
//!
//! The cache key is a hash of everything that changes the output: the full source text, the
//! target architecture, NVRTC's version, the driver's version and the options. An entry is
//! written to a temporary name and renamed, so a killed process never leaves a torn file.

use std::path::PathBuf;

use std::ffi::CString;

use cudarc::nvrtc::{result, Ptx};
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

    /// Programs the family is compiled as (see the module doc).
    pub fn parts(self) -> usize {
        if self == Family::Quant {
            QUANT_PARTS
        } else {
            1
        }
    }

    /// The text NVRTC compiles for program `part` of [`Family::parts`]: [`Family::source`]
    /// with, for quant.cu, only the `QUANT_KERNELS(..)`, `STAGED_KERNEL(..)`, `MMQ_STAGED(..)`
    /// and `MMQ_K4(..)` lines whose index is `part` modulo the part count; the others become
    /// empty lines, so a line number in every part is the one in kernels/quant.cu (profilers' source views).
    pub fn part_source(self, part: usize) -> String {
        let n = self.parts();
        if n == 1 {
            return self.source();
        }
        let mut i = 0;
        self.source()
            .lines()
            .map(|l| {
                if !is_shared_line(l) {
                    return l;
                }
                i += 1;
                if (i - 1) % n == part {
                    l
                } else {
                    ""
                }
            })
            .flat_map(|l| [l, "\n"])
            .collect()
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

    /// The value of `#define name v` in this family's source: the host tests hold the host's
    /// shapes (grids, strides, shared memory) to the kernels' own.
    #[cfg(test)]
    pub(crate) fn define(self, name: &str) -> usize {
        let src = self.source();
        let line = src
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["#define", name]))
            .unwrap_or_else(|| panic!("{}: no #define {name}", self.file()));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
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

/// The machine-code architecture (`sm_..`) NVRTC builds cubins for on this GPU, or `None`
/// where NVRTC does not know the GPU (newer than the library) or `GLINT_CUDA_JIT=1` asks for
/// PTX and the driver's translation.
pub fn sass_arch_for(major: i32, minor: i32) -> Option<String> {
    if std::env::var("GLINT_CUDA_JIT").is_ok_and(|v| v == "1") {
        return None;
    }
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return None;
    }
    let cc = major * 10 + minor;
    // SAFETY: out-parameter calls sized by the first; the library was probed by the caller.
    let known = unsafe {
        let mut n = 0;
        if cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut n) != NVRTC_SUCCESS || n <= 0 {
            return None;
        }
        let mut archs = vec![0; n as usize];
        cudarc::nvrtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) == NVRTC_SUCCESS
            && archs.contains(&cc)
    };
    known.then(|| arch_for(major, minor).replace("compute_", "sm_"))
}

const NVRTC_SUCCESS: cudarc::nvrtc::sys::nvrtcResult =
    cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS;

/// Where cached kernels live: `GLINT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/glint/kernels`, else
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

/// A quant.cu line that [`Family::part_source`] gives to one program only: a type's
/// `QUANT_KERNELS(..)`, `STAGED_KERNEL(..)` or `MMQ_STAGED(..)` line, or an `MMQ_K4(..)`,
/// `MMQ_Q6K(..)` or `MMQ_FIT(..)` one.
fn is_shared_line(l: &str) -> bool {
    l.starts_with("QUANT_KERNELS(")
        || l.starts_with("STAGED_KERNEL(")
        || l.starts_with("MMQ_STAGED(")
        || l.starts_with("MMQ_K4(")
        || l.starts_with("MMQ_Q6K(")
        || l.starts_with("MMQ_FIT(")
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

/// Programs quant.cu is compiled as.
pub const QUANT_PARTS: usize = 7;

/// Every program of every family for `arch`, compiled (or read from the cache) on up to one
/// thread per core; the PTX of each family in part order.
pub fn compile_all(arch: &str, driver: &str) -> Result<Vec<(Family, Vec<Ptx>)>, CoreError> {
    let units: Vec<(Family, usize)> = Family::ALL
        .iter()
        .flat_map(|&f| (0..f.parts()).map(move |p| (f, p)))
        .collect();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(units.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: std::sync::Mutex<Vec<Option<Result<Ptx, CoreError>>>> =
        std::sync::Mutex::new(units.iter().map(|_| None).collect());
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(fam, part)) = units.get(i) else {
                    return;
                };
                let r = compile_part(fam, part, arch, driver).map(|(ptx, _)| ptx);
                done.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
            });
        }
    });
    let mut done = done
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter();
    Family::ALL
        .iter()
        .map(|&f| {
            let ptx = (0..f.parts())
                .map(|_| done.next().flatten().expect("every unit ran"))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((f, ptx))
        })
        .collect()
}

/// Every program of `family` for `arch`, one after the other: the PTX of each and whether it
/// came from the cache.
pub fn compile(family: Family, arch: &str, driver: &str) -> Result<Vec<(Ptx, bool)>, CoreError> {
    (0..family.parts())
        .map(|p| compile_part(family, p, arch, driver))
        .collect()
}

/// Compiles program `part` of `family` for `arch` (`driver` is the driver version, part of the
/// cache key), or reads it from the disk cache. Returns the module image (PTX, or a cubin for
/// an `sm_` arch) and whether it came from the cache.
fn compile_part(
    family: Family,
    part: usize,
    arch: &str,
    driver: &str,
) -> Result<(Ptx, bool), CoreError> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CoreError::Device {
            op: "compiling CUDA kernels",
            msg: "libnvrtc was not found (install the CUDA toolkit's NVRTC, or put it on \
                  LD_LIBRARY_PATH)"
                .into(),
        });
    }
    let src = family.part_source(part);
    let includes = include_paths();
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ];
    // Source lines in the machine code, for Nsight Compute's per-line stall view (no change to
    // the code itself).
    if std::env::var("GLINT_NVRTC_LINEINFO").is_ok_and(|v| v == "1") {
        options.push("--generate-line-info".to_string());
    }
    let nvrtc = nvrtc_version();
    let key = fnv1a(&[
        src.as_bytes(),
        arch.as_bytes(),
        driver.as_bytes(),
        nvrtc.as_bytes(),
        options.join(" ").as_bytes(),
    ]);
    let stem = match family.parts() {
        1 => family.file().trim_end_matches(".cu").to_string(),
        n => format!("{}.p{part}of{n}", family.file().trim_end_matches(".cu")),
    };
    let cubin = arch.starts_with("sm_");
    let ext = if cubin { "cubin" } else { "ptx" };
    let cached = cache_dir().map(|d| d.join(format!("{stem}-{arch}-{key:016x}.{ext}")));
    if let Some(path) = &cached {
        if let Ok(bytes) = std::fs::read(path) {
            tracing::debug!(file = family.file(), path = %path.display(), "kernel cache hit");
            return Ok((image(bytes, cubin), true));
        }
    }
    let t = std::time::Instant::now();
    let mut all_options = options;
    all_options.extend(includes.iter().map(|p| format!("--include-path={p}")));
    let bytes =
        nvrtc_build(&src, family.file(), &all_options, cubin).map_err(|msg| CoreError::Device {
            op: "compiling CUDA kernels",
            msg: format!("NVRTC could not compile kernels/{}:\n{msg}", family.file()),
        })?;
    tracing::info!(
        file = family.file(),
        part,
        arch,
        ms = t.elapsed().as_millis() as u64,
        "compiled kernels"
    );
    if let Some(path) = &cached {
        store(path, &bytes);
    }
    Ok((image(bytes, cubin), false))
}

/// What `load_module` takes: a cubin, or PTX text.
fn image(bytes: Vec<u8>, cubin: bool) -> Ptx {
    if cubin {
        Ptx::from_binary(bytes)
    } else {
        Ptx::from_src(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// One NVRTC program: its PTX text or (`cubin`) machine code, or the compiler's log.
fn nvrtc_build(src: &str, name: &str, options: &[String], cubin: bool) -> Result<Vec<u8>, String> {
    let src = CString::new(src).map_err(|_| "the source holds a NUL byte".to_string())?;
    let cname = CString::new(name).map_err(|_| "the name holds a NUL byte".to_string())?;
    let prog = result::create_program(&src, Some(&cname)).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` is a live program (created above, destroyed once below); the out buffers
    // are sized by the matching size queries.
    unsafe {
        let out = match result::compile_program(prog, options) {
            Err(e) => Err(match result::get_program_log(prog) {
                Ok(log) => {
                    let log: Vec<u8> = log.iter().map(|&c| c as u8).collect();
                    String::from_utf8_lossy(&log)
                        .trim_end_matches('\0')
                        .to_string()
                }
                Err(_) => format!("{e:?}"),
            }),
            Ok(()) if cubin => {
                use cudarc::nvrtc::sys::{nvrtcGetCUBIN, nvrtcGetCUBINSize};
                let mut size = 0usize;
                if nvrtcGetCUBINSize(prog, &mut size) != NVRTC_SUCCESS {
                    Err("nvrtcGetCUBINSize failed".to_string())
                } else {
                    let mut buf = vec![0u8; size];
                    if nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char)
                        != NVRTC_SUCCESS
                    {
                        Err("nvrtcGetCUBIN failed".to_string())
                    } else {
                        Ok(buf)
                    }
                }
            }
            Ok(()) => result::get_ptx(prog)
                .map(|p| {
                    let mut v: Vec<u8> = p.iter().map(|&c| c as u8).collect();
                    while v.last() == Some(&0) {
                        v.pop();
                    }
                    v
                })
                .map_err(|e| format!("{e:?}")),
        };
        let _ = result::destroy_program(prog);
        out
    }
}

fn store(path: &std::path::Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let res = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(path = %path.display(), error = %e, "could not write the kernel cache");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// quant.cu's programs together hold each kernel line (`QUANT_KERNELS(..)`, `STAGED_KERNEL(..)`,
    /// `MMQ_STAGED(..)`, `MMQ_K4(..)`) once, and everything
    /// else of the file in each.
    #[test]
    fn quant_parts_split_the_kernel_lines() {
        let full = Family::Quant.source();
        let is_k = |l: &&str| is_shared_line(l);
        let want: Vec<&str> = full.lines().filter(is_k).collect();
        assert!(want.len() >= 28, "{} QUANT_KERNELS lines", want.len());
        let rest: Vec<&str> = full.lines().filter(|l| !is_k(l)).collect();
        let mut got = Vec::new();
        for p in 0..Family::Quant.parts() {
            let part = Family::Quant.part_source(p);
            let lines: Vec<&str> = part.lines().collect();
            assert_eq!(
                lines.len(),
                full.lines().count(),
                "part {p}: line numbers kept"
            );
            // Each line is the file's own, or empty where another part's kernel line stood.
            for (l, f) in lines.iter().zip(full.lines()) {
                assert!(
                    *l == f || (l.is_empty() && is_k(&f)),
                    "part {p}: {l:?} for {f:?}"
                );
            }
            assert_eq!(
                lines
                    .iter()
                    .filter(|l| !is_k(l))
                    .filter(|l| !l.is_empty())
                    .copied()
                    .collect::<Vec<_>>(),
                rest.iter()
                    .filter(|l| !l.is_empty())
                    .copied()
                    .collect::<Vec<_>>(),
                "part {p}"
            );
            got.extend(lines.into_iter().filter(is_k).map(str::to_string));
        }
        let mut want: Vec<String> = want.into_iter().map(str::to_string).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        assert_eq!(Family::Mla.part_source(0), Family::Mla.source());
    }
}
