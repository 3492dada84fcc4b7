#!/usr/bin/env python3
"""Compile one small kernel family (kernels/elementwise.cu, moe.cu, mla.cu or indexer.cu) with
NVRTC for compute_90a and compute_80 in seconds, where glint-cuda's compile test takes minutes
for all of them (quant.cu needs the Rust-generated tables: use that test for it). The text is
what crates/glint-cuda/src/compile.rs hands NVRTC: common.cuh, a #line, the family's file.

    nv=target/nvrtc-13.0   # PyPI nvidia-cuda-nvrtc / -runtime, as .ci/run installs them
    LD_LIBRARY_PATH=$nv/nvidia/cu13/lib python3 scripts/nvrtc_family.py $nv kernels/indexer.cu
"""
import ctypes
import sys


def main() -> int:
    nv, path = sys.argv[1], sys.argv[2]
    lib = ctypes.CDLL(nv + "/nvidia/cu13/lib/libnvrtc.so.13")
    src = open("kernels/common.cuh").read() + '\n#line 1 "%s"\n' % path + open(path).read()
    failed = 0
    for arch in ["compute_90a", "compute_80"]:
        prog = ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), path.encode(), 0, None, None):
            raise SystemExit("nvrtcCreateProgram failed")
        opts = [f"--gpu-architecture={arch}", "--std=c++17", "-default-device",
                f"--include-path={nv}/nvidia/cu13/include"]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        print(f"{path} {arch}: {'ok' if rc == 0 else 'FAILED'}")
        if log.value.strip():
            print(log.value.decode())
        failed |= rc != 0
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
