//! One pre-norm decoder layer (attention, then FFN, each optionally post-normed, each added to
//! the residual stream): what the decoder stacks and an MTP block (`crate::mtp`) runs once.

use crate::blocks::norm::PAR_ELEMS;
use crate::blocks::{AttentionBlock, Experts, FfnBlock, RmsNorm, Segment};

pub struct Layer {
    pub attn_norm: RmsNorm,
    pub attn: Box<dyn AttentionBlock>,
    /// Norm of the attention output before the residual add (Gemma 3, GLM-4).
    pub post_attn_norm: Option<RmsNorm>,
    pub ffn_norm: RmsNorm,
    pub ffn: Box<dyn FfnBlock>,
    pub post_ffn_norm: Option<RmsNorm>,
}

impl Layer {
    /// The layer over the `n` rows of the residual stream `x`, in place (`h`, `t`: scratch of
    /// its size); `l` indexes the segments' caches; `m` scales the residual adds; `experts`
    /// bounds a mixture-of-experts FFN's routed experts per token.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        x: &mut [f32],
        h: &mut [f32],
        t: &mut [f32],
        n: usize,
        l: usize,
        segs: &mut [Segment<'_>],
        m: f32,
        experts: Experts,
    ) {
        self.attn_norm.forward(x, h);
        self.attn.forward_segments(h, l, segs, t);
        if let Some(norm) = &self.post_attn_norm {
            norm.forward_inplace(t);
        }
        residual_add(x, t, m);
        self.ffn_norm.forward(x, h);
        self.ffn.forward_experts(h, n, t, experts);
        if let Some(norm) = &self.post_ffn_norm {
            norm.forward_inplace(t);
        }
        residual_add(x, t, m);
    }
}

/// `x += m · t` (`m == 1`: a plain add, so unscaled models round exactly as before), long
/// blocks in parallel pieces.
fn residual_add(x: &mut [f32], t: &[f32], m: f32) {
    assert_eq!(x.len(), t.len(), "residual_add: shapes");
    ferrox_core::pool::for_each_chunk_mut(x, PAR_ELEMS, |i, x| {
        let t = &t[i * PAR_ELEMS..][..x.len()];
        if m == 1.0 {
            x.iter_mut().zip(t).for_each(|(a, &b)| *a += b);
        } else {
            x.iter_mut().zip(t).for_each(|(a, &b)| *a += m * b);
        }
    });
}

/// `v` as a slice of `n`, grown (never shrunk) to hold it: scratch reused across forwards.
pub(crate) fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}
