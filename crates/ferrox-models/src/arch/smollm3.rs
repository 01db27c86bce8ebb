//! SmolLM3 (`smollm3`): Llama's layout with no position encoding on some layers (every 4th by
//! default: `no_rope_layers[l] == 0`). Reference: transformers `modeling_smollm3.py`
//! (`use_rope = config.no_rope_layers[layer_idx]`).

use super::tables::llama_layers;
use super::{no_gguf, Architecture, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;
use serde_json::Value;

pub static ARCH: Architecture =
    Architecture::new("smollm3", config_from_hf, no_gguf, llama_layers).hf(&["smollm3"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("smollm3", false)?;
    cfg.tie_embeddings = c.bool("tie_word_embeddings").unwrap_or(true);
    c.qwen_sliding(&mut cfg)?;
    let n = cfg.n_layers;
    cfg.no_rope = match c.get("no_rope_layers").and_then(Value::as_array) {
        Some(flags) => {
            if flags.len() != n {
                return Err(LoadError::Config(format!(
                    "config.json: no_rope_layers has {} entries for {n} layers",
                    flags.len()
                )));
            }
            flags.iter().map(|f| f.as_u64() == Some(0)).collect()
        }
        None => {
            let every = c.usize("no_rope_layer_interval").unwrap_or(4).max(1);
            (0..n).map(|l| (l + 1) % every == 0).collect()
        }
    };
    Ok(cfg)
}
