//! Gemma 3 (text): embeddings × √hidden, four RMSNorms per layer (before and after attention and
//! FFN), per-head QK RMSNorm, GeGLU (GELU-tanh) FFN, interleaved sliding-window and global
//! layers with their own RoPE (local base 10k, global base 1e6 with optional linear scaling),
//! softmax scale `query_pre_attn_scalar^-0.5`, tied embeddings.
//! Reference: transformers `modeling_gemma3.py`; llama.cpp `LLM_ARCH_GEMMA3`.
//! HF checkpoints store norms as `w` in `x * (1 + w)`; GGUF stores `1 + w`.

use super::tables::{ATTN_NORM, DENSE_FFN, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::{Activation, AttnKind, ModelConfig, NormKind, RopeScaling};
use crate::weights::{opt, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("gemma3", config_from_hf, config_from_gguf, tensors)
        .hf(&["gemma3_text", "gemma3"])
        .gguf(&["gemma3"]);

/// Gemma's norms after attention, before and after the FFN (the one before attention is the
/// shared `attn_norm`).
pub const GEMMA_NORMS: &[TensorSpec] = &[
    opt(
        "blk.{}.post_attention_norm.weight",
        "model.layers.{}.post_attention_layernorm.weight",
        &[Hidden],
    ),
    opt(
        "blk.{}.ffn_norm.weight",
        "model.layers.{}.pre_feedforward_layernorm.weight",
        &[Hidden],
    ),
    opt(
        "blk.{}.post_ffw_norm.weight",
        "model.layers.{}.post_feedforward_layernorm.weight",
        &[Hidden],
    ),
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [&[ATTN_NORM][..], GEMMA_NORMS, STD_ATTN, DENSE_FFN].concat()
}

/// What both formats agree on.
fn gemma(cfg: &mut ModelConfig) {
    cfg.qk_norm = true;
    cfg.post_norms = true;
    cfg.embed_scale = true;
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("gemma3", false)?;
    gemma(&mut cfg);
    cfg.norm = NormKind::RmsOffsetOne;
    cfg.tie_embeddings = c.bool("tie_word_embeddings").unwrap_or(true);
    cfg.attn_scale = Some(
        c.f32("query_pre_attn_scalar")
            .unwrap_or(cfg.head_dim as f32)
            .powf(-0.5),
    );
    let (hd, max_pos) = (cfg.head_dim, cfg.max_seq_len);
    cfg.rope = c.rope(Some("full_attention"), hd, false, max_pos)?;
    let mut local = c.rope(Some("sliding_attention"), hd, false, max_pos)?;
    if c.get("rope_parameters").is_none() {
        // Legacy configs: local layers use `rope_local_base_freq`, no scaling.
        local.theta = c.f32("rope_local_base_freq").unwrap_or(10_000.0);
        local.scaling = RopeScaling::None;
    }
    cfg.rope_local = Some(local);
    if c.usize("sliding_window").is_some() {
        let n = cfg.n_layers;
        let kinds = match c.layer_kinds("layer_types", n)? {
            Some(k) => k,
            None => {
                let pat = c.usize("sliding_window_pattern").unwrap_or(6).max(1);
                (0..n).map(|l| (l + 1) % pat != 0).collect()
            }
        };
        c.set_sliding(&mut cfg, &kinds);
    }
    Ok(cfg)
}

/// llama.cpp's Gemma 3 rules: every 6th layer global, local RoPE base 10000, query scale
/// `key_length^-0.5` (27B: `(hidden / heads)^-0.5`); norms already stored as `1 + w`.
fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("gemma3", false)?;
    gemma(&mut cfg);
    cfg.activation = Activation::GeluTanh;
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
