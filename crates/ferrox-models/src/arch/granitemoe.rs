//! Granite-MoE (`granitemoe`, IBM Granite 3.x MoE): Llama attention with scalar multipliers on
//! the embeddings, every residual branch, the attention scores and the logits, and a softmax
//! top-k MoE (softmax over the chosen logits = renormalised weights) whose experts are stored
//! stacked: `input_linear` `[E, 2F, H]` (gate rows, then up rows) and `output_linear`.
//! The multipliers are read in `common_granite`.
//! Reference: transformers `modeling_granitemoe.py`; llama.cpp `LLM_ARCH_GRANITE_MOE`
//! (`models/granite-moe.cpp`) and its converter's `GraniteMoeModel`, which writes the
//! multipliers as `embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`,
//! splits `input_linear` into `ffn_gate_exps` / `ffn_up_exps` and permutes q/k as Llama.

use super::common_granite;
use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::keys;
use super::tables::{expert_ffn, expert_ffn2, experts, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("granitemoe", tensors)
    .hf(&["granitemoe"], config_from_hf)
    .gguf(&["granitemoe"], config_from_gguf);

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

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.tie_embeddings = c.bool(&keys::TIE_EMBEDDINGS)?.unwrap_or(true);
    common_granite::hf_multipliers(c, &mut cfg)?;
    c.softmax_moe(&mut cfg, None, true)?;
    c.moe_everywhere(&mut cfg)?;
    Ok(cfg)
}

/// llama.cpp's `granitemoe`: adjacent-pair RoPE (q/k permuted), softmax routing renormalised
/// over the chosen experts, experts as wide as `feed_forward_length`.
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let moe = MoeDefaults::gating(GATING_SOFTMAX)
        .renormalised()
        .expert_ffn_from_ffn();
    let mut cfg = g.gqa_moe(arch, true, moe)?;
    common_granite::gguf_multipliers(g, &mut cfg)?;
    Ok(cfg)
}
