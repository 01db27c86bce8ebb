//! OLMoE (`olmoe`): Llama attention whose q/k RMSNorms run over the whole projected width (all
//! heads at once, not per head), and a softmax top-k MoE without renormalisation.
//! Reference: transformers `modeling_olmoe.py`; llama.cpp `LLM_ARCH_OLMOE`.

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{NORMS, ROUTED_FFN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("olmoe", tensors)
    .hf(&["olmoe"], config_from_hf)
    .gguf(&["olmoe"], config_from_gguf);

const ATTN: &[TensorSpec] = table![
    "blk.{}.attn_q.weight" => "model.layers.{}.self_attn.q_proj.weight", [QDim, Hidden];
    "blk.{}.attn_k.weight" => "model.layers.{}.self_attn.k_proj.weight", [KvDim, Hidden];
    "blk.{}.attn_v.weight" => "model.layers.{}.self_attn.v_proj.weight", [KvDim, Hidden];
    "blk.{}.attn_output.weight" => "model.layers.{}.self_attn.o_proj.weight", [Hidden, QDim];
    // A norm as wide as the projection normalises each row whole.
    "blk.{}.attn_q_norm.weight" => "model.layers.{}.self_attn.q_norm.weight", [QDim];
    "blk.{}.attn_k_norm.weight" => "model.layers.{}.self_attn.k_norm.weight", [KvDim];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, ATTN, ROUTED_FFN].concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    cfg.qk_norm = true;
    c.softmax_moe(&mut cfg, None, false)?;
    c.moe_everywhere(&mut cfg)?;
    Ok(cfg)
}

/// llama.cpp's `olmoe`: NeoX RoPE, softmax routing without renormalisation, experts as wide as
/// `feed_forward_length`, q/k norms by presence.
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    g.gqa_moe(
        arch,
        false,
        MoeDefaults::gating(GATING_SOFTMAX).expert_ffn_from_ffn(),
    )
}
