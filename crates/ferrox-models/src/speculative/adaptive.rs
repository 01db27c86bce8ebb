//! The draft-length controller: a geometric acceptance model against measured verify costs
//! (the same trade-off as the adaptive speculation length of Leviathan et al. 2023, section
//! 3.5, with costs measured instead of assumed).

/// Draft length from the running acceptance and the measured cost of verify batches, so
/// speculation never costs more than it saves.
///
/// Acceptance follows a geometric model: each draft token is kept with probability `a` while
/// the previous ones were, estimated from decayed counts of accepted tokens and rejections. A
/// draft of `k` then yields `E(k) = 1 + a + .. + a^k` tokens for the cost `c(k + 1)` of a
/// forward of `k + 1` rows (decayed means of measured times; unmeasured sizes are interpolated,
/// and extrapolated optimistically so they get tried). Each round picks the `k` with the best
/// `E(k) / c(k + 1)`; `k = 0` is plain decoding. While plain wins, a one-token probe is made
/// after a pause that doubles with each probe that does not tip the balance (up to 16 rounds), so a change of
/// regime (the model starts copying) is noticed without paying for drafts that miss.
#[derive(Debug, Clone)]
pub struct AdaptiveDraft {
    /// Longest draft ever asked for.
    pub max_len: usize,
    /// Decayed counts of accepted draft tokens and of rounds ended by a rejection.
    accepted: f64,
    rejected: f64,
    /// Decayed mean seconds of a forward by rows (index = rows - 1); 0 = not measured.
    cost: Vec<f64>,
    /// Rounds left before the next probe while plain decoding wins.
    pause: usize,
    backoff: usize,
    /// Always ask for `max_len` (no cost model): reproducible runs, tests, benchmarks of one length.
    fixed: bool,
}

/// Longest pause (in rounds) between probes.
const MAX_BACKOFF: usize = 16;
/// Per-round decay of the acceptance counts (a memory of roughly 20 rounds).
const ACCEPT_DECAY: f64 = 0.95;
/// Weight of a new timing in the decayed mean.
const COST_WEIGHT: f64 = 0.3;
/// Assumed extra cost per extra row, relative to one row, where nothing is measured.
const PRIOR_ROW_COST: f64 = 0.1;

impl AdaptiveDraft {
    pub fn new(max_len: usize) -> Self {
        AdaptiveDraft {
            max_len,
            accepted: 0.0,
            rejected: 0.0,
            cost: vec![0.0; max_len + 1],
            pause: 0,
            backoff: 1,
            fixed: false,
        }
    }

    /// A controller that always drafts `len` tokens, whatever acceptance and timings say.
    pub fn fixed(len: usize) -> Self {
        AdaptiveDraft {
            fixed: true,
            ..AdaptiveDraft::new(len)
        }
    }

    /// Estimated probability that a draft token is accepted (prior: one half-token each way).
    pub fn acceptance(&self) -> f64 {
        (self.accepted + 0.5) / (self.accepted + self.rejected + 1.0)
    }

    /// Cost of a forward of `rows` rows: measured, else interpolated between measured sizes,
    /// else extrapolated from the largest smaller measured size at `PRIOR_ROW_COST` per row.
    fn cost_of(&self, rows: usize) -> f64 {
        let i = rows - 1;
        if self.cost[i] > 0.0 {
            return self.cost[i];
        }
        let one = self.cost.iter().find(|&&c| c > 0.0).copied().unwrap_or(1.0);
        let below = (0..i).rev().find(|&j| self.cost[j] > 0.0);
        let above = (i + 1..self.cost.len()).find(|&j| self.cost[j] > 0.0);
        match (below, above) {
            (Some(b), Some(a)) => {
                let f = (i - b) as f64 / (a - b) as f64;
                self.cost[b] + f * (self.cost[a] - self.cost[b])
            }
            (Some(b), None) => self.cost[b] + (i - b) as f64 * PRIOR_ROW_COST * one,
            (None, Some(a)) => {
                self.cost[a] * (1.0 + i as f64 * PRIOR_ROW_COST) / (1.0 + a as f64 * PRIOR_ROW_COST)
            }
            (None, None) => one * (1.0 + i as f64 * PRIOR_ROW_COST),
        }
    }

    /// The draft length with the best expected tokens per unit of time for a drafter whose
    /// tokens are each kept with probability `a` (a part of a combining drafter asks with its
    /// own acceptance; the controller's own choice uses the pooled one). Batches grow one row
    /// past the largest measured one at a time: batch cost is often a step function (kernels
    /// work on groups of rows), which interpolating across unmeasured sizes would hide.
    pub fn len_at(&self, a: f64) -> usize {
        if self.fixed || self.max_len == 0 {
            return self.max_len;
        }
        let measured_rows = self.cost.iter().rposition(|&c| c > 0.0).unwrap_or(0) + 1;
        let max_k = measured_rows.min(self.max_len);
        let (mut best, mut best_rate) = (0, 0.0);
        let (mut expect, mut term) = (0.0, 1.0);
        for k in 0..=max_k {
            expect += term;
            term *= a;
            let rate = expect / self.cost_of(k + 1);
            if rate > best_rate {
                (best, best_rate) = (k, rate);
            }
        }
        best
    }

    /// Whether one more row pays for a forward of `rows` rows expected to yield `expect`
    /// tokens, when it adds `gain` expected tokens (a draft tree's branch): never for a
    /// fixed-length controller, whose forwards are its chain's.
    pub fn pays(&self, rows: usize, expect: f64, gain: f64) -> bool {
        if self.fixed || rows == 0 || rows >= self.cost.len() {
            return false;
        }
        (expect + gain) / self.cost_of(rows + 1) > expect / self.cost_of(rows)
    }

    /// The draft length to ask for this round (0: decode plainly).
    pub fn next_len(&mut self) -> usize {
        // Plain decoding is the yardstick every draft length is compared with: time it first.
        if self.fixed || self.max_len == 0 {
            return self.max_len;
        }
        if self.cost[0] == 0.0 {
            return 0;
        }
        let best = self.len_at(self.acceptance());
        if best > 0 {
            self.backoff = 1;
            return best;
        }
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.pause = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        1
    }

    /// Feeds back one verified round: `drafted` tokens proposed, `accepted` of them kept.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.accepted = self.accepted * ACCEPT_DECAY + accepted as f64;
        self.rejected = self.rejected * ACCEPT_DECAY + u8::from(accepted < drafted) as f64;
    }

    /// Feeds back the wall time of a forward of `rows` rows (the fed token plus the draft).
    pub fn record_cost(&mut self, rows: usize, secs: f64) {
        if rows == 0 || rows > self.cost.len() || secs.is_nan() || secs <= 0.0 {
            return;
        }
        let c = &mut self.cost[rows - 1];
        *c = if *c > 0.0 {
            *c + COST_WEIGHT * (secs - *c)
        } else {
            secs
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the controller against a simulated drafter whose tokens are each accepted with
    /// probability `a` and a forward of `n` rows costing `cost(n)`; returns the mean length.
    fn simulate(a: f64, cost: impl Fn(usize) -> f64, rounds: usize) -> (f64, usize) {
        let mut ad = AdaptiveDraft::new(16);
        let mut rng = crate::sampling::Rng::new(3);
        let (mut total, mut zeros) = (0, 0);
        for _ in 0..rounds {
            let k = ad.next_len();
            total += k;
            zeros += (k == 0) as usize;
            let kept = (0..k).take_while(|_| rng.next_f64() < a).count();
            ad.record(k, kept);
            ad.record_cost(k + 1, cost(k + 1));
        }
        (total as f64 / rounds as f64, zeros)
    }

    #[test]
    fn adaptive_length_follows_acceptance_and_cost() {
        // Cheap batches, drafts that hit: long drafts.
        let (mean, _) = simulate(0.97, |n| 1.0 + 0.02 * n as f64, 300);
        assert!(mean > 8.0, "mean draft {mean}");
        // Drafts that miss: almost always plain decoding (only sparse probes).
        let (mean, zeros) = simulate(0.0, |n| 1.0 + 0.1 * n as f64, 300);
        assert!(zeros > 260 && mean < 0.15, "zeros {zeros}, mean {mean}");
        // A batch that costs as much as its rows never pays: plain decoding.
        let (_, zeros) = simulate(0.9, |n| n as f64, 300);
        assert!(zeros > 260, "zeros {zeros}");
        // Rows in pairs (a kernel working on groups of two tokens), drafts that hit: one.
        let (mean, _) = simulate(0.99, |n| n.div_ceil(2) as f64, 300);
        assert!((0.8..=1.6).contains(&mean), "mean draft {mean}");
        // Two rows cheap, more expensive (today's kernels): short drafts.
        let (mean, _) = simulate(0.9, |n| if n <= 2 { 1.0 } else { n as f64 * 0.6 }, 300);
        assert!((0.8..=2.5).contains(&mean), "mean draft {mean}");
    }

    #[test]
    fn fixed_length_ignores_acceptance_and_cost() {
        let mut ad = AdaptiveDraft::fixed(5);
        for _ in 0..50 {
            assert_eq!(ad.next_len(), 5);
            ad.record(5, 0);
            ad.record_cost(6, 100.0);
        }
        assert_eq!(AdaptiveDraft::fixed(0).next_len(), 0);
    }
}
