//! Storage of a cache's key or value rows in the element type the user asked for: f32, or
//! llama.cpp's `--cache-type-k/-v` f16 and q8_0 (blocks of 32 with an f16 scale, the layout of
//! ggml's `block_q8_0`). Rows are encoded once when appended; attention reads them through
//! [`KvSlice`] and widens them to f32 tile by tile.

use crate::quant::act::quantize_row_q8_0;
use crate::quant::blocks::{f16_to_f32, BlockQ8_0};
use half::f16;

/// Element type of cached keys or values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F32,
    F16,
    Q8_0,
}

impl KvType {
    /// llama.cpp's names (`f32`, `f16`, `q8_0`).
    pub fn parse(name: &str) -> Option<KvType> {
        match name.to_ascii_lowercase().as_str() {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            "q8_0" => Some(KvType::Q8_0),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Whether rows of `width` values split into this type's blocks.
    pub fn fits(self, width: usize) -> bool {
        self != KvType::Q8_0 || width.is_multiple_of(32)
    }

    /// Bytes one row of `width` values takes.
    pub fn row_bytes(self, width: usize) -> usize {
        match self {
            KvType::F32 => 4 * width,
            KvType::F16 => 2 * width,
            KvType::Q8_0 => width / 32 * std::mem::size_of::<BlockQ8_0>(),
        }
    }
}

/// Rows of one width in one element type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RowStore {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q8_0(Vec<BlockQ8_0>),
}

impl Default for RowStore {
    fn default() -> Self {
        RowStore::F32(Vec::new())
    }
}

/// Borrowed cached rows; offsets are in values (a q8_0 row of `w` values is `w / 32` blocks).
#[derive(Debug, Clone, Copy)]
pub enum KvSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Q8_0(&'a [BlockQ8_0]),
}

impl KvSlice<'_> {
    /// Values stored.
    pub fn len(&self) -> usize {
        match self {
            KvSlice::F32(s) => s.len(),
            KvSlice::F16(s) => s.len(),
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
}

impl RowStore {
    pub(crate) fn new(ty: KvType) -> RowStore {
        match ty {
            KvType::F32 => RowStore::F32(Vec::new()),
            KvType::F16 => RowStore::F16(Vec::new()),
            KvType::Q8_0 => RowStore::Q8_0(Vec::new()),
        }
    }

    pub(crate) fn ty(&self) -> KvType {
        match self {
            RowStore::F32(_) => KvType::F32,
            RowStore::F16(_) => KvType::F16,
            RowStore::Q8_0(_) => KvType::Q8_0,
        }
    }

    pub(crate) fn view(&self) -> KvSlice<'_> {
        match self {
            RowStore::F32(v) => KvSlice::F32(v),
            RowStore::F16(v) => KvSlice::F16(v),
            RowStore::Q8_0(v) => KvSlice::Q8_0(v),
        }
    }

    /// The f32 rows (empty for another type).
    pub(crate) fn f32s(&self) -> &[f32] {
        match self {
            RowStore::F32(v) => v,
            _ => &[],
        }
    }

    /// Storage units per row of `width` values.
    fn units(&self, width: usize) -> usize {
        match self {
            RowStore::Q8_0(_) => width / 32,
            _ => width,
        }
    }

    pub(crate) fn push_row(&mut self, row: &[f32]) {
        match self {
            RowStore::F32(v) => v.extend_from_slice(row),
            RowStore::F16(v) => v.extend(row.iter().map(|&x| f16::from_f32(x))),
            RowStore::Q8_0(v) => {
                let at = v.len();
                v.resize(at + row.len() / 32, BlockQ8_0::default());
                quantize_row_q8_0(row, &mut v[at..]);
            }
        }
    }

    /// Room for `rows` more rows of `width`.
    pub(crate) fn reserve_exact(&mut self, rows: usize, width: usize) {
        let n = rows * self.units(width);
        match self {
            RowStore::F32(v) => v.reserve_exact(n),
            RowStore::F16(v) => v.reserve_exact(n),
            RowStore::Q8_0(v) => v.reserve_exact(n),
        }
    }

    /// Whether the next push would reallocate.
    pub(crate) fn full(&self) -> bool {
        match self {
            RowStore::F32(v) => v.len() == v.capacity(),
            RowStore::F16(v) => v.len() == v.capacity(),
            RowStore::Q8_0(v) => v.len() == v.capacity(),
        }
    }

    pub(crate) fn truncate_rows(&mut self, rows: usize, width: usize) {
        let n = rows * self.units(width);
        match self {
            RowStore::F32(v) => v.truncate(n),
            RowStore::F16(v) => v.truncate(n),
            RowStore::Q8_0(v) => v.truncate(n),
        }
    }

    pub(crate) fn drain_rows(&mut self, rows: usize, width: usize) {
        let n = rows * self.units(width);
        match self {
            RowStore::F32(v) => drop(v.drain(..n)),
            RowStore::F16(v) => drop(v.drain(..n)),
            RowStore::Q8_0(v) => drop(v.drain(..n)),
        }
    }

    /// A copy of rows `from..to`.
    pub(crate) fn copy_rows(&self, from: usize, to: usize, width: usize) -> RowStore {
        let (a, b) = (from * self.units(width), to * self.units(width));
        match self {
            RowStore::F32(v) => RowStore::F32(v[a..b].to_vec()),
            RowStore::F16(v) => RowStore::F16(v[a..b].to_vec()),
            RowStore::Q8_0(v) => RowStore::Q8_0(v[a..b].to_vec()),
        }
    }

    /// Appends `other`'s rows; false when the types differ.
    pub(crate) fn extend(&mut self, other: &RowStore) -> bool {
        match (self, other) {
            (RowStore::F32(v), RowStore::F32(o)) => v.extend_from_slice(o),
            (RowStore::F16(v), RowStore::F16(o)) => v.extend_from_slice(o),
            (RowStore::Q8_0(v), RowStore::Q8_0(o)) => v.extend_from_slice(o),
            _ => return false,
        }
        true
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            RowStore::F32(v) => v.len() * 4,
            RowStore::F16(v) => v.len() * 2,
            RowStore::Q8_0(v) => v.len() * std::mem::size_of::<BlockQ8_0>(),
        }
    }
}
