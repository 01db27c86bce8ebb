//! Qwen3 (dense): Llama layout plus per-head RMSNorm of q and k before RoPE, explicit head_dim.
//! Reference: transformers `modeling_qwen3.py`; llama.cpp `LLM_ARCH_QWEN3`.

use super::common_qwen;
use super::tables::llama_layers;
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new("qwen3", llama_layers)
    .hf(&["qwen3"], config_from_hf)
    .gguf(&["qwen3"], config_from_gguf);

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    common_qwen::hf_base(c, arch).map(with_qk_norm)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    g.base(arch, false).map(with_qk_norm)
}

/// Qwen3's one difference from Qwen2's layout (it has no q/k/v bias unless configured).
fn with_qk_norm(mut cfg: ModelConfig) -> ModelConfig {
    cfg.qk_norm = true;
    cfg
}
