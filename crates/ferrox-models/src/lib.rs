//! ferrox-models: model files (GGUF, safetensors), tokenizers, chat templates, architectures,
//! the decoder, sampling, speculative decoding and generation.

pub mod config;
pub mod gguf;
pub mod hub;
pub mod tokenizer;

pub use config::ModelConfig;
