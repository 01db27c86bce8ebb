//! ferrox-tokenizer: text ↔ token ids and chat templates ([`template`]).
//!
//! Tokenizers that give exactly llama.cpp's token ids for a GGUF file (llama.cpp
//! `src/llama-vocab.cpp`: vocabulary loading, special-token partition, SPM and BPE sessions,
//! `token_to_piece`), plus HF `tokenizer.json` directories behind the same type.
//!
//! Encoding: special/control tokens found in the text are cut out first (longest token first, as
//! `tokenizer_st_partition`), then each remaining text fragment goes through the model: SPM (score
//! merges, `▁` for spaces, optional space prefix) or byte-level BPE (pre-tokenizer chosen by
//! `tokenizer.ggml.pre`). BOS/EOS are added per the GGUF flags.

mod bpe;
mod error;
pub mod fim;
mod from_gguf;
mod from_spec;
mod hf;
mod pretok;
pub mod sandbox;
mod special;
mod spm;
mod stream;
mod vocab;
pub mod wordpiece;

pub mod chat_output;
pub mod chat_text;
pub mod message;
pub mod template;

use std::path::Path;

use special::SpecialMatcher;
use vocab::Vocab;

pub use error::{TokenId, TokenizerError};
pub use stream::StreamDecoder;

/// Token attributes (llama.cpp `llama_token_attr`).
pub mod attr {
    pub const UNKNOWN: u8 = 1 << 0;
    pub const UNUSED: u8 = 1 << 1;
    pub const NORMAL: u8 = 1 << 2;
    pub const CONTROL: u8 = 1 << 3;
    pub const USER_DEFINED: u8 = 1 << 4;
    pub const BYTE: u8 = 1 << 5;
}

/// A vocabulary as GGUF stores it (`tokenizer.ggml.*`), independent of the file reader.
#[derive(Debug, Clone, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece) or `gpt2` (byte-level BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    /// GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub token_types: Option<Vec<i32>>,
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.*_token_id` as the file gives them (the tokenizer's own
    /// [`SpecialTokens`] are these checked against the vocabulary, or detected).
    pub special: SpecialTokens,
    pub sep_id: Option<TokenId>,
    pub mask_id: Option<TokenId>,
    /// `tokenizer.ggml.fim_*_token_id`.
    pub fim: fim::FimIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

/// Special token ids of a vocabulary.
#[derive(Debug, Clone, Default)]
pub struct SpecialTokens {
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub eot: Option<TokenId>,
    pub eom: Option<TokenId>,
    pub unk: Option<TokenId>,
    pub pad: Option<TokenId>,
}

enum Model {
    Spm {
        scores: Vec<f32>,
        byte_tokens: Box<[Option<TokenId>; 256]>,
    },
    Bpe(Box<bpe::ByteLevelBpe>),
    Hf(Box<hf::HfModel>),
}

/// A tokenizer: text ↔ token ids, exactly as llama.cpp for GGUF vocabularies.
pub struct Tokenizer {
    model: Model,
    vocab: Vocab,
    attrs: Vec<u8>,
    /// `token_to_piece(special = true)` bytes of every token, concatenated.
    pieces: Vec<u8>,
    piece_offsets: Vec<u32>,
    special: SpecialTokens,
    fim: fim::FimIds,
    eog: Vec<TokenId>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    /// Special-token matcher: pattern i is `special_ids[i]` (longest first).
    special_ids: Vec<TokenId>,
    special_matcher: Option<SpecialMatcher>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab.len())
            .field("special", &self.special)
            .field("eog", &self.eog)
            .finish()
    }
}

impl Tokenizer {
    /// Loads the tokenizer of a Hugging Face model directory (`tokenizer.json`, plus
    /// `tokenizer_config.json` for BOS/EOS and the chat template when present).
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        hf::load_dir(dir.as_ref())
    }

    /// Fills the piece cache and the special-token matcher from `texts` and `attrs`.
    fn build_caches(&mut self) -> Result<(), TokenizerError> {
        let n = self.vocab.len();
        let mut pieces = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u32);
        for id in 0..n {
            let p = self.compute_piece(id);
            pieces.extend_from_slice(&p);
            let end = u32::try_from(pieces.len())
                .map_err(|_| TokenizerError::Invalid("vocabulary pieces exceed 4 GiB".into()))?;
            offsets.push(end);
        }
        self.pieces = pieces;
        self.piece_offsets = offsets;

        // An empty token text would match everywhere and claim nothing (llama.cpp's search
        // never advances past it): it is not matched.
        let mut ids: Vec<TokenId> = (0..n)
            .filter(|&i| self.attrs[i] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .filter(|&i| !self.vocab.text(i).is_empty())
            .collect();
        ids.sort_by_key(|&i| std::cmp::Reverse(self.vocab.text(i).len()));
        if !ids.is_empty() {
            let pats: Vec<&str> = ids.iter().map(|&i| self.vocab.text(i)).collect();
            let m =
                SpecialMatcher::new(&pats).map_err(|e| TokenizerError::Invalid(e.to_string()))?;
            self.special_matcher = Some(m);
        }
        self.special_ids = ids;
        Ok(())
    }

    fn compute_piece(&self, id: TokenId) -> Vec<u8> {
        let text = self.vocab.text(id);
        let a = self.attrs[id];
        if let Model::Hf(h) = &self.model {
            return h.piece(id, text, a);
        }
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            return text.as_bytes().to_vec();
        }
        if a & attr::NORMAL != 0 {
            return match &self.model {
                Model::Spm { .. } => text.replace('▁', " ").into_bytes(),
                _ => bpe::decode_byte_level(text),
            };
        }
        if a & attr::BYTE != 0 {
            if let Some(b) = parse_byte_token(text) {
                return vec![b];
            }
        }
        Vec::new()
    }

    /// Token ids of `text`. `add_special` adds BOS/EOS as the model's metadata asks;
    /// `parse_special` lets control tokens written in the text (e.g. `<|im_end|>`) become those
    /// tokens. User-defined tokens are always matched, as in llama.cpp.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let specials = match parse_special {
            true => Specials::Parse,
            false => Specials::Skip,
        };
        self.encode_with(text, add_special, specials)
    }

    /// [`encode`](Self::encode) with control tokens matched as `specials` says.
    fn encode_with(&self, text: &str, add_special: bool, specials: Specials<'_>) -> Vec<TokenId> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if let Model::Hf(h) = &self.model {
            return match specials {
                Specials::Parse => h.encode(text, add_special, true),
                Specials::Skip => h.encode(text, add_special, false),
                Specials::Outside(literal) => self.hf_encode_outside(h, text, literal),
            };
        }
        if add_special && self.add_bos {
            if let Some(b) = self.special.bos {
                out.push(b);
            }
        }
        let mut prev_special = true;
        for frag in self.partition(text, specials) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(s) => {
                    match &self.model {
                        Model::Spm {
                            scores,
                            byte_tokens,
                        } => {
                            let mut t = String::with_capacity(s.len() + 3);
                            if self.add_space_prefix && prev_special {
                                t.push('▁');
                            }
                            for c in s.chars() {
                                t.push(if c == ' ' { '▁' } else { c });
                            }
                            spm::Spm {
                                token_to_id: &self.vocab,
                                scores,
                                byte_tokens,
                                unk: self.special.unk,
                            }
                            .tokenize(&t, &mut out);
                        }
                        Model::Bpe(b) => b.tokenize(s, &mut out),
                        Model::Hf(_) => {}
                    }
                    prev_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            if let Some(e) = self.special.eos {
                out.push(e);
            }
        }
        out
    }

    /// Splits `text` at special tokens as llama.cpp's `tokenizer_st_partition`: tokens are
    /// taken longest first, each claiming its leftmost non-overlapping occurrences in the text
    /// not yet claimed. Control (and unknown) tokens are matched as `specials` says;
    /// user-defined ones always.
    fn partition<'t>(&self, text: &'t str, specials: Specials<'_>) -> Vec<Fragment<'t>> {
        let Some(sm) = self.special_matcher.as_ref().filter(|_| !text.is_empty()) else {
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![Fragment::Text(text)]
            };
        };
        let keep = |rank: usize, s: usize, e: usize| {
            let control = self.attrs[self.special_ids[rank]] & (attr::CONTROL | attr::UNKNOWN) != 0;
            !control || specials.allows(s, e)
        };
        let spans = sm.claim(text, keep);
        if spans.is_empty() {
            return vec![Fragment::Text(text)];
        }
        let mut out = Vec::with_capacity(spans.len() * 2 + 1);
        let mut pos = 0usize;
        for (s, e, rank) in spans {
            if s > pos {
                out.push(Fragment::Text(&text[pos..s]));
            }
            out.push(Fragment::Token(self.special_ids[rank]));
            pos = e;
        }
        if pos < text.len() {
            out.push(Fragment::Text(&text[pos..]));
        }
        out
    }

    /// Bytes of one token as llama.cpp's `token_to_piece(special = true)`: control tokens as
    /// their text, byte tokens as the byte, `▁` as space (SPM), byte-level characters decoded
    /// (BPE). Out-of-range ids give no bytes.
    pub fn token_to_piece(&self, id: TokenId) -> &[u8] {
        if id >= self.vocab.len() {
            return &[];
        }
        &self.pieces[self.piece_offsets[id] as usize..self.piece_offsets[id + 1] as usize]
    }

    /// Whether `id` is rendered only when special tokens are shown (control / unknown).
    pub fn is_special(&self, id: TokenId) -> bool {
        self.attrs
            .get(id)
            .is_some_and(|a| a & (attr::CONTROL | attr::UNKNOWN) != 0)
    }

    /// Attribute bits of `id` (see [`attr`]).
    pub fn token_attr(&self, id: TokenId) -> u8 {
        self.attrs.get(id).copied().unwrap_or(0)
    }

    /// Vocabulary string of `id` (as stored, e.g. `▁the` or `Ġthe`).
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        self.vocab.get_text(id)
    }

    pub fn token_to_id(&self, text: &str) -> Option<TokenId> {
        self.vocab.get(text)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn bos_id(&self) -> Option<TokenId> {
        self.special.bos
    }

    pub fn eos_id(&self) -> Option<TokenId> {
        self.special.eos
    }

    pub fn eot_id(&self) -> Option<TokenId> {
        self.special.eot
    }

    /// Whether encoding with `add_special` prepends BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.special.bos.is_some()
    }

    /// Token ids that end generation (EOS, EOT, `<|im_end|>`, `<end_of_turn>`, FIM stops, ...),
    /// sorted.
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.eog
    }

    pub fn is_eog(&self, id: TokenId) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The model's chat template (`tokenizer.chat_template`), if it has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Text of the BOS / EOS tokens, for chat templates.
    pub fn bos_text(&self) -> &str {
        self.special
            .bos
            .and_then(|i| self.token_text(i))
            .unwrap_or("")
    }

    pub fn eos_text(&self) -> &str {
        self.special
            .eos
            .and_then(|i| self.token_text(i))
            .unwrap_or("")
    }

    /// Text of `ids`, with special tokens written out and invalid UTF-8 replaced by U+FFFD. With
    /// SentencePiece's space prefix on, the first token's leading space is dropped (llama.cpp
    /// `detokenize`), so `decode(encode(s, false, ..)) == s`.
    pub fn decode(&self, ids: &[TokenId]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, false)).into_owned()
    }

    /// Like [`decode`](Self::decode) but control/unknown tokens produce no text.
    pub fn decode_skip_special(&self, ids: &[TokenId]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, true)).into_owned()
    }

    /// Raw bytes of `ids` (pieces concatenated, leading-space rule applied).
    pub fn decode_bytes(&self, ids: &[TokenId], skip_special: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        let mut strip = self.add_space_prefix;
        for &id in ids {
            if skip_special && self.is_special(id) {
                strip = false;
                continue;
            }
            let mut piece = self.token_to_piece(id);
            if std::mem::take(&mut strip) {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            out.extend_from_slice(piece);
        }
        out
    }
}

enum Fragment<'t> {
    Text(&'t str),
    Token(TokenId),
}

/// Where control tokens written in a text become those tokens.
#[derive(Clone, Copy)]
enum Specials<'a> {
    /// Everywhere (`parse_special`).
    Parse,
    /// Nowhere.
    Skip,
    /// Outside these sorted, disjoint byte ranges (message text in a rendered chat).
    Outside(&'a [std::ops::Range<usize>]),
}

impl Specials<'_> {
    /// Whether a control token at `start..end` is one.
    fn allows(&self, start: usize, end: usize) -> bool {
        match self {
            Specials::Parse => true,
            Specials::Skip => false,
            Specials::Outside(ranges) => {
                // The first range ending after `start` is the only one that can overlap.
                let i = ranges.partition_point(|r| r.end <= start);
                ranges.get(i).is_none_or(|r| r.start >= end)
            }
        }
    }
}

fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests;
