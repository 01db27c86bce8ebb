//! Gemma 3 (text): embeddings × √hidden, four RMSNorms per layer (before and after attention and
//! FFN), per-head QK RMSNorm, GeGLU (GELU-tanh) FFN, interleaved sliding-window and global
//! layers with their own RoPE (local base 10k, global base 1e6 with optional linear scaling),
//! softmax scale `query_pre_attn_scalar^-0.5`, tied embeddings.
//! Reference: transformers `modeling_gemma3.py`; llama.cpp `LLM_ARCH_GEMMA3`.
//! HF checkpoints store norms as `w` in `x * (1 + w)`; GGUF stores `1 + w`.

use super::tables::{ATTN_NORM, DENSE_FFN, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::{Activation, ModelConfig, NormKind, RopeScaling};
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("gemma3", config_from_hf, config_from_gguf, tensors)
        .hf(&["gemma3_text", "gemma3"])
        .gguf(&["gemma3"]);

/// Gemma's norms after attention, before and after the FFN (the one before attention is the
/// shared `attn_norm`).
pub const GEMMA_NORMS: &[TensorSpec] = table![
    "blk.{}.post_attention_norm.weight" => "model.layers.{}.post_attention_layernorm.weight", [Hidden];
    "blk.{}.ffn_norm.weight" => "model.layers.{}.pre_feedforward_layernorm.weight", [Hidden];
    "blk.{}.post_ffw_norm.weight" => "model.layers.{}.post_feedforward_layernorm.weight", [Hidden];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [&[ATTN_NORM][..], GEMMA_NORMS, STD_ATTN, DENSE_FFN].concat()
}

/// What Gemma 2 and 3 GGUFs share: sandwich norms (stored as `1 + w`), scaled embeddings,
/// GeGLU, query scale `key_length^-0.5` except the 27B (hidden `wide`, 32 heads), whose
/// scale is `(hidden / heads)^-0.5` in llama.cpp.
pub fn gemma_from_gguf(
    g: &GgufMeta,
    arch: &'static str,
    wide: usize,
) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, false)?;
    cfg.post_norms = true;
    cfg.embed_scale = true;
    cfg.activation = Activation::GeluTanh;
    let scalar = if cfg.hidden_dim == wide && cfg.n_heads == 32 {
        (cfg.hidden_dim / cfg.n_heads) as f32
    } else {
        cfg.head_dim as f32
    };
    cfg.attn_scale = Some(1.0 / scalar.sqrt());
    Ok(cfg)
}

/// What Gemma 2 and 3 checkpoints share: `(1 + w)` norms, sandwich norms, scaled embeddings
/// (tied by default), softmax scale `query_pre_attn_scalar^-0.5`.
pub fn gemma_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.norm = NormKind::RmsOffsetOne;
    cfg.post_norms = true;
    cfg.embed_scale = true;
    cfg.tie_embeddings = c.bool("tie_word_embeddings")?.unwrap_or(true);
    let scalar = c.f32("query_pre_attn_scalar")?;
    cfg.attn_scale = Some(scalar.unwrap_or(cfg.head_dim as f32).powf(-0.5));
    Ok(cfg)
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = gemma_from_hf(c, "gemma3")?;
    cfg.qk_norm = true;
    let (hd, max_pos) = (cfg.head_dim, cfg.max_seq_len);
    cfg.rope = c.rope(Some("full_attention"), hd, false, max_pos)?;
    let mut local = c.rope(Some("sliding_attention"), hd, false, max_pos)?;
    if c.get("rope_parameters").is_none() {
        // Legacy configs: local layers use `rope_local_base_freq`, no scaling.
        local.theta = c.f32("rope_local_base_freq")?.unwrap_or(10_000.0);
        local.scaling = RopeScaling::None;
    }
    cfg.rope_local = Some(local);
    let pattern = c.usize("sliding_window_pattern")?.unwrap_or(6).max(1);
    c.sliding_by_types_or(&mut cfg, |l| (l + 1) % pattern != 0)?;
    Ok(cfg)
}

/// llama.cpp's Gemma 3 rules: every 6th layer global, local RoPE base 10000, query scale
/// `key_length^-0.5` (27B: `(hidden / heads)^-0.5`); norms already stored as `1 + w`.
fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = gemma_from_gguf(g, "gemma3", 5376)?;
    cfg.qk_norm = true;
    cfg.sliding_window = g.opt_usize("attention.sliding_window")?;
    let pattern = g
        .opt_usize("attention.sliding_window_pattern")?
        .unwrap_or(6)
        .max(1);
    cfg.set_sliding_layers(|l| (l + 1) % pattern != 0);
    let mut local = cfg.rope;
    local.theta = 10_000.0;
    local.scaling = RopeScaling::None;
    cfg.rope_local = Some(local);
    Ok(cfg)
}
