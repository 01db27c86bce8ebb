//! DeepSeek-V3 (`deepseek_v3`): MLA with YaRN RoPE (interleaved pairs on the rope slice,
//! `mscale²` softmax correction), dense FFN on the first `first_k_dense_replace` layers, then the
//! sigmoid-routed MoE with correction bias, grouped top-k, routed scaling and shared experts.
//! Reference: transformers `modeling_deepseek_v3.py`; llama.cpp `LLM_ARCH_DEEPSEEK2`.

use super::sparse::{build_sparse, DENSE_FFN, HF_EXPERTS, MLA_ATTN, MOE_FFN, NORMS};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    let specs = [NORMS, MLA_ATTN, DENSE_FFN, MOE_FFN].concat();
    build_sparse(cfg, src, &specs, &HF_EXPERTS)
}
