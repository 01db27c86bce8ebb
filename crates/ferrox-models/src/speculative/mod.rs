//! Speculative decoding without a draft model: draft the next tokens from the sequence's own
//! history, check the whole draft in one forward, keep what the target model agrees with.
//!
//! The seed's API (`shared/seed/ferrox_models/speculative.rs`) is kept: prompt lookup (the
//! same idea as "prompt lookup decoding" in vLLM / transformers) through
//! [`PromptLookupSpeculator`] and greedy [`speculative_decode`]. It runs over the engine's one
//! decode loop (`engine::BatchEngine`, here through a one-slot `generate::Session`), as do
//! `Session` itself and the server.
//!
//! Beyond the seed: a [`Drafter`] trait (n-gram lookup and a suffix-automaton
//! [`LongestMatchDrafter`], and [`RecallDrafter`] over earlier requests' outputs), an [`AdaptiveDraft`] length controller, and [`verify_rows`], the
//! one verification rule, lossless under any sampler (speculative sampling with a
//! deterministic draft). [`Speculation`] bundles them per sequence.

mod adaptive;
mod longest;
mod recall;
mod speculation;
mod verify;

pub use adaptive::AdaptiveDraft;
pub use longest::LongestMatchDrafter;
pub use recall::{RecallDrafter, RecallIndex, SharedRecall, PROMPT_TAIL};
pub use speculation::{Drafter, SpecStats, Speculation};
pub use verify::{verify, verify_rows, verify_rows_constrained, Verdict};

use crate::decoder::Decoder;
use crate::generate::{GenerateParams, Session};
use crate::sampling::{Sampler, SamplerConfig};
use crate::TokenId;
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
    pub fn propose(&self, history: &[TokenId]) -> Vec<TokenId> {
        self.continuation(history).to_vec()
    }

    fn continuation<'h>(&self, history: &'h [usize]) -> &'h [usize] {
        let n = self.ngram_size;
        let Some(latest_start) = history.len().checked_sub(n + 1) else {
            return &[];
        };
        let suffix = &history[history.len() - n..];
        (0..=latest_start)
            .rev()
            .find(|&s| history[s..s + n] == *suffix)
            .map_or(&[], |s| {
                let from = s + n;
                &history[from..(from + self.max_draft_len).min(history.len())]
            })
    }
}

impl Drafter for PromptLookupSpeculator {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        let c = self.continuation(history);
        out.extend_from_slice(&c[..c.len().min(max)]);
    }
    fn name(&self) -> &'static str {
        "ngram"
    }
}

/// The seed's drafting step: it looks the n-gram up in the history *before* the anchor (the
/// token fed with the draft), one token earlier than a [`Drafter`] is asked to. Kept as is, so
/// the seed API's drafts and call counts are the seed's.
struct SeedLookup(PromptLookupSpeculator);

impl Drafter for SeedLookup {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        let before_anchor = history.split_last().map_or(&[][..], |(_, h)| h);
        let c = self.0.continuation(before_anchor);
        out.extend_from_slice(&c[..c.len().min(max)]);
    }
    fn name(&self) -> &'static str {
        "seed-ngram"
    }
}

/// Outcome of [`speculative_decode`] with the counters that show what speculation saved.
#[derive(Debug, Clone)]
pub struct SpeculativeDecodeResult {
    pub generated_tokens: Vec<TokenId>,
    /// Forward calls: the prefill plus one per verify round.
    pub forward_calls: usize,
    /// Equals `generated_tokens.len()`.
    pub tokens_generated: usize,
}

impl SpeculativeDecodeResult {
    /// Tokens per forward call (1.0 when no draft was ever accepted; 0 with no calls).
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
/// `kv_caches` (one per layer) are filled from position 0 and left holding the prompt and
/// every generated token; a rejected draft truncates them. Panics on an empty prompt.
///
/// One deviation from the seed: on an exact tie of the largest logits the first token wins
/// (the sampler's greedy rule, shared by every decode path), where the seed took the last.
pub fn speculative_decode(
    decoder: &Decoder,
    prompt_tokens: &[TokenId],
    max_new_tokens: usize,
    kv_caches: &mut [KvCache],
    speculator: &PromptLookupSpeculator,
) -> SpeculativeDecodeResult {
    assert!(!prompt_tokens.is_empty(), "prompt must not be empty");
    let mut spec = Speculation::new(Box::new(SeedLookup(*speculator)), speculator.max_draft_len);
    // The seed drafts all it finds every round, whatever acceptance and timings say.
    spec.adaptive = AdaptiveDraft::fixed(speculator.max_draft_len);
    // No tokenizer and no context limit: the seed has neither end-of-generation tokens nor a
    // context size, only the token budget.
    let mut session = Session::unbounded(decoder);
    session.set_speculation(Some(spec));
    let params = GenerateParams {
        max_tokens: max_new_tokens,
        stop: Vec::new(),
        ignore_eog: true,
        constraint: None,
        keep_special: false,
    };
    let mut greedy = Sampler::new(SamplerConfig::greedy());
    let out = session.on_caches(kv_caches, |s| {
        s.generate(prompt_tokens, &params, &mut greedy, |_| true)
    });
    SpeculativeDecodeResult {
        tokens_generated: out.tokens.len(),
        generated_tokens: out.tokens,
        forward_calls: session.forward_calls(),
    }
}

/// The greedy choice every decode path makes (the sampler's: first index of the largest
/// logit); the seed's tests compare against plain greedy decoding through it.
#[cfg(test)]
fn argmax(logits: &[f32]) -> usize {
    Sampler::new(SamplerConfig::greedy()).sample(logits, &[])
}

#[cfg(test)]
mod seed_conformance;
#[cfg(test)]
mod tests;
