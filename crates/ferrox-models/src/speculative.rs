//! Prompt-lookup speculative decoding (the seed's design, `shared/seed/ferrox_models/speculative.rs`;
//! the same idea as "prompt lookup decoding" in vLLM / transformers): draft the next tokens by
//! finding the latest earlier occurrence of the current n-gram suffix in the token history, then
//! check the whole draft with one `Decoder::forward_batch` call.
//!
//! Lossless by construction under greedy decoding: the verify batch is `[anchor, d1, .., dk]`;
//! row `i` of its logits is what the model predicts after `anchor, d1..di`, so draft token
//! `d(i+1)` is kept only while it equals that row's argmax. The first mismatch ends the round and
//! the caches are cut back to the committed tokens. Batch invariance of the decoder makes every
//! kept token bit-for-bit the one plain decoding would have produced.
//!
//! Beyond the seed: a [`Drafter`] trait (n-gram lookup and a suffix-automaton
//! [`LongestMatchDrafter`]), an [`AdaptiveDraft`] length controller, and [`verify`], which is
//! lossless under any sampler (speculative sampling with a deterministic draft). [`Speculation`]
//! bundles them per sequence; `generate::Session` and the CLI drive it.

mod longest;

pub use longest::LongestMatchDrafter;

use crate::decoder::Decoder;
use crate::sampling::Sampler;
use ferrox_core::cache::KvCache;
use ferrox_tokenizer::TokenId;

/// Drafts a continuation by n-gram lookup in the history (no draft model).
#[derive(Debug, Clone, Copy)]
pub struct PromptLookupSpeculator {
    /// Length of the suffix searched for.
    pub ngram_size: usize,
    /// Most tokens proposed per round.
    pub max_draft_len: usize,
}

impl PromptLookupSpeculator {
    /// Panics when either size is 0 (a zero-length n-gram matches everywhere; a zero-length
    /// draft is no speculation).
    pub fn new(ngram_size: usize, max_draft_len: usize) -> Self {
        assert!(ngram_size > 0, "ngram_size must be at least 1");
        assert!(max_draft_len > 0, "max_draft_len must be at least 1");
        PromptLookupSpeculator {
            ngram_size,
            max_draft_len,
        }
    }

    /// The tokens that followed the most recent earlier occurrence of `history`'s last
    /// `ngram_size` tokens (at most `max_draft_len`), or nothing when there is no such
    /// occurrence. The suffix itself is not a match: an occurrence must start before it.
    pub fn propose(&self, history: &[TokenId]) -> Vec<TokenId> {
        let n = self.ngram_size;
        let Some(latest_start) = history.len().checked_sub(n + 1) else {
            return Vec::new();
        };
        let suffix = &history[history.len() - n..];
        (0..=latest_start)
            .rev()
            .find(|&s| history[s..s + n] == *suffix)
            .map(|s| {
                let from = s + n;
                let to = (from + self.max_draft_len).min(history.len());
                history[from..to].to_vec()
            })
            .unwrap_or_default()
    }
}

/// Outcome of [`speculative_decode`] with the counters that show what speculation saved.
#[derive(Debug, Clone)]
pub struct SpeculativeDecodeResult {
    pub generated_tokens: Vec<TokenId>,
    /// `forward_batch` calls: the prefill plus one per verify round.
    pub forward_calls: usize,
    /// Equals `generated_tokens.len()`.
    pub tokens_generated: usize,
}

impl SpeculativeDecodeResult {
    /// Tokens per `forward_batch` call (1.0 when no draft was ever accepted; 0 with no calls).
    pub fn tokens_per_call(&self) -> f64 {
        match self.forward_calls {
            0 => 0.0,
            calls => self.tokens_generated as f64 / calls as f64,
        }
    }
}

/// Greedy decoding of `max_new_tokens` tokens after `prompt_tokens`, drafting with
/// `speculator` and verifying each draft in one batch. The prompt is one prefill call; each
/// round then feeds the token the model has already chosen (the anchor) followed by the draft.
/// `kv_caches` (one per layer) are filled from position 0; a rejected draft truncates them.
/// Panics on an empty prompt.
pub fn speculative_decode(
    decoder: &Decoder,
    prompt_tokens: &[TokenId],
    max_new_tokens: usize,
    kv_caches: &mut [KvCache],
    speculator: &PromptLookupSpeculator,
) -> SpeculativeDecodeResult {
    assert!(!prompt_tokens.is_empty(), "prompt must not be empty");
    let mut history = prompt_tokens.to_vec();
    let mut out = Vec::with_capacity(max_new_tokens);

    let mut next_logits = decoder
        .forward_batch(prompt_tokens, 0, kv_caches)
        .pop()
        .expect("one logits row per prompt token");
    let mut calls = 1;

    while out.len() < max_new_tokens {
        let anchor = argmax(&next_logits);
        let pos = history.len();
        // Room left after the anchor; a draft never overshoots the budget.
        let room = max_new_tokens - out.len() - 1;
        let mut draft = speculator.propose(&history);
        draft.truncate(room);

        let mut batch = Vec::with_capacity(1 + draft.len());
        batch.push(anchor);
        batch.extend_from_slice(&draft);
        let mut rows = decoder.forward_batch(&batch, pos, kv_caches);
        calls += 1;

        // Row i predicts the token after batch[..=i]; keep drafts while they match.
        let kept = draft
            .iter()
            .zip(&rows)
            .take_while(|(&d, row)| argmax(row) == d)
            .count();
        if kept < draft.len() {
            let committed = pos + 1 + kept;
            kv_caches.iter_mut().for_each(|c| c.truncate(committed));
        }
        history.extend_from_slice(&batch[..=kept]);
        out.extend_from_slice(&batch[..=kept]);
        next_logits = rows.swap_remove(kept);
    }

    SpeculativeDecodeResult {
        tokens_generated: out.len(),
        generated_tokens: out,
        forward_calls: calls,
    }
}

/// Index of the largest logit (the last one on ties, as `Iterator::max_by`); 0 when empty.
fn argmax(logits: &[f32]) -> usize {
    logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

// ---------------------------------------------------------------------------------------------
// Beyond the seed: drafters, adaptive draft length and lossless verification under sampling.
// ---------------------------------------------------------------------------------------------

/// Proposes tokens likely to follow a history. Deterministic drafts only: verification treats
/// the draft as a point mass, which is what makes the rejection rule in [`verify`] exact.
pub trait Drafter: Send {
    /// At most `max` tokens to follow `history` (empty: no guess, decode plainly).
    fn propose(&mut self, history: &[TokenId], max: usize) -> Vec<TokenId>;
    /// Short name for statistics and benchmarks.
    fn name(&self) -> &'static str;
}

impl Drafter for PromptLookupSpeculator {
    fn propose(&mut self, history: &[TokenId], max: usize) -> Vec<TokenId> {
        let mut d = PromptLookupSpeculator::propose(self, history);
        d.truncate(max);
        d
    }
    fn name(&self) -> &'static str {
        "ngram"
    }
}

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

    /// The draft length with the best expected tokens per unit of time. Batches grow one row
    /// past the largest measured one at a time: batch cost is often a step function (kernels
    /// work on groups of rows), which interpolating across unmeasured sizes would hide.
    fn best_len(&self) -> usize {
        let a = self.acceptance();
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

    /// The draft length to ask for this round (0: decode plainly).
    pub fn next_len(&mut self) -> usize {
        // Plain decoding is the yardstick every draft length is compared with: time it first.
        if self.fixed || self.max_len == 0 {
            return self.max_len;
        }
        if self.cost[0] == 0.0 {
            return 0;
        }
        let best = self.best_len();
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
    pub fn draft(&mut self, history: &[TokenId], room: usize) -> Vec<TokenId> {
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
        draft: &[TokenId],
        sampler: &mut Sampler,
        history: &[TokenId],
    ) -> Vec<TokenId> {
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

/// Verifies `draft` against the target model and returns the committed tokens: the accepted
/// draft prefix followed by exactly one more token drawn by the target.
///
/// `rows[i]` (for `i` in `0..=draft.len()`) are the logits after `history` and `draft[..i]`;
/// `history` is everything before the first draft token (its last token is the one that was fed
/// with the draft). Each draft token `t` is checked against the sampler's final distribution
/// `p` (penalties with the accepted drafts in the history, temperature, top-k/p, min-p): it is
/// accepted with probability `p(t)`; on rejection the token is drawn from `p` without `t`,
/// renormalised; when the whole draft is accepted the last row gives a bonus token. This is
/// speculative sampling (Leviathan et al. 2023; Chen et al. 2023) with a point-mass draft.
///
/// It is realised by the coupling that makes it exact and reproducible: the sampler draws its
/// own token `x ~ p` at each position, exactly as plain decoding would, and the draft token is
/// accepted iff `x == t`. Then `P(accept) = p(t)`, and after a rejection `x` is distributed as
/// `p` without `t`, renormalised. Each committed token consumes exactly one draw of the
/// sampler's random stream, as in plain decoding, so for a given seed speculative output is
/// token for token the plain output whatever the drafts were. Greedy is the argmax rule.
///
/// Panics when there are fewer than `draft.len() + 1` rows (a caller bug, not bad input).
pub fn verify<R: AsRef<[f32]>>(
    rows: &[R],
    draft: &[TokenId],
    sampler: &mut Sampler,
    history: &[TokenId],
) -> Vec<TokenId> {
    assert!(
        rows.len() > draft.len(),
        "verify needs one logits row per draft token plus one"
    );
    // Penalties only look at the last `penalty_last_n` tokens: a window is the same history.
    let window = sampler.config.penalty_last_n;
    let mut hist = history[history.len().saturating_sub(window)..].to_vec();
    let mut out = Vec::with_capacity(draft.len() + 1);
    for (i, row) in rows.iter().take(draft.len() + 1).enumerate() {
        let x = sampler.sample(row.as_ref(), &hist);
        out.push(x);
        if draft.get(i) != Some(&x) {
            break;
        }
        hist.push(x);
    }
    out
}

/// Greedy/sampled decoding with a [`Drafter`]: the library-level loop behind
/// [`speculative_decode`], for any sampler and drafter. Returns the generated tokens and the
/// counters (`calls` excludes the prefill). `kv_caches` are filled from position 0.
pub fn speculative_generate(
    decoder: &Decoder,
    prompt: &[TokenId],
    max_new_tokens: usize,
    kv_caches: &mut [KvCache],
    spec: &mut Speculation,
    sampler: &mut Sampler,
) -> Vec<TokenId> {
    assert!(!prompt.is_empty(), "prompt must not be empty");
    let mut history = prompt.to_vec();
    let mut logits = Vec::new();
    decoder.forward_into(prompt, 0, kv_caches, prompt.len() - 1, &mut logits);
    let mut out = Vec::with_capacity(max_new_tokens);
    if max_new_tokens == 0 {
        return out;
    }
    let mut next = sampler.sample(&logits, &history);
    loop {
        out.push(next);
        if out.len() >= max_new_tokens {
            break;
        }
        let pos = history.len();
        history.push(next);
        let draft = spec.draft(&history, max_new_tokens - out.len());
        let mut batch = Vec::with_capacity(1 + draft.len());
        batch.push(next);
        batch.extend_from_slice(&draft);
        let t = std::time::Instant::now();
        decoder.forward_into(&batch, pos, kv_caches, 0, &mut logits);
        spec.record_cost(batch.len(), t.elapsed().as_secs_f64());
        let rows: Vec<&[f32]> = logits.chunks_exact(decoder.vocab_size()).collect();
        let committed = spec.verify(&rows, &draft, sampler, &history);
        let accepted = committed.len() - 1;
        kv_caches
            .iter_mut()
            .for_each(|c| c.truncate(pos + 1 + accepted));
        history.extend_from_slice(&committed[..accepted]);
        out.extend_from_slice(&committed[..accepted]);
        next = committed[accepted];
        if out.len() >= max_new_tokens {
            break;
        }
    }
    out.truncate(max_new_tokens);
    out
}

#[cfg(test)]
mod own_tests {
    use super::*;
    use crate::config::glm_5_2;
    use crate::ModelConfig;

    /// glm_5_2() shrunk the way the seed's tests shrink it: tiny width and MoE, GLM-5 MLA/DSA.
    fn shrunk() -> ModelConfig {
        let mut c = glm_5_2();
        c.hidden_dim = 16;
        c.n_heads = 4;
        c.n_kv_heads = 2;
        c.head_dim = 4;
        c.moe.hidden_dim = 16;
        c.moe.n_experts = 6;
        c.moe.n_experts_active = 2;
        c.moe.n_shared_experts = 1;
        c.moe.expert_ffn_dim = 8;
        c
    }

    fn seed_caches(d: &Decoder, n: usize) -> Vec<KvCache> {
        (0..n)
            .map(|_| KvCache::new(d.config.n_kv_heads, d.config.head_dim))
            .collect()
    }

    fn plain_greedy(d: &Decoder, prompt: &[usize], n: usize) -> Vec<usize> {
        let mut caches = seed_caches(d, d.layers.len());
        let mut logits = d.forward_batch(prompt, 0, &mut caches).pop().unwrap();
        let mut out = Vec::new();
        for pos in prompt.len()..prompt.len() + n {
            let t = argmax(&logits);
            out.push(t);
            logits = d.forward_token(t, pos, &mut caches);
        }
        out
    }

    #[test]
    fn lookup_takes_the_tokens_after_an_earlier_repeat() {
        let s = PromptLookupSpeculator::new(2, 4);
        assert_eq!(s.propose(&[7, 8, 1, 2, 6, 6, 7, 8]), vec![1, 2, 6, 6]);
        // Capped by max_draft_len, and by the end of the history.
        assert_eq!(
            PromptLookupSpeculator::new(2, 2).propose(&[7, 8, 1, 2, 3, 7, 8]),
            vec![1, 2]
        );
        assert_eq!(
            PromptLookupSpeculator::new(1, 9).propose(&[4, 5, 4]),
            vec![5, 4]
        );
    }

    #[test]
    fn lookup_prefers_the_latest_occurrence() {
        let s = PromptLookupSpeculator::new(1, 2);
        assert_eq!(s.propose(&[3, 1, 1, 3, 2, 2, 3]), vec![2, 2]);
    }

    #[test]
    fn lookup_without_match_or_history_is_empty() {
        let s = PromptLookupSpeculator::new(2, 4);
        assert!(s.propose(&[5, 6, 7, 8, 9]).is_empty());
        assert!(PromptLookupSpeculator::new(3, 4)
            .propose(&[1, 1, 1])
            .is_empty());
        assert!(s.propose(&[]).is_empty());
        // The suffix alone never matches itself.
        assert!(PromptLookupSpeculator::new(2, 1)
            .propose(&[1, 2])
            .is_empty());
    }

    #[test]
    #[should_panic(expected = "ngram_size")]
    fn zero_ngram_panics() {
        PromptLookupSpeculator::new(0, 1);
    }

    #[test]
    #[should_panic(expected = "max_draft_len")]
    fn zero_draft_panics() {
        PromptLookupSpeculator::new(1, 0);
    }

    #[test]
    fn equals_plain_greedy_on_the_shrunk_glm_5_2() {
        let d = Decoder::new_random_small(shrunk(), 2, 8);
        for (prompt, n) in [(vec![1, 2, 3, 4, 1, 2], 6), (vec![3, 1, 3, 1, 3], 9)] {
            let mut caches = seed_caches(&d, 2);
            let r = speculative_decode(
                &d,
                &prompt,
                n,
                &mut caches,
                &PromptLookupSpeculator::new(2, 3),
            );
            assert_eq!(
                r.generated_tokens,
                plain_greedy(&d, &prompt, n),
                "prompt {prompt:?}"
            );
            assert_eq!(r.tokens_generated, n);
            assert_eq!(caches[0].len(), prompt.len() + n);
        }
    }

    #[test]
    fn accepted_drafts_save_calls() {
        let d = Decoder::new_random_small(shrunk(), 2, 8);
        let prompt = [1, 2, 3, 1, 2];
        let mut caches = seed_caches(&d, 2);
        let r = speculative_decode(
            &d,
            &prompt,
            8,
            &mut caches,
            &PromptLookupSpeculator::new(2, 4),
        );
        assert_eq!(r.tokens_generated, 8);
        assert!(r.forward_calls <= 8, "calls {}", r.forward_calls);
        assert!(r.tokens_per_call() > 1.0);
        assert_eq!(r.generated_tokens, plain_greedy(&d, &prompt, 8));
    }

    #[test]
    fn no_match_means_one_call_per_token() {
        let d = Decoder::new_random_small(shrunk(), 2, 8);
        let mut caches = seed_caches(&d, 2);
        let r = speculative_decode(
            &d,
            &[1, 2, 3],
            5,
            &mut caches,
            &PromptLookupSpeculator::new(10, 4),
        );
        assert_eq!(r.tokens_generated, 5);
        assert_eq!(r.forward_calls, 6);
        assert_eq!(r.tokens_per_call(), 5.0 / 6.0);
    }

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

    #[test]
    fn tokens_per_call_of_nothing_is_zero() {
        let r = SpeculativeDecodeResult {
            generated_tokens: vec![],
            forward_calls: 0,
            tokens_generated: 0,
        };
        assert_eq!(r.tokens_per_call(), 0.0);
    }
}
