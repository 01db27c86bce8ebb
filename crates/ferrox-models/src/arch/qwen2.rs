//! Qwen2 / Qwen2.5: Llama layout plus q/k/v projection biases, optional sliding window on the
//! upper layers. Reference: transformers `modeling_qwen2.py`; llama.cpp `LLM_ARCH_QWEN2`.

use super::tables::llama_layers;
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture =
    Architecture::new("qwen2", config_from_hf, config_from_gguf, llama_layers)
        .hf(&["qwen2"])
        .gguf(&["qwen2"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = qwen_from_hf(c, "qwen2")?;
    cfg.qkv_bias = true;
    Ok(cfg)
}

/// The Qwen dense families' `config.json`: Llama's fields plus Qwen's sliding-window rule.
pub fn qwen_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    c.qwen_sliding(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("qwen2", false)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}
