//! Per-sequence layer state: what one layer keeps for one sequence between forwards. The model
//! side decides it (each attention block names its [`LayerState`]); `ferrox_core::cache::KvCache`
//! only stores rows of the shapes given here, so the core crate knows no model family.
//! Truncation (speculative rollback, prefix reuse) is `KvCache::truncate` on every kind here,
//! and happens in one place, the engine (`crate::engine`).
//!
//! A recurrent layer (Gated DeltaNet, Qwen3-Next) keeps a convolution window and a state matrix
//! that cannot be truncated by position. Its cache ([`LayerState::Recurrent`]) stores, per
//! position, the recurrence's *inputs* as ordinary rows — so truncation stays O(1) and the
//! convolution window is just the last rows — plus the state after the stored rows and a
//! checkpoint from the start of the last forward (`KvCache::recurrent`). A forward at a
//! position the state is not valid at rebuilds it from the checkpoint (or from zero) by
//! replaying the stored rows through the same per-position arithmetic (`blocks::deltanet`).
//! The engine's caches are bounded (`KvCache::set_bounded`): there the rows before the last
//! forward's start are forgotten, and an earlier cut is a cut to 0 (`KvCache::restorable`).

use ferrox_core::cache::{CacheShapeError, KvCache};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerState {
    /// Per-head keys and values (GQA / MHA).
    Kv { n_kv_heads: usize, head_dim: usize },
    /// One compressed row per position and no values (MLA: latent plus rope key), with the
    /// DSA indexer key beside it when the layer runs its own indexer.
    Latent {
        width: usize,
        indexer: Option<usize>,
    },
    /// A recurrence's per-position inputs — a `row`-wide row and an `extra`-wide one beside it
    /// — and a fixed `state`-float recurrent state with one checkpoint.
    Recurrent {
        row: usize,
        extra: usize,
        state: usize,
    },
}

impl LayerState {
    /// Gives `cache` this layer's shape: an empty cache takes it, a non-empty one of another
    /// shape is refused.
    pub fn shape(&self, cache: &mut KvCache) -> Result<(), CacheShapeError> {
        match *self {
            LayerState::Kv {
                n_kv_heads,
                head_dim,
            } => cache.ensure_shape(n_kv_heads, head_dim, n_kv_heads * head_dim),
            LayerState::Latent { width, indexer } => {
                cache.ensure_shape(1, width, 0)?;
                cache.ensure_aux_width(indexer.unwrap_or(0))
            }
            LayerState::Recurrent { row, extra, .. } => cache.ensure_shape(1, row, extra),
        }
    }

    /// An empty cache of this layer's shape (f32 rows; the decoder gives per-head ones its
    /// cache format).
    pub fn new_cache(&self) -> KvCache {
        match *self {
            LayerState::Kv {
                n_kv_heads,
                head_dim,
            } => KvCache::new(n_kv_heads, head_dim),
            LayerState::Latent { width, indexer } => {
                KvCache::shaped(1, width, 0, indexer.unwrap_or(0))
            }
            LayerState::Recurrent { row, extra, .. } => KvCache::shaped(1, row, extra, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new cache already has the shape `shape` gives an empty one (so it needs no reshape
    /// that could fail).
    #[test]
    fn new_caches_have_their_layers_shapes() {
        for s in [
            LayerState::Kv {
                n_kv_heads: 2,
                head_dim: 8,
            },
            LayerState::Latent {
                width: 12,
                indexer: Some(4),
            },
            LayerState::Latent {
                width: 12,
                indexer: None,
            },
            LayerState::Recurrent {
                row: 6,
                extra: 3,
                state: 40,
            },
        ] {
            let c = s.new_cache();
            let mut shaped = KvCache::new(1, 0);
            s.shape(&mut shaped).unwrap();
            let dims = |c: &KvCache| (c.k_width(), c.v_width(), c.aux_width(), c.n_kv_heads());
            assert_eq!(dims(&c), dims(&shaped), "{s:?}");
            assert!(c.is_empty());
        }
    }
}
