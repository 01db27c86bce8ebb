//! AVX2 kernels for the 256-element types paired with Q8_K that have no special-cased kernel:
//! Q2_K, Q3_K, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0
//! (ggml-cpu/arch/x86/quants.c `ggml_vec_dot_*_q8_K` compute the same integer sums).
//!
//! Each super-block is decoded once for the token group into eight 32-byte vectors of weight
//! magnitudes `u`, eight sign vectors `s` (nonzero bytes: the weight's sign) and eight vectors
//! of i16 scales (one per 16 weights). Per token: `maddubs(u, sign(y, s))` gives exact i16 pair
//! sums (|u| ≤ 127, |y| ≤ 127), `madd` with the scales exact i32 lanes; the lanes are converted
//! and fused-multiply-added with the block's float factor, and reduced once per row. Per
//! (row, token) the instruction sequence never depends on the group, so gemm equals gemv.
//!
//! IQ1 weights are decoded as `8·g ± 1` (the grid value and its ±1/8 shift, times 8), so the
//! shift's term stays inside the exact integer sum and the factor carries the 1/8.

#![allow(clippy::needless_range_loop)]

use crate::quant::blocks::*;
use crate::quant::iq::Decode;
use crate::quant::iq_grids::*;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// The Q8_K-paired types and their super-block decoders — `dec_*` as named where the macro
/// is used (this file's AVX2 ones, `avx512_q8k`'s native ones) — run through `$rows`: the
/// one table a new type joins.
macro_rules! q8k_dispatch {
    ($rows:ident, $ty:expr, $w:expr, $y:expr, $out:expr, $isa:literal) => {
        // SAFETY (every arm): the decoders need the features the calling kernel enables.
        match $ty {
            GgmlType::Q2K => $rows::<NT, _, true>($w, $y, $out, |x| unsafe { dec_q2k(x) }),
            GgmlType::Q3K => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_q3k(x) }),
            GgmlType::IQ4XS => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq4xs(x) }),
            GgmlType::IQ2XXS => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq2xxs(x) }),
            GgmlType::IQ2XS => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq2xs(x) }),
            GgmlType::IQ2S => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq2s(x) }),
            GgmlType::IQ3XXS => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq3xxs(x) }),
            GgmlType::IQ3S => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq3s(x) }),
            GgmlType::IQ1S => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq1s(x) }),
            GgmlType::IQ1M => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_iq1m(x) }),
            GgmlType::TQ1_0 => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_tq1_0(x) }),
            GgmlType::TQ2_0 => $rows::<NT, _, false>($w, $y, $out, |x| unsafe { dec_tq2_0(x) }),
            other => unreachable!(concat!("no ", $isa, " Q8_K kernel for {:?}"), other),
        }
    };
}
pub(super) use q8k_dispatch;

/// Whether `ty` has a kernel here.
pub(super) fn has_kernel(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Q2K | Q3K | IQ4XS | IQ2XXS | IQ2XS | IQ2S | IQ3XXS | IQ3S | IQ1S | IQ1M | TQ1_0 | TQ2_0
    )
}

/// `out[t] = dot(row w, token t)` for a row of type `ty` (one of `has_kernel`): `w` is whole
/// blocks of `ty` and each `y[t]` has as many blocks (asserted).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn row<const NT: usize>(
    ty: GgmlType,
    w: &[u8],
    y: [&[BlockQ8K]; NT],
    out: &mut [f32; NT],
) {
    fn b<B: Block>(w: &[u8]) -> &[B] {
        as_blocks(w).expect("whole blocks")
    }
    q8k_dispatch!(rows, ty, b(w), y, out, "AVX2")
}

/// One decoded super-block (the decoders below are `#[inline(always)]`, which a
/// `target_feature` function may not be: a decoder left as a call passes these vectors
/// through memory): magnitudes, signs, scales per 32 weights (`[s_lo ×8 | s_hi ×8]`
/// i16, the lanes of `maddubs`' pair sums), the float factor of the scale term, and for
/// types with mins (Q2_K) the 16 mins as i16 and their factor.
pub(super) struct Sb {
    pub(super) u: [__m256i; 8],
    pub(super) s: [__m256i; 8],
    pub(super) sc: [__m256i; 8],
    pub(super) f: f32,
    pub(super) mins: __m256i,
    pub(super) fmin: f32,
}

impl Sb {
    /// A decoded super-block of a type without per-block minimums (the i-quants, ternary).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn signed(u: [__m256i; 8], s: [__m256i; 8], sc: [__m256i; 8], f: f32) -> Sb {
        Sb {
            u,
            s,
            sc,
            f,
            mins: _mm256_setzero_si256(),
            fmin: 0.0,
        }
    }
}

/// The 4-bit scales of an IQ2_XS / IQ2_S / IQ3_S super-block (two per byte) as `2·s + 1`.
#[inline]
fn odd_scales<const N: usize>(scales: &[u8]) -> [i16; N] {
    std::array::from_fn(|k| 2 * ((scales[k / 2] >> (4 * (k % 2))) & 0x0F) as i16 + 1)
}

/// Σ over the row's blocks of `f·d_y·Σ sc·u·(±y)` (minus `fmin·d_y·Σ mins·bsums`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows<const NT: usize, B, const MINS: bool>(
    w: &[B],
    y: [&[BlockQ8K]; NT],
    out: &mut [f32; NT],
    decode: impl Fn(&B) -> Sb,
) {
    for t in 0..NT {
        assert_eq!(y[t].len(), w.len(), "activation blocks");
    }
    let mut acc = [_mm256_setzero_ps(); NT];
    let mut accm = [_mm256_setzero_ps(); NT];
    for (i, x) in w.iter().enumerate() {
        let sb = decode(x);
        for t in 0..NT {
            let yb = &y[t][i];
            let mut sum = _mm256_setzero_si256();
            for j in 0..8 {
                let yq = load(&yb.qs[32 * j..]);
                let p = _mm256_maddubs_epi16(sb.u[j], _mm256_sign_epi8(yq, sb.s[j]));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, sb.sc[j]));
            }
            let f = _mm256_set1_ps(sb.f * yb.d);
            acc[t] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(sum), acc[t]);
            if MINS {
                accm[t] = add_mins(accm[t], sb.mins, sb.fmin, yb);
            }
        }
    }
    for t in 0..NT {
        out[t] = if MINS {
            hsum(acc[t]) - hsum(accm[t])
        } else {
            hsum(acc[t])
        };
    }
}

/// `acc + fmin·d_y·Σ mins·bsums` per lane: a super-block's min correction against `yb` (the
/// 16 i16 `mins` pair with `yb`'s 16 block sums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn add_mins(acc: __m256, mins: __m256i, fmin: f32, yb: &BlockQ8K) -> __m256 {
    // SAFETY: bsums is 16 i16 = 32 bytes.
    let bs = unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) };
    let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins));
    _mm256_fmadd_ps(_mm256_set1_ps(fmin * yb.d), m, acc)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

// ---- decoding helpers ---------------------------------------------------------------------

/// The 8 scale vectors from 16 scales (one per 16 weights).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales16(s: [i16; 16]) -> [__m256i; 8] {
    {
        let mut v = [_mm256_setzero_si256(); 8];
        for k in 0..8 {
            v[k] = _mm256_set_m128i(_mm_set1_epi16(s[2 * k + 1]), _mm_set1_epi16(s[2 * k]));
        }
        v
    }
}

/// The 8 scale vectors from 8 scales (one per 32 weights).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales32(s: [i16; 8]) -> [__m256i; 8] {
    let mut v = [_mm256_setzero_si256(); 8];
    for k in 0..8 {
        v[k] = _mm256_set1_epi16(s[k]);
    }
    v
}

/// Signed weights `v` as (magnitudes, signs).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn split(v: __m256i) -> (__m256i, __m256i) {
    (_mm256_sign_epi8(v, v), v)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load<T: Copy>(p: &[T]) -> __m256i {
    assert!(std::mem::size_of_val(p) >= 32);
    // SAFETY: 32 bytes readable (asserted).
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// Four u64 grid entries (elements 0..8 from `a`, ...).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid64(a: u64, b: u64, c: u64, d: u64) -> __m256i {
    _mm256_set_epi64x(d as i64, c as i64, b as i64, a as i64)
}

/// Eight u32 grid entries in element order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn grid32(g: [u32; 8]) -> __m256i {
    {
        _mm256_set_epi32(
            g[7] as i32,
            g[6] as i32,
            g[5] as i32,
            g[4] as i32,
            g[3] as i32,
            g[2] as i32,
            g[1] as i32,
            g[0] as i32,
        )
    }
}

/// `KSIGNS_IQ2XS` expanded: byte j is −1 where bit j is set, else +1.
const KSIGNS64: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        let s = KSIGNS_IQ2XS[i];
        let mut j = 0;
        while j < 8 {
            let b: u64 = if (s >> j) & 1 == 1 { 0xFF } else { 0x01 };
            t[i] |= b << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

/// Bit j of `x` → byte j = 0xFF or 0x00.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn bytes_from_bits(x: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    let v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1))
}

/// Bit j of `x` → byte j = −1 if set, else +1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn signs_from_bits(x: u32) -> __m256i {
    _mm256_or_si256(bytes_from_bits(x), _mm256_set1_epi8(1))
}

#[inline(always)]
pub(super) fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes(b[i..i + 2].try_into().expect("2 bytes"))
}

#[inline(always)]
pub(super) fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
pub(super) fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn zero() -> [__m256i; 8] {
    [_mm256_setzero_si256(); 8]
}

// ---- per-type decoders --------------------------------------------------------------------

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_q2k(b: &BlockQ2K) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let m3 = _mm256_set1_epi8(3);
        let mut u = zero();
        for c in 0..2 {
            let v = load(&b.qs[32 * c..]);
            for j in 0..4 {
                let sh = _mm_cvtsi32_si128(2 * j as i32);
                u[4 * c + j] = _mm256_and_si256(_mm256_srl_epi16(v, sh), m3);
            }
        }
        let sc: [i16; 16] = std::array::from_fn(|k| (b.scales[k] & 0x0F) as i16);
        // 16 scale bytes readable.
        let sc_bytes = _mm_loadu_si128(b.scales.as_ptr().cast());
        let mn = _mm256_cvtepu8_epi16(_mm_srli_epi16(sc_bytes, 4));
        Sb {
            u,
            s: [_mm256_set1_epi8(1); 8],
            sc: scales16(sc),
            f: f16_to_f32(b.d),
            mins: _mm256_and_si256(mn, _mm256_set1_epi16(0x0F)),
            fmin: f16_to_f32(b.dmin),
        }
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_q3k(b: &BlockQ3K) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (m3, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        let hm = load(&b.hmask);
        let (mut u, mut s) = (zero(), zero());
        for c in 0..2 {
            let v = load(&b.qs[32 * c..]);
            for j in 0..4 {
                let k = 4 * c + j;
                let low =
                    _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let high = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(k as i32)), one);
                // q = low − 4 where the high bit is clear.
                let q = _mm256_sub_epi8(
                    _mm256_or_si256(low, _mm256_slli_epi16(high, 2)),
                    _mm256_set1_epi8(4),
                );
                (u[k], s[k]) = split(q);
            }
        }
        let sc = q3k_scales(&b.scales).map(|v| v as i16);
        Sb::signed(u, s, scales16(sc), f16_to_f32(b.d))
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq4xs(b: &BlockIQ4XS) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        // 16 bytes readable.
        let lut = _mm_loadu_si128(IQ4NL_VALUES.as_ptr().cast());
        let lut = _mm256_broadcastsi128_si256(lut);
        let (mut u, mut s) = (zero(), zero());
        for ib in 0..8 {
            // 16 bytes readable at 16 · ib < 128.
            let v = _mm_loadu_si128(b.qs[16 * ib..].as_ptr().cast());
            let v = _mm256_broadcastsi128_si256(v);
            let v = _mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0));
            let v = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
            (u[ib], s[ib]) = split(_mm256_shuffle_epi8(lut, v));
        }
        let sc = iq4xs_scales(b).map(|v| v as i16);
        Sb::signed(u, s, scales32(sc), f16_to_f32(b.d))
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq2xxs(b: &BlockIQ2XXS) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        let mut sc = [0i16; 8];
        for ib in 0..8 {
            let idx = &b.qs[8 * ib..8 * ib + 4];
            let sg = u32_at(&b.qs, 8 * ib + 4);
            let g = |l: usize| IQ2XXS_GRID[idx[l] as usize];
            u[ib] = grid64(g(0), g(1), g(2), g(3));
            let k = |l: usize| KSIGNS64[((sg >> (7 * l)) & 127) as usize];
            s[ib] = grid64(k(0), k(1), k(2), k(3));
            sc[ib] = 2 * (sg >> 28) as i16 + 1;
        }
        Sb::signed(u, s, scales32(sc), f16_to_f32(b.d) * 0.125)
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq2xs(b: &BlockIQ2XS) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        for ib in 0..8 {
            let q = |l: usize| u16_at(&b.qs, 8 * ib + 2 * l);
            let g = |l: usize| IQ2XS_GRID[(q(l) & 511) as usize];
            let k = |l: usize| KSIGNS64[(q(l) >> 9) as usize];
            u[ib] = grid64(g(0), g(1), g(2), g(3));
            s[ib] = grid64(k(0), k(1), k(2), k(3));
        }
        let sc: [i16; 16] = odd_scales(&b.scales);
        Sb::signed(u, s, scales16(sc), f16_to_f32(b.d) * 0.125)
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq2s(b: &BlockIQ2S) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        for ib in 0..8 {
            let qh = b.qh[ib] as usize;
            let g = |l: usize| IQ2S_GRID[b.qs[4 * ib + l] as usize | ((qh >> (2 * l)) & 3) << 8];
            u[ib] = grid64(g(0), g(1), g(2), g(3));
            s[ib] = signs_from_bits(u32_at(&b.qs, 32 + 4 * ib));
        }
        let sc: [i16; 16] = odd_scales(&b.scales);
        Sb::signed(u, s, scales16(sc), f16_to_f32(b.d) * 0.125)
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq3xxs(b: &BlockIQ3XXS) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        let mut sc = [0i16; 8];
        for ib in 0..8 {
            let sg = u32_at(&b.qs, 64 + 4 * ib);
            u[ib] = grid32(std::array::from_fn(|k| {
                IQ3XXS_GRID[b.qs[8 * ib + k] as usize]
            }));
            let k = |l: usize| KSIGNS64[((sg >> (7 * l)) & 127) as usize];
            s[ib] = grid64(k(0), k(1), k(2), k(3));
            sc[ib] = 2 * (sg >> 28) as i16 + 1;
        }
        Sb::signed(u, s, scales32(sc), f16_to_f32(b.d) * 0.25)
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq3s(b: &BlockIQ3S) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        for ib in 0..8 {
            let qh = b.qh[ib] as usize;
            u[ib] = grid32(std::array::from_fn(|k| {
                IQ3S_GRID[b.qs[8 * ib + k] as usize | ((qh >> k) & 1) << 8]
            }));
            s[ib] = signs_from_bits(u32_at(&b.signs, 4 * ib));
        }
        let sc: [i16; 8] = odd_scales(&b.scales);
        Sb::signed(u, s, scales32(sc), f16_to_f32(b.d))
    }
}

/// `IQ1S_GRID` times 8 (bytes −8, 0, 8).
pub(super) const IQ1S_GRID8: [u64; 2048] = {
    let mut t = [0u64; 2048];
    let mut i = 0;
    while i < 2048 {
        let mut j = 0;
        while j < 8 {
            let g = ((IQ1S_GRID[i] >> (8 * j)) & 0xFF) as u8 as i8;
            t[i] |= ((g.wrapping_mul(8) as u8) as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

/// An IQ1 group of 8: `8·g + δ` with δ = −1 when `neg`, else +1, as a u64 of bytes.
#[inline(always)]
fn iq1_group(idx: usize, neg: bool) -> u64 {
    let delta = if neg { 0xFFu64 } else { 0x01 } * 0x0101_0101_0101_0101;
    // Bytewise addition modulo 256 (no carry crosses a byte): add the low 7 bits, then fix
    // the top bit with the operands' top bits.
    let g = IQ1S_GRID8[idx];
    let lo = (g & 0x7F7F_7F7F_7F7F_7F7F) + (delta & 0x7F7F_7F7F_7F7F_7F7F);
    lo ^ ((g ^ delta) & 0x8080_8080_8080_8080)
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq1s(b: &BlockIQ1S) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        let mut sc = [0i16; 8];
        for ib in 0..8 {
            let qh = u16_at(&b.qh, 2 * ib) as usize;
            let neg = qh & 0x8000 != 0;
            let g =
                |l: usize| iq1_group(b.qs[4 * ib + l] as usize | ((qh >> (3 * l)) & 7) << 8, neg);
            (u[ib], s[ib]) = split(grid64(g(0), g(1), g(2), g(3)));
            sc[ib] = 2 * ((qh >> 12) & 7) as i16 + 1;
        }
        Sb::signed(u, s, scales32(sc), f16_to_f32(b.d) * 0.125)
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_iq1m(b: &BlockIQ1M) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (mut u, mut s) = (zero(), zero());
        for ib in 0..8 {
            let g = |l: usize| {
                let h = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) as usize;
                iq1_group(b.qs[4 * ib + l] as usize | (h & 7) << 8, h & 8 != 0)
            };
            (u[ib], s[ib]) = split(grid64(g(0), g(1), g(2), g(3)));
        }
        let sc: [i16; 16] = std::array::from_fn(|k| {
            2 * ((u16_at(&b.scales, 2 * (k / 4)) >> (3 * (k % 4))) & 7) as i16 + 1
        });
        Sb::signed(u, s, scales16(sc), f16_to_f32(b.d()) * 0.125)
    }
}

/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_tq2_0(b: &BlockTQ2_0) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let (m3, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        let (mut u, mut s) = (zero(), zero());
        for c in 0..2 {
            let v = load(&b.qs[32 * c..]);
            for l in 0..4 {
                let q = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * l as i32)), m3);
                (u[4 * c + l], s[4 * c + l]) = split(_mm256_sub_epi8(q, one));
            }
        }
        Sb::signed(u, s, [_mm256_set1_epi16(1); 8], f16_to_f32(b.d))
    }
}

/// TQ1_0 is rare: its base-3 digits are decoded by the scalar reference.
/// # Safety
/// AVX2, FMA and F16C are present.
#[inline(always)]
pub(super) unsafe fn dec_tq1_0(b: &BlockTQ1_0) -> Sb {
    // SAFETY: the features are present (the caller's contract).
    unsafe {
        let v = b.decode().v;
        {
            let mut u = zero();
            let mut s = zero();
            for k in 0..8 {
                (u[k], s[k]) = split(load(&v[32 * k..]));
            }
            Sb::signed(u, s, [_mm256_set1_epi16(1); 8], f16_to_f32(b.d))
        }
    }
}
