//! Longest-match drafter: a suffix automaton (Blumer et al. 1985; the construction in
//! cp-algorithms' "Suffix Automaton") over prompt + generated tokens, extended one token at a
//! time. The draft is what followed the most recent earlier occurrence of the longest suffix of
//! the history that occurred before, so a long verbatim copy (code being edited) is found
//! without choosing an n-gram size.

use super::Drafter;
use ahash::AHashMap;
use ferrox_tokenizer::TokenId;

const NONE: u32 = u32::MAX;

#[derive(Clone)]
struct State {
    /// Length of the longest string in this end-position class.
    len: u32,
    /// Suffix link.
    link: u32,
    next: AHashMap<usize, u32>,
    /// The two most recent end positions (token indices) of the class; `NONE` when unknown.
    last_end: u32,
    prev_end: u32,
}

impl State {
    fn new(len: u32) -> Self {
        State {
            len,
            link: NONE,
            next: AHashMap::new(),
            last_end: NONE,
            prev_end: NONE,
        }
    }
}

/// Drafts the continuation of the longest earlier match of the history's suffix.
#[derive(Clone)]
pub struct LongestMatchDrafter {
    /// Shortest match (in tokens) worth drafting from.
    pub min_match: usize,
    /// The tokens indexed so far (the automaton is rebuilt when a history does not extend them).
    tokens: Vec<TokenId>,
    states: Vec<State>,
    last: u32,
}

impl Default for LongestMatchDrafter {
    fn default() -> Self {
        Self::new(2)
    }
}

impl LongestMatchDrafter {
    pub fn new(min_match: usize) -> Self {
        LongestMatchDrafter {
            min_match: min_match.max(1),
            tokens: Vec::new(),
            states: vec![State::new(0)],
            last: 0,
        }
    }

    fn reset(&mut self) {
        self.tokens.clear();
        self.states.clear();
        self.states.push(State::new(0));
        self.last = 0;
    }

    /// Appends one token (amortised O(1) states; the end-position walk is as long as the
    /// number of distinct repeat classes ending here).
    pub fn push(&mut self, tok: TokenId) {
        let i = self.tokens.len() as u32;
        self.tokens.push(tok);
        let st = &mut self.states;
        let cur = st.len() as u32;
        st.push(State::new(st[self.last as usize].len + 1));
        let mut p = self.last;
        while p != NONE && !st[p as usize].next.contains_key(&tok) {
            st[p as usize].next.insert(tok, cur);
            p = st[p as usize].link;
        }
        if p == NONE {
            st[cur as usize].link = 0;
        } else {
            let q = st[p as usize].next[&tok];
            if st[p as usize].len + 1 == st[q as usize].len {
                st[cur as usize].link = q;
            } else {
                let clone = st.len() as u32;
                let mut c = st[q as usize].clone();
                c.len = st[p as usize].len + 1;
                st.push(c);
                while p != NONE && st[p as usize].next.get(&tok) == Some(&q) {
                    st[p as usize].next.insert(tok, clone);
                    p = st[p as usize].link;
                }
                st[q as usize].link = clone;
                st[cur as usize].link = clone;
            }
        }
        self.last = cur;
        // Exactly the states on the suffix-link path from `cur` gain end position `i`.
        let mut v = cur;
        while v != 0 && v != NONE {
            let s = &mut st[v as usize];
            if s.last_end != i {
                s.prev_end = s.last_end;
                s.last_end = i;
            }
            v = s.link;
        }
    }

    /// Brings the index up to `history`, rebuilding when it is not an extension of it.
    fn sync(&mut self, history: &[TokenId]) {
        let n = self.tokens.len();
        if n > history.len() || history[..n] != self.tokens[..] {
            self.reset();
        }
        for &t in &history[self.tokens.len()..] {
            self.push(t);
        }
    }

    /// [`longest_match`](Self::longest_match) of `history` (indexed first), when at least
    /// `min_match` long.
    pub fn matched(&mut self, history: &[TokenId]) -> Option<(usize, usize)> {
        self.sync(history);
        self.longest_match()
            .filter(|&(len, _)| len >= self.min_match)
    }

    /// Length of the longest suffix of the indexed tokens that also occurs earlier, and where
    /// its most recent earlier occurrence ends (token index).
    pub fn longest_match(&self) -> Option<(usize, usize)> {
        let v = self.states[self.last as usize].link;
        if v == 0 || v == NONE {
            return None;
        }
        let s = &self.states[v as usize];
        (s.prev_end != NONE).then_some((s.len as usize, s.prev_end as usize))
    }
}

impl Drafter for LongestMatchDrafter {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        self.sync(history);
        match self.longest_match() {
            Some((len, end)) if len >= self.min_match && max > 0 => {
                let from = end + 1;
                let to = (from + max).min(history.len());
                out.extend_from_slice(&history[from..to]);
            }
            _ => {}
        }
    }
    fn name(&self) -> &'static str {
        "longest"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force: the longest suffix occurring earlier, its latest earlier end, continuation.
    fn brute(h: &[usize], min: usize, max: usize) -> Vec<TokenId> {
        let n = h.len();
        for len in (min..n).rev() {
            let suf = &h[n - len..];
            if let Some(s) = (0..n - len).rev().find(|&s| h[s..s + len] == *suf) {
                let from = s + len;
                return h[from..(from + max).min(n)].to_vec();
            }
        }
        Vec::new()
    }

    #[test]
    fn drafts_the_continuation_of_the_longest_match() {
        let mut d = LongestMatchDrafter::new(1);
        // Suffix [1,2,3] occurred at 0..3 (followed by 9) and [2,3] also at 5..7 (followed by
        // 4): the longer match wins even though the shorter one is more recent.
        let h = [1, 2, 3, 9, 8, 2, 3, 4, 1, 2, 3];
        assert_eq!(d.propose(&h, 3), vec![9, 8, 2]);
        assert_eq!(d.longest_match(), Some((3, 2)));
        // Among equal-length matches the latest wins.
        assert_eq!(
            LongestMatchDrafter::new(1).propose(&[5, 1, 5, 2, 5], 1),
            vec![2]
        );
    }

    #[test]
    fn min_match_and_no_match() {
        let mut d = LongestMatchDrafter::new(2);
        assert!(d.propose(&[1, 2, 3, 1], 4).is_empty()); // match of 1 < 2
        assert_eq!(d.propose(&[1, 2, 3, 1, 2], 4), vec![3, 1, 2]);
        assert!(LongestMatchDrafter::new(1)
            .propose(&[1, 2, 3], 4)
            .is_empty());
        assert!(LongestMatchDrafter::new(1).propose(&[], 4).is_empty());
        assert!(d.propose(&[1, 2, 1, 2], 0).is_empty());
    }

    #[test]
    fn periodic_history_drafts_the_period() {
        let mut d = LongestMatchDrafter::new(1);
        assert_eq!(d.propose(&[7, 7, 7, 7], 8), vec![7]);
        assert_eq!(d.propose(&[1, 2, 1, 2, 1, 2], 8), vec![1, 2]);
    }

    #[test]
    fn incremental_equals_brute_force_and_rebuilds_on_a_new_history() {
        // A small alphabet makes long repeats and many clones.
        let mut rng = crate::sampling::Rng::new(7);
        let mut d = LongestMatchDrafter::new(1);
        let mut h = Vec::new();
        for step in 0..600 {
            h.push((rng.next_u64() % 3) as usize);
            if step % 200 == 199 {
                // An unrelated history (a new chat): the index must rebuild.
                h.truncate(h.len() / 2);
                h.push(5);
            }
            assert_eq!(d.propose(&h, 6), brute(&h, 1, 6), "after {h:?}");
        }
    }
}
