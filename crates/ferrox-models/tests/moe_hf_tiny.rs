//! MoE, MLA and DSA architectures (and dense GLM-4) against transformers fp32 on the tiny
//! reference checkpoints: logits at every position within 1e-4, greedy continuation exact,
//! token-by-token rows bit-identical to the batch.

mod common;
use common::tiny::{check_tiny_greedy, check_tiny_logits};
use common::*;

fn check_logits(arch: &str) {
    let dir = fixture(&format!("hf-tiny/{arch}"));
    check_tiny_logits(&dir, &dir);
}

fn check_greedy(arch: &str) {
    let dir = fixture(&format!("hf-tiny/{arch}"));
    check_tiny_greedy(&dir, &dir);
}

macro_rules! arch_tests {
    ($($name:ident => $dir:literal),* $(,)?) => {
        mod logits {
            use super::*;
            $(#[test] fn $name() { check_logits($dir); })*
        }
        mod greedy {
            use super::*;
            $(#[test] fn $name() { check_greedy($dir); })*
        }
    };
}

arch_tests! {
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
}
