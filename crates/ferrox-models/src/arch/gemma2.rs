//! Gemma 2: Gemma's sandwich norms (`1 + w` in Hugging Face checkpoints), embeddings ×
//! √hidden, GeGLU, attention-logit and final-logit soft-caps, sliding-window and global layers
//! alternating (even layers slide), softmax scale `query_pre_attn_scalar^-0.5`, tied embeddings.
//! Reference: transformers `modeling_gemma2.py`; llama.cpp `LLM_ARCH_GEMMA2` (SWA pattern 2,
//! soft-cap keys, 27B query scale `(hidden / heads)^-0.5`).

use super::gemma3::GEMMA_NORMS;
use super::tables::{ATTN_NORM, DENSE_FFN, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::{Activation, AttnKind, ModelConfig, NormKind};
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("gemma2", config_from_hf, config_from_gguf, tensors)
        .hf(&["gemma2"])
        .gguf(&["gemma2"]);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [&[ATTN_NORM][..], GEMMA_NORMS, STD_ATTN, DENSE_FFN].concat()
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("gemma2", false)?;
    cfg.norm = NormKind::RmsOffsetOne;
    cfg.post_norms = true;
    cfg.embed_scale = true;
    cfg.tie_embeddings = c.bool("tie_word_embeddings").unwrap_or(true);
    let scalar = c
        .f32("query_pre_attn_scalar")
        .unwrap_or(cfg.head_dim as f32);
    cfg.attn_scale = Some(scalar.powf(-0.5));
    if c.usize("sliding_window").is_some() {
        let n = cfg.n_layers;
        let kinds = match c.layer_kinds("layer_types", n)? {
            Some(k) => k,
            None => (0..n).map(|l| l % 2 == 0).collect(),
        };
        c.set_sliding(&mut cfg, &kinds);
    }
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("gemma2", false)?;
    cfg.post_norms = true;
    cfg.embed_scale = true;
    cfg.activation = Activation::GeluTanh;
    let scalar = if cfg.hidden_dim == 4608 && cfg.n_heads == 32 {
        (cfg.hidden_dim / cfg.n_heads) as f32
    } else {
        cfg.head_dim as f32
    };
    cfg.attn_scale = Some(1.0 / scalar.sqrt());
    cfg.sliding_window = g.opt_usize("attention.sliding_window").filter(|&w| w > 0);
    if cfg.sliding_window.is_some() {
        cfg.layer_attn = (0..cfg.n_layers)
            .map(|l| {
                if l % 2 == 0 {
                    AttnKind::Sliding
                } else {
                    AttnKind::Full
                }
            })
            .collect();
    }
    Ok(cfg)
}
