//! The module's own tests of the seed API: lookup, equality with plain greedy, call counts.

use super::*;
use crate::decoder::Decoder;
use crate::ModelConfig;
use crate::TokenId;
use ferrox_core::cache::KvCache;

/// glm_5_2() shrunk the way the seed's tests shrink it: tiny width and MoE, GLM-5 MLA/DSA.
fn shrunk() -> ModelConfig {
    crate::arch::glm_moe_dsa::glm_5_2_tiny()
}

fn seed_caches(d: &Decoder, n: usize) -> Vec<KvCache> {
    (0..n)
        .map(|_| KvCache::new(d.config.n_kv_heads, d.config.head_dim))
        .collect()
}

/// [`speculative_decode`] of `n` tokens after `prompt` on fresh caches (returned too).
fn lookup_decode(
    d: &Decoder,
    prompt: &[TokenId],
    n: usize,
    speculator: PromptLookupSpeculator,
) -> (SpeculativeDecodeResult, Vec<KvCache>) {
    let mut caches = seed_caches(d, 2);
    let r = speculative_decode(d, prompt, n, &mut caches, &speculator);
    (r, caches)
}

fn plain_greedy(d: &Decoder, prompt: &[TokenId], n: usize) -> Vec<TokenId> {
    let mut caches = seed_caches(d, d.layers.len());
    let mut logits = d.forward_batch(prompt, 0, &mut caches).pop().unwrap();
    let mut out = Vec::new();
    for pos in prompt.len()..prompt.len() + n {
        let t = argmax(&logits);
        out.push(t);
        logits = d.forward_token(t, pos, &mut caches);
    }
    out
}

#[test]
fn lookup_takes_the_tokens_after_an_earlier_repeat() {
    let s = PromptLookupSpeculator::new(2, 4);
    assert_eq!(s.propose(&[7, 8, 1, 2, 6, 6, 7, 8]), vec![1, 2, 6, 6]);
    // Capped by max_draft_len, and by the end of the history.
    assert_eq!(
        PromptLookupSpeculator::new(2, 2).propose(&[7, 8, 1, 2, 3, 7, 8]),
        vec![1, 2]
    );
    assert_eq!(
        PromptLookupSpeculator::new(1, 9).propose(&[4, 5, 4]),
        vec![5, 4]
    );
}

#[test]
fn lookup_prefers_the_latest_occurrence() {
    let s = PromptLookupSpeculator::new(1, 2);
    assert_eq!(s.propose(&[3, 1, 1, 3, 2, 2, 3]), vec![2, 2]);
}

#[test]
fn lookup_without_match_or_history_is_empty() {
    let s = PromptLookupSpeculator::new(2, 4);
    assert!(s.propose(&[5, 6, 7, 8, 9]).is_empty());
    assert!(PromptLookupSpeculator::new(3, 4)
        .propose(&[1, 1, 1])
        .is_empty());
    assert!(s.propose(&[]).is_empty());
    // The suffix alone never matches itself.
    assert!(PromptLookupSpeculator::new(2, 1)
        .propose(&[1, 2])
        .is_empty());
}

#[test]
#[should_panic(expected = "ngram_size")]
fn zero_ngram_panics() {
    PromptLookupSpeculator::new(0, 1);
}

#[test]
#[should_panic(expected = "max_draft_len")]
fn zero_draft_panics() {
    PromptLookupSpeculator::new(1, 0);
}

#[test]
fn equals_plain_greedy_on_the_shrunk_glm_5_2() {
    let d = Decoder::new_random_small(shrunk(), 2, 8);
    for (prompt, n) in [(vec![1, 2, 3, 4, 1, 2], 6), (vec![3, 1, 3, 1, 3], 9)] {
        let (r, caches) = lookup_decode(&d, &prompt, n, PromptLookupSpeculator::new(2, 3));
        assert_eq!(
            r.generated_tokens,
            plain_greedy(&d, &prompt, n),
            "prompt {prompt:?}"
        );
        assert_eq!(r.tokens_generated, n);
        assert_eq!(caches[0].len(), prompt.len() + n);
    }
}

#[test]
fn accepted_drafts_save_calls() {
    let d = Decoder::new_random_small(shrunk(), 2, 8);
    let prompt = [1, 2, 3, 1, 2];
    let (r, _) = lookup_decode(&d, &prompt, 8, PromptLookupSpeculator::new(2, 4));
    assert_eq!(r.tokens_generated, 8);
    assert!(r.forward_calls <= 8, "calls {}", r.forward_calls);
    assert!(r.tokens_per_call() > 1.0);
    assert_eq!(r.generated_tokens, plain_greedy(&d, &prompt, 8));
}

#[test]
fn no_match_means_one_call_per_token() {
    let d = Decoder::new_random_small(shrunk(), 2, 8);
    let (r, _) = lookup_decode(&d, &[1, 2, 3], 5, PromptLookupSpeculator::new(10, 4));
    assert_eq!(r.tokens_generated, 5);
    assert_eq!(r.forward_calls, 6);
    assert_eq!(r.tokens_per_call(), 5.0 / 6.0);
}

#[test]
fn tokens_per_call_of_nothing_is_zero() {
    let r = SpeculativeDecodeResult {
        generated_tokens: vec![],
        forward_calls: 0,
        tokens_generated: 0,
    };
    assert_eq!(r.tokens_per_call(), 0.0);
}
