//! The bf16 products of the tiled attention kernel (`flash/mod.rs`), for [`Scoring::bf16`]:
//! queries, keys, softmax weights and values rounded to bf16 (round to nearest even, as
//! `vcvtneps2bf16`), pairs of products summed into f32 by `vdpbf16ps` (AVX-512 BF16) — twice
//! the multiply-adds of an f32 FMA per instruction. ggml's CPU attention rounds the same four
//! operands to f16 before its dot products; bf16 keeps 8 bits of them instead of 11.
//!
//! Operands are laid out in pairs along the sum: a key tile as `d / 2` vectors whose lane `j`
//! holds key `j`'s columns `2i, 2i + 1`, a value tile as 8 steps of `d` lanes holding keys
//! `2s, 2s + 1` of one column, queries and weights as the matching pairs, broadcast. A bf16
//! cache's key tiles are stored that way (`cache/store.rs`) and multiplied in place; its value
//! rows are paired as they are loaded (one `vpermt2w` per 16 columns of two keys). Other caches
//! are widened and paired into scratch tiles first.
//!
//! [`Scoring::bf16`]: crate::kernels::Scoring::bf16

use super::super::{FlashScratch, RowBlock, TILE};
use super::{
    group_sizes, load_acc, pv_blocks, pv_shapes, query_groups, store_acc, store_scores, KeyCols,
    ValRows,
};
use std::arch::x86_64::*;

/// A 16-bit permutation index whose word `2j` selects element `j` and word `2j + 1` element
/// `second + j`.
const fn interleave(second: u16) -> [u16; 32] {
    let mut t = [0u16; 32];
    let mut j = 0;
    while j < 16 {
        t[2 * j] = j as u16;
        t[2 * j + 1] = second + j as u16;
        j += 1;
    }
    t
}

/// Lane `j` of the result holds `(lo, hi) = (a[j], b[j])` as bf16: 16-bit element `2j` from
/// `a`, `2j + 1` from `b`.
///
/// # Safety
/// AVX-512 F/BW/BF16 available (the callers' target features).
#[inline(always)]
unsafe fn pair(a: __m512, b: __m512) -> __m512i {
    // `cvtne2ps` puts `a` in elements 0..16 and `b` in 16..32; interleave them.
    const IDX: [u16; 32] = interleave(16);
    // SAFETY: the caller's contract; `IDX` is 64 bytes.
    unsafe {
        let ab: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(b, a));
        _mm512_permutexvar_epi16(_mm512_loadu_si512(IDX.as_ptr().cast()), ab)
    }
}

/// `acc + Σ pairs of x · (the pair at p, broadcast)`: `vdpbf16ps` with its broadcast operand,
/// which LLVM does not fold from `_mm512_set1_epi32` (a separate `vbroadcastss` per product
/// made the score loop ~2× slower).
///
/// # Safety
/// AVX-512 BF16 available; `p` readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn dp_bcst(acc: __m512, x: __m512i, p: *const u32) -> __m512 {
    let mut acc = acc;
    // SAFETY: the caller's contract; reads 4 bytes at `p`, writes only `acc`.
    unsafe {
        std::arch::asm!(
            "vdpbf16ps {acc}, {x}, dword ptr [{p}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            x = in(zmm_reg) x,
            p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// `n` floats (a multiple of 16) rounded to bf16 into `n / 2` consecutive pairs.
///
/// # Safety
/// AVX-512 F/BF16 available; `src` holds `n` floats, `dst` `n / 2` words.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn round_pairs(src: &[f32], dst: &mut [u32]) {
    debug_assert!(src.len().is_multiple_of(16) && dst.len() * 2 == src.len());
    for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(8)) {
        // SAFETY: 16 floats in, 8 words out.
        unsafe {
            let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(s.as_ptr())));
            _mm256_storeu_si256(d.as_mut_ptr().cast(), h);
        }
    }
}

/// The block's queries as bf16 pairs, `d / 2` words per query (`qi = row * g + head`).
///
/// # Safety
/// As [`round_pairs`]; the block's rows hold `g * d` floats at their stride.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn queries(blk: &RowBlock<'_>, d: usize, sc: &mut FlashScratch) {
    let nq = blk.rows * blk.g;
    sc.qb.resize(nq * d / 2, 0);
    for r in 0..blk.rows {
        let row = &blk.q[r * blk.q_stride..][..blk.g * d];
        let out = &mut sc.qb[r * blk.g * d / 2..][..blk.g * d / 2];
        // SAFETY: forwarded; both hold a row of `g` heads.
        unsafe { round_pairs(row, out) };
    }
}

/// A key tile in pairs: `kp[i]` = lanes `(key_j[2i], key_j[2i + 1])`, from the tile's f32
/// columns.
///
/// # Safety
/// AVX-512 F/BW/BF16 available; `cols` holds `d` columns; `kp` holds `d / 2 * TILE` words.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn key_pairs<K: KeyCols>(d: usize, cols: K, kp: &mut [u32]) {
    let kp = &mut kp[..d / 2 * TILE];
    for i in 0..d / 2 {
        // SAFETY: the caller's contract; `kp` holds `d / 2` vectors.
        unsafe {
            let v = pair(cols.col(2 * i), cols.col(2 * i + 1));
            _mm512_storeu_si512(kp.as_mut_ptr().add(i * TILE).cast(), v);
        }
    }
}

/// Scores of `N` queries from `q0` against the paired key tile at `kp` (`d / 2` vectors of
/// `TILE` words): `s[qi] = (Σ pairs) * scale`, one `vdpbf16ps` chain per query and lane.
///
/// # Safety
/// AVX-512 F/BW/BF16 available; `kp` points at `d / 2 * TILE` readable words; `qb` holds
/// `d / 2` words per query, `s` a tile per query.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn scores_n<const N: usize>(
    qb: &[u32],
    kp: *const u32,
    d: usize,
    q0: usize,
    scale: f32,
    s: &mut [f32],
) {
    let h = d / 2;
    let qs: [&[u32]; N] = std::array::from_fn(|i| &qb[(q0 + i) * h..][..h]);
    let mut acc = [_mm512_setzero_ps(); N];
    for c in 0..h {
        // SAFETY: c < d / 2: one vector at `kp` (caller), one word of each query.
        unsafe {
            let k = _mm512_loadu_si512(kp.add(c * TILE).cast());
            for i in 0..N {
                acc[i] = dp_bcst(acc[i], k, qs[i].as_ptr().add(c));
            }
        }
    }
    // SAFETY: `s` holds a tile per query (caller).
    unsafe { store_scores(&acc, q0, scale, s) };
}

/// A value tile in pairs: `vp[s * d + c]` = `(value_{2s}[c], value_{2s + 1}[c])`.
///
/// # Safety
/// AVX-512 F/BW/BF16 available; `vals` as [`ValPairs::pairs`] for the head's `d` columns;
/// `vp` holds `TILE / 2 * d` words.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn store_pairs<V: ValPairs>(d: usize, vals: V, vp: &mut [u32]) {
    let vp = &mut vp[..TILE / 2 * d];
    for s in 0..TILE / 2 {
        for c in (0..d).step_by(16) {
            // SAFETY: the caller's contract; `vp` holds 8 rows of `d` words.
            unsafe {
                let v = vals.pairs(s, c);
                _mm512_storeu_si512(vp.as_mut_ptr().add(s * d + c).cast(), v);
            }
        }
    }
}

/// A value tile's pairs of keys: 16 columns of keys `2s` and `2s + 1`, interleaved.
pub(super) trait ValPairs: Copy {
    /// Lane `i` = (key `2s`'s, key `2s + 1`'s) column `c + i`.
    ///
    /// # Safety
    /// AVX-512 F/BW available (the callers' target features); `s < TILE / 2`, `c + 16 <= d`.
    unsafe fn pairs(self, s: usize, c: usize) -> __m512i;
}

/// A tile paired by [`store_pairs`] (`.0`, `.1` the head width).
#[derive(Clone, Copy)]
pub(super) struct Paired(pub(super) *const u32, pub(super) usize);

impl ValPairs for Paired {
    #[inline(always)]
    unsafe fn pairs(self, s: usize, c: usize) -> __m512i {
        // SAFETY: the tile holds `TILE / 2 * d` words (constructor).
        unsafe { _mm512_loadu_si512(self.0.add(s * self.1 + c).cast()) }
    }
}

/// Rows of any type widened to f32 ([`ValRows`]), rounded to bf16 and paired.
#[derive(Clone, Copy)]
pub(super) struct Widened<V>(pub(super) V);

impl<V: ValRows> ValPairs for Widened<V> {
    #[inline(always)]
    unsafe fn pairs(self, s: usize, c: usize) -> __m512i {
        // SAFETY: the caller's contract (`s < TILE / 2`, `c + 16 <= d`); BF16 is enabled in
        // every caller (`store_pairs`).
        unsafe { pair(self.0.at(2 * s, c), self.0.at(2 * s + 1, c)) }
    }
}

/// bf16 rows at offsets `.1` of `.0` (a bf16 cache's values), paired as they are read.
#[derive(Clone, Copy)]
pub(super) struct Bf16Rows<'a>(pub(super) *const u16, pub(super) &'a [usize; TILE]);

impl ValPairs for Bf16Rows<'_> {
    #[inline(always)]
    unsafe fn pairs(self, s: usize, c: usize) -> __m512i {
        // Word 2i from the first row's column i, 2i + 1 from the second's (index bit 5).
        const IDX: [u16; 32] = interleave(32);
        // SAFETY: rows `2s`, `2s + 1` hold the head's `d` columns (constructor), c + 16 <= d;
        // `IDX` is 64 bytes; the upper halves of `a`, `b` are never selected.
        unsafe {
            let a = _mm256_loadu_si256(self.0.add(self.1[2 * s] + c).cast());
            let b = _mm256_loadu_si256(self.0.add(self.1[2 * s + 1] + c).cast());
            let idx = _mm512_loadu_si512(IDX.as_ptr().cast());
            _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), idx, _mm512_castsi256_si512(b))
        }
    }
}

/// `Q` queries from `qi` × `W` vectors of columns from `c`: `acc = acc * corr + Σ pairs`, the
/// weights' pairs `pb` (`TILE / 2` words per query) against the value tile's pairs.
///
/// # Safety
/// AVX-512 F/BW/BF16 available; `acc` holds `d` per query, columns `c..c + 16 * W` lie in
/// the head, `vals` as [`ValPairs::pairs`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn pv<const Q: usize, const W: usize, V: ValPairs>(
    vals: V,
    pb: &[u32],
    corr: &[f32],
    (d, qi, c): (usize, usize, usize),
    acc: &mut [f32],
) {
    let place = (d, qi, c);
    // SAFETY: `acc` holds `d` per query (caller).
    let mut a = unsafe { load_acc::<Q, W>(acc, corr, place) };
    for s in 0..TILE / 2 {
        let mut vs = [_mm512_setzero_si512(); W];
        for (w, x) in vs.iter_mut().enumerate() {
            // SAFETY: step `s`, columns `c + 16 * w..+16` of the head (caller).
            *x = unsafe { vals.pairs(s, c + 16 * w) };
        }
        for i in 0..Q {
            // SAFETY: `pb` holds TILE / 2 words per query.
            let p = unsafe { pb.as_ptr().add((qi + i) * (TILE / 2) + s) };
            for w in 0..W {
                // SAFETY: as above.
                a[i][w] = unsafe { dp_bcst(a[i][w], vs[w], p) };
            }
        }
    }
    // SAFETY: as above.
    unsafe { store_acc(&a, acc, place) };
}

/// [`pv`] over the live queries and all columns (the dispatch of `flash::accumulate`).
///
/// # Safety
/// As [`pv`] for every query of `live`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn accumulate<V: ValPairs>(
    vals: V,
    sc: &mut FlashScratch,
    d: usize,
    live: std::ops::Range<usize>,
) {
    let (pb, corr, acc) = (&sc.pb[..], &sc.corr[..], &mut sc.acc[..]);
    for (qi, n, c, w) in pv_blocks(live, d) {
        macro_rules! call {
            ($q:literal, $w:literal) => {
                pv::<$q, $w, V>(vals, pb, corr, (d, qi, c), acc)
            };
        }
        // SAFETY: forwarded contract.
        unsafe { pv_shapes!(n, w, call) }
    }
}

/// [`scores_n`] over the live queries, eight at a time, against the paired key tile at `kp`.
///
/// # Safety
/// As [`scores_n`] for every query of `live`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
pub(super) unsafe fn scores(
    kp: *const u32,
    sc: &mut FlashScratch,
    d: usize,
    live: std::ops::Range<usize>,
    scale: f32,
) {
    let (qb, s) = (&sc.qb[..], &mut sc.s[..]);
    for (qi, n) in query_groups(live) {
        macro_rules! call {
            ($n:literal) => {
                scores_n::<$n>(qb, kp, d, qi, scale, s)
            };
        }
        // SAFETY: forwarded contract.
        unsafe { group_sizes!(n, call) }
    }
}
