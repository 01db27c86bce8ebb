//! Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024), the linear-attention layer of Qwen3-Next.
//! Reference: transformers `modeling_qwen3_next.py` (`Qwen3NextGatedDeltaNet`, whose torch
//! fallbacks `causal_conv1d_update` and `torch_recurrent_gated_delta_rule` define the math, and
//! `Qwen3NextRMSNormGated`); llama.cpp `src/models/qwen3next.cpp` (`build_layer_attn_linear`).
//!
//! Per position t and value head h (served by key head `h / (n_v / n_k)`):
//!   x = silu(causal depthwise conv over the q/k/v rows t-K+1..t)   (rows before 0 are zero)
//!   q, k = l2norm(q), l2norm(k);  q /= sqrt(d_k)
//!   beta = sigmoid(b);  decay = exp(-exp(A_log) · softplus(a + dt_bias))
//!   S = decay · S;  S += k ⊗ beta·(v - Sᵀk);  o = Sᵀq          (S: d_k × d_v per head)
//!   out = out_proj(rmsnorm(o) · w · silu(z))
//!
//! Batch invariance over speed: a prefill runs the same per-position recurrence as a decode
//! step. transformers' prefill uses the chunked (WY) form, which sums in another order, so its
//! rows would not equal one-token rows bit for bit; projections stay batched matmuls and only
//! the recurrence — O(d_k·d_v) per head and position, no weights read — runs position by
//! position (over heads in parallel).
//!
//! State (see `crate::state`): a position's cache row is its pre-convolution q/k/v row (keys)
//! and its raw b/a row (values), so the convolution window is the last K-1 rows and truncation
//! stays O(1). The delta-rule state after the stored rows and a checkpoint from the start of the
//! last forward are the cache's recurrent blobs. A forward at `pos` with the state valid
//! elsewhere (a rejected draft, a reused prefix) restores the checkpoint when it lies at or
//! before `pos`, zero state at 0 otherwise, and replays the stored rows up to `pos` through
//! `GatedDeltaNet::steps`, the very code the forward runs, so the result is bit-identical
//! to never having gone past `pos`. The checkpoint costs no copy: the forward's first step
//! reads the previous state from one blob and writes the other.
//!
//! Why replay rather than a state checkpoint per verified position: measured at Qwen3-Next-80B's
//! sizes (32 value heads of 128 × 128: a 2 MiB state per layer), one layer, one thread, best of
//! 7 rounds on a shared 2-core machine (`tests::replay_vs_checkpoint_cost`): replaying a
//! position 116–120 µs, a forward step 131–135 µs (the same whether it reads the previous state
//! in place or from another blob), copying the state 39–43 µs. Copied checkpoints cost `k + 1`
//! copies on every verify of k drafts, kept or not; replay costs `a + 1` replayed positions
//! only when a draft is rejected after `a` kept ones, nothing when all are kept or none was
//! drafted. A replayed position is ~3 copies, so copies win only on verifies that kept more
//! than about a third of their draft and then rejected one. For the whole 80B model (36 such
//! layers) a replayed position is ~4 ms on one thread, against a verify forward of 100 ms or
//! more whose matmuls read the active weights. Checkpoints written out of place by the steps
//! themselves would cost no time (above) but `k + 2` states per layer and slot (~1 GiB per slot
//! at 80B sizes and 12-token drafts) against 2 here; and replay is what prefix reuse needs
//! anyway. Hence replay.
//!
//! Rows cost memory: `conv_dim + 2 n_v` floats per position and layer (33 KiB at 80B sizes,
//! ~8 times a full-attention layer's keys and values). A bounded cache (the engine's slots,
//! `KvCache::set_bounded`) therefore forgets every row before the last forward's start but
//! the K - 1 the convolution still reads: cuts inside the last forward stay a replay, earlier
//! ones become a cut to 0 (the engine then prefills again, as llama.cpp does for recurrent
//! models). Unbounded caches (`Decoder::new_caches`) keep every row and every cut.

use super::norm::rms_norm_rows;
use super::{with_scratch, AttentionBlock, Segment};
use crate::config::LinearAttnConfig;
use crate::state::LayerState;
use ferrox_core::cache::{KvCache, RecurrentParts};
use ferrox_core::matmul::WeightMatrix;
use ferrox_core::pool;
use std::cell::RefCell;

/// The q/k/v/z input projection as stored.
pub enum QkvzProj {
    /// One matrix in the Hub's order: per key head `[q, k, v, z]` (`in_proj_qkvz`; llama.cpp's
    /// legacy `ssm_in`).
    Grouped(WeightMatrix),
    /// `[q; k; v]` (all heads of each) and `z` apart (llama.cpp's `attn_qkv` / `attn_gate`).
    Split { qkv: WeightMatrix, z: WeightMatrix },
}

/// A layer's weights as loaded.
pub struct DeltaNetWeights {
    pub proj: QkvzProj,
    /// `[2 n_v, hidden]`: per key head `[b × r, a × r]` (r value heads per key head), as both
    /// the Hub and llama.cpp (`ssm_ba`) store it.
    pub ba: WeightMatrix,
    /// Convolution taps `[conv_dim][kernel]`.
    pub conv: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// `-exp(A_log)` per value head (llama.cpp's `ssm_a`).
    pub a: Vec<f32>,
    /// Gated RMSNorm weight over one value head (plain `w`, not zero-centred).
    pub norm: Vec<f32>,
    pub out: WeightMatrix,
}

pub struct GatedDeltaNet {
    w: DeltaNetWeights,
    /// Convolution taps transposed to `[kernel][conv_dim]` (one contiguous row per tap).
    taps: Vec<f32>,
    dims: LinearAttnConfig,
    eps: f32,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[derive(Default)]
struct Scratch {
    grouped: Vec<f32>,
    mixed: Vec<f32>,
    z: Vec<f32>,
    ba: Vec<f32>,
    core: Vec<f32>,
    rec: RecScratch,
}

/// Per-block buffers of the recurrence.
#[derive(Default)]
struct RecScratch {
    /// `[m][conv_dim]`: convolved, normed q/k/v of the block's positions.
    x: Vec<f32>,
    /// `[m][2 n_v]`: beta, then decay, per value head.
    bd: Vec<f32>,
    /// `[n_v][m][d_v]`: outputs, head-major (each head is one parallel task).
    heads: Vec<f32>,
}

/// Positions prepared at once by the recurrence (bounds its scratch on a long replay).
const BLOCK: usize = 64;

/// Below this many state updates (heads × positions × d_k·d_v) the heads run on one thread.
const PAR_MIN_WORK: usize = 1 << 16;

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// torch's `softplus` (beta 1, threshold 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `x / sqrt(Σx² + 1e-6)` (transformers' `l2norm`, as the FLA kernels use it).
fn l2norm(x: &mut [f32]) {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let inv = 1.0 / (ss as f32 + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

/// One position of one value head. Decays the state — reading the previous one from `src`
/// when given (the first step of a run reads the checkpoint blob and writes the state blob),
/// in place otherwise; the arithmetic is the same either way — then applies the delta rule and
/// writes `o = Sᵀq` unless `o` is empty (a replay needs only the state). Two sweeps over the
/// state: decay with `Sᵀk`, then the update with `Sᵀq`, each row finished before it is read.
#[allow(clippy::too_many_arguments)]
fn delta_step(
    src: Option<&[f32]>,
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    beta: f32,
    decay: f32,
    kv: &mut [f32],
    o: &mut [f32],
) {
    let dv = v.len();
    kv.fill(0.0);
    match src {
        Some(src) => {
            for ((row, old), &ki) in s.chunks_exact_mut(dv).zip(src.chunks_exact(dv)).zip(k) {
                for ((sij, &x), m) in row.iter_mut().zip(old).zip(kv.iter_mut()) {
                    *sij = x * decay;
                    *m += *sij * ki;
                }
            }
        }
        None => {
            for (row, &ki) in s.chunks_exact_mut(dv).zip(k) {
                for (sij, m) in row.iter_mut().zip(kv.iter_mut()) {
                    *sij *= decay;
                    *m += *sij * ki;
                }
            }
        }
    }
    // kv becomes the delta, beta · (v - Sᵀk).
    kv.iter_mut()
        .zip(v)
        .for_each(|(m, &vj)| *m = (vj - *m) * beta);
    if o.is_empty() {
        for (row, &ki) in s.chunks_exact_mut(dv).zip(k) {
            row.iter_mut()
                .zip(kv.iter())
                .for_each(|(sij, &dj)| *sij += ki * dj);
        }
        return;
    }
    o.fill(0.0);
    for ((row, &ki), &qi) in s.chunks_exact_mut(dv).zip(k).zip(q) {
        for ((sij, &dj), oj) in row.iter_mut().zip(kv.iter()).zip(o.iter_mut()) {
            *sij += ki * dj;
            *oj += *sij * qi;
        }
    }
}

impl GatedDeltaNet {
    pub fn new(dims: LinearAttnConfig, eps: f32, w: DeltaNetWeights) -> Self {
        let (cd, kk) = (dims.conv_dim(), dims.conv_kernel);
        let mut taps = vec![0.0; cd * kk];
        for (c, row) in w.conv.chunks_exact(kk).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                taps[t * cd + c] = v;
            }
        }
        GatedDeltaNet { w, taps, dims, eps }
    }

    /// `[n][conv_dim]` pre-convolution q/k/v rows into `mixed`, `[n][value_dim]` gates into `z`.
    fn project(
        &self,
        x: &[f32],
        n: usize,
        grouped: &mut Vec<f32>,
        mixed: &mut [f32],
        z: &mut [f32],
    ) {
        let d = self.dims;
        match &self.w.proj {
            QkvzProj::Split { qkv, z: wz } => {
                qkv.gemm(x, n, mixed);
                wz.gemm(x, n, z);
            }
            QkvzProj::Grouped(w) => {
                let width = w.rows();
                let t = grow(grouped, n * width);
                w.gemm(x, n, t);
                let (dk, kd) = (d.k_head_dim, d.key_dim());
                let gv = d.value_dim() / d.n_k_heads;
                let rows = t
                    .chunks_exact(width)
                    .zip(mixed.chunks_exact_mut(d.conv_dim()))
                    .zip(z.chunks_exact_mut(d.value_dim()));
                for ((src, m), z) in rows {
                    for (g, grp) in src.chunks_exact(2 * dk + 2 * gv).enumerate() {
                        m[g * dk..(g + 1) * dk].copy_from_slice(&grp[..dk]);
                        m[kd + g * dk..kd + (g + 1) * dk].copy_from_slice(&grp[dk..2 * dk]);
                        let v = 2 * kd + g * gv;
                        m[v..v + gv].copy_from_slice(&grp[2 * dk..2 * dk + gv]);
                        z[g * gv..(g + 1) * gv].copy_from_slice(&grp[2 * dk + gv..]);
                    }
                }
            }
        }
    }

    /// Position `p`'s recurrence inputs from the stored rows (`keys` / `values` start at
    /// position `first`): convolved, activated and normed q/k/v into `x`, beta and decay per
    /// value head into `bd`.
    fn prepare(&self, st: &RecurrentParts<'_>, p: usize, x: &mut [f32], bd: &mut [f32]) {
        let (keys, values, first) = (st.keys, st.values, st.first);
        let d = self.dims;
        let (cd, kk, nv) = (d.conv_dim(), d.conv_kernel, d.n_v_heads);
        x.fill(0.0);
        for t in 0..kk {
            // Tap t reads position p + t + 1 - K; earlier than 0 is zero padding.
            let Some(src) = (p + t + 1).checked_sub(kk) else {
                continue;
            };
            let r = src - first;
            let row = &keys[r * cd..(r + 1) * cd];
            let taps = &self.taps[t * cd..(t + 1) * cd];
            for ((xc, &wc), &rc) in x.iter_mut().zip(taps).zip(row) {
                *xc += wc * rc;
            }
        }
        x.iter_mut().for_each(|v| *v = silu(*v));
        let (dk, nk) = (d.k_head_dim, d.n_k_heads);
        let q_div = (dk as f32).sqrt();
        for (i, head) in x[..2 * nk * dk].chunks_exact_mut(dk).enumerate() {
            l2norm(head);
            if i < nk {
                head.iter_mut().for_each(|v| *v /= q_div);
            }
        }
        let r = nv / nk;
        let row = p - first;
        let ba = &values[row * 2 * nv..(row + 1) * 2 * nv];
        for h in 0..nv {
            let (g, j) = (h / r, h % r);
            let (b, a) = (ba[g * 2 * r + j], ba[g * 2 * r + r + j]);
            bd[h] = sigmoid(b);
            bd[nv + h] = (self.w.a[h] * softplus(a + self.w.dt_bias[h])).exp();
        }
    }

    /// Runs positions `from..to` over the stored rows: the first step reads the checkpoint blob,
    /// every step writes the state blob. Outputs `[to - from][value_dim]` go to `out` when it is
    /// not empty.
    fn steps(
        &self,
        st: &mut RecurrentParts<'_>,
        from: usize,
        to: usize,
        out: &mut [f32],
        rec: &mut RecScratch,
    ) {
        let d = self.dims;
        let (cd, nv, dk, dv) = (d.conv_dim(), d.n_v_heads, d.k_head_dim, d.v_head_dim);
        let (kd, r, vd) = (d.key_dim(), nv / d.n_k_heads, d.value_dim());
        let want_out = !out.is_empty();
        let mut b0 = from;
        while b0 < to {
            let m = BLOCK.min(to - b0);
            let x = grow(&mut rec.x, m * cd);
            let bd = grow(&mut rec.bd, m * 2 * nv);
            for (i, (xi, bdi)) in x
                .chunks_exact_mut(cd)
                .zip(bd.chunks_exact_mut(2 * nv))
                .enumerate()
            {
                self.prepare(st, b0 + i, xi, bdi);
            }
            let heads = grow(&mut rec.heads, if want_out { nv * m * dv } else { 0 });
            let first = b0 == from;
            let ckpt: &[f32] = st.checkpoint;
            let (x, bd) = (&*x, &*bd);
            let head = |h: usize, s: &mut [f32], o: &mut [f32]| {
                let src = &ckpt[h * dk * dv..(h + 1) * dk * dv];
                let (qk0, v0) = ((h / r) * dk, 2 * kd + h * dv);
                let mut kv = vec![0.0; dv];
                for i in 0..m {
                    let xi = &x[i * cd..(i + 1) * cd];
                    let oi = if o.is_empty() {
                        &mut [][..]
                    } else {
                        &mut o[i * dv..(i + 1) * dv]
                    };
                    delta_step(
                        (first && i == 0).then_some(src),
                        s,
                        &xi[qk0..qk0 + dk],
                        &xi[kd + qk0..kd + qk0 + dk],
                        &xi[v0..v0 + dv],
                        bd[i * 2 * nv + h],
                        bd[i * 2 * nv + nv + h],
                        &mut kv,
                        oi,
                    );
                }
            };
            let mut tasks: Vec<(&mut [f32], &mut [f32])> = if want_out {
                st.state
                    .chunks_exact_mut(dk * dv)
                    .zip(heads.chunks_exact_mut(m * dv))
                    .collect()
            } else {
                st.state
                    .chunks_exact_mut(dk * dv)
                    .map(|s| (s, &mut [][..]))
                    .collect()
            };
            if nv * m * dk * dv >= PAR_MIN_WORK && pool::threads() > 1 {
                pool::for_each_chunk_mut(&mut tasks, 1, |h, t| {
                    let (s, o) = &mut t[0];
                    head(h, s, o);
                });
            } else {
                for (h, (s, o)) in tasks.iter_mut().enumerate() {
                    head(h, s, o);
                }
            }
            if want_out {
                for (h, hd) in heads.chunks_exact(m * dv).enumerate() {
                    for (i, o) in hd.chunks_exact(dv).enumerate() {
                        let row = (b0 - from + i) * vd + h * dv;
                        out[row..row + dv].copy_from_slice(o);
                    }
                }
            }
            b0 += m;
        }
    }

    /// Brings `cache`'s state to `pos` (whose rows up to `pos + n` are stored), then runs
    /// positions `pos..pos + n`, their outputs into `core` (`[n][value_dim]`).
    fn recur(
        &self,
        cache: &mut KvCache,
        pos: usize,
        n: usize,
        core: &mut [f32],
        rec: &mut RecScratch,
    ) {
        let mut st = cache.recurrent(self.dims.state_len());
        if *st.state_at == Some(pos) {
            // The state becomes the checkpoint; the other blob is the work buffer.
            st.swap();
        } else {
            let base = match *st.checkpoint_at {
                Some(c) if c <= pos => c,
                _ => {
                    st.checkpoint.fill(0.0);
                    *st.checkpoint_at = Some(0);
                    0
                }
            };
            if base < pos {
                self.steps(&mut st, base, pos, &mut [], rec);
                *st.state_at = Some(pos);
                st.swap();
            }
        }
        debug_assert_eq!(*st.checkpoint_at, Some(pos));
        *st.state_at = None;
        if n > 0 {
            self.steps(&mut st, pos, pos + n, core, rec);
            *st.state_at = Some(pos + n);
        }
    }

    fn run(
        &self,
        x: &[f32],
        layer: usize,
        segs: &mut [Segment<'_>],
        s: &mut Scratch,
        out: &mut [f32],
    ) {
        let d = self.dims;
        let (cd, vd, nv) = (d.conv_dim(), d.value_dim(), d.n_v_heads);
        let n: usize = segs.iter().map(|s| s.n).sum();
        let mixed = grow(&mut s.mixed, n * cd);
        let z = grow(&mut s.z, n * vd);
        self.project(x, n, &mut s.grouped, mixed, z);
        let ba = grow(&mut s.ba, n * 2 * nv);
        self.w.ba.gemm(x, n, ba);
        let core = grow(&mut s.core, n * vd);
        let mut r0 = 0;
        for seg in segs.iter_mut() {
            let cache = super::segment_cache(seg.caches, layer, seg.pos);
            for i in r0..r0 + seg.n {
                cache.append(
                    &mixed[i * cd..(i + 1) * cd],
                    &ba[i * 2 * nv..(i + 1) * 2 * nv],
                );
            }
            let rows = &mut core[r0 * vd..(r0 + seg.n) * vd];
            self.recur(cache, seg.pos, seg.n, rows, &mut s.rec);
            // Only cuts inside this forward need a replay now: its start is the checkpoint, the
            // convolution reads K - 1 rows before it.
            cache.forget_before(seg.pos, d.conv_kernel - 1);
            r0 += seg.n;
        }
        // Gated RMSNorm per value head: w · rmsnorm(o) · silu(z).
        rms_norm_rows::<f64>(core, &self.w.norm, self.eps);
        core.iter_mut()
            .zip(z.iter())
            .for_each(|(o, &g)| *o *= silu(g));
        self.w.out.gemm(core, n, out);
    }
}

impl AttentionBlock for GatedDeltaNet {
    /// Projections run once over every segment's rows; the recurrence per segment on its own
    /// cache.
    fn forward_segments(&self, x: &[f32], layer: usize, segs: &mut [Segment<'_>], out: &mut [f32]) {
        with_scratch(&SCRATCH, |s| self.run(x, layer, segs, s, out));
    }

    fn state(&self) -> LayerState {
        let d = self.dims;
        LayerState::Recurrent {
            row: d.conv_dim(),
            extra: 2 * d.n_v_heads,
            state: d.state_len(),
        }
    }
}

#[cfg(test)]
mod tests;
