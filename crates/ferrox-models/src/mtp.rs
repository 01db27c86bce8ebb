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

use crate::blocks::{embed_tokens, Experts, PassState, RmsNorm, Segment};
use crate::config::ModelConfig;
use crate::layer::{grow, Layer};
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
    /// Chained drafts read the state after `head_norm` (Qwen3-Next) instead of before it.
    pub chain_normed: bool,
    /// The token id of each row of `head`, when it covers a sub-vocabulary (a draft head
    /// trained here, FR-Spec's frequent tokens); `None`: row = token id.
    pub vocab: Option<Vec<TokenId>>,
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
    /// `g` of every row (`[rows, hidden]`; before the head's norm, or after it for a block
    /// that chains on normed states): the stand-in for the main model's hidden state when
    /// drafting further.
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
            chain_normed: false,
            vocab: None,
            scratch: Mutex::new(Scratch::default()),
        }
    }
}

impl Mtp {
    /// The token a row of the head's logits stands for.
    pub fn token(&self, row: usize) -> TokenId {
        self.vocab.as_ref().map_or(row, |v| v[row])
    }
}

/// The rows one [`Mtp::forward`] runs: states `h_i` and tokens `t_{i+1}` for `i = pos..`,
/// logits wanted from `first_logit_row` on.
pub(crate) struct Rows<'a> {
    pub hidden: &'a [f32],
    pub tokens: &'a [TokenId],
    pub pos: usize,
    pub first_logit_row: usize,
}

/// What the block shares with the model it drafts for.
pub struct Main<'a> {
    pub config: &'a ModelConfig,
    /// The model's embedding (scaled by `embed_scale`) and LM head, used where the block
    /// stores no copy of its own.
    pub embed: &'a WeightMatrix,
    pub embed_scale: f32,
    pub lm_head: &'a WeightMatrix,
}

impl Mtp {
    /// The block over `rows` (see `Decoder::mtp_forward`, which checks the tokens and readies
    /// `cache`: its length is `rows.pos`).
    pub(crate) fn forward(
        &self,
        main: &Main<'_>,
        rows: Rows<'_>,
        cache: &mut KvCache,
        out: &mut MtpOut,
    ) {
        let Rows {
            hidden,
            tokens,
            pos,
            first_logit_row,
        } = rows;
        let (d, n) = (main.config.hidden_dim, tokens.len());
        assert_eq!(
            hidden.len(),
            n * d,
            "Mtp::forward: one hidden row per token"
        );
        let embed = self.embed.as_ref().unwrap_or(main.embed);
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Scratch {
            e,
            cat,
            h,
            t,
            state,
        } = &mut *guard;
        let e = grow(e, n * d);
        embed_tokens(embed, main.embed_scale, tokens.iter().copied(), e);
        // `[enorm(e); hnorm(h)]` row by row, then the projection back to the model width.
        let cat = grow(cat, n * 2 * d);
        let h = grow(h, n * d);
        let t = grow(t, n * d);
        self.enorm.forward(e, h);
        self.hnorm.forward(hidden, t);
        for (i, row) in cat.chunks_exact_mut(2 * d).enumerate() {
            row[..d].copy_from_slice(&h[i * d..(i + 1) * d]);
            row[d..].copy_from_slice(&t[i * d..(i + 1) * d]);
        }
        out.hidden.clear();
        out.hidden.resize(n * d, 0.0);
        let x = &mut out.hidden[..];
        self.eh_proj.gemm(cat, n, x);

        state.topk.clear();
        state.topk_width = 0;
        let mut seg = [Segment {
            n,
            pos,
            caches: std::slice::from_mut(cache),
            state,
            tree: None,
        }];
        let m = main.config.residual_multiplier;
        self.layer.forward(x, h, t, n, 0, &mut seg, m, Experts::All);

        out.logits.clear();
        let first = first_logit_row.min(n);
        let rows = n - first;
        // A block chaining on normed states hands those out; the head reads them either way.
        let normed: &[f32] = if self.chain_normed {
            self.head_norm.forward_inplace(x);
            &x[first * d..]
        } else {
            self.head_norm.forward(&x[first * d..], &mut h[..rows * d]);
            &h[..rows * d]
        };
        if rows == 0 {
            return;
        }
        let head = self.head.as_ref().unwrap_or(main.lm_head);
        out.logits.resize(rows * head.rows(), 0.0);
        head.gemm(normed, rows, &mut out.logits);
        main.config.finish_logits(&mut out.logits);
    }
}
