//! Phi-3 / 3.5 / 4-mini (`phi3`): Llama's layout with fused `qkv_proj` (`[q; k; v]` rows) and
//! `gate_up_proj` (gate rows, then up rows), and LongRoPE: per-pair frequency divisors (the
//! short set below the original context, the long set from there on; see `blocks::rope` for
//! how that compares with transformers and llama.cpp) with cos/sin scaled by
//! `sqrt(1 + ln(max_pos / original) / ln(original))`.
//! Reference: transformers `modeling_phi3.py` and `_compute_longrope_parameters`; llama.cpp
//! `LLM_ARCH_PHI3` (`attn_qkv`, fused `ffn_up`, `rope_factors_{short,long}`, NeoX RoPE) and
//! its converter's `Phi3MiniModel`. LongRoPE is read by the shared config readers
//! (`HfConfig::base`, `GgufMeta::base`).

use super::gguf::base_only;
use super::hf::llama_like;
use super::tables::{ffn2, NORMS};
use super::Architecture;
use crate::config::ModelConfig;
use crate::weights::{table, Dim::*, TensorSpec};

pub static ARCH: Architecture = Architecture::new("phi3", tensors)
    .hf(&["phi3"], llama_like)
    // llama.cpp's `phi3`: q/k rows not permuted (NeoX halves). The converter writes
    // `attention.sliding_window` (0 when unset), which llama.cpp ignores for Phi-3 ("Phi SWA
    // is currently disabled"); the Hub reader slides only with `layer_types`, which a GGUF
    // has not, so no layer slides here either.
    .gguf(&["phi3"], base_only::<false>);

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
