//! The seed's greedy [`speculative_decode`], a client of the decode loop: it runs prompt
//! lookup through a one-slot `generate::Session`, as the CLI does. Kept apart from the drafters
//! and the verification rule, which the engine (below `Session`) uses itself.

use super::lookup::SeedLookup;
use super::{AdaptiveDraft, PromptLookupSpeculator, Speculation};
use crate::decoder::Decoder;
use crate::generate::{GenerateParams, Session};
use crate::sampling::{Sampler, SamplerConfig};
use crate::TokenId;
use ferrox_core::cache::KvCache;

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
