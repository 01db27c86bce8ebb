//! What the Granite families read alike, in both formats: the scalar multipliers on the
//! embeddings, every residual branch, the attention scores and the logits. Used by `granite`
//! and `granitemoe`, neither of which imports the other.
//! Reference: transformers `configuration_granite.py` / `configuration_granitemoe.py`
//! (`embedding_multiplier`, `residual_multiplier`, `attention_multiplier`, `logits_scaling`);
//! llama.cpp `LLM_ARCH_GRANITE` / `LLM_ARCH_GRANITE_MOE` (`models/granite.cpp`,
//! `models/granite-moe.cpp`) and its converter's `GraniteModel.set_gguf_parameters`, which
//! writes them as `embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`.

use super::keys::{self, Key};
use super::{GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

fn multiplier(c: &HfConfig, key: &Key) -> Result<f32, LoadError> {
    match c.f32(key)? {
        Some(m) if m.is_finite() && m != 0.0 => Ok(m),
        Some(m) => Err(c.bad(key, format!("= {m} is not a usable multiplier"))),
        None => Ok(1.0),
    }
}

/// The four multipliers from `config.json`.
pub fn hf_multipliers(c: &HfConfig, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    cfg.embedding_multiplier = multiplier(c, &keys::EMBEDDING_SCALE)?;
    cfg.residual_multiplier = multiplier(c, &keys::RESIDUAL_SCALE)?;
    cfg.logit_divisor = multiplier(c, &keys::LOGIT_SCALE)?;
    cfg.attn_scale = c.f32(&keys::ATTN_SCALE)?;
    Ok(())
}

/// A `*_scale` key: the converter writes it only when the multiplier is truthy and llama.cpp
/// reads 0 as "not scaled", so absent and 0 are `None`.
fn gguf_scale(g: &GgufMeta, key: &Key) -> Result<Option<f32>, LoadError> {
    // `opt_f32` refuses non-finite values.
    Ok(g.opt_f32(key)?.filter(|&m| m != 0.0))
}

/// The four multipliers from GGUF metadata. `logit_scale` is required as llama.cpp requires
/// it (it divides the logits unconditionally).
pub fn gguf_multipliers(g: &GgufMeta, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    cfg.embedding_multiplier = gguf_scale(g, &keys::EMBEDDING_SCALE)?.unwrap_or(1.0);
    cfg.residual_multiplier = gguf_scale(g, &keys::RESIDUAL_SCALE)?.unwrap_or(1.0);
    cfg.attn_scale = gguf_scale(g, &keys::ATTN_SCALE)?;
    cfg.logit_divisor = match g.f32(&keys::LOGIT_SCALE)? {
        0.0 => return Err(g.bad(&keys::LOGIT_SCALE, "is 0")),
        s => s,
    };
    Ok(())
}
