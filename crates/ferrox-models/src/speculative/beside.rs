//! A drafter running model weights — a separate draft model ([`super::DraftModel`]) or the
//! model itself with fewer experts ([`ReducedExperts`]) — beside a lookup drafter. Lookup
//! drafts cost nothing, so they stand while they are kept at least as often as the model
//! part's; the model part drafts otherwise. Its time counts in the draft-length cost model
//! ([`super::Speculation`]), which decodes plainly where drafting costs more than it saves.

use super::kept::Kept;
use super::{DraftIn, Drafter, Observation};
use crate::blocks::Experts;
use crate::decoder::{Decoder, SeqBatch, OWN_CACHES};
use crate::sampling::argmax;
use crate::TokenId;

/// The part of a [`Beside`] drafter that runs weights.
pub trait ModelDraft: Send {
    /// Name in statistics and metrics.
    fn name(&self) -> &'static str;
    /// Up to `cx.max` tokens to follow `cx.history`, appended to `out` (see [`DraftIn`]).
    fn draft(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>);
}

/// A [`ModelDraft`] with a lookup drafter beside it.
pub struct Beside<M> {
    model: M,
    lookup: Box<dyn Drafter>,
    /// Whether the model part made the last draft (else the lookup's stood).
    by_model: bool,
    /// How often each part's drafts were kept (model, lookup).
    kept: [Kept; 2],
}

impl<M: ModelDraft> Beside<M> {
    pub fn new(model: M, lookup: Box<dyn Drafter>) -> Self {
        Beside {
            model,
            lookup,
            by_model: false,
            kept: [Kept::default(); 2],
        }
    }
}

impl<M: ModelDraft> Drafter for Beside<M> {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        self.by_model = false;
        self.lookup.propose_into(history, max, out);
    }

    fn propose_with(&mut self, mut cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        let start = out.len();
        self.lookup.propose_with(cx.reborrow(), out);
        self.by_model = false;
        if out.len() > start && self.kept[1].rate() >= self.kept[0].rate() {
            return;
        }
        out.truncate(start);
        self.by_model = true;
        cx.max = self.kept[0].chain_len(cx.max);
        self.model.draft(cx, out);
    }

    fn verified(&mut self, drafted: usize, accepted: usize) {
        let part = usize::from(!self.by_model);
        self.kept[part].add(drafted, accepted);
        if part == 1 {
            self.lookup.verified(drafted, accepted);
        }
    }

    fn source(&self) -> &'static str {
        if self.by_model {
            self.model.name()
        } else {
            self.lookup.source()
        }
    }

    fn finished(&mut self, history: &[TokenId], prompt_len: usize) {
        self.lookup.finished(history, prompt_len);
    }

    fn name(&self) -> &'static str {
        self.model.name()
    }

    fn wants_hidden(&self) -> bool {
        self.lookup.wants_hidden()
    }

    fn observe(&mut self, dec: &Decoder, o: Observation<'_>) {
        self.lookup.observe(dec, o);
    }

    fn resume_limit(&self) -> usize {
        self.lookup.resume_limit()
    }
}

/// Self-drafting for mixture-of-experts models (issue 38's reduced-expert draft): the model
/// itself with at most `experts` routed experts per token — the highest-weighted of its own
/// choice, shared experts kept — chained greedily in the sequence's own caches (no second
/// model, no second cache: the full model's keys and values before the fed token are read as
/// they are; the draft's own are cut again before the exact forward).
pub struct ReducedExperts {
    experts: usize,
    logits: Vec<f32>,
}

impl ReducedExperts {
    pub fn new(experts: usize) -> Self {
        ReducedExperts {
            experts: experts.max(1),
            logits: Vec::new(),
        }
    }

    /// Whether `dec` can draft this way: it routes among experts, keeps no recurrent state
    /// (which cannot be cut back) and runs all its layers here.
    pub fn fits(dec: &Decoder) -> bool {
        dec.routes_experts() && !dec.has_recurrent_layers() && dec.caches_local()
    }
}

impl ModelDraft for ReducedExperts {
    fn name(&self) -> &'static str {
        "experts"
    }

    fn draft(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        let (dec, caches) = (cx.dec, cx.caches);
        let Some((&fed, _)) = cx.history.split_last() else {
            return;
        };
        let pos = cx.history.len() - 1;
        if !Self::fits(dec) || caches.iter().any(|c| c.len() != pos) {
            return;
        }
        let mut tok = fed;
        for i in 0..cx.max {
            let seq = SeqBatch {
                tokens: &[tok],
                pos: pos + i,
                caches: &mut *caches,
                first_logit_row: 0,
                key: OWN_CACHES,
            };
            dec.forward_experts(seq, &mut self.logits, Experts::AtMost(self.experts));
            tok = argmax(&self.logits);
            out.push(tok);
        }
        for c in caches.iter_mut() {
            c.truncate(pos);
        }
    }
}
