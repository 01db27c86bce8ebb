//! The per-token stop rules of one generation and its streamed text, as llama.cpp's server
//! applies them: before a token, the token budget and end-of-generation tokens; after it, stop
//! strings (text that may begin one is held back, a stop string is never emitted).

use crate::structured::Constraint;
use ferrox_tokenizer::{StreamDecoder, Tokenizer};

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
    /// The generation's grammar could not continue (an error, reported with the end).
    Grammar,
    /// The engine failed on this generation (its input was refused, or a step panicked on
    /// it); the error is reported with the end. Other generations are not affected.
    Failed,
}

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// Sample EOG tokens as ordinary text instead of stopping (reference comparisons).
    pub ignore_eog: bool,
    /// Only tokens this grammar allows (structured output); a fresh constraint per generation.
    pub constraint: Option<Constraint>,
    /// Decode special tokens into the text (gpt-oss's harmony markers carry the answer's
    /// structure); otherwise they are left out, as llama.cpp's server does.
    pub keep_special: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 256,
            stop: Vec::new(),
            ignore_eog: false,
            constraint: None,
            keep_special: false,
        }
    }
}

pub(crate) struct StopRules<'t> {
    /// No tokenizer: tokens only (no text, no end-of-generation tokens, no stop strings).
    tokenizer: Option<(&'t Tokenizer, StreamDecoder<'t>)>,
    /// Text decoded but not yet released because it may begin a stop string.
    held: String,
    stop: Vec<String>,
    max_stop: usize,
    max_tokens: usize,
    ignore_eog: bool,
    /// Tokens accepted so far.
    pub tokens: usize,
    /// The stop string that ended the text (its index in the request's list).
    pub matched: Option<usize>,
}

impl<'t> StopRules<'t> {
    pub(crate) fn new(tokenizer: Option<&'t Tokenizer>, params: &GenerateParams) -> Self {
        StopRules {
            tokenizer: tokenizer
                .map(|t| (t, t.stream_decoder().skip_special(!params.keep_special))),
            held: String::new(),
            max_stop: params.stop.iter().map(|s| s.len()).max().unwrap_or(0),
            stop: params.stop.clone(),
            max_tokens: params.max_tokens,
            ignore_eog: params.ignore_eog,
            tokens: 0,
            matched: None,
        }
    }

    /// One sampled token: the text it releases and the stop it causes. `MaxTokens` and `Eog`
    /// stop before the token (it is not counted); `StopString` after it, with the text up to
    /// the stop string.
    pub(crate) fn push(&mut self, tok: usize) -> (String, Option<StopReason>) {
        if self.tokens >= self.max_tokens {
            return (String::new(), Some(StopReason::MaxTokens));
        }
        let Some((tokenizer, stream)) = &mut self.tokenizer else {
            self.tokens += 1;
            return (String::new(), None);
        };
        if !self.ignore_eog && tokenizer.is_eog(tok) {
            return (String::new(), Some(StopReason::Eog));
        }
        self.tokens += 1;
        self.held.push_str(&stream.push(tok));
        if let Some((i, which)) = self
            .stop
            .iter()
            .enumerate()
            .filter_map(|(k, s)| self.held.find(s.as_str()).map(|i| (i, k)))
            .min()
        {
            self.matched = Some(which);
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
    pub(crate) fn finish(&mut self, stop: StopReason) -> String {
        if stop == StopReason::StopString {
            return String::new();
        }
        if let Some((_, stream)) = &mut self.tokenizer {
            self.held.push_str(&stream.finish());
        }
        std::mem::take(&mut self.held)
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
