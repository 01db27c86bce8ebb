//! Special-token matching as llama.cpp's `tokenizer_st_partition` (`src/llama-vocab.cpp`):
//! the special tokens are taken longest first, each claiming its leftmost non-overlapping
//! occurrences in the parts of the text no earlier token claimed.
//!
//! Collecting every overlapping occurrence of every token at once costs one entry per
//! (position, token) pair: on a run of N spaces, Gemma's 30 space tokens (2 to 31 spaces)
//! give 30·N entries, 1.5 GB for a 4 MB prompt. Instead there is one pass per token length,
//! longest first: tokens of one length start at distinct positions, so a pass holds at most
//! one entry per position, and its buffer is reused.

use aho_corasick::AhoCorasick;

pub(crate) struct SpecialMatcher {
    /// Every token, pattern `i` being rank `i`: whether a text has any, and where.
    pub(crate) all: AhoCorasick,
    /// One matcher per token length, longest first, with the rank of its first pattern.
    by_len: Vec<(AhoCorasick, usize)>,
}

impl SpecialMatcher {
    /// `texts` in rank order: longest first, none empty.
    pub(crate) fn new(texts: &[&str]) -> Result<Self, aho_corasick::BuildError> {
        debug_assert!(texts.windows(2).all(|w| w[0].len() >= w[1].len()));
        let mut by_len = Vec::new();
        let mut first = 0;
        while first < texts.len() {
            let len = texts[first].len();
            let n = texts[first..].iter().take_while(|t| t.len() == len).count();
            by_len.push((AhoCorasick::new(&texts[first..first + n])?, first));
            first += n;
        }
        Ok(SpecialMatcher {
            all: AhoCorasick::new(texts)?,
            by_len,
        })
    }

    /// The occurrences claimed in `text`, as `(start, end, rank)` sorted by start; `keep`
    /// says whether the token of a rank may be matched over `start..end` at all.
    pub(crate) fn claim(
        &self,
        text: &str,
        keep: impl Fn(usize, usize, usize) -> bool,
    ) -> Vec<(usize, usize, usize)> {
        let mut spans = Vec::new();
        if !self.all.is_match(text) {
            return spans;
        }
        let mut claimed = vec![false; text.len()];
        let mut found: Vec<(usize, usize, usize)> = Vec::new();
        for (ac, first) in &self.by_len {
            // Everything claimed so far is at least as long as this pass's tokens, so an
            // occurrence overlaps a claim exactly when its first or last byte is claimed.
            let free = |s: usize, e: usize| !claimed[s] && !claimed[e - 1];
            found.clear();
            found.extend(
                ac.find_overlapping_iter(text)
                    .map(|m| (first + m.pattern().as_usize(), m.start(), m.end()))
                    .filter(|&(rank, s, e)| free(s, e) && keep(rank, s, e)),
            );
            // Rank first (a token claims all its occurrences before the next), then position.
            found.sort_unstable();
            for &(rank, s, e) in &found {
                if claimed[s] || claimed[e - 1] {
                    continue;
                }
                claimed[s..e].fill(true);
                spans.push((s, e, rank));
            }
        }
        spans.sort_unstable();
        spans
    }
}
