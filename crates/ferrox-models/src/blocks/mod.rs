//! Shared transformer blocks. A decoder layer is pre-norm attention plus pre-norm FFN, with
//! optional post-norms (Gemma 3, GLM-4); the attention and FFN are trait objects so new kinds
//! (MLA, DSA, MoE, Gated DeltaNet) live in their own files without touching the decoder.

pub mod attention;
pub mod deltanet;
pub mod dsa;
pub mod mla;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod rope;

/// Rows of `embed` for `tokens`, each scaled by `scale`, back to back into `x`
/// (`[tokens, hidden]`): the decoder's input, and an MTP block's.
pub(crate) fn embed_tokens(
    embed: &ferrox_core::matmul::WeightMatrix,
    scale: f32,
    tokens: impl Iterator<Item = crate::TokenId>,
    x: &mut [f32],
) {
    let d = embed.cols();
    for (row, tok) in x.chunks_exact_mut(d).zip(tokens) {
        embed
            .dequantize_row(tok, row)
            .expect("embedding rows validated at load");
        if scale != 1.0 {
            row.iter_mut().for_each(|v| *v *= scale);
        }
    }
}

pub use attention::StandardAttention;
pub use mlp::GatedMlp;
pub use norm::RmsNorm;
pub use rope::Rope;

use ferrox_core::cache::KvCache;
use std::cell::RefCell;
use std::iter::Sum;
use std::ops::{Add, Div, Mul};
use std::thread::LocalKey;

/// The float width a shared formula is evaluated in (f32 or f64): each caller keeps the width
/// it has always used, so one implementation serves both without moving any output bit.
pub trait Real:
    Copy + PartialOrd + Add<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Sum
{
    const ONE: Self;
    const TENTH: Self;
    fn from_f32(v: f32) -> Self;
    fn from_usize(v: usize) -> Self;
    fn to_f32(self) -> f32;
    fn ln(self) -> Self;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const ONE: Self = 1.0;
            const TENTH: Self = 0.1;
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            fn from_usize(v: usize) -> Self {
                v as $t
            }
            fn to_f32(self) -> f32 {
                self as f32
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
        }
    };
}
real!(f32);
real!(f64);

/// `v` resized to `n` zeros (a reused scratch buffer).
pub(crate) fn zeroed(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.clear();
    v.resize(n, 0.0);
    v
}

/// Adds `bias` (when there is one) to each row of its width in `y`.
/// A plain scalar dot product (latent attention's and the sparse-attention indexer's scores:
/// their references sum in this order).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub(crate) fn add_bias(y: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in y.chunks_exact_mut(b.len()) {
            for (v, b) in row.iter_mut().zip(b) {
                *v += b;
            }
        }
    }
}

/// Runs `f` on this thread's scratch `key`. Layers run one after another, so one scratch per
/// block kind and thread serves every layer (per-layer buffers sized for the largest batch
/// would cost layers × that). A thread that re-enters (a rayon worker that picked up another
/// forward while waiting) gets a private buffer instead of a panic.
pub(crate) fn with_scratch<S: Default + 'static, R>(
    key: &'static LocalKey<RefCell<S>>,
    f: impl FnOnce(&mut S) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        Err(_) => f(&mut S::default()),
    })
}

/// State carried from layer to layer within one forward pass (reset at the start of each pass).
#[derive(Debug, Default)]
pub struct PassState {
    /// DSA: per row, the key positions chosen by the most recent layer that ran its own indexer
    /// (layers with a shared indexer reuse them). `n_rows` rows of `topk_width` entries.
    pub topk: Vec<usize>,
    pub topk_width: usize,
}

/// One sequence's rows in a multi-sequence forward: `n` consecutive positions from `pos`
/// (or a draft tree's rows stored there), with that sequence's per-layer caches and its own
/// pass state.
pub struct Segment<'a> {
    pub n: usize,
    pub pos: usize,
    /// One cache per layer.
    pub caches: &'a mut [KvCache],
    pub state: &'a mut PassState,
    /// The rows as a draft tree (only blocks that [`AttentionBlock::takes_trees`] get one).
    pub tree: Option<crate::tree::Tree<'a>>,
}

/// Layer `layer`'s cache of a segment starting at `pos`, which must hold exactly the positions
/// before it: the decoder cuts caches at the start position (truncation happens there only).
pub fn segment_cache(caches: &mut [KvCache], layer: usize, pos: usize) -> &mut KvCache {
    let cache = &mut caches[layer];
    assert_eq!(
        cache.len(),
        pos,
        "layer {layer}: cache length must equal the start position"
    );
    cache
}

/// Attention sublayer over a batch of `n` consecutive positions starting at `pos`. A block
/// implements `forward` or `forward_segments` (or both): each defaults to the other.
pub trait AttentionBlock: Send + Sync {
    /// `x`: normed input `[n, hidden]`; writes `out` `[n, hidden]` and appends the `n`
    /// positions to `cache` (whose length is `pos` on entry). Row `i` must be computed exactly
    /// as it would be alone (batch invariance). The default is `forward_segments` on one
    /// segment.
    fn forward(
        &self,
        x: &[f32],
        n: usize,
        pos: usize,
        cache: &mut KvCache,
        state: &mut PassState,
        out: &mut [f32],
    ) {
        let mut seg = [Segment {
            n,
            pos,
            caches: std::slice::from_mut(cache),
            state,
            tree: None,
        }];
        self.forward_segments(x, 0, &mut seg, out);
    }

    /// Several sequences at once (continuous batching): `x` holds the segments' rows back to
    /// back, and layer `layer` of each segment's caches is used. Row results must equal
    /// `forward` on each segment alone. The default runs the segments one after another;
    /// blocks override it to share the weight reads of their projections.
    fn forward_segments(&self, x: &[f32], layer: usize, segs: &mut [Segment<'_>], out: &mut [f32]) {
        let rows: usize = segs.iter().map(|s| s.n).sum();
        let d = x.len().checked_div(rows).unwrap_or(0);
        let mut r = 0;
        for s in segs.iter_mut() {
            let (a, b) = (r * d, (r + s.n) * d);
            self.forward(
                &x[a..b],
                s.n,
                s.pos,
                &mut s.caches[layer],
                s.state,
                &mut out[a..b],
            );
            r += s.n;
        }
    }

    /// What this layer keeps per sequence and position.
    fn state(&self) -> crate::state::LayerState;

    /// Whether the block attends over a segment's rows as a draft tree (each row after its
    /// own branch, at its depth's position).
    fn takes_trees(&self) -> bool {
        false
    }
}

/// How many routed experts a mixture-of-experts layer runs per token in one forward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Experts {
    /// The model's own count: every forward that produces the model's output.
    #[default]
    All,
    /// At most this many (the highest-weighted of the model's choice; shared experts kept):
    /// a cheaper, inexact forward that only drafts.
    AtMost(usize),
}

/// Feed-forward sublayer (dense MLP or mixture of experts) over `n` rows.
pub trait FfnBlock: Send + Sync {
    /// `x`: normed input `[n, hidden]`; writes `out` `[n, hidden]`.
    fn forward(&self, x: &[f32], n: usize, out: &mut [f32]);

    /// [`forward`](Self::forward) with a routed-expert budget (a dense block ignores it).
    fn forward_experts(&self, x: &[f32], n: usize, out: &mut [f32], _experts: Experts) {
        self.forward(x, n, out)
    }

    /// Whether [`Experts::AtMost`] makes this block cheaper (it routes among several experts).
    fn routes(&self) -> bool {
        false
    }

    /// The block as a mixture of experts (expert parallelism places its experts), if it is one.
    fn as_moe(&self) -> Option<&moe::MoeBlock> {
        None
    }

    fn as_moe_mut(&mut self) -> Option<&mut moe::MoeBlock> {
        None
    }
}
