//! MoE, MLA and DSA architectures (and dense GLM-4, and hybrid linear-attention Qwen3-Next) against transformers fp32 on the tiny
//! reference checkpoints: logits at every position within 1e-4, greedy continuation exact,
//! token-by-token rows bit-identical to the batch.

mod common;
use common::tiny::{check_hf_greedy, check_hf_logits, check_hf_speculative};

common::tiny::moe_arch_tests!([logits: check_hf_logits, greedy: check_hf_greedy, speculative: check_hf_speculative]);
