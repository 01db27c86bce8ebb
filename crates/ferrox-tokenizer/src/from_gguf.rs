//! `tokenizer.ggml.*` metadata (GGUF spec, "Tokenizer" section) → [`TokenizerSpec`].

use ferrox_format::gguf::{GgufFile, MetaValue};

use crate::fim::FimIds;
use crate::{SpecialTokens, TokenId, Tokenizer, TokenizerError, TokenizerSpec};

const P: &str = "tokenizer.ggml.";

fn wrong_type(key: &str, want: &str) -> TokenizerError {
    TokenizerError::Gguf(format!("{key} is not {want}"))
}

/// The value at `key` through `conv`: `None` when absent, an error naming `want` when `conv`
/// finds no value of its type there.
fn scalar<T>(
    f: &GgufFile,
    key: &str,
    want: &str,
    conv: impl FnOnce(&MetaValue) -> Option<T>,
) -> Result<Option<T>, TokenizerError> {
    f.get(key)
        .map(|v| conv(v).ok_or_else(|| wrong_type(key, want)))
        .transpose()
}

impl TokenizerSpec {
    /// Reads the tokenizer metadata of a GGUF file.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        let key = |k: &str| format!("{P}{k}");
        let string = |k: &str| scalar(f, k, "a string", |v| v.as_str().map(str::to_string));
        // Token ids are 32-bit in GGUF (llama.cpp's `llama_token`); a larger value is no id.
        let id = |k: &str| {
            scalar(f, &key(k), "a token id", |v| {
                v.as_u64()
                    .filter(|&x| x <= u64::from(u32::MAX))
                    .and_then(|x| TokenId::try_from(x).ok())
            })
        };
        let flag = |k: &str| scalar(f, &key(k), "a bool", MetaValue::as_bool);
        let strs = |k: &str| -> Result<Option<Vec<String>>, TokenizerError> {
            let k = key(k);
            match f.get_array(&k) {
                None if f.get(&k).is_none() => Ok(None),
                None => Err(wrong_type(&k, "an array")),
                Some(a) => a
                    .as_strs()
                    .map(|s| Some(s.iter().map(str::to_string).collect()))
                    .ok_or_else(|| wrong_type(&k, "a string array")),
            }
        };
        let model = string(&key("model"))?.ok_or_else(|| TokenizerError::Missing(key("model")))?;
        let tokens = strs("tokens")?.ok_or_else(|| TokenizerError::Missing(key("tokens")))?;
        let scores = match f.get_array(&key("scores")) {
            None => None,
            Some(a) => Some(
                a.to_f32_vec()
                    .or_else(|| {
                        a.to_i64_vec()
                            .map(|v| v.into_iter().map(|x| x as f32).collect())
                    })
                    .ok_or_else(|| wrong_type(&key("scores"), "a number array"))?,
            ),
        };
        let token_types = match f.get_array(&key("token_type")) {
            None => None,
            Some(a) => Some(
                a.to_i64_vec()
                    .ok_or_else(|| wrong_type(&key("token_type"), "an integer array"))?
                    .into_iter()
                    .map(|x| i32::try_from(x).unwrap_or(0))
                    .collect(),
            ),
        };
        Ok(TokenizerSpec {
            model,
            pre: string(&key("pre"))?,
            tokens,
            scores,
            token_types,
            merges: strs("merges")?,
            special: SpecialTokens {
                bos: id("bos_token_id")?,
                eos: id("eos_token_id")?,
                eot: id("eot_token_id")?,
                eom: id("eom_token_id")?,
                unk: id("unknown_token_id")?,
                pad: id("padding_token_id")?,
            },
            sep_id: id("seperator_token_id")?,
            mask_id: id("mask_token_id")?,
            fim: FimIds::read(|name| id(&format!("fim_{name}_token_id")))?,
            add_bos: flag("add_bos_token")?,
            add_eos: flag("add_eos_token")?,
            add_space_prefix: flag("add_space_prefix")?,
            chat_template: string("tokenizer.chat_template")?,
        })
    }
}

impl Tokenizer {
    /// The tokenizer llama.cpp builds from this GGUF file.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        Tokenizer::from_spec(TokenizerSpec::from_gguf(f)?)
    }
}
