//! Gemma 3 (text): embeddings × √hidden, four RMSNorms per layer (before and after attention and
//! FFN), per-head QK RMSNorm, GeGLU (GELU-tanh) FFN, interleaved sliding-window and global
//! layers with their own RoPE (local base 10k, global base 1e6 with optional linear scaling),
//! softmax scale `query_pre_attn_scalar^-0.5`, tied embeddings.
//! Reference: transformers `modeling_gemma3.py`; llama.cpp `LLM_ARCH_GEMMA3`.
//! HF checkpoints store norms as `w` in `x * (1 + w)`; GGUF stores `1 + w`.

use super::{build_dense, dense_config_from_gguf, GgufMeta, ATTN, MLP, QK_NORM};
use crate::config::{Activation, Arch, AttnKind, ModelConfig, RopeScaling};
use crate::decoder::Decoder;
use crate::weights::{req, Dim::*, LoadError, TensorSpec, WeightSource};

/// Gemma's four norms: after attention, before and after the FFN (the one before attention
/// is the shared `attn_norm`).
const GEMMA_NORMS: &[TensorSpec] = &[
    req(
        "blk.{}.post_attention_norm.weight",
        "model.layers.{}.post_attention_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.ffn_norm.weight",
        "model.layers.{}.pre_feedforward_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.post_ffw_norm.weight",
        "model.layers.{}.post_feedforward_layernorm.weight",
        &[Hidden],
    ),
];
pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    build_dense(cfg, src, &[ATTN, QK_NORM, GEMMA_NORMS, MLP])
}

/// llama.cpp's Gemma 3 rules: every 6th layer global, local RoPE base 10000, query scale
/// `key_length^-0.5` (27B: `(hidden / heads)^-0.5`); norms already stored as `1 + w`.
pub fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = dense_config_from_gguf(g, Arch::Gemma3)?;
    cfg.activation = Activation::GeluTanh;
    cfg.qk_norm = true;
    cfg.post_norms = true;
    cfg.embed_scale = true;
    let scalar = if cfg.hidden_dim == 5376 && cfg.n_heads == 32 {
        (cfg.hidden_dim / cfg.n_heads) as f32
    } else {
        cfg.head_dim as f32
    };
    cfg.attn_scale = Some(1.0 / scalar.sqrt());
    cfg.sliding_window = g.opt_usize("attention.sliding_window");
    let pattern = g
        .opt_usize("attention.sliding_window_pattern")
        .unwrap_or(6)
        .max(1);
    cfg.layer_attn = (0..cfg.n_layers)
        .map(|l| {
            if (l + 1) % pattern == 0 {
                AttnKind::Full
            } else {
                AttnKind::Sliding
            }
        })
        .collect();
    let mut local = cfg.rope;
    local.theta = 10_000.0;
    local.scaling = RopeScaling::None;
    cfg.rope_local = Some(local);
    Ok(cfg)
}
