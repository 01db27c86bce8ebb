//! Qwen3-MoE (`qwen3_moe`): Qwen3 attention (per-head QK norm) with a softmax-routed MoE (no
//! shared expert) on every layer except `mlp_only_layers`, sliding window on all layers when
//! enabled. Reference: transformers `modeling_qwen3_moe.py`; llama.cpp `LLM_ARCH_QWEN3MOE`.

use super::common_qwen;
use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::gqa_moe_layers;
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new("qwen3_moe", gqa_moe_layers)
    .hf(&["qwen3_moe"], config_from_hf)
    .gguf(&["qwen3moe"], config_from_gguf);

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.qk_norm = true;
    let sliding = c.bool(&keys::USE_SLIDING_WINDOW)?.unwrap_or(false);
    c.sliding_all(&mut cfg, sliding)?;
    c.softmax_moe(&mut cfg, Some(&keys::EXPERT_FFN), false)?;
    common_qwen::hf_moe_layers(c, &mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    g.gqa_moe(
        arch,
        false,
        MoeDefaults::gating(GATING_SOFTMAX).renormalised(),
    )
}
