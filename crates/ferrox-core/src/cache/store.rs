//! Storage of a cache's key or value rows in the element type the user asked for: f32, or
//! llama.cpp's `--cache-type-k/-v` f16, bf16 and q8_0 (blocks of 32 with an f16 scale, the
//! layout of ggml's `block_q8_0`). Rows are encoded once when appended; attention reads them
//! through [`KvSlice`] and widens them to f32 tile by tile (or, bf16, multiplies them as
//! stored).
//!
//! f32, f16 and bf16 rows may also be kept in tiles ([`RowLayout::Tiles`]): each block of
//! [`TILE_ROWS`] consecutive rows stored column by column, so one column of a block is 16
//! consecutive values — the 16 keys' lanes the tiled attention kernel multiplies a query
//! element by, read without a transposition. A row's value `c` of row `r` then sits at
//! `(r / 16) * 16 * width + c * 16 + r % 16`; the last block is allocated whole (its unused
//! lanes hold zeros or rows cut off by a truncation, which attention masks). bf16 tiles keep
//! columns in pairs instead — `(r / 16) * 16 * width + (c / 2) * 32 + (r % 16) * 2 + c % 2` —
//! so 16 keys' values of columns `2i, 2i + 1` are the one vector `vdpbf16ps` multiplies a
//! query's pair by (its widths are even).

use crate::quant::act::quantize_row_q8_0;
use crate::quant::blocks::{f16_to_f32, BlockQ8_0};
use half::{bf16, f16};

/// Element type of cached keys or values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F32,
    F16,
    /// bfloat16: f32's range, 8 bits of mantissa (f16's memory).
    Bf16,
    Q8_0,
}

impl KvType {
    /// llama.cpp's names (`f32`, `f16`, `bf16`, `q8_0`).
    pub fn parse(name: &str) -> Option<KvType> {
        match name.to_ascii_lowercase().as_str() {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            "bf16" => Some(KvType::Bf16),
            "q8_0" => Some(KvType::Q8_0),
            _ => None,
        }
    }

    /// The type's id in ferrox's cache files (saved rows, prefix-cache and slot headers):
    /// fixed, since files outlive the build that wrote them.
    pub fn file_id(self) -> u8 {
        match self {
            KvType::F32 => 0,
            KvType::F16 => 1,
            KvType::Bf16 => 2,
            KvType::Q8_0 => 3,
        }
    }

    /// [`KvType::file_id`] read back; `None` for an id no type has.
    pub fn from_file_id(id: u8) -> Option<KvType> {
        [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0]
            .into_iter()
            .find(|t| t.file_id() == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Values per block a row of this type is made of (q8_0: 32; bf16: pairs, for its tiles).
    pub fn block(self) -> usize {
        match self {
            KvType::F32 | KvType::F16 => 1,
            KvType::Bf16 => 2,
            KvType::Q8_0 => 32,
        }
    }

    /// Whether rows of `width` values split into this type's blocks.
    pub fn fits(self, width: usize) -> bool {
        width.is_multiple_of(self.block())
    }

    /// Whether rows of this type can be kept in [`RowLayout::Tiles`]: q8_0's blocks run along
    /// the row, so its rows cannot be stored column by column.
    pub fn tileable(self) -> bool {
        match self {
            KvType::F32 | KvType::F16 | KvType::Bf16 => true,
            KvType::Q8_0 => false,
        }
    }

    /// Bytes one row of `width` values takes.
    pub fn row_bytes(self, width: usize) -> usize {
        match self {
            KvType::F32 => 4 * width,
            KvType::F16 | KvType::Bf16 => 2 * width,
            KvType::Q8_0 => width / 32 * std::mem::size_of::<BlockQ8_0>(),
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rows per tile of [`RowLayout::Tiles`] (the tiled attention kernel's 16 key lanes).
pub const TILE_ROWS: usize = 16;

/// How stored rows are laid out (see the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowLayout {
    /// Row after row.
    #[default]
    Rows,
    /// Blocks of [`TILE_ROWS`] rows, each stored column by column (bf16: by pairs of
    /// columns; not q8_0).
    Tiles,
}

/// Rows of one width in one element type and layout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowStore {
    pub(super) data: Data,
    pub(super) tiled: bool,
    /// Rows stored (the data of a tiled store is whole blocks, so it cannot tell).
    pub(super) rows: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Data {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Q8_0(Vec<BlockQ8_0>),
}

impl Default for RowStore {
    fn default() -> Self {
        RowStore::new(KvType::F32, RowLayout::Rows)
    }
}

/// Borrowed cached rows; offsets are in values (a q8_0 row of `w` values is `w / 32` blocks).
#[derive(Debug, Clone, Copy)]
pub enum KvSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
    Q8_0(&'a [BlockQ8_0]),
}

impl KvSlice<'_> {
    /// Values stored.
    pub fn len(&self) -> usize {
        match self {
            KvSlice::F32(s) => s.len(),
            KvSlice::F16(s) => s.len(),
            KvSlice::Bf16(s) => s.len(),
            KvSlice::Q8_0(s) => s.len() * 32,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values `at..at + out.len()` widened to f32 (q8_0: `at` and the length whole blocks).
    pub fn read(&self, at: usize, out: &mut [f32]) {
        let n = out.len();
        match self {
            KvSlice::F32(s) => out.copy_from_slice(&s[at..at + n]),
            KvSlice::F16(s) => {
                for (o, h) in out.iter_mut().zip(&s[at..at + n]) {
                    *o = h.to_f32();
                }
            }
            KvSlice::Bf16(s) => {
                for (o, h) in out.iter_mut().zip(&s[at..at + n]) {
                    *o = h.to_f32();
                }
            }
            KvSlice::Q8_0(s) => {
                let blocks = &s[at / 32..(at + n) / 32];
                for (o, b) in out.chunks_exact_mut(32).zip(blocks) {
                    let d = f16_to_f32(b.d);
                    for (o, &q) in o.iter_mut().zip(&b.qs) {
                        *o = d * q as f32;
                    }
                }
            }
        }
    }

    /// Values `col..col + out.len()` of row `row` of rows `width` wide laid out as `layout`,
    /// widened to f32 (q8_0 is never tiled).
    pub fn read_row(
        &self,
        layout: RowLayout,
        row: usize,
        width: usize,
        col: usize,
        out: &mut [f32],
    ) {
        if layout == RowLayout::Rows {
            return self.read(row * width + col, out);
        }
        let at = |c: usize| (row / TILE_ROWS * width + col + c) * TILE_ROWS + row % TILE_ROWS;
        match self {
            KvSlice::F32(s) => out.iter_mut().enumerate().for_each(|(c, o)| *o = s[at(c)]),
            KvSlice::F16(s) => out
                .iter_mut()
                .enumerate()
                .for_each(|(c, o)| *o = s[at(c)].to_f32()),
            KvSlice::Bf16(s) => {
                let base = row / TILE_ROWS * TILE_ROWS * width;
                out.iter_mut().enumerate().for_each(|(c, o)| {
                    *o = s[base + paired(col + c, row % TILE_ROWS)].to_f32();
                })
            }
            KvSlice::Q8_0(_) => unreachable!("q8_0 rows are never tiled"),
        }
    }
}

/// Offset of column `c`, lane `lane` within a bf16 tile (see the module header).
fn paired(c: usize, lane: usize) -> usize {
    c / 2 * 2 * TILE_ROWS + lane * 2 + c % 2
}

impl RowStore {
    /// An empty store; types that are not [`tileable`](KvType::tileable) stay
    /// [`RowLayout::Rows`].
    pub(crate) fn new(ty: KvType, layout: RowLayout) -> RowStore {
        let data = match ty {
            KvType::F32 => Data::F32(Vec::new()),
            KvType::F16 => Data::F16(Vec::new()),
            KvType::Bf16 => Data::Bf16(Vec::new()),
            KvType::Q8_0 => Data::Q8_0(Vec::new()),
        };
        let tiled = layout == RowLayout::Tiles && ty.tileable();
        RowStore {
            data,
            tiled,
            rows: 0,
        }
    }

    /// An empty store of the same type and layout.
    pub(crate) fn empty_like(&self) -> RowStore {
        RowStore::new(self.ty(), self.layout())
    }

    pub(crate) fn ty(&self) -> KvType {
        match self.data {
            Data::F32(_) => KvType::F32,
            Data::F16(_) => KvType::F16,
            Data::Bf16(_) => KvType::Bf16,
            Data::Q8_0(_) => KvType::Q8_0,
        }
    }

    pub(crate) fn layout(&self) -> RowLayout {
        if self.tiled {
            RowLayout::Tiles
        } else {
            RowLayout::Rows
        }
    }

    pub(crate) fn view(&self) -> KvSlice<'_> {
        match &self.data {
            Data::F32(v) => KvSlice::F32(v),
            Data::F16(v) => KvSlice::F16(v),
            Data::Bf16(v) => KvSlice::Bf16(v),
            Data::Q8_0(v) => KvSlice::Q8_0(v),
        }
    }

    /// The f32 rows, row after row (empty for another type or layout).
    pub(crate) fn f32s(&self) -> &[f32] {
        match &self.data {
            Data::F32(v) if !self.tiled => v,
            _ => &[],
        }
    }

    /// Storage units per row of `width` values.
    fn units(&self, width: usize) -> usize {
        match self.data {
            Data::Q8_0(_) => width / 32,
            _ => width,
        }
    }

    /// Storage units `rows` rows take (whole blocks when tiled).
    pub(super) fn units_for(&self, rows: usize, width: usize) -> usize {
        let rows = if self.tiled {
            rows.div_ceil(TILE_ROWS) * TILE_ROWS
        } else {
            rows
        };
        rows * self.units(width)
    }

    /// Row `r` widened to f32 (`out` is one row).
    pub(crate) fn read_row(&self, r: usize, out: &mut [f32]) {
        self.view().read_row(self.layout(), r, out.len(), 0, out);
    }

    pub(crate) fn push_row(&mut self, row: &[f32]) {
        let (w, r) = (row.len(), self.rows);
        if self.tiled {
            let base = r / TILE_ROWS * TILE_ROWS * w;
            let lane = r % TILE_ROWS;
            // A new block starts zeroed; its later lanes fill as rows arrive.
            let whole = base + TILE_ROWS * w;
            match &mut self.data {
                Data::F32(v) => {
                    v.resize(whole, 0.0);
                    for (c, &x) in row.iter().enumerate() {
                        v[base + c * TILE_ROWS + lane] = x;
                    }
                }
                Data::F16(v) => {
                    v.resize(whole, f16::ZERO);
                    for (c, &x) in row.iter().enumerate() {
                        v[base + c * TILE_ROWS + lane] = f16::from_f32(x);
                    }
                }
                Data::Bf16(v) => {
                    v.resize(whole, bf16::ZERO);
                    for (c, &x) in row.iter().enumerate() {
                        v[base + paired(c, lane)] = bf16::from_f32(x);
                    }
                }
                Data::Q8_0(_) => unreachable!("q8_0 rows are never tiled"),
            }
        } else {
            match &mut self.data {
                Data::F32(v) => v.extend_from_slice(row),
                Data::F16(v) => v.extend(row.iter().map(|&x| f16::from_f32(x))),
                Data::Bf16(v) => v.extend(row.iter().map(|&x| bf16::from_f32(x))),
                Data::Q8_0(v) => {
                    let at = v.len();
                    v.resize(at + w / 32, BlockQ8_0::default());
                    quantize_row_q8_0(row, &mut v[at..]);
                }
            }
        }
        self.rows += 1;
    }

    /// Room for `rows` more rows of `width`.
    pub(crate) fn reserve_exact(&mut self, rows: usize, width: usize) {
        let n = self.units_for(self.rows + rows, width) - self.stored_units();
        match &mut self.data {
            Data::F32(v) => v.reserve_exact(n),
            Data::F16(v) => v.reserve_exact(n),
            Data::Bf16(v) => v.reserve_exact(n),
            Data::Q8_0(v) => v.reserve_exact(n),
        }
    }

    pub(super) fn stored_units(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::Bf16(v) => v.len(),
            Data::Q8_0(v) => v.len(),
        }
    }

    fn capacity(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.capacity(),
            Data::F16(v) => v.capacity(),
            Data::Bf16(v) => v.capacity(),
            Data::Q8_0(v) => v.capacity(),
        }
    }

    /// Whether pushing the next row of `width` would reallocate.
    pub(crate) fn full(&self, width: usize) -> bool {
        self.units_for(self.rows + 1, width) > self.capacity()
    }

    pub(crate) fn truncate_rows(&mut self, rows: usize, width: usize) {
        if rows >= self.rows {
            return;
        }
        let n = self.units_for(rows, width);
        match &mut self.data {
            Data::F32(v) => v.truncate(n),
            Data::F16(v) => v.truncate(n),
            Data::Bf16(v) => v.truncate(n),
            Data::Q8_0(v) => v.truncate(n),
        }
        self.rows = rows;
    }

    /// Drops the first `rows` rows.
    pub(crate) fn drain_rows(&mut self, rows: usize, width: usize) {
        let rows = rows.min(self.rows);
        if self.tiled && !rows.is_multiple_of(TILE_ROWS) {
            // Rows move to other lanes: rebuild from the rows kept.
            *self = self.copy_rows(rows, self.rows, width);
            return;
        }
        let n = rows * self.units(width);
        match &mut self.data {
            Data::F32(v) => drop(v.drain(..n)),
            Data::F16(v) => drop(v.drain(..n)),
            Data::Bf16(v) => drop(v.drain(..n)),
            Data::Q8_0(v) => drop(v.drain(..n)),
        }
        self.rows -= rows;
    }

    /// A copy of rows `from..to` in the same type and layout.
    pub(crate) fn copy_rows(&self, from: usize, to: usize, width: usize) -> RowStore {
        if self.tiled && !from.is_multiple_of(TILE_ROWS) {
            let mut out = self.empty_like();
            let mut row = vec![0f32; width];
            for r in from..to {
                self.read_row(r, &mut row);
                out.push_row(&row);
            }
            return out;
        }
        // Rows layout, or whole blocks from `from` on (the last one possibly partial).
        let (a, b) = (from * self.units(width), self.units_for(to, width));
        let data = match &self.data {
            Data::F32(v) => Data::F32(v[a..b].to_vec()),
            Data::F16(v) => Data::F16(v[a..b].to_vec()),
            Data::Bf16(v) => Data::Bf16(v[a..b].to_vec()),
            Data::Q8_0(v) => Data::Q8_0(v[a..b].to_vec()),
        };
        RowStore {
            data,
            tiled: self.tiled,
            rows: to - from,
        }
    }

    /// Appends `other`'s rows (any layout); false when the element types differ.
    pub(crate) fn extend(&mut self, other: &RowStore, width: usize) -> bool {
        if self.ty() != other.ty() {
            return false;
        }
        let raw = self.tiled == other.tiled && (!self.tiled || self.rows.is_multiple_of(TILE_ROWS));
        if !raw {
            let mut row = vec![0f32; width];
            for r in 0..other.rows {
                other.read_row(r, &mut row);
                self.push_row(&row);
            }
            return true;
        }
        match (&mut self.data, &other.data) {
            (Data::F32(v), Data::F32(o)) => v.extend_from_slice(o),
            (Data::F16(v), Data::F16(o)) => v.extend_from_slice(o),
            (Data::Bf16(v), Data::Bf16(o)) => v.extend_from_slice(o),
            (Data::Q8_0(v), Data::Q8_0(o)) => v.extend_from_slice(o),
            _ => return false,
        }
        self.rows += other.rows;
        true
    }

    /// Exchanges rows `a` and `b` (of `width` values) as stored, bit for bit.
    pub(crate) fn swap_rows(&mut self, a: usize, b: usize, width: usize) {
        assert!(
            a < self.rows && b < self.rows,
            "swap_rows: row past the store"
        );
        if a == b {
            return;
        }
        let (tiled, units) = (self.tiled, self.units(width));
        let bf = matches!(self.data, Data::Bf16(_));
        // Storage index of unit `c` of row `r`: contiguous rows, or a lane of a tile.
        let at = |r: usize, c: usize| match tiled {
            false => r * units + c,
            true if bf => r / TILE_ROWS * TILE_ROWS * width + paired(c, r % TILE_ROWS),
            true => r / TILE_ROWS * TILE_ROWS * width + c * TILE_ROWS + r % TILE_ROWS,
        };
        fn swap_units<T>(
            v: &mut [T],
            units: usize,
            at: impl Fn(usize, usize) -> usize,
            a: usize,
            b: usize,
        ) {
            for c in 0..units {
                v.swap(at(a, c), at(b, c));
            }
        }
        match &mut self.data {
            Data::F32(v) => swap_units(v, units, at, a, b),
            Data::F16(v) => swap_units(v, units, at, a, b),
            Data::Bf16(v) => swap_units(v, units, at, a, b),
            Data::Q8_0(v) => swap_units(v, units, at, a, b),
        }
    }

    /// Memory the stored rows take.
    pub(crate) fn bytes(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.len() * 4,
            Data::F16(v) => v.len() * 2,
            Data::Bf16(v) => v.len() * 2,
            Data::Q8_0(v) => v.len() * std::mem::size_of::<BlockQ8_0>(),
        }
    }
}
