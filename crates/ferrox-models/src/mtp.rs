//! MTP (multi-token prediction, "NextN") blocks: the module of the DeepSeek-V3 report §2.2
//! (arXiv 2412.19437) as vLLM's `deepseek_mtp.py` and SGLang's NextN models run the Hub
//! checkpoints of DeepSeek-V3 and GLM-4.5/4.6/4.7. For position `i`, with `h_i` the main
//! model's final hidden state (after its output norm: what its LM head reads) and `t_{i+1}` the
//! token that follows:
//!
//! ```text
//! x_i    = eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)])     (the embedding half first)
//! g_i    = one decoder layer over x_0..x_i                    (its own cache, position i)
//! logits = shared_head.head(shared_head.norm(g_i))            (a guess at t_{i+2})
//! ```
//!
//! Chained, `g_i` stands in for `h_{i+1}` (vLLM's one-layer MTP with several speculative
//! tokens). The block drafts; the target verifies, so its quality only moves the acceptance.
//! Reference: `tests/fixtures/hf-tiny-mtp/make.py` (transformers' decoder layer of the family
//! inside these equations).

use crate::blocks::{PassState, RmsNorm, Segment};
use crate::decoder::{grow, Decoder, ForwardError, Layer};
use ferrox_core::cache::KvCache;
use ferrox_core::matmul::WeightMatrix;
use ferrox_tokenizer::TokenId;
use std::sync::Mutex;

/// A loaded MTP block.
pub struct Mtp {
    pub enorm: RmsNorm,
    pub hnorm: RmsNorm,
    /// `[hidden, 2·hidden]`, the embedding half of its input first.
    pub eh_proj: WeightMatrix,
    pub layer: Layer,
    /// `shared_head.norm`.
    pub head_norm: RmsNorm,
    /// The block's own embedding and head when the file stores them (the Hub checkpoints keep
    /// copies); the decoder's otherwise.
    pub embed: Option<WeightMatrix>,
    pub head: Option<WeightMatrix>,
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    e: Vec<f32>,
    cat: Vec<f32>,
    h: Vec<f32>,
    t: Vec<f32>,
    state: PassState,
}

/// What [`Decoder::mtp_forward`] computes for its rows.
#[derive(Debug, Default, Clone)]
pub struct MtpOut {
    /// `g` of every row (`[rows, hidden]`, before the head's norm): the stand-in for the
    /// main model's hidden state when drafting further.
    pub hidden: Vec<f32>,
    /// Logits of rows `first_logit_row..` (`[rows, vocab]`).
    pub logits: Vec<f32>,
}

impl Mtp {
    pub fn new(
        enorm: RmsNorm,
        hnorm: RmsNorm,
        eh_proj: WeightMatrix,
        layer: Layer,
        head_norm: RmsNorm,
    ) -> Mtp {
        Mtp {
            enorm,
            hnorm,
            eh_proj,
            layer,
            head_norm,
            embed: None,
            head: None,
            scratch: Mutex::new(Scratch::default()),
        }
    }
}

impl Decoder {
    /// An empty cache for the MTP block's layer (`None`: the model has no block).
    pub fn new_mtp_cache(&self) -> Option<KvCache> {
        let mtp = self.mtp.as_ref()?;
        let mut c = mtp.layer.attn.state().new_cache();
        self.format_cache(&mtp.layer, &mut c)
            .expect("set_cache_format checked the format against every layer");
        Some(c)
    }

    /// The MTP block over rows `i = pos..pos + n`: `hidden` holds `h_i` (`[n, hidden]`, the
    /// main model's normed final states, or the block's own `g` when chaining), `tokens` holds
    /// `t_{i+1}`. `cache` (from [`new_mtp_cache`](Self::new_mtp_cache)) drops positions at or
    /// after `pos` first. Logits for rows `first_logit_row..` go to `out.logits`.
    ///
    /// # Panics
    /// When the model has no MTP block (check [`Decoder::mtp`]).
    pub fn mtp_forward(
        &self,
        hidden: &[f32],
        tokens: &[TokenId],
        pos: usize,
        cache: &mut KvCache,
        first_logit_row: usize,
        out: &mut MtpOut,
    ) -> Result<(), ForwardError> {
        let mtp = self
            .mtp
            .as_ref()
            .expect("mtp_forward on a model without an MTP block");
        let (d, n) = (self.config.hidden_dim, tokens.len());
        assert_eq!(hidden.len(), n * d, "mtp_forward: one hidden row per token");
        let embed = mtp.embed.as_ref().unwrap_or(&self.embed);
        if let Some(&id) = tokens.iter().find(|&&t| t >= embed.rows()) {
            let vocab = embed.rows();
            return Err(ForwardError::Token { id, vocab });
        }
        mtp.layer
            .attn
            .state()
            .shape(cache)
            .map_err(|e| ForwardError::CacheShape(e.to_string()))?;
        if pos == 0 {
            cache.truncate(0);
            self.format_cache(&mtp.layer, cache)?;
        }
        if cache.len() < pos {
            let len = cache.len();
            return Err(ForwardError::PastCache { pos, len });
        }
        cache.truncate(pos);

        let mut guard = mtp.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Scratch {
            e,
            cat,
            h,
            t,
            state,
        } = &mut *guard;
        let e = grow(e, n * d);
        for (row, &tok) in e.chunks_exact_mut(d).zip(tokens) {
            embed
                .dequantize_row(tok, row)
                .expect("embedding rows validated at load");
            if self.embed_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= self.embed_scale);
            }
        }
        // `[enorm(e); hnorm(h)]` row by row, then the projection back to the model width.
        let cat = grow(cat, n * 2 * d);
        let h = grow(h, n * d);
        let t = grow(t, n * d);
        mtp.enorm.forward(e, h);
        mtp.hnorm.forward(hidden, t);
        for (i, row) in cat.chunks_exact_mut(2 * d).enumerate() {
            row[..d].copy_from_slice(&h[i * d..(i + 1) * d]);
            row[d..].copy_from_slice(&t[i * d..(i + 1) * d]);
        }
        out.hidden.clear();
        out.hidden.resize(n * d, 0.0);
        let x = &mut out.hidden[..];
        mtp.eh_proj.gemm(cat, n, x);

        state.topk.clear();
        state.topk_width = 0;
        let mut seg = [Segment {
            n,
            pos,
            caches: std::slice::from_mut(cache),
            state,
        }];
        mtp.layer
            .forward(x, h, t, n, 0, &mut seg, self.config.residual_multiplier);

        out.logits.clear();
        let first = first_logit_row.min(n);
        let rows = n - first;
        if rows == 0 {
            return Ok(());
        }
        mtp.head_norm.forward(&x[first * d..], &mut h[..rows * d]);
        let head = mtp.head.as_ref().unwrap_or(&self.lm_head);
        out.logits.resize(rows * head.rows(), 0.0);
        head.gemm(&h[..rows * d], rows, &mut out.logits);
        if self.config.logit_divisor != 1.0 {
            let div = self.config.logit_divisor;
            out.logits.iter_mut().for_each(|l| *l /= div);
        }
        if let Some(cap) = self.config.final_logit_softcap {
            out.logits
                .iter_mut()
                .for_each(|l| *l = cap * (*l / cap).tanh());
        }
        Ok(())
    }
}
