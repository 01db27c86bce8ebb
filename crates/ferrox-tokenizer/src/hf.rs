//! Hugging Face model directories: `tokenizer.json` through the HF `tokenizers` crate, with
//! `tokenizer_config.json` / `generation_config.json` for BOS/EOS, end-of-generation ids and the
//! chat template.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tokenizers::DecoderWrapper;

use crate::from_spec::{EOG_TEXTS, EOT_TEXTS};
use crate::{
    attr, bpe, parse_byte_token, Model, SpecialTokens, TokenId, Tokenizer, TokenizerError,
};

pub(crate) struct HfModel {
    tok: tokenizers::Tokenizer,
    /// The same tokenizer with special tokens treated as plain text.
    tok_plain: tokenizers::Tokenizer,
    byte_level: bool,
}

impl HfModel {
    pub(crate) fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Vec<TokenId> {
        let t = if parse_special {
            &self.tok
        } else {
            &self.tok_plain
        };
        // `tokenizers` keeps ids in 32 bits.
        t.encode_fast(text, add_special)
            .map(|e| e.get_ids().iter().map(|&i| i as TokenId).collect())
            .unwrap_or_default()
    }

    pub(crate) fn piece(&self, _id: TokenId, text: &str, a: u8) -> Vec<u8> {
        if a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
            return text.as_bytes().to_vec();
        }
        if a & attr::BYTE != 0 {
            if let Some(b) = parse_byte_token(text) {
                return vec![b];
            }
        }
        if self.byte_level {
            bpe::decode_byte_level(text)
        } else {
            text.replace('▁', " ").into_bytes()
        }
    }
}

fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| TokenizerError::Invalid(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TokenizerError::Io {
            path: path.display().to_string(),
            source: e,
        }),
    }
}

/// A token given as `"<s>"` or `{"content": "<s>", ...}`.
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

fn decoder_is_byte_level(d: Option<&DecoderWrapper>) -> bool {
    match d {
        Some(DecoderWrapper::ByteLevel(_)) => true,
        Some(DecoderWrapper::Sequence(s)) => s
            .get_decoders()
            .iter()
            .any(|d| matches!(d, DecoderWrapper::ByteLevel(_))),
        _ => false,
    }
}

/// A token id from a JSON config, read as the 32-bit id `tokenizers` stores (an id beyond it
/// wraps, as it always has).
fn json_id(v: u64) -> TokenId {
    v as u32 as TokenId
}

pub(crate) fn load_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
    let path = dir.join("tokenizer.json");
    let tok = tokenizers::Tokenizer::from_file(&path)
        .map_err(|e| TokenizerError::Hf(format!("{}: {e}", path.display())))?;
    let config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gen_config = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);

    let vocab = tok.get_vocab(true);
    let n = vocab.values().map(|&i| i as usize + 1).max().unwrap_or(0);
    let mut texts = vec![String::new(); n];
    for (t, &i) in &vocab {
        texts[i as usize] = t.clone();
    }
    let byte_level = decoder_is_byte_level(tok.get_decoder());
    let mut attrs = vec![attr::NORMAL; n];
    for (i, t) in texts.iter_mut().enumerate() {
        if t.is_empty() {
            *t = format!("[EMPTY_{i}]");
            attrs[i] = 0;
        } else if !byte_level && parse_byte_token(t).is_some() {
            attrs[i] = attr::BYTE;
        }
    }
    for (id, added) in tok.get_added_tokens_decoder() {
        if let Some(a) = attrs.get_mut(id as usize) {
            *a = if added.special {
                attr::CONTROL
            } else {
                attr::USER_DEFINED
            };
        }
    }
    let vocab = crate::vocab::Vocab::new(texts.iter().map(String::as_str))?;
    drop(texts);
    let token_to_id = &vocab;
    let id_of = |v: Option<&Value>| token_string(v).and_then(|s| token_to_id.get(&s));
    let bos = id_of(config.get("bos_token"));
    let eos = id_of(config.get("eos_token"));
    let unk = id_of(config.get("unk_token"));
    let pad = id_of(config.get("pad_token"));
    let eot = EOT_TEXTS.iter().find_map(|t| token_to_id.get(t));
    let mut fim = crate::fim::FimIds::default();
    fim.detect(token_to_id);
    let mut eog: BTreeSet<TokenId> = EOG_TEXTS
        .iter()
        .filter_map(|t| token_to_id.get(t))
        .collect();
    eog.extend([eos, eot].into_iter().flatten());
    match gen_config.get("eos_token_id") {
        Some(Value::Number(x)) => eog.extend(x.as_u64().map(json_id)),
        Some(Value::Array(a)) => eog.extend(a.iter().filter_map(|x| x.as_u64()).map(json_id)),
        _ => {}
    }
    let chat_template = match config.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .or_else(|| list.first())
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    };
    let add_bos = config
        .get("add_bos_token")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut tok_plain = tok.clone();
    tok_plain.set_encode_special_tokens(true);
    let mut t = Tokenizer {
        model: Model::Hf(Box::new(HfModel {
            tok,
            tok_plain,
            byte_level,
        })),
        vocab,
        attrs,
        pieces: Vec::new(),
        piece_offsets: Vec::new(),
        special: SpecialTokens {
            bos,
            eos,
            eot,
            eom: None,
            unk,
            pad,
        },
        fim,
        eog: eog.into_iter().collect(),
        add_bos,
        add_eos: false,
        add_space_prefix: false,
        special_ids: Vec::new(),
        special_matcher: None,
        chat_template,
    };
    t.build_caches()?;
    Ok(t)
}
