//! How often a part's drafts were kept: a drafter combining two parts (a lookup and a block or
//! a draft model) lets the one whose drafts were kept more often draft where they would differ.
//! Acceptance follows the length controller's geometric model ([`super::AdaptiveDraft`]): each
//! token is kept with probability `a` while the ones before it were, estimated from kept
//! tokens and the drafts a rejection ended — a long lookup draft cut near its end counts as
//! the near-certain copy it is, not as a share of tokens kept.

/// Below this chance of being reached (every token before it kept), a chained draft token
/// costs a pass of the drafting weights for too little: the controller's length is the
/// verifier's trade-off, this is the drafter's (a lookup draft costs nothing per token).
const MIN_REACH: f64 = 0.25;

/// Decayed counts of a part's kept draft tokens and of its drafts ended by a rejection.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Kept {
    accepted: f64,
    rejected: f64,
}

impl Kept {
    /// Per-round decay: a memory of roughly 20 verified drafts.
    const DECAY: f64 = 0.95;

    /// The chance that a draft token is kept when the ones before it were (prior: one token
    /// each way).
    pub(crate) fn rate(&self) -> f64 {
        (self.accepted + 1.0) / (self.accepted + self.rejected + 2.0)
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
        self.accepted = self.accepted * Self::DECAY + accepted as f64;
        self.rejected = self.rejected * Self::DECAY + f64::from(u8::from(accepted < drafted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_at(drafted: usize, accepted: usize) -> Kept {
        let mut k = Kept::default();
        for _ in 0..200 {
            k.add(drafted, accepted);
        }
        k
    }

    #[test]
    fn chains_are_as_long_as_their_tokens_are_likely_kept() {
        // A rejection after each kept token: a half, however long the drafts; two tokens.
        assert_eq!(kept_at(4, 1).rate(), kept_at(2, 1).rate());
        assert_eq!(kept_at(4, 1).chain_len(16), 2);
        // Drafts rejected at their first token: the first token only.
        assert_eq!(kept_at(2, 0).chain_len(16), 1);
        // Three kept before each rejection, 75% a token: 0.75 .. 0.32, then 0.24 < 0.25.
        assert_eq!(kept_at(4, 3).chain_len(16), 4);
        // Drafts of 20 cut at their last token: each token 95% kept; the controller's length
        // decides.
        assert!((kept_at(20, 19).rate() - 0.95).abs() < 0.01);
        assert_eq!(kept_at(20, 19).chain_len(8), 8);
        assert_eq!(kept_at(20, 19).chain_len(1), 1);
        // Nothing known yet: one token each way, two tokens.
        assert_eq!(Kept::default().chain_len(16), 2);
    }
}
