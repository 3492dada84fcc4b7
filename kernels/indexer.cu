// kernels/indexer.cu
