//! The seed's own tests (`shared/seed/ferrox_models/speculative.rs`, `mod tests`), verbatim
//! but for their config helper, which is the family's `glm_5_2_tiny`: a conformance suite for
//! the seed API, which runs over the engine's decode loop.

use super::*;
// The seed's `tiny_test_config` is GLM-5.2 shrunk exactly as the family's test preset is:
// the one definition serves under the seed's name, so its tests below stay as written.
use crate::arch::glm_moe_dsa::glm_5_2_tiny as tiny_test_config;
use crate::decoder::Decoder;
use ferrox_core::cache::KvCache;

// ---- PromptLookupSpeculator tests ----

#[test]
fn proposes_the_continuation_after_a_real_repeat() {
    let spec = PromptLookupSpeculator::new(2, 4);
    // "...1 2 3 4 5 9 9 9 1 2" -> earlier "1 2" occurs at the very
    // start (indices 0-1); the 4 tokens that followed it are
    // "3 4 5 9" (capped at max_draft_len=4).
    let history = vec![1, 2, 3, 4, 5, 9, 9, 9, 1, 2];
    assert_eq!(spec.propose(&history), vec![3, 4, 5, 9]);
}

#[test]
fn respects_max_draft_len() {
    let spec = PromptLookupSpeculator::new(2, 2);
    let history = vec![1, 2, 3, 4, 5, 6, 7, 1, 2];
    assert_eq!(spec.propose(&history), vec![3, 4]);
}

#[test]
fn returns_empty_when_no_earlier_match_exists() {
    let spec = PromptLookupSpeculator::new(2, 4);
    let history = vec![1, 2, 3, 4, 5];
    assert_eq!(spec.propose(&history), Vec::<usize>::new());
}

#[test]
fn returns_empty_when_history_too_short() {
    let spec = PromptLookupSpeculator::new(3, 4);
    let history = vec![1, 2, 3];
    assert_eq!(spec.propose(&history), Vec::<usize>::new());
}

#[test]
fn finds_the_most_recent_match_when_several_exist() {
    let spec = PromptLookupSpeculator::new(1, 3);
    // needle = [9]. Earlier occurrences at index 0 (-> [8,7,6]) and
    // index 4 (-> [5,4,9]); most recent (index 4) should win.
    let history = vec![9, 8, 7, 6, 9, 5, 4, 9];
    assert_eq!(spec.propose(&history), vec![5, 4, 9]);
}

// ---- speculative_decode correctness tests ----

#[test]
fn speculative_decode_matches_greedy_token_for_token() {
    // The property that matters most: speculative decoding must be
    // quality-neutral. Build a prompt with a real repeated pattern
    // so the speculator actually proposes something non-trivial,
    // then check token-for-token identity against plain greedy
    // forward_token decoding on a separately constructed but
    // identically-seeded decoder.
    let cfg = tiny_test_config();
    let vocab = 8;
    let prompt = vec![1usize, 2, 3, 4, 1, 2];
    let max_new = 6;

    let decoder_a = Decoder::new_random_small(cfg.clone(), 2, vocab);
    let mut caches_a: Vec<KvCache> = (0..2)
        .map(|_| KvCache::new(decoder_a.config.n_kv_heads, decoder_a.config.head_dim))
        .collect();
    let speculator = PromptLookupSpeculator::new(2, 3);
    let result = speculative_decode(&decoder_a, &prompt, max_new, &mut caches_a, &speculator);

    let decoder_b = Decoder::new_random_small(cfg, 2, vocab);
    let mut caches_b: Vec<KvCache> = (0..2)
        .map(|_| KvCache::new(decoder_b.config.n_kv_heads, decoder_b.config.head_dim))
        .collect();
    let mut pending = decoder_b
        .forward_batch(&prompt, 0, &mut caches_b)
        .pop()
        .unwrap();
    let mut greedy = Vec::with_capacity(max_new);
    for pos in (prompt.len()..).take(max_new) {
        let tok = argmax(&pending);
        greedy.push(tok);
        pending = decoder_b.forward_token(tok, pos, &mut caches_b);
    }

    assert_eq!(
        result.generated_tokens, greedy,
        "speculative decode must produce exactly the same tokens as plain greedy decode"
    );
}

#[test]
fn speculative_decode_saves_real_calls_when_drafts_hit() {
    // Craft a scenario where the FIRST round's draft is guaranteed
    // to be checked against a real repeat (prompt = "A B A B",
    // ngram_size=2 will find "A B" repeating and propose whatever
    // came before, if anything did). This test doesn't assert the
    // draft is *accepted* (that depends on the random weights'
    // actual predictions, which this test doesn't control) --
    // it asserts the WEAKER but still meaningful property that
    // forward_calls is never more than max_new_tokens (i.e.
    // speculation is never worse than plain sequential decode) and
    // reports tokens_per_call for visibility.
    let cfg = tiny_test_config();
    let vocab = 8;
    let prompt = vec![1usize, 2, 3, 1, 2];
    let max_new = 8;

    let decoder = Decoder::new_random_small(cfg, 2, vocab);
    let mut caches: Vec<KvCache> = (0..2)
        .map(|_| KvCache::new(decoder.config.n_kv_heads, decoder.config.head_dim))
        .collect();
    let speculator = PromptLookupSpeculator::new(2, 4);
    let result = speculative_decode(&decoder, &prompt, max_new, &mut caches, &speculator);

    assert_eq!(result.tokens_generated, max_new);
    assert!(
        result.forward_calls <= max_new,
        "speculative decode must never need MORE forward_batch calls than plain sequential decode would (calls={}, tokens={})",
        result.forward_calls,
        max_new
    );
}

#[test]
fn speculative_decode_with_no_repeats_falls_back_to_one_token_per_call() {
    // A prompt with no internal repeats at all (each token
    // distinct, ngram_size=3 means nothing can ever match) must
    // still work correctly, just without any speedup: forward_calls
    // should equal tokens_generated exactly (batch size 1 every
    // round), matching plain sequential decode's call count.
    let cfg = tiny_test_config();
    let vocab = 8;
    let prompt = vec![1usize, 2, 3];
    let max_new = 5;

    let decoder = Decoder::new_random_small(cfg, 2, vocab);
    let mut caches: Vec<KvCache> = (0..2)
        .map(|_| KvCache::new(decoder.config.n_kv_heads, decoder.config.head_dim))
        .collect();
    let speculator = PromptLookupSpeculator::new(10, 4); // ngram far longer than any possible history
    let result = speculative_decode(&decoder, &prompt, max_new, &mut caches, &speculator);

    assert_eq!(result.tokens_generated, max_new);
    assert_eq!(
        result.forward_calls,
        1 + max_new,
        "prefill (1 call) + one call per token when nothing ever matches"
    );
}
