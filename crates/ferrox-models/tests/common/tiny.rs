//! The hf-tiny reference check shared by the safetensors and GGUF tests: a model loaded from
//! `model` (a Hugging Face directory or a GGUF file) against transformers' outputs stored in
//! `reference` (`input_ids.json`, `logits.npy`, `greedy.json`).

use super::{argmax, fixture, ids, max_abs_diff, read_json, read_npy_f32};
use ferrox_models::decoder::Decoder;
use std::path::{Path, PathBuf};

/// Logits at every position within 1e-4 max abs of transformers', and the token-by-token path
/// through the cache bit-identical to the batch.
pub fn check_tiny_logits(model: &Path, reference: &Path) {
    let name = model.display();
    let dec = Decoder::load(model).unwrap_or_else(|e| panic!("{name}: {e}"));
    let input = ids(&read_json(&reference.join("input_ids.json")));
    let (shape, want) = read_npy_f32(&reference.join("logits.npy"));
    assert_eq!(shape, vec![input.len(), dec.vocab_size()]);
    let mut caches = dec.new_caches();
    let got = dec.forward_batch(&input, 0, &mut caches);
    let v = dec.vocab_size();
    let mut worst = 0f32;
    for (i, row) in got.iter().enumerate() {
        worst = worst.max(max_abs_diff(row, &want[i * v..(i + 1) * v]));
    }
    eprintln!("{name}: max abs logit diff {worst:e}");
    assert!(worst < 1e-4, "{name}: max abs logit diff {worst}");

    let mut caches = dec.new_caches();
    for (p, &t) in input.iter().enumerate() {
        let row = dec.forward_token(t, p, &mut caches);
        assert_eq!(row, got[p], "{name}: token path differs from batch at {p}");
    }
}

/// The greedy continuation in `greedy.json`, reproduced exactly.
pub fn check_tiny_greedy(model: &Path, reference: &Path) {
    let name = model.display();
    let dec = Decoder::load(model).unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = read_json(&reference.join("greedy.json"));
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
    assert_eq!(got, want, "{name}: greedy continuation");
}

/// [`check_tiny_logits`] on the `hf-tiny/{arch}` checkpoint itself.
pub fn check_hf_logits(arch: &str) {
    let dir = tiny_reference(arch);
    check_tiny_logits(&dir, &dir);
}

/// [`check_tiny_greedy`] on the `hf-tiny/{arch}` checkpoint itself.
pub fn check_hf_greedy(arch: &str) {
    let dir = tiny_reference(arch);
    check_tiny_greedy(&dir, &dir);
}

/// [`check_speculative`] on the `hf-tiny/{arch}` checkpoint.
pub fn check_hf_speculative(arch: &str) {
    check_speculative(&tiny_reference(arch), &tiny_reference(arch));
}

/// [`check_speculative`] on `gguf-tiny/{arch}.gguf`.
pub fn check_gguf_speculative(arch: &str) {
    check_speculative(&tiny_gguf(arch), &tiny_reference(arch));
}

/// Speculative decoding (the seed's prompt lookup, drafts verified in one batched forward)
/// continues `model` exactly as plain greedy decoding does, on a prompt (from `reference`)
/// whose second half repeats its first so drafts are proposed and some accepted, some
/// rejected.
pub fn check_speculative(model: &Path, reference: &Path) {
    use ferrox_models::speculative::{speculative_decode, PromptLookupSpeculator};
    let arch = model.display();
    let dec = Decoder::load(model).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let input = ids(&read_json(&reference.join("input_ids.json")));
    let mut prompt = input.clone();
    prompt.extend_from_slice(&input[..input.len() / 2]);
    let n = 24;
    let mut caches = dec.new_caches();
    let lookup = PromptLookupSpeculator::new(2, 4);
    let spec = speculative_decode(&dec, &prompt, n, &mut caches, &lookup);
    let mut caches = dec.new_caches();
    let mut logits = dec.forward_batch(&prompt, 0, &mut caches).pop().unwrap();
    let mut plain = Vec::with_capacity(n);
    for p in prompt.len()..prompt.len() + n {
        let t = argmax(&logits);
        plain.push(t);
        logits = dec.forward_token(t, p, &mut caches);
    }
    assert_eq!(spec.generated_tokens, plain, "{arch}: speculative != plain");
    assert!(
        spec.forward_calls <= n + 1,
        "{arch}: {} calls",
        spec.forward_calls
    );
}

/// The `hf-tiny/{arch}` checkpoint with transformers' outputs.
pub fn tiny_reference(arch: &str) -> PathBuf {
    fixture(&format!("hf-tiny/{arch}"))
}

/// The `gguf-tiny/{arch}.gguf` file of that checkpoint.
pub fn tiny_gguf(arch: &str) -> PathBuf {
    fixture(&format!("gguf-tiny/{arch}.gguf"))
}

/// [`check_tiny_logits`] on `gguf-tiny/{arch}.gguf` against the `hf-tiny/{arch}` reference.
pub fn check_gguf_logits(arch: &str) {
    check_tiny_logits(&tiny_gguf(arch), &tiny_reference(arch));
}

/// [`check_tiny_greedy`] on `gguf-tiny/{arch}.gguf` against the `hf-tiny/{arch}` reference.
pub fn check_gguf_greedy(arch: &str) {
    check_tiny_greedy(&tiny_gguf(arch), &tiny_reference(arch));
}

/// Both loads describe the same model (the GGUF side reconstructed from llama.cpp's keys).
pub fn check_gguf_config(arch: &str) {
    let g = Decoder::load(tiny_gguf(arch)).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let h = Decoder::load(tiny_reference(arch)).unwrap();
    let (g, h) = (&g.config, &h.config);
    assert_eq!(g.moe, h.moe, "{arch}: MoE config");
    assert_eq!(g.mla, h.mla, "{arch}: MLA config");
    assert_eq!(g.dsa, h.dsa, "{arch}: DSA config");
    assert_eq!(g.linear, h.linear, "{arch}: linear-attention sizes");
    assert_eq!(
        g.attn_output_gate, h.attn_output_gate,
        "{arch}: attention output gate"
    );
    assert_eq!(g.layer_moe, h.layer_moe, "{arch}: dense/MoE layers");
    assert_eq!(g.layer_attn, h.layer_attn, "{arch}: attention kinds");
    assert_eq!(g.no_rope, h.no_rope, "{arch}: NoPE layers");
    assert_eq!(g.rope.rotary_dim, h.rope.rotary_dim, "{arch}: rotary dim");
    assert_eq!(g.rope.scaling, h.rope.scaling, "{arch}: rope scaling");
    assert_eq!(
        (g.qk_norm, g.qkv_bias, g.post_norms, g.head_dim),
        (h.qk_norm, h.qkv_bias, h.post_norms, h.head_dim),
        "{arch}: attention switches"
    );
    assert_eq!(
        (
            g.embedding_multiplier,
            g.residual_multiplier,
            g.logit_divisor
        ),
        (
            h.embedding_multiplier,
            h.residual_multiplier,
            h.logit_divisor
        ),
        "{arch}: multipliers"
    );
    assert_eq!(
        (g.attn_scale, g.tie_embeddings),
        (h.attn_scale, h.tie_embeddings),
        "{arch}: attention scale, tied embeddings"
    );
    assert_eq!(
        (g.o_bias, g.attn_sinks, g.sliding_window, g.activation),
        (h.o_bias, h.attn_sinks, h.sliding_window, h.activation),
        "{arch}: output bias, sinks, window, activation"
    );
}

/// One module per `module: check` pair, holding a `#[test]` per `name => "fixture"` that calls
/// `check("fixture")`.
#[allow(unused_macros)] // only some test files use it
macro_rules! arch_tests {
    ([$($module:ident: $check:ident),+ $(,)?] $list:tt) => {
        $($crate::common::tiny::arch_tests!(@module $module $check $list);)+
    };
    (@module $module:ident $check:ident {$($name:ident => $dir:literal),* $(,)?}) => {
        mod $module {
            use super::*;
            $(#[test] fn $name() { $check($dir); })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use arch_tests;

/// [`arch_tests`] over the MoE / MLA / DSA checkpoints (with dense GLM-4 and hybrid
/// Qwen3-Next) that both the safetensors and the GGUF suites check.
#[allow(unused_macros)] // only some test files use it
macro_rules! moe_arch_tests {
    ($checks:tt) => {
        $crate::common::tiny::arch_tests!($checks {
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
            gpt_oss => "gpt_oss",
            granitemoe => "granitemoe",
            qwen3_next => "qwen3_next",
        });
    };
}
#[allow(unused_imports)]
pub(crate) use moe_arch_tests;
