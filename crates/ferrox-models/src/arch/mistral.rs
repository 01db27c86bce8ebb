//! Mistral (`mistral`): Llama's layout with a sliding window on every layer.
//! Reference: transformers `modeling_mistral.py` (`MistralConfig.sliding_window`); llama.cpp
//! converts Mistral as `llama` (`LlamaModel`, q/k rows permuted to adjacent-pair RoPE) and
//! writes `llama.attention.sliding_window` when the window is set; this entry claims those
//! files (without experts: Mixtral's), Llama the rest.

use super::tables::llama_layers;
use super::{keys, Architecture, Claim::Has, Claim::Lacks, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new("mistral", llama_layers)
    .hf(&["mistral"], config_from_hf)
    .gguf(&["llama"], config_from_gguf)
    .claims(&[Lacks(&keys::EXPERTS), Has(&keys::SLIDING_WINDOW)]);

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    c.sliding_all(&mut cfg, true)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, true)?;
    g.sliding_all(&mut cfg)?;
    Ok(cfg)
}
