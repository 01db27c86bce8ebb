//! Granite-MoE (`granitemoe`, IBM Granite 3.x MoE): Llama attention with scalar multipliers on
//! the embeddings, every residual branch, the attention scores and the logits, and a softmax
//! top-k MoE (softmax over the chosen logits = renormalised weights) whose experts are stored
//! stacked: `input_linear` `[E, 2F, H]` (gate rows, then up rows) and `output_linear`.
//! Reference: transformers `modeling_granitemoe.py`; llama.cpp `LLM_ARCH_GRANITE_MOE`
//! (`models/granite-moe.cpp`) and its converter's `GraniteMoeModel`, which writes the
//! multipliers as `embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`,
//! splits `input_linear` into `ffn_gate_exps` / `ffn_up_exps` and permutes q/k as Llama.

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::keys::{self, Key};
use super::tables::{expert_ffn, expert_ffn2, experts, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("granitemoe", config_from_hf, config_from_gguf, tensors)
        .hf(&["granitemoe"])
        .gguf(&["granitemoe"]);

const MOE: &[TensorSpec] = table![
    "blk.{}.ffn_gate_inp.weight" => "model.layers.{}.block_sparse_moe.router.layer.weight", [Of(experts), Hidden];
    // Per expert the gate rows then the up rows: llama.cpp's fused gate/up stack.
    "blk.{}.ffn_gate_up_exps.weight" => "model.layers.{}.block_sparse_moe.input_linear.weight", [Of(experts), Of(expert_ffn2), Hidden];
    // The converter's split of `input_linear`.
    "blk.{}.ffn_gate_exps.weight" => "-", [Of(experts), Of(expert_ffn), Hidden];
    "blk.{}.ffn_up_exps.weight" => "-", [Of(experts), Of(expert_ffn), Hidden];
    "blk.{}.ffn_down_exps.weight" => "model.layers.{}.block_sparse_moe.output_linear.weight", [Of(experts), Hidden, Of(expert_ffn)];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, MOE].concat()
}

fn multiplier(c: &HfConfig, key: &Key) -> Result<f32, LoadError> {
    match c.f32(key)? {
        Some(m) if m.is_finite() && m != 0.0 => Ok(m),
        Some(m) => Err(c.bad(key, format!("= {m} is not a usable multiplier"))),
        None => Ok(1.0),
    }
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("granitemoe", false)?;
    cfg.tie_embeddings = c.bool(&keys::TIE_EMBEDDINGS)?.unwrap_or(true);
    cfg.embedding_multiplier = multiplier(c, &keys::EMBEDDING_SCALE)?;
    cfg.residual_multiplier = multiplier(c, &keys::RESIDUAL_SCALE)?;
    cfg.logit_divisor = multiplier(c, &keys::LOGIT_SCALE)?;
    cfg.attn_scale = c.f32(&keys::ATTN_SCALE)?;
    let (experts, width) = (c.req(&keys::EXPERTS)?, cfg.ffn_dim);
    c.softmax_moe(&mut cfg, experts, width, true)?;
    c.moe_everywhere(&mut cfg)?;
    Ok(cfg)
}

/// A `*_scale` key: the converter writes it only when the multiplier is truthy and llama.cpp
/// reads 0 as "not scaled", so absent and 0 are `None`.
fn gguf_scale(g: &GgufMeta, key: &Key) -> Result<Option<f32>, LoadError> {
    // `opt_f32` refuses non-finite values.
    Ok(g.opt_f32(key)?.filter(|&m| m != 0.0))
}

/// llama.cpp's `granitemoe`: adjacent-pair RoPE (q/k permuted), softmax routing renormalised
/// over the chosen experts, experts as wide as `feed_forward_length`. `logit_scale` is required
/// as llama.cpp requires it (it divides the logits unconditionally).
fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let moe = MoeDefaults::gating(GATING_SOFTMAX)
        .renormalised()
        .expert_ffn_from_ffn();
    let mut cfg = g.gqa_moe("granitemoe", true, moe)?;
    cfg.embedding_multiplier = gguf_scale(g, &keys::EMBEDDING_SCALE)?.unwrap_or(1.0);
    cfg.residual_multiplier = gguf_scale(g, &keys::RESIDUAL_SCALE)?.unwrap_or(1.0);
    cfg.attn_scale = gguf_scale(g, &keys::ATTN_SCALE)?;
    cfg.logit_divisor = match g.f32(&keys::LOGIT_SCALE)? {
        0.0 => return Err(g.bad(&keys::LOGIT_SCALE, "is 0")),
        s => s,
    };
    Ok(cfg)
}
