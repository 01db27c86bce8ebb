//! Mixtral (`mixtral`): Mistral attention (GQA, sliding window) with a softmax top-2 MoE in
//! every layer, weights always renormalised. Reference: transformers `modeling_mixtral.py`
//! (Hub names `block_sparse_moe.gate`, `experts.{e}.w1/w3/w2`); llama.cpp `LLM_ARCH_LLAMA` with
//! `ffn_gate_inp` / `ffn_*_exps` (a `llama` GGUF with experts).

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{expert_ffn, experts, ExpertNames, GATE_UP_EXPS, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::{ModelConfig, MoeConfig};
use crate::weights::{opt, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("mixtral", config_from_hf, config_from_gguf, tensors)
        .hf(&["mixtral"])
        .gguf(&["llama"])
        .claims(|g| g.opt_usize("expert_count").unwrap_or(0) > 0)
        .experts(ExpertNames {
            gate: "model.layers.{}.block_sparse_moe.experts.{e}.w1.weight",
            up: "model.layers.{}.block_sparse_moe.experts.{e}.w3.weight",
            down: "model.layers.{}.block_sparse_moe.experts.{e}.w2.weight",
        });

const MIXTRAL_MOE: &[TensorSpec] = &[
    opt(
        "blk.{}.ffn_gate_inp.weight",
        "model.layers.{}.block_sparse_moe.gate.weight",
        &[Of(experts), Hidden],
    ),
    opt(
        "blk.{}.ffn_gate_exps.weight",
        "-",
        &[Of(experts), Of(expert_ffn), Hidden],
    ),
    opt(
        "blk.{}.ffn_up_exps.weight",
        "-",
        &[Of(experts), Of(expert_ffn), Hidden],
    ),
    opt(
        "blk.{}.ffn_down_exps.weight",
        "-",
        &[Of(experts), Hidden, Of(expert_ffn)],
    ),
    GATE_UP_EXPS,
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, MIXTRAL_MOE].concat()
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("mixtral", false)?;
    cfg.qkv_bias = false;
    c.sliding_all(&mut cfg, true);
    cfg.moe = MoeConfig {
        n_experts: c.req("num_local_experts")?,
        n_experts_active: c.req("num_experts_per_tok")?,
        expert_ffn_dim: cfg.ffn_dim,
        norm_topk_prob: true,
        ..MoeConfig::none(cfg.hidden_dim)
    };
    let all = vec![true; cfg.n_layers];
    c.moe_layers(&mut cfg, all)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("mixtral", true)?;
    g.sliding_all(&mut cfg);
    g.optional_attention_tensors(&mut cfg);
    let defaults = MoeDefaults {
        gating: GATING_SOFTMAX,
        always_norm: true,
        ffn_is_expert_ffn: true,
    };
    g.moe(&mut cfg, defaults)?;
    Ok(cfg)
}
