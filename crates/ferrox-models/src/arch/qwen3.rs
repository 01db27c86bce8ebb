//! Qwen3 (dense): Llama layout plus per-head RMSNorm of q and k before RoPE, explicit head_dim.
//! Reference: transformers `modeling_qwen3.py`; llama.cpp `LLM_ARCH_QWEN3`.

use super::{build_dense, dense_config_from_gguf, GgufMeta, ATTN, FFN_NORM, MLP, QK_NORM};
use crate::config::{Arch, ModelConfig};
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    build_dense(cfg, src, &[ATTN, QK_NORM, FFN_NORM, MLP])
}

pub fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let mut cfg = dense_config_from_gguf(g, Arch::Qwen3)?;
    cfg.qk_norm = true;
    Ok(cfg)
}
