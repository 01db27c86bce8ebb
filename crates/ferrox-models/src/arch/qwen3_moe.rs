//! Qwen3-MoE (`qwen3_moe`): Qwen3 attention (per-head QK norm) with a softmax-routed MoE (no
//! shared expert) on every layer except `mlp_only_layers`, sliding window on all layers when
//! enabled. Reference: transformers `modeling_qwen3_moe.py`; llama.cpp `LLM_ARCH_QWEN3MOE`.

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{DENSE_FFN, MOE_FFN, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::{ModelConfig, MoeConfig};
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("qwen3_moe", config_from_hf, config_from_gguf, tensors)
        .hf(&["qwen3_moe"])
        .gguf(&["qwen3moe"]);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN, MOE_FFN].concat()
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("qwen3_moe", false)?;
    cfg.qk_norm = true;
    c.sliding_all(&mut cfg, c.bool("use_sliding_window").unwrap_or(false));
    cfg.moe = MoeConfig {
        n_experts: c
            .usize("num_experts")
            .or(c.usize("num_local_experts"))
            .ok_or_else(|| LoadError::Config("config.json: missing \"num_experts\"".into()))?,
        n_experts_active: c.req("num_experts_per_tok")?,
        expert_ffn_dim: c.req("moe_intermediate_size")?,
        norm_topk_prob: c.bool("norm_topk_prob").unwrap_or(false),
        ..MoeConfig::none(cfg.hidden_dim)
    };
    c.qwen_moe_layers(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("qwen3_moe", false)?;
    g.sliding_all(&mut cfg);
    g.optional_attention_tensors(&mut cfg);
    let defaults = MoeDefaults {
        gating: GATING_SOFTMAX,
        always_norm: true,
        ffn_is_expert_ffn: false,
    };
    g.moe(&mut cfg, defaults)?;
    Ok(cfg)
}
