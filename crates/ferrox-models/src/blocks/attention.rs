//! Standard multi-head attention with grouped KV heads (GQA, Ainslie et al. 2023): optional
//! q/k/v bias (Qwen2), per-head QK RMSNorm before RoPE (Qwen3, Gemma 3), custom softmax scale,
//! logit soft-capping (Gemma 2), attention sinks and an output bias (gpt-oss), a sliding window
//! (key `j` visible from query `p` when `p - j < window`, as transformers' and llama.cpp's
//! masks) and an output gate (Qwen3-Next: the query projection emits, per head, the query then
//! a gate; the attention output is multiplied by `sigmoid(gate)` before `o_proj`).
//!
//! Every row attends exactly as it would alone: two-pass softmax over keys in ascending order,
//! so batched and single-token forwards agree bit for bit.

use super::norm::rows_chunk;
use super::{add_bias, AttentionBlock, RmsNorm, Rope, Segment};
use crate::tree::{place_branch, unplace_branch, Tree};
use ferrox_core::cache::KvCache;
use ferrox_core::kernels::{attend_rows, FlashScratch, RowBlock, Scoring, TypedKv};
use ferrox_core::matmul::WeightMatrix;
use ferrox_core::pool;
use std::cell::RefCell;

pub struct StandardAttention {
    pub wq: WeightMatrix,
    pub wk: WeightMatrix,
    pub wv: WeightMatrix,
    pub qkv_bias: Option<QkvBias>,
    pub wo: WeightMatrix,
    /// Bias of the output projection (gpt-oss).
    pub bo: Option<Vec<f32>>,
    pub qk_norm: Option<QkNorm>,
    pub rope: Rope,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub logits: Logits,
    pub window: Option<usize>,
    /// `wq` emits `[q, gate]` per head (`2 × head_dim` rows each).
    pub output_gate: bool,
}

/// How a query's scores become softmax logits.
pub struct Logits {
    /// `head_dim^-0.5` unless the model says otherwise (Gemma 3's `query_pre_attn_scalar`).
    pub scale: f32,
    /// `cap · tanh(score / cap)` (Gemma 2).
    pub softcap: Option<f32>,
    /// Per query head, a learned logit in every softmax's denominator (gpt-oss's sinks).
    pub sinks: Option<Vec<f32>>,
}

/// Biases of the query, key and value projections (Qwen2, GLM-4): a model has all three or
/// none.
pub struct QkvBias {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// Per-head RMSNorms of queries and keys before RoPE (Qwen3, Gemma 3): both or neither.
pub struct QkNorm {
    pub q: RmsNorm,
    pub k: RmsNorm,
}

thread_local! {
    /// Projections and attention output of the rows in flight, shared by every layer.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// Output gate: the query projection's rows, and the gates split from them.
    qg: Vec<f32>,
    gate: Vec<f32>,
    /// A draft tree row's branch.
    path: Vec<usize>,
}

fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// Below this many score entries (rows × heads × keys) attention runs on one thread.
const PAR_MIN_WORK: usize = 1024;

impl StandardAttention {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        wq: WeightMatrix,
        wk: WeightMatrix,
        wv: WeightMatrix,
        wo: WeightMatrix,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        rope: Rope,
    ) -> Self {
        StandardAttention {
            wq,
            wk,
            wv,
            qkv_bias: None,
            wo,
            bo: None,
            qk_norm: None,
            rope,
            n_heads,
            n_kv_heads,
            head_dim,
            logits: Logits {
                scale: 1.0 / (head_dim as f32).sqrt(),
                softcap: None,
                sinks: None,
            },
            window: None,
            output_gate: false,
        }
    }
}

impl StandardAttention {
    /// Projections, RoPE, cache append and attention for every segment, into `s`.
    #[allow(clippy::too_many_arguments)]
    fn project_attend(
        &self,
        x: &[f32],
        layer: usize,
        segs: &mut [Segment<'_>],
        n: usize,
        s: &mut Scratch,
        out: &mut [f32],
    ) {
        let (nh, nkv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let (qd, kvd) = (nh * hd, nkv * hd);
        let q = grow(&mut s.q, n * qd);
        let k = grow(&mut s.k, n * kvd);
        let v = grow(&mut s.v, n * kvd);
        if self.output_gate {
            let qg = grow(&mut s.qg, n * 2 * qd);
            self.wq.gemm(x, n, qg);
            let gate = grow(&mut s.gate, n * qd);
            let heads = qg
                .chunks_exact(2 * hd)
                .zip(q.chunks_exact_mut(hd))
                .zip(gate.chunks_exact_mut(hd));
            for ((both, qh), gh) in heads {
                qh.copy_from_slice(&both[..hd]);
                gh.copy_from_slice(&both[hd..]);
            }
        } else {
            self.wq.gemm(x, n, q);
        }
        self.wk.gemm(x, n, k);
        self.wv.gemm(x, n, v);
        if let Some(b) = &self.qkv_bias {
            add_bias(q, Some(&b.q));
            add_bias(k, Some(&b.k));
            add_bias(v, Some(&b.v));
        }
        let q_norm = self.qk_norm.as_ref().map(|n| &n.q);
        let k_norm = self.qk_norm.as_ref().map(|n| &n.k);
        let att = grow(&mut s.att, n * qd);
        let mut r0 = 0;
        for seg in segs.iter_mut() {
            let cache = super::segment_cache(seg.caches, layer, seg.pos);
            // A draft tree's row sits at its depth's position.
            let (pos, tree) = (seg.pos, seg.tree);
            let at = |r: usize| pos + tree.map_or(r, |t| t.depth(r));
            // Per row: the head norms, then RoPE at the row's position (a long block's rows
            // in parallel pieces, each row as alone).
            let (qs, ks) = (
                &mut q[r0 * qd..(r0 + seg.n) * qd],
                &mut k[r0 * kvd..(r0 + seg.n) * kvd],
            );
            for (x, heads, width, norm) in [(qs, nh, qd, q_norm), (ks, nkv, kvd, k_norm)] {
                let chunk = rows_chunk(width);
                pool::for_each_chunk_mut(x, chunk, |c, rows| {
                    for (j, xi) in rows.chunks_exact_mut(width).enumerate() {
                        if let Some(norm) = norm {
                            norm.forward_inplace(xi);
                        }
                        self.rope.apply(xi, heads, hd, at(c * chunk / width + j));
                    }
                });
            }
            for i in r0..r0 + seg.n {
                cache.append(&k[i * kvd..(i + 1) * kvd], &v[i * kvd..(i + 1) * kvd]);
            }
            let (q, att) = (
                &q[r0 * qd..(r0 + seg.n) * qd],
                &mut att[r0 * qd..(r0 + seg.n) * qd],
            );
            match tree {
                None => self.attend(q, seg.n, pos, cache, att),
                Some(t) => self.attend_tree(q, t, pos, cache, att, &mut s.path),
            }
            r0 += seg.n;
        }
        if self.output_gate {
            for (a, &g) in att.iter_mut().zip(s.gate.iter()) {
                *a *= 1.0 / (1.0 + (-g).exp());
            }
        }
        self.wo.gemm(att, n, out);
        add_bias(out, self.bo.as_deref());
    }

    /// Attention of `n` query rows at positions `pos..pos + n` over `cache` (which already
    /// holds them): `q` `[n, heads * head_dim]` in, `att` the same shape out. Long blocks are
    /// split into blocks of [`ROW_BLOCK`] rows (each reads a tile of keys once for all its rows
    /// and heads), the latest — costliest — taken first; short ones into (row, KV head) tasks so
    /// decoding still spreads over the threads. Both give every row the same arithmetic.
    fn attend(&self, q: &[f32], n: usize, pos: usize, cache: &KvCache, att: &mut [f32]) {
        let (nh, nkv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let qd = nh * hd;
        let g = nh / nkv;
        let kv = |kvh: usize| TypedKv {
            keys: cache.keys_view(),
            key_layout: cache.key_layout(),
            values: cache.values_view(),
            stride: nkv * hd,
            col: kvh * hd,
            dim: hd,
        };
        // bf16 products when asked for and the cache is stored narrower than f32.
        let bf16 = cache.bf16_products();
        let how = |kvh: usize| Scoring {
            scale: self.logits.scale,
            softcap: self.logits.softcap,
            sinks: self
                .logits
                .sinks
                .as_deref()
                .map(|s| &s[kvh * g..(kvh + 1) * g]),
            bf16,
        };
        let att = &mut att[..n * qd];
        let parallel = n * nh * (pos + n) >= PAR_MIN_WORK && pool::threads() > 1;
        let run = |att: &mut [f32],
                   chunk: usize,
                   f: &(dyn Fn(usize, &mut [f32], &mut FlashScratch) + Sync)| {
            let task = |t: usize, o: &mut [f32]| FLASH.with(|sc| f(t, o, &mut sc.borrow_mut()));
            if parallel {
                pool::for_each_chunk_mut_rev(att, chunk, task);
            } else {
                att.chunks_mut(chunk)
                    .enumerate()
                    .for_each(|(t, o)| task(t, o));
            }
        };
        if n >= ROW_BLOCK * pool::threads() {
            run(att, ROW_BLOCK * qd, &|b, o, sc| {
                let r0 = b * ROW_BLOCK;
                for kvh in 0..nkv {
                    let cols = kvh * g * hd;
                    let blk = RowBlock {
                        q: &q[r0 * qd + cols..],
                        q_stride: qd,
                        rows: o.len() / qd,
                        pos: pos + r0,
                        g,
                        window: self.window,
                    };
                    attend_rows(&blk, kv(kvh), how(kvh), sc, &mut o[cols..]);
                }
            });
        } else {
            run(att, g * hd, &|t, o, sc| {
                let (i, kvh) = (t / nkv, t % nkv);
                let at = i * qd + kvh * g * hd;
                let blk = RowBlock {
                    q: &q[at..at + g * hd],
                    q_stride: g * hd,
                    rows: 1,
                    pos: pos + i,
                    g,
                    window: self.window,
                };
                attend_rows(&blk, kv(kvh), how(kvh), sc, o);
            });
        }
    }
}

impl StandardAttention {
    /// Attention of a draft tree's rows (stored from `pos` on in `cache`): the leading chain
    /// as consecutive rows; every other row after its own branch, which the cache's rows are
    /// swapped into place for (and back), so each row attends exactly as it would alone after
    /// its ancestors.
    fn attend_tree(
        &self,
        q: &[f32],
        tree: Tree<'_>,
        pos: usize,
        cache: &mut KvCache,
        att: &mut [f32],
        path: &mut Vec<usize>,
    ) {
        let qd = self.n_heads * self.head_dim;
        let spine = tree.spine();
        self.attend(&q[..spine * qd], spine, pos, cache, &mut att[..spine * qd]);
        for r in spine..tree.rows() {
            tree.path(r, path);
            place_branch(pos, path, |a, b| cache.swap_positions(a, b));
            let rows = r * qd..(r + 1) * qd;
            self.attend(&q[rows.clone()], 1, pos + path.len(), cache, &mut att[rows]);
            unplace_branch(pos, path, |a, b| cache.swap_positions(a, b));
        }
    }
}

/// Query rows per task of long blocks: 16 rows of 7 heads share each tile of keys.
const ROW_BLOCK: usize = 16;

thread_local! {
    /// Per-thread attention scratch (key tile, scores, running softmax state).
    static FLASH: RefCell<FlashScratch> = RefCell::new(FlashScratch::default());
}

impl AttentionBlock for StandardAttention {
    /// Projections run once over every segment's rows (one read of the weights for the whole
    /// step); RoPE, the cache append and attention run per segment on its own cache.
    fn forward_segments(&self, x: &[f32], layer: usize, segs: &mut [Segment<'_>], out: &mut [f32]) {
        let n: usize = segs.iter().map(|s| s.n).sum();
        super::with_scratch(&SCRATCH, |s| self.project_attend(x, layer, segs, n, s, out));
    }

    fn state(&self) -> crate::state::LayerState {
        crate::state::LayerState::Kv {
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
        }
    }

    fn takes_trees(&self) -> bool {
        true
    }
}
