//! Continuous batching: one `forward_multi` over several sequences (a prefill, a decode step
//! and a draft verify, each at its own position in its own caches) gives every row bit for bit
//! what the sequence's own `forward_from` gives, on the dense, sliding-window and
//! MLA + DSA + MoE and hybrid linear-attention (Qwen3-Next) tiny checkpoints and on a real
//! quantized model.

use ferrox_core::cache::KvCache;
use ferrox_models::decoder::{Decoder, SeqBatch};
use std::path::Path;

fn tiny(arch: &str) -> Decoder {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf-tiny")
        .join(arch);
    Decoder::load(&dir).unwrap_or_else(|e| panic!("{arch}: {e}"))
}

/// Caches holding `history` (fed in one call).
fn warm(d: &Decoder, history: &[usize]) -> Vec<KvCache> {
    let mut c = d.new_caches();
    if !history.is_empty() {
        d.forward_from(history, 0, &mut c, history.len());
    }
    c
}

fn check(d: &Decoder, name: &str) {
    let v = d.vocab_size();
    let ids = |seed: usize, n: usize| -> Vec<usize> {
        (0..n)
            .map(|i| (seed * 131 + i * 71 + i * i * 7) % v)
            .collect()
    };
    // (cached history, new tokens, first row wanting logits)
    let cases = [
        (vec![], ids(1, 9), 0),
        (ids(2, 11), ids(3, 1), 0),
        (ids(4, 6), ids(5, 4), 0),
        (ids(6, 3), ids(7, 5), 4),
    ];
    let mut alone = Vec::new();
    for (hist, new, first) in &cases {
        let mut c = warm(d, hist);
        alone.extend(d.forward_from(new, hist.len(), &mut c, *first).concat());
    }
    let mut caches: Vec<Vec<KvCache>> = cases.iter().map(|(h, _, _)| warm(d, h)).collect();
    let mut seqs: Vec<SeqBatch<'_>> = cases
        .iter()
        .zip(caches.iter_mut())
        .enumerate()
        .map(|(i, ((hist, new, first), c))| SeqBatch {
            tokens: new,
            pos: hist.len(),
            caches: c,
            first_logit_row: *first,
            key: i as u64,
            tree: None,
        })
        .collect();
    let mut together = Vec::new();
    d.forward_multi(&mut seqs, &mut together);
    assert_eq!(together.len(), alone.len(), "{name}: logit rows");
    let same = together
        .iter()
        .zip(&alone)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "{name}: multi-sequence rows differ from single-sequence rows"
    );
    // The caches end where each sequence's own forward leaves them.
    for ((hist, new, _), c) in cases.iter().zip(&caches) {
        assert!(
            c.iter().all(|k| k.len() == hist.len() + new.len()),
            "{name}"
        );
    }
}

#[test]
fn multi_sequence_rows_equal_single_sequence_rows_on_tiny_checkpoints() {
    for arch in [
        "llama",
        "gemma3_text",
        "qwen3_moe",
        "glm_moe_dsa",
        "glm_moe_dsa_shared_indexer",
        "qwen3_next",
    ] {
        check(&tiny(arch), arch);
    }
}

#[test]
fn multi_sequence_rows_equal_single_sequence_rows_on_qwen() {
    let path = ferrox_hub::ensure_model("qwen2.5-coder:0.5b-instruct").unwrap();
    check(&Decoder::load(path).unwrap(), "qwen2.5-coder:0.5b-instruct");
}
