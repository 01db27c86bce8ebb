//! Qwen3 (dense): Llama layout plus per-head RMSNorm of q and k before RoPE, explicit head_dim.
//! Reference: transformers `modeling_qwen3.py`; llama.cpp `LLM_ARCH_QWEN3`.

use super::{build_dense, dense_config_from_gguf, dense_config_from_hf, GgufMeta, HfConfig};
use crate::config::{Arch, ModelConfig};
use crate::decoder::Decoder;
use crate::weights::{opt, req, Dim::*, LoadError, TensorSpec, WeightSource};

pub const GLOBAL: &[TensorSpec] = &[
    req(
        "token_embd.weight",
        "model.embed_tokens.weight",
        &[Vocab, Hidden],
    ),
    req("output_norm.weight", "model.norm.weight", &[Hidden]),
    opt("output.weight", "lm_head.weight", &[Vocab, Hidden]),
];

pub const LAYER: &[TensorSpec] = &[
    req(
        "blk.{}.attn_norm.weight",
        "model.layers.{}.input_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.attn_q.weight",
        "model.layers.{}.self_attn.q_proj.weight",
        &[QDim, Hidden],
    ),
    req(
        "blk.{}.attn_k.weight",
        "model.layers.{}.self_attn.k_proj.weight",
        &[KvDim, Hidden],
    ),
    req(
        "blk.{}.attn_v.weight",
        "model.layers.{}.self_attn.v_proj.weight",
        &[KvDim, Hidden],
    ),
    req(
        "blk.{}.attn_output.weight",
        "model.layers.{}.self_attn.o_proj.weight",
        &[Hidden, QDim],
    ),
    req(
        "blk.{}.attn_q_norm.weight",
        "model.layers.{}.self_attn.q_norm.weight",
        &[HeadDim],
    ),
    req(
        "blk.{}.attn_k_norm.weight",
        "model.layers.{}.self_attn.k_norm.weight",
        &[HeadDim],
    ),
    req(
        "blk.{}.ffn_norm.weight",
        "model.layers.{}.post_attention_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.ffn_gate.weight",
        "model.layers.{}.mlp.gate_proj.weight",
        &[Ffn, Hidden],
    ),
    req(
        "blk.{}.ffn_up.weight",
        "model.layers.{}.mlp.up_proj.weight",
        &[Ffn, Hidden],
    ),
    req(
        "blk.{}.ffn_down.weight",
        "model.layers.{}.mlp.down_proj.weight",
        &[Hidden, Ffn],
    ),
];

pub fn config_from_hf(hf: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = dense_config_from_hf(hf, Arch::Qwen3)?;
    cfg.qk_norm = true;
    if hf.bool("attention_bias", false) {
        return Err(LoadError::Config(
            "qwen3 with attention bias is not supported".into(),
        ));
    }
    Ok(cfg)
}

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    build_dense(cfg, src, GLOBAL, LAYER)
}

pub fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = dense_config_from_gguf(g, Arch::Qwen3)?;
    cfg.qk_norm = true;
    Ok(cfg)
}
