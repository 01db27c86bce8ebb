//! Q4_K / Q6_K repacking into the 16-row interleaved ("x16") layout of `kernels::x16_k`.
//!
//! Source blocks are ggml's `block_q4_K` / `block_q6_K` (ggml/src/ggml-common.h). A group of
//! 16 consecutive rows becomes, per super-block (256 k), one tile of 16 × block bytes in which
//! each 32-bit lane of a 64-byte vector belongs to one row, so that `vpdpbusd` (Intel SDM,
//! "Multiply and Add Unsigned and Signed Bytes") multiplies 4 consecutive k of 16 rows by one
//! broadcast activation dword:
//!
//! * Q4_K tile (2304 B): d[16] f16, dmin[16] f16, 3 vectors of scales (vector s, lane i =
//!   bytes 4s..4s + 4 of row i's 12 `scales` bytes), then per sub-block j (0..8) 4 vectors p
//!   of nibbles: lane i byte b holds q[32j + 8p + b] (low nibble) and q[32j + 8p + 4 + b]
//!   (high nibble).
//! * Q6_K tile (3360 B): d[16] f16, 4 vectors of i8 scales (vector s, lane i = scales
//!   4s..4s + 4 of row i), then per sub-block j (0..16) 2 vectors p of low nibbles (lane i
//!   byte b: q[16j + 8p + b] low, q[16j + 8p + 4 + b] high) and 1 vector of high bits (lane i
//!   byte b, bits 2c..2c + 1: the top 2 bits of q[16j + 4c + b]), q the unsigned 6-bit value.
//! * Q5_K tile (2816 B): d, dmin and scales as Q4_K's, then per sub-block j the 4 nibble
//!   vectors as Q4_K's and 1 vector of high bits (lane i byte b, bit 2p + h: bit 4 of
//!   q[32j + 8p + 4h + b]).
//! * Q2_K tile (1344 B): d[16], dmin[16] f16, 4 vectors of scale bytes (vector s, lane i =
//!   row i's scales 4s..4s + 4), then per 16 k (j 0..16) 1 vector of 2-bit quants (lane i
//!   byte b, bits 2c..2c + 1: q[16j + 4c + b]).
//! * Q3_K tile (1760 B): d[16] f16, 3 vectors of scales (as Q4_K's), then per pair h (0..8) of
//!   16-k groups a vector of high bits (lane i byte b, bit c + 4m: the `hmask` bit of
//!   q[16(2h + m) + 4c + b]) and the two groups' vectors of low bits (group j: lane i byte b,
//!   bits 2c..2c + 1: the low 2 bits of q[16j + 4c + b]); q = low | hbit << 2 is the value + 4.
//! * IQ4_XS tile (2176 B): d[16] f16, scales_h[16] u16, 1 vector of scales_l (lane i = row i's
//!   4 bytes), then per sub-block j (0..8) 4 vectors p of codebook indices laid out as Q4_K's
//!   nibbles (lane i byte b: q[32j + 8p + b] low, q[32j + 8p + 4 + b] high).

// Called by the load-time repack of `WeightMatrix` (until that lands, only by tests).

use std::ops::Range;

use super::blocks::{BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QK_K};

/// Rows per interleaved group.
const ROWS: usize = 16;

/// A block type's size and where its block keeps the per-row fields a tile stores first,
/// lane-wise: `d` (f16, tile bytes 0..32), an optional second f16 (`dmin`, IQ4_XS's
/// `scales_h`; tile bytes 32..64), then `scale_vecs` vectors of 4 scale bytes per row read from
/// `scales` onwards.
struct Layout {
    bytes: usize,
    d: usize,
    d2: Option<usize>,
    scales: usize,
    scale_vecs: usize,
}

impl Layout {
    /// Block type `B` with `d` at byte `d`, the second f16 at `d2` and `scale_vecs` scale
    /// vectors from byte `scales`.
    const fn of<B>(d: usize, d2: Option<usize>, (scales, scale_vecs): (usize, usize)) -> Layout {
        Layout {
            bytes: std::mem::size_of::<B>(),
            d,
            d2,
            scales,
            scale_vecs,
        }
    }

    /// Tile offset of scale vector 0.
    const fn scales_at(&self) -> usize {
        if self.d2.is_some() {
            64
        } else {
            32
        }
    }

    /// Tile offset of what follows the head (the quants).
    const fn end(&self) -> usize {
        self.scales_at() + 64 * self.scale_vecs
    }

    /// Each of row `i`'s head fields as (bytes in the block, bytes in the tile).
    fn fields(&self, i: usize) -> impl Iterator<Item = (Range<usize>, Range<usize>)> + '_ {
        let d = (self.d..self.d + 2, 2 * i..2 * i + 2);
        let d2 = self.d2.map(|at| (at..at + 2, 32 + 2 * i..34 + 2 * i));
        let scales = (0..self.scale_vecs).map(move |s| {
            let (at, o) = (self.scales + 4 * s, self.scales_at() + 64 * s + 4 * i);
            (at..at + 4, o..o + 4)
        });
        std::iter::once(d).chain(d2).chain(scales)
    }
}

/// ggml block_q4_K: d, dmin, scales[12], qs[128].
const Q4K: Layout = Layout::of::<BlockQ4K>(0, Some(2), (4, 3));
/// ggml block_q5_K: d, dmin, scales[12], qh[32], qs[128]; bit j of qh[l] is bit 4 of element
/// 32j + l.
const Q5K: Layout = Layout::of::<BlockQ5K>(0, Some(2), (4, 3));
/// ggml block_q6_K: ql[128], qh[64], scales[16], d.
const Q6K: Layout = Layout::of::<BlockQ6K>(208, None, (192, 4));
/// ggml block_q2_K: scales[16], qs[64], d, dmin.
const Q2K: Layout = Layout::of::<BlockQ2K>(80, Some(82), (0, 4));
/// ggml block_q3_K: hmask[32], qs[64], scales[12], d.
const Q3K: Layout = Layout::of::<BlockQ3K>(108, None, (96, 3));
/// ggml block_iq4_xs: d, scales_h, scales_l[4], qs[128].
const IQ4XS: Layout = Layout::of::<BlockIQ4XS>(0, Some(2), (4, 1));

/// Offset of the nibble vectors in a Q4_K tile (after d, dmin and 3 scale vectors).
pub(crate) const Q4K_QS: usize = Q4K.end();
/// Offset of sub-block 0 in a Q6_K tile (after d and 4 scale vectors).
const Q6K_QS: usize = Q6K.end();
/// A Q5_K tile's sub-blocks (after d, dmin and scales, at `Q4K_QS`): each its 4 nibble vectors
/// then its high-bit vector, `Q5K_SUB` bytes (one stream, read in order).
pub(crate) const Q5K_QS: usize = Q5K.end();
pub(crate) const Q5K_QH: usize = Q5K_QS + 4 * 64;
pub(crate) const Q5K_SUB: usize = 5 * 64;
/// A Q3_K tile's pairs of 16-k groups (after d and scales): high-bit vector h, then the low-bit
/// vectors of groups 2h and 2h + 1 (one stream, read in order).
const Q3K_PAIRS: usize = Q3K.end();

/// Offset in a Q3_K tile of high-bit vector `h` (0..8).
pub(crate) const fn q3k_hm(h: usize) -> usize {
    Q3K_PAIRS + 192 * h
}

/// Offset in a Q3_K tile of the low-bit vector of 16-k group `j` (0..16).
pub(crate) const fn q3k_low(j: usize) -> usize {
    Q3K_PAIRS + 192 * (j / 2) + 64 * (1 + j % 2)
}
/// Offset of the index vectors in an IQ4_XS tile (after d, scales_h and scales_l).
const IQ4XS_QS: usize = IQ4XS.end();
/// Offset in a Q2_K tile of the crumb vectors (after d, dmin and 4 scale vectors).
pub(crate) const Q2K_QS: usize = Q2K.end();
/// Offset of `qs` in a Q3_K block.
const Q3K_QS_AT: usize = 32;

/// Checks the shapes shared by the entry points; returns super-blocks per row.
fn shape(len: usize, cols: usize, block: usize, rows: usize) -> usize {
    assert!(cols > 0 && cols.is_multiple_of(QK_K), "whole super-blocks");
    let nsb = cols / QK_K;
    assert_eq!(len, rows * nsb * block, "buffer length");
    nsb
}

/// Interleaves 16 consecutive original rows (`src`, each `cols` wide, ggml layout) into `dst`
/// (same length): the head fields by `layout`, the quants of row `i`'s block `b` by
/// `quants(tile, i, b)`.
fn repack(
    layout: &Layout,
    src: &[u8],
    cols: usize,
    dst: &mut [u8],
    quants: impl Fn(&mut [u8], usize, &[u8]),
) {
    let bytes = layout.bytes;
    let nsb = shape(src.len(), cols, bytes, ROWS);
    assert_eq!(dst.len(), src.len(), "buffer length");
    let row_bytes = nsb * bytes;
    for (sb, tile) in dst.chunks_exact_mut(ROWS * bytes).enumerate() {
        for i in 0..ROWS {
            let b = &src[i * row_bytes + sb * bytes..][..bytes];
            for (from, to) in layout.fields(i) {
                tile[to].copy_from_slice(&b[from]);
            }
            quants(tile, i, b);
        }
    }
}

/// Writes original row `lane` (0..16) of a repacked group back in ggml layout (`dst` = one
/// row's bytes): each block zeroed (Q2_K / Q3_K / Q5_K quant bits are OR-ed in), then its head
/// by `layout` and its quants by `quants(tile, lane, b)`.
fn unpack_row(
    layout: &Layout,
    group: &[u8],
    cols: usize,
    lane: usize,
    dst: &mut [u8],
    quants: impl Fn(&[u8], usize, &mut [u8]),
) {
    let bytes = layout.bytes;
    let nsb = shape(group.len(), cols, bytes, ROWS);
    assert!(lane < ROWS, "lane");
    assert_eq!(dst.len(), nsb * bytes, "row length");
    for (tile, b) in group
        .chunks_exact(ROWS * bytes)
        .zip(dst.chunks_exact_mut(bytes))
    {
        b.fill(0);
        for (to, from) in layout.fields(lane) {
            b[to].copy_from_slice(&tile[from]);
        }
        quants(tile, lane, b);
    }
}

/// The little-endian u32 at byte `at` of `b`.
#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Row `i`'s 128 nibble bytes `qs` of a Q4_K / Q5_K block into `tile`, sub-block j's nibble
/// vectors at `qs_at + stride·j`.
fn put_k4(tile: &mut [u8], i: usize, qs: &[u8], (qs_at, stride): (usize, usize)) {
    // Four consecutive k at a time as u32 lanes: sub-block j is nibble half j % 2 of
    // qs[32·(j / 2)..][..32].
    for j in 0..8 {
        let (n, sh) = (j / 2, 4 * (j % 2));
        for p in 0..4 {
            let at = 32 * n + 8 * p;
            let lo = (u32_at(qs, at) >> sh) & 0x0F0F_0F0F;
            let hi = (u32_at(qs, at + 4) >> sh) & 0x0F0F_0F0F;
            let o = qs_at + stride * j + 64 * p + 4 * i;
            tile[o..o + 4].copy_from_slice(&(lo | (hi << 4)).to_le_bytes());
        }
    }
}

/// The inverse of `put_k4` for lane `i`: `qs` (128 bytes) in ggml order.
fn get_k4(tile: &[u8], i: usize, qs: &mut [u8], (qs_at, stride): (usize, usize)) {
    // qs[32n + l]: low nibble from sub-block 2n, high from 2n + 1, element l = 8p + 4h + b
    // (nibble h of lane byte b of vector p), four l at a time.
    for n in 0..4 {
        for p in 0..4 {
            for h in 0..2 {
                let at = |j: usize| qs_at + stride * j + 64 * p + 4 * i;
                let lo = (u32_at(tile, at(2 * n)) >> (4 * h)) & 0x0F0F_0F0F;
                let hi = (u32_at(tile, at(2 * n + 1)) >> (4 * h)) & 0x0F0F_0F0F;
                let o = 32 * n + 8 * p + 4 * h;
                qs[o..o + 4].copy_from_slice(&(lo | (hi << 4)).to_le_bytes());
            }
        }
    }
}

/// Interleaves 16 consecutive original Q4_K rows (`src`, each `cols` wide, ggml layout) into
/// `dst` (same length).
pub(crate) fn repack_q4k(src: &[u8], cols: usize, dst: &mut [u8]) {
    repack(&Q4K, src, cols, dst, |tile, i, b| {
        put_k4(tile, i, &b[16..], (Q4K_QS, 256));
    });
}

/// Writes original row `lane` (0..16) of a repacked Q4_K group back in ggml layout (`dst` =
/// one row's bytes).
pub(crate) fn unpack_row_q4k(group: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    unpack_row(&Q4K, group, cols, lane, dst, |tile, i, b| {
        get_k4(tile, i, &mut b[16..], (Q4K_QS, 256));
    });
}

/// Interleaves 16 consecutive original Q5_K rows into `dst` (same length).
pub(crate) fn repack_q5k(src: &[u8], cols: usize, dst: &mut [u8]) {
    repack(&Q5K, src, cols, dst, |tile, i, b| {
        put_k4(tile, i, &b[48..], (Q5K_QS, Q5K_SUB));
        for j in 0..8 {
            let mut v = 0u32;
            for p in 0..4 {
                for h in 0..2 {
                    let l = 8 * p + 4 * h;
                    let bits = (u32_at(b, 16 + l) >> j) & 0x0101_0101;
                    v |= bits << (2 * p + h);
                }
            }
            tile[Q5K_QH + Q5K_SUB * j + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
    });
}

/// Writes original row `lane` (0..16) of a repacked Q5_K group back in ggml layout.
pub(crate) fn unpack_row_q5k(group: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    unpack_row(&Q5K, group, cols, lane, dst, |tile, i, b| {
        let (qh, qs) = b[16..].split_at_mut(32);
        get_k4(tile, i, qs, (Q5K_QS, Q5K_SUB));
        for j in 0..8 {
            let v = u32_at(tile, Q5K_QH + Q5K_SUB * j + 4 * i);
            for p in 0..4 {
                for h in 0..2 {
                    let l = 8 * p + 4 * h;
                    let bits = ((v >> (2 * p + h)) & 0x0101_0101) << j;
                    let old = u32_at(qh, l);
                    qh[l..l + 4].copy_from_slice(&(old | bits).to_le_bytes());
                }
            }
        }
    });
}

/// Interleaves 16 consecutive original Q6_K rows into `dst` (same length).
pub(crate) fn repack_q6k(src: &[u8], cols: usize, dst: &mut [u8]) {
    repack(&Q6K, src, cols, dst, |tile, i, b| {
        // Four consecutive k (4-aligned, so one ql nibble half and one qh bit pair) at a
        // time as u32 lanes.
        let low4 = |e: usize| {
            let (c, r) = (e / 128, e % 128);
            (u32_at(b, 64 * c + r % 64) >> (4 * (r / 64))) & 0x0F0F_0F0F
        };
        let high4 = |e: usize| {
            let (c, r) = (e / 128, e % 128);
            (u32_at(b, 128 + 32 * c + r % 32) >> (2 * (r / 32))) & 0x0303_0303
        };
        for j in 0..16 {
            let base = Q6K_QS + 192 * j + 4 * i;
            for p in 0..2 {
                let e = 16 * j + 8 * p;
                let v = low4(e) | (low4(e + 4) << 4);
                tile[base + 64 * p..base + 64 * p + 4].copy_from_slice(&v.to_le_bytes());
            }
            let h = (0..4).fold(0, |h, c| h | (high4(16 * j + 4 * c) << (2 * c)));
            tile[base + 128..base + 132].copy_from_slice(&h.to_le_bytes());
        }
    });
}

/// Writes original row `lane` (0..16) of a repacked Q6_K group back in ggml layout.
pub(crate) fn unpack_row_q6k(group: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    unpack_row(&Q6K, group, cols, lane, dst, |tile, i, b| {
        // Four consecutive (4-aligned) elements at a time: low nibbles and high bit pairs.
        let low4 = |e: usize| {
            let (j, r) = (e / 16, e % 16);
            (u32_at(tile, Q6K_QS + 192 * j + 64 * (r / 8) + 4 * i) >> (4 * ((r / 4) % 2)))
                & 0x0F0F_0F0F
        };
        let high4 = |e: usize| {
            let (j, r) = (e / 16, e % 16);
            (u32_at(tile, Q6K_QS + 192 * j + 128 + 4 * i) >> (2 * (r / 4))) & 0x0303_0303
        };
        for c in 0..2 {
            for m in (0..64).step_by(4) {
                let e = 128 * c + m;
                let v = low4(e) | (low4(e + 64) << 4);
                b[64 * c + m..64 * c + m + 4].copy_from_slice(&v.to_le_bytes());
            }
            for m in (0..32).step_by(4) {
                let e = 128 * c + m;
                let v = (0..4).fold(0, |v, s| v | (high4(e + 32 * s) << (2 * s)));
                b[128 + 32 * c + m..128 + 32 * c + m + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    });
}

/// The 2-bit fields (dword 0x03 per byte) of elements e..e + 4 (4-aligned) of a Q2_K / Q3_K
/// block's `qs` starting at byte `qs_at` of `b` (ggml: element 128c + 32j + l is bits 2j..2j + 2
/// of qs[32c + l]).
fn crumbs4(b: &[u8], qs_at: usize, e: usize) -> u32 {
    let (c, j, l) = (e / 128, (e / 32) % 4, e % 32);
    (u32_at(b, qs_at + 32 * c + l) >> (2 * j)) & 0x0303_0303
}

/// Low 2 bits (dword 0x03 per byte) and hmask bits (0x01 per byte) of Q3_K elements
/// e..e + 4 (4-aligned) of block `b`.
fn q3k_bits4(b: &[u8], e: usize) -> (u32, u32) {
    let high = (u32_at(b, e % 32) >> (e / 32)) & 0x0101_0101;
    (crumbs4(b, Q3K_QS_AT, e), high)
}

/// Interleaves 16 consecutive original Q2_K rows into `dst` (same length).
pub(crate) fn repack_q2k(src: &[u8], cols: usize, dst: &mut [u8]) {
    repack(&Q2K, src, cols, dst, |tile, i, b| {
        for j in 0..16 {
            let v = (0..4).fold(0, |v, c| v | (crumbs4(b, 16, 16 * j + 4 * c) << (2 * c)));
            tile[Q2K_QS + 64 * j + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
    });
}

/// Writes original row `lane` (0..16) of a repacked Q2_K group back in ggml layout.
pub(crate) fn unpack_row_q2k(group: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    unpack_row(&Q2K, group, cols, lane, dst, |tile, i, b| {
        for e in 0..QK_K {
            let (j, c, bb) = (e / 16, (e % 16) / 4, e % 4);
            let q = (tile[Q2K_QS + 64 * j + 4 * i + bb] >> (2 * c)) & 3;
            let (cc, jj, l) = (e / 128, (e / 32) % 4, e % 32);
            b[16 + 32 * cc + l] |= q << (2 * jj);
        }
    });
}

/// Interleaves 16 consecutive original Q3_K rows into `dst` (same length).
pub(crate) fn repack_q3k(src: &[u8], cols: usize, dst: &mut [u8]) {
    repack(&Q3K, src, cols, dst, |tile, i, b| {
        let mut hm = [0u32; 8];
        for j in 0..16 {
            let mut low = 0;
            for c in 0..4 {
                let (l, h) = q3k_bits4(b, 16 * j + 4 * c);
                low |= l << (2 * c);
                hm[j / 2] |= h << (c + 4 * (j % 2));
            }
            tile[q3k_low(j) + 4 * i..][..4].copy_from_slice(&low.to_le_bytes());
        }
        for (h, v) in hm.iter().enumerate() {
            tile[q3k_hm(h) + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
    });
}

/// Writes original row `lane` (0..16) of a repacked Q3_K group back in ggml layout.
pub(crate) fn unpack_row_q3k(group: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    unpack_row(&Q3K, group, cols, lane, dst, |tile, i, b| {
        for e in 0..QK_K {
            let (j, c, bb) = (e / 16, (e % 16) / 4, e % 4);
            let low = (tile[q3k_low(j) + 4 * i + bb] >> (2 * c)) & 3;
            let high = (tile[q3k_hm(j / 2) + 4 * i + bb] >> (c + 4 * (j % 2))) & 1;
            let (cc, jj, l) = (e / 128, (e / 32) % 4, e % 32);
            b[Q3K_QS_AT + 32 * cc + l] |= low << (2 * jj);
            b[l] |= high << (e / 32);
        }
    });
}

/// Interleaves 16 consecutive original IQ4_XS rows into `dst` (same length).
pub(crate) fn repack_iq4xs(src: &[u8], cols: usize, dst: &mut [u8]) {
    repack(&IQ4XS, src, cols, dst, |tile, i, b| {
        // Element 32j + l: low nibble of qs[16j + l] (l < 16), else high of qs[16j + l − 16].
        let idx4 = |e: usize| {
            let (j, l) = (e / 32, e % 32);
            (u32_at(b, 8 + 16 * j + l % 16) >> (4 * (l / 16))) & 0x0F0F_0F0F
        };
        for j in 0..8 {
            for p in 0..4 {
                let e = 32 * j + 8 * p;
                let v = idx4(e) | (idx4(e + 4) << 4);
                let o = IQ4XS_QS + 64 * (4 * j + p) + 4 * i;
                tile[o..o + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    });
}

/// Writes original row `lane` (0..16) of a repacked IQ4_XS group back in ggml layout.
pub(crate) fn unpack_row_iq4xs(group: &[u8], cols: usize, lane: usize, dst: &mut [u8]) {
    unpack_row(&IQ4XS, group, cols, lane, dst, |tile, i, b| {
        // Element 32j + 8p + 4h + b' sits in nibble h of lane byte b' of vector (j, p).
        let idx4 = |e: usize| {
            let (j, p, h) = (e / 32, (e % 32) / 8, (e % 8) / 4);
            (u32_at(tile, IQ4XS_QS + 64 * (4 * j + p) + 4 * i) >> (4 * h)) & 0x0F0F_0F0F
        };
        for j in 0..8 {
            for l in (0..16).step_by(4) {
                let e = 32 * j + l;
                let v = idx4(e) | (idx4(e + 16) << 4);
                b[8 + 16 * j + l..][..4].copy_from_slice(&v.to_le_bytes());
            }
        }
    });
}

#[cfg(test)]
mod tests;
