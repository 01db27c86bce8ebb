//! Prompt lookup: a draft is whatever followed the latest earlier occurrence of the history's
//! last n-gram (the same idea as "prompt lookup decoding" in vLLM / transformers).

use super::Drafter;
use crate::TokenId;

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
pub(super) struct SeedLookup(pub(super) PromptLookupSpeculator);

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
