//! The two types every part of the tokenizer shares: token ids and the error of building or
//! using a tokenizer. A leaf, so the vocabulary, the models and the decoders use it without
//! going through the crate root.

/// A token id: an index into the vocabulary, and the row of the model's embedding table. The
/// one type for token ids from the tokenizer through the decoder to the server.
pub type TokenId = usize;

/// Errors building or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("unknown tokenizer model {0:?} (supported: llama, gpt2)")]
    UnknownModel(String),
    #[error("unknown pre-tokenizer type {0:?}")]
    UnknownPre(String),
    #[error("tokenizer metadata is missing {0}")]
    Missing(String),
    #[error("duplicate token {text:?} in vocabulary at ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: TokenId,
        second: TokenId,
    },
    #[error("invalid tokenizer metadata: {0}")]
    Invalid(String),
    #[error("{0}")]
    Hf(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("GGUF: {0}")]
    Gguf(String),
    /// The vocabulary lacks the fill-in-the-middle tokens named (prefix, suffix, middle).
    #[error("fill-in-the-middle is not supported by this model: its vocabulary has no {0} token")]
    NoFim(String),
}
