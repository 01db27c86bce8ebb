//! Llama (Llama 2/3.x): pre-norm GQA + SwiGLU, optional Llama-3 RoPE frequency scaling.
//! Reference: transformers `modeling_llama.py`; llama.cpp `LLM_ARCH_LLAMA`.

use super::{build_dense, dense_config_from_gguf, GgufMeta, ATTN, FFN_NORM, MLP};
use crate::config::{Arch, ModelConfig};
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

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
