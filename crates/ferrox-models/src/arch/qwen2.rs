//! Qwen2 / Qwen2.5: Llama layout plus q/k/v projection biases, optional sliding window on the
//! upper layers. Reference: transformers `modeling_qwen2.py`; llama.cpp `LLM_ARCH_QWEN2`.

use super::tables::{DENSE_FFN, NORMS, STD_ATTN};
use super::{Architecture, GgufMeta, HfConfig};
use crate::config::ModelConfig;
use crate::weights::{LoadError, TensorSpec};

pub static ARCH: Architecture =
    Architecture::new("qwen2", config_from_hf, config_from_gguf, tensors)
        .hf(&["qwen2"])
        .gguf(&["qwen2"]);

fn config_from_hf(c: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base("qwen2", false)?;
    cfg.qkv_bias = true;
    c.qwen_sliding(&mut cfg)?;
    Ok(cfg)
}

fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base("qwen2", false)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN].concat()
}
