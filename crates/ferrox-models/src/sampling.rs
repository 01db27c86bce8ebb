//! Token sampling as a chain of small stages, in this order: logit biases (OpenAI's
//! `logit_bias`, added to the raw logits) → repetition / presence / frequency
//! penalties over a window of recent tokens (llama.cpp's `penalties` sampler rules) →
//! temperature → top-k → top-p (nucleus, Holtzman et al. 2019) → min-p (Nguyen et al. 2024) →
//! a seeded draw. Temperature 0 is greedy (argmax after penalties).
//!
//! `Sampler::distribution` exposes the final distribution the draw uses, so speculative
//! verification can accept or reject against exactly what plain sampling would do.

use ferrox_tokenizer::TokenId;

pub use ferrox_params::SamplerConfig;

/// SplitMix64 (Steele et al. 2014): tiny, seedable, identical on every platform and version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A candidate token and its (transformed) logit or probability.
pub type Candidate = (TokenId, f32);

pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
    cands: Vec<Candidate>,
    counts: std::collections::HashMap<TokenId, u32>,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Self {
        let rng = Rng::new(config.seed);
        Sampler {
            config,
            rng,
            cands: Vec::new(),
            counts: std::collections::HashMap::new(),
        }
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Picks the next token from `logits` given the `history` of tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[TokenId]) -> TokenId {
        self.sample_masked(logits, history, None)
    }

    /// [`sample`](Self::sample) among the tokens `mask` allows (a bitset: bit `t % 32` of word
    /// `t / 32`; tokens past its end are not allowed), the grammar's set in constrained
    /// sampling. The mask applies after the penalties and before every other stage, so the
    /// chain and the draw are plain sampling's over the allowed tokens. A mask that allows
    /// none of `logits` gives token 0 (the constraint never hands out an empty mask).
    pub fn sample_masked(
        &mut self,
        logits: &[f32],
        history: &[TokenId],
        mask: Option<&[u32]>,
    ) -> TokenId {
        if self.config.is_greedy() {
            if !self.penalizes() && self.config.logit_bias.is_empty() {
                return match mask {
                    None => argmax(logits),
                    Some(m) => argmax_masked(logits, m),
                };
            }
            let mut l = std::mem::take(&mut self.cands);
            l.clear();
            l.extend(logits.iter().copied().enumerate());
            self.penalize(&mut l, history);
            if let Some(m) = mask {
                l.retain(|&(t, _)| allowed(m, t));
            }
            let best = argmax_cands(&l);
            self.cands = l;
            return best;
        }
        let mut c = std::mem::take(&mut self.cands);
        self.distribution_into(logits, history, mask, &mut c);
        let tok = draw(&c, &mut self.rng);
        self.cands = c;
        tok
    }

    /// The final distribution of the chain: `(token, probability)` pairs, sorted by
    /// probability descending, summing to 1. Greedy is the one-hot distribution.
    pub fn distribution(&mut self, logits: &[f32], history: &[TokenId]) -> Vec<Candidate> {
        let mut out = Vec::new();
        if self.config.is_greedy() {
            out.extend(logits.iter().copied().enumerate());
            self.penalize(&mut out, history);
            let best = argmax_cands(&out);
            return vec![(best, 1.0)];
        }
        self.distribution_into(logits, history, None, &mut out);
        out
    }

    fn distribution_into(
        &mut self,
        logits: &[f32],
        history: &[TokenId],
        mask: Option<&[u32]>,
        c: &mut Vec<Candidate>,
    ) {
        c.clear();
        c.extend(logits.iter().copied().enumerate());
        self.penalize(c, history);
        if let Some(m) = mask {
            c.retain(|&(t, _)| allowed(m, t));
        }
        temperature(c, self.config.temperature);
        top_k(c, self.config.top_k);
        softmax_sorted(c);
        top_p(c, self.config.top_p);
        min_p(c, self.config.min_p);
        renormalize(c);
    }

    fn penalizes(&self) -> bool {
        let cfg = &self.config;
        cfg.penalty_last_n != 0
            && (cfg.repeat_penalty != 1.0
                || cfg.presence_penalty != 0.0
                || cfg.frequency_penalty != 0.0)
    }

    /// Logit biases, then penalties over the last `penalty_last_n` tokens of `history` (in
    /// logit space). `c` is indexed by token id here (before any sorting).
    fn penalize(&mut self, c: &mut [Candidate], history: &[TokenId]) {
        for &(t, b) in &self.config.logit_bias {
            if let Some(slot) = c.get_mut(t) {
                slot.1 += b;
            }
        }
        if !self.penalizes() {
            return;
        }
        let cfg = &self.config;
        self.counts.clear();
        let window = &history[history.len().saturating_sub(cfg.penalty_last_n)..];
        for &t in window {
            *self.counts.entry(t).or_insert(0) += 1;
        }
        for (&t, &n) in &self.counts {
            let Some(slot) = c.get_mut(t) else { continue };
            debug_assert_eq!(slot.0, t);
            let l = &mut slot.1;
            if *l <= 0.0 {
                *l *= cfg.repeat_penalty;
            } else {
                *l /= cfg.repeat_penalty;
            }
            *l -= n as f32 * cfg.frequency_penalty + cfg.presence_penalty;
        }
    }
}

/// The first index of the largest logit (as `argmax_cands` over the unpenalized logits): the
/// greedy choice.
pub fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best
}

/// The two largest logits' indices, the first as [`argmax`] picks it, the second the first
/// index of the largest among the others (the first again when there is no other).
pub fn top2(logits: &[f32]) -> (TokenId, TokenId) {
    let best = argmax(logits);
    let mut second = None;
    for (i, &l) in logits.iter().enumerate() {
        if i != best && second.is_none_or(|s: usize| l > logits[s]) {
            second = Some(i);
        }
    }
    (best, second.unwrap_or(best))
}

/// Whether bitset `mask` allows token `t`.
fn allowed(mask: &[u32], t: TokenId) -> bool {
    mask.get(t / 32).is_some_and(|w| w >> (t % 32) & 1 != 0)
}

/// The first index of the largest logit among the tokens `mask` allows (0 when none is).
fn argmax_masked(logits: &[f32], mask: &[u32]) -> TokenId {
    let mut best: Option<TokenId> = None;
    for (w, &bits) in mask.iter().enumerate() {
        let mut bits = bits;
        while bits != 0 {
            let t = w * 32 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let Some(&l) = logits.get(t) else {
                return best.unwrap_or(0);
            };
            if best.is_none_or(|b| l > logits[b]) {
                best = Some(t);
            }
        }
    }
    best.unwrap_or(0)
}

fn argmax_cands(c: &[Candidate]) -> TokenId {
    if c.is_empty() {
        return 0;
    }
    let mut best = 0;
    for (i, &(_, l)) in c.iter().enumerate() {
        if l > c[best].1 {
            best = i;
        }
    }
    c[best].0
}

fn by_logit_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Divides logits by the temperature.
pub fn temperature(c: &mut [Candidate], t: f32) {
    if t > 0.0 && t != 1.0 {
        c.iter_mut().for_each(|x| x.1 /= t);
    }
}

/// Keeps the `k` largest logits (0 = all) and sorts the survivors, largest first.
pub fn top_k(c: &mut Vec<Candidate>, k: usize) {
    if k > 0 && k < c.len() {
        c.select_nth_unstable_by(k - 1, by_logit_desc);
        c.truncate(k);
    }
    c.sort_unstable_by(by_logit_desc);
}

/// Logits (sorted descending) to probabilities.
pub fn softmax_sorted(c: &mut [Candidate]) {
    let Some(&(_, max)) = c.first() else { return };
    let mut sum = 0f64;
    for x in c.iter_mut() {
        x.1 = (x.1 - max).exp();
        sum += x.1 as f64;
    }
    let inv = (1.0 / sum) as f32;
    c.iter_mut().for_each(|x| x.1 *= inv);
}

/// Keeps the smallest prefix whose probability mass reaches `p` (1 = off).
pub fn top_p(c: &mut Vec<Candidate>, p: f32) {
    if p >= 1.0 {
        return;
    }
    let mut cum = 0f64;
    for i in 0..c.len() {
        cum += c[i].1 as f64;
        if cum >= p as f64 {
            c.truncate(i + 1);
            return;
        }
    }
}

/// Drops tokens whose probability is below `p` times the top probability (0 = off).
pub fn min_p(c: &mut Vec<Candidate>, p: f32) {
    if p <= 0.0 || c.is_empty() {
        return;
    }
    let thresh = c[0].1 * p;
    let keep = c.iter().take_while(|x| x.1 >= thresh).count().max(1);
    c.truncate(keep);
}

fn renormalize(c: &mut [Candidate]) {
    let sum: f64 = c.iter().map(|x| x.1 as f64).sum();
    if sum > 0.0 {
        let inv = (1.0 / sum) as f32;
        c.iter_mut().for_each(|x| x.1 *= inv);
    }
}

/// Draws from a normalized distribution.
/// A committed token's log-probability under the model (log-softmax of the raw logits, before
/// biases, penalties and temperature: what the model said, as OpenAI's and vLLM's default
/// `logprobs` report it) with the `top` most likely tokens, most likely first.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    pub logprob: f32,
    pub top: Vec<(TokenId, f32)>,
}

/// [`TokenLogprob`] of `token` in `logits`, with the `top` best tokens (ties by lower id).
pub fn logprob(logits: &[f32], token: TokenId, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let lp = |t: TokenId| (logits[t] as f64 - log_z) as f32;
    let mut best: Vec<TokenId> = Vec::with_capacity(top + 1);
    if top > 0 {
        // One pass keeping the `top` largest (top is small: OpenAI allows up to 20).
        for (t, &l) in logits.iter().enumerate() {
            if best.len() == top && l <= logits[best[top - 1]] {
                continue;
            }
            let at = best.partition_point(|&b| logits[b] >= l);
            best.insert(at, t);
            best.truncate(top);
        }
    }
    TokenLogprob {
        token,
        logprob: lp(token),
        top: best.into_iter().map(|t| (t, lp(t))).collect(),
    }
}

pub fn draw(c: &[Candidate], rng: &mut Rng) -> TokenId {
    let u = rng.next_f64();
    let mut cum = 0f64;
    for &(t, p) in c {
        cum += p as f64;
        if u < cum {
            return t;
        }
    }
    c.last().map(|x| x.0).unwrap_or(0)
}

#[cfg(test)]
mod tests {

    #[test]
    fn logprob_is_log_softmax_with_sorted_top() {
        let logits = [1.0f32, 3.0, -2.0, 3.0, 0.5];
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        let got = logprob(&logits, 4, 3);
        assert!((got.logprob as f64 - (0.5 - z.ln())).abs() < 1e-6);
        let ids: Vec<usize> = got.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 0], "descending, ties by lower id");
        assert!(got.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(logprob(&logits, 2, 0).top.is_empty());
    }

    #[test]
    fn logit_bias_bans_and_forces() {
        let logits = [1.0f32, 3.0, 2.0];
        let mut s = Sampler::new(SamplerConfig {
            logit_bias: vec![(1, -100.0)],
            ..SamplerConfig::greedy()
        });
        assert_eq!(s.sample(&logits, &[]), 2);
        let mut s = Sampler::new(SamplerConfig {
            logit_bias: vec![(0, 100.0), (99, 5.0)],
            seed: 7,
            ..SamplerConfig::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]), 0);
        }
    }
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, -1.0, 0.5, 2.9]
    }

    #[test]
    fn greedy_takes_argmax_after_penalties() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&logits(), &[]), 1);
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 1.5,
            ..SamplerConfig::greedy()
        });
        // 3.0 / 1.5 = 2.0 < 2.9
        assert_eq!(s.sample(&logits(), &[1]), 5);
    }

    #[test]
    fn masked_sampling_only_draws_allowed_tokens() {
        // Tokens 0, 2 and 4 allowed: greedy takes 2 (logit 2.0), not 1 or 5.
        let mask = [0b10101u32];
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample_masked(&logits(), &[], Some(&mask)), 2);
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 4.0,
            ..SamplerConfig::greedy()
        });
        // 2.0 / 4 = 0.5 < 1.0: token 0 among the allowed; token 4 (0.5) ties and loses.
        assert_eq!(s.sample_masked(&logits(), &[2], Some(&mask)), 0);
        let mut s = unfiltered(1.0);
        for _ in 0..200 {
            assert!([0, 2, 4].contains(&s.sample_masked(&logits(), &[], Some(&mask))));
        }
        // A mask shorter than the vocabulary allows nothing past its end.
        assert_eq!(argmax_masked(&logits(), &[]), 0);
    }

    /// The candidates of `logits()` after `config`'s penalties for `history`.
    fn penalized(config: SamplerConfig, history: &[TokenId]) -> Vec<Candidate> {
        let mut c: Vec<Candidate> = logits().into_iter().enumerate().collect();
        Sampler::new(config).penalize(&mut c, history);
        c
    }

    #[test]
    fn repeat_penalty_multiplies_negative_logits() {
        let c = penalized(
            SamplerConfig {
                repeat_penalty: 2.0,
                ..SamplerConfig::greedy()
            },
            &[3, 3, 1],
        );
        assert_eq!(c[3].1, -2.0);
        assert_eq!(c[1].1, 1.5);
        assert_eq!(c[0].1, 1.0);
    }

    #[test]
    fn frequency_and_presence_penalties() {
        let c = penalized(
            SamplerConfig {
                frequency_penalty: 0.5,
                presence_penalty: 0.25,
                ..SamplerConfig::greedy()
            },
            &[2, 2, 2, 0],
        );
        assert_eq!(c[2].1, 2.0 - 1.5 - 0.25);
        assert_eq!(c[0].1, 1.0 - 0.5 - 0.25);
        assert_eq!(c[1].1, 3.0);
    }

    #[test]
    fn penalty_window_only_sees_recent_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 10.0,
            penalty_last_n: 2,
            ..SamplerConfig::greedy()
        });
        // Token 1 is outside the last-2 window.
        assert_eq!(s.sample(&logits(), &[1, 0, 0]), 1);
    }

    /// Sampling at `temperature` with top-k, top-p and min-p off.
    fn unfiltered(temperature: f32) -> Sampler {
        Sampler::new(SamplerConfig {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        })
    }

    #[test]
    fn top_k_top_p_min_p_shape_the_distribution() {
        let mut s = unfiltered(1.0);
        s.config.top_k = 3;
        let d = s.distribution(&logits(), &[]);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 5, 2]);
        let sum: f32 = d.iter().map(|x| x.1).sum();
        assert!((sum - 1.0).abs() < 1e-6);

        s.config.top_k = 0;
        s.config.top_p = 0.5;
        let d = s.distribution(&logits(), &[]);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 5]);

        s.config.top_p = 1.0;
        s.config.min_p = 0.5; // keeps p >= 0.5 * p(1): logits within ln 2 of 3.0
        let d = s.distribution(&logits(), &[]);
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 5]);
    }

    #[test]
    fn temperature_sharpens() {
        let mut s = unfiltered(0.5);
        let cold = s.distribution(&logits(), &[]);
        s.config.temperature = 2.0;
        let hot = s.distribution(&logits(), &[]);
        assert!(cold[0].1 > hot[0].1);
    }

    #[test]
    fn same_seed_same_tokens_and_matches_distribution() {
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
            ..Default::default()
        };
        let run = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..2000)
                .map(|_| s.sample(&logits(), &[]))
                .collect::<Vec<_>>()
        };
        let a = run(&cfg);
        assert_eq!(a, run(&cfg));
        let b = run(&SamplerConfig {
            seed: 43,
            ..cfg.clone()
        });
        assert_ne!(a, b);
        // Empirical frequencies follow the distribution.
        let d = Sampler::new(cfg).distribution(&logits(), &[]);
        for (t, p) in d {
            let f = a.iter().filter(|&&x| x == t).count() as f32 / a.len() as f32;
            assert!((f - p).abs() < 0.04, "token {t}: freq {f} vs p {p}");
        }
    }
}
