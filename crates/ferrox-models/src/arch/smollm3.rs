//! SmolLM3 (`smollm3`): Llama's layout with no position encoding on some layers (every 4th by
//! default: `no_rope_layers[l] == 0`). Reference: transformers `modeling_smollm3.py`
//! (`use_rope = config.no_rope_layers[layer_idx]`); llama.cpp `LLM_ARCH_SMOLLM3`
//! (`use_rope = (il + 1) % n_no_rope_layer_step != 0`, the step fixed at 4) and its converter's
//! `SmolLM3Model` (LlamaModel as is: q/k permuted, no NoPE key written).

use super::common_qwen;
use super::tables::llama_layers;
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;
use serde_json::Value;

pub static ARCH: Architecture = Architecture::new("smollm3", llama_layers)
    .hf(&["smollm3"], config_from_hf)
    .gguf(&["smollm3"], config_from_gguf);

/// Every `every`-th layer (1-based) without RoPE.
fn no_rope_every(n_layers: usize, every: usize) -> Vec<bool> {
    (0..n_layers).map(|l| (l + 1) % every == 0).collect()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = common_qwen::hf_base(c, arch)?;
    cfg.tie_embeddings = c.bool(&keys::TIE_EMBEDDINGS)?.unwrap_or(true);
    let n = cfg.n_layers;
    cfg.no_rope = match c.get(&keys::NO_ROPE_LAYERS).and_then(Value::as_array) {
        Some(flags) => {
            c.check_len(&keys::NO_ROPE_LAYERS, flags.len(), n)?;
            flags.iter().map(|f| f.as_u64() == Some(0)).collect()
        }
        None => no_rope_every(n, c.usize(&keys::NO_ROPE_INTERVAL)?.unwrap_or(4).max(1)),
    };
    Ok(cfg)
}

/// llama.cpp's `smollm3`: adjacent-pair RoPE (the converter permutes q/k), NoPE on every 4th
/// layer. GGUF keeps no `no_rope_layers`: a checkpoint with another pattern converts to a file
/// that llama.cpp, and this reader, run with the fixed one.
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, true)?;
    cfg.no_rope = no_rope_every(cfg.n_layers, 4);
    Ok(cfg)
}
