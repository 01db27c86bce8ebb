//! Mixture-of-experts feed-forward block shared by every MoE family: Mixtral and Qwen3-MoE
//! (softmax router), DeepSeek-V3 / GLM-4.5 / GLM-5 (sigmoid router, `e_score_correction_bias`
//! for selection only, grouped top-k, `routed_scaling_factor`, shared experts), Qwen2-MoE
//! (sigmoid-gated shared expert) and gpt-oss (router bias; softmax over the top-k logits, which
//! is softmax then renormalising the chosen; experts with biases). Routing follows
//! transformers' `*TopkRouter` / `*SparseMoeBlock` (see fixtures/hf-tiny/FORWARD.md, "MoE"). A
//! dense FFN is the one-expert case.
//!
//! Batches are grouped by expert (`grouped.rs`): every active expert runs once over all its
//! tokens, and each token sums its experts in ascending expert order, so a token's output does
//! not depend on what else is in the batch.

pub mod bench;
pub mod grouped;
mod remote;

use super::{zeroed, Experts, FfnBlock, GatedMlp};
use crate::config::{MoeConfig, RouterScoring};
use crate::distributed::RemoteExperts;
use ferrox_core::matmul::WeightMatrix;
use grouped::GroupedScratch;
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
    /// Routed experts spread over several places (expert parallelism); `None`: all here.
    pub remote: Option<RemoteExperts>,
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
    grouped: GroupedScratch,
    remote: remote::RemoteScratch,
    /// Per routed expert: tokens routed to it so far (what `--save-expert-load` writes).
    counts: Vec<u64>,
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
            remote: None,
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

    /// Per routed expert, the tokens routed to it by this block's forwards so far (empty for
    /// a dense block or before the first forward): the measured load that
    /// `ExpertPlacement::weighted` can place experts by.
    pub fn routed_counts(&self) -> Vec<u64> {
        let s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        s.counts.clone()
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
        self.forward_capped(x, n, out, Experts::All)
    }

    /// [`forward_rows`](Self::forward_rows) running at most `experts` routed experts per token:
    /// the highest-weighted of the model's choice, their weights scaled to the full choice's
    /// sum (a draft's approximation; shared experts run as always).
    pub fn forward_capped(&self, x: &[f32], n: usize, out: &mut [f32], experts: Experts) {
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
            grouped,
            remote: rs,
            counts,
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
                    if let Experts::AtMost(cap) = experts {
                        keep_heaviest(chosen, cap.max(1));
                    }
                    for &(e, w) in chosen.iter() {
                        per_expert[e].push((t, w));
                    }
                }
                // The measured load places experts: drafts' reduced routing is not it.
                if experts == Experts::All {
                    counts.resize(n_exp, 0);
                    for (c, toks) in counts.iter_mut().zip(per_expert.iter()) {
                        *c += toks.len() as u64;
                    }
                }
            }
        }

        if let Some(remote) = &self.remote {
            let bufs = remote::Buffers {
                xs,
                ys,
                gate,
                scratch: rs,
            };
            return self.forward_remote(remote, x, n, per_expert, bufs, out);
        }

        let k = match (&self.router, experts) {
            (None, _) => 1,
            (Some(_), Experts::All) => self.routing.n_active.min(n_exp),
            (Some(_), Experts::AtMost(c)) => self.routing.n_active.min(n_exp).min(c.max(1)),
        };
        let uniform = grouped::uniform(&self.experts);
        let folded = uniform && grouped::folds_shared(self);
        if uniform {
            grouped::forward(self, x, n, k, per_expert, folded, grouped, out);
        } else {
            self.forward_each(x, per_expert, xs, ys, out);
        }
        if !folded && self.shared_output(x, n, ys, gate) {
            self.add_shared(out, n, ys, gate);
        }
    }

    /// Experts that differ in shape or type (never from one stacked tensor): each runs on its
    /// gathered rows alone, tokens summing experts in ascending order as the grouped path does.
    fn forward_each(
        &self,
        x: &[f32],
        per_expert: &[Vec<(usize, f32)>],
        xs: &mut Vec<f32>,
        ys: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        let d = self.hidden_dim();
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
                add_weighted(&mut out[t * d..(t + 1) * d], w, &ys[i * d..(i + 1) * d]);
            }
        }
    }

    /// The shared expert's output of the `n` rows of `x` into `ys` and its per-row gate into
    /// `gate`; false when the block has none.
    pub(super) fn shared_output(
        &self,
        x: &[f32],
        n: usize,
        ys: &mut Vec<f32>,
        gate: &mut Vec<f32>,
    ) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        let ys = zeroed(ys, n * self.hidden_dim());
        shared.forward(x, n, ys);
        gate.clear();
        gate.resize(n, 1.0);
        if let Some(g) = &self.shared_gate {
            g.gemm(x, n, gate);
            for v in gate.iter_mut() {
                *v = 1.0 / (1.0 + (-*v).exp());
            }
        }
        true
    }

    /// `out[t] += gate[t] · ys[t]` for each of the `n` rows (after the routed sum).
    pub(super) fn add_shared(&self, out: &mut [f32], n: usize, ys: &[f32], gate: &[f32]) {
        let d = self.hidden_dim();
        for t in 0..n {
            add_weighted(
                &mut out[t * d..(t + 1) * d],
                gate[t],
                &ys[t * d..(t + 1) * d],
            );
        }
    }
}

/// `dst += w · y`, element by element (the one accumulation every routed and shared output
/// goes through, here or on another place).
pub(super) fn add_weighted(dst: &mut [f32], w: f32, y: &[f32]) {
    for (o, v) in dst.iter_mut().zip(y) {
        *o += w * v;
    }
}

/// Keeps the `cap` highest weights of `chosen` (ties: selection order), scaled to the sum of
/// all its weights.
fn keep_heaviest(chosen: &mut Vec<(usize, f32)>, cap: usize) {
    if chosen.len() <= cap {
        return;
    }
    let total: f32 = chosen.iter().map(|c| c.1).sum();
    chosen.sort_by(|a, b| b.1.total_cmp(&a.1));
    chosen.truncate(cap);
    let kept: f32 = chosen.iter().map(|c| c.1).sum();
    if kept > 0.0 {
        chosen.iter_mut().for_each(|c| c.1 *= total / kept);
    }
}

impl FfnBlock for MoeBlock {
    fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) {
        self.forward_rows(x, n, out)
    }
    fn forward_experts(&self, x: &[f32], n: usize, out: &mut [f32], experts: Experts) {
        self.forward_capped(x, n, out, experts)
    }
    fn routes(&self) -> bool {
        self.router.is_some() && self.routing.n_active > 1
    }
    fn as_moe(&self) -> Option<&MoeBlock> {
        Some(self)
    }
    fn as_moe_mut(&mut self) -> Option<&mut MoeBlock> {
        Some(self)
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
mod tests;
