//! DeepSeek-V3.2 (`deepseek_v32`): GLM-5's layout (MLA + DSA indexer + MoE) whose indexer
//! rotates halves. Reference: transformers `modeling_deepseek_v32.py`; llama.cpp `deepseek32`.

use super::common_deepseek::{dsa_from_gguf, dsa_from_hf};
use super::gguf::GATING_SOFTMAX;
use super::tables::mla_dsa_layers;
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture = Architecture::new(
    "deepseek_v32",
    config_from_hf,
    config_from_gguf,
    mla_dsa_layers,
)
.hf(&["deepseek_v32"])
.gguf(&["deepseek32"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    dsa_from_hf(c, "deepseek_v32", false)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    dsa_from_gguf(g, "deepseek_v32", GATING_SOFTMAX, false)
}
