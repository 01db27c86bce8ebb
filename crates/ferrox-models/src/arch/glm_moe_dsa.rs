//! GLM-5 / 5.1 / 5.2 (`glm_moe_dsa`): MLA + the DSA lightning indexer (top-`index_topk` keys
//! per query; GLM-5.2 layers may share the previous layer's selection and carry no indexer
//! weights) + DeepSeek-style MoE. The GLM indexer rotates adjacent pairs.
//! Reference: transformers `modeling_glm_moe_dsa.py` (fixtures/hf-tiny/FORWARD.md §5);
//! llama.cpp `glm-dsa`, indexer tensors `blk.N.indexer.{attn_q_b,attn_k,k_norm,proj}`.

use super::common_deepseek::{dsa_from_gguf, dsa_from_hf};
use super::gguf::GATING_SIGMOID;
use super::tables::mla_dsa_layers;
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new(
    "glm_moe_dsa",
    config_from_hf,
    config_from_gguf,
    mla_dsa_layers,
)
.hf(&["glm_moe_dsa"])
.gguf(&["glm-dsa"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    dsa_from_hf(c, "glm_moe_dsa", true)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    dsa_from_gguf(g, "glm_moe_dsa", GATING_SIGMOID, true)
}
