//! DeepSeek sparse attention indexer (DeepSeek-V3.2-Exp "DSA" lightning indexer; GLM-5), as
//! transformers' `GlmMoeDsaIndexer` / `DeepseekV32Indexer` compute it without the Hadamard
//! rotation and FP8 quantisation (fixtures/hf-tiny/FORWARD.md §5 "DSA indexer"):
//!
//! `I[t, j] = Σ_h w[t, h] · ReLU(q_i[t, h] · k_i[j] / √Di)`, `w = weights_proj(x) / √Hi`,
//! and each query attends to the `index_topk` keys with the largest `I` (all keys when it can
//! see at most `index_topk`). The indexer keys `k_i` (LayerNorm + RoPE on the first dims) live
//! in the layer's `KvCache` as its auxiliary row, so truncation keeps them aligned.

use super::{dot, zeroed, PassState, Rope};
use ferrox_core::matmul::WeightMatrix;

/// Padding in `PassState::topk` rows that hold fewer than `topk` positions.
pub const NO_KEY: usize = usize::MAX;

#[derive(Debug, Clone)]
pub struct Indexer {
    /// `wq_b` `[Hi*Di, q_lora_rank]` (reads MLA's normed query latent).
    pub wq_b: WeightMatrix,
    /// `wk` `[Di, hidden]`.
    pub wk: WeightMatrix,
    /// `k_norm` LayerNorm weight and bias `[Di]`.
    pub k_norm_w: Vec<f32>,
    pub k_norm_b: Vec<f32>,
    /// `weights_proj` `[Hi, hidden]`.
    pub weights_proj: WeightMatrix,
    pub n_heads: usize,
    pub topk: usize,
    /// RoPE on the first `qk_rope_head_dim` dims of each head: adjacent pairs (GLM-5) or
    /// halves (DeepSeek-V3.2).
    pub rope: Rope,
}

const KEY_NORM_EPS: f32 = 1e-6;

/// Reusable buffers of [`Indexer::select`] (held by the owning MLA layer).
#[derive(Debug, Default)]
pub struct IndexerScratch {
    q: Vec<f32>,
    w: Vec<f32>,
    scores: Vec<(usize, f32)>,
}

impl Indexer {
    pub fn head_dim(&self) -> usize {
        self.wk.rows()
    }

    /// Indexer keys `[n, Di]` for rows of the normed hidden state at positions `pos..`.
    pub fn keys(&self, h: &[f32], n: usize, pos: usize) -> Vec<f32> {
        let mut k = Vec::new();
        self.keys_into(h, n, pos, &mut k);
        k
    }

    /// [`Indexer::keys`] into a reused buffer.
    pub fn keys_into(&self, h: &[f32], n: usize, pos: usize, k: &mut Vec<f32>) {
        let di = self.head_dim();
        let k = zeroed(k, n * di);
        self.wk.gemm(h, n, k);
        for (t, row) in k.chunks_mut(di).enumerate() {
            layer_norm(row, &self.k_norm_w, &self.k_norm_b, KEY_NORM_EPS);
            self.rope.apply(row, 1, di, pos + t);
        }
    }

    /// Top-k key positions for each of the `n` query rows at `pos..`, given every cached
    /// indexer key (`[len, Di]`, this batch included), written to `state.topk` as `n` rows of
    /// `topk` ascending positions padded with [`NO_KEY`]. A row that sees at most `topk` keys
    /// lists all of them. `scratch` holds buffers reused from call to call.
    #[allow(clippy::too_many_arguments)]
    pub fn select(
        &self,
        h: &[f32],
        q_resid: &[f32],
        n: usize,
        pos: usize,
        keys: &[f32],
        state: &mut PassState,
        scratch: &mut IndexerScratch,
    ) {
        let IndexerScratch { q, w, scores } = scratch;
        let (hi, di, k) = (self.n_heads, self.head_dim(), self.topk);
        state.topk_width = k;
        state.topk.clear();
        state.topk.resize(n * k, NO_KEY);
        if pos + n <= k {
            for t in 0..n {
                for j in 0..=pos + t {
                    state.topk[t * k + j] = j;
                }
            }
            return;
        }
        let q = zeroed(q, n * hi * di);
        self.wq_b.gemm(q_resid, n, q);
        let w = zeroed(w, n * hi);
        self.weights_proj.gemm(h, n, w);
        let wscale = (hi as f32).powf(-0.5);
        let sscale = (di as f32).powf(-0.5);
        for t in 0..n {
            let last = pos + t;
            let row = &mut state.topk[t * k..(t + 1) * k];
            if last < k {
                for (j, r) in row.iter_mut().enumerate().take(last + 1) {
                    *r = j;
                }
                continue;
            }
            let qt = &mut q[t * hi * di..(t + 1) * hi * di];
            self.rope.apply(qt, hi, di, last);
            scores.clear();
            for j in 0..=last {
                let k = &keys[j * di..(j + 1) * di];
                let mut s = 0f32;
                for (head, wv) in qt.chunks(di).zip(&w[t * hi..(t + 1) * hi]) {
                    s += wv * wscale * (dot(head, k) * sscale).max(0.0);
                }
                scores.push((j, s));
            }
            scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            for (r, s) in row.iter_mut().zip(&scores[..k]) {
                *r = s.0;
            }
            row.sort_unstable();
        }
    }
}

/// Mean-centred LayerNorm with weight and bias, in place.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = x.len() as f32;
    let mean = x.iter().sum::<f32>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
    let r = 1.0 / (var + eps).sqrt();
    for ((v, w), b) in x.iter_mut().zip(w).zip(b) {
        *v = (*v - mean) * r * w + b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RopeConfig, RopeScaling};

    fn mat(rows: usize, cols: usize, seed: usize) -> WeightMatrix {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| (((i * 7919 + seed * 104_729) % 1013) as f32 / 1013.0 - 0.5) * 0.8)
            .collect();
        WeightMatrix::from_f32(rows, cols, &v)
    }

    #[test]
    fn short_context_is_dense_and_long_context_picks_topk() {
        let (d, rq, hi, di) = (8, 6, 2, 4);
        let ix = Indexer {
            wq_b: mat(hi * di, rq, 1),
            wk: mat(di, d, 2),
            k_norm_w: vec![1.0; di],
            k_norm_b: vec![0.1; di],
            weights_proj: mat(hi, d, 3),
            n_heads: hi,
            topk: 3,
            rope: Rope::new(&RopeConfig {
                theta: 10_000.0,
                scaling: RopeScaling::None,
                rotary_dim: 2,
                interleaved: true,
            }),
        };
        let n = 6;
        let h: Vec<f32> = (0..n * d)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let qr: Vec<f32> = (0..n * rq)
            .map(|i| ((i * 3 % 7) as f32 - 3.0) / 3.0)
            .collect();
        let keys = ix.keys(&h, n, 0);
        let mut st = PassState::default();
        ix.select(
            &h,
            &qr,
            n,
            0,
            &keys,
            &mut st,
            &mut IndexerScratch::default(),
        );
        assert_eq!(st.topk_width, 3);
        assert_eq!(&st.topk[..3], &[0, NO_KEY, NO_KEY]);
        assert_eq!(&st.topk[6..9], &[0, 1, 2]);
        for t in 3..n {
            let s = &st.topk[t * 3..(t + 1) * 3];
            assert!(s.windows(2).all(|w| w[0] < w[1]) && s[2] <= t, "{s:?}");
        }
        // Incremental: the last row alone gives the same choice.
        let mut one = PassState::default();
        ix.select(
            &h[5 * d..],
            &qr[5 * rq..],
            1,
            5,
            &keys,
            &mut one,
            &mut IndexerScratch::default(),
        );
        assert_eq!(one.topk, st.topk[15..18]);
    }
}
