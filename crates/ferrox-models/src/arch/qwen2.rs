//! Qwen2 / Qwen2.5: Llama layout plus q/k/v projection biases, optional sliding window on the
//! upper layers. Reference: transformers `modeling_qwen2.py`; llama.cpp `LLM_ARCH_QWEN2`.

use super::common_qwen;
use super::tables::llama_layers;
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new("qwen2", llama_layers)
    .hf(&["qwen2"], config_from_hf)
    .gguf(&["qwen2"], config_from_gguf);

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_qwen::hf_base(c, arch)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, false)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}
