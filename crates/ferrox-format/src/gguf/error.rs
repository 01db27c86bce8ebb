//! Typed GGUF errors: each names the section, key or tensor and the byte offset (ggml
//! `docs/gguf.md` for the sections).

use ferrox_core::quant::QuantError;
use std::path::PathBuf;
use thiserror::Error;

/// Why a GGUF file (or split set) was refused. Every variant names where: the section, the
/// metadata key or tensor, and the byte offset when there is one.
#[derive(Debug, Error)]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic {found:?} at offset 0, expected \"GGUF\"")]
    BadMagic { found: String },
    #[error("unsupported GGUF version {0} (versions 2 and 3 are read; a big-endian file also lands here)")]
    UnsupportedVersion(u32),
    #[error("{section}, offset {offset}: {problem}")]
    Malformed {
        section: String,
        offset: u64,
        problem: Problem,
    },
    #[error("metadata key {key:?}: {problem}")]
    BadMetadata { key: String, problem: String },
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    #[error("tensor {name:?}: {problem}")]
    BadTensor {
        name: String,
        problem: TensorProblem,
    },
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("no tensor named {0:?}")]
    MissingTensor(String),
    #[error("split set {path}: {problem}")]
    Split { path: PathBuf, problem: String },
}

/// A structural problem while reading one section.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Problem {
    #[error("needs {need} bytes but only {left} remain")]
    Truncated { need: u64, left: u64 },
    #[error("{what} {count} cannot fit in the {left} bytes that remain")]
    TooLarge {
        what: &'static str,
        count: u64,
        left: u64,
    },
    #[error("unknown metadata value type {0}")]
    UnknownValueType(u32),
    #[error("arrays nested deeper than {0} levels")]
    TooDeep(usize),
    #[error("{0} dimensions (ggml allows at most 4)")]
    TooManyDims(u32),
}

/// What is wrong with one tensor.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TensorProblem {
    #[error("unknown ggml type id {0}")]
    UnknownType(u32),
    #[error("dimension {index} is {value}, beyond i64")]
    DimTooLarge { index: usize, value: u64 },
    #[error("dimensions {0:?} overflow the element count")]
    DimsOverflow(Vec<u64>),
    #[error("rows of {cols} elements are not a whole number of {ty} blocks of {block}")]
    NotBlockMultiple {
        ty: &'static str,
        cols: u64,
        block: usize,
    },
    #[error("byte size of {0:?} overflows")]
    SizeOverflow(Vec<u64>),
    #[error("data offset {offset} is not a multiple of the alignment {align}")]
    Misaligned { offset: u64, align: u64 },
    #[error("data at relative offset {offset} ({n_bytes} bytes, data section starts at {data_start}) lies past the end of the {file_len}-byte file")]
    OutOfFile {
        offset: u64,
        n_bytes: u64,
        data_start: u64,
        file_len: u64,
    },
    #[error("shape {0:?} is not a matrix")]
    NotMatrix(Vec<u64>),
    #[error(transparent)]
    Quant(#[from] QuantError),
}
