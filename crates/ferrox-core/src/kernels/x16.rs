//! AVX-512 VNNI kernels for Q4_0 / Q5_0 / Q8_0 / IQ4_NL weights in the 16-row interleaved layout
//! (`quant::repack`) against Q8_0 activations, and Q4_1 / Q5_1 against Q8_1. `vpdpbusd` (Intel SDM: "Multiply and Add
//! Unsigned and Signed Bytes") multiplies 4 unsigned weight bytes of each of 16 rows (one row
//! per i32 lane) by 4 signed activation bytes broadcast to all lanes.
//!
//! Weights are unsigned (Q4_0 stores q with x = d·(q − 8), Q5_0 q − 16, Q8_0 is stored + 128,
//! IQ4_NL's nibbles index its codebook shifted by 128 with one `vpshufb`);
//! each block's integer sum starts at −offset·Σa, so it is exact. Per block and token one
//! conversion and one FMA with d_w·d_a update 16 rows at once; Q4_1 / Q5_1 (x = d·q + m, q
//! unsigned) add their min term m_w·s_a (s_a = d_a·Σa, Q8_1's `s`) with a second FMA.
//!
//! A group's block is unpacked once and then runs against every token of the call, in order;
//! per (row, token) the arithmetic is fixed — blocks in column order, the same ops whatever the
//! number of tokens or the neighbouring rows — so gemm rows equal gemv bit for bit.

use crate::quant::blocks::{BlockQ8_0, BlockQ8_1};
use crate::quant::repack::X16;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// Most tokens per call (the matmul splits larger batches).
pub(crate) const MAX_TOKENS: usize = 64;

/// Tiles ahead of the current one to prefetch (the weight stream of one group).
const PREFETCH_TILES: usize = 4;

/// An activation block of 32 quants (Q8_0 or Q8_1).
pub(crate) trait ActBlock {
    fn quants(&self) -> &[i8; 32];
}

impl ActBlock for BlockQ8_0 {
    fn quants(&self) -> &[i8; 32] {
        &self.qs
    }
}

impl ActBlock for BlockQ8_1 {
    fn quants(&self) -> &[i8; 32] {
        &self.qs
    }
}

/// Activations of the call: `nt` rows of `cols / 32` blocks (Q8_0, or Q8_1 for Q4_1 / Q5_1),
/// their f32 scales, and per block Σq (Q8_0; the offset correction) or s (Q8_1; the min
/// term), all row-major; the slice a format does not use is empty.
pub(crate) struct Acts<'a, B> {
    pub q: &'a [B],
    pub d: &'a [f32],
    pub sum: &'a [i32],
    pub s: &'a [f32],
}

/// `y[k * ld + g * 16 + i] = dot(row i of group g, activation row k)` for every group of `w`
/// and every token `k < nt`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C. `ty` is Q4_0, Q5_0, Q8_0 or
/// IQ4_NL with Q8_0 activations, or Q4_1 / Q5_1 with Q8_1;
/// `w` is whole interleaved groups of rows `cols` wide; `a` holds at least `nt` rows of
/// `cols / 32` blocks; `nt <= MAX_TOKENS`; `y` is valid for writes at every index above.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn gemm<B: ActBlock>(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    a: &Acts<'_, B>,
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    let nb = cols / 32;
    let tile = X16 * ty.type_size();
    let with_min = matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
    let terms = if with_min { a.s.len() } else { a.sum.len() };
    assert!(nt <= MAX_TOKENS && w.len().is_multiple_of(nb * tile));
    assert!(a.q.len() >= nt * nb && a.d.len() >= nt * nb && terms >= nt * nb);
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    for (g, group) in w.chunks_exact(nb * tile).enumerate() {
        acc[..nt].fill(_mm512_setzero_ps());
        for (b, t) in group.chunks_exact(tile).enumerate() {
            let p = t.as_ptr();
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_TILES * tile).cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_TILES * tile + 256).cast());
            // SAFETY: `t` is one whole tile of `ty`; the reads stay inside it.
            let (q, shift, dw, mw) = unsafe {
                let q = match ty {
                    GgmlType::Q4_0 => (unpack_q4_0(p.add(32)), 3),
                    GgmlType::Q5_0 => (unpack_q5_0(p.add(32)), 4),
                    GgmlType::IQ4NL => (unpack_iq4nl(p.add(32)), 7),
                    GgmlType::Q4_1 => (unpack_q4_0(p.add(64)), 0),
                    GgmlType::Q5_1 => (unpack_q5_0(p.add(64)), 0),
                    _ => (load_q8_0(p.add(32)), 7),
                };
                let f16s = |o: usize| _mm512_cvtph_ps(_mm256_loadu_si256(p.add(o).cast()));
                (
                    q.0,
                    q.1,
                    f16s(0),
                    if with_min {
                        f16s(32)
                    } else {
                        _mm512_setzero_ps()
                    },
                )
            };
            for k in 0..nt {
                let i = k * nb + b;
                let ab = a.q[i].quants().as_ptr();
                let start = if with_min { 0 } else { -(a.sum[i] << shift) };
                let mut even = _mm512_set1_epi32(start);
                let mut odd = _mm512_setzero_si512();
                for c in (0..8).step_by(2) {
                    // SAFETY: 4 bytes at 4c and 4c + 4 are inside the block's 32 quants.
                    let (a0, a1) = unsafe {
                        (
                            std::ptr::read_unaligned(ab.add(4 * c).cast::<i32>()),
                            std::ptr::read_unaligned(ab.add(4 * c + 4).cast::<i32>()),
                        )
                    };
                    even = _mm512_dpbusd_epi32(even, q[c], _mm512_set1_epi32(a0));
                    odd = _mm512_dpbusd_epi32(odd, q[c + 1], _mm512_set1_epi32(a1));
                }
                let sum = _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd));
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[i]));
                acc[k] = _mm512_fmadd_ps(sum, scale, acc[k]);
                if with_min {
                    acc[k] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[i]), acc[k]);
                }
            }
        }
        for (k, v) in acc[..nt].iter().enumerate() {
            // SAFETY: the caller guarantees y[k * ld + g * 16 .. + 16] is writable.
            unsafe { _mm512_storeu_ps(y.add(k * ld + g * X16), *v) };
        }
    }
}

/// The 8 vectors of unsigned weights of a Q4_0 tile (after its scales): vector c pairs with
/// the activation dword at 4c.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn unpack_q4_0(qs: *const u8) -> [__m512i; 8] {
    let m = _mm512_set1_epi8(0x0F);
    let mut out = [_mm512_setzero_si512(); 8];
    for p in 0..4 {
        // SAFETY: the caller passes a tile's 256 bytes of nibbles.
        let v = unsafe { _mm512_loadu_si512(qs.add(64 * p).cast()) };
        out[2 * p] = _mm512_and_si512(v, m);
        out[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m);
    }
    out
}

/// As `unpack_q4_0` for an IQ4_NL tile (the same nibbles): each becomes its codebook value
/// + 128.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn unpack_iq4nl(qs: *const u8) -> [__m512i; 8] {
    // SAFETY: forwarded (a tile's 256 bytes of nibbles).
    let mut out = unsafe { unpack_q4_0(qs) };
    for v in &mut out {
        *v = super::avx512::lookup(&super::avx512::IQ4NL_U, *v);
    }
    out
}

/// As `unpack_q4_0` for a Q5_0 tile (after its scales: qh then nibbles); bit c of byte b of
/// a lane's qh is bit 4 of element 4c + b.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn unpack_q5_0(p: *const u8) -> [__m512i; 8] {
    // SAFETY: the caller passes a tile's qh (64 bytes) followed by its nibbles.
    let (qh, mut out) = unsafe { (_mm512_loadu_si512(p.cast()), unpack_q4_0(p.add(64))) };
    let sixteen = _mm512_set1_epi8(16);
    for (c, v) in out.iter_mut().enumerate() {
        let high = _mm512_test_epi8_mask(qh, _mm512_set1_epi8((1u8 << c) as i8));
        *v = _mm512_mask_add_epi8(*v, high, *v, sixteen);
    }
    out
}

#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_q8_0(qs: *const u8) -> [__m512i; 8] {
    let mut out = [_mm512_setzero_si512(); 8];
    for (c, v) in out.iter_mut().enumerate() {
        // SAFETY: the caller passes a tile's 512 bytes of quants.
        *v = unsafe { _mm512_loadu_si512(qs.add(64 * c).cast()) };
    }
    out
}
