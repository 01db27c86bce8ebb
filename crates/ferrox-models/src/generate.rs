//! Generation: a `Session` owns the KV caches and the token history they hold, feeds prompts
//! (reusing the longest cached prefix, so a chat turn only prefills what is new), samples,
//! and streams text until a stop condition: an end-of-generation token, a stop string, the
//! token budget or the context size.
//!
//! With a [`Speculation`] attached, each forward feeds the next token plus a draft and
//! `speculative::verify` commits several tokens at once; only committed tokens are streamed and
//! the stop conditions apply to them one by one, exactly as in plain decoding.

use crate::decoder::Decoder;
use crate::sampling::Sampler;
use crate::speculative::{SpecStats, Speculation};
use ferrox_core::cache::KvCache;
use ferrox_tokenizer::{StreamDecoder, TokenId, Tokenizer};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token (EOS / EOT) was sampled.
    Eog,
    StopString,
    MaxTokens,
    /// The context is full.
    Context,
    /// The text callback asked to stop.
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// Sample EOG tokens as ordinary text instead of stopping (reference comparisons).
    pub ignore_eog: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eog: false,
        }
    }
}

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
}

pub struct Session<'m> {
    pub decoder: &'m Decoder,
    pub tokenizer: &'m Tokenizer,
    caches: Vec<KvCache>,
    /// Tokens whose keys and values are in `caches`, in order.
    history: Vec<usize>,
    pub ctx_size: usize,
    logits: Vec<f32>,
    spec: Option<Speculation>,
}

impl<'m> Session<'m> {
    pub fn new(decoder: &'m Decoder, tokenizer: &'m Tokenizer, ctx_size: usize) -> Self {
        let ctx_size = ctx_size.min(decoder.config.max_seq_len.max(1)).max(1);
        Session {
            decoder,
            tokenizer,
            caches: decoder.new_caches(),
            history: Vec::new(),
            ctx_size,
            logits: Vec::new(),
            spec: None,
        }
    }

    /// Turns speculative decoding on (`Some`) or off for the following `generate` calls.
    pub fn set_speculation(&mut self, spec: Option<Speculation>) {
        self.spec = spec;
    }

    pub fn speculation(&self) -> Option<&Speculation> {
        self.spec.as_ref()
    }

    /// Tokens currently held in the cache.
    pub fn history(&self) -> &[TokenId] {
        &self.history
    }

    pub fn reset(&mut self) {
        self.history.clear();
        for c in &mut self.caches {
            c.truncate(0);
        }
    }

    /// Makes the cache hold exactly `prompt`, evaluating only the part after the longest
    /// common prefix with what is cached; leaves the last position's logits in `self.logits`.
    /// Returns how many tokens were evaluated.
    pub fn prefill(&mut self, prompt: &[TokenId]) -> usize {
        assert!(!prompt.is_empty(), "empty prompt");
        let common = self
            .history
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // Re-evaluate at least the last token: its logits are what we sample from.
        let start = common.min(prompt.len() - 1);
        let new = &prompt[start..];
        self.decoder.forward_into(
            new,
            start,
            &mut self.caches,
            new.len() - 1,
            &mut self.logits,
        );
        self.history.truncate(start);
        self.history.extend_from_slice(new);
        new.len()
    }

    /// Feeds `prompt` and generates, calling `on_text` with each newly completed piece of
    /// text (stop strings are never emitted); `on_text` returns false to cancel.
    pub fn generate(
        &mut self,
        prompt: &[TokenId],
        params: &GenerateParams,
        sampler: &mut Sampler,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> GenerateOutput {
        let t0 = Instant::now();
        let prompt_tokens = if prompt.len() >= self.ctx_size {
            0
        } else {
            self.prefill(prompt)
        };
        let prompt_time = t0.elapsed();
        let t1 = Instant::now();
        let mut out = GenerateOutput {
            tokens: Vec::new(),
            text: String::new(),
            stop: StopReason::MaxTokens,
            prompt_tokens,
            prompt_time,
            gen_tokens: 0,
            gen_time: Duration::ZERO,
            spec: SpecStats::default(),
        };
        if prompt.len() >= self.ctx_size {
            out.stop = StopReason::Context;
            return out;
        }
        let mut em = Emitter {
            rules: StopRules::new(self.tokenizer, params),
        };
        if self.spec.is_some() {
            self.generate_spec(&mut em, &mut out, sampler, &mut on_text);
        } else {
            loop {
                let tok = sampler.sample(&self.logits, &self.history);
                if let Some(stop) = em.push(tok, &mut out, &mut on_text) {
                    out.stop = stop;
                    break;
                }
                let pos = self.history.len();
                if pos + 1 > self.ctx_size {
                    out.stop = StopReason::Context;
                    break;
                }
                self.decoder
                    .forward_into(&[tok], pos, &mut self.caches, 0, &mut self.logits);
                self.history.push(tok);
            }
        }
        let rest = em.rules.finish();
        if !rest.is_empty() && out.stop != StopReason::StopString {
            out.text.push_str(&rest);
            on_text(&rest);
        }
        out.gen_tokens = out.tokens.len();
        out.gen_time = t1.elapsed();
        out
    }

    /// The speculative loop: feed the next token with a draft, commit what `verify` keeps, run
    /// every committed token through the same stop rules as plain decoding. On a stop the
    /// caches and history are cut to what plain decoding would hold (every token before the one
    /// that stopped), so the next turn continues from a warm, consistent cache.
    fn generate_spec(
        &mut self,
        em: &mut Emitter<'_>,
        out: &mut GenerateOutput,
        sampler: &mut Sampler,
        on_text: &mut impl FnMut(&str) -> bool,
    ) {
        let Some(mut spec) = self.spec.take() else {
            return;
        };
        let before = spec.stats;
        let vocab = self.decoder.vocab_size();
        let mut next = sampler.sample(&self.logits, &self.history);
        let mut batch = Vec::new();
        'gen: loop {
            if let Some(stop) = em.push(next, out, on_text) {
                out.stop = stop;
                break;
            }
            let pos = self.history.len();
            if pos + 1 > self.ctx_size {
                out.stop = StopReason::Context;
                break;
            }
            self.history.push(next);
            // Drafts that could still be emitted and still fit the context.
            let room = em.rules.remaining().min(self.ctx_size - pos - 1);
            let draft = spec.draft(&self.history, room);
            batch.clear();
            batch.push(next);
            batch.extend_from_slice(&draft);
            let t = Instant::now();
            self.decoder
                .forward_into(&batch, pos, &mut self.caches, 0, &mut self.logits);
            spec.record_cost(batch.len(), t.elapsed().as_secs_f64());
            let rows: Vec<&[f32]> = self.logits.chunks_exact(vocab).collect();
            let committed = spec.verify(&rows, &draft, sampler, &self.history);
            let accepted = committed.len() - 1;
            let keep = pos + 1 + accepted;
            self.caches.iter_mut().for_each(|c| c.truncate(keep));
            self.history.extend_from_slice(&committed[..accepted]);
            for (j, &t) in committed[..accepted].iter().enumerate() {
                if let Some(stop) = em.push(t, out, on_text) {
                    out.stop = stop;
                    let cut = pos + 1 + j;
                    self.history.truncate(cut);
                    self.caches.iter_mut().for_each(|c| c.truncate(cut));
                    break 'gen;
                }
            }
            // `self.logits` now holds verify rows; a later prefill re-evaluates its last token.
            next = committed[accepted];
        }
        let s = spec.stats;
        out.spec = SpecStats {
            calls: s.calls - before.calls,
            verify_calls: s.verify_calls - before.verify_calls,
            drafted: s.drafted - before.drafted,
            accepted: s.accepted - before.accepted,
        };
        self.spec = Some(spec);
    }
}

/// The per-token stop rules of one generation and its streamed text, shared by `Session` and
/// `batch::BatchEngine`: before a token, the token budget and end-of-generation tokens; after
/// it, stop strings (text that may begin one is held back, a stop string is never emitted).
pub(crate) struct StopRules<'t> {
    stream: StreamDecoder<'t>,
    tokenizer: &'t Tokenizer,
    /// Text decoded but not yet released because it may begin a stop string.
    held: String,
    stop: Vec<String>,
    max_stop: usize,
    max_tokens: usize,
    ignore_eog: bool,
    /// Tokens accepted so far.
    pub tokens: usize,
}

impl<'t> StopRules<'t> {
    pub(crate) fn new(tokenizer: &'t Tokenizer, params: &GenerateParams) -> Self {
        StopRules {
            stream: tokenizer.stream_decoder().skip_special(true),
            tokenizer,
            held: String::new(),
            max_stop: params.stop.iter().map(|s| s.len()).max().unwrap_or(0),
            stop: params.stop.clone(),
            max_tokens: params.max_tokens,
            ignore_eog: params.ignore_eog,
            tokens: 0,
        }
    }

    /// One sampled token: the text it releases and the stop it causes. `MaxTokens` and `Eog`
    /// stop before the token (it is not counted); `StopString` after it, with the text up to
    /// the stop string.
    pub(crate) fn push(&mut self, tok: TokenId) -> (String, Option<StopReason>) {
        if self.tokens >= self.max_tokens {
            return (String::new(), Some(StopReason::MaxTokens));
        }
        if !self.ignore_eog && self.tokenizer.is_eog(tok) {
            return (String::new(), Some(StopReason::Eog));
        }
        self.tokens += 1;
        self.held.push_str(&self.stream.push(tok));
        if let Some(i) = self
            .stop
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.held.truncate(i);
            return (std::mem::take(&mut self.held), Some(StopReason::StopString));
        }
        let keep = hold_back(&self.held, &self.stop, self.max_stop);
        (self.held.drain(..self.held.len() - keep).collect(), None)
    }

    /// Tokens the budget still allows.
    pub(crate) fn remaining(&self) -> usize {
        self.max_tokens.saturating_sub(self.tokens)
    }

    /// What is left when generation ends (held-back text and incomplete characters); empty
    /// after a stop string.
    pub(crate) fn finish(&mut self) -> String {
        self.held.push_str(&self.stream.finish());
        std::mem::take(&mut self.held)
    }
}

/// A `Session`'s view of the stop rules: records tokens and text in the output and streams.
struct Emitter<'t> {
    rules: StopRules<'t>,
}

impl Emitter<'_> {
    /// Handles one sampled token; stops before it at the token budget or an end-of-generation
    /// token, after it on a stop string or a cancel.
    fn push(
        &mut self,
        tok: usize,
        out: &mut GenerateOutput,
        on_text: &mut impl FnMut(&str) -> bool,
    ) -> Option<StopReason> {
        let (text, stop) = self.rules.push(tok);
        if matches!(stop, Some(StopReason::MaxTokens | StopReason::Eog)) {
            return stop;
        }
        out.tokens.push(tok);
        if !text.is_empty() {
            out.text.push_str(&text);
            if !on_text(&text) && stop.is_none() {
                return Some(StopReason::Cancelled);
            }
        }
        stop
    }
}

/// How many trailing bytes of `text` could start a stop string (kept back from the stream).
fn hold_back(text: &str, stops: &[String], max_stop: usize) -> usize {
    if max_stop == 0 {
        return 0;
    }
    let mut keep = 0;
    for s in stops {
        for k in (1..s.len().min(text.len() + 1)).rev() {
            if k <= keep {
                break;
            }
            if text.is_char_boundary(text.len() - k)
                && s.as_bytes().starts_with(&text.as_bytes()[text.len() - k..])
            {
                keep = k;
                break;
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::hold_back;

    #[test]
    fn holds_back_possible_stop_prefixes() {
        let stops = vec!["</s>".to_string(), "\n\n".to_string()];
        assert_eq!(hold_back("hello </", &stops, 4), 2);
        assert_eq!(hold_back("hello\n", &stops, 4), 1);
        assert_eq!(hold_back("hello", &stops, 4), 0);
        assert_eq!(hold_back("hello", &[], 0), 0);
    }
}
