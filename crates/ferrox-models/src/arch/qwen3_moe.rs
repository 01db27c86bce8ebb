//! Qwen3-MoE (`qwen3_moe`): Qwen3 attention (per-head QK norm) with a softmax-routed MoE (no
//! shared expert) on every layer except `mlp_only_layers`, sliding window on all layers when
//! enabled. Reference: transformers `modeling_qwen3_moe.py`; llama.cpp `LLM_ARCH_QWEN3MOE`.

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::gqa_moe_layers;
use super::{Architecture, GgufMeta, HfConfig};
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
    c.sliding_all(&mut cfg, c.bool("use_sliding_window")?.unwrap_or(false))?;
    let (experts, width) = (
        c.usize("num_experts")?
            .or(c.usize("num_local_experts")?)
            .ok_or_else(|| c.bad("num_experts", "is missing"))?,
        c.req("moe_intermediate_size")?,
    );
    let renormalise = c.bool("norm_topk_prob")?.unwrap_or(false);
    c.softmax_moe(&mut cfg, experts, width, renormalise)?;
    c.qwen_moe_layers(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    g.gqa_moe(
        "qwen3_moe",
        false,
        MoeDefaults::gating(GATING_SOFTMAX).renormalised(),
    )
}
