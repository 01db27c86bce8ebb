//! ferrox-format: the model file formats, read without knowing any architecture. GGUF
//! (ggml `docs/gguf.md`) and safetensors (<https://github.com/huggingface/safetensors>, with
//! Hugging Face's `model.safetensors.index.json` sharding), both memory-mapped, tensors handed
//! out as zero-copy views.

pub mod gguf;
pub mod safetensors;
