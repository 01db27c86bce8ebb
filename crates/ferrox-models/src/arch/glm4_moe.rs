//! GLM-4.5 / 4.6 / 4.7 (`glm4_moe`): GQA attention with q/k/v bias, optional QK norm and
//! partial NeoX RoPE, dense FFN on the first `first_k_dense_replace` layers, then the
//! sigmoid-routed MoE with correction bias, grouped top-k, routed scaling and shared experts.
//! MTP layers are not part of the forward.
//! Reference: transformers `modeling_glm4_moe.py` (fixtures/hf-tiny/FORWARD.md §6); llama.cpp
//! `LLM_ARCH_GLM4_MOE`, whose GGUFs store the pre-FFN norm (HF `post_attention_layernorm`) as
//! `post_attention_norm`.

use super::common_deepseek;
use super::gguf::{MoeDefaults, GATING_SIGMOID};
use super::tables::{ATTN_NORM, DENSE_FFN, FFN_NORM, ROUTED_FFN, SHARED_FFN, STD_ATTN};
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("glm4_moe", tensors)
    .hf(&["glm4_moe"], config_from_hf)
    .gguf(&["glm4moe"], config_from_gguf);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    let ffn_norm = FFN_NORM.gguf_as("blk.{}.post_attention_norm.weight");
    [
        &[ATTN_NORM, ffn_norm][..],
        STD_ATTN,
        DENSE_FFN,
        ROUTED_FFN,
        SHARED_FFN,
    ]
    .concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.qk_norm = c.bool(&keys::USE_QK_NORM)?.unwrap_or(false);
    c.sliding_from_layer_types(&mut cfg)?;
    common_deepseek::hf_moe(c, &mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    g.gqa_moe(arch, false, MoeDefaults::gating(GATING_SIGMOID))
}
