//! AVX2 kernels for weights in the 16-row interleaved ("x16") layout (`quant::repack`,
//! `quant::repack_k`): Q4_K and Q6_K against Q8_K activations, Q4_0 and Q5_0 against Q8_0.
//! The layout is the AVX-512 kernels'; here each 64-byte vector is read as two 32-byte halves
//! of 8 rows (one row per 32-bit lane), so no horizontal reduction is ever needed.
//!
//! Without VNNI, `vpmaddubsw` (Intel SDM: "Multiply and Add Packed Signed and Unsigned
//! Bytes") multiplies 4 unsigned weight bytes of each row by 4 broadcast activation bytes into
//! two i16 pair sums per lane. Those i16 sums are added in i16 for as many steps as their bound
//! allows, then widened once with `vpmaddwd` against the sub-block's scale words (or ones) —
//! the multiply-port work per weight is about half that of the row kernels in `avx2.rs`
//! (`vpmaddubsw` + `vpmaddwd` per 32 weights and token). Bounds (Q8 activations are in
//! [−127, 127], ggml never quantizes to −128):
//! * Q4_K (q ≤ 15): a step's pair ≤ 2·15·127 = 3810; a sub-block's 8 steps ≤ 30480.
//! * Q6_K (q ≤ 63): a step's pair ≤ 16002; two steps ≤ 32004 (two widenings per 16 k).
//! * Q5_0 (q ≤ 31) / Q4_0: four steps ≤ 31496 (two widenings per 32 k).
//!
//! Offsets and mins come from the activations' block sums: Q4_K M = Σ_j m_j·S_j, Q6_K
//! subtracts 32·Σ_j sc_j·bsum_j, Q4_0 / Q5_0 subtract 8 / 16·Σa, all exact in i32. Per
//! (row, token) the float steps are fixed — per super-block or block, in column order — and
//! depend on neither the token count nor the neighbouring rows or tokens, so any batch gives
//! the bits of per-token calls.

// Kernels index parallel per-token arrays by number.
#![allow(clippy::needless_range_loop)]

use super::x16::Acts;
use crate::quant::blocks::{BlockQ8K, BlockQ8_0, QK_K};
use crate::quant::repack::X16;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// Tokens per register tile: a tile's weights are unpacked once per this many tokens.
const TOK: usize = 4;
/// Bytes of one super-block tile of 16 rows, and where the quants start in it
/// (`quant::repack_k`).
const Q4K_TILE: usize = X16 * 144;
const Q4K_QS: usize = crate::quant::repack_k::Q4K_QS;
const Q6K_TILE: usize = X16 * 210;
const Q6K_QS: usize = 32 + 4 * 64;

/// Whether `ty` in the interleaved layout has an AVX2 kernel here.
pub(super) fn has_kernel(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4K | GgmlType::Q6K | GgmlType::Q4_0 | GgmlType::Q5_0
    )
}

/// A `vpshufb` control: in every dword (within its 128-bit lane), byte b takes byte
/// `picks[b]` of the same dword (−1: zero).
const fn dword_picks(picks: [i8; 4]) -> [i8; 32] {
    let mut out = [0i8; 32];
    let mut i = 0;
    while i < 32 {
        let p = picks[i % 4];
        out[i] = if p < 0 {
            -1
        } else {
            ((i % 16) / 4 * 4) as i8 + p
        };
        i += 1;
    }
    out
}

/// Word pairs (x_j, x_j) of byte j (0..4) of each dword, zero-extended.
const SAME_WORDS: [[i8; 32]; 4] = [
    dword_picks([0, -1, 0, -1]),
    dword_picks([1, -1, 1, -1]),
    dword_picks([2, -1, 2, -1]),
    dword_picks([3, -1, 3, -1]),
];
/// Word pairs (x_j, x_j) of byte j of each dword in the words' high bytes (an arithmetic
/// shift right by 8 then sign-extends them).
const SAME_WORDS_HI: [[i8; 32]; 4] = [
    dword_picks([-1, 0, -1, 0]),
    dword_picks([-1, 1, -1, 1]),
    dword_picks([-1, 2, -1, 2]),
    dword_picks([-1, 3, -1, 3]),
];
/// Word pairs (x_2i, x_2i+1) of bytes (0, 1) or (2, 3) of each dword, in the words' high
/// bytes.
const PAIR_WORDS_HI: [[i8; 32]; 2] = [dword_picks([-1, 0, -1, 1]), dword_picks([-1, 2, -1, 3])];

#[inline(always)]
fn ctl(c: &[i8; 32]) -> __m256i {
    // SAFETY: 32 readable bytes; SSE2/AVX are implied by the callers' AVX2.
    unsafe { _mm256_loadu_si256(c.as_ptr().cast()) }
}

/// The dword at `p` broadcast to every lane.
///
/// # Safety
/// 4 bytes at `p` are readable.
#[inline(always)]
unsafe fn bcast(p: *const i8) -> __m256i {
    // SAFETY: per the caller; AVX is implied by the callers' AVX2.
    unsafe { _mm256_set1_epi32(std::ptr::read_unaligned(p.cast::<i32>())) }
}

/// 32 bytes at `p`.
///
/// # Safety
/// 32 bytes at `p` are readable.
#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: per the caller.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// 8 f16 at `p` as f32.
///
/// # Safety
/// 16 bytes at `p` are readable; F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16x8(p: *const u8) -> __m256 {
    // SAFETY: per the caller.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
}

/// Token k's 8 outputs of half h at `out + k·ld + 8h`.
///
/// # Safety
/// `out + k * ld .. + 16` is writable for k < T.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store<const T: usize>(acc: &[[__m256; T]; 2], out: *mut f32, ld: usize) {
    for h in 0..2 {
        for k in 0..T {
            // SAFETY: per the caller.
            unsafe { _mm256_storeu_ps(out.add(k * ld + 8 * h), acc[h][k]) };
        }
    }
}

/// Checks slice shapes; returns (blocks per row, groups).
fn shapes(w: &[u8], blocks: usize, tile: usize, acts: usize, nt: usize) -> (usize, usize) {
    assert!(
        blocks > 0 && w.len().is_multiple_of(blocks * tile),
        "whole groups"
    );
    assert!(acts >= nt * blocks, "activation rows");
    (blocks, w.len() / (blocks * tile))
}

/// Runs `$tile::<n>(group, $args…, first token, out, ld)` for every group of `nb` tiles of
/// `$tile_bytes` and every tile of up to TOK tokens (`n` a literal for the register arrays).
macro_rules! for_tiles {
    ($w:expr, $nb:expr, $tile_bytes:expr, $nt:expr, $y:expr, $ld:expr, $tile:ident, $($arg:expr),*) => {{
        let (w, nb, nt, y, ld) = ($w, $nb, $nt, $y, $ld);
        for g in 0..w.len() / (nb * $tile_bytes) {
            let wg = w[g * nb * $tile_bytes..].as_ptr();
            let mut t = 0;
            while t < nt {
                let n = (nt - t).min(TOK);
                let out = y.wrapping_add(t * ld + g * X16);
                // SAFETY: features per the caller; `wg` holds `nb` tiles; tokens t..t + n
                // are in the activations (shapes checked); `out` per the caller.
                unsafe {
                    match n {
                        4 => $tile::<4>(wg, $($arg,)* t, out, ld),
                        3 => $tile::<3>(wg, $($arg,)* t, out, ld),
                        2 => $tile::<2>(wg, $($arg,)* t, out, ld),
                        _ => $tile::<1>(wg, $($arg,)* t, out, ld),
                    }
                }
                t += n;
            }
        }
    }};
}

/// y[k * ld + g * 16 + i] = dot(row i of group g, activation row k) for every group of `w`
/// (repacked Q4_K, or Q6_K for `gemm_q6k`) and k < nt; `acts` = nt rows of cols / 256
/// blocks, contiguous.
///
/// # Safety
/// The CPU has AVX2/FMA/F16C; `y` is valid for those writes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4k(
    w: &[u8],
    cols: usize,
    acts: &[BlockQ8K],
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    let (nsb, _) = shapes(w, cols / QK_K, Q4K_TILE, acts.len(), nt);
    for_tiles!(w, nsb, Q4K_TILE, nt, y, ld, q4k_tile, nsb, acts);
}

/// As `gemm_q4k`, for Q6_K groups.
///
/// # Safety
/// As `gemm_q4k`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q6k(
    w: &[u8],
    cols: usize,
    acts: &[BlockQ8K],
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    let (nsb, _) = shapes(w, cols / QK_K, Q6K_TILE, acts.len(), nt);
    for_tiles!(w, nsb, Q6K_TILE, nt, y, ld, q6k_tile, nsb, acts);
}

/// One Q4_K group × `T` tokens from token `t0`: per half and super-block, I = Σ_j sc_j·Σ q·a
/// (a sub-block's 8 steps summed in i16, widened with its scale words) and M = Σ_j m_j·S_j
/// (m_j words against the dword of its two 16-k sums), then acc += (d·I − dmin·M)·d_a.
///
/// # Safety
/// AVX2/FMA/F16C; `w` holds `nsb` tiles; `acts` holds tokens t0..t0 + T;
/// `out + k * ld .. + 16` is writable for k < T.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_tile<const T: usize>(
    w: *const u8,
    nsb: usize,
    acts: &[BlockQ8K],
    t0: usize,
    out: *mut f32,
    ld: usize,
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let m6 = _mm256_set1_epi8(0x3F);
    let m30 = _mm256_set1_epi8(0x30);
    let z = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); T]; 2];
    for sb in 0..nsb {
        let a: [&BlockQ8K; T] = std::array::from_fn(|k| &acts[(t0 + k) * nsb + sb]);
        // SAFETY (whole block): sb < nsb, so the tile is in bounds; every read below stays
        // inside its 2304 bytes; activation reads stay inside the blocks' quants and sums.
        unsafe {
            let tile = w.add(sb * Q4K_TILE);
            for h in 0..2 {
                // 6-bit scales and mins (ggml get_scale_min_k4) on whole dword lanes: bytes
                // 0..4 of sc/m_lo are sub-blocks 0..3, of sc/m_hi sub-blocks 4..7.
                let s0 = load(tile.add(64 + 32 * h));
                let s1 = load(tile.add(128 + 32 * h));
                let s2 = load(tile.add(192 + 32 * h));
                let sc_lo = _mm256_and_si256(s0, m6);
                let m_lo = _mm256_and_si256(s1, m6);
                let sc_hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi32(s0, 2), m30),
                    _mm256_and_si256(s2, m4),
                );
                let m_hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi32(s1, 2), m30),
                    _mm256_and_si256(_mm256_srli_epi32(s2, 4), m4),
                );
                // Per sub-block: each 32-byte vector p holds k 8p..8p + 8 of 8 rows; every
                // token's i16 sums stay in registers while the vectors stream past.
                let mut is = [z; T];
                for j in 0..8 {
                    let c = ctl(&SAME_WORDS[j % 4]);
                    let scw = _mm256_shuffle_epi8(if j < 4 { sc_lo } else { sc_hi }, c);
                    let base = tile.add(Q4K_QS + 256 * j + 32 * h);
                    let mut s = [z; T];
                    for p in 0..4 {
                        let v = load(base.add(64 * p));
                        let lo = _mm256_and_si256(v, m4);
                        let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                        for k in 0..T {
                            let q = a[k].qs.as_ptr().add(32 * j + 8 * p);
                            let l = _mm256_maddubs_epi16(lo, bcast(q));
                            let u = _mm256_maddubs_epi16(hi, bcast(q.add(4)));
                            s[k] = _mm256_add_epi16(s[k], _mm256_add_epi16(l, u));
                        }
                    }
                    for k in 0..T {
                        is[k] = _mm256_add_epi32(is[k], _mm256_madd_epi16(s[k], scw));
                    }
                }
                let mut im = [z; T];
                for j in 0..8 {
                    let c = ctl(&SAME_WORDS[j % 4]);
                    let mw = _mm256_shuffle_epi8(if j < 4 { m_lo } else { m_hi }, c);
                    for k in 0..T {
                        let sums = a[k].bsums.as_ptr().add(2 * j).cast::<i8>();
                        im[k] = _mm256_add_epi32(im[k], _mm256_madd_epi16(mw, bcast(sums)));
                    }
                }
                let d = f16x8(tile.add(16 * h));
                let dmin = f16x8(tile.add(32 + 16 * h));
                for k in 0..T {
                    let v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(is[k]));
                    let v = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(im[k]), v);
                    acc[h][k] = _mm256_fmadd_ps(v, _mm256_set1_ps(a[k].d), acc[h][k]);
                }
            }
        }
    }
    // SAFETY: per the caller.
    unsafe { store(&acc, out, ld) }
}

/// One Q6_K group × `T` tokens from token `t0`: per half and super-block, per 16-k sub-block
/// j two i16 pair sums of 2 steps each widened with sc_j; then I −= 32·Σ_j sc_j·bsum_j and
/// acc += I·(d·d_a).
///
/// # Safety
/// As `q4k_tile`, with Q6_K tiles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_tile<const T: usize>(
    w: *const u8,
    nsb: usize,
    acts: &[BlockQ8K],
    t0: usize,
    out: *mut f32,
    ld: usize,
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let z = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); T]; 2];
    for sb in 0..nsb {
        let a: [&BlockQ8K; T] = std::array::from_fn(|k| &acts[(t0 + k) * nsb + sb]);
        // SAFETY (whole block): sb < nsb, so the tile is in bounds; every read below stays
        // inside its 3360 bytes; activation reads stay inside the blocks' quants and sums.
        unsafe {
            let tile = w.add(sb * Q6K_TILE);
            for h in 0..2 {
                // Vector s, lane i: the i8 scales 4s..4s + 4 of row i.
                let sv: [__m256i; 4] =
                    std::array::from_fn(|s| load(tile.add(32 + 64 * s + 32 * h)));
                let mut is = [z; T];
                for j in 0..16 {
                    let scw = _mm256_srai_epi16(
                        _mm256_shuffle_epi8(sv[j / 4], ctl(&SAME_WORDS_HI[j % 4])),
                        8,
                    );
                    let base = tile.add(Q6K_QS + 192 * j + 32 * h);
                    let (n0, n1, hb) = (load(base), load(base.add(64)), load(base.add(128)));
                    let q = [
                        _mm256_or_si256(
                            _mm256_and_si256(n0, m4),
                            _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(n0, 4), m4),
                            _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30),
                        ),
                        _mm256_or_si256(_mm256_and_si256(n1, m4), _mm256_and_si256(hb, m30)),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(n1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30),
                        ),
                    ];
                    for k in 0..T {
                        let p = a[k].qs.as_ptr().add(16 * j);
                        let s01 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[0], bcast(p)),
                            _mm256_maddubs_epi16(q[1], bcast(p.add(4))),
                        );
                        let s23 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[2], bcast(p.add(8))),
                            _mm256_maddubs_epi16(q[3], bcast(p.add(12))),
                        );
                        let s = _mm256_add_epi32(
                            _mm256_madd_epi16(s01, scw),
                            _mm256_madd_epi16(s23, scw),
                        );
                        is[k] = _mm256_add_epi32(is[k], s);
                    }
                }
                // The stored quants are q + 32: subtract 32·Σ_j sc_j·bsum_j.
                let mut off = [z; T];
                for i in 0..8 {
                    let pw = _mm256_srai_epi16(
                        _mm256_shuffle_epi8(sv[i / 2], ctl(&PAIR_WORDS_HI[i % 2])),
                        8,
                    );
                    for k in 0..T {
                        let sums = a[k].bsums.as_ptr().add(2 * i).cast::<i8>();
                        off[k] = _mm256_add_epi32(off[k], _mm256_madd_epi16(pw, bcast(sums)));
                    }
                }
                let d = f16x8(tile.add(16 * h));
                for k in 0..T {
                    let i = _mm256_sub_epi32(is[k], _mm256_slli_epi32(off[k], 5));
                    let f = _mm256_mul_ps(d, _mm256_set1_ps(a[k].d));
                    acc[h][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), f, acc[h][k]);
                }
            }
        }
    }
    // SAFETY: per the caller.
    unsafe { store(&acc, out, ld) }
}

/// y[k * ld + g * 16 + i] = dot(row i of group g, activation row k) for every group of `w`
/// (repacked Q4_0 or Q5_0, `ty`) and k < nt, against Q8_0 activations.
///
/// # Safety
/// The CPU has AVX2/FMA/F16C; `a` holds at least `nt` rows of `cols / 32` blocks; `y` is
/// valid for those writes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_0(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    a: &Acts<'_, BlockQ8_0>,
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    let tile = X16 * ty.type_size();
    let (nb, _) = shapes(w, cols / 32, tile, a.q.len(), nt);
    assert!(
        a.d.len() >= nt * nb && a.sum.len() >= nt * nb,
        "activation terms"
    );
    match ty {
        GgmlType::Q5_0 => for_tiles!(w, nb, tile, nt, y, ld, q4_0_tile_q5, nb, a),
        GgmlType::Q4_0 => for_tiles!(w, nb, tile, nt, y, ld, q4_0_tile_q4, nb, a),
        other => unreachable!("no AVX2 x16 kernel for {other:?}"),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_tile_q4<const T: usize>(
    w: *const u8,
    nb: usize,
    a: &Acts<'_, BlockQ8_0>,
    t0: usize,
    out: *mut f32,
    ld: usize,
) {
    // SAFETY: forwarded.
    unsafe { q4_0_tile::<T, false>(w, nb, a, t0, out, ld) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_tile_q5<const T: usize>(
    w: *const u8,
    nb: usize,
    a: &Acts<'_, BlockQ8_0>,
    t0: usize,
    out: *mut f32,
    ld: usize,
) {
    // SAFETY: forwarded.
    unsafe { q4_0_tile::<T, true>(w, nb, a, t0, out, ld) }
}

/// One Q4_0 (`Q5` false) or Q5_0 group × `T` tokens from token `t0`: per half and block, Σ q·a
/// in two i16 sums of 4 steps, widened, minus 8 (16)·Σa; then acc += I·(d·d_a).
///
/// # Safety
/// AVX2/FMA/F16C; `w` holds `nb` tiles of the type; `a` holds tokens t0..t0 + T;
/// `out + k * ld .. + 16` is writable for k < T.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_tile<const T: usize, const Q5: bool>(
    w: *const u8,
    nb: usize,
    a: &Acts<'_, BlockQ8_0>,
    t0: usize,
    out: *mut f32,
    ld: usize,
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let one8 = _mm256_set1_epi8(1);
    let ones = _mm256_set1_epi16(1);
    let (tile_bytes, qs, shift) = if Q5 {
        (X16 * 22, 96, 4)
    } else {
        (X16 * 18, 32, 3)
    };
    let mut acc = [[_mm256_setzero_ps(); T]; 2];
    for b in 0..nb {
        let idx: [usize; T] = std::array::from_fn(|k| (t0 + k) * nb + b);
        // SAFETY (whole block): b < nb, so the tile is in bounds; every read below stays
        // inside it; activation reads stay inside the blocks' 32 quants.
        unsafe {
            let tile = w.add(b * tile_bytes);
            for h in 0..2 {
                let mut q = [_mm256_setzero_si256(); 8];
                for p in 0..4 {
                    let v = load(tile.add(qs + 64 * p + 32 * h));
                    q[2 * p] = _mm256_and_si256(v, m4);
                    q[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
                if Q5 {
                    // Bit c of byte b of a lane's qh is bit 4 of element 4c + b.
                    let qh = load(tile.add(32 + 32 * h));
                    for c in 0..8 {
                        let bit =
                            _mm256_and_si256(_mm256_srl_epi32(qh, _mm_cvtsi32_si128(c)), one8);
                        q[c as usize] = _mm256_or_si256(q[c as usize], _mm256_slli_epi16(bit, 4));
                    }
                }
                let d = f16x8(tile.add(16 * h));
                for k in 0..T {
                    let i = idx[k];
                    let p = a.q[i].qs.as_ptr();
                    let mut half = [_mm256_setzero_si256(); 2];
                    for (e, s) in half.iter_mut().enumerate() {
                        let c = 4 * e;
                        let s01 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[c], bcast(p.add(4 * c))),
                            _mm256_maddubs_epi16(q[c + 1], bcast(p.add(4 * c + 4))),
                        );
                        let s23 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[c + 2], bcast(p.add(4 * c + 8))),
                            _mm256_maddubs_epi16(q[c + 3], bcast(p.add(4 * c + 12))),
                        );
                        *s = _mm256_madd_epi16(_mm256_add_epi16(s01, s23), ones);
                    }
                    let sum = _mm256_add_epi32(half[0], half[1]);
                    let sum = _mm256_sub_epi32(sum, _mm256_set1_epi32(a.sum[i] << shift));
                    let f = _mm256_mul_ps(d, _mm256_set1_ps(a.d[i]));
                    acc[h][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), f, acc[h][k]);
                }
            }
        }
    }
    // SAFETY: per the caller.
    unsafe { store(&acc, out, ld) }
}

#[cfg(test)]
mod tests {
    use super::super::x16_k::tests_support::{check, check_extremes};
    use super::*;
    use crate::kernels::ActBuf;
    use crate::quant::blocks::f32_to_f16;
    use crate::quant::{dot_row_ref, ActType};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn has_avx2() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("avx2") && has!("fma") && has!("f16c")
    }

    #[test]
    fn q4k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q4K, gemm_q4k, has_avx2());
        check_extremes(GgmlType::Q4K, gemm_q4k, has_avx2());
    }

    #[test]
    fn q6k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q6K, gemm_q6k, has_avx2());
        check_extremes(GgmlType::Q6K, gemm_q6k, has_avx2());
    }

    /// `rows` Q4_0 / Q5_0 rows: random bytes with f16 scales of either sign, or every byte
    /// `fill` (saturated quants, qh all ones or zeros).
    fn rows_of(
        rng: &mut StdRng,
        ty: GgmlType,
        cols: usize,
        rows: usize,
        fill: Option<u8>,
    ) -> Vec<u8> {
        let bsz = ty.type_size();
        let mut w: Vec<u8> = (0..rows * cols / 32 * bsz)
            .map(|_| fill.unwrap_or_else(|| rng.gen()))
            .collect();
        for b in w.chunks_exact_mut(bsz) {
            let v = 10f32.powf(rng.gen_range(-4.0..-1.0)) * if rng.gen() { 1.0 } else { -1.0 };
            b[..2].copy_from_slice(&f32_to_f16(v));
        }
        w
    }

    /// Q4_0 / Q5_0 groups against `dot_row_ref` (random and saturated weights; ordinary,
    /// ±127-saturated and zero activations), and every token count giving per-token bits.
    #[test]
    fn q4_0_and_q5_0_match_reference_and_are_batch_invariant() {
        if !has_avx2() {
            return;
        }
        let mut rng = StdRng::seed_from_u64(5);
        for ty in [GgmlType::Q4_0, GgmlType::Q5_0] {
            for (cols, groups, fill) in [
                (32, 2, None),
                (896, 1, None),
                (4864, 1, None),
                (64, 1, Some(0xFF)),
            ] {
                let row_bytes = ty.row_bytes(cols).unwrap();
                let rows = rows_of(&mut rng, ty, cols, groups * X16, fill);
                let mut w = vec![0u8; rows.len()];
                crate::quant::repack::repack(ty, cols, &rows, &mut w);
                let nt = 7;
                let x: Vec<f32> = (0..nt * cols)
                    .map(|i| match (i / cols) % 3 {
                        0 => rng.gen_range(-1.0..1.0),
                        1 => {
                            if i % 2 == 0 {
                                1e4
                            } else {
                                -1e4
                            }
                        }
                        _ => 0.0,
                    })
                    .collect();
                let mut acts = ActBuf::default();
                acts.quantize(ActType::Q8_0, &x, cols);
                let nb = cols / 32;
                let run = |t0: usize, n: usize| {
                    let ld = groups * X16 + 3;
                    let mut y = vec![f32::NAN; n * ld];
                    let a = Acts {
                        q: &acts.q8_0[t0 * nb..(t0 + n) * nb],
                        d: &acts.d8[t0 * nb..(t0 + n) * nb],
                        sum: &acts.sum8[t0 * nb..(t0 + n) * nb],
                        s: &[],
                    };
                    // SAFETY: AVX2 checked above; y holds n rows of ld ≥ groups·16.
                    unsafe { gemm_q4_0(ty, &w, cols, &a, n, y.as_mut_ptr(), ld) };
                    (0..n)
                        .flat_map(|k| y[k * ld..k * ld + groups * X16].to_vec())
                        .collect::<Vec<f32>>()
                };
                let y = run(0, nt);
                for k in 0..nt {
                    for r in 0..groups * X16 {
                        let row = &rows[r * row_bytes..(r + 1) * row_bytes];
                        let want = dot_row_ref(ty, row, acts.row(k)).unwrap();
                        let got = y[k * groups * X16 + r];
                        let tol = 1e-5
                            * (want.abs()
                                + 1e-3
                                    * x[k * cols..(k + 1) * cols]
                                        .iter()
                                        .map(|v| v.abs())
                                        .sum::<f32>());
                        assert!(
                            (got - want).abs() <= tol,
                            "{ty:?} cols {cols} row {r} token {k}: {got} vs {want}"
                        );
                    }
                }
                for n in 1..=nt {
                    let batch = run(0, n);
                    for k in 0..n {
                        let single = run(k, 1);
                        let got: Vec<u32> = batch[k * groups * X16..][..groups * X16]
                            .iter()
                            .map(|v| v.to_bits())
                            .collect();
                        let want: Vec<u32> = single.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(got, want, "{ty:?} cols {cols} nt {n} token {k}");
                    }
                }
            }
        }
    }
}
