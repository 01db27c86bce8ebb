//! Qwen3-MoE (`qwen3_moe`): Qwen3 attention (per-head QK norm) with a softmax-routed MoE (no
//! shared expert) on every layer except `mlp_only_layers`, sliding window on all layers when
//! enabled. Reference: transformers `modeling_qwen3_moe.py`; llama.cpp `LLM_ARCH_QWEN3MOE`.

use super::common_qwen;
use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::gqa_moe_layers;
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new(
    "qwen3_moe",
    config_from_hf,
    config_from_gguf,
    gqa_moe_layers,
)
.hf(&["qwen3_moe"])
.gguf(&["qwen3moe"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("qwen3_moe", false)?;
    cfg.qk_norm = true;
    let sliding = c.bool(&keys::USE_SLIDING_WINDOW)?.unwrap_or(false);
    c.sliding_all(&mut cfg, sliding)?;
    let (experts, width) = (c.req(&keys::EXPERTS)?, c.req(&keys::EXPERT_FFN)?);
    let renormalise = c.bool(&keys::EXPERT_WEIGHTS_NORM)?.unwrap_or(false);
    c.softmax_moe(&mut cfg, experts, width, renormalise)?;
    common_qwen::hf_moe_layers(c, &mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    g.gqa_moe(
        "qwen3_moe",
        false,
        MoeDefaults::gating(GATING_SOFTMAX).renormalised(),
    )
}
