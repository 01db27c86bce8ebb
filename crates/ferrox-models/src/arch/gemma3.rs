//! Gemma 3 (text): embeddings × √hidden, four RMSNorms per layer (before and after attention and
//! FFN), per-head QK RMSNorm, GeGLU (GELU-tanh) FFN, interleaved sliding-window and global
//! layers with their own RoPE (local base 10k, global base 1e6 with optional linear scaling),
//! softmax scale `query_pre_attn_scalar^-0.5`, tied embeddings.
//! Reference: transformers `modeling_gemma3.py`; llama.cpp `LLM_ARCH_GEMMA3`.
//! HF checkpoints store norms as `w` in `x * (1 + w)`; GGUF stores `1 + w`.

use super::common_gemma;
use super::tables::{ATTN_NORM, DENSE_FFN, GEMMA_NORMS, STD_ATTN};
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::{ModelConfig, RopeScaling};
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("gemma3", tensors)
    .hf(&["gemma3_text", "gemma3"], config_from_hf)
    .gguf(&["gemma3"], config_from_gguf);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [&[ATTN_NORM][..], GEMMA_NORMS, STD_ATTN, DENSE_FFN].concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_gemma::from_hf(c, arch)?;
    cfg.qk_norm = true;
    let (hd, max_pos) = (cfg.head_dim, cfg.max_seq_len);
    cfg.rope = c.rope(Some("full_attention"), hd, false, max_pos)?;
    let mut local = c.rope(Some("sliding_attention"), hd, false, max_pos)?;
    if c.get(&keys::ROPE_PARAMETERS).is_none() {
        // Legacy configs: local layers use `rope_local_base_freq`, no scaling.
        local.theta = c.f32(&keys::ROPE_LOCAL_THETA)?.unwrap_or(10_000.0);
        local.scaling = RopeScaling::None;
    }
    cfg.rope_local = Some(local);
    let pattern = c.usize(&keys::SLIDING_PATTERN)?.unwrap_or(6).max(1);
    c.sliding_by_types_or(&mut cfg, |l| (l + 1) % pattern != 0)?;
    Ok(cfg)
}

/// llama.cpp's Gemma 3 rules: every 6th layer global, local RoPE base 10000, query scale
/// `key_length^-0.5` (27B: `(hidden / heads)^-0.5`); norms already stored as `1 + w`.
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_gemma::from_gguf(g, arch, 5376)?;
    cfg.qk_norm = true;
    cfg.sliding_window = g.opt_usize(&keys::SLIDING_WINDOW)?;
    let pattern = g.opt_usize(&keys::SLIDING_PATTERN)?.unwrap_or(6).max(1);
    cfg.set_sliding_layers(|l| (l + 1) % pattern != 0);
    let mut local = cfg.rope;
    local.theta = 10_000.0;
    local.scaling = RopeScaling::None;
    cfg.rope_local = Some(local);
    Ok(cfg)
}
