//! AVX-512 (F, BW) kernels for the types of `avx2_k` (Q2_K, Q3_K, IQ4_XS, the IQ1 / IQ2 / IQ3
//! types, TQ1_0, TQ2_0): the same decoded super-blocks (`avx2_k::Sb`, magnitudes, signs,
//! scales), joined into 64-byte vectors once per block, then per token the integer work at
//! twice the width — signs applied with a masked subtraction (AVX-512 has no `vpsignb`),
//! `vpmaddubsw` and `vpmaddwd` with the scales, exact i32 lanes — and one fused multiply-add
//! with the block's float factor into 16 f32 lanes, reduced once per row.
//!
//! Tokens go in groups of up to 8 sharing one decode; each token's instruction sequence is the
//! same whatever the group, so gemm rows equal gemv bit for bit.

#![allow(clippy::needless_range_loop)]

use super::avx2_k::{self, Sb};
use super::BlockArgs;
use crate::quant::blocks::*;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

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
    unsafe { block(a, out) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn block(a: BlockArgs<'_>, out: &mut [f32]) {
    let cols = a.acts.cols();
    let nb = cols / QK_K;
    let row_bytes =
        a.ty.row_bytes(cols)
            .expect("validated by kernels::dot_block");
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
                    row::<$n>(a.ty, wr, std::array::from_fn(|k| y(t + k)), &mut res);
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

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn row<const NT: usize>(ty: GgmlType, w: &[u8], y: [&[BlockQ8K]; NT], out: &mut [f32; NT]) {
    fn b<B: Block>(w: &[u8]) -> &[B] {
        as_blocks(w).expect("whole blocks")
    }
    use avx2_k::*;
    q8k_dispatch!(rows, ty, b(w), y, out, "AVX-512")
}

/// Two 32-byte vectors as one 64-byte vector (`a` low).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn join(a: __m256i, b: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)
}

/// As `avx2_k::rows`, 64 bytes at a time.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn rows<const NT: usize, B, const MINS: bool>(
    w: &[B],
    y: [&[BlockQ8K]; NT],
    out: &mut [f32; NT],
    decode: impl Fn(&B) -> Sb,
) {
    for t in 0..NT {
        assert_eq!(y[t].len(), w.len(), "activation blocks");
    }
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); NT];
    let mut accm = [_mm256_setzero_ps(); NT];
    for (i, x) in w.iter().enumerate() {
        let sb = decode(x);
        let u: [__m512i; 4] = std::array::from_fn(|j| join(sb.u[2 * j], sb.u[2 * j + 1]));
        let neg: [__mmask64; 4] =
            std::array::from_fn(|j| _mm512_movepi8_mask(join(sb.s[2 * j], sb.s[2 * j + 1])));
        let sc: [__m512i; 4] = std::array::from_fn(|j| join(sb.sc[2 * j], sb.sc[2 * j + 1]));
        for t in 0..NT {
            let yb = &y[t][i];
            let mut sum = _mm512_setzero_si512();
            for j in 0..4 {
                // SAFETY: 64 bytes at 64 · j of the 256 quants.
                let yq = unsafe { _mm512_loadu_si512(yb.qs.as_ptr().add(64 * j).cast()) };
                let ys = _mm512_mask_sub_epi8(yq, neg[j], zero, yq);
                let p = _mm512_maddubs_epi16(u[j], ys);
                sum = _mm512_add_epi32(sum, _mm512_madd_epi16(p, sc[j]));
            }
            let f = _mm512_set1_ps(sb.f * yb.d);
            acc[t] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(sum), acc[t]);
            if MINS {
                // SAFETY: bsums is 16 i16 = 32 bytes.
                let bs = unsafe { _mm256_loadu_si256(yb.bsums.as_ptr().cast()) };
                let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, sb.mins));
                accm[t] = _mm256_fmadd_ps(_mm256_set1_ps(sb.fmin * yb.d), m, accm[t]);
            }
        }
    }
    for t in 0..NT {
        let s = _mm512_reduce_add_ps(acc[t]);
        out[t] = if MINS { s - avx2_k::hsum(accm[t]) } else { s };
    }
}
