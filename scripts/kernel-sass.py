#!/usr/bin/env python3
"""What ptxas made of a kernel, without a GPU: registers, spills and the SASS loops.

    python3 scripts/kernel-sass.py FAMILY KERNEL_REGEX [FUNCTION]

Compiles benches/cuda/src/FAMILY.cu (written by `cargo run --release -p glint-cuda --example
kernel_source -- benches/cuda/src`) with PyPI's NVRTC for sm_90a (the CI's copy in
target/nvrtc-13.0), prints the registers, shared memory and spills of every kernel whose name
matches KERNEL_REGEX, and for FUNCTION its SASS: instructions, tensor-core instructions, and
each loop (a backward branch) with its length and most frequent opcodes. A loop's length
times its trip count is what a warp issues there; how mmq_q4_k's copy loops were found
(docs/performance.md, call AE). cuobjdump and nvdisasm come from PyPI into target/sass-tools.
"""
import collections
import ctypes
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
NVRTC = ROOT / "target/nvrtc-13.0/nvidia/cu13"
TOOLS = ROOT / "target/sass-tools"
TOOL_WHEELS = ["nvidia-cuda-cuobjdump==13.5.37", "nvidia-cuda-nvdisasm==13.5.37"]


def ensure_tools():
    if not (NVRTC / "lib/libnvrtc.so.13").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(NVRTC.parent.parent.parent),
                        "nvidia-cuda-nvrtc==13.0.88", "nvidia-cuda-runtime==13.0.96"], check=True)
    bin_dir = TOOLS / "nvidia/cu13/bin"
    if not (bin_dir / "nvdisasm").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(TOOLS)]
                       + TOOL_WHEELS, check=True)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def compile_cubin(src):
    lib = ctypes.CDLL(str(NVRTC / "lib/libnvrtc.so.13"))
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src.read_bytes(), src.name.encode(), 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    opts = [b"--gpu-architecture=sm_90a", b"--std=c++17", b"-default-device",
            b"--include-path=" + str(NVRTC / "include").encode(), b"--ptxas-options=--verbose"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    if rc:
        sys.exit(log.value.decode(errors="replace"))
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, cubin)
    return cubin.raw, log.value.decode(errors="replace")


def resources(log, pattern):
    cur = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = m.group(1)
        if cur and re.search(pattern, cur):
            if "registers" in line:
                print(f"{cur}: {re.search(r'Used .*', line).group(0)}")
            elif "spill" in line and " 0 bytes spill stores" not in line:
                print(f"{cur}: {line.strip()}")


def loops(bin_dir, cubin_path, fn):
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    sass = subprocess.run([str(bin_dir / "cuobjdump"), "-sass", "-fun", fn, str(cubin_path)],
                          capture_output=True, text=True, env=env, check=True).stdout
    ins = [(int(m.group(1), 16), m.group(2)) for m in
           (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", l) for l in sass.splitlines()) if m]
    if not ins:
        sys.exit(f"{fn}: no SASS (is the name a kernel of this family?)")
    op = lambda t: (t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0]
    mma = sum(op(t) in ("IMMA", "HMMA", "HGMMA", "IGMMA") for _, t in ins)
    print(f"\n{fn}: {len(ins)} instructions, {mma} tensor-core")
    for addr, t in ins:
        m = re.search(r"BRA.*0x([0-9a-f]+)\s*$", t)
        if m and int(m.group(1), 16) < addr:
            lo = int(m.group(1), 16)
            body = [op(x) for a, x in ins if lo <= a <= addr]
            top = ", ".join(f"{k} {v}" for k, v in collections.Counter(body).most_common(6))
            print(f"  loop {lo:#06x}..{addr:#06x}: {len(body)} instructions ({top})")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    lib_dir = str(NVRTC / "lib")
    if lib_dir not in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        # NVRTC opens its builtins library by name: run again with its folder on the path.
        env = dict(os.environ, LD_LIBRARY_PATH=f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    family, pattern = sys.argv[1], sys.argv[2]
    src = ROOT / f"benches/cuda/src/{family}.cu"
    if not src.exists():
        sys.exit(f"{src} missing: run the kernel_source example first")
    bin_dir = ensure_tools()
    cubin, log = compile_cubin(src)
    resources(log, pattern)
    if len(sys.argv) > 3:
        path = ROOT / f"target/sass-tools/{family}.cubin"
        path.write_bytes(cubin)
        loops(bin_dir, path, sys.argv[3])


if __name__ == "__main__":
    main()
