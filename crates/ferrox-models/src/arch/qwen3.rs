//! Qwen3 (dense): Llama layout plus per-head RMSNorm of q and k before RoPE, explicit head_dim.
//! Reference: transformers `modeling_qwen3.py`; llama.cpp `LLM_ARCH_QWEN3`.

use super::tables::{DENSE_FFN, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("qwen3", config_from_hf, config_from_gguf, tensors)
        .hf(&["qwen3"])
        .gguf(&["qwen3"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("qwen3", false)?;
    cfg.qk_norm = true;
    c.qwen_sliding(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("qwen3", false)?;
    cfg.qk_norm = true;
    Ok(cfg)
}

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN].concat()
}
