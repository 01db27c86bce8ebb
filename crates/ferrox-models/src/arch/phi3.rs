//! Phi-3 / 3.5 / 4-mini (`phi3`): Llama's layout with fused `qkv_proj` (`[q; k; v]` rows) and
//! `gate_up_proj` (gate rows, then up rows), and LongRoPE: per-pair frequency divisors (short
//! factors, or long ones past the original context) with cos/sin scaled by
//! `sqrt(1 + ln(max_pos / original) / ln(original))`.
//! Reference: transformers `modeling_phi3.py` and `_compute_longrope_parameters`; llama.cpp
//! `LLM_ARCH_PHI3` (`attn_qkv`, fused `ffn_up`, `rope_factors_{short,long}`). LongRoPE is read
//! by the shared config reader (`HfConfig::base`).

use super::tables::{ffn2, NORMS};
use super::{no_gguf, Architecture, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("phi3", config_from_hf, no_gguf, tensors).hf(&["phi3"]);

fn qkv_rows(c: &ModelConfig) -> usize {
    (c.n_heads + 2 * c.n_kv_heads) * c.head_dim
}

const FUSED: &[TensorSpec] = table![
    "blk.{}.attn_qkv.weight" => "model.layers.{}.self_attn.qkv_proj.weight", [Of(qkv_rows), Hidden];
    "blk.{}.attn_output.weight" => "model.layers.{}.self_attn.o_proj.weight", [Hidden, QDim];
    "blk.{}.ffn_up.weight" => "model.layers.{}.mlp.gate_up_proj.weight", [Of(ffn2), Hidden];
    "blk.{}.ffn_down.weight" => "model.layers.{}.mlp.down_proj.weight", [Hidden, Ffn];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, FUSED].concat()
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("phi3", false)?;
    c.sliding_from_layer_types(&mut cfg)?;
    Ok(cfg)
}
