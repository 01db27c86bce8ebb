//! `bench/moe-gguf` writes random-weight MoE GGUFs at the GLM-4.5-Air (`glm4moe`) and
//! Qwen3-30B-A3B (`qwen3moe`) shapes for the llama.cpp comparison. Its files load here with the
//! config the shape names, give finite logits, and keep batch invariance: every row of a batched
//! forward equals the token-by-token path bit for bit (the batch runs the grouped-by-expert
//! path, several rows per expert; the tokens run one expert set each). The `--small`
//! structure runs on every shape and type; the real Qwen3-30B-A3B layer (one layer, ≈0.7 GB with
//! the 152k-token embedding and head) runs too, so the real widths are covered.

mod common;

use ferrox_models::decoder::Decoder;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `bench/moe-gguf SHAPE OUT --layers N EXTRA...` into the target dir (never skipped: a
/// missing Python package fails the test with the script's message).
fn generate(shape: &str, layers: usize, extra: &[&str]) -> PathBuf {
    let tok = ferrox_hub::ensure_model("qwen2.5-coder:0.5b-instruct")
        .unwrap_or_else(|e| panic!("tokenizer model: {e}"));
    let dir = repo().join("target/moe-gguf-test");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{shape}-{layers}{}.gguf", extra.join("")));
    let status = common::python()
        .arg(repo().join("bench/moe-gguf"))
        .args([
            shape,
            out.to_str().unwrap(),
            "--layers",
            &layers.to_string(),
        ])
        .args(extra)
        .arg("--tokenizer")
        .arg(&tok)
        .status()
        .expect("python3 runs (scripts/test makes .venv)");
    assert!(status.success(), "bench/moe-gguf {shape} failed");
    out
}

struct Want {
    arch: &'static str,
    hidden: usize,
    experts: usize,
    active: usize,
    shared: usize,
    dense_layers: usize,
}

/// Loads `path`, checks its config, runs `n` tokens as one batch and one by one.
fn check(path: &Path, want: &Want, n: usize) {
    let dec = Decoder::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let c = &dec.config;
    assert_eq!(c.arch, want.arch);
    assert_eq!(c.hidden_dim, want.hidden);
    assert_eq!(c.moe.n_experts, want.experts);
    assert_eq!(c.moe.n_experts_active, want.active);
    assert_eq!(c.moe.n_shared_experts, want.shared);
    for l in 0..dec.layers.len() {
        assert_eq!(c.is_moe_layer(l), l >= want.dense_layers, "layer {l}");
    }
    assert_eq!(dec.vocab_size(), 151_936, "the copied qwen2.5 vocabulary");

    // Token ids spread over the vocabulary, as llama-bench's random prompts are.
    let ids: Vec<usize> = (0..n).map(|i| (i * 7919 + 13) % 151_936).collect();
    let batch = dec.forward_batch(&ids, 0, &mut dec.new_caches());
    let mut caches = dec.new_caches();
    for (p, &t) in ids.iter().enumerate() {
        let row = &batch[p];
        assert!(
            row.iter().all(|v| v.is_finite()),
            "position {p}: non-finite"
        );
        let sd = (row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32).sqrt();
        assert!((0.05..50.0).contains(&sd), "position {p}: logit RMS {sd}");
        assert_eq!(
            &dec.forward_token(t, p, &mut caches),
            row,
            "token path at {p}"
        );
    }
}

const GLM_SMALL: Want = Want {
    arch: "glm4_moe",
    hidden: 512,
    experts: 16,
    active: 4,
    shared: 1,
    dense_layers: 1,
};

const QWEN_SMALL: Want = Want {
    arch: "qwen3_moe",
    hidden: 512,
    experts: 16,
    active: 4,
    shared: 0,
    dense_layers: 0,
};

#[test]
fn glm45_air_small_q4_k() {
    check(&generate("glm45-air", 3, &["--small"]), &GLM_SMALL, 40);
}

#[test]
fn glm45_air_small_q8_0() {
    let path = generate("glm45-air", 2, &["--small", "--type", "q8_0"]);
    check(&path, &GLM_SMALL, 24);
}

#[test]
fn qwen3_30b_a3b_small_q4_k() {
    check(&generate("qwen3-30b-a3b", 2, &["--small"]), &QWEN_SMALL, 40);
}

/// One real-size Qwen3-30B-A3B layer: 128 experts of 768 over hidden 2048, top 8.
#[test]
fn qwen3_30b_a3b_real_layer() {
    let want = Want {
        arch: "qwen3_moe",
        hidden: 2048,
        experts: 128,
        active: 8,
        shared: 0,
        dense_layers: 0,
    };
    check(&generate("qwen3-30b-a3b", 1, &[]), &want, 20);
}

#[test]
fn glm45_air_needs_an_moe_layer() {
    let out = common::python()
        .arg(repo().join("bench/moe-gguf"))
        .args(["glm45-air", "/nonexistent/x.gguf", "--layers", "1"])
        .output()
        .expect("python3 runs (scripts/test makes .venv)");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs more than 1 layer"), "{err}");
}
