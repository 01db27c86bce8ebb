//! How often a part's drafts were kept: a drafter combining two parts (a lookup and a block or
//! a draft model) lets the one whose drafts were kept more often draft where they would differ.

/// Below this chance of being reached (every token before it kept), a chained draft token
/// costs a pass of the drafting weights for too little: the controller's length is the
/// verifier's trade-off, this is the drafter's (a lookup draft costs nothing per token).
const MIN_REACH: f64 = 0.25;

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

    /// How many tokens a part that drafts by chaining (each token another pass of its weights)
    /// should chain, at most `max`: while the chance that every token so far is kept stays at
    /// least [`MIN_REACH`]. At least one: the first token is what the part is asked for.
    pub(crate) fn chain_len(&self, max: usize) -> usize {
        let a = self.rate();
        let (mut reach, mut k) = (a, 1);
        while k < max && reach * a >= MIN_REACH {
            reach *= a;
            k += 1;
        }
        k.min(max)
    }

    pub(crate) fn add(&mut self, drafted: usize, accepted: usize) {
        self.drafted = self.drafted * Self::DECAY + drafted as f64;
        self.accepted = self.accepted * Self::DECAY + accepted as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_at(rate_drafted: usize, rate_accepted: usize) -> Kept {
        let mut k = Kept::default();
        for _ in 0..200 {
            k.add(rate_drafted, rate_accepted);
        }
        k
    }

    #[test]
    fn chains_are_as_long_as_their_tokens_are_likely_kept() {
        // A quarter kept: the first token only, however long the controller allows.
        assert_eq!(kept_at(4, 1).chain_len(16), 1);
        // 60% kept: 0.6, 0.36, then 0.22 < 0.25.
        assert_eq!(kept_at(10, 6).chain_len(16), 2);
        // 95% kept: the controller's length decides.
        assert_eq!(kept_at(20, 19).chain_len(8), 8);
        assert_eq!(kept_at(20, 19).chain_len(1), 1);
        // Nothing known yet: one token each way, two tokens.
        assert_eq!(Kept::default().chain_len(16), 2);
    }
}
