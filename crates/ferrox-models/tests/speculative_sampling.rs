//! Speculative sampling is lossless: on a tiny random model (vocab 6), the joint distribution of
//! the first three sampled tokens, estimated from N speculative runs, matches the exact joint
//! distribution enumerated from plain decoding (`Sampler::distribution` at every prefix), within
//! a stated sampling-error bound; a deliberately wrong rejection rule fails the same check.
//! Speculation equals plain decoding token for token: greedy (penalties included) and sampled
//! with a fixed seed.

use ferrox_models::arch::glm_moe_dsa::glm_5_2_tiny;
use ferrox_models::decoder::Decoder;
use ferrox_models::generate::{GenerateParams, Session};
use ferrox_models::sampling::{draw, Candidate, Sampler, SamplerConfig};
use ferrox_models::speculative::{
    verify, AdaptiveDraft, Drafter, LongestMatchDrafter, Speculation,
};
use std::collections::HashMap;

const VOCAB: usize = 6;
const DEPTH: usize = 3;

fn tiny() -> Decoder {
    Decoder::new_random_small(glm_5_2_tiny(), 2, VOCAB)
}

/// Every stage of the chain active: penalties (so the accepted drafts must enter the history),
/// temperature, top-k, top-p and min-p.
fn config(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 0.25,
        top_k: 5,
        top_p: 0.97,
        min_p: 0.02,
        repeat_penalty: 1.3,
        presence_penalty: 0.1,
        frequency_penalty: 0.05,
        penalty_last_n: 8,
        seed,
        logit_bias: vec![(3, 1.5), (5, -2.0)],
    }
}

const PROMPT: [usize; 7] = [1, 2, 3, 1, 2, 4, 1];

fn logits_after(d: &Decoder, tokens: &[usize]) -> Vec<f32> {
    let mut caches = d.new_caches();
    d.forward_from(tokens, 0, &mut caches, tokens.len() - 1)
        .pop()
        .unwrap()
}

/// Exact joint distribution of the first `DEPTH` tokens of plain sampling.
fn exact_joint(d: &Decoder) -> HashMap<Vec<usize>, f64> {
    let mut s = Sampler::new(config(0));
    let mut out = HashMap::new();
    let mut stack = vec![(Vec::<usize>::new(), 1.0f64)];
    while let Some((gen, p)) = stack.pop() {
        if gen.len() == DEPTH {
            out.insert(gen, p);
            continue;
        }
        let hist: Vec<usize> = PROMPT.iter().chain(&gen).copied().collect();
        for (t, q) in s.distribution(&logits_after(d, &hist), &hist) {
            if q > 0.0 {
                let mut g = gen.clone();
                g.push(t);
                stack.push((g, p * q as f64));
            }
        }
    }
    out
}

type VerifyFn = fn(&[&[f32]], &[usize], &mut Sampler, &[usize]) -> Vec<usize>;

fn verify_right(rows: &[&[f32]], draft: &[usize], s: &mut Sampler, h: &[usize]) -> Vec<usize> {
    verify(rows, draft, s, h)
}

/// A wrong rule: on rejection redraw from the full distribution (the rejected token included).
fn verify_wrong(
    rows: &[&[f32]],
    draft: &[usize],
    s: &mut Sampler,
    history: &[usize],
) -> Vec<usize> {
    let mut hist = history.to_vec();
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate().take(draft.len() + 1) {
        let dist: Vec<Candidate> = s.distribution(row, &hist);
        let Some(&t) = draft.get(i) else {
            out.push(draw(&dist, s.rng()));
            break;
        };
        let p = dist.iter().find(|c| c.0 == t).map_or(0.0, |c| c.1 as f64);
        if s.rng().next_f64() < p {
            out.push(t);
            hist.push(t);
        } else {
            out.push(draw(&dist, s.rng()));
            break;
        }
    }
    out
}

/// Logits after a token sequence, memoised: the model is deterministic and batch-invariant
/// (checked by the greedy test below), so a verify row is the same whoever computes it, and
/// memoising makes 20 000 runs cheap.
struct Model<'d> {
    d: &'d Decoder,
    memo: HashMap<Vec<usize>, Vec<f32>>,
}

impl Model<'_> {
    fn logits(&mut self, seq: &[usize]) -> &[f32] {
        if !self.memo.contains_key(seq) {
            let l = logits_after(self.d, seq);
            self.memo.insert(seq.to_vec(), l);
        }
        &self.memo[seq]
    }
}

/// Runs `n` speculative samplings of `DEPTH` tokens with an always-drafting longest-match
/// drafter; returns the empirical joint and (drafted, accepted) totals.
fn speculative_joint(
    d: &Decoder,
    n: usize,
    rule: VerifyFn,
) -> (HashMap<Vec<usize>, f64>, usize, usize) {
    let mut m = Model {
        d,
        memo: HashMap::new(),
    };
    let mut counts: HashMap<Vec<usize>, f64> = HashMap::new();
    let (mut drafted, mut accepted) = (0, 0);
    for run in 0..n {
        let mut s = Sampler::new(config(run as u64 * 7919 + 1));
        let mut drafter = LongestMatchDrafter::new(1);
        let mut hist = PROMPT.to_vec();
        let mut next = s.sample(m.logits(&PROMPT), &hist);
        let mut gen = vec![next];
        while gen.len() < DEPTH {
            hist.push(next);
            let draft = drafter.propose(&hist, DEPTH - gen.len());
            let rows: Vec<Vec<f32>> = (0..=draft.len())
                .map(|i| {
                    let seq: Vec<usize> = hist.iter().chain(&draft[..i]).copied().collect();
                    m.logits(&seq).to_vec()
                })
                .collect();
            let rows: Vec<&[f32]> = rows.iter().map(|r| r.as_slice()).collect();
            let committed = rule(&rows, &draft, &mut s, &hist);
            let a = committed.len() - 1;
            drafted += draft.len();
            accepted += a;
            hist.extend_from_slice(&committed[..a]);
            gen.extend_from_slice(&committed[..a]);
            next = committed[a];
            gen.push(next);
        }
        gen.truncate(DEPTH);
        *counts.entry(gen).or_default() += 1.0 / n as f64;
    }
    (counts, drafted, accepted)
}

fn tv(a: &HashMap<Vec<usize>, f64>, b: &HashMap<Vec<usize>, f64>) -> f64 {
    let keys: std::collections::HashSet<&Vec<usize>> = a.keys().chain(b.keys()).collect();
    keys.iter()
        .map(|k| (a.get(*k).unwrap_or(&0.0) - b.get(*k).unwrap_or(&0.0)).abs())
        .sum::<f64>()
        / 2.0
}

/// Bound on the TV distance of an N-sample empirical distribution from the true `p`:
/// E[TV] <= 1/2 * sum_i sqrt(p_i (1 - p_i) / N) (Jensen per cell), and TV changes by at most
/// 1/N when one sample changes, so by McDiarmid P(TV > E[TV] + t) <= exp(-2 N t^2); t is taken
/// for a failure probability of 1e-6.
fn tv_bound(p: &HashMap<Vec<usize>, f64>, n: usize) -> f64 {
    let n = n as f64;
    let mean: f64 = p.values().map(|&q| (q * (1.0 - q) / n).sqrt()).sum::<f64>() / 2.0;
    mean + ((1e6f64).ln() / (2.0 * n)).sqrt()
}

#[test]
fn speculative_sampling_matches_the_exact_joint_distribution() {
    let d = tiny();
    let exact = exact_joint(&d);
    let total: f64 = exact.values().sum();
    assert!((total - 1.0).abs() < 1e-4, "exact joint sums to {total}");
    let support = exact.values().filter(|&&p| p > 1e-3).count();
    let mut top: Vec<_> = exact.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1));
    eprintln!("exact joint, most likely: {:?}", &top[..top.len().min(8)]);
    let n = 20_000;
    let bound = tv_bound(&exact, n);

    let (emp, drafted, accepted) = speculative_joint(&d, n, verify_right);
    let d_ok = tv(&emp, &exact);
    eprintln!(
        "support {support} outcomes, N = {n}: TV {d_ok:.4} (bound {bound:.4}); drafted {drafted}, accepted {accepted}"
    );
    // The drafter must propose and be rejected often, or the test would not exercise verify.
    assert!(drafted > n && accepted > n / 10 && accepted < drafted * 9 / 10);
    assert!(
        support >= 8,
        "distribution too peaked to test anything: {support}"
    );
    assert!(d_ok < bound, "TV {d_ok} >= bound {bound}");

    let (emp, _, _) = speculative_joint(&d, n, verify_wrong);
    let d_bad = tv(&emp, &exact);
    eprintln!("wrong rejection rule: TV {d_bad:.4}");
    assert!(
        d_bad > bound,
        "the check cannot tell a wrong rule: TV {d_bad} <= {bound}"
    );
}

/// Greedy (with and without penalties) and, for a fixed seed, sampled speculation give plain
/// decoding's tokens exactly: verify draws once per committed token from the same stream.
#[test]
fn speculation_equals_plain_decoding_token_for_token() {
    let d = tiny();
    let greedy_penalised = SamplerConfig {
        repeat_penalty: 1.5,
        ..SamplerConfig::greedy()
    };
    for cfg in [
        SamplerConfig::greedy(),
        greedy_penalised,
        config(42),
        config(43),
    ] {
        let mut plain_s = Sampler::new(cfg.clone());
        let mut hist = PROMPT.to_vec();
        let mut caches = d.new_caches();
        let mut logits = d
            .forward_from(&PROMPT, 0, &mut caches, PROMPT.len() - 1)
            .pop()
            .unwrap();
        let mut plain = Vec::new();
        for _ in 0..40 {
            let t = plain_s.sample(&logits, &hist);
            plain.push(t);
            logits = d.forward_token(t, hist.len(), &mut caches);
            hist.push(t);
        }
        let mut spec = Speculation::new(Box::new(LongestMatchDrafter::new(1)), 6);
        spec.adaptive = AdaptiveDraft::fixed(6);
        let mut session = Session::without_tokenizer(&d, 4096);
        session.set_speculation(Some(spec));
        let params = GenerateParams {
            max_tokens: 40,
            ..GenerateParams::default()
        };
        let out = session.generate(&PROMPT, &params, &mut Sampler::new(cfg.clone()), |_| true);
        assert_eq!(out.tokens, plain, "{cfg:?}");
        assert!(out.spec.accepted > 0, "{:?}", out.spec);
        eprintln!("{cfg:?}: {:?}", out.spec);
    }
}
