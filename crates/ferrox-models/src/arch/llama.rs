//! Llama (Llama 2/3.x): pre-norm GQA + SwiGLU, optional Llama-3 RoPE frequency scaling.
//! Reference: transformers `modeling_llama.py`; llama.cpp `LLM_ARCH_LLAMA` (its converter
//! permutes q/k rows, so GGUF Llama rotates adjacent pairs).

use super::tables::llama_layers;
use super::{keys, Architecture, Claim::Lacks, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture =
    Architecture::new("llama", config_from_hf, config_from_gguf, llama_layers)
        .hf(&["llama"])
        .gguf(&["llama"])
        // llama.cpp also stores Mixtral (experts) and Mistral (a window) as `llama`.
        .claims(&[Lacks(&keys::EXPERTS), Lacks(&keys::SLIDING_WINDOW)]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("llama", false)?;
    c.sliding_from_layer_types(&mut cfg)?;
    Ok(cfg)
}

/// Llama 3.x frequency scaling arrives as the `rope_freqs.weight` factors, which the builder
/// applies wherever a file has them.
fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    g.base("llama", true)
}
