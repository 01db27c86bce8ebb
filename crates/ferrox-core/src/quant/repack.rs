//! The 16-row interleaved ("x16") weight layout, built at load for the AVX-512 VNNI kernels
//! (the idea of llama.cpp's `ggml-cpu/repack.cpp`, in a layout of our own): every 32-bit lane
//! of a vector is one weight row, so `vpdpbusd` multiplies 4 consecutive columns of 16 rows
//! by one broadcast activation dword and a product needs no horizontal reduction.
//!
//! A matrix becomes groups of 16 rows; a group is its rows' blocks in column order, each block
//! position a tile of 16 × the block's bytes (the same total size as the ggml rows). Tiles:
//! - Q4_0 (288 B): d[16] f16, then 4 × 64 B nibbles: vector p, lane i, byte b holds
//!   q(i, 8p + b) in its low and q(i, 8p + 4 + b) in its high nibble.
//! - Q5_0 (352 B): d[16], qh[16] as u32 with bit `c` of byte `b` = bit 4 of q(i, 4c + b), then
//!   the Q4_0 nibbles.
//! - Q4_1 (320 B): d[16], m[16] f16, then the Q4_0 nibbles.
//! - Q5_1 (384 B): d[16], m[16], then Q5_0's qh and nibbles.
//! - Q8_0 (544 B): d[16], then 8 × 64 B: vector c, lane i, byte b = q(i, 4c + b) + 128.
//! - IQ4_NL (288 B): as Q4_0 (its blocks are laid out alike; the nibbles index the codebook).
//! - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS: see `repack_k`.
//! - F32 / F16: element `k` of the group's rows is 16 consecutive values (row `i` at
//!   `16k + i`): one vector load gives a column of 16 rows.
//! - BF16 (an even number of columns): columns in pairs, row `i`'s elements `2p, 2p + 1` in
//!   32-bit lane `i` of vector `p` (low half even) — the operand layout of `vdpbf16ps`.

use super::blocks::BlockQ8_0;
use super::GgmlType;

/// Rows per interleaved group.
pub const X16: usize = 16;

/// The types with an interleaved layout (and kernels for it).
pub const LAYOUT_TYPES: [GgmlType; 15] = {
    use GgmlType::*;
    [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4NL, Q4K, Q5K, Q6K, Q3K, Q2K, IQ4XS, F32, F16, BF16,
    ]
};

/// Whether `ty` has an interleaved layout (and kernels for it): one of [`LAYOUT_TYPES`].
pub fn has_layout(ty: GgmlType) -> bool {
    LAYOUT_TYPES.contains(&ty)
}

/// Interleaves `src` (`rows` × `row_bytes` in ggml layout, `rows` a multiple of 16) into `dst`.
pub fn repack(ty: GgmlType, cols: usize, src: &[u8], dst: &mut [u8]) {
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    assert!(has_layout(ty), "no interleaved layout for {ty:?}");
    assert_eq!(src.len(), dst.len(), "repack: lengths");
    assert!(
        src.len().is_multiple_of(X16 * row_bytes),
        "repack: whole groups of 16 rows"
    );
    let group = X16 * row_bytes;
    for (s, d) in src.chunks_exact(group).zip(dst.chunks_exact_mut(group)) {
        match ty {
            GgmlType::Q4_0 | GgmlType::IQ4NL | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
                repack_nibbles(ty, s, d)
            }
            GgmlType::Q8_0 => repack_q8_0(s, cols, d),
            GgmlType::Q4K => super::repack_k::repack_q4k(s, cols, d),
            GgmlType::Q5K => super::repack_k::repack_q5k(s, cols, d),
            GgmlType::Q2K => super::repack_k::repack_q2k(s, cols, d),
            GgmlType::Q6K => super::repack_k::repack_q6k(s, cols, d),
            GgmlType::Q3K => super::repack_k::repack_q3k(s, cols, d),
            GgmlType::IQ4XS => super::repack_k::repack_iq4xs(s, cols, d),
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                let es = ty.type_size();
                for (i, row) in s.chunks_exact(row_bytes).enumerate() {
                    for (k, e) in row.chunks_exact(es).enumerate() {
                        d[float_at(ty, i, k)..][..es].copy_from_slice(e);
                    }
                }
            }
            _ => unreachable!("checked by has_layout"),
        }
    }
}

/// Writes row `r` of an interleaved matrix back in ggml layout (`dst` = one row's bytes).
pub fn unpack_row(ty: GgmlType, cols: usize, data: &[u8], r: usize, dst: &mut [u8]) {
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    assert_eq!(dst.len(), row_bytes, "unpack_row: one row");
    let group = X16 * row_bytes;
    let g = &data[r / X16 * group..(r / X16 + 1) * group];
    let lane = r % X16;
    match ty {
        GgmlType::Q4_0 | GgmlType::IQ4NL | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
            unpack_nibbles(ty, g, cols, lane, dst)
        }
        GgmlType::Q8_0 => unpack_q8_0(g, cols, lane, dst),
        GgmlType::Q4K => super::repack_k::unpack_row_q4k(g, cols, lane, dst),
        GgmlType::Q5K => super::repack_k::unpack_row_q5k(g, cols, lane, dst),
        GgmlType::Q2K => super::repack_k::unpack_row_q2k(g, cols, lane, dst),
        GgmlType::Q6K => super::repack_k::unpack_row_q6k(g, cols, lane, dst),
        GgmlType::Q3K => super::repack_k::unpack_row_q3k(g, cols, lane, dst),
        GgmlType::IQ4XS => super::repack_k::unpack_row_iq4xs(g, cols, lane, dst),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let es = ty.type_size();
            for (k, e) in dst.chunks_exact_mut(es).enumerate() {
                e.copy_from_slice(&g[float_at(ty, lane, k)..][..es]);
            }
        }
        _ => panic!("no interleaved layout for {ty:?}"),
    }
}

/// Byte offset in a float group of row `i`'s element `k`.
fn float_at(ty: GgmlType, i: usize, k: usize) -> usize {
    match ty {
        GgmlType::BF16 => ((k / 2) * X16 + i) * 4 + (k % 2) * 2,
        _ => (X16 * k + i) * ty.type_size(),
    }
}

/// Whether a `rows` × `cols` matrix of `ty` can take the interleaved layout: whole groups of
/// 16 rows, and BF16 column pairs.
pub fn fits(ty: GgmlType, rows: usize, cols: usize) -> bool {
    rows.is_multiple_of(X16) && (ty != GgmlType::BF16 || cols.is_multiple_of(2))
}

/// The 16 rows of a group, each as its ggml blocks.
fn rows_of<B: super::blocks::Block>(src: &[u8], cols: usize) -> Vec<&[B]> {
    let row_bytes = src.len() / X16;
    debug_assert_eq!(row_bytes, cols / B::QK * std::mem::size_of::<B>());
    src.chunks_exact(row_bytes)
        .map(|r| super::blocks::as_blocks::<B>(r).expect("whole blocks"))
        .collect()
}

/// Interleaved nibbles of one block position: `qs[i]` is row i's 16 bytes of ggml Q4_0-style
/// nibbles (element k < 16 in the low nibble of byte k, element 16 + k in its high nibble).
fn put_nibbles(out: &mut [u8], qs: impl Fn(usize) -> [u8; 16]) {
    for i in 0..X16 {
        let q = qs(i);
        for b in 0..4 {
            for p in 0..2 {
                let (lo, hi) = (q[8 * p + b], q[8 * p + 4 + b]);
                out[64 * p + 4 * i + b] = (lo & 0x0F) | (hi << 4);
                out[64 * (p + 2) + 4 * i + b] = (lo >> 4) | (hi & 0xF0);
            }
        }
    }
}

fn get_nibble(tile: &[u8], lane: usize, k: usize) -> u8 {
    let (p, h, b) = (k / 8, (k % 8) / 4, k % 4);
    (tile[64 * p + 4 * lane + b] >> (4 * h)) & 0x0F
}

fn set_nib(qs: &mut [u8; 16], k: usize, v: u8) {
    if k < 16 {
        qs[k] = (qs[k] & 0xF0) | v;
    } else {
        qs[k - 16] = (qs[k - 16] & 0x0F) | (v << 4);
    }
}

/// Bit `c` of byte `b` of the stored qh is bit 4 of element 4c + b.
fn permute_qh(qh: u32) -> u32 {
    let mut out = 0u32;
    for k in 0..32 {
        out |= ((qh >> k) & 1) << (8 * (k % 4) + k / 4);
    }
    out
}

fn unpermute_qh(v: u32) -> u32 {
    let mut out = 0u32;
    for k in 0..32 {
        if v >> (8 * (k % 4) + k / 4) & 1 == 1 {
            out |= 1 << k;
        }
    }
    out
}

/// The byte layout of a 32-weight nibble block (Q4_0 / IQ4_NL, Q4_1, Q5_0, Q5_1): `halves` f16
/// fields (d, then m), a u32 qh if `qh`, then 16 bytes of nibbles. Its tile: each f16 field as
/// [16] f16, qh as 16 permuted u32 (`permute_qh`), then the nibbles (`put_nibbles`).
#[derive(Clone, Copy)]
struct NibbleBlock {
    halves: usize,
    qh: bool,
}

impl NibbleBlock {
    fn of(ty: GgmlType) -> Self {
        let (halves, qh) = match ty {
            GgmlType::Q4_1 => (2, false),
            GgmlType::Q5_0 => (1, true),
            GgmlType::Q5_1 => (2, true),
            _ => (1, false),
        };
        NibbleBlock { halves, qh }
    }

    fn bytes(self) -> usize {
        2 * self.halves + 4 * self.qh as usize + 16
    }

    /// Offsets in the tile of qh and of the nibbles.
    fn tile_qh(self) -> usize {
        32 * self.halves
    }

    fn tile_qs(self) -> usize {
        self.tile_qh() + 64 * self.qh as usize
    }
}

fn repack_nibbles(ty: GgmlType, src: &[u8], dst: &mut [u8]) {
    let nb = NibbleBlock::of(ty);
    let bb = nb.bytes();
    let row_bytes = src.len() / X16;
    for (j, t) in dst.chunks_exact_mut(X16 * bb).enumerate() {
        let block = |i: usize| &src[i * row_bytes + j * bb..][..bb];
        for i in 0..X16 {
            let b = block(i);
            for h in 0..nb.halves {
                t[32 * h + 2 * i..][..2].copy_from_slice(&b[2 * h..2 * h + 2]);
            }
            if nb.qh {
                let qh = u32::from_le_bytes(b[2 * nb.halves..][..4].try_into().unwrap());
                t[nb.tile_qh() + 4 * i..][..4].copy_from_slice(&permute_qh(qh).to_le_bytes());
            }
        }
        put_nibbles(&mut t[nb.tile_qs()..], |i| {
            block(i)[bb - 16..].try_into().unwrap()
        });
    }
}

fn unpack_nibbles(ty: GgmlType, g: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    let nb = NibbleBlock::of(ty);
    let bb = nb.bytes();
    for (t, out) in g
        .chunks_exact(X16 * bb)
        .zip(dst.chunks_exact_mut(bb))
        .take(cols / 32)
    {
        for h in 0..nb.halves {
            out[2 * h..2 * h + 2].copy_from_slice(&t[32 * h + 2 * lane..][..2]);
        }
        if nb.qh {
            let v = u32::from_le_bytes(t[nb.tile_qh() + 4 * lane..][..4].try_into().unwrap());
            out[2 * nb.halves..][..4].copy_from_slice(&unpermute_qh(v).to_le_bytes());
        }
        let mut qs = [0u8; 16];
        for k in 0..32 {
            set_nib(&mut qs, k, get_nibble(&t[nb.tile_qs()..], lane, k));
        }
        out[bb - 16..].copy_from_slice(&qs);
    }
}

fn repack_q8_0(src: &[u8], cols: usize, dst: &mut [u8]) {
    let rows = rows_of::<BlockQ8_0>(src, cols);
    for (j, t) in dst.chunks_exact_mut(X16 * 34).enumerate() {
        for i in 0..X16 {
            let b = &rows[i][j];
            t[2 * i..2 * i + 2].copy_from_slice(&b.d);
            for c in 0..8 {
                for k in 0..4 {
                    t[32 + 64 * c + 4 * i + k] = (b.qs[4 * c + k] as u8) ^ 0x80;
                }
            }
        }
    }
}

fn unpack_q8_0(g: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    for (t, out) in g
        .chunks_exact(X16 * 34)
        .zip(dst.chunks_exact_mut(34))
        .take(cols / 32)
    {
        let mut b = BlockQ8_0 {
            d: [t[2 * lane], t[2 * lane + 1]],
            qs: [0; 32],
        };
        for k in 0..32 {
            b.qs[k] = (t[32 + 64 * (k / 4) + 4 * lane + k % 4] ^ 0x80) as i8;
        }
        out.copy_from_slice(super::blocks::blocks_as_bytes(&[b]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect()
    }

    #[test]
    fn qh_permutation_round_trips() {
        for v in [0u32, 1, 0x8000_0001, 0xdead_beef, u32::MAX] {
            assert_eq!(unpermute_qh(permute_qh(v)), v);
        }
    }

    #[test]
    fn repack_then_unpack_is_identity() {
        // The 32-element block types (the K-quants' layouts are checked in `repack_k`).
        for ty in LAYOUT_TYPES.into_iter().filter(|t| t.block_size() == 32) {
            for cols in [32, 96, 896] {
                let row_bytes = ty.row_bytes(cols).unwrap();
                let src = random_bytes(32 * row_bytes, cols as u64);
                let mut dst = vec![0u8; src.len()];
                repack(ty, cols, &src, &mut dst);
                let mut row = vec![0u8; row_bytes];
                for r in 0..32 {
                    unpack_row(ty, cols, &dst, r, &mut row);
                    assert_eq!(
                        row,
                        &src[r * row_bytes..(r + 1) * row_bytes],
                        "{ty:?} row {r}"
                    );
                }
            }
        }
    }
}
