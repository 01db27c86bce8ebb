//! Generation for one sequence: a `Session` is a one-slot view of the engine
//! (`engine::BatchEngine`, the one decode loop). It keeps the KV caches and the token history
//! they hold between calls, so a prompt only prefills what follows the longest cached prefix
//! (a chat turn evaluates only what is new), and streams text until a stop condition: an
//! end-of-generation token, a stop string, the token budget, the context size or a cancel.
//!
//! With a [`Speculation`] attached, each forward feeds the next token plus a draft and the
//! engine commits several tokens at once; only committed tokens are streamed and the stop
//! conditions apply to them one by one, exactly as in plain decoding.

pub use crate::engine::{GenerateParams, StopReason};

use crate::decoder::Decoder;
use crate::engine::sink::{JobEnd, Sink};
use crate::engine::{AdmitError, BatchEngine, DrafterCount};
use crate::sampling::{Sampler, SamplerConfig, TokenLogprob};
use crate::speculative::{SpecStats, Speculation};
use crate::structured::ConstraintStats;
use ferrox_core::cache::KvCache;
use ferrox_tokenizer::{TokenId, Tokenizer};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct GenerateOutput {
    pub tokens: Vec<TokenId>,
    pub text: String,
    pub stop: StopReason,
    /// Prompt tokens actually evaluated (after prefix reuse) and the time it took.
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub gen_tokens: usize,
    pub gen_time: Duration,
    /// Speculation counters of this call (all zero without speculation).
    pub spec: SpecStats,
    /// Why the generation failed (`StopReason::Grammar`: its grammar could not continue).
    pub error: Option<String>,
    /// Mask counts and time of the generation's grammar, when it had one.
    pub constraint: Option<ConstraintStats>,
}

pub struct Session<'m> {
    engine: BatchEngine<'m>,
}

/// The session's one slot.
const SLOT: usize = 0;

impl<'m> Session<'m> {
    pub fn new(decoder: &'m Decoder, tokenizer: &'m Tokenizer, ctx_size: usize) -> Self {
        Self::with(decoder, Some(tokenizer), clamp_ctx(decoder, ctx_size))
    }

    /// A session that generates tokens only: no text, and no end-of-generation tokens or stop
    /// strings (a model without a tokenizer, tests on random models).
    pub fn without_tokenizer(decoder: &'m Decoder, ctx_size: usize) -> Self {
        Self::with(decoder, None, clamp_ctx(decoder, ctx_size))
    }

    /// No tokenizer and no context limit: the seed API's decoding.
    pub(crate) fn unbounded(decoder: &'m Decoder) -> Self {
        Self::with(decoder, None, usize::MAX)
    }

    fn with(decoder: &'m Decoder, tokenizer: Option<&'m Tokenizer>, ctx_size: usize) -> Self {
        Session {
            engine: BatchEngine::single(decoder, tokenizer, ctx_size),
        }
    }

    pub fn ctx_size(&self) -> usize {
        self.engine.ctx_size()
    }

    /// Turns speculative decoding on (`Some`) or off for the following `generate` calls.
    pub fn set_speculation(&mut self, spec: Option<Speculation>) {
        *self.engine.speculation_mut(SLOT) = spec;
    }

    /// Takes the speculation state back (its controller's measured costs and acceptance, its
    /// counters), leaving plain decoding.
    pub fn take_speculation(&mut self) -> Option<Speculation> {
        self.engine.speculation_mut(SLOT).take()
    }

    pub fn speculation(&self) -> Option<&Speculation> {
        self.engine.speculation(SLOT)
    }

    /// Draft tokens proposed and accepted so far, per drafter (whatever speculation state
    /// drafted them).
    pub fn drafter_counts(&self) -> &[DrafterCount] {
        &self.engine.drafters
    }

    /// Tokens currently held in the cache.
    pub fn history(&self) -> &[TokenId] {
        self.engine.history(SLOT)
    }

    pub fn reset(&mut self) {
        self.engine.reset(SLOT);
    }

    /// Forward calls since the session started (prefills included).
    pub(crate) fn forward_calls(&self) -> usize {
        self.engine.stats.steps as usize
    }

    /// Runs `f` with `caches` in place of the session's own (which come back afterwards).
    pub(crate) fn on_caches<R>(
        &mut self,
        caches: &mut [KvCache],
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        self.engine.swap_caches(SLOT, caches);
        let r = f(self);
        self.engine.swap_caches(SLOT, caches);
        r
    }

    /// Feeds `prompt` and generates, calling `on_text` with each newly completed piece of
    /// text (stop strings are never emitted); `on_text` returns false to cancel. `sampler`
    /// carries its state (random stream) over to the next call. Panics on an empty prompt.
    pub fn generate(
        &mut self,
        prompt: &[TokenId],
        params: &GenerateParams,
        sampler: &mut Sampler,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> GenerateOutput {
        assert!(!prompt.is_empty(), "empty prompt");
        let t0 = Instant::now();
        let mut out = GenerateOutput {
            tokens: Vec::new(),
            text: String::new(),
            stop: StopReason::Context,
            prompt_tokens: 0,
            prompt_time: Duration::ZERO,
            gen_tokens: 0,
            gen_time: Duration::ZERO,
            spec: SpecStats::default(),
            error: None,
            constraint: None,
        };
        // A one-slot engine refuses a prompt that does not fit the context (a `Context` stop)
        // or that holds ids the model has no embedding for.
        let slot = match self.engine.pick_slot(prompt) {
            Ok(slot) => slot,
            Err(AdmitError::TooLong { .. }) => return out,
            Err(e) => {
                out.stop = StopReason::Failed;
                out.error = Some(e.to_string());
                return out;
            }
        };
        let before = self.speculation().map(|s| s.stats);
        // The sampler runs in the slot and comes back with the generation's end.
        let s = std::mem::replace(sampler, Sampler::new(SamplerConfig::greedy()));
        self.engine.start(slot, 0, prompt, s, params);
        let mut sink = Collect {
            out: &mut out,
            on_text: &mut on_text,
            end: None,
        };
        while sink.end.is_none() {
            self.engine.step_with(&mut sink);
        }
        let end = sink.end.take().expect("the loop ran until the end");
        *sampler = end.sampler;
        out.stop = end.stop;
        out.error = end.error;
        out.constraint = end.constraint.map(|c| c.stats);
        out.prompt_tokens = end.prompt_tokens;
        out.prompt_time = Duration::from_secs_f64(end.prompt_secs);
        out.gen_tokens = out.tokens.len();
        out.gen_time = t0.elapsed().saturating_sub(out.prompt_time);
        if let (Some(now), Some(before)) = (self.speculation(), before) {
            out.spec = now.stats.since(&before);
        }
        out
    }
}

fn clamp_ctx(decoder: &Decoder, ctx_size: usize) -> usize {
    ctx_size.min(decoder.config.max_seq_len.max(1)).max(1)
}

/// The session's sink: committed tokens and text into the output, text to the caller.
struct Collect<'o, F> {
    out: &'o mut GenerateOutput,
    on_text: &'o mut F,
    end: Option<JobEnd>,
}

impl<F: FnMut(&str) -> bool> Sink for Collect<'_, F> {
    fn token(&mut self, _: u64, token: usize, _: Option<TokenLogprob>, text: String) -> bool {
        self.out.tokens.push(token);
        if text.is_empty() {
            return true;
        }
        self.out.text.push_str(&text);
        (self.on_text)(&text)
    }

    fn done(&mut self, _: u64, end: JobEnd) {
        if !end.text.is_empty() {
            self.out.text.push_str(&end.text);
            (self.on_text)(&end.text);
        }
        self.end = Some(end);
    }
}
