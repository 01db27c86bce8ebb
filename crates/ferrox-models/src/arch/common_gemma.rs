//! What Gemma 2 and Gemma 3 read alike, in both formats: sandwich norms, embeddings scaled by
//! √hidden, GeGLU, and the softmax scale. Used by `gemma2` and `gemma3`, neither of which
//! imports the other.
//! Reference: transformers `configuration_gemma2.py` / `configuration_gemma3.py`; llama.cpp
//! `LLM_ARCH_GEMMA2` / `LLM_ARCH_GEMMA3` (query scale, norms stored as `1 + w`).

use super::keys;
use super::{GgufMeta, HfConfig};
use crate::config::{Activation, ModelConfig, NormKind};
use crate::weights::LoadError;

/// GGUF: sandwich norms (stored as `1 + w`), scaled embeddings, GeGLU, query scale
/// `key_length^-0.5` except the 27B (hidden `wide`, 32 heads), whose scale is
/// `(hidden / heads)^-0.5` in llama.cpp.
pub fn from_gguf(g: &GgufMeta, arch: &'static str, wide: usize) -> Result<ModelConfig, LoadError> {
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

/// `config.json`: `(1 + w)` norms, sandwich norms, scaled embeddings (tied by default), softmax
/// scale `query_pre_attn_scalar^-0.5`.
pub fn from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.norm = NormKind::RmsOffsetOne;
    cfg.post_norms = true;
    cfg.embed_scale = true;
    cfg.tie_embeddings = c.bool(&keys::TIE_EMBEDDINGS)?.unwrap_or(true);
    let scalar = c.f32(&keys::QUERY_SCALAR)?;
    cfg.attn_scale = Some(scalar.unwrap_or(cfg.head_dim as f32).powf(-0.5));
    Ok(cfg)
}
