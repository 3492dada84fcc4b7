// kernels/moe.cu
