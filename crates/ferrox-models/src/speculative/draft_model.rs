//! A separate draft model (llama.cpp's `--model-draft`; Leviathan et al. 2023, "Fast Inference
//! from Transformers via Speculative Decoding"): a smaller model with the target's vocabulary
//! drafts greedily in its own caches, and the engine's one verifier keeps what the target
//! agrees with. The compatibility rule is llama.cpp's `common_speculative_are_compatible`:
//! same special tokens, vocabulary sizes within 128, the same text for every token from id 5.
//!
//! A lookup drafter runs beside it ([`Beside`]).

use std::sync::Arc;

use super::beside::{Beside, ModelDraft};
use super::{DraftIn, Drafter};
use crate::decoder::Decoder;
use crate::sampling::argmax;
use crate::TokenId;
use ferrox_core::cache::KvCache;
use ferrox_tokenizer::Tokenizer;

/// Vocabulary sizes further apart than this are refused (llama.cpp's
/// `SPEC_VOCAB_MAX_SIZE_DIFFERENCE`).
pub const MAX_VOCAB_DIFFERENCE: usize = 128;
/// Token texts are compared from this id on (llama.cpp's `SPEC_VOCAB_CHECK_START_TOKEN_ID`:
/// the first few are control tokens that conversions name differently).
const FIRST_COMPARED_ID: usize = 5;

/// Why a model cannot draft for another.
#[derive(Debug, thiserror::Error)]
pub enum DraftModelError {
    #[error(
        "the draft model's vocabulary has {draft} tokens and the model's {target}: more than \
         {MAX_VOCAB_DIFFERENCE} apart"
    )]
    VocabSize { target: usize, draft: usize },
    #[error("token {id} is {target:?} in the model but {draft:?} in the draft model")]
    Token {
        id: TokenId,
        target: String,
        draft: String,
    },
    #[error("the draft model's {which} token is {draft:?} but the model's is {target:?}")]
    Special {
        which: &'static str,
        target: Option<TokenId>,
        draft: Option<TokenId>,
    },
    #[error(
        "the draft model keeps a recurrent state, which cannot be rolled back past a rejected draft"
    )]
    Recurrent,
    #[error("the draft model's layers run in other processes; it must run in this one")]
    Remote,
}

/// A draft model checked against the model it drafts for; [`drafter`](Self::drafter) makes
/// one sequence's drafter over it (each with its own caches).
#[derive(Clone)]
pub struct DraftModel {
    decoder: Arc<Decoder>,
    /// Ids the target has logits for: a draft stops before any other.
    target_vocab: usize,
}

impl std::fmt::Debug for DraftModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftModel")
            .field("arch", &self.decoder.config.arch)
            .field("layers", &self.decoder.config.n_layers)
            .field("target_vocab", &self.target_vocab)
            .finish()
    }
}

impl DraftModel {
    /// `draft` (with its tokenizer) as the draft model of `target`, if their vocabularies
    /// agree.
    pub fn new(
        target: &Decoder,
        target_tok: &Tokenizer,
        draft: Arc<Decoder>,
        draft_tok: &Tokenizer,
    ) -> Result<DraftModel, DraftModelError> {
        if draft.has_recurrent_layers() {
            return Err(DraftModelError::Recurrent);
        }
        if !draft.caches_local() {
            return Err(DraftModelError::Remote);
        }
        let specials = [
            ("BOS", target_tok.bos_id(), draft_tok.bos_id()),
            ("EOS", target_tok.eos_id(), draft_tok.eos_id()),
        ];
        for (which, t, d) in specials {
            if t != d {
                return Err(DraftModelError::Special {
                    which,
                    target: t,
                    draft: d,
                });
            }
        }
        if target_tok.adds_bos() != draft_tok.adds_bos() {
            return Err(DraftModelError::Special {
                which: "leading BOS",
                target: target_tok.bos_id().filter(|_| target_tok.adds_bos()),
                draft: draft_tok.bos_id().filter(|_| draft_tok.adds_bos()),
            });
        }
        let (t, d) = (target_tok.vocab_size(), draft_tok.vocab_size());
        if t.abs_diff(d) > MAX_VOCAB_DIFFERENCE {
            return Err(DraftModelError::VocabSize {
                target: t,
                draft: d,
            });
        }
        for id in FIRST_COMPARED_ID..t.min(d) {
            let id = id as TokenId;
            let (a, b) = (target_tok.token_to_piece(id), draft_tok.token_to_piece(id));
            if a != b {
                return Err(DraftModelError::Token {
                    id,
                    target: String::from_utf8_lossy(a).into_owned(),
                    draft: String::from_utf8_lossy(b).into_owned(),
                });
            }
        }
        Ok(DraftModel {
            decoder: draft,
            target_vocab: target.vocab_size(),
        })
    }

    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// A sequence's drafter: this model (in caches of its own), with `lookup` beside it.
    pub fn drafter(&self, lookup: Box<dyn Drafter>) -> DraftModelDrafter {
        let run = DraftModelRun {
            model: self.clone(),
            caches: self.decoder.new_caches(),
            cached: Vec::new(),
            logits: Vec::new(),
        };
        Beside::with(run, lookup)
    }
}

/// A sequence's drafter over a [`DraftModel`], beside a lookup drafter.
pub type DraftModelDrafter = Beside<DraftModelRun>;

/// One sequence's run of a [`DraftModel`]: its caches and the tokens in them.
pub struct DraftModelRun {
    model: DraftModel,
    caches: Vec<KvCache>,
    /// The tokens in `caches`, by position.
    cached: Vec<TokenId>,
    logits: Vec<f32>,
}

impl ModelDraft for DraftModelRun {
    fn name(&self) -> Option<&'static str> {
        Some("draft-model")
    }

    /// The model's greedy draft. Its caches keep what they share with `history` and take in
    /// the rest in one forward; the sequence's own caches are not touched.
    /// Within the draft model's context (past it, the lookup's draft stands).
    fn ready(&self, cx: &DraftIn<'_>) -> bool {
        let len = cx.history.len();
        len > 0 && len + cx.max <= self.model.decoder.config.max_seq_len
    }

    fn draft(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        let (history, max) = (cx.history, cx.max);
        let dec = &*self.model.decoder;
        if !self.ready(&cx) {
            return;
        }
        // At least the last token is fed: its logits give the first draft token.
        let same = self
            .cached
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count()
            .min(history.len() - 1);
        let feed = &history[same..];
        dec.forward_into(
            feed,
            same,
            &mut self.caches,
            feed.len() - 1,
            &mut self.logits,
        );
        self.cached.truncate(same);
        self.cached.extend_from_slice(feed);
        for i in 0..max {
            let tok = argmax(&self.logits);
            if tok >= self.model.target_vocab {
                return;
            }
            out.push(tok);
            if i + 1 < max {
                let pos = self.cached.len();
                dec.forward_into(&[tok], pos, &mut self.caches, 0, &mut self.logits);
                self.cached.push(tok);
            }
        }
    }
}
