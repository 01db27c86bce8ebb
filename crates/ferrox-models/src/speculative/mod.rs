//! Prompt-lookup speculative decoding (the seed's design, `shared/seed/ferrox_models/speculative.rs`;
//! the same idea as "prompt lookup decoding" in vLLM / transformers): draft the next tokens by
//! finding the latest earlier occurrence of the current n-gram suffix in the token history, then
//! check the whole draft with one `Decoder::forward_batch` call.
//!
//! Lossless by construction under greedy decoding: the verify batch is `[anchor, d1, .., dk]`;
//! row `i` of its logits is what the model predicts after `anchor, d1..di`, so draft token
//! `d(i+1)` is kept only while it equals that row's argmax. The first mismatch ends the round and
//! the caches are cut back to the committed tokens. Batch invariance of the decoder makes every
//! kept token bit-for-bit the one plain decoding would have produced.
//!
//! Beyond the seed: a [`Drafter`] trait (n-gram lookup and a suffix-automaton
//! [`LongestMatchDrafter`]), an [`AdaptiveDraft`] length controller, and [`verify`], which is
//! lossless under any sampler (speculative sampling with a deterministic draft). [`Speculation`]
//! bundles them per sequence; `generate::Session` and the CLI drive it.

mod adaptive;
mod longest;
mod speculation;
mod verify;

pub use adaptive::AdaptiveDraft;
pub use longest::LongestMatchDrafter;
pub use speculation::{Drafter, SpecStats, Speculation};
pub use verify::verify;

use crate::decoder::Decoder;
use crate::sampling::Sampler;
use ferrox_core::cache::KvCache;

/// Drafts a continuation by n-gram lookup in the history (no draft model).
#[derive(Debug, Clone, Copy)]
pub struct PromptLookupSpeculator {
    /// Length of the suffix searched for.
    pub ngram_size: usize,
    /// Most tokens proposed per round.
    pub max_draft_len: usize,
}

impl PromptLookupSpeculator {
    /// Panics when either size is 0 (a zero-length n-gram matches everywhere; a zero-length
    /// draft is no speculation).
    pub fn new(ngram_size: usize, max_draft_len: usize) -> Self {
        assert!(ngram_size > 0, "ngram_size must be at least 1");
        assert!(max_draft_len > 0, "max_draft_len must be at least 1");
        PromptLookupSpeculator {
            ngram_size,
            max_draft_len,
        }
    }

    /// The tokens that followed the most recent earlier occurrence of `history`'s last
    /// `ngram_size` tokens (at most `max_draft_len`), or nothing when there is no such
    /// occurrence. The suffix itself is not a match: an occurrence must start before it.
    pub fn propose(&self, history: &[usize]) -> Vec<usize> {
        let n = self.ngram_size;
        let Some(latest_start) = history.len().checked_sub(n + 1) else {
            return Vec::new();
        };
        let suffix = &history[history.len() - n..];
        (0..=latest_start)
            .rev()
            .find(|&s| history[s..s + n] == *suffix)
            .map(|s| {
                let from = s + n;
                let to = (from + self.max_draft_len).min(history.len());
                history[from..to].to_vec()
            })
            .unwrap_or_default()
    }
}

/// Outcome of [`speculative_decode`] with the counters that show what speculation saved.
#[derive(Debug, Clone)]
pub struct SpeculativeDecodeResult {
    pub generated_tokens: Vec<usize>,
    /// `forward_batch` calls: the prefill plus one per verify round.
    pub forward_calls: usize,
    /// Equals `generated_tokens.len()`.
    pub tokens_generated: usize,
}

impl SpeculativeDecodeResult {
    /// Tokens per `forward_batch` call (1.0 when no draft was ever accepted; 0 with no calls).
    pub fn tokens_per_call(&self) -> f64 {
        match self.forward_calls {
            0 => 0.0,
            calls => self.tokens_generated as f64 / calls as f64,
        }
    }
}

/// Greedy decoding of `max_new_tokens` tokens after `prompt_tokens`, drafting with
/// `speculator` and verifying each draft in one batch. The prompt is one prefill call; each
/// round then feeds the token the model has already chosen (the anchor) followed by the draft.
/// `kv_caches` (one per layer) are filled from position 0; a rejected draft truncates them.
/// Panics on an empty prompt.
pub fn speculative_decode(
    decoder: &Decoder,
    prompt_tokens: &[usize],
    max_new_tokens: usize,
    kv_caches: &mut [KvCache],
    speculator: &PromptLookupSpeculator,
) -> SpeculativeDecodeResult {
    assert!(!prompt_tokens.is_empty(), "prompt must not be empty");
    let mut history = prompt_tokens.to_vec();
    let mut out = Vec::with_capacity(max_new_tokens);

    let mut next_logits = decoder
        .forward_batch(prompt_tokens, 0, kv_caches)
        .pop()
        .expect("one logits row per prompt token");
    let mut calls = 1;

    while out.len() < max_new_tokens {
        let anchor = argmax(&next_logits);
        let pos = history.len();
        // Room left after the anchor; a draft never overshoots the budget.
        let room = max_new_tokens - out.len() - 1;
        let mut draft = speculator.propose(&history);
        draft.truncate(room);

        let mut batch = Vec::with_capacity(1 + draft.len());
        batch.push(anchor);
        batch.extend_from_slice(&draft);
        let mut rows = decoder.forward_batch(&batch, pos, kv_caches);
        calls += 1;

        // Row i predicts the token after batch[..=i]; keep drafts while they match.
        let kept = draft
            .iter()
            .zip(&rows)
            .take_while(|(&d, row)| argmax(row) == d)
            .count();
        if kept < draft.len() {
            let committed = pos + 1 + kept;
            kv_caches.iter_mut().for_each(|c| c.truncate(committed));
        }
        history.extend_from_slice(&batch[..=kept]);
        out.extend_from_slice(&batch[..=kept]);
        next_logits = rows.swap_remove(kept);
    }

    SpeculativeDecodeResult {
        tokens_generated: out.len(),
        generated_tokens: out,
        forward_calls: calls,
    }
}

/// Index of the largest logit (the last one on ties, as `Iterator::max_by`); 0 when empty.
fn argmax(logits: &[f32]) -> usize {
    logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

impl Drafter for PromptLookupSpeculator {
    fn propose(&mut self, history: &[usize], max: usize) -> Vec<usize> {
        let mut d = PromptLookupSpeculator::propose(self, history);
        d.truncate(max);
        d
    }
    fn name(&self) -> &'static str {
        "ngram"
    }
}

/// Greedy/sampled decoding with a [`Drafter`]: the library-level loop behind
/// [`speculative_decode`], for any sampler and drafter. Returns the generated tokens and the
/// counters (`calls` excludes the prefill). `kv_caches` are filled from position 0.
pub fn speculative_generate(
    decoder: &Decoder,
    prompt: &[usize],
    max_new_tokens: usize,
    kv_caches: &mut [KvCache],
    spec: &mut Speculation,
    sampler: &mut Sampler,
) -> Vec<usize> {
    assert!(!prompt.is_empty(), "prompt must not be empty");
    let mut history = prompt.to_vec();
    let mut logits = Vec::new();
    decoder.forward_into(prompt, 0, kv_caches, prompt.len() - 1, &mut logits);
    let mut out = Vec::with_capacity(max_new_tokens);
    if max_new_tokens == 0 {
        return out;
    }
    let mut next = sampler.sample(&logits, &history);
    loop {
        out.push(next);
        if out.len() >= max_new_tokens {
            break;
        }
        let pos = history.len();
        history.push(next);
        let draft = spec.draft(&history, max_new_tokens - out.len());
        let mut batch = Vec::with_capacity(1 + draft.len());
        batch.push(next);
        batch.extend_from_slice(&draft);
        let t = std::time::Instant::now();
        decoder.forward_into(&batch, pos, kv_caches, 0, &mut logits);
        spec.record_cost(batch.len(), t.elapsed().as_secs_f64());
        let rows: Vec<&[f32]> = logits.chunks_exact(decoder.vocab_size()).collect();
        let committed = spec.verify(&rows, &draft, sampler, &history);
        let accepted = committed.len() - 1;
        kv_caches
            .iter_mut()
            .for_each(|c| c.truncate(pos + 1 + accepted));
        history.extend_from_slice(&committed[..accepted]);
        out.extend_from_slice(&committed[..accepted]);
        next = committed[accepted];
        if out.len() >= max_new_tokens {
            break;
        }
    }
    out.truncate(max_new_tokens);
    out
}

#[cfg(test)]
mod tests;
