//! Mixtral (`mixtral`): Mistral attention (GQA, sliding window) with a softmax top-2 MoE in
//! every layer, weights always renormalised. Reference: transformers `modeling_mixtral.py`
//! (Hub names `block_sparse_moe.gate`, `experts.{e}.w1/w3/w2`); llama.cpp `LLM_ARCH_LLAMA` with
//! `ffn_gate_inp` / `ffn_*_exps`.

use super::sparse::{
    build_sparse, expert_ffn, experts, ExpertNames, GATE_UP_EXPS, NORMS, STD_ATTN,
};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{opt, Dim::*, TensorSpec};
use crate::weights::{LoadError, WeightSource};

pub const MIXTRAL_MOE: &[TensorSpec] = &[
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

pub const MIXTRAL_EXPERTS: ExpertNames = ExpertNames {
    gate: "model.layers.{}.block_sparse_moe.experts.{e}.w1.weight",
    up: "model.layers.{}.block_sparse_moe.experts.{e}.w3.weight",
    down: "model.layers.{}.block_sparse_moe.experts.{e}.w2.weight",
};

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    let specs = [NORMS, STD_ATTN, MIXTRAL_MOE].concat();
    build_sparse(cfg, src, &specs, &MIXTRAL_EXPERTS)
}
