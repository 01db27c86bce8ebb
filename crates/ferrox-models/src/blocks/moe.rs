//! Mixture-of-experts feed-forward block shared by every MoE family: Mixtral and Qwen3-MoE
//! (softmax router), DeepSeek-V3 / GLM-4.5 / GLM-5 (sigmoid router, `e_score_correction_bias`
//! for selection only, grouped top-k, `routed_scaling_factor`, shared experts), Qwen2-MoE
//! (sigmoid-gated shared expert) and gpt-oss (router bias; softmax over the top-k logits, which
//! is softmax then renormalising the chosen; experts with biases). Routing follows
//! transformers' `*TopkRouter` / `*SparseMoeBlock` (see fixtures/hf-tiny/FORWARD.md, "MoE"). A
//! dense FFN is the one-expert case.
//!
//! Batches are grouped by expert: every active expert runs once over all its tokens (one
//! `gemm` per projection), and each token sums its experts in ascending expert order, so a
//! token's output does not depend on what else is in the batch.

use super::{zeroed, FfnBlock, GatedMlp};
use crate::config::{MoeConfig, RouterScoring};
use ferrox_core::matmul::WeightMatrix;
use std::sync::Mutex;

/// One routed or shared expert: a gated FFN.
pub type Expert = GatedMlp;

/// Router settings (copied from [`MoeConfig`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub scoring: RouterScoring,
    pub n_active: usize,
    pub n_group: usize,
    pub topk_group: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
}

impl Routing {
    pub fn from_config(m: &MoeConfig) -> Self {
        Routing {
            scoring: m.scoring,
            n_active: m.n_experts_active,
            n_group: m.n_group.max(1),
            topk_group: m.topk_group.max(1),
            norm_topk_prob: m.norm_topk_prob,
            routed_scaling_factor: m.routed_scaling_factor,
        }
    }
}

pub struct MoeBlock {
    /// `[n_experts, hidden]`; `None` only for the one-expert (dense) case.
    pub router: Option<WeightMatrix>,
    /// Added to the router logits before routing (gpt-oss): it selects and weights.
    pub router_bias: Option<Vec<f32>>,
    /// Added to the scores to choose experts, never to weight them.
    pub correction_bias: Option<Vec<f32>>,
    pub experts: Vec<Expert>,
    pub shared: Option<Expert>,
    /// `[1, hidden]`: shared output scaled by `sigmoid(gate · x)` (Qwen2-MoE).
    pub shared_gate: Option<WeightMatrix>,
    pub routing: Routing,
    /// Temporaries reused across calls (as `StandardAttention` does); `Default::default()`.
    pub scratch: Mutex<MoeScratch>,
}

/// Reusable buffers of one MoE block's forward pass.
#[derive(Default)]
pub struct MoeScratch {
    /// Per expert: (token, weight).
    per_expert: Vec<Vec<(usize, f32)>>,
    logits: Vec<f32>,
    xs: Vec<f32>,
    ys: Vec<f32>,
    gate: Vec<f32>,
    chosen: Vec<(usize, f32)>,
    route: RouteScratch,
}

/// Buffers of [`route_into`].
#[derive(Default)]
pub struct RouteScratch {
    scores: Vec<f32>,
    sel: Vec<f32>,
    group: Vec<f32>,
    gscore: Vec<(usize, f32)>,
    idx: Vec<usize>,
}

impl MoeBlock {
    /// A dense FFN: every token goes to the single expert with weight 1.
    pub fn dense(ffn: Expert) -> Self {
        MoeBlock {
            router: None,
            router_bias: None,
            correction_bias: None,
            experts: vec![ffn],
            shared: None,
            shared_gate: None,
            routing: Routing {
                scoring: RouterScoring::Softmax,
                n_active: 1,
                n_group: 1,
                topk_group: 1,
                norm_topk_prob: false,
                routed_scaling_factor: 1.0,
            },
            scratch: Default::default(),
        }
    }

    pub fn hidden_dim(&self) -> usize {
        self.experts[0].down.rows()
    }

    /// Chosen experts and their weights for one token's router logits, in selection order.
    pub fn route(&self, logits: &[f32]) -> Vec<(usize, f32)> {
        route(&self.routing, self.correction_bias.as_deref(), logits)
    }

    /// How many distinct routed experts `n` rows of `x` select.
    pub fn experts_used(&self, x: &[f32], n: usize) -> usize {
        let Some(router) = &self.router else {
            return 1;
        };
        let e = self.experts.len();
        let mut logits = vec![0f32; n * e];
        router.gemm(x, n, &mut logits);
        super::add_bias(&mut logits, self.router_bias.as_deref());
        let mut used = vec![false; e];
        for row in logits.chunks(e) {
            for (i, _) in self.route(row) {
                used[i] = true;
            }
        }
        used.iter().filter(|&&u| u).count()
    }

    /// `out[n, hidden] = MoE(x[n, hidden])`.
    pub fn forward_rows(&self, x: &[f32], n: usize, out: &mut [f32]) {
        let d = self.hidden_dim();
        assert_eq!(x.len(), n * d, "MoeBlock: input shape");
        assert_eq!(out.len(), n * d, "MoeBlock: output shape");
        let n_exp = self.experts.len();
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let MoeScratch {
            per_expert,
            logits,
            xs,
            ys,
            gate,
            chosen,
            route,
        } = &mut *guard;

        // Token lists per expert: (token, weight).
        per_expert.resize_with(n_exp, Vec::new);
        for toks in per_expert.iter_mut() {
            toks.clear();
        }
        match &self.router {
            None => per_expert[0].extend((0..n).map(|t| (t, 1.0))),
            Some(router) => {
                let logits = zeroed(logits, n * n_exp);
                router.gemm(x, n, logits);
                super::add_bias(logits, self.router_bias.as_deref());
                for t in 0..n {
                    route_into(
                        &self.routing,
                        self.correction_bias.as_deref(),
                        &logits[t * n_exp..(t + 1) * n_exp],
                        route,
                        chosen,
                    );
                    for &(e, w) in chosen.iter() {
                        per_expert[e].push((t, w));
                    }
                }
            }
        }

        out.fill(0.0);
        for (e, toks) in per_expert.iter().enumerate() {
            if toks.is_empty() {
                continue;
            }
            let m = toks.len();
            xs.clear();
            for &(t, _) in toks {
                xs.extend_from_slice(&x[t * d..(t + 1) * d]);
            }
            let ys = zeroed(ys, m * d);
            self.experts[e].forward(xs, m, ys);
            for (i, &(t, w)) in toks.iter().enumerate() {
                let dst = &mut out[t * d..(t + 1) * d];
                for (o, y) in dst.iter_mut().zip(&ys[i * d..(i + 1) * d]) {
                    *o += w * y;
                }
            }
        }

        if let Some(shared) = &self.shared {
            let ys = zeroed(ys, n * d);
            shared.forward(x, n, ys);
            gate.clear();
            gate.resize(n, 1.0);
            if let Some(g) = &self.shared_gate {
                g.gemm(x, n, gate);
                for v in gate.iter_mut() {
                    *v = 1.0 / (1.0 + (-*v).exp());
                }
            }
            for t in 0..n {
                let dst = &mut out[t * d..(t + 1) * d];
                for (o, y) in dst.iter_mut().zip(&ys[t * d..(t + 1) * d]) {
                    *o += gate[t] * y;
                }
            }
        }
    }
}

impl FfnBlock for MoeBlock {
    fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) {
        self.forward_rows(x, n, out)
    }
}

/// Top-k selection for one token (transformers' routers):
/// scores = softmax or sigmoid of the logits; the selection score adds the correction bias;
/// grouped top-k keeps the `topk_group` groups with the largest sum of their two best
/// selection scores (others' selection scores become 0); weights are the unbiased scores of the chosen experts, renormalised when
/// `norm_topk_prob`, then multiplied by `routed_scaling_factor`.
pub fn route(r: &Routing, bias: Option<&[f32]>, logits: &[f32]) -> Vec<(usize, f32)> {
    let mut chosen = Vec::new();
    route_into(r, bias, logits, &mut RouteScratch::default(), &mut chosen);
    chosen
}

/// [`route`] into `chosen`, with reusable buffers.
pub fn route_into(
    r: &Routing,
    bias: Option<&[f32]>,
    logits: &[f32],
    s: &mut RouteScratch,
    chosen: &mut Vec<(usize, f32)>,
) {
    let n = logits.len();
    let scores = &mut s.scores;
    scores.clear();
    match r.scoring {
        RouterScoring::Sigmoid => scores.extend(logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp()))),
        RouterScoring::Softmax => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            scores.extend(logits.iter().map(|&l| (l - max).exp()));
            let sum: f32 = scores.iter().sum();
            for v in scores.iter_mut() {
                *v /= sum;
            }
        }
    }
    let sel = &mut s.sel;
    sel.clear();
    match bias {
        Some(b) => sel.extend(scores.iter().zip(b).map(|(s, b)| s + b)),
        None => sel.extend_from_slice(scores),
    }

    if r.n_group > 1 && r.topk_group < r.n_group {
        let gsize = n / r.n_group;
        s.gscore.clear();
        for g in 0..r.n_group {
            s.group.clear();
            s.group.extend_from_slice(&sel[g * gsize..(g + 1) * gsize]);
            s.group.sort_by(|a, b| b.total_cmp(a));
            s.gscore.push((g, s.group.iter().take(2).sum()));
        }
        s.gscore
            .sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        // transformers fills dropped groups with 0.0 (not -inf), so a dropped expert can still
        // win over kept ones whose biased score is negative.
        for &(g, _) in &s.gscore[r.topk_group..] {
            sel[g * gsize..(g + 1) * gsize].fill(0.0);
        }
    }

    let idx = &mut s.idx;
    idx.clear();
    idx.extend(0..n);
    idx.sort_by(|&a, &b| sel[b].total_cmp(&sel[a]).then(a.cmp(&b)));
    idx.truncate(r.n_active);
    chosen.clear();
    chosen.extend(idx.iter().map(|&e| (e, scores[e])));
    if r.norm_topk_prob {
        let sum: f32 = chosen.iter().map(|c| c.1).sum::<f32>()
            + if r.scoring == RouterScoring::Sigmoid {
                1e-20
            } else {
                0.0
            };
        for c in chosen.iter_mut() {
            c.1 /= sum;
        }
    }
    for c in chosen.iter_mut() {
        c.1 *= r.routed_scaling_factor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Activation;

    fn mat(rows: usize, cols: usize, seed: u32) -> WeightMatrix {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let h = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(2_654_435_761);
                ((h >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.6
            })
            .collect();
        WeightMatrix::from_f32(rows, cols, &v)
    }

    fn expert(d: usize, f: usize, seed: u32) -> Expert {
        GatedMlp::new(
            mat(f, d, seed),
            mat(f, d, seed + 1),
            mat(d, f, seed + 2),
            Activation::Silu,
        )
    }

    fn block(scoring: RouterScoring, n_group: usize, shared: bool) -> MoeBlock {
        let (d, f, e) = (12, 8, 8);
        MoeBlock {
            router: Some(mat(e, d, 99)),
            router_bias: None,
            correction_bias: (scoring == RouterScoring::Sigmoid)
                .then(|| (0..e).map(|i| (i as f32 - 3.5) * 0.05).collect()),
            experts: (0..e).map(|i| expert(d, f, 10 * i as u32)).collect(),
            shared: shared.then(|| expert(d, 2 * f, 1000)),
            shared_gate: None,
            routing: Routing {
                scoring,
                n_active: 3,
                n_group,
                topk_group: 2.min(n_group),
                norm_topk_prob: true,
                routed_scaling_factor: 2.5,
            },
            scratch: Default::default(),
        }
    }

    /// Per-token reference: route, then run the chosen experts one token at a time.
    fn reference(b: &MoeBlock, x: &[f32], n: usize) -> Vec<f32> {
        let d = b.hidden_dim();
        let e = b.experts.len();
        let mut out = vec![0f32; n * d];
        for t in 0..n {
            let xt = &x[t * d..(t + 1) * d];
            let mut logits = vec![0f32; e];
            b.router.as_ref().unwrap().gemv(xt, &mut logits);
            for (ei, w) in b.route(&logits) {
                let mut y = vec![0f32; d];
                b.experts[ei].forward(xt, 1, &mut y);
                for i in 0..d {
                    out[t * d + i] += w * y[i];
                }
            }
            if let Some(s) = &b.shared {
                let mut y = vec![0f32; d];
                s.forward(xt, 1, &mut y);
                for i in 0..d {
                    out[t * d + i] += y[i];
                }
            }
        }
        out
    }

    #[test]
    fn grouped_batch_matches_per_token_reference() {
        for (scoring, groups, shared) in [
            (RouterScoring::Softmax, 1, false),
            (RouterScoring::Sigmoid, 4, true),
        ] {
            let b = block(scoring, groups, shared);
            let n = 7;
            let x: Vec<f32> = (0..n * 12)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let mut out = vec![0f32; n * 12];
            b.forward_rows(&x, n, &mut out);
            let want = reference(&b, &x, n);
            let max = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(max < 1e-5, "{scoring:?}: {max}");
            // Batch invariance: token 3 alone gives the same bits.
            let mut one = vec![0f32; 12];
            b.forward_rows(&x[36..48], 1, &mut one);
            assert_eq!(&out[36..48], &one[..]);
        }
    }

    #[test]
    fn bias_selects_but_does_not_weight() {
        let r = Routing {
            scoring: RouterScoring::Sigmoid,
            n_active: 2,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: false,
            routed_scaling_factor: 1.0,
        };
        let logits = [2.0, 1.0, 0.0, -1.0];
        let bias = [0.0, 0.0, 0.0, 10.0];
        let got = route(&r, Some(&bias), &logits);
        assert_eq!(got[0].0, 3);
        assert!((got[0].1 - 1.0 / (1.0 + 1f32.exp())).abs() < 1e-7);
        assert_eq!(got[1].0, 0);
    }

    #[test]
    fn groups_limit_selection() {
        // Two groups of two; the best single expert is in group 1 but group 0's pair is better.
        let r = Routing {
            scoring: RouterScoring::Sigmoid,
            n_active: 2,
            n_group: 2,
            topk_group: 1,
            norm_topk_prob: true,
            routed_scaling_factor: 2.0,
        };
        let got = route(&r, None, &[1.0, 1.0, 3.0, -5.0]);
        let mut ids: Vec<usize> = got.iter().map(|c| c.0).collect();
        ids.sort();
        assert_eq!(ids, vec![0, 1]);
        let s: f32 = got.iter().map(|c| c.1).sum();
        assert!((s - 2.0).abs() < 1e-6);
    }

    #[test]
    fn dense_is_one_expert() {
        let e = expert(12, 8, 5);
        let b = MoeBlock::dense(expert(12, 8, 5));
        let x: Vec<f32> = (0..24).map(|i| i as f32 / 10.0 - 1.0).collect();
        let mut a = vec![0f32; 24];
        let mut want = vec![0f32; 24];
        b.forward_rows(&x, 2, &mut a);
        e.forward(&x, 2, &mut want);
        assert_eq!(a, want);
    }
}
