//! SentencePiece-style BPE over scores, exactly as llama.cpp's `llm_tokenizer_spm_session`
//! (`src/llama-vocab.cpp`): start from UTF-8 characters, repeatedly merge the adjacent pair whose
//! concatenation is a vocabulary entry with the highest score (ties: leftmost), then emit every
//! final symbol that is not a vocabulary entry as byte tokens.
//!
//! Hand-written rather than an HF `BPE` with merges derived from scores: llama.cpp ranks a pair by
//! the score of the merged text (any vocabulary entry, whichever way it splits) and breaks ties by
//! position, which a fixed merge list ranks differently when two merges yield equal scores.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::TokenId;

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

struct Bigram {
    score: f32,
    left: i32,
    right: i32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    // Max-heap: higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

pub(crate) struct Spm<'v> {
    pub token_to_id: &'v crate::vocab::Vocab,
    pub scores: &'v [f32],
    /// Token for each byte value (`<0xXX>`, else the one-byte string), if any.
    pub byte_tokens: &'v [Option<TokenId>; 256],
    pub unk: Option<TokenId>,
}

impl Spm<'_> {
    /// Appends the tokens of `text` (spaces already escaped to `▁`) to `out`.
    pub fn tokenize(&self, text: &str, out: &mut Vec<TokenId>) {
        if text.is_empty() {
            return;
        }
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (off, ch)) in text.char_indices().enumerate() {
            let len = ch.len_utf8() as u32;
            let end = off + len as usize;
            symbols.push(Symbol {
                start: off as u32,
                len,
                prev: i as i32 - 1,
                next: if end == text.len() { -1 } else { i as i32 + 1 },
            });
        }
        let mut queue = BinaryHeap::with_capacity(symbols.len());
        for i in 1..symbols.len() {
            self.try_add(text, &symbols, i as i32 - 1, i as i32, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (b.left as usize, b.right as usize);
            if symbols[l].len == 0
                || symbols[r].len == 0
                || symbols[l].len + symbols[r].len != b.size
            {
                continue;
            }
            symbols[l].len += symbols[r].len;
            symbols[r].len = 0;
            symbols[l].next = symbols[r].next;
            let rn = symbols[r].next;
            if rn >= 0 {
                symbols[rn as usize].prev = b.left;
            }
            let (prev, next) = (symbols[l].prev, symbols[l].next);
            self.try_add(text, &symbols, prev, b.left, &mut queue);
            self.try_add(text, &symbols, b.left, next, &mut queue);
        }
        let mut i = 0i32;
        while i != -1 {
            let s = symbols[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match self.token_to_id.get(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        if let Some(id) = self.byte_tokens[b as usize].or(self.unk) {
                            out.push(id);
                        }
                    }
                }
            }
            i = s.next;
        }
    }

    fn try_add(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: i32,
        right: i32,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (symbols[left as usize], symbols[right as usize]);
        let merged = &text[l.start as usize..(r.start + r.len) as usize];
        if let Some(id) = self.token_to_id.get(merged) {
            queue.push(Bigram {
                score: self.scores[id],
                left,
                right,
                size: l.len + r.len,
            });
        }
    }
}
