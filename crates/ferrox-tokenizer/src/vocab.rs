//! Token texts in one arena with a hash index of ids: two allocations for the whole vocabulary
//! instead of two `String`s per token (a 262k-token vocabulary is ~6 MB this way, ~30 MB as
//! `Vec<String>` plus `HashMap<String, u32>`).

use ahash::RandomState;
use hashbrown::HashTable;

use crate::TokenId;

pub(crate) struct Vocab {
    arena: String,
    /// End of token `i`'s text in `arena` (its start is the previous end).
    ends: Vec<u32>,
    /// Ids stored in 32 bits (half the table); [`Vocab::get`] widens them to [`TokenId`].
    index: HashTable<u32>,
    hasher: RandomState,
}

/// Two ids with the same text (`first` < `second`).
pub(crate) struct Duplicate {
    pub text: String,
    pub first: TokenId,
    pub second: TokenId,
}

impl From<Duplicate> for crate::TokenizerError {
    fn from(d: Duplicate) -> Self {
        crate::TokenizerError::DuplicateToken {
            text: d.text,
            first: d.first,
            second: d.second,
        }
    }
}

impl Vocab {
    /// The vocabulary of `texts` in id order.
    pub fn new<'a>(texts: impl Iterator<Item = &'a str> + Clone) -> Result<Self, Duplicate> {
        let (n, bytes) = texts.clone().fold((0, 0), |(n, b), t| (n + 1, b + t.len()));
        let mut arena = String::with_capacity(bytes);
        let mut ends = Vec::with_capacity(n);
        for t in texts {
            arena.push_str(t);
            ends.push(u32::try_from(arena.len()).expect("vocabulary text under 4 GiB"));
        }
        let mut v = Vocab {
            arena,
            ends,
            index: HashTable::with_capacity(n),
            hasher: RandomState::new(),
        };
        for id in 0..n as u32 {
            let text = v.text(id as usize);
            let hash = v.hasher.hash_one(text);
            let (arena, ends, hasher) = (&v.arena, &v.ends, &v.hasher);
            let text_of = |i: u32| {
                let end = ends[i as usize] as usize;
                let start = if i == 0 {
                    0
                } else {
                    ends[i as usize - 1] as usize
                };
                &arena[start..end]
            };
            if let Some(&first) = v.index.find(hash, |&i| text_of(i) == text) {
                return Err(Duplicate {
                    text: text.to_string(),
                    first: first as TokenId,
                    second: id as TokenId,
                });
            }
            v.index
                .insert_unique(hash, id, |&i| hasher.hash_one(text_of(i)));
        }
        Ok(v)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Text of token `id` (panics out of range, like indexing).
    pub fn text(&self, id: TokenId) -> &str {
        let start = if id == 0 {
            0
        } else {
            self.ends[id - 1] as usize
        };
        &self.arena[start..self.ends[id] as usize]
    }

    pub fn get_text(&self, id: TokenId) -> Option<&str> {
        (id < self.len()).then(|| self.text(id))
    }

    /// The id of `text`.
    pub fn get(&self, text: &str) -> Option<TokenId> {
        let hash = self.hasher.hash_one(text);
        self.index
            .find(hash, |&i| self.text(i as usize) == text)
            .map(|&i| i as TokenId)
    }

    /// Every text in id order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.text(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_both_ways_and_duplicates() {
        let texts = ["a", "", "bc", "é", "[EMPTY_1]"];
        let v = Vocab::new(texts.iter().copied()).ok().unwrap();
        assert_eq!(v.len(), 5);
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(v.text(i), *t);
            assert_eq!(v.get(t), Some(i));
        }
        assert_eq!(v.get("b"), None);
        assert_eq!(v.get_text(5), None);
        assert_eq!(v.get("bc"), Some(2));
        let d = Vocab::new(["x", "y", "x"].into_iter()).err().unwrap();
        assert_eq!((d.text.as_str(), d.first, d.second), ("x", 0, 2));
    }
}
