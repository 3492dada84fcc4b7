// kernels/quant.cu
