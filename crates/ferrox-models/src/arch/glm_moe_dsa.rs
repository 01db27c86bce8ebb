//! GLM-5 / 5.1 / 5.2 (`glm_moe_dsa`) and DeepSeek-V3.2 (`deepseek_v32`): MLA + the DSA
//! lightning indexer (top-`index_topk` keys per query; GLM-5.2 layers may share the previous
//! layer's selection and carry no indexer weights) + DeepSeek-style MoE. The GLM indexer rotates
//! adjacent pairs, DeepSeek-V3.2's rotates halves.
//! Reference: transformers `modeling_glm_moe_dsa.py` (fixtures/hf-tiny/FORWARD.md §5);
//! llama.cpp indexer tensors `blk.N.indexer.{attn_q_b,attn_k,k_norm,proj}`.

use super::sparse::{build_sparse, DENSE_FFN, DSA_INDEXER, HF_EXPERTS, MLA_ATTN, MOE_FFN, NORMS};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{LoadError, WeightSource};

pub fn build(cfg: ModelConfig, src: &dyn WeightSource) -> Result<Decoder, LoadError> {
    let specs = [NORMS, MLA_ATTN, DSA_INDEXER, DENSE_FFN, MOE_FFN].concat();
    build_sparse(cfg, src, &specs, &HF_EXPERTS)
}
