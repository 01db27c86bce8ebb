//! MoE, MLA and DSA architectures (and dense GLM-4) against transformers fp32 on the tiny
//! reference checkpoints: logits at every position within 1e-4, greedy continuation exact,
//! token-by-token rows bit-identical to the batch.

mod common;
use common::*;
use ferrox_models::decoder::Decoder;

fn check_logits(arch: &str) {
    let dir = fixture(&format!("hf-tiny/{arch}"));
    let dec = Decoder::load(&dir).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let input = ids(&read_json(&dir.join("input_ids.json")));
    let (shape, want) = read_npy_f32(&dir.join("logits.npy"));
    assert_eq!(shape, vec![input.len(), dec.vocab_size()]);
    let mut caches = dec.new_caches();
    let got = dec.forward_batch(&input, 0, &mut caches);
    let v = dec.vocab_size();
    let mut worst = 0f32;
    for (i, row) in got.iter().enumerate() {
        worst = worst.max(max_abs_diff(row, &want[i * v..(i + 1) * v]));
    }
    eprintln!("{arch}: max abs logit diff {worst:e}");
    assert!(worst < 1e-4, "{arch}: max abs logit diff {worst}");

    let mut caches = dec.new_caches();
    for (p, &t) in input.iter().enumerate() {
        let row = dec.forward_token(t, p, &mut caches);
        assert_eq!(row, got[p], "{arch}: token path differs from batch at {p}");
    }
}

fn check_greedy(arch: &str) {
    let dir = fixture(&format!("hf-tiny/{arch}"));
    let dec = Decoder::load(&dir).unwrap();
    let g = read_json(&dir.join("greedy.json"));
    let prompt = ids(&g["prompt_ids"]);
    let want = ids(&g["new_ids"]);
    let mut caches = dec.new_caches();
    let mut logits = dec.forward_from(&prompt, 0, &mut caches, prompt.len() - 1);
    let mut got = Vec::new();
    for p in prompt.len()..prompt.len() + want.len() {
        let t = argmax(logits.last().unwrap());
        got.push(t);
        logits = vec![dec.forward_token(t, p, &mut caches)];
    }
    assert_eq!(got, want, "{arch}: greedy continuation");
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
}
