//! Qwen3-MoE (`qwen3_moe`): Qwen3 attention (per-head QK norm) with a softmax-routed MoE (no
//! shared expert) on every layer except `mlp_only_layers`, sliding window on all layers when
//! enabled. Reference: transformers `modeling_qwen3_moe.py`; llama.cpp `LLM_ARCH_QWEN3MOE`.

use super::sparse::{build_sparse, DENSE_FFN, HF_EXPERTS, MOE_FFN, NORMS, STD_ATTN};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    let specs = [NORMS, STD_ATTN, DENSE_FFN, MOE_FFN].concat();
    build_sparse(cfg, src, &specs, &HF_EXPERTS)
}
