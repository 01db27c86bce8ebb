//! MoE, MLA and DSA architectures (and dense GLM-4, and hybrid linear-attention Qwen3-Next) against transformers fp32 on the tiny
//! reference checkpoints: logits at every position within 1e-4, greedy continuation exact,
//! token-by-token rows bit-identical to the batch.

mod common;
use common::tiny::{check_hf_greedy, check_hf_logits, check_hf_speculative};

common::tiny::arch_tests!([logits: check_hf_logits, greedy: check_hf_greedy, speculative: check_hf_speculative] {
    glm4 => "glm4",
    glm4_moe => "glm4_moe",
    glm4_moe_lite => "glm4_moe_lite",
    glm_moe_dsa => "glm_moe_dsa",
    glm_moe_dsa_shared_indexer => "glm_moe_dsa_shared_indexer",
    deepseek_v3 => "deepseek_v3",
    deepseek_v32 => "deepseek_v32",
    qwen3_moe => "qwen3_moe",
    mixtral => "mixtral",
    qwen2_moe => "qwen2_moe",
    olmoe => "olmoe",
    granitemoe => "granitemoe",
    gpt_oss => "gpt_oss",
    qwen3_next => "qwen3_next",
});
