//! Byte-level BPE (GPT-2 scheme, llama.cpp `llm_tokenizer_bpe_session`): pre-tokenize, map each
//! byte to its printable stand-in character, merge by rank with the HF `tokenizers` BPE model.

use std::sync::OnceLock;

use ahash::AHashMap;
use tokenizers::models::bpe::BPE;
use tokenizers::Model;

use crate::pretok::PreTokenizerImpl;
use crate::{TokenId, TokenizerError};

/// GPT-2's byte → character table: printable Latin-1 bytes map to themselves, the rest to
/// U+0100 upwards in byte order.
pub(crate) fn byte_to_char() -> &'static [char; 256] {
    static T: OnceLock<[char; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut n = 0u32;
        for b in 0..256u32 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            t[b as usize] = if printable {
                char::from_u32(b).unwrap_or('\0')
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap_or('\0')
            };
        }
        t
    })
}

/// Inverse of [`byte_to_char`] for one character, if it is one of the 256 stand-ins.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static T: OnceLock<AHashMap<char, u8>> = OnceLock::new();
    T.get_or_init(|| {
        byte_to_char()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect()
    })
    .get(&c)
    .copied()
}

/// Bytes of a byte-level vocabulary entry; characters outside the table keep their UTF-8.
pub(crate) fn decode_byte_level(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

pub(crate) struct ByteLevelBpe {
    model: BPE,
    pre: PreTokenizerImpl,
}

impl ByteLevelBpe {
    pub(crate) fn new(
        token_to_id: &crate::vocab::Vocab,
        merges: &[String],
        pre: PreTokenizerImpl,
        ignore_merges: bool,
    ) -> Result<Self, TokenizerError> {
        let mut pairs = Vec::with_capacity(merges.len());
        for m in merges {
            // llama.cpp splits at the first space after the first character.
            let first_len = m.chars().next().map_or(0, char::len_utf8);
            let split = m[first_len..].find(' ').map(|p| p + first_len);
            match split {
                Some(p) => pairs.push((m[..p].to_string(), m[p + 1..].to_string())),
                None => {
                    return Err(TokenizerError::Invalid(format!(
                        "merge without a space: {m:?}"
                    )))
                }
            }
        }
        let vocab: AHashMap<String, u32> = (token_to_id.iter().enumerate())
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let model = BPE::builder()
            .vocab_and_merges(vocab, pairs)
            .ignore_merges(ignore_merges)
            // The word cache never evicts and keeps words up to 256 characters with their
            // merges (a few KB each): 16k entries bound it to tens of MB whatever clients send,
            // and still hold the words that recur.
            .cache_capacity(16_384)
            .build()
            .map_err(|e| TokenizerError::Hf(e.to_string()))?;
        Ok(Self { model, pre })
    }

    /// Appends the tokens of `text` to `out`.
    pub(crate) fn tokenize(&self, text: &str, out: &mut Vec<TokenId>) {
        let table = byte_to_char();
        let mut word = String::new();
        self.pre.for_each(text, |piece| {
            word.clear();
            for &b in piece.as_bytes() {
                word.push(table[b as usize]);
            }
            // The model only fails on a character missing from the vocabulary with no unk token;
            // every byte stand-in is in a byte-level vocabulary.
            if let Ok(tokens) = self.model.tokenize(&word) {
                // `tokenizers` keeps ids in 32 bits.
                out.extend(tokens.iter().map(|t| t.id as TokenId));
            }
        });
    }
}
