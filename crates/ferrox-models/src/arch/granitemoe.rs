//! Granite-MoE (`granitemoe`, IBM Granite 3.x MoE): Llama attention with scalar multipliers on
//! the embeddings, every residual branch, the attention scores and the logits, and a softmax
//! top-k MoE (softmax over the chosen logits = renormalised weights) whose experts are stored
//! stacked: `input_linear` `[E, 2F, H]` (gate rows, then up rows) and `output_linear`.
//! Reference: transformers `modeling_granitemoe.py`; llama.cpp `LLM_ARCH_GRANITE_MOE`.

use super::tables::{expert_ffn, expert_ffn2, experts, NORMS, STD_ATTN};
use super::{no_gguf, Architecture, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("granitemoe", config_from_hf, no_gguf, tensors).hf(&["granitemoe"]);

const MOE: &[TensorSpec] = table![
    "blk.{}.ffn_gate_inp.weight" => "model.layers.{}.block_sparse_moe.router.layer.weight", [Of(experts), Hidden];
    // Per expert the gate rows then the up rows: llama.cpp's fused gate/up stack.
    "blk.{}.ffn_gate_up_exps.weight" => "model.layers.{}.block_sparse_moe.input_linear.weight", [Of(experts), Of(expert_ffn2), Hidden];
    "blk.{}.ffn_down_exps.weight" => "model.layers.{}.block_sparse_moe.output_linear.weight", [Of(experts), Hidden, Of(expert_ffn)];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, MOE].concat()
}

fn multiplier(c: &HfConfig, key: &str) -> Result<f32, LoadError> {
    match c.f32(key) {
        Some(m) if m.is_finite() && m != 0.0 => Ok(m),
        Some(m) => Err(LoadError::Config(format!("config.json: {key} = {m}"))),
        None => Ok(1.0),
    }
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("granitemoe", false)?;
    cfg.tie_embeddings = c.bool("tie_word_embeddings").unwrap_or(true);
    cfg.embedding_multiplier = multiplier(c, "embedding_multiplier")?;
    cfg.residual_multiplier = multiplier(c, "residual_multiplier")?;
    cfg.logit_divisor = multiplier(c, "logits_scaling")?;
    cfg.attn_scale = c.f32("attention_multiplier");
    let (experts, width) = (c.req("num_local_experts")?, cfg.ffn_dim);
    c.softmax_moe(&mut cfg, experts, width, true)?;
    c.moe_everywhere(&mut cfg)?;
    Ok(cfg)
}
