//! GLM-4 (dense, `Glm4ForCausalLM`; GLM-4-0414): Llama layout with q/k/v bias, partial
//! interleaved RoPE, a fused gate/up projection and sandwich norms on both sublayer outputs.
//! Reference: transformers `modeling_glm4.py`; llama.cpp `LLM_ARCH_GLM4` (`post_attention_norm`,
//! `post_ffw_norm`, fused `ffn_up`).

use super::sparse::{build_sparse, ffn2, HF_EXPERTS, NORMS, STD_ATTN};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{req, Dim::*, TensorSpec};
use crate::weights::{LoadError, WeightSource};

pub const POST_NORMS_FUSED_MLP: &[TensorSpec] = &[
    req(
        "blk.{}.post_attention_norm.weight",
        "model.layers.{}.post_self_attn_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.post_ffw_norm.weight",
        "model.layers.{}.post_mlp_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.ffn_up.weight",
        "model.layers.{}.mlp.gate_up_proj.weight",
        &[Of(ffn2), Hidden],
    ),
    req(
        "blk.{}.ffn_down.weight",
        "model.layers.{}.mlp.down_proj.weight",
        &[Hidden, Ffn],
    ),
];

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    let specs = [NORMS, STD_ATTN, POST_NORMS_FUSED_MLP].concat();
    build_sparse(cfg, src, &specs, &HF_EXPERTS)
}
