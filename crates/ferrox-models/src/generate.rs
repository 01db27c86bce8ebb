//! Generation: a `Session` owns the KV caches and the token history they hold, feeds prompts
//! (reusing the longest cached prefix, so a chat turn only prefills what is new), samples,
//! and streams text until a stop condition: an end-of-generation token, a stop string, the
//! token budget or the context size.

use crate::decoder::Decoder;
use crate::sampling::Sampler;
use crate::tokenizer::Tokenizer;
use ferrox_core::cache::KvCache;
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
    pub tokens: Vec<usize>,
    pub text: String,
    pub stop: StopReason,
    /// Prompt tokens actually evaluated (after prefix reuse) and the time it took.
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub gen_tokens: usize,
    pub gen_time: Duration,
}

pub struct Session<'m> {
    pub decoder: &'m Decoder,
    pub tokenizer: &'m Tokenizer,
    caches: Vec<KvCache>,
    /// Tokens whose keys and values are in `caches`, in order.
    history: Vec<usize>,
    pub ctx_size: usize,
    logits: Vec<f32>,
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
        }
    }

    /// Tokens currently held in the cache.
    pub fn history(&self) -> &[usize] {
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
    pub fn prefill(&mut self, prompt: &[usize]) -> usize {
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
        prompt: &[usize],
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
        };
        if prompt.len() >= self.ctx_size {
            out.stop = StopReason::Context;
            return out;
        }
        let mut stream = self.tokenizer.stream_decoder().skip_special(true);
        // Text decoded but not yet emitted because it may begin a stop string.
        let mut held = String::new();
        let max_stop = params.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        loop {
            if out.tokens.len() >= params.max_tokens {
                out.stop = StopReason::MaxTokens;
                break;
            }
            let tok = sampler.sample(&self.logits, &self.history);
            if !params.ignore_eog && self.tokenizer.is_eog(tok as u32) {
                out.stop = StopReason::Eog;
                break;
            }
            out.tokens.push(tok);
            held.push_str(&stream.push(tok as u32));
            if let Some((i, _)) = params
                .stop
                .iter()
                .filter_map(|s| held.find(s.as_str()).map(|i| (i, s)))
                .min_by_key(|(i, _)| *i)
            {
                held.truncate(i);
                out.text.push_str(&held);
                on_text(&held);
                held.clear();
                out.stop = StopReason::StopString;
                break;
            }
            // Emit everything that cannot be the start of a stop string.
            let keep = hold_back(&held, &params.stop, max_stop);
            if keep < held.len() {
                let emit: String = held.drain(..held.len() - keep).collect();
                out.text.push_str(&emit);
                if !on_text(&emit) {
                    out.stop = StopReason::Cancelled;
                    break;
                }
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
        held.push_str(&stream.finish());
        if !held.is_empty() && out.stop != StopReason::StopString {
            out.text.push_str(&held);
            on_text(&held);
        }
        out.gen_tokens = out.tokens.len();
        out.gen_time = t1.elapsed();
        out
    }
}

/// How many trailing bytes of `text` could start a stop string (kept back from the stream).
pub(crate) fn hold_back(text: &str, stops: &[String], max_stop: usize) -> usize {
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
