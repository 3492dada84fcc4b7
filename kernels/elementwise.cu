// kernels/elementwise.cu
