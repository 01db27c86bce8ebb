//! How a per-head cache stores its rows and how attention multiplies them, as one value: the
//! key and value element types (llama.cpp's `--cache-type-k/-v`) and whether attention takes
//! bf16 products (`--attn-bf16`). The key layout is not part of it: that is the attention
//! kernel's choice per head width (`kernels::key_layout`), not the user's, so it is passed
//! beside the format when a cache takes one ([`KvCache::set_format`](super::KvCache::set_format)).

use super::{KvType, RowLayout};

/// The element types of a per-head cache's keys and values and the products attention over
/// them takes. The default is f32 rows and f32 products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheFormat {
    pub k: KvType,
    pub v: KvType,
    /// bf16 products over rows stored narrower than f32 (bf16 rows always take them; f32 rows
    /// never do).
    pub bf16_products: bool,
}

/// Why a cache cannot take a [`CacheFormat`]; each names what is unsupported.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CacheFormatError {
    #[error("the KV cache already holds {len} positions; its format cannot change")]
    InUse { len: usize },
    #[error(
        "a KV cache with an auxiliary row per position (latent attention's indexer keys) \
         stays f32"
    )]
    AuxRows,
    #[error(
        "KV cache type {ty} needs head widths that are multiples of {block} (this model's: \
         {width})"
    )]
    Width {
        ty: KvType,
        block: usize,
        width: usize,
    },
    #[error("{ty} keys cannot be laid out in tiles: their blocks run along the row")]
    Tiles { ty: KvType },
}

impl CacheFormat {
    /// Keys and values both `ty`, bf16 products not asked for (bf16 rows take them anyway).
    pub fn uniform(ty: KvType) -> CacheFormat {
        CacheFormat {
            k: ty,
            v: ty,
            bf16_products: false,
        }
    }

    /// Whether caches of heads `head_dim` wide can take this format with keys laid out as
    /// `key_layout`: each head's row must be whole blocks of its type (so whole-position rows
    /// are too), and only types stored value by value can be tiled.
    pub fn check(self, head_dim: usize, key_layout: RowLayout) -> Result<(), CacheFormatError> {
        for ty in [self.k, self.v] {
            if !ty.fits(head_dim) {
                return Err(CacheFormatError::Width {
                    ty,
                    block: ty.block(),
                    width: head_dim,
                });
            }
        }
        if key_layout == RowLayout::Tiles && !self.k.tileable() {
            return Err(CacheFormatError::Tiles { ty: self.k });
        }
        Ok(())
    }
}
