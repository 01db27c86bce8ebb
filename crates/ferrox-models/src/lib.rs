//! ferrox-models: model files (GGUF, safetensors), tokenizers, chat templates, architectures,
//! the decoder, sampling, speculative decoding and generation.

pub mod arch;
pub mod blocks;
pub mod build;
pub mod config;
pub mod decoder;
pub mod engine;
pub mod generate;
pub mod gguf;
pub mod hub;
pub mod params;
pub mod perplexity;
pub mod sampling;
pub mod speculative;
pub mod template;
pub mod tokenizer;
pub mod weights;

pub use config::ModelConfig;
