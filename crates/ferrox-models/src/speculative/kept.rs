//! How often a part's drafts were kept: a drafter combining two parts (a lookup and a block or
//! a draft model) lets the one whose drafts were kept more often draft where they would differ.

/// Decayed counts of a part's draft tokens and of those kept.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Kept {
    drafted: f64,
    accepted: f64,
}

impl Kept {
    /// Per-round decay: a memory of roughly 20 verified drafts.
    const DECAY: f64 = 0.95;

    /// The share of its draft tokens kept (prior: one token each way).
    pub(crate) fn rate(&self) -> f64 {
        (self.accepted + 1.0) / (self.drafted + 2.0)
    }

    pub(crate) fn add(&mut self, drafted: usize, accepted: usize) {
        self.drafted = self.drafted * Self::DECAY + drafted as f64;
        self.accepted = self.accepted * Self::DECAY + accepted as f64;
    }
}
