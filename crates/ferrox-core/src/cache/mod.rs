//! Per-layer, per-sequence rows of attention state. Keys and values are stored position-major:
//! `[pos][kv_head][head_dim]`, so appending a token is one contiguous write and `truncate` is
//! O(1) (speculative rejection relies on that). Per-head attention layers keep f32/f16 keys in
//! tiles of 16 positions instead (`RowLayout::Tiles`, see `store.rs`): still position-major
//! by tile, appends and cuts still O(1), and the attention kernel reads 16 keys' values of one
//! column as a vector without transposing. The cache knows shapes, not model families:
//! what a layer keeps per position (per-head keys and values, one compressed row and no values,
//! an extra row beside them) is the layer's choice, set while the cache is empty.
//!
//! A recurrent layer (a state-space or linear-attention layer) also keeps a fixed-size state
//! that summarises every position before it and cannot be cut back by position. The cache
//! holds two such blobs with the position each is valid at — the state after the stored rows
//! and a checkpoint from the start of the last forward — and `truncate` only forgets a blob
//! that lies past the cut. Rebuilding the state at an earlier position (from the checkpoint, or
//! from zero, by replaying the stored rows) is the layer's business: the cache knows sizes.
//!
//! A *bounded* cache (`set_bounded`, the engine's slots) lets such a layer forget the rows it
//! can no longer need (`forget_before`): positions before the last forward's start are then
//! only restorable as a cut to 0 (`restorable`), and the rows stay a window instead of growing
//! with the context. Unbounded caches (the default) keep every row: any cut stays exact.

mod format;
mod rows_io;
mod store;

pub use format::{CacheFormat, CacheFormatError};
pub use rows_io::RowsDecodeError;
use store::RowStore;
pub use store::{KvSlice, KvType, RowLayout, TILE_ROWS};

#[derive(Debug, Clone)]
pub struct KvCache {
    n_kv_heads: usize,
    head_dim: usize,
    /// Width of one position's value row; equals `n_kv_heads * head_dim` unless reshaped (a
    /// layer may keep a single key row and no values).
    v_width: usize,
    len: usize,
    /// Position of the first stored row (earlier rows were forgotten); 0 unless bounded.
    first: usize,
    /// Cuts to positions in `1..floor` cannot be restored.
    floor: usize,
    bounded: bool,
    keys: RowStore,
    values: RowStore,
    /// Optional extra row per position kept in step with keys/values.
    aux_width: usize,
    aux: Vec<f32>,
    /// Recurrent state after `state_at` positions (`None`: not valid at any position).
    state: Vec<f32>,
    state_at: Option<usize>,
    /// A second state blob, valid after `checkpoint_at` positions.
    checkpoint: Vec<f32>,
    checkpoint_at: Option<usize>,
    /// Attention over this cache takes bf16 products when its rows are stored narrower than
    /// f32 (`Scoring::bf16`): the format's knob, as asked.
    bf16_products: bool,
}

/// The parts of a [`KvCache`] a recurrent layer works on at once: its stored rows (read) and
/// its two state blobs with the positions they are valid at (read and written).
pub struct RecurrentParts<'a> {
    /// Stored rows `[len - first][k_width]`, position `first` first.
    pub keys: &'a [f32],
    /// `[len - first][v_width]`.
    pub values: &'a [f32],
    pub first: usize,
    pub state: &'a mut Vec<f32>,
    pub state_at: &'a mut Option<usize>,
    pub checkpoint: &'a mut Vec<f32>,
    pub checkpoint_at: &'a mut Option<usize>,
}

impl RecurrentParts<'_> {
    /// Position of the first row in `keys` / `values`.
    pub fn first_row(&self) -> usize {
        self.first
    }

    /// Exchanges the state and the checkpoint (blobs and positions): O(1), no copy.
    pub fn swap(&mut self) {
        std::mem::swap(self.state, self.checkpoint);
        std::mem::swap(self.state_at, self.checkpoint_at);
    }
}

/// A copy of some consecutive positions of a [`KvCache`] with the shape they were stored in
/// (the engine's prefix cache keeps finished requests' positions this way).
#[derive(Debug, Clone, PartialEq)]
pub struct CacheRows {
    shape: (usize, usize, usize, usize),
    len: usize,
    keys: RowStore,
    values: RowStore,
    aux: Vec<f32>,
}

impl CacheRows {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory the rows take.
    pub fn bytes(&self) -> usize {
        self.keys.bytes() + self.values.bytes() + self.aux.len() * std::mem::size_of::<f32>()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("KV cache holds {len} positions of shape {have:?}; cannot reshape to {want:?}")]
pub struct CacheShapeError {
    pub len: usize,
    pub have: (usize, usize, usize),
    pub want: (usize, usize, usize),
}

impl KvCache {
    /// An empty per-head cache: `n_kv_heads` heads of `head_dim` keys and values, f32 rows.
    pub fn new(n_kv_heads: usize, head_dim: usize) -> Self {
        KvCache::shaped(n_kv_heads, head_dim, n_kv_heads * head_dim, 0)
    }

    /// An empty cache of f32 rows of another shape: keys of `n_kv_heads * head_dim`, values of
    /// `v_width` and an auxiliary row of `aux_width` per position (see
    /// [`ensure_shape`](Self::ensure_shape) and [`ensure_aux_width`](Self::ensure_aux_width)).
    pub fn shaped(n_kv_heads: usize, head_dim: usize, v_width: usize, aux_width: usize) -> Self {
        KvCache {
            n_kv_heads,
            head_dim,
            v_width,
            len: 0,
            first: 0,
            floor: 0,
            bounded: false,
            keys: RowStore::default(),
            values: RowStore::default(),
            aux_width,
            aux: Vec::new(),
            state: Vec::new(),
            state_at: None,
            checkpoint: Vec::new(),
            checkpoint_at: None,
            bf16_products: false,
        }
    }

    /// Position of the first stored row (0 unless a bounded recurrent layer forgot rows).
    pub fn first_row(&self) -> usize {
        self.first
    }

    /// Positions stored.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Width of one position's key row.
    pub fn k_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub fn v_width(&self) -> usize {
        self.v_width
    }

    /// Drops every position at or after `len` (no-op when already shorter). Keeps capacity.
    /// A recurrent state or checkpoint valid past `len` is forgotten (its memory kept). A cut
    /// that is not [`restorable`](Self::restorable) empties the cache.
    pub fn truncate(&mut self, len: usize) {
        let len = if self.restorable(len) { len } else { 0 };
        if len < self.len {
            self.len = len;
            let rows = len.saturating_sub(self.first);
            self.keys.truncate_rows(rows, self.k_width());
            self.values.truncate_rows(rows, self.v_width);
            self.aux.truncate(rows * self.aux_width);
            if len == 0 {
                (self.first, self.floor) = (0, 0);
            }
        }
        for at in [&mut self.state_at, &mut self.checkpoint_at] {
            if at.is_some_and(|p| p > len) {
                *at = None;
            }
        }
    }

    /// Whether the cache can be cut back to `len` positions: always, unless a bounded
    /// recurrent layer forgot the rows a replay to `len` would need (then only 0 is).
    pub fn restorable(&self, len: usize) -> bool {
        len == 0 || len >= self.floor
    }

    /// Lets a recurrent layer forget rows (see [`forget_before`](Self::forget_before)).
    pub fn set_bounded(&mut self, bounded: bool) {
        self.bounded = bounded;
    }

    pub fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// On a bounded cache: positions before `from` need no longer be restorable, so the rows
    /// before `from - keep` are dropped (`keep`: rows a replay from `from` still reads, such as
    /// a convolution window). No-op on an unbounded cache.
    pub fn forget_before(&mut self, from: usize, keep: usize) {
        if !self.bounded || from <= self.floor || from > self.len {
            return;
        }
        self.floor = from;
        let drop = from.saturating_sub(keep).saturating_sub(self.first);
        if drop > 0 {
            self.keys.drain_rows(drop, self.k_width());
            self.values.drain_rows(drop, self.v_width);
            self.aux.drain(..drop * self.aux_width);
            self.first += drop;
        }
    }

    /// Position the recurrent state is valid at, if any.
    pub fn state_at(&self) -> Option<usize> {
        self.state_at
    }

    /// Position the recurrent checkpoint is valid at, if any.
    pub fn checkpoint_at(&self) -> Option<usize> {
        self.checkpoint_at
    }

    /// The rows and both state blobs, each blob `width` values (resized, and then valid
    /// nowhere, when it had another size).
    pub fn recurrent(&mut self, width: usize) -> RecurrentParts<'_> {
        for (blob, at) in [
            (&mut self.state, &mut self.state_at),
            (&mut self.checkpoint, &mut self.checkpoint_at),
        ] {
            if blob.len() != width {
                blob.clear();
                blob.resize(width, 0.0);
                *at = None;
            }
        }
        RecurrentParts {
            keys: self.keys.f32s(),
            values: self.values.f32s(),
            first: self.first,
            state: &mut self.state,
            state_at: &mut self.state_at,
            checkpoint: &mut self.checkpoint,
            checkpoint_at: &mut self.checkpoint_at,
        }
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Whether positions can be copied out and back in as rows: every row is stored and no
    /// recurrent state summarises them (such a state is not a function of single rows).
    pub fn rows_portable(&self) -> bool {
        self.first == 0 && self.state_at.is_none() && self.checkpoint_at.is_none()
    }

    /// A copy of positions `from..to` (`None` unless [`rows_portable`](Self::rows_portable)
    /// and `to <= len`).
    pub fn copy_rows(&self, from: usize, to: usize) -> Option<CacheRows> {
        if !self.rows_portable() || from > to || to > self.len {
            return None;
        }
        let (kw, vw, aw) = (self.k_width(), self.v_width, self.aux_width);
        Some(CacheRows {
            shape: (self.n_kv_heads, self.head_dim, vw, aw),
            len: to - from,
            keys: self.keys.copy_rows(from, to, kw),
            values: self.values.copy_rows(from, to, vw),
            aux: self.aux[from * aw..to * aw].to_vec(),
        })
    }

    /// Appends copied rows as the next positions; an empty cache takes their shape. False
    /// (nothing appended) when the shapes differ or the cache keeps a recurrent state.
    pub fn append_rows(&mut self, rows: &CacheRows) -> bool {
        let (heads, dim, vw, aw) = rows.shape;
        if self.len == 0 {
            (self.n_kv_heads, self.head_dim, self.v_width, self.aux_width) = (heads, dim, vw, aw);
            self.keys = rows.keys.empty_like();
            self.values = rows.values.empty_like();
            self.aux.clear();
        }
        if !self.rows_portable()
            || (self.n_kv_heads, self.head_dim, self.v_width, self.aux_width) != rows.shape
        {
            return false;
        }
        if self.keys.ty() != rows.keys.ty() || self.values.ty() != rows.values.ty() {
            return false;
        }
        self.keys
            .extend(&rows.keys, self.n_kv_heads * self.head_dim);
        self.values.extend(&rows.values, vw);
        self.aux.extend_from_slice(&rows.aux);
        self.len += rows.len;
        true
    }

    /// Exchanges the stored rows of positions `a` and `b` (keys, values and auxiliary rows),
    /// bit for bit: a draft tree's branch is put where its positions belong, for attention
    /// over one branch and to keep the accepted one. Panics on a position not stored or a
    /// cache whose recurrent state summarises its rows (callers check
    /// [`rows_portable`](Self::rows_portable)).
    pub fn swap_positions(&mut self, a: usize, b: usize) {
        assert!(
            self.rows_portable(),
            "swap_positions: rows are not portable"
        );
        assert!(
            a < self.len && b < self.len,
            "swap_positions: position past the cache"
        );
        if a == b {
            return;
        }
        self.keys.swap_rows(a, b, self.k_width());
        self.values.swap_rows(a, b, self.v_width);
        let w = self.aux_width;
        for c in 0..w {
            self.aux.swap(a * w + c, b * w + c);
        }
    }

    /// Reserves room for `n` positions in total.
    pub fn reserve(&mut self, n: usize) {
        let extra = n.saturating_sub(self.len - self.first);
        self.keys.reserve_exact(extra, self.k_width());
        self.values.reserve_exact(extra, self.v_width);
    }

    /// The geometry the model needs takes precedence over the declared one while the cache is
    /// empty: a cache built as `KvCache::new(n_kv_heads, head_dim)` from a config whose
    /// attention keeps something else takes that shape on first use.
    pub fn ensure_shape(
        &mut self,
        n_kv_heads: usize,
        head_dim: usize,
        v_width: usize,
    ) -> Result<(), CacheShapeError> {
        let want = (n_kv_heads, head_dim, v_width);
        let have = (self.n_kv_heads, self.head_dim, self.v_width);
        if have == want {
            return Ok(());
        }
        if self.len != 0 {
            return Err(CacheShapeError {
                len: self.len,
                have,
                want,
            });
        }
        self.n_kv_heads = n_kv_heads;
        self.head_dim = head_dim;
        self.v_width = v_width;
        self.keys = self.keys.empty_like();
        self.values = self.values.empty_like();
        Ok(())
    }

    /// Width of the auxiliary row stored per position (0: none).
    pub fn aux_width(&self) -> usize {
        self.aux_width
    }

    /// Gives every position an auxiliary row of `width` values, kept consistent by `truncate`.
    /// Like `ensure_shape`, only an empty cache may change it.
    pub fn ensure_aux_width(&mut self, width: usize) -> Result<(), CacheShapeError> {
        if self.aux_width == width {
            return Ok(());
        }
        if self.len != 0 {
            let have = (self.n_kv_heads, self.head_dim, self.v_width);
            return Err(CacheShapeError {
                len: self.len,
                have,
                want: have,
            });
        }
        self.aux_width = width;
        self.aux.clear();
        Ok(())
    }

    /// Appends one position with its auxiliary row (`aux_width()` values).
    pub fn append_with_aux(&mut self, k: &[f32], v: &[f32], aux: &[f32]) {
        assert_eq!(aux.len(), self.aux_width, "KvCache::append: aux width");
        self.aux.extend_from_slice(aux);
        self.push(k, v);
    }

    /// All auxiliary rows, `[len][aux_width]`.
    pub fn aux(&self) -> &[f32] {
        &self.aux
    }

    /// Appends one position: `k` is `k_width()` values, `v` is `v_width()`.
    pub fn append(&mut self, k: &[f32], v: &[f32]) {
        assert_eq!(self.aux_width, 0, "KvCache::append: cache needs aux rows");
        self.push(k, v);
    }

    fn push(&mut self, k: &[f32], v: &[f32]) {
        assert_eq!(k.len(), self.k_width(), "KvCache::append: key width");
        assert_eq!(v.len(), self.v_width, "KvCache::append: value width");
        let aux_full = self.aux.len() + self.aux_width > self.aux.capacity();
        if self.keys.full(self.k_width()) || self.values.full(self.v_width) || aux_full {
            // Grow by an eighth (at least 256 positions) rather than double: the cache is
            // most of a long session's memory, and doubling leaves up to half of it unused.
            // Either store may fill first (tiled keys take whole tiles; copied-in rows leave
            // capacities apart), and a push into a full Vec would double it.
            let more = (self.len / 8).max(256);
            self.keys.reserve_exact(more, self.k_width());
            self.values.reserve_exact(more, self.v_width);
            self.aux.reserve_exact(more * self.aux_width);
        }
        self.keys.push_row(k);
        self.values.push_row(v);
        self.len += 1;
    }

    /// All stored keys, `[len - first_row][k_width]` (every position unless a bounded
    /// recurrent layer forgot some). Empty unless the keys are stored as f32 rows (the default;
    /// see [`set_format`](Self::set_format)).
    pub fn keys(&self) -> &[f32] {
        self.keys.f32s()
    }

    /// All stored values, `[len - first_row][v_width]` (f32 storage only, as `keys`).
    pub fn values(&self) -> &[f32] {
        self.values.f32s()
    }

    /// The stored keys in their element type.
    pub fn keys_view(&self) -> KvSlice<'_> {
        self.keys.view()
    }

    /// The stored values in their element type.
    pub fn values_view(&self) -> KvSlice<'_> {
        self.values.view()
    }

    /// Element types of the stored keys and values.
    pub fn types(&self) -> (KvType, KvType) {
        (self.keys.ty(), self.values.ty())
    }

    /// How the keys and values are stored and multiplied: the last format set (f32 rows and
    /// products by default, or the types rows copied into the empty cache came in).
    pub fn format(&self) -> CacheFormat {
        CacheFormat {
            k: self.keys.ty(),
            v: self.values.ty(),
            bf16_products: self.bf16_products,
        }
    }

    /// Stores keys and values as `format` says from now on, keys laid out as `key_layout`:
    /// the one way a cache's format changes. A no-op when it already is; otherwise only an
    /// empty per-head cache (no auxiliary rows) may change — a sequence's rows all see the
    /// same arithmetic — and only to a format its head width takes ([`CacheFormat::check`]).
    pub fn set_format(
        &mut self,
        format: CacheFormat,
        key_layout: RowLayout,
    ) -> Result<(), CacheFormatError> {
        if self.format() == format && self.key_layout() == key_layout {
            return Ok(());
        }
        if self.len != 0 {
            return Err(CacheFormatError::InUse { len: self.len });
        }
        if self.aux_width != 0 {
            return Err(CacheFormatError::AuxRows);
        }
        format.check(self.head_dim, key_layout)?;
        self.keys = RowStore::new(format.k, key_layout);
        self.values = RowStore::new(format.v, RowLayout::Rows);
        self.bf16_products = format.bf16_products;
        Ok(())
    }

    /// Whether attention over this cache takes bf16 products: neither keys nor values are
    /// stored as f32, and either is stored as bf16 (as ggml, whose attention multiplies a bf16
    /// cache in bf16) or the format asks for them.
    pub fn bf16_products(&self) -> bool {
        let (k, v) = self.types();
        let bf16_rows = k == KvType::Bf16 || v == KvType::Bf16;
        (self.bf16_products || bf16_rows) && k != KvType::F32 && v != KvType::F32
    }

    /// How the keys are laid out (`Tiles` only for [`tileable`](KvType::tileable) types):
    /// tiles of 16 positions stored column by column are what the AVX-512 attention kernel
    /// reads without transposing (see [`kernels::key_layout`](crate::kernels::key_layout)).
    pub fn key_layout(&self) -> RowLayout {
        self.keys.layout()
    }

    /// Key row of position `pos` widened to f32, whatever the type and layout.
    pub fn read_key(&self, pos: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.k_width(), "KvCache::read_key: key width");
        self.keys.read_row(pos - self.first, out);
    }

    /// Memory the stored rows take.
    pub fn stored_bytes(&self) -> usize {
        self.keys.bytes() + self.values.bytes() + self.aux.len() * std::mem::size_of::<f32>()
    }

    /// Key row of position `pos` (f32 storage).
    pub fn key(&self, pos: usize) -> &[f32] {
        let (w, r) = (self.k_width(), pos - self.first);
        &self.keys()[r * w..(r + 1) * w]
    }

    /// Value row of position `pos` (f32 storage).
    pub fn value(&self, pos: usize) -> &[f32] {
        let r = pos - self.first;
        &self.values()[r * self.v_width..(r + 1) * self.v_width]
    }
}

#[cfg(test)]
mod tests;
