//! Tiled attention with an online softmax for AVX-512 (FlashAttention, Dao et al. 2022; the
//! running max and rescaled sum of Milakov & Gimelshein 2018, "Online normalizer calculation
//! for softmax"). The keys are visited in tiles of [`TILE`] positions anchored at absolute
//! position 0, so the tiles a query sees depend on its position alone; each tile of keys (a
//! `d × TILE` block column by column: the cache's own when it keeps keys in tiles, else the
//! rows transposed once) and values is reused by every query row of the block and every head
//! of the group. Per query, every score is one FMA chain over the head's columns,
//! every output element one chain over the keys: the arithmetic never depends on which other
//! queries share the call — the batch invariance the decoder's callers rely on.

mod bf16;

use super::{FlashScratch, RowBlock, TypedKv, TILE};
use crate::cache::{KvSlice, RowLayout};
use crate::kernels::Scoring;
use crate::quant::blocks::f16_to_f32;
use std::arch::x86_64::*;

/// # Safety
/// AVX-512 F/DQ available; `kv.dim` a multiple of 16; the cache holds rows up to
/// `blk.pos + blk.rows - 1`; `q` and `out` hold `blk.rows` rows of `g * dim` at their strides
/// (all checked by the safe caller in `mod.rs`).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(super) unsafe fn attend_rows(
    blk: &RowBlock<'_>,
    kv: TypedKv<'_>,
    how: Scoring<'_>,
    sc: &mut FlashScratch,
    out: &mut [f32],
    out_stride: usize,
) {
    let (d, g) = (kv.dim, blk.g);
    let nq = blk.rows * g;
    let bf = how.bf16 && crate::kernels::bf16_attention();
    if bf {
        sc.kp.resize(d / 2 * TILE, 0);
        sc.vp.resize(TILE / 2 * d, 0);
        sc.pb.resize(nq * TILE / 2, 0);
        // SAFETY: AVX-512 BF16 present (`bf16_attention`); the block's rows (caller).
        unsafe { bf16::queries(blk, d, sc) };
    }
    sc.kt.resize(d * TILE, 0.0);
    sc.s.resize(nq * TILE, 0.0);
    sc.acc.clear();
    sc.acc.resize(nq * d, 0.0);
    sc.corr.resize(nq, 1.0);
    // The sink, when there is one, is the softmax's first term: max = sink, sum = exp(0).
    sc.m.clear();
    sc.l.clear();
    for _ in 0..blk.rows {
        for h in 0..g {
            let sink = how.sinks.map(|s| s[h]);
            sc.m.push(sink.unwrap_or(f32::NEG_INFINITY));
            sc.l.push(if sink.is_some() { 1.0 } else { 0.0 });
        }
    }
    let last = blk.pos + blk.rows - 1;
    for t in blk.first_key(blk.pos) / TILE..=last / TILE {
        let k0 = t * TILE;
        // The rows whose keys meet this tile are consecutive: p ≥ k0 and first_key(p) < k0 + TILE.
        let r_lo = k0.saturating_sub(blk.pos);
        let r_hi = (0..blk.rows)
            .rev()
            .find(|&r| blk.first_key(blk.pos + r) < k0 + TILE)
            .map_or(0, |r| r + 1);
        if r_lo >= r_hi {
            continue;
        }
        let live = r_lo * g..r_hi * g;
        prefetch_tile(kv, k0 + PREFETCH_TILES * TILE, last);
        // Key and value rows of the tile; lanes past `last` repeat it (their weight is 0).
        let rows: [usize; TILE] = std::array::from_fn(|j| (k0 + j).min(last) * kv.stride + kv.col);
        // f16 is converted as it is loaded when one or two groups of 8 queries read the tile
        // (decoding); a longer block widens it once into a scratch tile instead.
        let in_place = live.len() <= 16;
        let at = TileAt {
            k0,
            rows: &rows,
            live: live.clone(),
            in_place,
        };
        // SAFETY (both arms): the caller's contract (rows or whole tiles `..=last` in the
        // cache); BF16 present when `bf`.
        match bf {
            true => unsafe { bf_scores_of_tile(kv, how.scale, &at, sc) },
            false => unsafe { scores_of_tile(blk, kv, how.scale, &at, sc) },
        }
        for qi in live.clone() {
            let p = blk.pos + qi / g;
            let lo = blk.first_key(p).max(k0) - k0;
            let hi = (p - k0).min(TILE - 1);
            let s = &mut sc.s[qi * TILE..(qi + 1) * TILE];
            let pairs = bf.then(|| &mut sc.pb[qi * TILE / 2..(qi + 1) * TILE / 2]);
            let run = (&mut sc.m[qi], &mut sc.l[qi]);
            // SAFETY: `s` holds one tile, `pairs` half as many words.
            sc.corr[qi] = unsafe { softmax_tile(s, lo, hi, how.softcap, run, pairs) };
        }
        // SAFETY: as above.
        match bf {
            true => unsafe { bf_values_of_tile(kv, &at, sc) },
            false => unsafe { values_of_tile(kv, &at, sc) },
        }
    }
    for r in 0..blk.rows {
        for h in 0..g {
            let qi = r * g + h;
            let inv = 1.0 / sc.l[qi];
            let o = &mut out[r * out_stride + h * d..][..d];
            for (o, &a) in o.iter_mut().zip(&sc.acc[qi * d..(qi + 1) * d]) {
                *o = a * inv;
            }
        }
    }
}

/// Where a tile sits: its first key, the cache offsets of its 16 key/value rows (lanes past
/// the last key repeat it), the live queries, and whether f16 is converted as it is loaded.
struct TileAt<'a> {
    k0: usize,
    rows: &'a [usize; TILE],
    live: std::ops::Range<usize>,
    in_place: bool,
}

/// The live queries' scores against the tile, into `sc.s`: keys column by column from the
/// cache's own tile (its lanes past the last key hold zeros or cut-off rows, weighted 0 like
/// the repeats), widened once, or from rows transposed.
///
/// # Safety
/// As [`attend_rows`]; `sc.kt` holds `d * TILE`, `sc.s` a tile per query.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn scores_of_tile(
    blk: &RowBlock<'_>,
    kv: TypedKv<'_>,
    scale: f32,
    at: &TileAt<'_>,
    sc: &mut FlashScratch,
) {
    let (d, live) = (kv.dim, at.live.clone());
    let tiled = at.k0 * kv.stride + kv.col * TILE..at.k0 * kv.stride + (kv.col + d) * TILE;
    // SAFETY (every arm): the caller's contract; `tiled` is bounds-checked by the slicing.
    match (kv.key_layout, kv.keys) {
        (RowLayout::Tiles, KvSlice::F32(k)) => unsafe {
            let cols = F32Cols(k[tiled].as_ptr());
            tile_scores(blk, d, live, cols, scale, &mut sc.s)
        },
        (RowLayout::Tiles, KvSlice::F16(k)) if at.in_place => unsafe {
            let cols = F16Cols(k[tiled].as_ptr().cast());
            tile_scores(blk, d, live, cols, scale, &mut sc.s)
        },
        (RowLayout::Tiles, KvSlice::F16(k)) => unsafe {
            let k = F16Cols(k[tiled].as_ptr().cast());
            for c in 0..d {
                _mm512_storeu_ps(sc.kt.as_mut_ptr().add(c * TILE), k.col(c));
            }
            tile_scores(blk, d, live, F32Cols(sc.kt.as_ptr()), scale, &mut sc.s)
        },
        // Widening a bf16 column is one shift or mask: always in place.
        (RowLayout::Tiles, KvSlice::Bf16(k)) => unsafe {
            let cols = Bf16Cols(k[tiled].as_ptr().cast());
            tile_scores(blk, d, live, cols, scale, &mut sc.s)
        },
        _ => unsafe {
            transpose_keys(kv, at.rows, &mut sc.kt);
            tile_scores(blk, d, live, F32Cols(sc.kt.as_ptr()), scale, &mut sc.s)
        },
    }
}

/// The live queries' outputs take the tile's values (weights in `sc.s`, factors in
/// `sc.corr`): f32 rows read in place, f16 too when `in_place`, other rows widened once.
///
/// # Safety
/// As [`attend_rows`]; `sc.acc` holds `d` per query.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn values_of_tile(kv: TypedKv<'_>, at: &TileAt<'_>, sc: &mut FlashScratch) {
    let (d, live) = (kv.dim, at.live.clone());
    let (s, corr) = (&sc.s[..], &sc.corr[..]);
    // SAFETY (every arm): value rows `..=last` checked by the caller (`rows` offsets point at
    // this head's `d` columns); `acc` holds `d` per query, `s` a tile per query.
    match kv.values {
        KvSlice::F32(v) => unsafe {
            let vals = F32Vals(v.as_ptr(), at.rows);
            accumulate(vals, s, corr, d, live, &mut sc.acc)
        },
        KvSlice::F16(v) if at.in_place => unsafe {
            let vals = F16Vals(v.as_ptr().cast(), at.rows);
            accumulate(vals, s, corr, d, live, &mut sc.acc)
        },
        KvSlice::Bf16(_) if at.in_place => unsafe {
            let vals = AnyVals(kv.values, at.rows);
            accumulate(vals, s, corr, d, live, &mut sc.acc)
        },
        wide => unsafe {
            sc.vt.resize(TILE * d, 0.0);
            for (j, &r) in at.rows.iter().enumerate() {
                for c in (0..d).step_by(16) {
                    let x = load16(wide, r + c);
                    _mm512_storeu_ps(sc.vt.as_mut_ptr().add(j * d + c), x);
                }
            }
            let tile = std::array::from_fn(|j| j * d);
            let vals = F32Vals(sc.vt.as_ptr(), &tile);
            accumulate(vals, s, corr, d, live, &mut sc.acc)
        },
    }
}

/// [`scores_of_tile`] with bf16 products: a bf16 cache's own tile as it is stored, else the
/// tile's keys paired (from the cache's own tile, or from rows transposed); then every live
/// query's scores.
///
/// # Safety
/// As [`scores_of_tile`]; AVX-512 BF16 available; `sc.kp` holds `d / 2 * TILE` words, `sc.qb`
/// the block's queries.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
unsafe fn bf_scores_of_tile(kv: TypedKv<'_>, scale: f32, at: &TileAt<'_>, sc: &mut FlashScratch) {
    let d = kv.dim;
    let tiled = at.k0 * kv.stride + kv.col * TILE..at.k0 * kv.stride + (kv.col + d) * TILE;
    // SAFETY (every arm): the caller's contract; `tiled` is bounds-checked by the slicing.
    let kp: *const u32 = match (kv.key_layout, kv.keys) {
        // A bf16 tile is stored paired: multiplied in place.
        (RowLayout::Tiles, KvSlice::Bf16(k)) => k[tiled].as_ptr().cast(),
        (RowLayout::Tiles, KvSlice::F32(k)) => unsafe {
            bf16::key_pairs(d, F32Cols(k[tiled].as_ptr()), &mut sc.kp);
            sc.kp.as_ptr()
        },
        (RowLayout::Tiles, KvSlice::F16(k)) => unsafe {
            bf16::key_pairs(d, F16Cols(k[tiled].as_ptr().cast()), &mut sc.kp);
            sc.kp.as_ptr()
        },
        _ => unsafe {
            transpose_keys(kv, at.rows, &mut sc.kt);
            bf16::key_pairs(d, F32Cols(sc.kt.as_ptr()), &mut sc.kp);
            sc.kp.as_ptr()
        },
    };
    // SAFETY: as above; `kp` holds the head's `d / 2 * TILE` pairs.
    unsafe { bf16::scores(kp, sc, d, at.live.clone(), scale) }
}

/// [`values_of_tile`] with bf16 products: a bf16 cache's rows paired as they are read, other
/// rows paired into a scratch tile first; then every live query's outputs.
///
/// # Safety
/// As [`values_of_tile`]; AVX-512 BF16 available; `sc.vp` holds `TILE / 2 * d` words, `sc.pb`
/// every live query's weights.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
unsafe fn bf_values_of_tile(kv: TypedKv<'_>, at: &TileAt<'_>, sc: &mut FlashScratch) {
    let (d, live) = (kv.dim, at.live.clone());
    // SAFETY (every arm): value rows `..=last` checked by the caller.
    match kv.values {
        // One group of queries (decoding): paired as read. More would each pair it again.
        KvSlice::Bf16(v) if live.len() <= 8 => unsafe {
            let rows = bf16::Bf16Rows(v.as_ptr().cast(), at.rows);
            return bf16::accumulate(rows, sc, d, live);
        },
        KvSlice::Bf16(v) => unsafe {
            let rows = bf16::Bf16Rows(v.as_ptr().cast(), at.rows);
            bf16::store_pairs(d, rows, &mut sc.vp)
        },
        KvSlice::F32(v) => unsafe {
            let rows = bf16::Widened(F32Vals(v.as_ptr(), at.rows));
            bf16::store_pairs(d, rows, &mut sc.vp)
        },
        KvSlice::F16(v) => unsafe {
            let rows = bf16::Widened(F16Vals(v.as_ptr().cast(), at.rows));
            bf16::store_pairs(d, rows, &mut sc.vp)
        },
        any => unsafe {
            let rows = bf16::Widened(AnyVals(any, at.rows));
            bf16::store_pairs(d, rows, &mut sc.vp)
        },
    }
    let vp = bf16::Paired(sc.vp.as_ptr(), d);
    // SAFETY: as above; `vp` holds the paired tile.
    unsafe { bf16::accumulate(vp, sc, d, live) }
}

/// How many tiles ahead of the one being computed the rows are prefetched.
const PREFETCH_TILES: usize = 4;

/// Asks for the keys (a tiled cache's tile, or rows) and value rows of the tile from `k0` now
/// (those up to `last`): one tile's arithmetic is too short to hide a DRAM round trip, and the
/// rows of a tile are strided (other heads sit between them), which the hardware prefetchers
/// follow poorly. Into L2, not L1: at depth 4096 with f16 rows (1.5B's shape, two threads)
/// that took a layer's attention from ~470 to ~370 µs — L1's few miss buffers stay free for
/// the loads themselves.
#[inline(always)]
fn prefetch_tile(kv: TypedKv<'_>, k0: usize, last: usize) {
    if k0 > last {
        return;
    }
    if kv.key_layout == RowLayout::Tiles {
        prefetch_row(kv.keys, k0 * kv.stride + kv.col * TILE, kv.dim * TILE);
    }
    for j in k0..(k0 + TILE).min(last + 1) {
        let at = j * kv.stride + kv.col;
        if kv.key_layout == RowLayout::Rows {
            prefetch_row(kv.keys, at, kv.dim);
        }
        prefetch_row(kv.values, at, kv.dim);
    }
}

/// Prefetches the cache lines of `n` stored values from `at` (a row of one head).
#[inline(always)]
fn prefetch_row(s: KvSlice<'_>, at: usize, n: usize) {
    let (p, bytes): (*const i8, usize) = match s {
        KvSlice::F32(v) => (v[at..at + n].as_ptr().cast(), 4 * n),
        KvSlice::F16(v) => (v[at..at + n].as_ptr().cast(), 2 * n),
        KvSlice::Bf16(v) => (v[at..at + n].as_ptr().cast(), 2 * n),
        KvSlice::Q8_0(v) => {
            let b = &v[at / 32..(at + n).div_ceil(32)];
            (b.as_ptr().cast(), std::mem::size_of_val(b))
        }
    };
    for off in (0..bytes).step_by(64) {
        // SAFETY: a prefetch never faults; the address lies within the slice anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off)) };
    }
}

/// 16 halves from `p` widened to f32 (exactly, as `KvSlice::read`).
///
/// # Safety
/// AVX-512 F available (the callers' target features); 16 halves readable from `p`.
// No `target_feature`, as `load16`: it inlines into the AVX-512 callers.
#[inline(always)]
unsafe fn cvt16(p: *const u16) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
}

/// 16 cached values from `at` widened to f32 (q8_0: `at` is 16-aligned within a block, so
/// the 16 share one scale; the product is the scalar `d * q` of `KvSlice::read`).
///
/// # Safety
/// AVX-512 F available (the callers' target features); `at + 16` values exist.
// No `target_feature` here, so it can be `inline(always)`: a call (its `__m512` returned through
// memory) per 16 values cost a quarter of the kernel's time. Only called from AVX-512 code.
#[inline(always)]
unsafe fn load16(s: KvSlice<'_>, at: usize) -> __m512 {
    match s {
        // SAFETY: 16 values from `at` exist (caller), bounds-checked slices.
        KvSlice::F32(v) => unsafe { _mm512_loadu_ps(v[at..at + 16].as_ptr()) },
        KvSlice::F16(v) => {
            let h = &v[at..at + 16];
            // SAFETY: AVX-512 F (the caller's); `half::f16` is a transparent u16, so `h` is
            // 16 halves.
            unsafe { cvt16(h.as_ptr().cast()) }
        }
        KvSlice::Bf16(v) => {
            let h = &v[at..at + 16];
            // SAFETY: AVX-512 F (the caller's); `half::bf16` is a transparent u16: a bf16 is
            // the high half of its f32.
            unsafe {
                let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(h.as_ptr().cast()));
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w))
            }
        }
        KvSlice::Q8_0(v) => {
            let b = &v[at / 32];
            let q = &b.qs[at % 32..at % 32 + 16];
            let scale = f16_to_f32(b.d);
            // SAFETY: AVX-512 F (the caller's); `q` holds 16 bytes.
            unsafe {
                let q = _mm_loadu_si128(q.as_ptr().cast());
                let x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
                _mm512_mul_ps(x, _mm512_set1_ps(scale))
            }
        }
    }
}

/// `kt[c * TILE + j] = key_j[c]` for the tile's key rows (offsets into `kv.keys`): 16×16
/// blocks transposed in registers (unpack, then 128-bit lane shuffles).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn transpose_keys(kv: TypedKv<'_>, rows: &[usize; TILE], kt: &mut [f32]) {
    let d = kv.dim;
    for c in (0..d).step_by(16) {
        // A loop, not `array::from_fn`: a closure there is not inlined into this function.
        let mut r = [_mm512_setzero_ps(); 16];
        for (x, &row) in r.iter_mut().zip(rows) {
            // SAFETY: every row holds the head's `d` columns (caller), c + 16 <= d.
            *x = unsafe { load16(kv.keys, row + c) };
        }
        let t = transpose16(r);
        for (i, v) in t.iter().enumerate() {
            let at = &mut kt[(c + i) * TILE..(c + i + 1) * TILE];
            // SAFETY: `at` holds 16 floats.
            unsafe { _mm512_storeu_ps(at.as_mut_ptr(), *v) };
        }
    }
}

/// The 16×16 transpose of `r` (row j in, column j out).
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    // Interleave pairs of rows, then pairs of pairs: each 128-bit lane holds a 4×4 block.
    let t: [__m512; 16] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_ps(a, b)
        } else {
            _mm512_unpackhi_ps(a, b)
        }
    });
    let u: [__m512; 16] = std::array::from_fn(|i| {
        let base = i / 4 * 4;
        let (a, b) = match i % 4 {
            0 | 1 => (t[base], t[base + 2]),
            _ => (t[base + 1], t[base + 3]),
        };
        let a = _mm512_castps_pd(a);
        let b = _mm512_castps_pd(b);
        _mm512_castpd_ps(if i % 2 == 0 {
            _mm512_unpacklo_pd(a, b)
        } else {
            _mm512_unpackhi_pd(a, b)
        })
    });
    // u[4g + k], 128-bit lane L: column 4L + k of rows 4g..4g + 4. Gather lanes across groups.
    let v: [__m512; 16] = std::array::from_fn(|i| {
        let (k, half) = (i % 4, i / 4 % 2);
        let grp = i / 8 * 2;
        let (a, b) = (u[4 * grp + k], u[4 * (grp + 1) + k]);
        if half == 0 {
            _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b)
        } else {
            _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b)
        }
    });
    // v[i] for i < 8 (groups 0, 1): lanes (L0 g0, L2 g0, L0 g1, L2 g1) or the odd lanes.
    std::array::from_fn(|col| {
        let (k, lane) = (col % 4, col / 4);
        let (even, odd) = (v[k + 4 * (lane % 2)], v[8 + k + 4 * (lane % 2)]);
        if lane < 2 {
            _mm512_shuffle_f32x4::<0b10_00_10_00>(even, odd)
        } else {
            _mm512_shuffle_f32x4::<0b11_01_11_01>(even, odd)
        }
    })
}

/// A tile's keys column by column (`d × TILE`: column `c` is element `c` of the 16 keys).
pub(super) trait KeyCols: Copy {
    /// Column `c` widened to f32.
    ///
    /// # Safety
    /// AVX-512 F available (the callers' target features); `c < d`.
    unsafe fn col(self, c: usize) -> __m512;
}

/// f32 columns: a transposed scratch tile or the cache's own.
#[derive(Clone, Copy)]
struct F32Cols(*const f32);

/// f16 columns of the cache's own tile.
#[derive(Clone, Copy)]
struct F16Cols(*const u16);

/// bf16 columns of the cache's own tile, stored in pairs (`cache/store.rs`).
#[derive(Clone, Copy)]
struct Bf16Cols(*const u16);

// No `target_feature` on these, so they inline into the AVX-512 callers (as `load16`).
impl KeyCols for F32Cols {
    #[inline(always)]
    unsafe fn col(self, c: usize) -> __m512 {
        // SAFETY: the tile holds `d * TILE` floats (constructor), c < d.
        unsafe { _mm512_loadu_ps(self.0.add(c * TILE)) }
    }
}

impl KeyCols for F16Cols {
    #[inline(always)]
    unsafe fn col(self, c: usize) -> __m512 {
        // SAFETY: as above, 16 halves per column.
        unsafe { cvt16(self.0.add(c * TILE)) }
    }
}

impl KeyCols for Bf16Cols {
    #[inline(always)]
    unsafe fn col(self, c: usize) -> __m512 {
        // SAFETY: as above, the pair vector of columns c & !1 (32 words); column c's word is
        // the low (even c) or high half of each lane, the high half of its f32.
        unsafe {
            let pair = _mm512_loadu_si512(self.0.add(c / 2 * 2 * TILE).cast());
            _mm512_castsi512_ps(if c.is_multiple_of(2) {
                _mm512_slli_epi32::<16>(pair)
            } else {
                _mm512_and_si512(pair, _mm512_set1_epi32(0xffff_0000u32 as i32))
            })
        }
    }
}

/// Scores of queries `live` against the tile: `s[qi] = (q_qi · kt) * scale`, up to eight
/// queries at a time sharing each load of a key column.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn tile_scores<K: KeyCols>(
    blk: &RowBlock<'_>,
    d: usize,
    live: std::ops::Range<usize>,
    kt: K,
    scale: f32,
    s: &mut [f32],
) {
    for (qi, n) in query_groups(live) {
        macro_rules! call {
            ($n:literal) => {
                scores_n::<$n, K>(blk, d, qi, kt, scale, s)
            };
        }
        // SAFETY: forwarded contract; queries `qi..qi + n` are live.
        unsafe { group_sizes!(n, call) }
    }
}

/// `N` queries from `q0` (one FMA chain over the columns per query and lane).
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn scores_n<const N: usize, K: KeyCols>(
    blk: &RowBlock<'_>,
    d: usize,
    q0: usize,
    kt: K,
    scale: f32,
    s: &mut [f32],
) {
    let g = blk.g;
    let qs: [&[f32]; N] =
        std::array::from_fn(|i| &blk.q[((q0 + i) / g) * blk.q_stride + ((q0 + i) % g) * d..][..d]);
    let mut acc = [_mm512_setzero_ps(); N];
    for c in 0..d {
        // SAFETY: c < d.
        let k = unsafe { kt.col(c) };
        for i in 0..N {
            // SAFETY: every query row holds `d` floats.
            let qc = unsafe { *qs[i].get_unchecked(c) };
            acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(qc), k, acc[i]);
        }
    }
    // SAFETY: `s` holds a tile per query (caller).
    unsafe { store_scores(&acc, q0, scale, s) };
}

/// One tile of a query's online softmax: lanes `lo..=hi` of `s` are its keys, soft-capped when
/// asked; all 16 lanes become `exp(s - m_new)` (0 outside `lo..=hi`) in place, the running max
/// `m` and sum `l` are updated, and the factor the old output must be scaled by is returned.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn softmax_tile(
    s: &mut [f32],
    lo: usize,
    hi: usize,
    softcap: Option<f32>,
    (m, l): (&mut f32, &mut f32),
    pairs: Option<&mut [u32]>,
) -> f32 {
    if let Some(cap) = softcap {
        for v in &mut s[lo..=hi] {
            *v = cap * (*v / cap).tanh();
        }
    }
    let valid: __mmask16 = ((1u32 << (hi + 1)) - (1u32 << lo)) as u16;
    // SAFETY: `s` holds TILE floats.
    let v = unsafe { _mm512_loadu_ps(s.as_ptr()) };
    let v = _mm512_mask_blend_ps(valid, _mm512_set1_ps(f32::NEG_INFINITY), v);
    let m_new = m.max(_mm512_reduce_max_ps(v));
    // SAFETY: same target features as this function.
    let p = unsafe { exp512(_mm512_sub_ps(v, _mm512_set1_ps(m_new))) };
    let mut p = _mm512_maskz_mov_ps(valid, p);
    if let Some(pairs) = pairs {
        // bf16 products: the weights rounded to bf16 (the sum counts the rounded values), and
        // packed in pairs of keys.
        let r = round_bf16(p);
        p = _mm512_castsi512_ps(r);
        let packed = _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(r));
        // SAFETY: `pairs` holds TILE / 2 words.
        unsafe { _mm256_storeu_si256(pairs[..TILE / 2].as_mut_ptr().cast(), packed) };
    }
    let corr = if m_new == *m {
        1.0
    } else {
        // SAFETY: as above.
        _mm_cvtss_f32(_mm512_castps512_ps128(unsafe {
            exp512(_mm512_set1_ps(*m - m_new))
        }))
    };
    *l = *l * corr + _mm512_reduce_add_ps(p);
    *m = m_new;
    // SAFETY: as above.
    unsafe { _mm512_storeu_ps(s.as_mut_ptr(), p) };
    corr
}

/// A tile's value rows: 16 values of key `j`'s row from column `c`, widened to f32.
pub(super) trait ValRows: Copy {
    /// # Safety
    /// AVX-512 F available (the callers' target features); `j < TILE`, `c + 16 <= d`.
    unsafe fn at(self, j: usize, c: usize) -> __m512;
}

/// f32 rows at offsets `.1` of `.0` (the cache's rows or a widened tile).
#[derive(Clone, Copy)]
struct F32Vals<'a>(*const f32, &'a [usize; TILE]);

/// f16 rows at offsets `.1` of `.0`, widened as they are read (exactly, as `KvSlice::read`).
#[derive(Clone, Copy)]
struct F16Vals<'a>(*const u16, &'a [usize; TILE]);

impl ValRows for F32Vals<'_> {
    #[inline(always)]
    unsafe fn at(self, j: usize, c: usize) -> __m512 {
        // SAFETY: row `j` holds the head's `d` columns (constructor), c + 16 <= d.
        unsafe { _mm512_loadu_ps(self.0.add(self.1[j] + c)) }
    }
}

impl ValRows for F16Vals<'_> {
    #[inline(always)]
    unsafe fn at(self, j: usize, c: usize) -> __m512 {
        // SAFETY: as above, 16 halves.
        unsafe { cvt16(self.0.add(self.1[j] + c)) }
    }
}

/// Rows of any stored type at offsets `.1` of `.0`, widened by [`load16`] (q8_0 values).
#[derive(Clone, Copy)]
struct AnyVals<'a>(KvSlice<'a>, &'a [usize; TILE]);

impl ValRows for AnyVals<'_> {
    #[inline(always)]
    unsafe fn at(self, j: usize, c: usize) -> __m512 {
        // SAFETY: as above (a q8_0 row's 16 values from a 16-aligned `c` share one block).
        unsafe { load16(self.0, self.1[j] + c) }
    }
}

/// For the live queries: `acc = acc * corr + Σ_j p[j] · value_j` over all 16 lanes of the tile
/// (the weight of a lane outside a query's keys is 0), one FMA chain per element in key order.
/// Up to eight queries share each load of a value vector: 16 accumulators (4 queries × 64
/// columns, or 8 × 32), so a decoded token's 6 or 7 heads of a group read the tile once.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn accumulate<V: ValRows>(
    vals: V,
    s: &[f32],
    corr: &[f32],
    d: usize,
    live: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    for (qi, n, c, w) in pv_blocks(live, d) {
        let at = PvAt { s, corr, d, qi, c };
        macro_rules! call {
            ($q:literal, $w:literal) => {
                pv::<$q, $w, V>(vals, at, acc)
            };
        }
        // SAFETY: forwarded contract; queries `qi..qi + n` live, columns `c..c + 16 * w` lie
        // in the head.
        unsafe { pv_shapes!(n, w, call) }
    }
}

/// The blocks the value products work in, `(first query, queries, first column, vectors of
/// 16 columns)`: up to 8 queries sharing each value load, 16 accumulators at most (4
/// queries × 4 vectors, or 8 × 2).
pub(super) fn pv_blocks(
    live: std::ops::Range<usize>,
    d: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    query_groups(live).flat_map(move |(qi, n)| {
        let widest = if n <= 4 { 4 } else { 2 };
        let mut c = 0;
        std::iter::from_fn(move || {
            (c < d).then(|| {
                let w = ((d - c) / 16).min(widest);
                c += 16 * w;
                (qi, n, c - 16 * w, w)
            })
        })
    })
}

/// The live queries in groups of up to 8, `(first, count)`: the score loops' blocks.
pub(super) fn query_groups(live: std::ops::Range<usize>) -> impl Iterator<Item = (usize, usize)> {
    let end = live.end;
    live.step_by(8).map(move |qi| (qi, (end - qi).min(8)))
}

/// `match (n, w)` over [`pv_blocks`]' shapes, each arm `$call!(Q, W)`.
macro_rules! pv_shapes {
    ($n:expr, $w:expr, $call:ident) => {
        match ($n, $w) {
            (1, 1) => $call!(1, 1),
            (1, 2) => $call!(1, 2),
            (1, 3) => $call!(1, 3),
            (1, 4) => $call!(1, 4),
            (2, 1) => $call!(2, 1),
            (2, 2) => $call!(2, 2),
            (2, 3) => $call!(2, 3),
            (2, 4) => $call!(2, 4),
            (3, 1) => $call!(3, 1),
            (3, 2) => $call!(3, 2),
            (3, 3) => $call!(3, 3),
            (3, 4) => $call!(3, 4),
            (4, 1) => $call!(4, 1),
            (4, 2) => $call!(4, 2),
            (4, 3) => $call!(4, 3),
            (4, 4) => $call!(4, 4),
            (5, 1) => $call!(5, 1),
            (5, 2) => $call!(5, 2),
            (6, 1) => $call!(6, 1),
            (6, 2) => $call!(6, 2),
            (7, 1) => $call!(7, 1),
            (7, 2) => $call!(7, 2),
            (8, 1) => $call!(8, 1),
            (8, 2) => $call!(8, 2),
            _ => unreachable!("n ≤ 8, w ≤ 4 (2 past 4 queries)"),
        }
    };
}
pub(super) use pv_shapes;

/// `match n` over [`query_groups`]' sizes, each arm `$call!(N)`.
macro_rules! group_sizes {
    ($n:expr, $call:ident) => {
        match_const!($n, $call, [8, 7, 6, 5, 4, 3, 2], 1)
    };
}
pub(super) use group_sizes;

/// `Q × W` accumulators: `acc` rows of queries `qi..` from column `c`, times their `corr`.
///
/// # Safety
/// AVX-512 F available (the callers' target features); `acc` holds `d` per query.
#[inline(always)]
pub(super) unsafe fn load_acc<const Q: usize, const W: usize>(
    acc: &[f32],
    corr: &[f32],
    (d, qi, c): (usize, usize, usize),
) -> [[__m512; W]; Q] {
    // Loops, not `array::from_fn`: its closure would not inline the intrinsics.
    // SAFETY: the caller's contract.
    let mut a = [[unsafe { _mm512_setzero_ps() }; W]; Q];
    for (i, ai) in a.iter_mut().enumerate() {
        let row = &acc[(qi + i) * d + c..][..16 * W];
        for (w, v) in ai.iter_mut().enumerate() {
            // SAFETY: `row` holds 16 * W floats.
            *v = unsafe {
                _mm512_mul_ps(
                    _mm512_loadu_ps(row.as_ptr().add(16 * w)),
                    _mm512_set1_ps(corr[qi + i]),
                )
            };
        }
    }
    a
}

/// Stores [`load_acc`]'s accumulators back.
///
/// # Safety
/// As [`load_acc`].
#[inline(always)]
pub(super) unsafe fn store_acc<const Q: usize, const W: usize>(
    a: &[[__m512; W]; Q],
    acc: &mut [f32],
    (d, qi, c): (usize, usize, usize),
) {
    for (i, ai) in a.iter().enumerate() {
        let row = &mut acc[(qi + i) * d + c..][..16 * W];
        for (w, v) in ai.iter().enumerate() {
            // SAFETY: `row` holds 16 * W floats.
            unsafe { _mm512_storeu_ps(row.as_mut_ptr().add(16 * w), *v) };
        }
    }
}

/// Scores of queries `q0..q0 + N` (one vector of a tile each) scaled into `s`.
///
/// # Safety
/// AVX-512 F available (the callers' target features); `s` holds a tile per query.
#[inline(always)]
pub(super) unsafe fn store_scores<const N: usize>(
    acc: &[__m512; N],
    q0: usize,
    scale: f32,
    s: &mut [f32],
) {
    // SAFETY: the caller's contract.
    let scale = unsafe { _mm512_set1_ps(scale) };
    for (i, a) in acc.iter().enumerate() {
        let at = &mut s[(q0 + i) * TILE..(q0 + i + 1) * TILE];
        // SAFETY: `at` holds one tile.
        unsafe { _mm512_storeu_ps(at.as_mut_ptr(), _mm512_mul_ps(*a, scale)) };
    }
}

/// Where one `pv` call works: queries from `qi` (their tile weights `s`, factors `corr`),
/// columns from `c` of heads `d` wide.
#[derive(Clone, Copy)]
struct PvAt<'a> {
    s: &'a [f32],
    corr: &'a [f32],
    d: usize,
    qi: usize,
    c: usize,
}

/// `Q` queries × `W` vectors of columns of [`accumulate`].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn pv<const Q: usize, const W: usize, V: ValRows>(vals: V, at: PvAt<'_>, acc: &mut [f32]) {
    let place = (at.d, at.qi, at.c);
    // SAFETY: `acc` holds `d` per query (caller).
    let mut a = unsafe { load_acc::<Q, W>(acc, at.corr, place) };
    for j in 0..TILE {
        let mut vs = [_mm512_setzero_ps(); W];
        for (w, x) in vs.iter_mut().enumerate() {
            // SAFETY: j < TILE, columns `c + 16 * w..+16` lie in the head (caller).
            *x = unsafe { vals.at(j, at.c + 16 * w) };
        }
        for i in 0..Q {
            // SAFETY: `s` holds a tile per query.
            let p = _mm512_set1_ps(unsafe { *at.s.get_unchecked((at.qi + i) * TILE + j) });
            for w in 0..W {
                a[i][w] = _mm512_fmadd_ps(p, vs[w], a[i][w]);
            }
        }
    }
    // SAFETY: as above.
    unsafe { store_acc(&a, acc, place) };
}

/// Lanes of `p` (finite, ≥ 0) rounded to bf16, to nearest even, as f32 bits (low half zero);
/// values below f32's normal range become 0, as `vdpbf16ps` reads them. Integer steps, so the
/// softmax needs no BF16 instructions.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn round_bf16(p: __m512) -> __m512i {
    let b = _mm512_castps_si512(p);
    let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
    let r = _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    let r = _mm512_and_si512(r, _mm512_set1_epi32(0xffff_0000u32 as i32));
    let normal = _mm512_cmpge_epi32_mask(r, _mm512_set1_epi32(f32::MIN_POSITIVE.to_bits() as i32));
    _mm512_maskz_mov_epi32(normal, r)
}

/// e^x for 16 lanes: x = n·ln2 + r, |r| ≤ ln2/2, a degree-6 Taylor polynomial for e^r, scaled
/// by 2^n with `vscalefps` (which also underflows to 0 and saturates cleanly). −∞ gives 0.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn exp512(x: __m512) -> __m512 {
    let x = _mm512_max_ps(x, _mm512_set1_ps(-104.0));
    let x = _mm512_min_ps(x, _mm512_set1_ps(88.7));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    // ln 2 in two parts (Cephes' C1 + C2) so n·C1 is exact.
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}
