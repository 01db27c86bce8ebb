//! Bytes of a [`CacheRows`] for a file (the engine's prefix cache on disk): its shape, then
//! each row store as element type, layout, row count and little-endian elements (q8_0 blocks
//! as ggml's 34-byte `block_q8_0`). Decoding checks every length against the bytes left
//! before allocating, so a hostile file costs at most its own size.

use half::{bf16, f16};

use super::store::{Data, RowStore};
use super::{CacheRows, KvType};
use crate::quant::blocks::{as_blocks, blocks_as_bytes, BlockQ8_0};

/// Why bytes are not a [`CacheRows`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RowsDecodeError {
    #[error("cache rows end early")]
    Truncated,
    #[error("cache rows: {0}")]
    Invalid(&'static str),
}

/// Widths past this are no model's (and keep `rows * width` far from overflow).
const MAX_WIDTH: usize = 1 << 24;

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], RowsDecodeError> {
    if b.len() < n {
        return Err(RowsDecodeError::Truncated);
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn u32_of(b: &mut &[u8]) -> Result<usize, RowsDecodeError> {
    let s = take(b, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

fn put_u32(out: &mut Vec<u8>, x: usize) {
    out.extend_from_slice(&(x as u32).to_le_bytes());
}

impl RowStore {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.ty().file_id());
        out.push(u8::from(self.tiled));
        put_u32(out, self.rows);
        put_u32(out, self.stored_units());
        match &self.data {
            Data::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Data::F16(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Data::Bf16(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Data::Q8_0(v) => out.extend_from_slice(blocks_as_bytes(v)),
        }
    }

    fn decode(b: &mut &[u8], rows: usize, width: usize) -> Result<RowStore, RowsDecodeError> {
        let head = take(b, 10)?;
        let ty = KvType::from_file_id(head[0])
            .ok_or(RowsDecodeError::Invalid("unknown element type"))?;
        let tiled = match head[1] {
            0 => false,
            1 if ty.tileable() => true,
            _ => return Err(RowsDecodeError::Invalid("bad layout")),
        };
        let stored = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
        let units = u32::from_le_bytes([head[6], head[7], head[8], head[9]]) as usize;
        if stored != rows || !ty.fits(width) {
            return Err(RowsDecodeError::Invalid("row count or width"));
        }
        let layout = if tiled {
            super::RowLayout::Tiles
        } else {
            super::RowLayout::Rows
        };
        let mut store = RowStore::new(ty, layout);
        if units != store.units_for(rows, width) {
            return Err(RowsDecodeError::Invalid("stored size"));
        }
        let unit_bytes = match ty {
            KvType::F32 => 4,
            KvType::F16 | KvType::Bf16 => 2,
            KvType::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
        };
        // Checked against the bytes left before anything is allocated.
        let raw = take(b, units * unit_bytes)?;
        store.data = match ty {
            KvType::F32 => Data::F32(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            KvType::F16 => Data::F16(
                raw.chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            KvType::Bf16 => Data::Bf16(
                raw.chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            KvType::Q8_0 => Data::Q8_0(
                as_blocks::<BlockQ8_0>(raw)
                    .ok_or(RowsDecodeError::Truncated)?
                    .to_vec(),
            ),
        };
        store.rows = rows;
        Ok(store)
    }
}

impl CacheRows {
    /// The element types of the keys and values.
    pub fn types(&self) -> (KvType, KvType) {
        (self.keys.ty(), self.values.ty())
    }

    /// Appends these rows' bytes to `out` (read back by [`decode`](Self::decode)).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (heads, dim, vw, aw) = self.shape;
        for x in [heads, dim, vw, aw, self.len] {
            put_u32(out, x);
        }
        self.keys.encode(out);
        self.values.encode(out);
        put_u32(out, self.aux.len());
        self.aux
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }

    /// Rows from the front of `b` (which then starts past them).
    pub fn decode(b: &mut &[u8]) -> Result<CacheRows, RowsDecodeError> {
        let (heads, dim, vw, aw, len) =
            (u32_of(b)?, u32_of(b)?, u32_of(b)?, u32_of(b)?, u32_of(b)?);
        let kw = heads
            .checked_mul(dim)
            .filter(|&w| w <= MAX_WIDTH && vw <= MAX_WIDTH && aw <= MAX_WIDTH)
            .ok_or(RowsDecodeError::Invalid("width"))?;
        let keys = RowStore::decode(b, len, kw)?;
        let values = RowStore::decode(b, len, vw)?;
        let n_aux = u32_of(b)?;
        if Some(n_aux) != len.checked_mul(aw) {
            return Err(RowsDecodeError::Invalid("aux size"));
        }
        let raw = take(b, n_aux * 4)?;
        let aux = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(CacheRows {
            shape: (heads, dim, vw, aw),
            len,
            keys,
            values,
            aux,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheFormat, KvCache, RowLayout};

    fn filled(k: KvType, v: KvType, layout: RowLayout) -> KvCache {
        let mut c = KvCache::new(2, 32);
        let format = CacheFormat {
            k,
            v,
            bf16_products: false,
        };
        c.set_format(format, layout).unwrap();
        for p in 0..20 {
            let row: Vec<f32> = (0..64).map(|i| (p * 64 + i) as f32 * 0.01).collect();
            c.append(&row, &row);
        }
        c
    }

    #[test]
    fn rows_round_trip_in_every_type_and_layout() {
        for ty in [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0] {
            for layout in [RowLayout::Rows, RowLayout::Tiles] {
                if layout == RowLayout::Tiles && !ty.tileable() {
                    continue;
                }
                let c = filled(ty, ty, layout);
                let rows = c.copy_rows(0, 16).unwrap();
                let mut bytes = Vec::new();
                rows.encode(&mut bytes);
                let mut b = bytes.as_slice();
                assert_eq!(
                    CacheRows::decode(&mut b).unwrap(),
                    rows,
                    "{ty:?} {layout:?}"
                );
                assert!(b.is_empty());
                // Every cut is refused, never a panic.
                for n in 0..bytes.len() {
                    assert!(CacheRows::decode(&mut &bytes[..n]).is_err());
                }
            }
        }
    }
}
