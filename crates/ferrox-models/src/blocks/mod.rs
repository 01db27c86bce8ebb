//! Shared transformer blocks. A decoder layer is pre-norm attention plus pre-norm FFN, with
//! optional post-norms (Gemma 3, GLM-4); the attention and FFN are trait objects so new kinds
//! (MLA, DSA, MoE) live in their own files without touching the decoder.

pub mod attention;
pub mod dsa;
pub mod mla;
pub mod mlp;
pub mod moe;
pub mod moe_bench;
pub mod norm;
pub mod rope;

pub use attention::StandardAttention;
pub use mlp::GatedMlp;
pub use norm::RmsNorm;
pub use rope::Rope;

use ferrox_core::cache::KvCache;

/// State carried from layer to layer within one forward pass (reset at the start of each pass).
#[derive(Debug, Default)]
pub struct PassState {
    /// DSA: per row, the key positions chosen by the most recent layer that ran its own indexer
    /// (layers with a shared indexer reuse them). `n_rows` rows of `topk_width` entries.
    pub topk: Vec<usize>,
    pub topk_width: usize,
}

/// Attention sublayer over a batch of `n` consecutive positions starting at `pos`.
pub trait AttentionBlock: Send + Sync {
    /// `x`: normed input `[n, hidden]`; writes `out` `[n, hidden]` and appends the `n`
    /// positions to `cache` (whose length is `pos` on entry). Row `i` must be computed exactly
    /// as it would be alone (batch invariance).
    fn forward(
        &self,
        x: &[f32],
        n: usize,
        pos: usize,
        cache: &mut KvCache,
        state: &mut PassState,
        out: &mut [f32],
    );

    /// Cache geometry `(n_kv_heads, head_dim, v_width)` this layer stores per position.
    fn cache_shape(&self) -> (usize, usize, usize);
}

/// Feed-forward sublayer (dense MLP or mixture of experts) over `n` rows.
pub trait FfnBlock: Send + Sync {
    /// `x`: normed input `[n, hidden]`; writes `out` `[n, hidden]`.
    fn forward(&self, x: &[f32], n: usize, out: &mut [f32]);
}
