//! AVX2 + FMA + F16C kernels (x86-64-v3). Signed×signed int8 products use the
//! `sign`/`maddubs` idiom (|w| as u8 times sign-adjusted activation); activations never hold
//! -128, so nothing saturates. Each kernel is generic over `NT` tokens sharing one decode of
//! the weight block; every token's instruction sequence is the same whatever `NT` is.

// Kernels index parallel per-token arrays by token number and take many small arguments on
// purpose (they inline into one loop nest).
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use super::avx2_k::{bytes_from_bits, hsum};
use super::ActBuf;
use super::BlockArgs;
use crate::quant::blocks::*;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// [`BlockArgs`] with AVX2, tokens in groups of at most 4.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `a` as [`BlockArgs`] says, `acts` in `ty`'s
/// activation format; `out.len()` = rows × nt.
pub(super) unsafe fn dot_block(a: BlockArgs<'_>, out: &mut [f32]) {
    let mut t = 0;
    while t < a.nt {
        let n = (a.nt - t).min(4);
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            match n {
                4 => group::<4>(a, t, out),
                3 => group::<3>(a, t, out),
                2 => group::<2>(a, t, out),
                _ => group::<1>(a, t, out),
            }
        }
        t += n;
    }
}

/// Tokens `t0 + t..t0 + t + NT` against every row of `w`.
#[target_feature(enable = "avx2,fma,f16c")]
fn group<const NT: usize>(a: BlockArgs<'_>, t: usize, out: &mut [f32]) {
    let (ty, w, acts, t0, nt) = (a.ty, a.w, a.acts, a.t0, a.nt);
    let cols = acts.cols();
    let row_bytes = ty.row_bytes(cols).expect("validated by dot_block");
    let first = t0 + t;
    fn b<B: Block>(w: &[u8]) -> &[B] {
        as_blocks(w).expect("row length checked by dot_block")
    }
    // Runs `$k(row blocks, activations, &mut [f32; NT])` for every row.
    macro_rules! each_row {
        ($y:expr, $k:expr) => {{
            let y = $y;
            for (r, wr) in w.chunks_exact(row_bytes).enumerate() {
                let mut o = [0f32; NT];
                $k(wr, y, &mut o);
                out[r * nt + t..r * nt + t + NT].copy_from_slice(&o);
            }
        }};
    }
    let f32_rows = || -> [&[f32]; NT] {
        std::array::from_fn(|k| &acts.f32[(first + k) * cols..(first + k + 1) * cols])
    };
    let q8k_rows = || -> [&[BlockQ8K]; NT] {
        let nb = cols / QK_K;
        std::array::from_fn(|k| &acts.q8k[(first + k) * nb..(first + k + 1) * nb])
    };
    let q8_1_rows = || -> [&[BlockQ8_1]; NT] {
        let nb = cols / 32;
        std::array::from_fn(|k| &acts.q8_1[(first + k) * nb..(first + k + 1) * nb])
    };
    match ty {
        GgmlType::F32 => each_row!(f32_rows(), |wr, y, o| float::<NT, F32>(wr, y, o)),
        GgmlType::F16 => each_row!(f32_rows(), |wr, y, o| float::<NT, F16>(wr, y, o)),
        GgmlType::BF16 => each_row!(f32_rows(), |wr, y, o| float::<NT, BF16>(wr, y, o)),
        GgmlType::Q4_0 => each_row!(rows_q8::<NT>(acts, first), |wr, y, o| q4_0::<NT>(
            b(wr),
            y,
            o
        )),
        GgmlType::Q5_0 => each_row!(rows_q8::<NT>(acts, first), |wr, y, o| q5_0::<NT>(
            b(wr),
            y,
            o
        )),
        GgmlType::Q8_0 => each_row!(rows_q8::<NT>(acts, first), |wr, y, o| q8_0_k::<NT>(
            b(wr),
            y,
            o
        )),
        GgmlType::IQ4NL => each_row!(rows_q8::<NT>(acts, first), |wr, y, o| iq4nl::<NT>(
            b(wr),
            y,
            o
        )),
        GgmlType::MXFP4 => each_row!(rows_q8::<NT>(acts, first), |wr, y, o| mxfp4::<NT>(
            b(wr),
            y,
            o
        )),
        GgmlType::Q4_1 => each_row!(q8_1_rows(), |wr, y, o| q4_1::<NT>(b(wr), y, o)),
        GgmlType::Q5_1 => each_row!(q8_1_rows(), |wr, y, o| q5_1::<NT>(b(wr), y, o)),
        GgmlType::Q4K => each_row!(q8k_rows(), |wr, y, o| q4k::<NT>(b(wr), y, o)),
        GgmlType::Q5K => each_row!(q8k_rows(), |wr, y, o| q5k::<NT>(b(wr), y, o)),
        GgmlType::Q6K => each_row!(q8k_rows(), |wr, y, o| q6k::<NT>(b(wr), y, o)),
        ty if super::avx2_k::has_kernel(ty) => {
            each_row!(q8k_rows(), |wr, y, o| super::avx2_k::row::<NT>(
                ty, wr, y, o
            ))
        }
        other => unreachable!("no AVX2 kernel for {other:?}"),
    }
}

// ---- helpers ------------------------------------------------------------------------------

/// An f16 scale as f32 (F16C; exact, as `f16_to_f32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16(h: [u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(
        _mm_cvtsi32_si128(u16::from_le_bytes(h) as i32),
    ))
}

/// 32 bytes at `p` (unaligned).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load32<T>(p: &[T]) -> __m256i {
    debug_assert!(std::mem::size_of_val(p) >= 32);
    // SAFETY: callers pass slices of at least 32 bytes (debug-checked); loadu has no alignment
    // requirement.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// Σ over the 8 groups of 32 of `scales[j]` · (`q[j]` · `yb`'s group j), as i32 lanes:
/// a K-quant super-block's unsigned quants against one Q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scaled_sums(q: &[__m256i; 8], scales: &[__m256i; 8], yb: &BlockQ8K) -> __m256i {
    let mut s = _mm256_setzero_si256();
    for j in 0..8 {
        let p = _mm256_maddubs_epi16(q[j], load32(&yb.qs[32 * j..]));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, scales[j]));
    }
    s
}

// ---- 32-element blocks against Q8_0 --------------------------------------------------------

/// Activation rows of a Q8_0-paired kernel: quants and f32 scales.
#[derive(Clone, Copy)]
struct Q8Rows<'a, const NT: usize> {
    q: [&'a [BlockQ8_0]; NT],
    d: [&'a [f32]; NT],
}

/// Blocks whose scales are converted ahead of the integer work, per chunk.
const SCALE_CHUNK: usize = 32;

/// Loop over the blocks of a Q8_0-paired row. Weight scales of a chunk of blocks are first
/// gathered with scalar loads and converted eight at a time (keeping f16 conversions off the
/// vector pipes in the hot loop). `$decode(block)` gives the 32 signed weights; they are
/// multiplied with the sign idiom (|w| once per block, the sign moved onto each token's
/// activations). Even and odd blocks feed two accumulators (two FMA chains).
macro_rules! q8_family {
    ($w:expr, $y:expr, $out:expr, $decode:expr) => {
        q8_family!($w, $y, $out, $decode, |wc, dw: &mut [f32; SCALE_CHUNK]| {
            f16_scales(wc, dw)
        })
    };
    // `$scales(blocks, dw)` writes the f32 scales of a chunk of blocks.
    ($w:expr, $y:expr, $out:expr, $decode:expr, $scales:expr) => {{
        let (w, y) = ($w, $y);
        for t in 0..NT {
            assert!(y.q[t].len() == w.len() && y.d[t].len() == w.len());
        }
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); 2]; NT];
        let mut dw = [0f32; SCALE_CHUNK];
        let mut ds = [[0f32; SCALE_CHUNK]; NT];
        for c0 in (0..w.len()).step_by(SCALE_CHUNK) {
            let wc = &w[c0..(c0 + SCALE_CHUNK).min(w.len())];
            $scales(wc, &mut dw);
            // Per token, the block scale products d_w · d_y, eight at a time (the same f32
            // product the scalar reference forms per block).
            let full = wc.len() / 8 * 8;
            for t in 0..NT {
                let yd = &y.d[t][c0..c0 + wc.len()];
                for k in (0..full).step_by(8) {
                    // SAFETY: k + 8 <= wc.len() <= SCALE_CHUNK for dw, ds and yd.
                    unsafe {
                        let p = _mm256_mul_ps(
                            _mm256_loadu_ps(dw.as_ptr().add(k)),
                            _mm256_loadu_ps(yd.as_ptr().add(k)),
                        );
                        _mm256_storeu_ps(ds[t].as_mut_ptr().add(k), p);
                    }
                }
                for k in full..wc.len() {
                    ds[t][k] = dw[k] * yd[k];
                }
            }
            // One block into accumulator set `$a` (a literal, so accumulators stay in registers).
            macro_rules! block {
                ($j:expr, $a:literal) => {{
                    let j = $j;
                    let i = c0 + j;
                    // SAFETY: j < wc.len().
                    let x: __m256i = $decode(unsafe { wc.get_unchecked(j) });
                    let ax = _mm256_sign_epi8(x, x);
                    for t in 0..NT {
                        // SAFETY: lengths asserted above; i < w.len(); j < SCALE_CHUNK.
                        let (yb, d) = unsafe { (y.q[t].get_unchecked(i), ds[t].get_unchecked(j)) };
                        let yq = load32(&yb.qs);
                        let dot = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(ax, _mm256_sign_epi8(yq, x)),
                            ones,
                        );
                        acc[t][$a] = _mm256_fmadd_ps(
                            _mm256_broadcast_ss(d),
                            _mm256_cvtepi32_ps(dot),
                            acc[t][$a],
                        );
                    }
                }};
            }
            let mut j = 0;
            while j + 2 <= wc.len() {
                block!(j, 0);
                block!(j + 1, 1);
                j += 2;
            }
            if j < wc.len() {
                block!(j, 0);
            }
        }
        for t in 0..NT {
            $out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
        }
    }};
}

/// Blocks with one f16 scale `d`.
trait F16Scale {
    fn d(&self) -> [u8; 2];
}

macro_rules! f16_scale {
    ($($b:ty),*) => {$(
        impl F16Scale for $b {
            fn d(&self) -> [u8; 2] {
                self.d
            }
        }
    )*};
}
f16_scale!(BlockQ4_0, BlockQ5_0, BlockQ8_0, BlockIQ4NL);

/// The f16 block scales of a chunk as f32, gathered with scalar loads and converted eight at a
/// time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_scales<B: F16Scale>(wc: &[B], dw: &mut [f32; SCALE_CHUNK]) {
    let mut h = [0u16; SCALE_CHUNK];
    for (h, b) in h.iter_mut().zip(wc) {
        *h = u16::from_le_bytes(b.d());
    }
    for k in 0..SCALE_CHUNK / 8 {
        // SAFETY: 8 u16 read from and 8 f32 written to in-bounds stack arrays.
        unsafe {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().add(8 * k).cast()));
            _mm256_storeu_ps(dw.as_mut_ptr().add(8 * k), v);
        }
    }
}

/// 16 nibbles → 32 unsigned bytes: low nibbles are elements 0..16, high nibbles 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn nibbles_bcast(qs: &[u8; 16]) -> __m256i {
    // SAFETY: 16 bytes readable.
    let v = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(qs.as_ptr().cast())) };
    let v = _mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

/// Q5_0 weights as signed bytes q - 16: where the fifth bit is clear, setting the high nibble
/// to 0xF turns the 4-bit value v into the byte of v - 16 (ggml's `bytes_from_bits` idiom).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q5_0(b: &BlockQ5_0) -> __m256i {
    let hi = _mm256_andnot_si256(
        bytes_from_bits(u32::from_le_bytes(b.qh)),
        _mm256_set1_epi8(0xF0u8 as i8),
    );
    _mm256_or_si256(nibbles_bcast(&b.qs), hi)
}

/// Q4_0 weights as signed bytes q - 8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q4_0(b: &BlockQ4_0) -> __m256i {
    _mm256_sub_epi8(nibbles_bcast(&b.qs), _mm256_set1_epi8(8))
}

fn rows_q8<const NT: usize>(acts: &ActBuf, t0: usize) -> Q8Rows<'_, NT> {
    let nb = acts.cols() / 32;
    let r = |k: usize| (t0 + k) * nb..(t0 + k + 1) * nb;
    Q8Rows {
        q: std::array::from_fn(|k| &acts.q8_0[r(k)]),
        d: std::array::from_fn(|k| &acts.d8[r(k)]),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q4_0<const NT: usize>(w: &[BlockQ4_0], y: Q8Rows<'_, NT>, out: &mut [f32; NT]) {
    q8_family!(w, y, out, |b: &BlockQ4_0| decode_q4_0(b))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q5_0<const NT: usize>(w: &[BlockQ5_0], y: Q8Rows<'_, NT>, out: &mut [f32; NT]) {
    q8_family!(w, y, out, |b: &BlockQ5_0| decode_q5_0(b))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q8_0_k<const NT: usize>(w: &[BlockQ8_0], y: Q8Rows<'_, NT>, out: &mut [f32; NT]) {
    q8_family!(w, y, out, |b: &BlockQ8_0| load32(&b.qs))
}

/// 32 codebook values from 16 bytes of nibbles (`pshufb` of the 16-entry table).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_lut(lut: &[i8; 16], qs: &[u8; 16]) -> __m256i {
    // SAFETY: 16 bytes readable.
    let t = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(lut.as_ptr().cast())) };
    _mm256_shuffle_epi8(t, nibbles_bcast(qs))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn iq4nl<const NT: usize>(w: &[BlockIQ4NL], y: Q8Rows<'_, NT>, out: &mut [f32; NT]) {
    q8_family!(w, y, out, |b: &BlockIQ4NL| decode_lut(&IQ4NL_VALUES, &b.qs))
}

/// MXFP4: the doubled E2M1 values with half the E8M0 scale (as the scalar reference).
#[target_feature(enable = "avx2,fma,f16c")]
fn mxfp4<const NT: usize>(w: &[BlockMXFP4], y: Q8Rows<'_, NT>, out: &mut [f32; NT]) {
    q8_family!(
        w,
        y,
        out,
        |b: &BlockMXFP4| decode_lut(&MXFP4_VALUES, &b.qs),
        |wc: &[BlockMXFP4], dw: &mut [f32; SCALE_CHUNK]| {
            for (d, b) in dw.iter_mut().zip(wc) {
                *d = e8m0_to_f32_half(b.e);
            }
        }
    )
}

// ---- Q4_1 / Q5_1 against Q8_1: d_w·d_y·Σ q·y + m_w·s_y per block ------------------------

/// Unsigned weights (0..32) with the block's f16 scale and min; `Σ q·y` is exact with
/// `maddubs` (q ≤ 31, |y| ≤ 127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q_1<const NT: usize, B>(
    w: &[B],
    y: [&[BlockQ8_1]; NT],
    out: &mut [f32; NT],
    decode: impl Fn(&B) -> (__m256i, [u8; 2], [u8; 2]),
) {
    for t in 0..NT {
        assert_eq!(y[t].len(), w.len(), "activation blocks");
    }
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); NT];
    let mut macc = [0f32; NT];
    for (i, b) in w.iter().enumerate() {
        let (q, d, m) = decode(b);
        let (d, m) = (f16(d), f16(m));
        for t in 0..NT {
            let yb = &y[t][i];
            let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(&yb.qs)), ones);
            let f = _mm256_set1_ps(d * f16(yb.d));
            acc[t] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(dot), acc[t]);
            macc[t] += m * f16(yb.s);
        }
    }
    for t in 0..NT {
        out[t] = hsum(acc[t]) + macc[t];
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q4_1<const NT: usize>(w: &[BlockQ4_1], y: [&[BlockQ8_1]; NT], out: &mut [f32; NT]) {
    q_1(w, y, out, |b| (nibbles_bcast(&b.qs), b.d, b.m))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q5_1<const NT: usize>(w: &[BlockQ5_1], y: [&[BlockQ8_1]; NT], out: &mut [f32; NT]) {
    q_1(w, y, out, |b| {
        let hi = _mm256_and_si256(
            bytes_from_bits(u32::from_le_bytes(b.qh)),
            _mm256_set1_epi8(0x10),
        );
        (_mm256_or_si256(nibbles_bcast(&b.qs), hi), b.d, b.m)
    })
}

// ---- K-quants against Q8_K: exact integer sums per super-block, in lanes; f32 lanes per row --

/// The unsigned 6-bit quants of half `c` (weights 128c..128c + 128) of a Q6_K block as four
/// vectors of 32 in ggml order: low nibbles of `ql` | bit pairs of `qh` shifted to bits 4..6.
///
/// # Safety
/// AVX2 is present; `c` < 2.
#[inline(always)]
pub(super) unsafe fn q6k_half(b: &BlockQ6K, c: usize) -> [__m256i; 4] {
    // SAFETY: the features are present and the loads stay inside `ql` (128 bytes) and `qh`
    // (64) for c < 2 (the caller's contract).
    unsafe {
        let (m4, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let ql0 = _mm256_loadu_si256(b.ql.as_ptr().add(64 * c).cast());
        let ql1 = _mm256_loadu_si256(b.ql.as_ptr().add(64 * c + 32).cast());
        let qh = _mm256_loadu_si256(b.qh.as_ptr().add(32 * c).cast());
        let low = |v: __m256i| _mm256_and_si256(v, m4);
        let high = |h: __m256i| _mm256_and_si256(h, m30);
        [
            _mm256_or_si256(low(ql0), high(_mm256_slli_epi16(qh, 4))),
            _mm256_or_si256(low(ql1), high(_mm256_slli_epi16(qh, 2))),
            _mm256_or_si256(low(_mm256_srli_epi16(ql0, 4)), high(qh)),
            _mm256_or_si256(
                low(_mm256_srli_epi16(ql1, 4)),
                high(_mm256_srli_epi16(qh, 2)),
            ),
        ]
    }
}

/// (scales, mins) of a Q4_K / Q5_K block as 8 bytes each.
#[inline]
pub(super) fn k4_scales_mins(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const M6: u32 = 0x3f3f_3f3f;
    const M4: u32 = 0x0f0f_0f0f;
    const M2: u32 = 0x0303_0303;
    let w0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let w1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let w2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let sc_lo = w0 & M6;
    let sc_hi = (w2 & M4) | (((w0 >> 6) & M2) << 4);
    let mn_lo = w1 & M6;
    let mn_hi = ((w2 >> 4) & M4) | (((w1 >> 6) & M2) << 4);
    let sc = ((sc_hi as u64) << 32 | sc_lo as u64).to_le_bytes();
    let mn = ((mn_hi as u64) << 32 | mn_lo as u64).to_le_bytes();
    (sc, mn)
}

/// Lanes of Σ_j mins[j] · (bsums[2j] + bsums[2j+1]) (four i32 partial sums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_min_lanes(mins: __m128i, y: &BlockQ8K) -> __m128i {
    let p = y.bsums.as_ptr().cast::<__m128i>();
    // SAFETY: bsums is 16 i16 = two 128-bit loads.
    let (b0, b1) = unsafe { (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1))) };
    _mm_madd_epi16(_mm_hadd_epi16(b0, b1), mins)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_ps128(s: __m128) -> f32 {
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Per-token f32 accumulators of a K-quant row: the scale term in 8 lanes, the min term in 4.
/// Reduced across lanes once per row (not once per super-block).
#[derive(Clone, Copy)]
struct KAcc {
    s: __m256,
    m: __m128,
}

impl KAcc {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn zero() -> KAcc {
        KAcc {
            s: _mm256_setzero_ps(),
            m: _mm_setzero_ps(),
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn total(self) -> f32 {
        hsum(self.s) - hsum_ps128(self.m)
    }
}

/// Shuffle masks broadcasting i16 lane `j` of a 128-bit half to all of a 256-bit vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn word_mask(j: usize) -> __m256i {
    let lo = (2 * j) as i8;
    let hi = lo + 1;
    _mm256_setr_epi8(
        lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
        hi, lo, hi, lo, hi, lo, hi, lo, hi,
    )
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k45<const NT: usize>(
    q: &[__m256i; 8],
    sc: [u8; 8],
    mn: [u8; 8],
    d: f32,
    dmin: f32,
    y: &[&[BlockQ8K]; NT],
    i: usize,
    acc: &mut [KAcc; NT],
) {
    // SAFETY: 8 bytes readable.
    let sc16 = _mm_cvtepu8_epi16(unsafe { _mm_loadl_epi64(sc.as_ptr().cast()) });
    let sc16 = _mm256_broadcastsi128_si256(sc16);
    let scales: [__m256i; 8] = std::array::from_fn(|j| _mm256_shuffle_epi8(sc16, word_mask(j)));
    // SAFETY: 8 bytes readable.
    let mins = _mm_cvtepu8_epi16(unsafe { _mm_loadl_epi64(mn.as_ptr().cast()) });
    for t in 0..NT {
        let yb = &y[t][i];
        let s = scaled_sums(q, &scales, yb);
        let a = &mut acc[t];
        a.s = _mm256_fmadd_ps(_mm256_set1_ps(yb.d * d), _mm256_cvtepi32_ps(s), a.s);
        let m = _mm_cvtepi32_ps(k4_min_lanes(mins, yb));
        a.m = _mm_fmadd_ps(_mm_set1_ps(yb.d * dmin), m, a.m);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q4k<const NT: usize>(w: &[BlockQ4K], y: [&[BlockQ8K]; NT], out: &mut [f32; NT]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [KAcc::zero(); NT];
    for (i, b) in w.iter().enumerate() {
        let (sc, mn) = k4_scales_mins(&b.scales);
        let mut q = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            let v = load32(&b.qs[32 * c..]);
            q[2 * c] = _mm256_and_si256(v, m4);
            q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        k45(&q, sc, mn, f16(b.d), f16(b.dmin), &y, i, &mut acc);
    }
    *out = std::array::from_fn(|t| acc[t].total());
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q5k<const NT: usize>(w: &[BlockQ5K], y: [&[BlockQ8K]; NT], out: &mut [f32; NT]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = [KAcc::zero(); NT];
    for (i, b) in w.iter().enumerate() {
        let (sc, mn) = k4_scales_mins(&b.scales);
        let hb = load32(&b.qh);
        let mut q = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            let v = load32(&b.qs[32 * c..]);
            let h0 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * c as i32)), one);
            let h1 = _mm256_and_si256(
                _mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * c as i32 + 1)),
                one,
            );
            q[2 * c] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4));
            q[2 * c + 1] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                _mm256_slli_epi16(h1, 4),
            );
        }
        k45(&q, sc, mn, f16(b.d), f16(b.dmin), &y, i, &mut acc);
    }
    *out = std::array::from_fn(|t| acc[t].total());
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q6k<const NT: usize>(w: &[BlockQ6K], y: [&[BlockQ8K]; NT], out: &mut [f32; NT]) {
    // Lower half picks i16 lane 2k, upper half lane 2k + 1.
    let pair_mask = |k: usize| {
        let (a, b) = ((4 * k) as i8, (4 * k + 2) as i8);
        _mm256_setr_epi8(
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
        )
    };
    let masks: [__m256i; 4] = std::array::from_fn(pair_mask);
    let mut acc = [_mm256_setzero_ps(); NT];
    for (i, b) in w.iter().enumerate() {
        // SAFETY: 16 scale bytes readable.
        let sc_all = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(b.scales.as_ptr().cast()) });
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scales = [_mm256_setzero_si256(); 8];
        for c in 0..2 {
            // SAFETY: AVX2 (this function's features); c < 2.
            let quants = unsafe { q6k_half(b, c) };
            let half = if c == 0 {
                _mm256_permute2x128_si256(sc_all, sc_all, 0x00)
            } else {
                _mm256_permute2x128_si256(sc_all, sc_all, 0x11)
            };
            for k in 0..4 {
                q[4 * c + k] = quants[k];
                scales[4 * c + k] = _mm256_shuffle_epi8(half, masks[k]);
            }
        }
        let d = f16(b.d);
        for t in 0..NT {
            let yb = &y[t][i];
            let s = scaled_sums(&q, &scales, yb);
            // The stored quants are q + 32: subtract 32 · Σ scale · bsum (lane-wise, exact).
            let bs = load32(&yb.bsums);
            let off = _mm256_madd_epi16(bs, sc_all);
            let sumi = _mm256_sub_epi32(s, _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yb.d * d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    *out = std::array::from_fn(|t| hsum(acc[t]));
}

// ---- float weights against f32 activations -------------------------------------------------

const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// 8 weights at `p` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_w<const KIND: u8>(p: *const u8) -> __m256 {
    // SAFETY: forwarded to the caller (8 elements readable).
    unsafe {
        match KIND {
            F32 => load_f32(p),
            F16 => load_f16(p),
            _ => load_bf16(p),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32(p: *const u8) -> __m256 {
    // SAFETY: caller guarantees 32 readable bytes.
    unsafe { _mm256_loadu_ps(p.cast()) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16(p: *const u8) -> __m256 {
    // SAFETY: caller guarantees 16 readable bytes.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16(p: *const u8) -> __m256 {
    // SAFETY: caller guarantees 16 readable bytes.
    let h = unsafe { _mm_loadu_si128(p.cast()) };
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
}

/// Float weights of kind `KIND`; four independent accumulators of 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn float<const NT: usize, const KIND: u8>(w: &[u8], x: [&[f32]; NT], out: &mut [f32; NT]) {
    const fn es(kind: u8) -> usize {
        if kind == F32 {
            4
        } else {
            2
        }
    }
    let es_ = es(KIND);
    let n = w.len() / es_;
    let mut acc = [[_mm256_setzero_ps(); 4]; NT];
    let mut i = 0;
    while i + 32 <= n {
        for u in 0..4 {
            // SAFETY: i + 8u + 8 <= n elements of ES bytes.
            let wv = unsafe { load_w::<KIND>(w.as_ptr().add((i + 8 * u) * es_)) };
            for t in 0..NT {
                // SAFETY: x rows hold n elements.
                let xv = unsafe { _mm256_loadu_ps(x[t].as_ptr().add(i + 8 * u)) };
                acc[t][u] = _mm256_fmadd_ps(wv, xv, acc[t][u]);
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        // SAFETY: as above.
        let wv = unsafe { load_w::<KIND>(w.as_ptr().add(i * es_)) };
        for t in 0..NT {
            // SAFETY: as above.
            let xv = unsafe { _mm256_loadu_ps(x[t].as_ptr().add(i)) };
            acc[t][0] = _mm256_fmadd_ps(wv, xv, acc[t][0]);
        }
        i += 8;
    }
    for t in 0..NT {
        let a = &acc[t];
        let mut s = hsum(_mm256_add_ps(
            _mm256_add_ps(a[0], a[1]),
            _mm256_add_ps(a[2], a[3]),
        ));
        for j in i..n {
            let wv = match es_ {
                4 => f32::from_le_bytes(w[4 * j..4 * j + 4].try_into().expect("4 bytes")),
                _ => {
                    let mut tail = [0u8; 16];
                    tail[..2].copy_from_slice(&w[2 * j..2 * j + 2]);
                    // SAFETY: 16 readable bytes in `tail`.
                    _mm256_cvtss_f32(unsafe { load_w::<KIND>(tail.as_ptr()) })
                }
            };
            s += wv * x[t][j];
        }
        out[t] = s;
    }
}

// ---- activation quantizers (bit-identical to quant::act) ----------------------------------

/// Four vectors of 8 integral f32 values in [-128, 127] → 32 i8 in element order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_i8(v: [__m256; 4]) -> __m256i {
    let i: [__m256i; 4] = [
        _mm256_cvtps_epi32(v[0]),
        _mm256_cvtps_epi32(v[1]),
        _mm256_cvtps_epi32(v[2]),
        _mm256_cvtps_epi32(v[3]),
    ];
    let ab = _mm256_packs_epi32(i[0], i[1]);
    let cd = _mm256_packs_epi32(i[2], i[3]);
    let p = _mm256_packs_epi16(ab, cd);
    _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load8(x: &[f32], i: usize) -> __m256 {
    debug_assert!(i + 8 <= x.len());
    // SAFETY: callers stay within x (debug-checked).
    unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) }
}

/// # Safety
/// AVX2/FMA/F16C available; `x.len() == 32 * out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_row_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let one = _mm256_set1_ps(1.0);
    let half = _mm256_set1_ps(0.5);
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        let v: [__m256; 4] = std::array::from_fn(|k| load8(xb, 8 * k));
        let m = _mm256_max_ps(
            _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
            _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let nan = (0..4).fold(0, |a, k| {
            a | _mm256_movemask_ps(_mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q))
        });
        if nan != 0 || !amax.is_finite() {
            // Non-finite inputs take the reference path (its casts define the result).
            crate::quant::act::quantize_row_q8_0(xb, std::slice::from_mut(b));
            continue;
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f32_to_f16(d);
        let idv = _mm256_set1_ps(id);
        // Round half away from zero exactly: truncate, then step away when |frac| >= 0.5.
        let r: [__m256; 4] = std::array::from_fn(|k| {
            let p = _mm256_mul_ps(v[k], idv);
            let t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            let frac = _mm256_and_ps(_mm256_sub_ps(p, t), abs_mask);
            let away = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), one);
            let away = _mm256_or_ps(away, _mm256_and_ps(p, sign_mask));
            _mm256_add_ps(t, away)
        });
        // SAFETY: qs is 32 bytes.
        unsafe { _mm256_storeu_si256(b.qs.as_mut_ptr().cast(), pack_i8(r)) };
    }
}

/// # Safety
/// AVX2/FMA/F16C available; `x.len() == QK_K * out.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_row_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let lim = _mm256_set1_ps(127.0);
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut m = _mm256_setzero_ps();
        let mut nan = _mm256_setzero_ps();
        for k in 0..QK_K / 8 {
            let v = load8(xb, 8 * k);
            m = _mm256_max_ps(m, _mm256_and_ps(v, abs_mask));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if amax == 0.0 || !amax.is_finite() || _mm256_movemask_ps(nan) != 0 {
            // Zero and non-finite blocks take the reference path (its casts define the result).
            crate::quant::act::quantize_row_q8_k(xb, std::slice::from_mut(b));
            continue;
        }
        // The reference keeps the first element of largest magnitude (its sign sets the scale).
        let av = _mm256_set1_ps(amax);
        let mut max = amax;
        for k in 0..QK_K / 8 {
            let v = load8(xb, 8 * k);
            let hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), av, _CMP_EQ_OQ));
            if hit != 0 {
                max = xb[8 * k + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let isv = _mm256_set1_ps(iscale);
        for c in 0..QK_K / 32 {
            let r: [__m256; 4] = std::array::from_fn(|k| {
                let p = _mm256_mul_ps(isv, load8(xb, 32 * c + 8 * k));
                let p = _mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                _mm256_min_ps(p, lim)
            });
            // SAFETY: 32 bytes at 32 * c of the 256-byte qs.
            unsafe { _mm256_storeu_si256(b.qs.as_mut_ptr().add(32 * c).cast(), pack_i8(r)) };
        }
        for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = g.iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

// ---- f32 vector helpers for attention ------------------------------------------------------

/// # Safety
/// AVX2/FMA available; `a.len() == b.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 16 <= n {
        for u in 0..2 {
            acc[u] = _mm256_fmadd_ps(load8(a, i + 8 * u), load8(b, i + 8 * u), acc[u]);
        }
        i += 16;
    }
    if i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load8(a, i), load8(b, i), acc[0]);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(acc[0], acc[1]));
    for j in i..n {
        s += a[j] * b[j];
    }
    s
}

/// `scores[j] = f32_dot(q, key row start + j) · scale` (the same arithmetic as `f32_dot`).
///
/// # Safety
/// AVX2/FMA available; the key rows `start..start + scores.len()` hold the head's columns.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scores(
    q: &[f32],
    kv: super::HeadKv<'_>,
    start: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let d = q.len();
    for (j, sv) in scores.iter_mut().enumerate() {
        let b = (start + j) * kv.stride + kv.col;
        // SAFETY: lengths equal.
        *sv = unsafe { f32_dot(q, &kv.keys[b..b + d]) } * scale;
    }
}

/// `out = Σ_j (p_j · inv) · v_j` over the head's value rows, each element the same fused chain
/// in key order as repeated `f32_axpy` from zero; 32 columns at a time stay in registers.
///
/// # Safety
/// AVX2/FMA available; the value rows `start..start + p.len()` hold the head's columns.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn weighted_sum(
    p: &[f32],
    inv: f32,
    kv: super::HeadKv<'_>,
    start: usize,
    out: &mut [f32],
) {
    let d = out.len();
    let base = |j: usize| (start + j) * kv.stride + kv.col;
    let mut c = 0;
    while c + 32 <= d {
        let mut acc = [_mm256_setzero_ps(); 4];
        for (j, &pj) in p.iter().enumerate() {
            let a = _mm256_set1_ps(pj * inv);
            let v = &kv.values[base(j) + c..base(j) + c + 32];
            for u in 0..4 {
                acc[u] = _mm256_fmadd_ps(a, load8(v, 8 * u), acc[u]);
            }
        }
        for u in 0..4 {
            // SAFETY: c + 8u + 8 <= d.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * u), acc[u]) };
        }
        c += 32;
    }
    while c + 8 <= d {
        let mut acc = _mm256_setzero_ps();
        for (j, &pj) in p.iter().enumerate() {
            let v = &kv.values[base(j) + c..base(j) + c + 8];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(pj * inv), load8(v, 0), acc);
        }
        // SAFETY: c + 8 <= d.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c), acc) };
        c += 8;
    }
    for e in c..d {
        out[e] = 0.0;
        for (j, &pj) in p.iter().enumerate() {
            out[e] += pj * inv * kv.values[base(j) + e];
        }
    }
}

/// # Safety
/// AVX2/FMA available; `y.len() == x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let av = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        let v = _mm256_fmadd_ps(av, load8(x, i), load8(y, i));
        // SAFETY: i + 8 <= y.len().
        unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(i), v) };
        i += 8;
    }
    for j in i..n {
        y[j] += alpha * x[j];
    }
}
