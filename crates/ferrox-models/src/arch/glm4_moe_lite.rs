//! GLM-4.7-Flash (`glm4_moe_lite`): GLM-4.5's MoE with DeepSeek MLA attention. Its GGUF form is
//! llama.cpp's `deepseek2` (see `deepseek_v3`).
//! Reference: transformers `modeling_glm4_moe_lite.py`.

use super::common_deepseek::mla_moe_from_hf;
use super::tables::mla_moe_layers;
use super::{no_gguf, Architecture, HfConfig};
use crate::config::ModelConfig;
use crate::weights::LoadError;

pub static ARCH: Architecture =
    Architecture::new("glm4_moe_lite", config_from_hf, no_gguf, mla_moe_layers)
        .hf(&["glm4_moe_lite"])
        .gguf(&[]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    mla_moe_from_hf(c, "glm4_moe_lite")
}
