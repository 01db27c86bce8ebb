//! ferrox-models: model files (GGUF, safetensors), tokenizers, chat templates, architectures,
//! the decoder, sampling, speculative decoding and generation.

pub mod arch;
pub mod batch;
pub mod blocks;
pub mod config;
pub mod decoder;
pub mod generate;
pub mod hf_config;
pub mod params;
pub mod perplexity;
pub mod sampling;
pub mod speculative;
pub mod weights;

pub use config::ModelConfig;
