//! One sequence's speculation state: a drafter, its length controller and counters.

use super::{verify, AdaptiveDraft};
use crate::sampling::Sampler;

/// Proposes tokens likely to follow a history. Deterministic drafts only: verification treats
/// the draft as a point mass, which is what makes the rejection rule in [`verify`] exact.
pub trait Drafter: Send {
    /// At most `max` tokens to follow `history` (empty: no guess, decode plainly).
    fn propose(&mut self, history: &[usize], max: usize) -> Vec<usize>;
    /// Short name for statistics and benchmarks.
    fn name(&self) -> &'static str;
}

/// Counters of a speculative run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Forward calls made while decoding (one per round, speculative or not).
    pub calls: usize,
    /// Rounds that verified a non-empty draft.
    pub verify_calls: usize,
    pub drafted: usize,
    pub accepted: usize,
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
}

/// One sequence's speculation state: a drafter, its length controller and counters. The owner
/// runs the forward; this only drafts and verifies, so a server can batch several sequences'
/// verify rows into one forward and hand each sequence its own rows.
pub struct Speculation {
    pub drafter: Box<dyn Drafter>,
    pub adaptive: AdaptiveDraft,
    pub stats: SpecStats,
}

impl Speculation {
    pub fn new(drafter: Box<dyn Drafter>, max_draft: usize) -> Self {
        Speculation {
            drafter,
            adaptive: AdaptiveDraft::new(max_draft),
            stats: SpecStats::default(),
        }
    }

    /// The draft to verify after `history` (whose last token is the one being fed), at most
    /// `room` tokens (what the budget and the context still allow).
    pub fn draft(&mut self, history: &[usize], room: usize) -> Vec<usize> {
        let want = self.adaptive.next_len().min(room);
        if want == 0 {
            return Vec::new();
        }
        self.drafter.propose(history, want)
    }

    /// Feeds back the wall time of the forward that fed `rows` rows (token plus draft), for the
    /// draft-length cost model. Optional: without it the controller assumes cheap batches.
    pub fn record_cost(&mut self, rows: usize, secs: f64) {
        self.adaptive.record_cost(rows, secs);
    }

    /// [`verify`] plus bookkeeping (counters, adaptive length). `rows` are the logits of the
    /// fed token followed by the draft.
    pub fn verify<R: AsRef<[f32]>>(
        &mut self,
        rows: &[R],
        draft: &[usize],
        sampler: &mut Sampler,
        history: &[usize],
    ) -> Vec<usize> {
        let committed = verify(rows, draft, sampler, history);
        let accepted = committed.len() - 1;
        self.stats.calls += 1;
        if !draft.is_empty() {
            self.stats.verify_calls += 1;
            self.stats.drafted += draft.len();
            self.stats.accepted += accepted;
        }
        self.adaptive.record(draft.len(), accepted);
        committed
    }
}
