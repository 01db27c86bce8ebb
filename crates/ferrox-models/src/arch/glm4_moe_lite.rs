//! GLM-4.7-Flash (`glm4_moe_lite`): GLM-4.5's MoE with DeepSeek MLA attention. Its GGUF form is
//! llama.cpp's `deepseek2` (see `deepseek_v3`).
//! Reference: transformers `modeling_glm4_moe_lite.py`.

use super::common_deepseek::mla_moe_from_hf;
use super::tables::mla_moe_layers;
use super::Architecture;

pub static ARCH: Architecture =
    Architecture::new("glm4_moe_lite", mla_moe_layers).hf(&["glm4_moe_lite"], mla_moe_from_hf);
