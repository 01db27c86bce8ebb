//! A drafter running model weights — the model's MTP block or a draft head
//! ([`super::MtpBlock`]), a separate draft model ([`super::DraftModel`]), the model itself with
//! fewer experts ([`ReducedExperts`]) — beside a lookup drafter, through one policy. Lookup
//! drafts cost nothing and copy long runs verbatim (code edits): where the model part's first
//! token is known for free and agrees, or where the lookup's drafts were kept at least as
//! often as the part's, the lookup's draft stands; otherwise the part drafts, chaining only as
//! far as its own kept rate makes worth it. Its time counts in the draft-length cost model
//! ([`super::Speculation`]), which decodes plainly where drafting costs more than it saves.
//! While the lookup copies (a long draft kept whole), the part's rows wait and it takes them
//! in with the next feed, in one batch ([`ModelDraft::defer`]); so they do while the part
//! rests, after a draft of its would not have paid at its own kept rate and the measured
//! verify costs ([`REST`] rounds, then it drafts once more).

use super::kept::Kept;
use super::{AdaptiveDraft, DraftIn, Drafter, Observation};
use crate::blocks::Experts;
use crate::decoder::{Decoder, SeqBatch, OWN_CACHES};
use crate::sampling::argmax;
use crate::TokenId;

/// The part of a [`Beside`] drafter that runs weights.
pub trait ModelDraft: Send {
    /// Name in statistics and metrics; `None` while the part cannot draft at all (the model
    /// has no MTP block): the drafter is then its lookup, under that name.
    fn name(&self) -> Option<&'static str>;
    /// Whether the part can draft for this request (else the lookup's draft stands).
    fn ready(&self, _cx: &DraftIn<'_>) -> bool {
        true
    }
    /// Its first draft token when known without running anything (an MTP block gets it
    /// while taking in the verified rows).
    fn first(&self, _cx: &DraftIn<'_>) -> Option<TokenId> {
        None
    }
    /// Up to `cx.max` tokens to follow `cx.history`, appended to `out` (see [`DraftIn`]).
    fn draft(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>);
    /// Its second choice beside each token of its last draft, in order (a draft tree's
    /// branches); none by default.
    fn seconds(&self) -> &[TokenId] {
        &[]
    }
    /// See [`Drafter::wants_hidden`], [`Drafter::observe`], [`Drafter::resume_limit`].
    fn wants_hidden(&self) -> bool {
        false
    }
    fn observe(&mut self, _dec: &Decoder, _o: Observation<'_>) {}
    /// The rows of `o` while the lookup copies: a part that must see every row (an MTP
    /// block's cache) may keep them to take in with the next [`observe`](Self::observe), in
    /// one batch, instead of now; it drafts nothing until then.
    fn defer(&mut self, dec: &Decoder, o: Observation<'_>) {
        self.observe(dec, o);
    }
    fn resume_limit(&self) -> usize {
        usize::MAX
    }
}

/// A lookup draft of at least this many tokens kept whole: the lookup is copying (a code
/// edit's unchanged lines), and the model part's rows wait ([`ModelDraft::defer`]).
const COPYING: usize = 4;

/// Draft rounds a model part rests when its drafts do not pay at the measured verify costs
/// (a code edit, where the lookup copies and the part's guesses miss): its rows wait and it
/// drafts nothing; then it is fed and drafts once more, so its kept rate follows the text.
const REST: usize = 16;

/// A [`ModelDraft`] with a lookup drafter beside it.
pub struct Beside<M> {
    model: M,
    lookup: Box<dyn Drafter>,
    /// Whether the model part made the last draft (else the lookup's stood).
    by_model: bool,
    /// How often each part's drafts were kept (model, lookup).
    kept: [Kept; 2],
    /// How often the model part's second choice was the token drawn where its first was
    /// rejected.
    seconds: Kept,
    /// The lookup's last draft was long and kept whole ([`COPYING`]).
    copying: bool,
    /// Draft rounds the model part still rests ([`REST`]), and whether its next chance to
    /// draft is taken whatever its kept rate (it has rested).
    rest: usize,
    probe: bool,
}

impl<M: ModelDraft> Beside<M> {
    pub fn with(model: M, lookup: Box<dyn Drafter>) -> Self {
        Beside {
            model,
            lookup,
            by_model: false,
            kept: [Kept::default(); 2],
            seconds: Kept::default(),
            copying: false,
            rest: 0,
            probe: false,
        }
    }
}

impl<M: ModelDraft> Drafter for Beside<M> {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        (self.by_model, self.copying) = (false, false);
        self.lookup.propose_into(history, max, out);
    }

    fn propose_with(&mut self, mut cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        let start = out.len();
        (self.by_model, self.copying) = (false, false);
        if self.rest > 0 {
            self.rest -= 1;
            self.probe = self.rest == 0;
        }
        // The controller's length pools both parts' acceptance; a lookup draft that stands
        // runs as far as the verify costs make worth it at its own acceptance (it costs nothing
        // per token), so the model part's misses do not cut the verbatim copies of code edits
        // short.
        let wide = DraftIn {
            max: cx.room,
            ..cx.reborrow()
        };
        self.lookup.propose_with(wide, out);
        // The lookup's draft (even an empty one) stands while the part cannot draft;
        // otherwise where the part agrees on its first token or is kept less often.
        let stands = self.rest > 0
            || !self.model.ready(&cx)
            || out.get(start).is_some_and(|&t| {
                self.model.first(&cx) == Some(t) || self.kept[1].rate() >= self.kept[0].rate()
            });
        if stands {
            let len = cx.lengths.len_at(self.kept[1].rate()).clamp(1, cx.room);
            return out.truncate(start + len);
        }
        out.truncate(start);
        if !self.probe && cx.lengths.len_at(self.kept[0].rate()) == 0 {
            self.rest = REST;
            return;
        }
        self.probe = false;
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
        self.copying = part == 1 && drafted >= COPYING && accepted == drafted;
    }

    /// The model part's second choices beside its draft, from the shallowest, while each
    /// pays for its row: a branch beside token `i` adds a token when the first `i` are kept
    /// (`a^i`), token `i` is not (`1 - a`) and the second choice is the token drawn there
    /// (`q`).
    fn branches(
        &mut self,
        lengths: &AdaptiveDraft,
        draft: &[TokenId],
        out: &mut Vec<(usize, TokenId)>,
    ) {
        if !self.by_model {
            return;
        }
        let (a, q) = (self.kept[0].rate(), self.seconds.rate());
        let mut expect: f64 = (0..=draft.len()).map(|k| a.powi(k as i32)).sum();
        let mut rows = draft.len() + 1;
        for (i, &t) in self.model.seconds().iter().enumerate().take(draft.len()) {
            let gain = a.powi(i as i32) * (1.0 - a) * q;
            if !lengths.pays(rows, expect, gain) {
                break;
            }
            out.push((i, t));
            (expect, rows) = (expect + gain, rows + 1);
        }
    }

    fn branch_verified(&mut self, kept: bool) {
        self.seconds.add(1, usize::from(kept));
    }

    fn source(&self) -> &'static str {
        match self.model.name() {
            Some(name) if self.by_model => name,
            _ => self.lookup.source(),
        }
    }

    fn finished(&mut self, history: &[TokenId], prompt_len: usize) {
        self.lookup.finished(history, prompt_len);
    }

    fn name(&self) -> &'static str {
        self.model.name().unwrap_or_else(|| self.lookup.name())
    }

    fn wants_hidden(&self) -> bool {
        self.model.wants_hidden() || self.lookup.wants_hidden()
    }

    fn observe(&mut self, dec: &Decoder, o: Observation<'_>) {
        match self.copying || self.rest > 0 {
            true => self.model.defer(dec, o),
            false => self.model.observe(dec, o),
        }
        self.lookup.observe(dec, o);
    }

    fn resume_limit(&self) -> usize {
        self.model.resume_limit().min(self.lookup.resume_limit())
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
    fn name(&self) -> Option<&'static str> {
        Some("experts")
    }

    fn ready(&self, cx: &DraftIn<'_>) -> bool {
        Self::fits(cx.dec)
    }

    fn draft(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        let (dec, caches) = (cx.dec, cx.caches);
        let Some((&fed, _)) = cx.history.split_last() else {
            return;
        };
        let pos = cx.history.len() - 1;
        if caches.iter().any(|c| c.len() != pos) {
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
                tree: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::AdaptiveDraft;

    /// A model part whose rows wait (the lookup copies): it cannot draft.
    struct Waiting;

    impl ModelDraft for Waiting {
        fn name(&self) -> Option<&'static str> {
            Some("waiting")
        }
        fn ready(&self, _: &DraftIn<'_>) -> bool {
            false
        }
        fn draft(&mut self, _: DraftIn<'_>, _: &mut Vec<TokenId>) {}
    }

    /// A lookup that always has as long a draft as it is allowed.
    struct Copier;

    impl Drafter for Copier {
        fn propose_into(&mut self, _: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
            out.extend(std::iter::repeat_n(7, max));
        }
        fn name(&self) -> &'static str {
            "copier"
        }
    }

    /// A model part always ready to draft `9`, counting how its rows were handed over.
    #[derive(Default)]
    struct Guess {
        fed: usize,
        deferred: usize,
    }

    impl ModelDraft for Guess {
        fn name(&self) -> Option<&'static str> {
            Some("guess")
        }
        fn draft(&mut self, _: DraftIn<'_>, out: &mut Vec<TokenId>) {
            out.push(9);
        }
        fn observe(&mut self, _: &Decoder, _: Observation<'_>) {
            self.fed += 1;
        }
        fn defer(&mut self, _: &Decoder, _: Observation<'_>) {
            self.deferred += 1;
        }
    }

    /// A lookup with nothing to propose.
    struct Empty;

    impl Drafter for Empty {
        fn propose_into(&mut self, _: &[TokenId], _: usize, _: &mut Vec<TokenId>) {}
        fn name(&self) -> &'static str {
            "empty"
        }
    }

    /// `b`'s draft after `[1, 2, 3]`, asked for `max` tokens with `room` for more.
    fn ask<M: ModelDraft>(
        b: &mut Beside<M>,
        dec: &Decoder,
        lengths: &AdaptiveDraft,
        max: usize,
        room: usize,
    ) -> Vec<TokenId> {
        let mut out = Vec::new();
        let cx = DraftIn {
            dec,
            caches: &mut [],
            history: &[1, 2, 3],
            max,
            room,
            lengths,
        };
        b.propose_with(cx, &mut out);
        out
    }

    /// A model part drafting `9, 9` with `5, 6` as its second choices.
    struct Seconds;

    impl ModelDraft for Seconds {
        fn name(&self) -> Option<&'static str> {
            Some("seconds")
        }
        fn draft(&mut self, _: DraftIn<'_>, out: &mut Vec<TokenId>) {
            out.extend([9, 9]);
        }
        fn seconds(&self) -> &[TokenId] {
            &[5, 6]
        }
    }

    #[test]
    fn second_choices_are_branches_while_their_rows_pay() {
        let dec = Decoder::new_random_small(crate::arch::glm_moe_dsa::glm_5_2_tiny(), 2, 8);
        let cost = |per_row: f64| {
            let mut l = AdaptiveDraft::new(8);
            (1..=9).for_each(|rows| l.record_cost(rows, 1.0 + per_row * (rows - 1) as f64));
            l
        };
        let branches = |b: &mut Beside<Seconds>, lengths: &AdaptiveDraft| {
            let draft = ask(b, &dec, lengths, 2, 8);
            let mut out = Vec::new();
            b.branches(lengths, &draft, &mut out);
            out
        };
        let mut b = Beside::with(Seconds, Box::new(Empty));
        // Nearly free rows: a branch beside each token (the shallowest first).
        assert_eq!(branches(&mut b, &cost(0.001)), [(0, 5), (1, 6)]);
        // Rows that cost as much as a forward: none (nor a draft: the part rests).
        let mut resting = Beside::with(Seconds, Box::new(Empty));
        assert!(branches(&mut resting, &cost(1.0)).is_empty());
        // Second choices never kept: not worth a row of 8%, however the chain fares.
        for _ in 0..100 {
            b.branch_verified(false);
        }
        assert!(branches(&mut b, &cost(0.08)).is_empty());
        // Kept every time the first choice is rejected, the first half of the time: at 20% a
        // row the shallowest pays (2.25 tokens for 1.6 against 1.75 for 1.4), the deeper one
        // (2.5 for 1.8) does not.
        for _ in 0..100 {
            b.branch_verified(true);
            b.verified(2, 1);
        }
        assert_eq!(branches(&mut b, &cost(0.08)), [(0, 5), (1, 6)]);
        assert_eq!(branches(&mut b, &cost(0.2)), [(0, 5)]);
        // The lookup's draft stands (it is kept more often): no branches.
        let mut c = Beside::with(Seconds, Box::new(Copier));
        assert!(branches(&mut c, &cost(0.001)).is_empty());
    }

    #[test]
    fn a_model_part_whose_drafts_do_not_pay_rests_then_tries_again() {
        let dec = Decoder::new_random_small(crate::arch::glm_moe_dsa::glm_5_2_tiny(), 2, 8);
        // A verify of two rows costs 1.2 of one: a draft token kept half the time pays, one
        // kept a twentieth of the time does not.
        let mut lengths = AdaptiveDraft::new(4);
        lengths.record_cost(1, 1.0);
        lengths.record_cost(2, 1.2);
        let mut b = Beside::with(Guess::default(), Box::new(Empty));
        let draft = |b: &mut Beside<Guess>| ask(b, &dec, &lengths, 1, 4);
        let o = Observation {
            pos: 2,
            hidden: &[],
            history: &[1, 2, 3],
            following: None,
            decoding: true,
        };
        assert_eq!(draft(&mut b), [9]);
        for _ in 0..100 {
            b.verified(1, 0);
        }
        b.observe(&dec, o);
        assert_eq!((b.model.fed, b.model.deferred), (1, 0));
        // It misses: no draft, and its rows wait while it rests.
        assert!(draft(&mut b).is_empty());
        b.observe(&dec, o);
        assert_eq!((b.model.fed, b.model.deferred), (1, 1));
        for _ in 1..REST {
            assert!(draft(&mut b).is_empty());
        }
        // Rested: it drafts once more, whatever its kept rate.
        assert_eq!(draft(&mut b), [9]);
        b.verified(1, 0);
        b.observe(&dec, o);
        assert_eq!(b.model.fed, 2);
        assert!(draft(&mut b).is_empty());
    }

    #[test]
    fn a_standing_lookup_draft_is_as_long_as_its_own_acceptance_pays() {
        let dec = Decoder::new_random_small(crate::arch::glm_moe_dsa::glm_5_2_tiny(), 2, 8);
        // Verify batches nearly as cheap as one row, every size measured.
        let mut lengths = AdaptiveDraft::new(16);
        for rows in 1..=17 {
            lengths.record_cost(rows, 1.0 + 0.01 * rows as f64);
        }
        let mut b = Beside::with(Waiting, Box::new(Copier));
        // The pooled length is 2 (the model part's misses pull it down).
        let draft = |b: &mut Beside<Waiting>| ask(b, &dec, &lengths, 2, 16).len();
        // Kept whole every time: the whole room.
        for _ in 0..20 {
            draft(&mut b);
            b.verified(16, 16);
        }
        assert_eq!(draft(&mut b), 16);
        // Rejected at its first token every time: one token, however long it could be.
        for _ in 0..100 {
            b.verified(16, 0);
        }
        assert_eq!(draft(&mut b), 1);
    }
}
