//! Mixtral (`mixtral`): Mistral attention (GQA, sliding window) with a softmax top-2 MoE in
//! every layer, weights always renormalised. Reference: transformers `modeling_mixtral.py`
//! (Hub names `block_sparse_moe.gate`, `experts.{e}.w1/w3/w2`); llama.cpp `LLM_ARCH_LLAMA` with
//! `ffn_gate_inp` / `ffn_*_exps` (a `llama` GGUF with experts).

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{expert_ffn, expert_ffn2, experts, ExpertNames, NORMS, STD_ATTN};
use super::{keys, Architecture, Claim::Has, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("mixtral", tensors)
    .hf(&["mixtral"], config_from_hf)
    .gguf(&["llama"], config_from_gguf)
    .claims(&[Has(&keys::EXPERTS)])
    .experts(ExpertNames {
        gate: "model.layers.{}.block_sparse_moe.experts.{e}.w1.weight",
        up: "model.layers.{}.block_sparse_moe.experts.{e}.w3.weight",
        down: "model.layers.{}.block_sparse_moe.experts.{e}.w2.weight",
    });

const MIXTRAL_MOE: &[TensorSpec] = table![
    "blk.{}.ffn_gate_inp.weight" => "model.layers.{}.block_sparse_moe.gate.weight", [Of(experts), Hidden];
    "blk.{}.ffn_gate_exps.weight" => "-", [Of(experts), Of(expert_ffn), Hidden];
    "blk.{}.ffn_up_exps.weight" => "-", [Of(experts), Of(expert_ffn), Hidden];
    "blk.{}.ffn_down_exps.weight" => "-", [Of(experts), Hidden, Of(expert_ffn)];
    "blk.{}.ffn_gate_up_exps.weight" => "-", [Of(experts), Of(expert_ffn2), Hidden];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, MIXTRAL_MOE].concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.qkv_bias = false;
    c.sliding_all(&mut cfg, true)?;
    c.softmax_moe(&mut cfg, None, true)?;
    c.moe_everywhere(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    g.gqa_moe(
        arch,
        true,
        MoeDefaults::gating(GATING_SOFTMAX)
            .renormalised()
            .expert_ffn_from_ffn(),
    )
}
