//! Qwen2 / Qwen2.5: Llama layout plus q/k/v projection biases, optional sliding window on the
//! upper layers. Reference: transformers `modeling_qwen2.py`; llama.cpp `LLM_ARCH_QWEN2`.

use super::{build_dense, dense_config_from_gguf, GgufMeta, ATTN, FFN_NORM, MLP, QKV_BIAS};
use crate::config::{Arch, ModelConfig};
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    build_dense(cfg, src, &[ATTN, QKV_BIAS, FFN_NORM, MLP])
}

pub fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = dense_config_from_gguf(g, Arch::Qwen2)?;
    cfg.qkv_bias = true;
    Ok(cfg)
}
