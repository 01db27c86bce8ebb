//! Building a tokenizer from a vocabulary as llama.cpp's `llama_vocab::impl::load` does
//! (llama.cpp `src/llama-vocab.cpp`): per-model defaults for BOS/EOS/UNK, the GGUF flags, then
//! special tokens found by their text (end of turn, FIM, end of generation) becoming control
//! tokens.

use std::collections::BTreeSet;

use crate::fim::{FimIds, FIM_MID_TEXTS, FIM_PRE_TEXTS, FIM_SUF_TEXTS};
use crate::vocab::Vocab;
use crate::{
    attr, bpe, pretok, Model, SpecialTokens, TokenId, Tokenizer, TokenizerError, TokenizerSpec,
};

// Text lists llama.cpp uses to find end-of-turn / end-of-generation tokens (FIM: `fim.rs`).
pub(crate) const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

fn gguf_type_to_attr(t: i32) -> u8 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

/// Special ids and flags once defaults and the spec's keys are applied.
struct Ids {
    bos: Option<TokenId>,
    eos: Option<TokenId>,
    unk: Option<TokenId>,
    eot: Option<TokenId>,
    eom: Option<TokenId>,
    pad: Option<TokenId>,
    fim: FimIds,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
}

impl Ids {
    /// Defaults per model type, then the GGUF keys (llama.cpp `load`).
    fn resolve(
        spec: &TokenizerSpec,
        is_spm: bool,
        n: usize,
    ) -> Result<(Ids, Option<pretok::PreConfig>), TokenizerError> {
        let (mut bos, mut eos, mut unk) = if is_spm {
            (Some(1), Some(2), Some(0))
        } else {
            (Some(11), Some(11), None)
        };
        let mut add_bos = is_spm;
        let mut add_space_prefix = is_spm;
        let mut pre_cfg = None;
        if !is_spm {
            let pre = spec.pre.as_deref().unwrap_or("default");
            let cfg = pretok::pre_config(pre)?;
            add_bos = cfg.add_bos_default;
            if cfg.clears_bos {
                bos = None;
            }
            pre_cfg = Some(cfg);
        }
        let in_range = |id: Option<TokenId>| id.filter(|&i| i < n);
        bos = in_range(bos);
        eos = in_range(eos);
        unk = in_range(unk);
        let pick = |given: Option<TokenId>, default: Option<TokenId>| in_range(given).or(default);
        if let Some(b) = spec.add_bos {
            add_bos = b;
        }
        if let Some(b) = spec.add_space_prefix {
            add_space_prefix = b;
        }
        let ids = Ids {
            bos: pick(spec.special.bos, bos),
            eos: pick(spec.special.eos, eos),
            unk: pick(spec.special.unk, unk),
            eot: in_range(spec.special.eot),
            eom: in_range(spec.special.eom),
            pad: in_range(spec.special.pad),
            fim: spec.fim.map(in_range),
            add_bos,
            add_eos: spec.add_eos.unwrap_or(false),
            add_space_prefix,
        };
        if ids.add_bos && ids.bos.is_none() {
            return Err(TokenizerError::Invalid(
                "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set"
                    .into(),
            ));
        }
        if ids.add_eos && ids.eos.is_none() {
            return Err(TokenizerError::Invalid(
                "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set"
                    .into(),
            ));
        }
        Ok((ids, pre_cfg))
    }

    /// Text-based detection; a detected token becomes a control token. Where llama.cpp's
    /// hash-map order decides between several candidates we take the first in its list.
    /// Returns the end-of-generation ids.
    fn detect(&mut self, token_to_id: &Vocab, attrs: &mut [u8]) -> BTreeSet<TokenId> {
        let find_first = |list: &[&str]| list.iter().find_map(|t| token_to_id.get(t));
        let make_control = |id: TokenId, attrs: &mut [u8]| attrs[id] |= attr::CONTROL;
        if self.eot.is_none() {
            self.eot = find_first(EOT_TEXTS);
        }
        if self.eom.is_none() {
            self.eom = token_to_id.get("<|eom_id|>");
        }
        self.fim.detect(token_to_id);
        let (eot, eom) = (self.eot, self.eom);
        let f = self.fim;
        let fims = [f.pad, f.rep, f.sep];
        for id in [eot, eom].into_iter().chain(fims).flatten() {
            make_control(id, attrs);
        }
        for t in [FIM_PRE_TEXTS, FIM_SUF_TEXTS, FIM_MID_TEXTS].concat() {
            if let Some(id) = token_to_id.get(t) {
                make_control(id, attrs);
            }
        }
        for (i, t) in token_to_id.iter().enumerate() {
            if attrs[i] & attr::CONTROL != 0 && t.contains("unused") {
                attrs[i] |= attr::UNUSED;
            }
        }
        let mut eog: BTreeSet<TokenId> = fims.into_iter().flatten().collect();
        for t in EOG_TEXTS {
            if let Some(id) = token_to_id.get(t) {
                eog.insert(id);
                make_control(id, attrs);
            }
        }
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = token_to_id.get(t) {
                attrs[id] = attr::USER_DEFINED;
            }
        }
        eog.extend([self.eos, eot, eom].into_iter().flatten());
        // gpt-oss / solar-open: "<|end|>" ends a message, not the generation.
        let in_eog =
            |eog: &BTreeSet<TokenId>, t: &str| token_to_id.get(t).filter(|id| eog.contains(id));
        let has = |eog: &BTreeSet<TokenId>, t: &str| in_eog(eog, t).is_some();
        if (has(&eog, "<|return|>") && has(&eog, "<|call|>"))
            || (has(&eog, "<|calls|>") && has(&eog, "<|flush|>"))
        {
            if let Some(id) = in_eog(&eog, "<|end|>") {
                eog.remove(&id);
                attrs[id] = attr::USER_DEFINED;
            }
        }
        if has(&eog, "<|tool_response>") {
            if let Some(id) = in_eog(&eog, "</s>") {
                eog.remove(&id);
                attrs[id] = attr::NORMAL;
            }
        }
        eog
    }
}

/// SentencePiece: byte fallback tokens (`<0xXX>`, else the one-byte string) and scores.
fn spm_model(token_to_id: &Vocab, scores: Option<Vec<f32>>, n: usize) -> Model {
    let mut byte_tokens = Box::new([None; 256]);
    for (b, slot) in byte_tokens.iter_mut().enumerate() {
        *slot = token_to_id.get(&format!("<0x{b:02X}>")).or_else(|| {
            let s = [b as u8];
            std::str::from_utf8(&s)
                .ok()
                .and_then(|s| token_to_id.get(s))
        });
    }
    let scores = match scores {
        Some(mut s) => {
            s.truncate(n);
            s
        }
        None => vec![0.0; n],
    };
    Model::Spm {
        scores,
        byte_tokens,
    }
}

/// Byte-level BPE with the pre-tokenizer of `tokenizer.ggml.pre`.
fn bpe_model(
    token_to_id: &Vocab,
    merges: Option<Vec<String>>,
    pre_cfg: Option<pretok::PreConfig>,
) -> Result<Model, TokenizerError> {
    let cfg = pre_cfg.ok_or_else(|| TokenizerError::Invalid("no pre-tokenizer".into()))?;
    let merges = merges.ok_or_else(|| TokenizerError::Missing("tokenizer.ggml.merges".into()))?;
    let pre = pretok::PreTokenizerImpl::new(cfg.kind)?;
    Ok(Model::Bpe(Box::new(bpe::ByteLevelBpe::new(
        token_to_id,
        &merges,
        pre,
        cfg.ignore_merges,
    )?)))
}

impl Tokenizer {
    /// Builds the tokenizer llama.cpp builds from this vocabulary.
    pub fn from_spec(mut spec: TokenizerSpec) -> Result<Self, TokenizerError> {
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::Missing("tokenizer.ggml.tokens".into()));
        }
        let is_spm = match spec.model.as_str() {
            "llama" => true,
            "gpt2" => false,
            other => return Err(TokenizerError::UnknownModel(other.to_string())),
        };
        let check_len = |what: &str, len: usize| {
            if len < n {
                Err(TokenizerError::Invalid(format!(
                    "{what} has {len} entries for {n} tokens"
                )))
            } else {
                Ok(())
            }
        };
        if let Some(s) = &spec.scores {
            check_len("tokenizer.ggml.scores", s.len())?;
        }
        if let Some(t) = &spec.token_types {
            check_len("tokenizer.ggml.token_type", t.len())?;
        }

        let mut texts = std::mem::take(&mut spec.tokens);
        for (i, t) in texts.iter_mut().enumerate() {
            if t.is_empty() {
                *t = format!("[EMPTY_{i}]");
            }
        }
        let vocab = Vocab::new(texts.iter().map(String::as_str))?;
        drop(texts);
        let mut attrs: Vec<u8> = match &spec.token_types {
            Some(t) => t[..n].iter().map(|&t| gguf_type_to_attr(t)).collect(),
            None => vec![attr::NORMAL; n],
        };
        let (mut ids, pre_cfg) = Ids::resolve(&spec, is_spm, n)?;
        let eog = ids.detect(&vocab, &mut attrs);
        let model = if is_spm {
            spm_model(&vocab, spec.scores, n)
        } else {
            bpe_model(&vocab, spec.merges, pre_cfg)?
        };

        let mut tok = Tokenizer {
            model,
            vocab,
            attrs,
            pieces: Vec::new(),
            piece_offsets: Vec::new(),
            special: SpecialTokens {
                bos: ids.bos,
                eos: ids.eos,
                eot: ids.eot,
                eom: ids.eom,
                unk: ids.unk,
                pad: ids.pad,
            },
            fim: ids.fim,
            eog: eog.into_iter().collect(),
            add_bos: ids.add_bos,
            add_eos: ids.add_eos,
            add_space_prefix: ids.add_space_prefix,
            special_ids: Vec::new(),
            special_matcher: None,
            chat_template: spec.chat_template,
        };
        tok.build_caches()?;
        Ok(tok)
    }
}
