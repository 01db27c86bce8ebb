//! GLM-4.5 / 4.6 / 4.7 (`glm4_moe`) and GLM-4.7-Flash (`glm4_moe_lite`): GQA attention with
//! q/k/v bias, optional QK norm and partial NeoX RoPE (lite: DeepSeek MLA instead), dense FFN on
//! the first `first_k_dense_replace` layers, then the sigmoid-routed MoE with correction bias,
//! grouped top-k, routed scaling and shared experts. MTP layers are not part of the forward.
//! Reference: transformers `modeling_glm4_moe.py` / `modeling_glm4_moe_lite.py`
//! (fixtures/hf-tiny/FORWARD.md §6); llama.cpp `LLM_ARCH_GLM4_MOE`.

use super::sparse::{build_sparse, DENSE_FFN, HF_EXPERTS, MLA_ATTN, MOE_FFN, NORMS, STD_ATTN};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{req, Dim::*, LoadError, Naming, TensorSpec, WeightSource};

/// llama.cpp's `glm4moe` stores the pre-FFN norm (HF `post_attention_layernorm`) as
/// `post_attention_norm`, not `ffn_norm`.
pub const GGUF_NORMS: &[TensorSpec] = &[
    req(
        "blk.{}.attn_norm.weight",
        "model.layers.{}.input_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.post_attention_norm.weight",
        "model.layers.{}.post_attention_layernorm.weight",
        &[Hidden],
    ),
];

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    let norms = match src.naming() {
        Naming::Gguf => GGUF_NORMS,
        Naming::HuggingFace => NORMS,
    };
    let attn = if cfg.mla.is_some() {
        MLA_ATTN
    } else {
        STD_ATTN
    };
    let specs = [norms, attn, DENSE_FFN, MOE_FFN].concat();
    build_sparse(cfg, src, &specs, &HF_EXPERTS)
}
