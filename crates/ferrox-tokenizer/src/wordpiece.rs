//! WordPiece tokenizers of BERT-family encoders, through the HF `tokenizers` crate so ids equal
//! Hugging Face's: from a model directory's `tokenizer.json`, or rebuilt from a GGUF vocabulary
//! (`tokenizer.ggml.model = "bert"`, llama.cpp's `convert_hf_to_gguf.py` layout: word-initial
//! pieces carry a `▁` prefix, continuation pieces lose their `##`).
//!
//! Inputs are framed as BERT's `[CLS] a [SEP]` / `[CLS] a [SEP] b [SEP]` (token types 0 / 1) and
//! truncated longest-first to the model's length, as sentence-transformers does; the padding
//! and truncation a `tokenizer.json` may carry are replaced by that one rule.

use std::path::Path;

use ferrox_format::gguf::GgufFile;
use tokenizers::decoders::wordpiece::WordPiece as WpDecoder;
use tokenizers::models::wordpiece::WordPiece as WpModel;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{
    AddedToken, ModelWrapper, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::{TokenId, TokenizerError};

/// One encoded input: token ids and their token types (segment ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<TokenId>,
    pub types: Vec<u8>,
}

/// A BERT WordPiece tokenizer with its length limit.
pub struct WordPiece {
    tok: Tokenizer,
    max_len: usize,
}

impl std::fmt::Debug for WordPiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordPiece")
            .field("vocab_size", &self.vocab_size())
            .field("max_len", &self.max_len)
            .finish()
    }
}

fn hf_err(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Hf(e.to_string())
}

impl WordPiece {
    /// `tokenizer.json` of a model directory; refuses any model but WordPiece.
    pub fn from_file(path: &Path, max_len: usize) -> Result<WordPiece, TokenizerError> {
        let tok = Tokenizer::from_file(path)
            .map_err(|e| TokenizerError::Hf(format!("{}: {e}", path.display())))?;
        if !matches!(tok.get_model(), ModelWrapper::WordPiece(_)) {
            return Err(TokenizerError::Invalid(format!(
                "{}: an encoder needs a WordPiece tokenizer",
                path.display()
            )));
        }
        WordPiece::framed(tok, max_len)
    }

    /// The vocabulary of a llama.cpp `bert` GGUF. llama.cpp lowercases for every WPM vocabulary,
    /// so this does too (uncased BERT's normalizer).
    pub fn from_gguf(file: &GgufFile, max_len: usize) -> Result<WordPiece, TokenizerError> {
        let model = file.get_str("tokenizer.ggml.model").unwrap_or("");
        if model != "bert" {
            return Err(TokenizerError::UnknownModel(model.to_string()));
        }
        let tokens = file
            .get_str_array("tokenizer.ggml.tokens")
            .ok_or_else(|| TokenizerError::Missing("tokenizer.ggml.tokens".into()))?;
        let types = file
            .get_i64_array("tokenizer.ggml.token_type")
            .unwrap_or_default();
        let mut vocab = ahash::AHashMap::with_capacity(tokens.len());
        let mut specials = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            let id = u32::try_from(i).map_err(hf_err)?;
            // Control tokens (type 3) and bracketed ones keep their text.
            let text = if types.get(i) == Some(&3) || (t.starts_with('[') && t.ends_with(']')) {
                specials.push(t.to_string());
                t.to_string()
            } else if let Some(word) = t.strip_prefix('\u{2581}') {
                word.to_string()
            } else {
                format!("##{t}")
            };
            vocab.entry(text).or_insert(id);
        }
        let id_of = |key: &str, name: &str| -> Result<u32, TokenizerError> {
            let id = file
                .get_u64(key)
                .ok_or_else(|| TokenizerError::Missing(key.into()))?;
            let id = u32::try_from(id).map_err(hf_err)?;
            match tokens.get(id as usize) {
                Some(_) => Ok(id),
                None => Err(TokenizerError::Invalid(format!(
                    "{key} = {id} ({name}) is outside the vocabulary"
                ))),
            }
        };
        // llama.cpp's converter stores [CLS] as BOS (older files: `cls_token_id`) and spells
        // the separator key `seperator`.
        let (cls, sep) = (
            id_of("tokenizer.ggml.cls_token_id", "[CLS]")
                .or_else(|_| id_of("tokenizer.ggml.bos_token_id", "[CLS]"))?,
            id_of("tokenizer.ggml.seperator_token_id", "[SEP]")?,
        );
        let unk = file
            .get_u64("tokenizer.ggml.unknown_token_id")
            .and_then(|i| tokens.get(i as usize).copied())
            .unwrap_or("[UNK]");
        let model = WpModel::builder()
            .vocab(vocab)
            .unk_token(unk.to_string())
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(hf_err)?;
        let mut tok = Tokenizer::new(model);
        tok.with_normalizer(Some(BertNormalizer::new(true, true, None, true)));
        tok.with_pre_tokenizer(Some(BertPreTokenizer));
        tok.with_decoder(Some(WpDecoder::default()));
        tok.with_post_processor(Some(BertProcessing::new(
            (tokens[sep as usize].to_string(), sep),
            (tokens[cls as usize].to_string(), cls),
        )));
        let added: Vec<AddedToken> = specials
            .into_iter()
            .map(|t| AddedToken::from(t, true))
            .collect();
        tok.add_special_tokens(&added);
        WordPiece::framed(tok, max_len)
    }

    fn framed(mut tok: Tokenizer, max_len: usize) -> Result<WordPiece, TokenizerError> {
        if max_len < 3 {
            return Err(TokenizerError::Invalid(format!(
                "an encoder's length limit must be at least 3 tokens, got {max_len}"
            )));
        }
        tok.with_padding(None);
        tok.with_truncation(Some(TruncationParams {
            direction: TruncationDirection::Right,
            max_length: max_len,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
        }))
        .map_err(hf_err)?;
        Ok(WordPiece { tok, max_len })
    }

    /// The most tokens an input becomes (framing included).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn vocab_size(&self) -> usize {
        self.tok.get_vocab_size(true)
    }

    /// `[CLS] text [SEP]`, truncated to the length limit.
    pub fn encode(&self, text: &str) -> Result<Encoded, TokenizerError> {
        let e = self.tok.encode(text, true).map_err(hf_err)?;
        Ok(convert(&e))
    }

    /// Ids of `text`, framed or not, truncated to the length limit (the `/tokenize` view).
    pub fn encode_ids(&self, text: &str, framed: bool) -> Result<Vec<TokenId>, TokenizerError> {
        let e = self.tok.encode(text, framed).map_err(hf_err)?;
        Ok(convert(&e).ids)
    }

    /// The text of `ids`, special tokens skipped and `##` continuations joined.
    pub fn decode(&self, ids: &[TokenId]) -> Result<String, TokenizerError> {
        let ids: Vec<u32> = ids
            .iter()
            .map(|&i| u32::try_from(i).map_err(hf_err))
            .collect::<Result<_, _>>()?;
        self.tok.decode(&ids, true).map_err(hf_err)
    }

    /// `[CLS] a [SEP] b [SEP]` with token types 0 then 1, truncated longest-first (a
    /// cross-encoder's query/document pair).
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<Encoded, TokenizerError> {
        let e = self.tok.encode((a, b), true).map_err(hf_err)?;
        Ok(convert(&e))
    }
}

fn convert(e: &tokenizers::Encoding) -> Encoded {
    Encoded {
        ids: e.get_ids().iter().map(|&i| i as TokenId).collect(),
        types: e.get_type_ids().iter().map(|&t| t.min(1) as u8).collect(),
    }
}
