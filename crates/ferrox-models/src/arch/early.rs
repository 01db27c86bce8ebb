//! The counts both config readers ([`super::hf`], [`super::gguf`]) check as soon as they read
//! them, before `crate::validate` sees the whole config: the ones something is allocated from
//! or divided by while the config is built. Each gives the problem; the reader names its key.

use super::keys::MAX_LAYERS;

/// The layer count: the per-layer lists are allocated from it.
pub fn layer_count(n: usize) -> Result<usize, String> {
    match (1..=MAX_LAYERS).contains(&n) {
        true => Ok(n),
        false => Err(format!("= {n} is outside 1..={MAX_LAYERS}")),
    }
}

/// The head count: the default head width divides by it.
pub fn head_count(n: usize) -> Result<usize, String> {
    match n {
        0 => Err("is 0".into()),
        n => Ok(n),
    }
}
