//! Llama (Llama 2/3.x): pre-norm GQA + SwiGLU, optional Llama-3 RoPE frequency scaling.
//! Reference: transformers `modeling_llama.py`; llama.cpp `LLM_ARCH_LLAMA` (its converter
//! permutes q/k rows, so GGUF Llama rotates adjacent pairs).

use super::tables::{DENSE_FFN, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("llama", config_from_hf, config_from_gguf, tensors)
        .hf(&["llama"])
        .gguf(&["llama"])
        // llama.cpp stores Mixtral as `llama` with experts.
        .claims(|g| g.opt_usize("expert_count").unwrap_or(0) == 0);

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

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN].concat()
}
