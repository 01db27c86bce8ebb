//! The Qwen configuration conventions other families copy, in both formats: the
//! `use_sliding_window` switch, the dense/MoE layer rule (`mlp_only_layers`,
//! `decoder_sparse_step`) and the one shared expert behind a sigmoid gate. Used by `qwen2`,
//! `qwen3`, `qwen2_moe`, `qwen3_moe`, `qwen3_next` and `smollm3` (SmolLM3Config takes Qwen2's
//! sliding switch), none of which imports another.
//! Reference: transformers `configuration_qwen2.py`, `configuration_qwen2_moe.py`,
//! `configuration_qwen3_next.py`; llama.cpp `LLM_ARCH_QWEN2MOE` / `LLM_ARCH_QWEN3NEXT`
//! (`expert_shared_feed_forward_length`, `ffn_gate_inp_shexp`).

use super::keys;
use super::{GgufMeta, HfConfig};
use crate::config::{ModelConfig, MoeConfig};
use crate::weights::LoadError;
use serde_json::Value;

/// The base config (NeoX RoPE) with the `use_sliding_window` switch: when on, the layers
/// `layer_types` marks slide, else those from `max_window_layers` on; none otherwise.
pub fn hf_base(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    if c.bool(&keys::USE_SLIDING_WINDOW)?.unwrap_or(false) {
        let first = c.usize(&keys::MAX_WINDOW_LAYERS)?.unwrap_or(cfg.n_layers);
        c.sliding_by_types_or(&mut cfg, |l| l >= first)?;
    }
    Ok(cfg)
}

/// Dense FFN on the layers of `mlp_only_layers` and all but every `decoder_sparse_step`-th (or
/// as `mlp_layer_types` says).
pub fn hf_moe_layers(c: &HfConfig, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    let only: Vec<usize> = c
        .get(&keys::MLP_ONLY_LAYERS)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64().map(|v| v as usize))
                .collect()
        })
        .unwrap_or_default();
    let step = c.usize(&keys::DECODER_SPARSE_STEP)?.unwrap_or(1).max(1);
    let default = (0..cfg.n_layers)
        .map(|l| !only.contains(&l) && (l + 1) % step == 0)
        .collect();
    c.moe_layers(cfg, default)
}

/// Softmax routing, one shared expert behind a sigmoid gate when
/// `shared_expert_intermediate_size` is set, `norm_topk_prob` defaulting to `renormalise`, and
/// the layer rule of [`hf_moe_layers`].
pub fn hf_gated_shared_moe(
    c: &HfConfig,
    cfg: &mut ModelConfig,
    renormalise: bool,
) -> Result<(), LoadError> {
    use keys::*;
    let shared_ffn = c.usize(&SHARED_EXPERT_FFN)?.unwrap_or(0);
    cfg.moe = MoeConfig {
        n_experts: c.req(&EXPERTS)?,
        n_experts_active: c.req(&EXPERTS_USED)?,
        expert_ffn_dim: c.req(&EXPERT_FFN)?,
        n_shared_experts: usize::from(shared_ffn > 0),
        shared_ffn_dim: shared_ffn,
        shared_expert_gate: shared_ffn > 0,
        norm_topk_prob: c.bool(&EXPERT_WEIGHTS_NORM)?.unwrap_or(renormalise),
        ..MoeConfig::none(cfg.hidden_dim)
    };
    hf_moe_layers(c, cfg)
}

/// GGUF: one shared expert behind a sigmoid gate, as wide as
/// `expert_shared_feed_forward_length` (none when it is absent or 0).
pub fn gguf_gated_shared_expert(g: &GgufMeta, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    let shared = g.opt_usize(&keys::SHARED_EXPERT_FFN)?.unwrap_or(0);
    cfg.moe.n_shared_experts = usize::from(shared > 0);
    cfg.moe.shared_ffn_dim = shared;
    cfg.moe.shared_expert_gate = shared > 0;
    Ok(())
}
