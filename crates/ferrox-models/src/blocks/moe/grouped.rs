//! The routed experts of a batch, grouped by expert (llama.cpp's `mul_mat_id` does the same:
//! gather each expert's rows, one product per expert). The input is quantized once; each
//! active expert's rows are gathered from it in token order; one parallel region runs every
//! active expert's gate and up projections, one its down projections; then each token sums its
//! experts in ascending expert order. A token's output does not depend on the batch: its rows
//! go through the same kernels and the same sum whatever else is routed beside it. A decoded
//! token reads only its `n_active` experts' weights.

use super::MoeBlock;
use crate::blocks::{add_bias, GatedMlp};
use ferrox_core::kernels::glu::glu;
use ferrox_core::kernels::ActBuf;
use ferrox_core::matmul::{gemm_batch, Gemm};

/// Buffers of [`forward`], reused across calls.
#[derive(Default)]
pub struct GroupedScratch {
    /// Token of each gathered row: expert by expert (ascending), tokens ascending within one.
    order: Vec<usize>,
    /// Per expert, its first gathered row (`n_experts + 1` entries).
    start: Vec<usize>,
    /// Experts with at least one row, ascending.
    active: Vec<usize>,
    /// Per token, `k` (gathered row, weight) in ascending expert order.
    slots: Vec<(usize, f32)>,
    fill: Vec<usize>,
    xq: ActBuf,
    rows: ActBuf,
    /// Gate then up outputs `[2, m, ffn]`, then the shared expert's `[2, n, shared_ffn]`.
    gu: Vec<f32>,
    hq: ActBuf,
    /// The shared expert's activations for its down projection.
    hsq: ActBuf,
    /// Down outputs: the gathered rows, then the shared expert's `n` rows.
    y: Vec<f32>,
}

/// Whether every routed expert has the same shapes, weight types, activation and bias layout
/// (every stacked GGUF tensor does): then one quantized input and one buffer layout serve all.
pub fn uniform(experts: &[GatedMlp]) -> bool {
    let Some(e0) = experts.first() else {
        return false;
    };
    let key = |e: &GatedMlp| {
        (
            [e.gate.ty(), e.up.ty(), e.down.ty()],
            [e.gate.rows(), e.gate.cols(), e.up.rows(), e.down.rows()],
            e.act,
            e.biases.is_some(),
        )
    };
    e0.gate.act_type() == e0.up.act_type() && experts.iter().all(|e| key(e) == key(e0))
}

/// Whether the shared expert can join the routed experts' regions: no sigmoid gate on it
/// (Qwen2-MoE's), its input quantized as theirs, the same activation, no biases.
pub fn folds_shared(b: &MoeBlock) -> bool {
    let (Some(sh), Some(e0)) = (&b.shared, b.experts.first()) else {
        return false;
    };
    b.shared_gate.is_none()
        && sh.biases.is_none()
        && sh.act == e0.act
        && sh.gate.act_type() == e0.gate.act_type()
        && sh.up.act_type() == e0.gate.act_type()
}

/// `out[n, hidden]` = Σ over each token's experts (ascending) of weight · expert(x), for
/// `per_expert[e]` = (token, weight) lists with every token in exactly `k` lists; with
/// `shared` ([`folds_shared`]), plus the shared expert's output, added last.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    b: &MoeBlock,
    x: &[f32],
    n: usize,
    k: usize,
    per_expert: &[Vec<(usize, f32)>],
    shared: bool,
    s: &mut GroupedScratch,
    out: &mut [f32],
) {
    let e0 = &b.experts[0];
    let d = b.hidden_dim();
    plan(per_expert, n, k, s);
    s.xq.quantize(e0.gate.act_type(), x, d);
    s.rows.gather(&s.xq, &s.order);
    let sh = b.shared.as_ref().filter(|_| shared);
    gate_up(b, sh, n, s);
    down(b, sh, n, s);
    combine(&s.slots, k, &s.y, d, sh.map(|_| s.order.len()), out);
}

/// Gate and up projections of every active expert (and the shared one), then the activation.
fn gate_up(b: &MoeBlock, sh: Option<&GatedMlp>, n: usize, s: &mut GroupedScratch) {
    let (experts, e0) = (&b.experts, &b.experts[0]);
    let (m, f) = (s.order.len(), e0.ffn_dim());
    let fs = sh.map_or(0, |e| e.ffn_dim());
    let len = 2 * m * f + 2 * n * fs;
    grow(&mut s.gu, len);
    let (active, start, rows, xq) = (&s.active, &s.start, &s.rows, &s.xq);
    let na = active.len();
    let jobs = 2 * na + if sh.is_some() { 2 } else { 0 };
    gemm_batch(
        jobs,
        |i| match (i >= 2 * na, sh) {
            // The shared expert takes every token, in order, from the ungathered input.
            (true, Some(sh)) => {
                let up = i > 2 * na;
                Gemm {
                    w: if up { &sh.up } else { &sh.gate },
                    acts: xq,
                    a0: 0,
                    n,
                    off: 2 * m * f + if up { n * fs } else { 0 },
                }
            }
            _ => {
                let e = active[i % na];
                Gemm {
                    w: if i < na {
                        &experts[e].gate
                    } else {
                        &experts[e].up
                    },
                    acts: rows,
                    a0: start[e],
                    n: start[e + 1] - start[e],
                    off: if i < na { 0 } else { m * f } + start[e] * f,
                }
            }
        },
        &mut s.gu[..len],
    );
    let (routed, shared) = s.gu[..len].split_at_mut(2 * m * f);
    let (g, u) = routed.split_at_mut(m * f);
    if e0.biases.is_some() {
        for &e in active {
            let bias = experts[e].biases.as_ref();
            let (r0, r1) = (start[e] * f, start[e + 1] * f);
            add_bias(&mut g[r0..r1], bias.map(|b| &b.gate[..]));
            add_bias(&mut u[r0..r1], bias.map(|b| &b.up[..]));
        }
    }
    if m > 0 {
        glu(e0.glu_kind(), g, u, m);
    }
    if let Some(sh) = sh.filter(|_| n > 0) {
        let (gs, us) = shared.split_at_mut(n * fs);
        glu(sh.glu_kind(), gs, us, n);
    }
}

/// Down projections of every active expert (and the shared one) into `y`: the routed rows in
/// gathered order, then the shared expert's `n` rows.
fn down(b: &MoeBlock, sh: Option<&GatedMlp>, n: usize, s: &mut GroupedScratch) {
    let (experts, e0) = (&b.experts, &b.experts[0]);
    let (m, f, d) = (s.order.len(), e0.ffn_dim(), b.hidden_dim());
    s.hq.quantize(e0.down.act_type(), &s.gu[..m * f], f);
    if let Some(sh) = sh {
        let fs = sh.ffn_dim();
        s.hsq
            .quantize(sh.down.act_type(), &s.gu[2 * m * f..2 * m * f + n * fs], fs);
    }
    let len = (m + if sh.is_some() { n } else { 0 }) * d;
    grow(&mut s.y, len);
    let (active, start, hq, hsq) = (&s.active, &s.start, &s.hq, &s.hsq);
    let na = active.len();
    gemm_batch(
        na + usize::from(sh.is_some()),
        |i| match (i == na, sh) {
            (true, Some(sh)) => Gemm {
                w: &sh.down,
                acts: hsq,
                a0: 0,
                n,
                off: m * d,
            },
            _ => {
                let e = active[i];
                Gemm {
                    w: &experts[e].down,
                    acts: hq,
                    a0: start[e],
                    n: start[e + 1] - start[e],
                    off: start[e] * d,
                }
            }
        },
        &mut s.y[..len],
    );
    if e0.biases.is_some() {
        for &e in active {
            let bias = experts[e].biases.as_ref().map(|b| &b.down[..]);
            add_bias(&mut s.y[start[e] * d..start[e + 1] * d], bias);
        }
    }
}

/// Fills `order`, `start`, `active` and `slots` from the per-expert lists.
fn plan(per_expert: &[Vec<(usize, f32)>], n: usize, k: usize, s: &mut GroupedScratch) {
    s.order.clear();
    s.start.clear();
    s.active.clear();
    for (e, toks) in per_expert.iter().enumerate() {
        s.start.push(s.order.len());
        if !toks.is_empty() {
            s.active.push(e);
        }
        s.order.extend(toks.iter().map(|&(t, _)| t));
    }
    s.start.push(s.order.len());
    assert_eq!(s.order.len(), n * k, "every token routed to k experts");
    s.slots.clear();
    s.slots.resize(n * k, (0, 0.0));
    s.fill.clear();
    s.fill.resize(n, 0);
    // Experts ascending, so each token's slots come out in ascending expert order.
    let mut row = 0;
    for toks in per_expert {
        for &(t, w) in toks {
            s.slots[t * k + s.fill[t]] = (row, w);
            s.fill[t] += 1;
            row += 1;
        }
    }
}

/// `out[t] = Σ_j w_j · y[row_j]` over token `t`'s slots in order, from zero (the sum the
/// per-expert loop computes), then `+ y[shared + t]` when the shared expert's rows start at
/// `shared`; rows split across threads.
fn combine(
    slots: &[(usize, f32)],
    k: usize,
    y: &[f32],
    d: usize,
    shared: Option<usize>,
    out: &mut [f32],
) {
    let rows_per_task = (1 << 14) / d.max(1) + 1;
    ferrox_core::pool::for_each_chunk_mut(out, rows_per_task * d, |c, chunk| {
        for (i, dst) in chunk.chunks_exact_mut(d).enumerate() {
            let t = c * rows_per_task + i;
            dst.fill(0.0);
            for &(row, w) in &slots[t * k..(t + 1) * k] {
                for (o, v) in dst.iter_mut().zip(&y[row * d..(row + 1) * d]) {
                    *o += w * v;
                }
            }
            if let Some(r) = shared {
                // The unfolded path adds `1.0 · y`, which is `y` exactly.
                for (o, v) in dst.iter_mut().zip(&y[(r + t) * d..(r + t + 1) * d]) {
                    *o += v;
                }
            }
        }
    });
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}
