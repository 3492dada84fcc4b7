// kernels/mla.cu
