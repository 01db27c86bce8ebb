//! GLM-4 (dense, `Glm4ForCausalLM`; GLM-4-0414): Llama layout with q/k/v bias, partial
//! interleaved RoPE, a fused gate/up projection and sandwich norms on both sublayer outputs.
//! Reference: transformers `modeling_glm4.py`; llama.cpp `LLM_ARCH_GLM4` (`post_attention_norm`,
//! `post_ffw_norm`, fused `ffn_up`).

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{ffn2, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("glm4", tensors)
    .hf(&["glm4"], config_from_hf)
    .gguf(&["glm4"], config_from_gguf);

const POST_NORMS_FUSED_MLP: &[TensorSpec] = table![
    "blk.{}.post_attention_norm.weight" => "model.layers.{}.post_self_attn_layernorm.weight", [Hidden];
    "blk.{}.post_ffw_norm.weight" => "model.layers.{}.post_mlp_layernorm.weight", [Hidden];
    "blk.{}.ffn_up.weight" => "model.layers.{}.mlp.gate_up_proj.weight", [Of(ffn2), Hidden];
    "blk.{}.ffn_down.weight" => "model.layers.{}.mlp.down_proj.weight", [Hidden, Ffn];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, POST_NORMS_FUSED_MLP].concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, true)?;
    cfg.post_norms = true;
    c.sliding_from_layer_types(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    // No experts: `gqa_moe` reads none.
    let mut cfg = g.gqa_moe(arch, true, MoeDefaults::gating(GATING_SOFTMAX))?;
    cfg.post_norms = true;
    Ok(cfg)
}
