//! GGML block quantization formats.
