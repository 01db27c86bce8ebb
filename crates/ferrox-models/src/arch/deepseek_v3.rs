//! DeepSeek-V3 (`deepseek_v3`): MLA with YaRN RoPE (interleaved pairs on the rope slice,
//! `mscale²` softmax correction), dense FFN on the first `first_k_dense_replace` layers, then the
//! sigmoid-routed MoE with correction bias, grouped top-k, routed scaling and shared experts.
//! Its GGUF form (`deepseek2`) also carries GLM-4.7-Flash.
//! Reference: transformers `modeling_deepseek_v3.py`; llama.cpp `LLM_ARCH_DEEPSEEK2`.

use super::common_deepseek::{mla_moe_from_gguf, mla_moe_from_hf};
use super::gguf::{GATING_SIGMOID, GATING_SOFTMAX};
use super::tables::mla_moe_layers;
use super::{Architecture, GgufMeta};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new("deepseek_v3", mla_moe_layers)
    .hf(&["deepseek_v3"], mla_moe_from_hf)
    .gguf(&["deepseek2"], config_from_gguf);

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    // llama.cpp: DeepSeek-V2-era files have no gating key; GLM-4.7-Flash (47/48 layers, GLM
    // vocabulary) is the sigmoid exception.
    mla_moe_from_gguf(g, arch, |cfg| {
        if matches!(cfg.n_layers, 47 | 48) && cfg.vocab_size == 154_880 {
            GATING_SIGMOID
        } else {
            GATING_SOFTMAX
        }
    })
}
