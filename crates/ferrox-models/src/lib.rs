//! ferrox-models: architectures over the files `ferrox-format` reads (weight sources, tensor
//! tables, configurations), the decoder, sampling, speculative decoding and generation. Token
//! ids ([`TokenId`]), tokenizers and chat templates come from `ferrox-tokenizer`.

pub mod arch;
pub mod blocks;
pub mod build;
pub mod config;
pub mod decoder;
pub mod distributed;
pub mod embedding;
pub mod encoder;
pub mod engine;
pub mod generate;
pub mod layer;
pub mod load;
pub mod mtp;
pub mod params;
pub mod perplexity;
pub mod sampling;
pub mod speculative;
pub mod state;
pub mod structured;
pub mod tree;
pub mod validate;
pub mod weights;

pub use config::ModelConfig;
pub use ferrox_tokenizer::TokenId;
