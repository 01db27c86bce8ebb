//! ferrox-core: quantized block formats (GGML/GGUF layouts), compute kernels, the KV cache and
//! threading. Nothing here knows a model family.

pub mod cache;
pub mod kernels;
pub mod matmul;
pub mod pool;
pub mod quant;
pub mod storage;
