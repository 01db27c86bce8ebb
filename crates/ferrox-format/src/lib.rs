//! ferrox-format: the model file formats, read without knowing any architecture. GGUF
//! (ggml `docs/gguf.md`) and safetensors (<https://github.com/huggingface/safetensors>, with
//! Hugging Face's `model.safetensors.index.json` sharding), both memory-mapped, tensors handed
//! out as zero-copy views.

pub mod gguf;
pub mod safetensors;

use std::path::{Path, PathBuf};

/// Why a model file (or a directory of them) was refused: it could not be read, or what it
/// holds is not what its format says.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
}

impl FileError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        FileError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn format(path: &Path, msg: impl Into<String>) -> Self {
        FileError::Format {
            path: path.to_path_buf(),
            msg: msg.into(),
        }
    }
}
