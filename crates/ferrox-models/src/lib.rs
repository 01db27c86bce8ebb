//! ferrox-models: model files (GGUF, safetensors), tokenizers, chat templates, architectures,
//! the decoder, sampling, speculative decoding and generation.

pub mod blocks;
pub mod config;
pub mod gguf;
pub mod hf_config;
pub mod hub;
pub mod tokenizer;

pub use config::ModelConfig;
