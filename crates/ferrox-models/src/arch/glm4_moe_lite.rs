//! GLM-4.7-Flash (`glm4_moe_lite`): GLM-4.5's MoE with DeepSeek MLA attention. Its GGUF form is
//! llama.cpp's `deepseek2` (see `deepseek_v3`).
//! Reference: transformers `modeling_glm4_moe_lite.py`.

use super::tables::{DENSE_FFN, MLA_ATTN, MOE_FFN, NORMS};
use super::{no_gguf, Architecture, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("glm4_moe_lite", config_from_hf, no_gguf, tensors)
        .hf(&["glm4_moe_lite"])
        .gguf(&[]);

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, MLA_ATTN, DENSE_FFN, MOE_FFN].concat()
}

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("glm4_moe_lite", true)?;
    cfg.qkv_bias = false;
    c.mla(&mut cfg)?;
    c.sliding_from_layer_types(&mut cfg)?;
    c.deepseek_moe(&mut cfg)?;
    Ok(cfg)
}
