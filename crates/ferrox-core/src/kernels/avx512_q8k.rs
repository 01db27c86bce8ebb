//! AVX-512 (F, BW, VL) kernels for the types of `avx2_k` (Q2_K, Q3_K, IQ4_XS, the IQ1 / IQ2 /
//! IQ3 types, TQ1_0, TQ2_0): the same decoded super-blocks as `avx2_k::Sb` (magnitudes, signs,
//! scales — ggml-cpu/arch/x86/quants.c `ggml_vec_dot_*_q8_K` compute the same integer sums),
//! but built 64 bytes at a time straight from the block: 2-bit fields by per-lane shifts,
//! sign bits as the lane masks themselves, scales spread with one `vpermw`, grid rows from
//! scalar loads (the 32-bit IQ3 grids by gathers). At one token (decode) the super-block's
//! decode is most of the work, so this is where the speed is.
//!
//! Per token: signs applied with a masked subtraction (AVX-512 has no `vpsignb`),
//! `vpmaddubsw` and `vpmaddwd` with the scales, exact i32 lanes — and one fused multiply-add
//! with the block's float factor into 16 f32 lanes, reduced once per row. Tokens go in groups
//! of up to 8 sharing one decode; each token's instruction sequence is the same whatever the
//! group, so gemm rows equal gemv bit for bit. A native decoder yields exactly the vectors of
//! the AVX2 decoder joined in pairs (tested), so the lane sums do not depend on which ran.

#![allow(clippy::needless_range_loop)]

use super::avx2::f16;
use super::avx2_k::{self, u16_at, u32_at, u64_at};
use super::BlockArgs;
use crate::quant::blocks::*;
use crate::quant::convert::{as_iq1t, as_iqn, magnitudes, BlockIQ1T, BlockIQN, Conversion};
use crate::quant::iq_grids::*;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// `[e(0), e(1), e(2), e(3)]` written out: closures passed to `array::from_fn` / `map` are
/// not always inlined, and a vector crossing such a call goes through memory.
macro_rules! x4 {
    (|$j:ident| $e:expr) => {
        [
            {
                let $j = 0usize;
                $e
            },
            {
                let $j = 1usize;
                $e
            },
            {
                let $j = 2usize;
                $e
            },
            {
                let $j = 3usize;
                $e
            },
        ]
    };
}

/// The types with a kernel here.
pub(super) fn has_kernel(ty: GgmlType) -> bool {
    avx2_k::has_kernel(ty)
}

/// Rows and tokens the matmul should hand to one `dot_block` call.
pub(super) const TILE: (usize, usize) = (16, 64);

/// [`BlockArgs`] for a type of `has_kernel`.
///
/// # Safety
/// AVX-512 F/BW/VL and AVX2/FMA/F16C are present; `a` as [`BlockArgs`] says, with Q8_K
/// activations; `out.len()` = rows × nt.
pub(super) unsafe fn dot_block(a: BlockArgs<'_>, out: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe { block(a, out, None) }
}

/// [`dot_block`] for rows converted as `conv` says (`quant::convert`): IQ1_S / IQ1_M to
/// [`BlockIQ1T`]s, IQ2 / IQ3 to [`BlockIQN`]s.
///
/// # Safety
/// As [`dot_block`], with `a.w` whole rows of `cols / 256` converted blocks.
pub(super) unsafe fn dot_block_converted(a: BlockArgs<'_>, out: &mut [f32], conv: Conversion) {
    // SAFETY: forwarded from the caller.
    unsafe { block(a, out, Some(conv)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn block(a: BlockArgs<'_>, out: &mut [f32], conv: Option<Conversion>) {
    let cols = a.acts.cols();
    let nb = cols / QK_K;
    let row_bytes = match conv {
        Some(c) => c.target(a.ty, cols).1,
        None => {
            a.ty.row_bytes(cols)
                .expect("validated by kernels::dot_block")
        }
    };
    // The nibble decoder's operands, once per call (only that layout reads them).
    let (table, k) = match conv {
        Some(Conversion::IqNibbles) => iqn_params(a.ty),
        _ => (_mm512_setzero_si512(), 0.0),
    };
    let y = |k: usize| &a.acts.q8k[(a.t0 + k) * nb..(a.t0 + k + 1) * nb];
    for (r, wr) in a.w.chunks_exact(row_bytes).enumerate() {
        let mut t = 0;
        while t < a.nt {
            let n = match a.nt - t {
                8.. => 8,
                4..=7 => 4,
                2 | 3 => 2,
                _ => 1,
            };
            let o = &mut out[r * a.nt + t..r * a.nt + t + n];
            macro_rules! go {
                ($n:literal) => {{
                    let mut res = [0f32; $n];
                    let ys = std::array::from_fn(|k| y(t + k));
                    match conv {
                        Some(Conversion::Iq1Ternary) => rows::<$n, _, false>(
                            as_iq1t(wr).expect("whole blocks"),
                            ys,
                            &mut res,
                            // SAFETY: this function's features are present.
                            |b| unsafe { dec_iq1t(b) },
                        ),
                        Some(_) => rows::<$n, _, false>(
                            as_iqn(wr).expect("whole blocks"),
                            ys,
                            &mut res,
                            // SAFETY: this function's features are present.
                            |b| unsafe { dec_iqn(b, table, k) },
                        ),
                        None => row::<$n>(a.ty, wr, ys, &mut res),
                    }
                    o.copy_from_slice(&res);
                }};
            }
            match n {
                8 => go!(8),
                4 => go!(4),
                2 => go!(2),
                _ => go!(1),
            }
            t += n;
        }
    }
}

/// One row against `NT` tokens, with the row type's decoder.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn row<const NT: usize>(ty: GgmlType, w: &[u8], y: [&[BlockQ8K]; NT], out: &mut [f32; NT]) {
    fn b<B: Block>(w: &[u8]) -> &[B] {
        as_blocks(w).expect("whole blocks")
    }
    avx2_k::q8k_dispatch!(rows, ty, b(w), y, out, "AVX-512")
}

/// One decoded super-block, 64 weights per vector in order: magnitudes `u`, the lanes whose
/// weight is negative `neg`, i16 scales (`avx2_k::Sb`'s pairs joined), the float factor, and
/// for Q2_K the mins and their factor.
pub(super) struct Sb512 {
    u: [__m512i; 4],
    neg: [__mmask64; 4],
    sc: [__m512i; 4],
    f: f32,
    mins: __m256i,
    fmin: f32,
}

/// Two 32-byte vectors as one 64-byte vector (`a` low).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn join(a: __m256i, b: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)
}

/// An AVX2-decoded super-block as [`Sb512`] (what the native decoders are tested against).
#[cfg(test)]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn widen(sb: avx2_k::Sb) -> Sb512 {
    Sb512 {
        u: x4!(|j| join(sb.u[2 * j], sb.u[2 * j + 1])),
        neg: x4!(|j| _mm512_movepi8_mask(join(sb.s[2 * j], sb.s[2 * j + 1]))),
        sc: x4!(|j| join(sb.sc[2 * j], sb.sc[2 * j + 1])),
        f: sb.f,
        mins: sb.mins,
        fmin: sb.fmin,
    }
}

/// Σ over the row's blocks of `f·d_y·Σ sc·u·(±y)` (minus `fmin·d_y·Σ mins·bsums`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn rows<const NT: usize, B, const MINS: bool>(
    w: &[B],
    y: [&[BlockQ8K]; NT],
    out: &mut [f32; NT],
    decode: impl Fn(&B) -> Sb512,
) {
    for t in 0..NT {
        assert_eq!(y[t].len(), w.len(), "activation blocks");
    }
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); NT];
    let mut accm = [_mm256_setzero_ps(); NT];
    for (i, x) in w.iter().enumerate() {
        let sb = decode(x);
        for t in 0..NT {
            let yb = &y[t][i];
            let mut sum = _mm512_setzero_si512();
            for j in 0..4 {
                // SAFETY: 64 bytes at 64 · j of the 256 quants.
                let yq = unsafe { _mm512_loadu_si512(yb.qs.as_ptr().add(64 * j).cast()) };
                let ys = _mm512_mask_sub_epi8(yq, sb.neg[j], zero, yq);
                let p = _mm512_maddubs_epi16(sb.u[j], ys);
                sum = _mm512_add_epi32(sum, _mm512_madd_epi16(p, sb.sc[j]));
            }
            let f = _mm512_set1_ps(sb.f * yb.d);
            acc[t] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(sum), acc[t]);
            if MINS {
                accm[t] = avx2_k::add_mins(accm[t], sb.mins, sb.fmin, yb);
            }
        }
    }
    for t in 0..NT {
        let s = _mm512_reduce_add_ps(acc[t]);
        out[t] = if MINS { s - avx2_k::hsum(accm[t]) } else { s };
    }
}

// ---- decoding helpers ---------------------------------------------------------------------

/// 32 bytes of `p` from `at` in both halves.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn bcast32(p: &[u8], at: usize) -> __m512i {
    let p = &p[at..at + 32];
    // SAFETY: 32 bytes readable (sliced above).
    _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(p.as_ptr().cast()) })
}

/// 16 bytes of `p` from `at`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn load16(p: &[u8], at: usize) -> __m128i {
    let p = &p[at..at + 16];
    // SAFETY: 16 bytes readable (sliced above).
    unsafe { _mm_loadu_si128(p.as_ptr().cast()) }
}

/// A vector of 32 i16 from an array.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn v16(a: &[i16; 32]) -> __m512i {
    // SAFETY: 64 bytes.
    unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
}

/// i16 lane `m` of scale vector `j` is the scale of weights `64·j + 2·m, +1`: with one scale
/// per 16 weights that is scale `4·j + m/8`, with one per 32, scale `2·j + m/16`.
const PER16: [[i16; 32]; 4] = idx_table(16);
const PER32: [[i16; 32]; 4] = idx_table(32);

const fn idx_table(group: usize) -> [[i16; 32]; 4] {
    i16_table!(4, 32, |j, m| ((64 * j + 2 * m) / group) as i16)
}

/// The four scale vectors from 16 i16 scales (one per 16 weights).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn spread16(s: __m256i) -> [__m512i; 4] {
    let s = _mm512_castsi256_si512(s);
    x4!(|j| _mm512_permutexvar_epi16(v16(&PER16[j]), s))
}

/// The four scale vectors from 8 i16 scales (one per 32 weights).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn spread32(s: __m128i) -> [__m512i; 4] {
    let s = _mm512_castsi128_si512(s);
    x4!(|j| _mm512_permutexvar_epi16(v16(&PER32[j]), s))
}

/// The 2-bit fields of weights `64·j ..` in a Q2_K / Q3_K / TQ2_0 half block `q` (its 32
/// bytes in both halves): field `2·j` of each byte in the low half, `2·j + 1` in the high
/// (weight `32·k + l` of a 128-weight half is bits `2k..2k+1` of byte `l`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn two_bits(q: __m512i, j: usize) -> __m512i {
    let sh = 4 * (j % 2) as i16;
    let cnt = join(_mm256_set1_epi16(sh), _mm256_set1_epi16(sh + 2));
    _mm512_and_si512(_mm512_srlv_epi16(q, cnt), _mm512_set1_epi8(3))
}

/// 32 seven-bit sign indices (i16 lanes, one per 8 weights in order) as ggml's
/// `ksigns_iq2xs` bytes — the index with its parity in bit 7 — i.e. the lane masks of the
/// block's four vectors (bit set: negative weight).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn ksigns(s: __m512i) -> [u64; 4] {
    let mut p = _mm512_xor_si512(s, _mm512_srli_epi16(s, 4));
    p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 2));
    p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 1));
    let p = _mm512_slli_epi16(_mm512_and_si512(p, _mm512_set1_epi16(1)), 7);
    let b = _mm512_cvtepi16_epi8(_mm512_or_si512(s, p));
    [
        _mm256_extract_epi64::<0>(b) as u64,
        _mm256_extract_epi64::<1>(b) as u64,
        _mm256_extract_epi64::<2>(b) as u64,
        _mm256_extract_epi64::<3>(b) as u64,
    ]
}

/// The 32 seven-bit sign fields of eight u32 words (four each, bits 0..28) as i16 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn sign_fields(words: __m256i) -> __m512i {
    let w = _mm512_castsi256_si512(words);
    let shift = _mm512_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21);
    let m = _mm512_set1_epi32(127);
    let half = |k: i32| {
        let idx = _mm512_setr_epi32(
            k,
            k,
            k,
            k,
            k + 1,
            k + 1,
            k + 1,
            k + 1,
            k + 2,
            k + 2,
            k + 2,
            k + 2,
            k + 3,
            k + 3,
            k + 3,
            k + 3,
        );
        let f = _mm512_and_si512(
            _mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, w), shift),
            m,
        );
        _mm512_cvtepi32_epi16(f)
    };
    join(half(0), half(4))
}

/// Signed weights `v` as magnitudes and the negative lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn split(v: __m512i) -> (__m512i, __mmask64) {
    (_mm512_abs_epi8(v), _mm512_movepi8_mask(v))
}

/// Eight u64 grid entries in order (the grids' 8 weights each), from scalar loads: on
/// Zen 4 `vpgatherqq` is no faster, and a stack array loaded as a vector is slower (store
/// forwarding fails).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn grid8(grid: &[u64], idx: impl Fn(usize) -> usize) -> __m512i {
    let g = |k: usize| grid[idx(k)] as i64;
    let q = |k: usize| _mm_set_epi64x(g(2 * k + 1), g(2 * k));
    join(_mm256_set_m128i(q(1), q(0)), _mm256_set_m128i(q(3), q(2)))
}

/// [`grid8`] of eight indices `stride` bits apart, the first four in `w0` and the rest in `w1`
/// (low bits first), each masked to `mask`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn grid8_packed(grid: &[u64], (w0, w1): (u64, u64), stride: usize, mask: u64) -> __m512i {
    grid8(grid, |k| {
        (if k < 4 {
            w0 >> (stride * k)
        } else {
            w1 >> (stride * (k - 4))
        } & mask) as usize
    })
}

/// Sixteen u32 grid entries.
///
/// # Safety
/// Every lane of `idx` is below `grid.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn gather32(grid: &[u32], idx: __m512i) -> __m512i {
    // SAFETY: indices in range (the caller's contract).
    unsafe { _mm512_i32gather_epi32::<4>(idx, grid.as_ptr().cast()) }
}

/// The IQ1 / IQ2 / IQ3 scales `2·s + 1` of 16 i16 `s`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn odd16(s: __m256i) -> __m256i {
    _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1))
}

/// 4-bit scales, two per byte, as `2·s + 1` i16 (one per 16 weights: IQ2_XS, IQ2_S).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn odd_nibbles16(scales: &[u8; 8]) -> __m256i {
    let b = _mm_cvtsi64_si128(u64::from_le_bytes(*scales) as i64);
    let m = _mm_set1_epi8(0x0F);
    let n = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    odd16(_mm256_cvtepu8_epi16(n))
}

/// Eight `2·s + 1` i16 scales (one per 32 weights) from their 4-bit values in i32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn odd8(s: __m256i) -> __m128i {
    let v = _mm256_cvtepi32_epi16(s);
    _mm_add_epi16(_mm_add_epi16(v, v), _mm_set1_epi16(1))
}

// ---- per-type decoders (each equal to `avx2_k`'s, joined; see the tests) ------------------
//
// Each is an `#[inline(always)] unsafe fn` rather than a `target_feature` function (which may
// not be `inline(always)`): left as a call, its vectors would go through memory. Inlined into
// `rows`, the intrinsics inside get that function's features.

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_q2k(b: &BlockQ2K) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let q = [bcast32(&b.qs, 0), bcast32(&b.qs, 32)];
        let sb = load16(&b.scales, 0);
        let m = _mm_set1_epi8(0x0F);
        Sb512 {
            u: x4!(|j| two_bits(q[j / 2], j)),
            neg: [0; 4],
            sc: spread16(_mm256_cvtepu8_epi16(_mm_and_si128(sb, m))),
            f: f16(b.d),
            mins: _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m)),
            fmin: f16(b.dmin),
        }
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_q3k(b: &BlockQ3K) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let q = [bcast32(&b.qs, 0), bcast32(&b.qs, 32)];
        let hm = bcast32(&b.hmask, 0);
        let four = _mm512_set1_epi8(4);
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            let low = two_bits(q[j / 2], j);
            // The high bit of weight 32·k + l is bit k of hmask[l]: bit 2j (low half), 2j + 1.
            let bit = join(
                _mm256_set1_epi8(1 << (2 * j)),
                _mm256_set1_epi8((1u8 << (2 * j + 1)) as i8),
            );
            // Clear high bit: q = low − 4 < 0, magnitude 4 − low.
            let clear = _mm512_testn_epi8_mask(hm, bit);
            u[j] = _mm512_mask_sub_epi8(low, clear, four, low);
            neg[j] = clear;
        }
        // The 6-bit scales: low nibbles in bytes 0..8, high 2-bit pairs in bytes 8..12.
        let a = |i: usize| u32_at(&b.scales, 4 * i);
        let (a0, a1, t) = (a(0), a(1), a(2));
        let (k1, k2) = (0x0303_0303u32, 0x0F0F_0F0Fu32);
        let s = [
            (a0 & k2) | ((t & k1) << 4),
            (a1 & k2) | (((t >> 2) & k1) << 4),
            ((a0 >> 4) & k2) | (((t >> 4) & k1) << 4),
            ((a1 >> 4) & k2) | (((t >> 6) & k1) << 4),
        ];
        let s = _mm_sub_epi8(
            _mm_setr_epi32(s[0] as i32, s[1] as i32, s[2] as i32, s[3] as i32),
            _mm_set1_epi8(32),
        );
        signed(u, neg, spread16(_mm256_cvtepi8_epi16(s)), f16(b.d))
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq4xs(b: &BlockIQ4XS) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        // Per 32 weights 16 bytes: low nibbles the first 16, high nibbles the next 16.
        let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(IQ4NL_VALUES.as_ptr().cast()));
        let shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            let v = _mm512_castsi256_si512(_mm256_loadu_si256(b.qs[32 * j..].as_ptr().cast()));
            let v = _mm512_shuffle_i64x2::<0x50>(v, v);
            let n = _mm512_and_si512(_mm512_srlv_epi64(v, shift), _mm512_set1_epi8(0x0F));
            (u[j], neg[j]) = split(_mm512_shuffle_epi8(lut, n));
        }
        let sc = iq4xs_scales(b);
        let sc = _mm_setr_epi16(
            sc[0] as i16,
            sc[1] as i16,
            sc[2] as i16,
            sc[3] as i16,
            sc[4] as i16,
            sc[5] as i16,
            sc[6] as i16,
            sc[7] as i16,
        );
        signed(u, neg, spread32(sc), f16(b.d))
    }
}

/// A block without mins.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn signed(u: [__m512i; 4], neg: [__mmask64; 4], sc: [__m512i; 4], f: f32) -> Sb512 {
    Sb512 {
        u,
        neg,
        sc,
        f,
        mins: _mm256_setzero_si256(),
        fmin: 0.0,
    }
}

/// [`signed`] with the signs and scales of IQ2_XXS / IQ3_XXS sign words (per 32 weights a u32:
/// four 7-bit sign indices, the 4-bit scale on top).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn signed_words(u: [__m512i; 4], words: __m256i, f: f32) -> Sb512 {
    signed(
        u,
        ksigns(sign_fields(words)),
        spread32(odd8(_mm256_srli_epi32(words, 28))),
        f,
    )
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq2xxs(b: &BlockIQ2XXS) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        // Per 32 weights a u64: 4 grid bytes, then a u32 of four 7-bit sign indices and the scale.
        let w = |ib: usize| u64_at(&b.qs, 8 * ib);
        let u = x4!(|j| grid8_packed(&IQ2XXS_GRID, (w(2 * j), w(2 * j + 1)), 8, 0xFF));
        // 64 bytes; the odd u32 words are the sign/scale words.
        let v = _mm512_loadu_si512(b.qs.as_ptr().cast());
        let words = _mm512_cvtepi64_epi32(_mm512_srli_epi64(v, 32));
        signed_words(u, words, f16(b.d) * 0.125)
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq2xs(b: &BlockIQ2XS) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        // Per 8 weights a u16: the grid index (9 bits) and a 7-bit sign index.
        let w = |at: usize| u64_at(&b.qs, at);
        let u = x4!(|j| grid8_packed(&IQ2XS_GRID, (w(16 * j), w(16 * j + 8)), 16, 511));
        // 64 bytes.
        let v = _mm512_loadu_si512(b.qs.as_ptr().cast());
        signed(
            u,
            ksigns(_mm512_srli_epi16(v, 9)),
            spread16(odd_nibbles16(&b.scales)),
            f16(b.d) * 0.125,
        )
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq2s(b: &BlockIQ2S) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        // Grid index: a byte of qs[0..32] and 2 bits of qh (one qh byte per 32 weights); the
        // sign bits are qs[32..64].
        let u = x4!(|j| {
            let (lo, hi) = (u64_at(&b.qs, 8 * j), u16_at(&b.qh, 2 * j) as u64);
            grid8(&IQ2S_GRID, |k| {
                (((lo >> (8 * k)) & 0xFF) | ((hi >> (2 * k)) & 3) << 8) as usize
            })
        });
        let neg = x4!(|j| u64_at(&b.qs, 32 + 8 * j));
        signed(u, neg, spread16(odd_nibbles16(&b.scales)), f16(b.d) * 0.125)
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq3xxs(b: &BlockIQ3XXS) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let u = x4!(|j| {
            let idx = _mm512_cvtepu8_epi32(load16(&b.qs, 16 * j));
            // Byte indices < 256 = the grid's length.
            gather32(&IQ3XXS_GRID, idx)
        });
        // After the grid bytes, per 32 weights a u32: four 7-bit sign indices and the scale.
        let words = &b.qs[64..96];
        // 32 bytes.
        let ws = _mm256_loadu_si256(words.as_ptr().cast());
        signed_words(u, ws, f16(b.d) * 0.25)
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq3s(b: &BlockIQ3S) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            // Grid index: a byte of qs and, as bit 8, one bit of qh (a qh byte per 8 indices).
            let lo = _mm512_cvtepu8_epi32(load16(&b.qs, 16 * j));
            let hbits = u16_at(&b.qh, 2 * j);
            let idx = _mm512_mask_or_epi32(lo, hbits, lo, _mm512_set1_epi32(256));
            // Indices < 512 = the grid's length.
            u[j] = gather32(&IQ3S_GRID, idx);
            neg[j] = u64_at(&b.signs, 8 * j);
        }
        let nibbles = _mm256_srlv_epi32(
            _mm256_set1_epi32(u32_at(&b.scales, 0) as i32),
            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
        );
        let sc = _mm256_and_si256(nibbles, _mm256_set1_epi32(0x0F));
        signed(u, neg, spread32(odd8(sc)), f16(b.d))
    }
}

/// An IQ1 vector: the grid entries (times 8) of eight groups plus each group's ±1 shift
/// (`minus`: bit g set for −1), as magnitudes and negative lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn iq1(idx: impl Fn(usize) -> usize, minus: __mmask8) -> (__m512i, __mmask64) {
    let g = grid8(&avx2_k::IQ1S_GRID8, idx);
    let delta = _mm512_mask_blend_epi64(minus, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
    split(_mm512_add_epi8(g, delta))
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq1s(b: &BlockIQ1S) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        let mut sc = [0i32; 8];
        // Per 32 weights a u16 of qh: four 3-bit high index parts, the scale, the shift's sign.
        const SHIFT: [u32; 8] = [0, 3, 6, 9, 16, 19, 22, 25];
        for j in 0..4 {
            let lo = u64_at(&b.qs, 8 * j);
            let qh = u32_at(&b.qh, 4 * j);
            let minus = (((qh >> 15) & 1) * 0x0F) | (((qh >> 31) & 1) * 0xF0);
            (u[j], neg[j]) = iq1(
                |k| ((lo >> (8 * k)) & 0xFF) as usize | (((qh >> SHIFT[k]) & 7) as usize * 256),
                minus as u8,
            );
            (sc[2 * j], sc[2 * j + 1]) = (((qh >> 12) & 7) as i32, ((qh >> 28) & 7) as i32);
        }
        let sc = _mm256_setr_epi32(sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6], sc[7]);
        signed(u, neg, spread32(odd8(sc)), f16(b.d) * 0.125)
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq1m(b: &BlockIQ1M) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        // A qh nibble per 8 weights: 3 high index bits and the shift's sign.
        let shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        for j in 0..4 {
            let lo = u64_at(&b.qs, 8 * j);
            let qh = u32_at(&b.qh, 4 * j);
            let nib = _mm256_srlv_epi32(_mm256_set1_epi32(qh as i32), shift);
            let minus = _mm256_test_epi32_mask(nib, _mm256_set1_epi32(8));
            (u[j], neg[j]) = iq1(
                |k| ((lo >> (8 * k)) & 0xFF) as usize | (((qh >> (4 * k)) & 7) as usize * 256),
                minus,
            );
        }
        // 3-bit scales, four per u16 word (whose top nibbles hold the f16 super-scale).
        let words = _mm256_set1_epi64x(u64_at(&b.scales, 0) as i64);
        let word_of = _mm256_setr_epi16(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        let bit_of = _mm256_setr_epi16(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9);
        let s = _mm256_srlv_epi16(_mm256_permutexvar_epi16(word_of, words), bit_of);
        let s = _mm256_and_si256(s, _mm256_set1_epi16(7));
        signed(u, neg, spread16(odd16(s)), f16(b.d()) * 0.125)
    }
}

/// IQ1_S / IQ1_M in the load-time ternary layout: the 2-bit codes `g + 1` as TQ2_0's,
/// then `8·(c − 1) ± 1` by the group's bit — the vectors `dec_iq1s` / `dec_iq1m` build with
/// grid lookups (tested), from shifts and one blend.
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iq1t(b: &BlockIQ1T) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let q = [bcast32(&b.qs, 0), bcast32(&b.qs, 32)];
        let minus = u32_at(&b.minus, 0);
        let (plus1, minus1) = (_mm512_set1_epi8(-7), _mm512_set1_epi8(-9));
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            // Codes are at most 2: shifting 16-bit lanes by 3 keeps them in their bytes.
            let g8 = _mm512_slli_epi16::<3>(two_bits(q[j / 2], j));
            let shift = _mm512_mask_blend_epi64((minus >> (8 * j)) as u8, plus1, minus1);
            (u[j], neg[j]) = split(_mm512_add_epi8(g8, shift));
        }
        let f = f32::from_le_bytes(b.f);
        signed(u, neg, spread16(odd_nibbles16(&b.scales)), f)
    }
}

/// [`dec_iqn`]'s operands for `ty`: the magnitude table (in both 8-byte halves of each
/// 16-byte lane, so an index's sign bit does not change its magnitude) and the factor of `d`
/// the type's own decoder applies.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn iqn_params(ty: GgmlType) -> (__m512i, f32) {
    let table = _mm512_set1_epi64(u64::from_le_bytes(magnitudes(ty)) as i64);
    let k = match ty {
        GgmlType::IQ3XXS => 0.25,
        GgmlType::IQ3S => 1.0,
        _ => 0.125,
    };
    (table, k)
}

/// IQ2 / IQ3 in the load-time nibble layout: magnitudes by one `vpshufb` of the type's
/// `table` (its 8 magnitudes in each half of every 128-bit lane), signs from bit 3, the odd
/// scales as stored and the factor `d·k` — what the native decoders build (tested).
///
/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_iqn(b: &BlockIQN, table: __m512i, k: f32) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let m = _mm512_set1_epi8(0x0F);
        let v = [
            _mm512_loadu_si512(b.nib.as_ptr().cast()),
            _mm512_loadu_si512(b.nib.as_ptr().add(64).cast()),
        ];
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            let n = match j % 2 {
                0 => _mm512_and_si512(v[j / 2], m),
                _ => _mm512_and_si512(_mm512_srli_epi16::<4>(v[j / 2]), m),
            };
            u[j] = _mm512_shuffle_epi8(table, n);
            neg[j] = _mm512_test_epi8_mask(n, _mm512_set1_epi8(8));
        }
        let ls = _mm256_cvtepu8_epi16(load16(&b.ls, 0));
        signed(u, neg, spread16(ls), f16(b.d) * k)
    }
}

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_tq2_0(b: &BlockTQ2_0) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let q = [bcast32(&b.qs, 0), bcast32(&b.qs, 32)];
        let one = _mm512_set1_epi8(1);
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            (u[j], neg[j]) = split(_mm512_sub_epi8(two_bits(q[j / 2], j), one));
        }
        signed(u, neg, [_mm512_set1_epi16(1); 4], f16(b.d))
    }
}

/// TQ1_0's bytes and base-3 digit multipliers per vector: weights `32n + m` are digit n of
/// qs[m] (n < 5, m < 32), `160 + 16n + m` digit n of qs[32 + m], `240 + 4n + m` digit n of
/// qh[m] (n < 4).
const TQ1_POW: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let p3 = [1u8, 3, 9, 27, 81];
    let mut e = 0;
    while e < 256 {
        let n = if e < 160 {
            e / 32
        } else if e < 240 {
            (e - 160) / 16
        } else {
            (e - 240) / 4
        };
        t[e / 64][e % 64] = p3[n];
        e += 1;
    }
    t
};

/// # Safety
/// AVX-512 F/BW/VL, AVX2 and F16C are present.
#[inline(always)]
unsafe fn dec_tq1_0(b: &BlockTQ1_0) -> Sb512 {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let q0 = bcast32(&b.qs, 0);
        let q1 = _mm512_broadcast_i32x4(load16(&b.qs, 32));
        let qh = _mm512_set1_epi32(u32_at(&b.qh, 0) as i32);
        let bytes = [
            q0,
            q0,
            _mm512_inserti64x4(q0, _mm512_castsi512_si256(q1), 1),
            _mm512_mask_blend_epi32(0xF000, q1, qh),
        ];
        let (lo8, hi8) = (
            _mm512_set1_epi16(0x00FF),
            _mm512_set1_epi16(0xFF00u16 as i16),
        );
        let mut u = [_mm512_setzero_si512(); 4];
        let mut neg = [0; 4];
        for j in 0..4 {
            // 64 bytes.
            let pw = _mm512_loadu_si512(TQ1_POW[j].as_ptr().cast());
            // q = byte · 3^n mod 256, even and odd bytes in 16-bit lanes.
            let even = _mm512_mullo_epi16(bytes[j], _mm512_and_si512(pw, lo8));
            let odd = _mm512_mullo_epi16(_mm512_and_si512(bytes[j], hi8), _mm512_srli_epi16(pw, 8));
            let q = _mm512_mask_blend_epi8(0x5555_5555_5555_5555, odd, even);
            // The digit (3·q) >> 8 is 0 below 86, 2 from 171; the weight is digit − 1.
            let minus = _mm512_cmplt_epu8_mask(q, _mm512_set1_epi8(86));
            let plus = _mm512_cmpge_epu8_mask(q, _mm512_set1_epi8(171u8 as i8));
            u[j] = _mm512_maskz_mov_epi8(minus | plus, _mm512_set1_epi8(1));
            neg[j] = minus;
        }
        signed(u, neg, [_mm512_set1_epi16(1); 4], f16(b.d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn bytes(v: __m512i) -> [u8; 64] {
        // SAFETY: both are 64 bytes.
        unsafe { std::mem::transmute(v) }
    }

    fn words(v: __m256i) -> [u16; 16] {
        // SAFETY: both are 32 bytes.
        unsafe { std::mem::transmute(v) }
    }

    /// Each native decoder yields the AVX2 decoder's vectors, joined: magnitudes, the signs
    /// of nonzero weights, scales, factors and mins, on random blocks (every bit pattern).
    #[test]
    fn native_decoders_equal_joined_avx2() {
        if !super::super::Isa::Avx512.supported() {
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        fn check<B: Block>(
            rng: &mut rand::rngs::StdRng,
            native: impl Fn(&B) -> Sb512,
            avx2: impl Fn(&B) -> avx2_k::Sb,
        ) {
            let size = std::mem::size_of::<B>();
            for _ in 0..2000 {
                let mut raw: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
                // Finite scales (any f16 bits but Inf/NaN).
                for b in raw.iter_mut() {
                    if rng.gen_ratio(1, 8) {
                        *b &= 0x3F;
                    }
                }
                let blk = &as_blocks::<B>(&raw).unwrap()[0];
                // SAFETY: the features are present (checked by the test).
                let (n, w) = (native(blk), unsafe { widen(avx2(blk)) });
                for j in 0..4 {
                    let (un, uw) = (bytes(n.u[j]), bytes(w.u[j]));
                    assert_eq!(un, uw, "magnitudes {j}");
                    for l in 0..64 {
                        if un[l] != 0 {
                            assert_eq!(
                                n.neg[j] >> l & 1,
                                w.neg[j] >> l & 1,
                                "sign of weight {}",
                                64 * j + l
                            );
                        }
                    }
                    assert_eq!(bytes(n.sc[j]), bytes(w.sc[j]), "scales {j}");
                }
                assert_eq!(n.f.to_bits(), w.f.to_bits(), "factor");
                assert_eq!(n.fmin.to_bits(), w.fmin.to_bits(), "min factor");
                assert_eq!(words(n.mins), words(w.mins), "mins");
            }
        }
        // SAFETY (all calls): AVX-512 F/BW/VL, AVX2, FMA and F16C are present (checked).
        unsafe {
            check(&mut rng, |b| dec_q2k(b), |b| avx2_k::dec_q2k(b));
            check(&mut rng, |b| dec_q3k(b), |b| avx2_k::dec_q3k(b));
            check(&mut rng, |b| dec_iq4xs(b), |b| avx2_k::dec_iq4xs(b));
            check(&mut rng, |b| dec_iq2xxs(b), |b| avx2_k::dec_iq2xxs(b));
            check(&mut rng, |b| dec_iq2xs(b), |b| avx2_k::dec_iq2xs(b));
            check(&mut rng, |b| dec_iq2s(b), |b| avx2_k::dec_iq2s(b));
            check(&mut rng, |b| dec_iq3xxs(b), |b| avx2_k::dec_iq3xxs(b));
            check(&mut rng, |b| dec_iq3s(b), |b| avx2_k::dec_iq3s(b));
            check(&mut rng, |b| dec_iq1s(b), |b| avx2_k::dec_iq1s(b));
            check(&mut rng, |b| dec_iq1m(b), |b| avx2_k::dec_iq1m(b));
            check(&mut rng, |b| dec_tq2_0(b), |b| avx2_k::dec_tq2_0(b));
            check(&mut rng, |b| dec_tq1_0(b), |b| avx2_k::dec_tq1_0(b));
        }
    }
}

#[cfg(test)]
mod converted_tests {
    use super::*;
    use crate::quant::convert::{convert, IQ1T_BYTES, IQN_BYTES};
    use rand::{Rng, SeedableRng};

    fn bytes(v: __m512i) -> [u8; 64] {
        // SAFETY: both are 64 bytes.
        unsafe { std::mem::transmute(v) }
    }

    /// A converted block's decode equals the file block's: every magnitude (none is zero,
    /// so every sign counts), sign, scale and the factor.
    fn assert_same(got: &Sb512, want: &Sb512, ty: GgmlType) {
        for j in 0..4 {
            assert!(
                bytes(want.u[j]).iter().all(|&m| m != 0),
                "{ty:?}: a zero weight"
            );
            assert_eq!(bytes(got.u[j]), bytes(want.u[j]), "{ty:?} magnitudes {j}");
            assert_eq!(got.neg[j], want.neg[j], "{ty:?} signs {j}");
            assert_eq!(bytes(got.sc[j]), bytes(want.sc[j]), "{ty:?} scales {j}");
        }
        assert_eq!(got.f.to_bits(), want.f.to_bits(), "{ty:?} factor");
    }

    /// Random blocks of `ty` whose f16 `d` is finite (its high byte at `d_hi` kept below the
    /// Inf/NaN exponents).
    fn blocks(ty: GgmlType, d_hi: usize, seed: u64) -> impl Iterator<Item = Vec<u8>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..2000).map(move |_| {
            let mut raw: Vec<u8> = (0..ty.type_size()).map(|_| rng.gen()).collect();
            raw[d_hi] &= 0x3F;
            raw
        })
    }

    /// The ternary layout's decoder builds exactly the IQ1 decoders' vectors.
    #[test]
    fn iq1t_decodes_as_iq1s_and_iq1m() {
        if !super::super::Isa::Avx512.supported() {
            return;
        }
        // IQ1_M's f16 is spread over its scale words' top nibbles; byte 55 holds its top.
        for (ty, d_hi) in [(GgmlType::IQ1S, 1), (GgmlType::IQ1M, 55)] {
            for raw in blocks(ty, d_hi, 9) {
                let mut t = [0u8; IQ1T_BYTES];
                convert(ty, &raw, &mut t);
                // SAFETY: the features are present (checked above).
                let (want, got) = unsafe {
                    let want = match ty {
                        GgmlType::IQ1S => dec_iq1s(&as_blocks::<BlockIQ1S>(&raw).unwrap()[0]),
                        _ => dec_iq1m(&as_blocks::<BlockIQ1M>(&raw).unwrap()[0]),
                    };
                    (want, dec_iq1t(&as_iq1t(&t).unwrap()[0]))
                };
                assert_same(&got, &want, ty);
            }
        }
    }

    /// The nibble layout's decoder builds exactly the IQ2 / IQ3 decoders' vectors.
    #[test]
    fn iqn_decodes_as_the_iq2_and_iq3_types() {
        if !super::super::Isa::Avx512.supported() {
            return;
        }
        use GgmlType::*;
        for ty in [IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S] {
            // SAFETY: AVX-512 F is present (checked above).
            let (table, k) = unsafe { iqn_params(ty) };
            // `d` is the first field of each.
            for raw in blocks(ty, 1, 11) {
                let mut t = [0u8; IQN_BYTES];
                convert(ty, &raw, &mut t);
                // SAFETY: the features are present (checked above).
                let (want, got) = unsafe {
                    let want = match ty {
                        IQ2XXS => dec_iq2xxs(&as_blocks::<BlockIQ2XXS>(&raw).unwrap()[0]),
                        IQ2XS => dec_iq2xs(&as_blocks::<BlockIQ2XS>(&raw).unwrap()[0]),
                        IQ2S => dec_iq2s(&as_blocks::<BlockIQ2S>(&raw).unwrap()[0]),
                        IQ3XXS => dec_iq3xxs(&as_blocks::<BlockIQ3XXS>(&raw).unwrap()[0]),
                        _ => dec_iq3s(&as_blocks::<BlockIQ3S>(&raw).unwrap()[0]),
                    };
                    (want, dec_iqn(&as_iqn(&t).unwrap()[0], table, k))
                };
                assert_same(&got, &want, ty);
            }
        }
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Nanoseconds per super-block of `row::<1>` (one token, cache-resident), per type.
    /// `cargo test --release -p ferrox-core --lib bench_q8k_rows -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn bench_q8k_rows() {
        use GgmlType::*;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let nb = 64;
        let y: Vec<BlockQ8K> = (0..nb)
            .map(|_| {
                let mut b = BlockQ8K {
                    d: 0.01,
                    ..Default::default()
                };
                b.qs.iter_mut().for_each(|q| *q = rng.gen_range(-127..=127));
                b
            })
            .collect();
        for ty in [
            Q2K, Q3K, IQ4XS, IQ3S, IQ3XXS, IQ2S, IQ2XS, IQ2XXS, IQ1M, IQ1S, TQ2_0, TQ1_0,
        ] {
            let rb = ty.row_bytes(nb * QK_K).unwrap();
            let mut w: Vec<u8> = (0..rb).map(|_| rng.gen()).collect();
            // Every byte below 0x40: finite f16 factors (the timing does not depend on values).
            w.iter_mut().for_each(|b| *b &= 0x3F);
            let mut out = [0f32; 1];
            let reps = 1000;
            let mut best = f64::MAX;
            for _ in 0..25 {
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    // SAFETY: AVX-512 is present on the machines this is run on.
                    unsafe { row::<1>(ty, std::hint::black_box(&w), [&y], &mut out) };
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            println!(
                "{:>7} {:6.1} ns/block",
                ty.name(),
                best * 1e9 / (reps * nb) as f64
            );
        }
    }
}
