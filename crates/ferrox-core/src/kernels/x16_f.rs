//! AVX-512 kernels for F32 / F16 / BF16 weights in the 16-row interleaved layout
//! (`quant::repack`: a column of a group's 16 rows is one vector) against f32 activations —
//! the register-tiled outer product of BLIS-style GEMM micro-kernels: per column, one load of
//! 16 weights feeds a fused multiply-add with each token's broadcast activation, up to 8
//! tokens in registers, and no horizontal sums. The row kernels (`avx2::float`) load an
//! activation vector per multiply-add instead, which bounds them well below the FMA rate.
//!
//! BF16 weights on CPUs with AVX-512 BF16 take bf16 activations instead (`gemm_bf16`):
//! `vdpbf16ps` multiplies a pair of columns of 16 rows by a token's broadcast pair and adds
//! both products, twice the multiply-adds of an f32 FMA.
//!
//! Per (row, token) the arithmetic is fixed: two f32 accumulators, even and odd columns in
//! order, added at the end — whatever the number of tokens or the tile they fall in, so gemm
//! rows equal gemv bit for bit.

use crate::quant::repack::X16;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// Tokens per register tile: 12 × 2 accumulators of 16 lanes (of 32 registers).
const TOKENS: usize = 12;

/// `$go!(T)` with the literal `T` equal to `$tt` (1 ..= [`TOKENS`]): a tile's token count is a
/// constant so that its accumulators stay in registers.
macro_rules! with_tokens {
    ($tt:expr, $go:ident) => {
        match_const!($tt, $go, [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2], 1)
    };
}

const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// `y[k * ld + g * 16 + i] = dot(row i of group g, x row k)` for every group of `w` and
/// every token `k < nt`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and AVX2/FMA/F16C. `ty` is F32, F16 or BF16; `w` is
/// whole interleaved groups of rows `cols` wide; `x` holds at least `nt` rows of `cols`;
/// `y` is valid for writes at every index above.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(crate) unsafe fn gemm(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    x: &[f32],
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    let es = ty.type_size();
    let group = X16 * cols * es;
    assert!(cols > 0 && w.len().is_multiple_of(group) && x.len() >= nt * cols);
    tiles(w, group, nt, |g, gw, t0, tt| {
        let (gw, xt) = (gw.as_ptr(), x[t0 * cols..].as_ptr());
        // SAFETY: tokens t0..t0 + tt of x and the group's outputs for them (the caller's
        // contract); the group holds 16 × cols elements.
        let yt = unsafe { y.add(t0 * ld + g * X16) };
        macro_rules! go {
            ($t:literal) => {
                // SAFETY: as above.
                unsafe {
                    match ty {
                        GgmlType::F32 => tile::<$t, F32>(gw, cols, xt, yt, ld),
                        GgmlType::F16 => tile::<$t, F16>(gw, cols, xt, yt, ld),
                        _ => tile::<$t, BF16>(gw, cols, xt, yt, ld),
                    }
                }
            };
        }
        with_tokens!(tt, go);
    });
}

/// Calls `f(g, group g's bytes, t0, tt)` for every group of `w` (`group` bytes each) and every
/// tile `t0..t0 + tt` of at most [`TOKENS`] of the `nt` tokens.
#[inline(always)]
fn tiles(w: &[u8], group: usize, nt: usize, mut f: impl FnMut(usize, &[u8], usize, usize)) {
    for (g, gw) in w.chunks_exact(group).enumerate() {
        let mut t0 = 0;
        while t0 < nt {
            let tt = (nt - t0).min(TOKENS);
            f(g, gw, t0, tt);
            t0 += tt;
        }
    }
}

/// Columns `k` and `k + 1` (k even) of a group, 16 weights each (row `i` in lane `i`), as
/// f32: two column loads, or for BF16 one vector of pairs split by a shift and a mask.
///
/// # Safety
/// As [`column`], for both columns (`col` bytes apart unless BF16).
#[inline(always)]
unsafe fn columns<const KIND: u8>(p: *const u8, col: usize) -> (__m512, __m512) {
    // SAFETY: forwarded from the caller.
    unsafe {
        if KIND == BF16 {
            let v = _mm512_loadu_si512(p.cast());
            let hi = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
            let even = _mm512_slli_epi32::<16>(v);
            (
                _mm512_castsi512_ps(even),
                _mm512_castsi512_ps(_mm512_and_si512(v, hi)),
            )
        } else {
            (column::<KIND>(p), column::<KIND>(p.add(col)))
        }
    }
}

/// Column `k`'s 16 weights (row `i` in lane `i`) as f32 (F32 / F16 only).
///
/// # Safety
/// AVX-512 F/BW and F16C are present; `16 × element size` bytes at `p` are readable.
#[inline(always)]
unsafe fn column<const KIND: u8>(p: *const u8) -> __m512 {
    // SAFETY: forwarded from the caller.
    unsafe {
        match KIND {
            F32 => _mm512_loadu_ps(p.cast()),
            _ => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
        }
    }
}

/// One group against `T` tokens: `y[t * ld + i]` for rows `i < 16`, tokens `t < T`.
///
/// # Safety
/// AVX-512 F/BW/VL, FMA and F16C are present; `gw` is a group of `16 × cols` elements of
/// `KIND`; `x` holds `T` rows of `cols`; `y[t * ld .. + 16]` is writable for `t < T`.
#[inline(always)]
unsafe fn tile<const T: usize, const KIND: u8>(
    gw: *const u8,
    cols: usize,
    x: *const f32,
    y: *mut f32,
    ld: usize,
) {
    let es = if KIND == F32 { 4 } else { 2 };
    let col = X16 * es;
    // SAFETY: AVX-512 F is present (the caller's contract).
    let mut acc = [[unsafe { _mm512_setzero_ps() }; 2]; T];
    let mut k = 0;
    // SAFETY (the loops): k + 1 < cols, so both columns lie inside the group and x's rows.
    while k + 2 <= cols {
        unsafe {
            let p = gw.add(k * col);
            // No software prefetch: the group is one sequential stream the hardware
            // prefetchers follow, and prefetching 1 KiB ahead measured slower (tg128 on the
            // 0.5B F16: 29-36 vs 38-42 t/s).
            let (w0, w1) = columns::<KIND>(p, col);
            for t in 0..T {
                let xr = x.add(t * cols + k);
                acc[t][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(*xr), acc[t][0]);
                acc[t][1] = _mm512_fmadd_ps(w1, _mm512_set1_ps(*xr.add(1)), acc[t][1]);
            }
        }
        k += 2;
    }
    if k < cols {
        debug_assert!(KIND != BF16, "BF16 groups have whole column pairs");
        // SAFETY: column k < cols (the last, even one).
        unsafe {
            let w0 = column::<KIND>(gw.add(k * col));
            for t in 0..T {
                acc[t][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(*x.add(t * cols + k)), acc[t][0]);
            }
        }
    }
    for t in 0..T {
        // SAFETY: the caller's contract.
        unsafe { _mm512_storeu_ps(y.add(t * ld), _mm512_add_ps(acc[t][0], acc[t][1])) };
    }
}

/// [`gemm`] for BF16 weights (pair layout) against bf16 activations `x`: per (row, token),
/// column pairs in order alternate between two accumulators (`quant::act::dot_bf16_pairs`
/// is the scalar reference, bit for bit).
///
/// # Safety
/// As [`gemm`], plus AVX-512 BF16; `cols` is even.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
pub(crate) unsafe fn gemm_bf16(
    w: &[u8],
    cols: usize,
    x: &[u16],
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    let group = X16 * cols * 2;
    assert!(cols > 0 && cols.is_multiple_of(2) && w.len().is_multiple_of(group));
    assert!(x.len() >= nt * cols);
    tiles(w, group, nt, |g, gw, t0, tt| {
        let (gw, xt) = (gw.as_ptr(), x[t0 * cols..].as_ptr());
        // SAFETY: tokens t0..t0 + tt of x and the group's outputs for them (the caller's
        // contract); the group holds 16 × cols elements.
        let yt = unsafe { y.add(t0 * ld + g * X16) };
        macro_rules! go {
            ($t:literal) => {
                // SAFETY: as above; AVX-512 BF16 is present (this function's features).
                unsafe { tile_bf16::<$t>(gw, cols / 2, xt.cast(), yt, ld) }
            };
        }
        with_tokens!(tt, go);
    });
}

/// One group against `T` tokens of bf16 pairs (`x` as u32 pairs, rows `pairs` long).
///
/// # Safety
/// AVX-512 F and BF16 are present; `gw` holds `pairs` vectors of 64 bytes; `x` holds `T` rows
/// of `pairs` u32; `y[t * ld .. + 16]` is writable for `t < T`.
#[inline(always)]
unsafe fn tile_bf16<const T: usize>(
    gw: *const u8,
    pairs: usize,
    x: *const u32,
    y: *mut f32,
    ld: usize,
) {
    // SAFETY: AVX-512 F is present (the caller's contract).
    let mut acc = [[unsafe { _mm512_setzero_ps() }; 2]; T];
    let mut p = 0;
    while p + 2 <= pairs {
        // SAFETY: pairs p and p + 1 lie inside the group and x's rows.
        unsafe {
            let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(gw.add(64 * p).cast()));
            let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(gw.add(64 * p + 64).cast()));
            for t in 0..T {
                let xr = x.add(t * pairs + p);
                let x0 = bh(_mm512_set1_epi32(xr.read_unaligned() as i32));
                let x1 = bh(_mm512_set1_epi32(xr.add(1).read_unaligned() as i32));
                acc[t][0] = _mm512_dpbf16_ps(acc[t][0], w0, x0);
                acc[t][1] = _mm512_dpbf16_ps(acc[t][1], w1, x1);
            }
        }
        p += 2;
    }
    if p < pairs {
        // SAFETY: the last pair lies inside the group and x's rows.
        unsafe {
            let w0 = bh(_mm512_loadu_si512(gw.add(64 * p).cast()));
            for t in 0..T {
                let xv = x.add(t * pairs + p).read_unaligned() as i32;
                let x0 = bh(_mm512_set1_epi32(xv));
                acc[t][0] = _mm512_dpbf16_ps(acc[t][0], w0, x0);
            }
        }
    }
    for t in 0..T {
        // SAFETY: the caller's contract.
        unsafe { _mm512_storeu_ps(y.add(t * ld), _mm512_add_ps(acc[t][0], acc[t][1])) };
    }
}

/// 32 bf16 pairs from their bits.
#[inline(always)]
fn bh(v: __m512i) -> __m512bh {
    // SAFETY: both are 64 bytes of plain data; every bit pattern is a valid bf16 vector.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_row, repack};
    use rand::{Rng, SeedableRng};

    /// The f32-activation kernel (every float type, BF16 included though this CPU may take
    /// the bf16 path for it) equals its definition: per (row, token) fused multiply-adds over
    /// the even columns and over the odd ones, in order, then their sum.
    #[test]
    fn float_kernel_is_two_fma_chains() {
        if !crate::kernels::Isa::Avx512.supported() {
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for (rows, cols, nt) in [(16, 2, 1), (32, 10, 13), (48, 96, 25), (16, 7, 3)] {
                if !repack::fits(ty, rows, cols) {
                    continue;
                }
                let vals: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let bytes: Vec<u8> = match ty {
                    GgmlType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    GgmlType::F16 => vals
                        .iter()
                        .flat_map(|&v| crate::quant::blocks::f32_to_f16(v))
                        .collect(),
                    _ => vals
                        .iter()
                        .flat_map(|&v| crate::quant::act::f32_to_bf16(v).to_le_bytes())
                        .collect(),
                };
                let mut w = vec![0u8; bytes.len()];
                repack::repack(ty, cols, &bytes, &mut w);
                let x: Vec<f32> = (0..nt * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let mut y = vec![0f32; nt * rows];
                // SAFETY: AVX-512 checked above; whole groups, nt rows of x, y is nt × rows.
                unsafe { gemm(ty, &w, cols, &x, nt, y.as_mut_ptr(), rows) };
                let es = ty.type_size();
                let mut row = vec![0f32; cols];
                for r in 0..rows {
                    dequantize_row(ty, &bytes[r * cols * es..(r + 1) * cols * es], &mut row)
                        .unwrap();
                    for t in 0..nt {
                        let mut acc = [0f32; 2];
                        for (k, &wv) in row.iter().enumerate() {
                            acc[k % 2] = wv.mul_add(x[t * cols + k], acc[k % 2]);
                        }
                        let (got, want) = (y[t * rows + r], acc[0] + acc[1]);
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{ty:?} {rows}x{cols} {t} {r}"
                        );
                    }
                }
            }
        }
    }
}
