//! Qwen2 / Qwen2.5: Llama layout plus q/k/v projection biases, optional sliding window on the
//! upper layers. Reference: transformers `modeling_qwen2.py`; llama.cpp `LLM_ARCH_QWEN2`.

use super::common_qwen;
use super::tables::llama_layers;
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture =
    Architecture::new("qwen2", config_from_hf, config_from_gguf, llama_layers)
        .hf(&["qwen2"])
        .gguf(&["qwen2"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("qwen2", false)?;
    common_qwen::hf_sliding(c, &mut cfg)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("qwen2", false)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}
