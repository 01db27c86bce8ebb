//! Multi-head latent attention (DeepSeek-V2 §2.1 "MLA"; DeepSeek-V3, GLM-4.7-Flash, GLM-5),
//! following transformers' `DeepseekV3Attention` / `GlmMoeDsaAttention` (fixtures/hf-tiny/FORWARD.md
//! §5 "MLA attention") but in the *absorbed* form: the cache holds only the normalised latent
//! `c` (`kv_lora_rank`) and the roped shared key `k_pe` (`qk_rope_head_dim`) per position, and
//! `kv_b_proj` is folded into the query (`q_lat = W_ukᵀ q_nope`) and the output
//! (`v = W_uv · Σ p c`). Every path (prefill, decode, verify) uses this same form, so a row's
//! result does not depend on the batch it came in.
//!
//! With YaRN, the softmax scale gets DeepSeek-V3's `mscale(factor, mscale_all_dim)²` correction on
//! top of the RoPE attention factor.

use super::dsa::{Indexer, IndexerScratch};
use super::norm::rms_norm_rows;
use super::rope::yarn_mscale;
use super::{add_bias, dot, zeroed, AttentionBlock, PassState, Rope};
use crate::config::{ModelConfig, RopeConfig, RopeScaling};
use ferrox_core::cache::KvCache;
use ferrox_core::matmul::WeightMatrix;
use std::sync::Mutex;

/// Checkpoint tensors of one MLA layer (HF names in comments).
#[derive(Debug, Clone)]
pub struct MlaWeights {
    /// `q_a_proj` `[q_lora_rank, hidden]` with `q_a_layernorm`; `None` when queries are
    /// projected directly (`q_proj`).
    pub q_a: Option<(WeightMatrix, Vec<f32>)>,
    pub q_a_bias: Option<Vec<f32>>,
    /// `q_b_proj` `[H*(dn+dr), q_lora_rank]` or `q_proj` `[H*(dn+dr), hidden]`.
    pub q_b: WeightMatrix,
    /// `kv_a_proj_with_mqa` `[kv_lora_rank + dr, hidden]`.
    pub kv_a: WeightMatrix,
    pub kv_a_bias: Option<Vec<f32>>,
    /// `kv_a_layernorm` `[kv_lora_rank]`.
    pub kv_a_norm: Vec<f32>,
    /// `kv_b_proj`, fused or already split per head.
    pub kv_b: KvB,
    /// `o_proj` `[hidden, H*dv]`.
    pub o: WeightMatrix,
    pub o_bias: Option<Vec<f32>>,
}

/// The latent up-projection of keys and values.
#[derive(Debug, Clone)]
pub enum KvB {
    /// Hugging Face `kv_b_proj` (and legacy GGUF `attn_kv_b`) `[H*(dn+dv), kv_lora_rank]`: per head
    /// `dn` key rows then `dv` value rows. Split and transposed into f32 at load.
    Fused(WeightMatrix),
    /// llama.cpp's split form, used as stored (quantized or not): per head `attn_k_b`
    /// `[kv_lora_rank, dn]` (already `W_ukᵀ`) and `attn_v_b` `[dv, kv_lora_rank]` (`W_uv`).
    Split {
        k_b: Vec<WeightMatrix>,
        v_b: Vec<WeightMatrix>,
    },
}

#[derive(Debug)]
pub struct Mla {
    n_heads: usize,
    dn: usize,
    dr: usize,
    dv: usize,
    rkv: usize,
    w: MlaWeights,
    /// Per head `W_ukᵀ` `[rkv, dn]`: maps `q_nope` into latent space.
    w_uk_t: Vec<WeightMatrix>,
    /// Per head `W_uv` `[dv, rkv]`: maps an attended latent to the head's value.
    w_uv: Vec<WeightMatrix>,
    rope: Rope,
    scale: f32,
    /// This layer's own DSA indexer (`None` on shared-indexer layers and non-DSA models).
    pub indexer: Option<Indexer>,
    /// Whether this layer's attention is restricted to an indexer selection.
    pub sparse: bool,
    /// Temporaries reused across calls (as `StandardAttention` does).
    scratch: Mutex<MlaScratch>,
}

/// Reusable buffers of one MLA layer's forward pass.
#[derive(Debug, Default)]
struct MlaScratch {
    q: Vec<f32>,
    q_resid: Vec<f32>,
    ckv: Vec<f32>,
    q_lat: Vec<f32>,
    qn: Vec<f32>,
    o_lat: Vec<f32>,
    idx: Vec<usize>,
    p: Vec<f32>,
    attn: Vec<f32>,
    vh: Vec<f32>,
    ix_keys: Vec<f32>,
    ix: IndexerScratch,
}

/// Latent-space eps of `q_a_layernorm` / `kv_a_layernorm` (built without `eps` in transformers).
const LATENT_EPS: f32 = 1e-6;

impl Mla {
    pub fn new(cfg: &ModelConfig, layer: usize, w: MlaWeights, indexer: Option<Indexer>) -> Self {
        let m = cfg.mla.expect("Mla::new on a config without MLA");
        let (h, dn, dr, dv, rkv) = (
            cfg.n_heads,
            m.qk_nope_head_dim,
            m.qk_rope_head_dim,
            m.v_head_dim,
            m.kv_lora_rank,
        );
        let (w_uk_t, w_uv) = match &w.kv_b {
            KvB::Split { k_b, v_b } => (k_b.clone(), v_b.clone()),
            KvB::Fused(kv_b) => split_kv_b(kv_b, h, dn, dv, rkv),
        };
        let mut scale = ((dn + dr) as f32).powf(-0.5);
        if let RopeScaling::Yarn {
            factor,
            mscale_all_dim,
            ..
        } = cfg.rope.scaling
        {
            if mscale_all_dim != 0.0 {
                // In f32, as MLA's scale has always been computed.
                let ms = yarn_mscale::<f32>(factor, mscale_all_dim);
                scale *= ms * ms;
            }
        }
        let sparse = cfg
            .dsa
            .as_ref()
            .is_some_and(|d| d.indexer_types.len() > layer);
        Mla {
            n_heads: h,
            dn,
            dr,
            dv,
            rkv,
            w,
            w_uk_t,
            w_uv,
            rope: Rope::new(&RopeConfig {
                rotary_dim: dr,
                ..cfg.rope
            }),
            scale,
            indexer,
            sparse,
            scratch: Mutex::default(),
        }
    }

    /// Width of the cache row: latent plus rope key.
    pub fn cache_width(&self) -> usize {
        self.rkv + self.dr
    }
}

impl AttentionBlock for Mla {
    fn state(&self) -> crate::state::LayerState {
        crate::state::LayerState::Latent {
            width: self.rkv + self.dr,
            indexer: self.indexer.as_ref().map(|ix| ix.head_dim()),
        }
    }

    /// Attention over `n` rows of the normed hidden state `h` at positions `pos..pos + n`.
    /// `state.topk` carries the DSA selection from layer to layer: a layer with its own indexer
    /// overwrites it, a shared-indexer layer reads the previous one.
    fn forward(
        &self,
        h: &[f32],
        n: usize,
        pos: usize,
        cache: &mut KvCache,
        state: &mut PassState,
        out: &mut [f32],
    ) {
        assert_eq!(h.len(), n * self.w.o.rows(), "Mla: input shape");
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut *guard;
        self.project_queries(h, n, s);
        self.compress_kv(h, n, pos, s);
        self.append_to_cache(h, (n, pos), (cache, state), s);
        let width = if self.sparse { state.topk_width } else { 0 };
        self.absorb_queries(n, pos, s);
        self.attend_latent(cache.keys(), n, pos, &state.topk, width, s);
        self.project_out(n, s, out);
    }
}

impl Mla {
    /// Queries `s.q` `[t][head][dn + dr]`, through the normed low-rank residual `s.q_resid`
    /// when the layer has `q_a`.
    fn project_queries(&self, h: &[f32], n: usize, s: &mut MlaScratch) {
        let q = zeroed(&mut s.q, n * self.n_heads * (self.dn + self.dr));
        match &self.w.q_a {
            Some((qa, norm)) => {
                let r = zeroed(&mut s.q_resid, n * qa.rows());
                qa.gemm(h, n, r);
                add_bias(r, self.w.q_a_bias.as_deref());
                rms_norm_rows::<f32>(r, norm, LATENT_EPS);
                self.w.q_b.gemm(r, n, q);
            }
            None => self.w.q_b.gemm(h, n, q),
        }
    }

    /// Compressed KV `s.ckv`: normed latent + roped shared key, one cache row per position.
    fn compress_kv(&self, h: &[f32], n: usize, pos: usize, s: &mut MlaScratch) {
        let (dr, rkv) = (self.dr, self.rkv);
        let ckv = zeroed(&mut s.ckv, n * (rkv + dr));
        self.w.kv_a.gemm(h, n, ckv);
        add_bias(ckv, self.w.kv_a_bias.as_deref());
        for (t, row) in ckv.chunks_mut(rkv + dr).enumerate() {
            let (c, kpe) = row.split_at_mut(rkv);
            rms_norm_rows::<f32>(c, &self.w.kv_a_norm, LATENT_EPS);
            self.rope.apply(kpe, 1, dr, pos + t);
        }
    }

    /// Appends the `s.ckv` rows at `pos` (with the indexer's keys, which then selects
    /// `state.topk`, on a layer with its own indexer).
    fn append_to_cache(
        &self,
        h: &[f32],
        (n, pos): (usize, usize),
        (cache, state): (&mut KvCache, &mut PassState),
        s: &mut MlaScratch,
    ) {
        let kw = self.rkv + self.dr;
        if let Err(e) = self.state().shape(cache) {
            panic!("MLA cache: {e}");
        }
        // The decoder cut the cache at `pos` (truncation happens there only).
        assert_eq!(
            cache.len(),
            pos,
            "Mla: cache length must equal the start position"
        );
        let ckv = &s.ckv;
        match &self.indexer {
            Some(ix) => {
                ix.keys_into(h, n, pos, &mut s.ix_keys);
                let keys = &s.ix_keys;
                for t in 0..n {
                    let iw = ix.head_dim();
                    cache.append_with_aux(
                        &ckv[t * kw..(t + 1) * kw],
                        &[],
                        &keys[t * iw..(t + 1) * iw],
                    );
                }
                assert!(self.w.q_a.is_some(), "DSA indexer needs q_lora_rank");
                ix.select(h, &s.q_resid, n, pos, cache.aux(), state, &mut s.ix);
            }
            None => {
                for row in ckv.chunks(kw) {
                    cache.append(row, &[]);
                }
            }
        }
    }

    /// Ropes the queries' rope part and absorbs `W_uk` into their nope part, head by head,
    /// into `s.q_lat` `[head][t][rkv]`.
    fn absorb_queries(&self, n: usize, pos: usize, s: &mut MlaScratch) {
        let (nh, dn, dr, rkv) = (self.n_heads, self.dn, self.dr, self.rkv);
        let dq = dn + dr;
        let q = &mut s.q;
        for t in 0..n {
            for hd in 0..nh {
                let off = (t * nh + hd) * dq + dn;
                self.rope.apply(&mut q[off..off + dr], 1, dr, pos + t);
            }
        }
        let q_lat = zeroed(&mut s.q_lat, nh * n * rkv);
        let qn = zeroed(&mut s.qn, n * dn);
        for hd in 0..nh {
            for t in 0..n {
                let off = (t * nh + hd) * dq;
                qn[t * dn..(t + 1) * dn].copy_from_slice(&q[off..off + dn]);
            }
            self.w_uk_t[hd].gemm(qn, n, &mut q_lat[hd * n * rkv..(hd + 1) * n * rkv]);
        }
    }

    /// Scores against the latent cache `keys` (all positions up to the row's, or the row's
    /// `topk` selection of `width` when non-zero); the attended latent per head into `s.o_lat`
    /// `[head][t][rkv]`.
    fn attend_latent(
        &self,
        keys: &[f32],
        n: usize,
        pos: usize,
        topk: &[usize],
        width: usize,
        s: &mut MlaScratch,
    ) {
        let (nh, dn, dr, rkv) = (self.n_heads, self.dn, self.dr, self.rkv);
        let (dq, kw) = (dn + dr, rkv + dr);
        let MlaScratch {
            q,
            q_lat,
            o_lat,
            idx,
            p,
            ..
        } = s;
        let o_lat = zeroed(o_lat, nh * n * rkv);
        idx.clear();
        p.clear();
        for t in 0..n {
            let last = pos + t;
            idx.clear();
            if width > 0 {
                let row = &topk[t * width..(t + 1) * width];
                idx.extend(row.iter().copied().filter(|&j| j <= last));
            } else {
                idx.extend(0..=last);
            }
            for hd in 0..nh {
                let ql = &q_lat[(hd * n + t) * rkv..(hd * n + t + 1) * rkv];
                let qoff = (t * nh + hd) * dq + dn;
                let qpe = &q[qoff..qoff + dr];
                p.clear();
                let mut max = f32::NEG_INFINITY;
                for &j in idx.iter() {
                    let k = &keys[j * kw..(j + 1) * kw];
                    let score = (dot(ql, &k[..rkv]) + dot(qpe, &k[rkv..])) * self.scale;
                    max = max.max(score);
                    p.push(score);
                }
                let mut sum = 0f32;
                for v in p.iter_mut() {
                    *v = (*v - max).exp();
                    sum += *v;
                }
                let ol = &mut o_lat[(hd * n + t) * rkv..(hd * n + t + 1) * rkv];
                for (&j, &pj) in idx.iter().zip(p.iter()) {
                    let c = &keys[j * kw..j * kw + rkv];
                    let w = pj / sum;
                    for (o, cv) in ol.iter_mut().zip(c) {
                        *o += w * cv;
                    }
                }
            }
        }
    }

    /// Values per head from the attended latents, then the output projection into `out`.
    fn project_out(&self, n: usize, s: &mut MlaScratch, out: &mut [f32]) {
        let (nh, dv, rkv) = (self.n_heads, self.dv, self.rkv);
        let attn = zeroed(&mut s.attn, n * nh * dv);
        let vh = zeroed(&mut s.vh, n * dv);
        for hd in 0..nh {
            self.w_uv[hd].gemm(&s.o_lat[hd * n * rkv..(hd + 1) * n * rkv], n, vh);
            for t in 0..n {
                attn[(t * nh + hd) * dv..(t * nh + hd + 1) * dv]
                    .copy_from_slice(&vh[t * dv..(t + 1) * dv]);
            }
        }
        self.w.o.gemm(attn, n, out);
        add_bias(out, self.w.o_bias.as_deref());
    }
}

/// Splits a fused `kv_b` per head into the key (first `dn` rows, transposed) and value (next
/// `dv` rows) parts.
fn split_kv_b(
    kv_b: &WeightMatrix,
    h: usize,
    dn: usize,
    dv: usize,
    rkv: usize,
) -> (Vec<WeightMatrix>, Vec<WeightMatrix>) {
    let mut row = vec![0f32; rkv];
    let mut w_uk_t = Vec::with_capacity(h);
    let mut w_uv = Vec::with_capacity(h);
    for head in 0..h {
        let base = head * (dn + dv);
        let mut kt = vec![0f32; rkv * dn];
        for d in 0..dn {
            kv_b.dequantize_row(base + d, &mut row)
                .expect("kv_b rows validated at load");
            for (r, v) in row.iter().enumerate() {
                kt[r * dn + d] = *v;
            }
        }
        let mut uv = Vec::with_capacity(dv * rkv);
        for d in 0..dv {
            kv_b.dequantize_row(base + dn + d, &mut row)
                .expect("kv_b rows validated at load");
            uv.extend_from_slice(&row);
        }
        w_uk_t.push(WeightMatrix::from_f32(rkv, dn, &kt));
        w_uv.push(WeightMatrix::from_f32(dv, rkv, &uv));
    }
    (w_uk_t, w_uv)
}
