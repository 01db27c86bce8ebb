//! Granite (`granite`, IBM Granite 3.x dense): Llama's layout (GQA attention, SwiGLU, RMSNorm)
//! with scalar multipliers on the embeddings, every residual branch, the attention scores and
//! the logits (`common_granite`, shared with `granitemoe`).
//! Reference: transformers `modeling_granite.py` (`GraniteForCausalLM`); llama.cpp
//! `LLM_ARCH_GRANITE` (`models/granite.cpp`) and its converter's `GraniteModel`, which writes
//! the multipliers as `embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale` and
//! permutes q/k as Llama.

use super::common_granite;
use super::tables::llama_layers;
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new("granite", llama_layers)
    .hf(&["granite"], config_from_hf)
    .gguf(&["granite"], config_from_gguf);

/// `tie_word_embeddings` defaults to false in `GraniteConfig` (the base reader's default);
/// released checkpoints set it true.
fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    common_granite::hf_multipliers(c, &mut cfg)?;
    Ok(cfg)
}

/// llama.cpp's `granite`: adjacent-pair RoPE (q/k permuted), unless `rope.scaling.finetuned`
/// is false, which llama.cpp reads as "no RoPE on any layer".
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, true)?;
    common_granite::gguf_multipliers(g, &mut cfg)?;
    if !g.opt_bool(&keys::ROPE_FINETUNED)?.unwrap_or(true) {
        cfg.no_rope = vec![true; cfg.n_layers];
    }
    Ok(cfg)
}
