//! GLM-5 / 5.1 / 5.2 (`glm_moe_dsa`): MLA + the DSA lightning indexer (top-`index_topk` keys
//! per query; GLM-5.2 layers may share the previous layer's selection and carry no indexer
//! weights) + DeepSeek-style MoE. The GLM indexer rotates adjacent pairs.
//! Reference: transformers `modeling_glm_moe_dsa.py` (fixtures/hf-tiny/FORWARD.md §5);
//! llama.cpp `glm-dsa`, indexer tensors `blk.N.indexer.{attn_q_b,attn_k,k_norm,proj}`.

use super::deepseek_v3::{mla_moe_from_gguf, mla_moe_from_hf};
use super::gguf::GATING_SIGMOID;
use super::tables::{DENSE_FFN, DSA_INDEXER, MLA_ATTN, NORMS, ROUTED_FFN, SHARED_FFN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("glm_moe_dsa", config_from_hf, config_from_gguf, tensors)
        .hf(&["glm_moe_dsa"])
        .gguf(&["glm-dsa"]);

pub fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [
        NORMS,
        MLA_ATTN,
        DSA_INDEXER,
        DENSE_FFN,
        ROUTED_FFN,
        SHARED_FFN,
    ]
    .concat()
}

/// MLA + MoE + indexer from `config.json` (`rope_interleaved`: the indexer's RoPE pairing).
pub fn dsa_from_hf(
    c: &HfConfig,
    arch: &'static str,
    rope_interleaved: bool,
) -> Result<ModelConfig, LoadError> {
    let mut cfg = mla_moe_from_hf(c, arch)?;
    c.dsa(&mut cfg, rope_interleaved)?;
    Ok(cfg)
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    dsa_from_hf(c, "glm_moe_dsa", true)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    dsa_from_gguf(g, "glm_moe_dsa", GATING_SIGMOID, true)
}

/// MLA + MoE + indexer from GGUF metadata (`gating` when the file does not say).
pub fn dsa_from_gguf(
    g: &GgufMeta,
    arch: &'static str,
    gating: usize,
    rope_interleaved: bool,
) -> Result<ModelConfig, LoadError> {
    let mut cfg = mla_moe_from_gguf(g, arch, |_| gating)?;
    g.dsa(&mut cfg, rope_interleaved)?;
    Ok(cfg)
}
