//! Drafting from earlier requests (the idea of vLLM's suffix decoding, arXiv 2411.04975, in a
//! structure of our own): agent loops and repeated tasks repeat what the model wrote before, so
//! the outputs of finished requests — each with the tail of its prompt, which is the context
//! its first tokens follow — are kept in a bounded store and indexed by their 4-grams. A
//! history whose last tokens occurred there drafts what followed them; of several earlier
//! occurrences the one agreeing with the history furthest back wins, the most recent on ties.
//!
//! [`RecallDrafter`] combines this with the request's own [`LongestMatchDrafter`]: whichever
//! match is longer drafts. Drafts stay deterministic, so verification is exact as for any
//! drafter.

use super::{Drafter, LongestMatchDrafter};
use crate::TokenId;
use ahash::AHashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Tokens of a key: a history must end in 4 tokens seen before to draft from the store.
const KEY: usize = 4;
/// Earlier occurrences kept per key (the most recent ones).
const CANDIDATES: usize = 4;
/// How far back a candidate's agreement with the history is measured.
const MAX_MATCH: usize = 64;
/// Tokens of a finished request's prompt kept before its output.
pub const PROMPT_TAIL: usize = 64;

/// Finished requests' prompt tails and outputs, at most `budget` tokens in all (the oldest
/// go first), indexed by 4-gram.
#[derive(Debug, Default)]
pub struct RecallIndex {
    budget: usize,
    /// Kept sequences, oldest first; `seqs[i]` has id `first_id + i`.
    seqs: VecDeque<Vec<TokenId>>,
    first_id: u64,
    tokens: usize,
    /// Key hash → (sequence id, index of the key's last token), most recent first. Entries of
    /// evicted sequences are skipped on lookup and dropped by the next rebuild.
    index: AHashMap<u64, Vec<(u64, u32)>>,
    entries: usize,
}

/// The 4 tokens ending at `end` (inclusive) as one key.
fn key(toks: &[TokenId], end: usize) -> u64 {
    toks[end + 1 - KEY..=end]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
            (h ^ t as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

impl RecallIndex {
    /// An empty store of at most `budget` tokens (0: keeps nothing).
    pub fn new(budget: usize) -> Self {
        RecallIndex {
            budget,
            ..Default::default()
        }
    }

    /// Tokens kept.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Keeps `seq` (its last `budget` tokens at most), evicting the oldest sequences.
    pub fn insert(&mut self, seq: &[TokenId]) {
        let seq = &seq[seq.len().saturating_sub(self.budget)..];
        if seq.len() <= KEY {
            return;
        }
        while self.tokens + seq.len() > self.budget {
            let Some(old) = self.seqs.pop_front() else {
                break;
            };
            self.tokens -= old.len();
            self.first_id += 1;
        }
        let id = self.first_id + self.seqs.len() as u64;
        self.seqs.push_back(seq.to_vec());
        self.tokens += seq.len();
        // Entries grow with every insert; once stale ones dominate, index the live ones anew.
        if self.entries > 2 * self.tokens + 1024 {
            self.rebuild();
        } else {
            self.index_seq(id);
        }
    }

    fn index_seq(&mut self, id: u64) {
        let seq = &self.seqs[(id - self.first_id) as usize];
        // A key needs a token after it to draft.
        for end in KEY - 1..seq.len() - 1 {
            let list = self.index.entry(key(seq, end)).or_default();
            list.insert(0, (id, end as u32));
            if list.len() > CANDIDATES {
                list.pop();
            } else {
                self.entries += 1;
            }
        }
    }

    fn rebuild(&mut self) {
        self.index.clear();
        self.entries = 0;
        for i in 0..self.seqs.len() {
            self.index_seq(self.first_id + i as u64);
        }
    }

    /// The continuation (at most `max` tokens) of the earlier occurrence of `history`'s last
    /// tokens that agrees with it furthest back, with that agreement's length (≥ 4).
    pub fn lookup(&self, history: &[TokenId], max: usize) -> Option<(usize, &[TokenId])> {
        if history.len() < KEY || max == 0 {
            return None;
        }
        let cands = self.index.get(&key(history, history.len() - 1))?;
        let mut best: Option<(usize, &[TokenId])> = None;
        for &(id, end) in cands {
            let Some(seq) = id
                .checked_sub(self.first_id)
                .and_then(|i| self.seqs.get(i as usize))
            else {
                continue;
            };
            let end = end as usize;
            let agree = (0..MAX_MATCH.min(end + 1).min(history.len()))
                .take_while(|&l| seq[end - l] == history[history.len() - 1 - l])
                .count();
            if agree >= KEY && best.is_none_or(|(b, _)| agree > b) {
                best = Some((agree, &seq[end + 1..(end + 1 + max).min(seq.len())]));
            }
        }
        best
    }
}

/// A [`RecallIndex`] shared by the drafters of one engine's slots (all on its thread).
pub type SharedRecall = Arc<Mutex<RecallIndex>>;

/// Drafts from the request's own history (longest match) or from earlier requests
/// ([`RecallIndex`]), whichever matches longer; finished requests feed the index.
pub struct RecallDrafter {
    own: LongestMatchDrafter,
    shared: SharedRecall,
}

impl RecallDrafter {
    pub fn new(shared: SharedRecall) -> Self {
        RecallDrafter {
            own: LongestMatchDrafter::default(),
            shared,
        }
    }
}

impl Drafter for RecallDrafter {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        let own = self.own.matched(history);
        // A poisoned lock only means a panic elsewhere mid-insert; the index stays valid.
        let index = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match (index.lookup(history, max), own) {
            (Some((len, cont)), own) if own.is_none_or(|(o, _)| len > o) => {
                out.extend_from_slice(cont)
            }
            // The own match's continuation, as `LongestMatchDrafter` drafts it.
            (_, Some((_, end))) if max > 0 => {
                out.extend_from_slice(&history[end + 1..(end + 1 + max).min(history.len())])
            }
            _ => {}
        }
    }

    fn finished(&mut self, history: &[TokenId], prompt_len: usize) {
        let from = prompt_len.min(history.len()).saturating_sub(PROMPT_TAIL);
        let mut index = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        index.insert(&history[from..]);
    }

    fn name(&self) -> &'static str {
        "recall"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_what_followed_the_longest_agreeing_occurrence() {
        let mut ix = RecallIndex::new(1000);
        ix.insert(&[9, 1, 2, 3, 4, 5, 6, 7]);
        ix.insert(&[8, 8, 1, 2, 3, 4, 50, 60]);
        // Both end in 1 2 3 4; the second agrees further back (8 before 1).
        assert_eq!(ix.lookup(&[0, 8, 1, 2, 3, 4], 3), Some((5, &[50, 60][..])));
        assert_eq!(ix.lookup(&[9, 1, 2, 3, 4], 2), Some((5, &[5, 6][..])));
        // Equal agreement: the most recent.
        assert_eq!(ix.lookup(&[1, 2, 3, 4], 9), Some((4, &[50, 60][..])));
        assert_eq!(ix.lookup(&[2, 3, 4, 9], 9), None);
        assert_eq!(ix.lookup(&[3, 4], 9), None);
        assert_eq!(ix.lookup(&[1, 2, 3, 4], 0), None);
    }

    #[test]
    fn stays_within_its_budget_dropping_the_oldest() {
        let mut ix = RecallIndex::new(20);
        for s in 0..50u32 {
            let seq: Vec<TokenId> = (0..8).map(|i| (s * 100 + i) as TokenId).collect();
            ix.insert(&seq);
            assert!(ix.tokens() <= 20);
            assert!(ix.entries <= 2 * ix.tokens() + 1024 + 8);
        }
        // The two newest are kept, older ones are gone.
        assert!(ix.lookup(&[4900, 4901, 4902, 4903], 1).is_some());
        assert!(ix.lookup(&[4800, 4801, 4802, 4803], 1).is_some());
        assert!(ix.lookup(&[4700, 4701, 4702, 4703], 1).is_none());
        // A sequence longer than the budget keeps its last tokens.
        let long: Vec<TokenId> = (0..100).collect();
        ix.insert(&long);
        assert_eq!(ix.tokens(), 20);
        assert_eq!(ix.lookup(&[90, 91, 92, 93], 2), Some((4, &[94, 95][..])));
        assert!(RecallIndex::new(0).lookup(&[1, 2, 3, 4], 1).is_none());
    }

    #[test]
    fn stale_entries_are_dropped_by_rebuilds() {
        let mut ix = RecallIndex::new(64);
        for s in 0..5000u32 {
            let seq: Vec<TokenId> = (0..16).map(|i| ((s * 7 + i) % 5000) as TokenId).collect();
            ix.insert(&seq);
        }
        assert!(ix.entries <= 2 * ix.tokens() + 1024 + 16, "{}", ix.entries);
        assert!(ix.index.values().map(Vec::len).sum::<usize>() <= ix.entries);
    }

    #[test]
    fn the_longer_match_drafts_and_finished_requests_feed_the_index() {
        let shared: SharedRecall = Arc::new(Mutex::new(RecallIndex::new(1000)));
        let mut a = RecallDrafter::new(shared.clone());
        // Request 1: prompt 1..=10, output 20..=30.
        let mut h1: Vec<TokenId> = (1..=10).collect();
        h1.extend(20..=30);
        a.finished(&h1, 10);
        // Request 2, same prompt: its own history has no repeat, the store drafts the output.
        let mut b = RecallDrafter::new(shared.clone());
        let h2: Vec<TokenId> = (1..=10).collect();
        assert_eq!(b.propose(&h2, 3), vec![20, 21, 22]);
        // Its own history repeating longer wins over the store.
        let mut h3: Vec<TokenId> = (1..=10).collect();
        h3.extend([77, 78]);
        h3.extend(1..=10);
        assert_eq!(b.propose(&h3, 2), vec![77, 78]);
        assert_eq!(b.name(), "recall");
    }
}
