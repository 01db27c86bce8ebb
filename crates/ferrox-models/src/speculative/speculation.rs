//! One sequence's speculation state: a drafter (no draft model: lookup in the sequence's own
//! history, as prompt lookup decoding in vLLM / transformers), its length controller and
//! counters. The engine runs the forward and verifies; this drafts and keeps the books.

use super::AdaptiveDraft;
use crate::decoder::Decoder;
use crate::TokenId;
use ferrox_core::cache::KvCache;

/// Proposes tokens likely to follow a history. Deterministic drafts only: verification treats
/// the draft as a point mass, which is what makes the rejection rule in
/// [`verify_tree`](super::verify_tree) exact.
pub trait Drafter: Send {
    /// At most `max` tokens to follow `history` (empty: no guess, decode plainly).
    fn propose(&mut self, history: &[TokenId], max: usize) -> Vec<TokenId> {
        let mut out = Vec::new();
        self.propose_into(history, max, &mut out);
        out
    }
    /// [`propose`](Drafter::propose) appended to `out`, which the decode loop reuses to spare
    /// an allocation per step.
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>);
    /// [`propose_into`](Drafter::propose_into) for a drafter that runs weights (an MTP block,
    /// a draft model, the model with fewer experts): the engine's decode loop drafts through
    /// this.
    fn propose_with(&mut self, cx: DraftIn<'_>, out: &mut Vec<TokenId>) {
        self.propose_into(cx.history, cx.max, out);
    }
    /// A generation ended normally: `history` is its prompt (the first `prompt_len` tokens)
    /// and output. Drafters that learn across requests keep what they need of it.
    fn finished(&mut self, _history: &[TokenId], _prompt_len: usize) {}
    /// Short name for statistics and benchmarks.
    fn name(&self) -> &'static str;
    /// The verdict on the last non-empty draft: `drafted` tokens verified, `accepted` of
    /// them kept (a drafter choosing among parts learns which to trust).
    fn verified(&mut self, _drafted: usize, _accepted: usize) {}
    /// Second choices beside the last draft, for a draft tree ([`crate::tree`]): `(i, t)`
    /// proposes `t` in place of draft token `i` (after the same tokens), each worth the verify
    /// row it takes at the measured costs (`lengths`, [`AdaptiveDraft::pays`]). None by default.
    fn branches(
        &mut self,
        _lengths: &AdaptiveDraft,
        _draft: &[TokenId],
        _out: &mut Vec<(usize, TokenId)>,
    ) {
    }
    /// The verdict on the last draft's branches, when verification rejected a draft token
    /// that had one beside it: whether the branch was the token drawn there.
    fn branch_verified(&mut self, _kept: bool) {}
    /// Which drafter made the last proposal: a drafter combining others names the one whose
    /// draft it returned (per-drafter acceptance in the server's metrics), others themselves.
    fn source(&self) -> &'static str {
        self.name()
    }
    /// Whether this drafter reads the model's final hidden states through
    /// [`observe`](Drafter::observe) (the engine computes them only then).
    fn wants_hidden(&self) -> bool {
        false
    }
    /// After each forward of the sequence, once its rows are verified: what the model
    /// computed (see [`Observation`]).
    fn observe(&mut self, _dec: &Decoder, _o: Observation<'_>) {}
    /// Most cached positions of a sequence this drafter can go on from when its slot is
    /// reused for a new prompt (a drafter keeping per-position state of its own may lag the
    /// model's cache by a position).
    fn resume_limit(&self) -> usize {
        usize::MAX
    }
}

/// What a draft is asked for with: at most `max` tokens to follow `history` (whose last token
/// is the one being fed), and the model with the sequence's caches, which hold exactly the
/// positions before that token (a drafter may write past them but cuts them back).
pub struct DraftIn<'a> {
    pub dec: &'a Decoder,
    pub caches: &'a mut [KvCache],
    pub history: &'a [TokenId],
    /// The length controller's choice, from the acceptance of all the drafter's drafts.
    pub max: usize,
    /// What the budget, the context and the longest draft allow (`room >= max`): a combining
    /// drafter may let a part whose own drafts are kept more often than the pool's draft
    /// longer (see [`super::Beside`]).
    pub room: usize,
    /// The length controller, whose measured verify costs give the best length for a part's
    /// own acceptance ([`AdaptiveDraft::len_at`]).
    pub lengths: &'a AdaptiveDraft,
}

impl DraftIn<'_> {
    /// The same request, for a part of a combining drafter.
    pub fn reborrow(&mut self) -> DraftIn<'_> {
        DraftIn {
            dec: self.dec,
            caches: &mut *self.caches,
            history: self.history,
            max: self.max,
            room: self.room,
            lengths: self.lengths,
        }
    }
}

/// One forward of a sequence as a drafter that reads hidden states sees it.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// Position of the first row fed.
    pub pos: usize,
    /// Normed final hidden states of the rows fed, `[rows, hidden]` (rows past the
    /// verified ones included).
    pub hidden: &'a [f32],
    /// The tokens now in the cache: the fed rows verification kept are its last ones.
    pub history: &'a [TokenId],
    /// The token that follows `history`, when known: the one just sampled, or the next
    /// prompt token during a prefill.
    pub following: Option<TokenId>,
    /// Whether a draft will be asked for after `following` (decoding, not a prefill).
    pub decoding: bool,
}

/// Counters of a speculative run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Forward calls made while decoding (one per round, speculative or not).
    pub calls: usize,
    /// Rounds that verified a non-empty draft.
    pub verify_calls: usize,
    /// Draft tokens of the chains verified, and draft tokens kept (a kept branch counts).
    pub drafted: usize,
    pub accepted: usize,
    /// Rejections with a branch beside the rejected token, and those where it was kept.
    pub branches: usize,
    pub branches_kept: usize,
}

impl SpecStats {
    /// Fraction of drafted tokens that were kept (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    /// The counts since `before` (an earlier copy of the same counters).
    pub fn since(&self, before: &SpecStats) -> SpecStats {
        SpecStats {
            calls: self.calls - before.calls,
            verify_calls: self.verify_calls - before.verify_calls,
            drafted: self.drafted - before.drafted,
            accepted: self.accepted - before.accepted,
            branches: self.branches - before.branches,
            branches_kept: self.branches_kept - before.branches_kept,
        }
    }
}

/// A drafter, its draft-length controller and counters, kept per sequence so a batch can
/// verify several sequences' drafts in one forward.
pub struct Speculation {
    pub drafter: Box<dyn Drafter>,
    pub adaptive: AdaptiveDraft,
    pub stats: SpecStats,
    /// Time spent drafting for the coming verify (a drafter running model weights costs
    /// time the cost model must see).
    draft_secs: f64,
    /// The drafter's branches (reused step to step).
    alts: Vec<(usize, TokenId)>,
}

impl Speculation {
    pub fn new(drafter: Box<dyn Drafter>, max_draft: usize) -> Self {
        Speculation {
            drafter,
            adaptive: AdaptiveDraft::new(max_draft),
            stats: SpecStats::default(),
            draft_secs: 0.0,
            alts: Vec::new(),
        }
    }

    /// Appends the draft to verify after `history` (whose last token is the one being fed) to
    /// `out`: at most `room` tokens (what the budget and the context still allow).
    pub fn draft_into(
        &mut self,
        dec: &Decoder,
        caches: &mut [KvCache],
        history: &[TokenId],
        room: usize,
        out: &mut Vec<TokenId>,
    ) {
        let want = self.adaptive.next_len().min(room);
        if want == 0 {
            return;
        }
        let start = out.len();
        let t = std::time::Instant::now();
        let room = room.min(self.adaptive.max_len).max(want);
        let cx = DraftIn {
            dec,
            caches,
            history,
            max: want,
            room,
            lengths: &self.adaptive,
        };
        self.drafter.propose_with(cx, out);
        self.draft_secs += t.elapsed().as_secs_f64();
        // A draft past the room would be verified beyond the budget or the context.
        out.truncate(start + room);
    }

    /// Hands the drafter what a forward computed ([`Drafter::observe`]). Its time is not a
    /// verify's: taking in the kept rows costs the same per committed token whatever the
    /// draft length (the rows of a copy the lookup made even wait and go in at once), and an
    /// overhead per token does not change which length gives the most tokens per second.
    pub fn observe(&mut self, dec: &Decoder, o: Observation<'_>) {
        self.drafter.observe(dec, o);
    }

    /// Feeds back the wall time of the forward that fed `rows` rows (token plus draft), for the
    /// draft-length cost model, with the drafting time that draft took. Optional: without it
    /// the controller assumes cheap batches.
    pub fn record_cost(&mut self, rows: usize, secs: f64) {
        self.adaptive.record_cost(rows, secs + self.draft_secs);
        self.draft_secs = 0.0;
    }

    /// Adds the drafter's branches ([`Drafter::branches`]) beside the draft `draft_into`
    /// appended to `input` (whose first row is the fed token): at most `room` rows after the
    /// draft's. With any, `parents` gets every row's parent (a draft tree), else it is left
    /// empty (a chain).
    pub fn branch_into(&mut self, room: usize, input: &mut Vec<TokenId>, parents: &mut Vec<usize>) {
        parents.clear();
        let draft = input.len() - 1;
        if draft == 0 || room == 0 {
            return;
        }
        let mut alts = std::mem::take(&mut self.alts);
        alts.clear();
        self.drafter
            .branches(&self.adaptive, &input[1..], &mut alts);
        alts.retain(|&(i, t)| i < draft && input[1 + i] != t);
        alts.truncate(room);
        if !alts.is_empty() {
            parents.extend((0..=draft).map(|i| i.saturating_sub(1)));
            for &(i, t) in &alts {
                // Draft token `i` is row `i + 1`; its sibling follows row `i`.
                input.push(t);
                parents.push(i);
            }
        }
        self.alts = alts;
    }

    /// Forgets drafting time no verify was measured with (a step shared with other slots).
    pub fn drop_draft_time(&mut self) {
        self.draft_secs = 0.0;
    }

    /// A generation ended normally (see [`Drafter::finished`]).
    pub fn finished(&mut self, history: &[TokenId], prompt_len: usize) {
        self.drafter.finished(history, prompt_len);
    }

    /// Books one verified decode round: `drafted` tokens proposed, `accepted` of them kept
    /// (counting the draft's own chain: the length controller's model), and, where
    /// verification rejected a draft token with a branch beside it, whether the branch was
    /// kept.
    pub fn record(&mut self, drafted: usize, accepted: usize, branch: Option<bool>) {
        self.stats.calls += 1;
        if drafted > 0 {
            self.stats.verify_calls += 1;
            self.stats.drafted += drafted;
            self.stats.accepted += accepted;
            self.drafter.verified(drafted, accepted);
        }
        if let Some(kept) = branch {
            // A kept branch is one more draft token kept.
            self.stats.accepted += usize::from(kept);
            self.stats.branches += 1;
            self.stats.branches_kept += usize::from(kept);
            self.drafter.branch_verified(kept);
        }
        self.adaptive.record(drafted, accepted);
    }
}
