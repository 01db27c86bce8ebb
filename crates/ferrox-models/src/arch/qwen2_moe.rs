//! Qwen2-MoE (`qwen2_moe`, Qwen1.5-MoE / Qwen2-57B-A14B): Qwen2 attention (q/k/v bias) with a
//! softmax top-k MoE (no renormalisation unless `norm_topk_prob`) plus one shared expert whose
//! output is scaled by `sigmoid(shared_expert_gate · x)`; dense FFN on `mlp_only_layers`.
//! Reference: transformers `modeling_qwen2_moe.py`; llama.cpp `LLM_ARCH_QWEN2MOE`
//! (`ffn_*_shexp`, `ffn_gate_inp_shexp`).

use super::common_qwen;
use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{DENSE_FFN, GATED_SHARED_EXPERT, NORMS, ROUTED_FFN, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("qwen2_moe", tensors)
    .hf(&["qwen2_moe"], config_from_hf)
    .gguf(&["qwen2moe"], config_from_gguf);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN, ROUTED_FFN, GATED_SHARED_EXPERT].concat()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_qwen::hf_base(c, arch)?;
    cfg.qkv_bias = true;
    common_qwen::hf_gated_shared_moe(c, &mut cfg, false)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, false)?;
    cfg.qkv_bias = true;
    g.moe(&mut cfg, MoeDefaults::gating(GATING_SOFTMAX))?;
    common_qwen::gguf_gated_shared_expert(g, &mut cfg)?;
    Ok(cfg)
}
