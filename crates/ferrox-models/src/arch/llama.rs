//! Llama (Llama 2/3.x): pre-norm GQA + SwiGLU, optional Llama-3 RoPE frequency scaling.
//! Reference: transformers `modeling_llama.py`; llama.cpp `LLM_ARCH_LLAMA`.

use super::{
    build_dense, dense_config_from_gguf, dense_config_from_hf, GgufMeta, HfConfig, ATTN, FFN_NORM,
    MLP,
};
use crate::config::{Arch, ModelConfig};
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

pub fn config_from_hf(hf: &HfConfig) -> Result<ModelConfig, LoadError> {
    let mut cfg = dense_config_from_hf(hf, Arch::Llama)?;
    if hf.bool("attention_bias", false) || hf.bool("mlp_bias", false) {
        return Err(LoadError::Config(
            "llama with attention/MLP bias is not supported".into(),
        ));
    }
    cfg.sliding_window = None;
    Ok(cfg)
}

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    build_dense(cfg, src, &[ATTN, FFN_NORM, MLP])
}

/// llama.cpp's converter permutes q/k rows so GGUF Llama rotates adjacent pairs.
pub fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    if g.file.tensor("rope_freqs.weight").is_some() {
        return Err(LoadError::Config(
            "GGUF Llama-3 RoPE frequency factors (rope_freqs.weight) are not supported".into(),
        ));
    }
    let mut cfg = dense_config_from_gguf(g, Arch::Llama)?;
    cfg.rope.interleaved = true;
    Ok(cfg)
}
