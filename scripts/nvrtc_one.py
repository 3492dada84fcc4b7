import ctypes, sys, os
nv = os.environ['NVD']
lib = ctypes.CDLL(nv + '/nvidia/cu13/lib/libnvrtc.so.13')
src = open('kernels/common.cuh').read() + '\n#line 1 "%s"\n' % sys.argv[1] + open(sys.argv[1]).read()
for arch in ['compute_90a', 'compute_80']:
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), sys.argv[1].encode(), 0, None, None) == 0
    opts = [f'--gpu-architecture={arch}', '--std=c++17', '-default-device', '--include-path=' + nv + '/nvidia/cu13/include']
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, buf)
    print(arch, 'rc', r, buf.value.decode()[:3000])
