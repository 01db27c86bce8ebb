//! Gemma 2: Gemma's sandwich norms (`1 + w` in Hugging Face checkpoints), embeddings ×
//! √hidden, GeGLU, attention-logit and final-logit soft-caps, sliding-window and global layers
//! alternating (even layers slide), softmax scale `query_pre_attn_scalar^-0.5`, tied embeddings.
//! Reference: transformers `modeling_gemma2.py`; llama.cpp `LLM_ARCH_GEMMA2` (SWA pattern 2,
//! soft-cap keys, 27B query scale `(hidden / heads)^-0.5`).

use super::common_gemma;
use super::tables::{ATTN_NORM, DENSE_FFN, GEMMA_NORMS, STD_ATTN};
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("gemma2", tensors)
    .hf(&["gemma2"], config_from_hf)
    .gguf(&["gemma2"], config_from_gguf);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [&[ATTN_NORM][..], GEMMA_NORMS, STD_ATTN, DENSE_FFN].concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_gemma::from_hf(c, arch)?;
    c.sliding_by_types_or(&mut cfg, |l| l % 2 == 0)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_gemma::from_gguf(g, arch, 4608)?;
    cfg.sliding_window = g.opt_usize(&keys::SLIDING_WINDOW)?.filter(|&w| w > 0);
    if cfg.sliding_window.is_some() {
        cfg.set_sliding_layers(|l| l % 2 == 0);
    }
    Ok(cfg)
}
