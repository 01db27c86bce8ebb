//! AVX-512 (F, BW, VL, VNNI) kernels for the 32-element block types Q4_0, Q5_0 and Q8_0.
//! `vpdpbusd` (Intel SDM: "Multiply and Add Unsigned and Signed Bytes") multiplies unsigned
//! weight bytes with signed activation bytes, four products per i32 lane.
//!
//! Weights are made unsigned by their offset (Q4_0 stores q with x = d·(q − 8), Q5_0 q − 16,
//! Q8_0 is shifted by 128) and each block's sum is corrected by −offset·Σy, all in exact
//! integers. Rows are first decoded, four at a time, into unsigned bytes and f32 block scales;
//! then every token of the batch runs against them (weights decoded once per batch).
//!
//! Per (row, token) the arithmetic is fixed: for each pair of blocks, 4 exact i32 partial sums
//! (2 per block) are converted to f32 and fused-multiply-added with the block scale product
//! d_w·d_y into 4 f32 lanes, pairs in order; the lanes are summed once at the end. Nothing
//! depends on the tile, the neighbouring rows or the batch, so gemm rows equal gemv bit for bit.

// Kernels index parallel per-row / per-token arrays by number.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use super::avx2::{bytes_from_bits, nibbles_bcast};
use crate::quant::blocks::*;
use crate::quant::{ActBuf, GgmlType};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Weight rows decoded together; their block sums share one vector in the tile.
const ROWS: usize = 4;

/// The types with a kernel here (the rest use the AVX2 kernels).
pub(super) fn has_kernel(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0)
}

/// Rows and tokens the matmul should hand to one `dot_block` call.
pub(super) const TILE: (usize, usize) = (ROWS, 64);

/// Tokens per tile.
const TOK: usize = 4;

/// `ROWS` decoded rows: `q` unsigned weights (row-major, pairs × 64 bytes each, zero rows
/// past the end), `d` the block scales of each row (pairs × 2), and `dw` per pair the 16 lanes
/// [d_r0a, d_r0a, d_r0b, d_r0b, d_r1a, ...] matching the reduced sums.
#[derive(Default)]
struct Decoded {
    q: Vec<u8>,
    d: Vec<f32>,
    dw: Vec<f32>,
}

thread_local! {
    static DECODED: RefCell<Decoded> = RefCell::new(Decoded::default());
}

/// `out[r * nt + k] = dot(row r of w, activation row t0 + k)`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `w` is whole rows of `ty`
/// (`has_kernel`) matching `acts.cols()`; `acts` holds Q8_0 activations with the pair layout
/// (`ActBuf::pairs`) for rows `t0..t0 + nt`; `out.len()` = rows × nt.
pub(super) unsafe fn dot_block(
    ty: GgmlType,
    w: &[u8],
    acts: &ActBuf,
    t0: usize,
    nt: usize,
    out: &mut [f32],
) {
    let cols = acts.cols();
    let pairs = cols.div_ceil(64);
    let row_bytes = ty.row_bytes(cols).expect("validated by kernels::dot_block");
    let rows = w.len() / row_bytes;
    let (yq, yd, ys) = acts.pairs();
    assert!(
        yq.len() >= (t0 + nt) * pairs * 64
            && yd.len() >= (t0 + nt) * pairs * 16
            && ys.len() >= (t0 + nt) * pairs * 16,
        "pair layout present"
    );
    // log2 of the weight offset.
    let sh = match ty {
        GgmlType::Q4_0 => 3,
        GgmlType::Q5_0 => 4,
        _ => 7,
    };
    DECODED.with(|dec| {
        let mut dec = dec.borrow_mut();
        let Decoded { q, d, dw } = &mut *dec;
        q.resize(ROWS * pairs * 64, 0);
        d.resize(ROWS * pairs * 2, 0.0);
        dw.resize(pairs * 16, 0.0);
        for r0 in (0..rows).step_by(ROWS) {
            let rr = (rows - r0).min(ROWS);
            for r in 0..ROWS {
                let qr = &mut q[r * pairs * 64..(r + 1) * pairs * 64];
                let dr = &mut d[r * pairs * 2..(r + 1) * pairs * 2];
                if r < rr {
                    let wr = &w[(r0 + r) * row_bytes..(r0 + r + 1) * row_bytes];
                    // SAFETY: features per the caller; `wr` is one row of `ty`.
                    unsafe { decode_row(ty, wr, qr, dr) };
                } else {
                    qr.fill(0);
                    dr.fill(0.0);
                }
            }
            for p in 0..pairs {
                for r in 0..ROWS {
                    for h in 0..2 {
                        let v = d[r * pairs * 2 + 2 * p + h];
                        dw[p * 16 + 4 * r + 2 * h..p * 16 + 4 * r + 2 * h + 2].fill(v);
                    }
                }
            }
            let mut t = 0;
            while t < nt {
                let n = (nt - t).min(TOK);
                let y: [Act; TOK] = std::array::from_fn(|k| {
                    let i = (t0 + t + k.min(n - 1)) * pairs;
                    Act {
                        q: yq[i * 64..].as_ptr(),
                        d: yd[i * 16..].as_ptr(),
                        s: ys[i * 16..].as_ptr(),
                    }
                });
                let mut res = [[0f32; TOK]; ROWS];
                macro_rules! go {
                    ($t:literal) => {
                        // SAFETY: decoded rows and activation pairs cover `pairs` pairs each.
                        unsafe { tile::<$t>(q, dw, pairs, &y, sh, &mut res) }
                    };
                }
                match n {
                    4 => go!(4),
                    3 => go!(3),
                    2 => go!(2),
                    _ => go!(1),
                }
                for r in 0..rr {
                    for k in 0..n {
                        out[(r0 + r) * nt + t + k] = res[r][k];
                    }
                }
                t += n;
            }
        }
    });
}

/// One token's activation pairs: quants, expanded scales, expanded negated sums.
#[derive(Clone, Copy)]
struct Act {
    q: *const i8,
    d: *const f32,
    s: *const i32,
}

/// One row of `ty` → unsigned bytes (block pairs, zero tail) and f32 scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn decode_row(ty: GgmlType, w: &[u8], q: &mut [u8], d: &mut [f32]) {
    fn b<B: Block>(w: &[u8]) -> &[B] {
        as_blocks(w).expect("whole blocks")
    }
    let nb = match ty {
        GgmlType::Q4_0 => {
            let blocks = b::<BlockQ4_0>(w);
            for (i, blk) in blocks.iter().enumerate() {
                store32(&mut q[32 * i..], nibbles_bcast(&blk.qs));
                d[i] = f16_to_f32(blk.d);
            }
            blocks.len()
        }
        GgmlType::Q5_0 => {
            let blocks = b::<BlockQ5_0>(w);
            let bit4 = _mm256_set1_epi8(0x10);
            for (i, blk) in blocks.iter().enumerate() {
                let hi = _mm256_and_si256(bytes_from_bits(u32::from_le_bytes(blk.qh)), bit4);
                store32(
                    &mut q[32 * i..],
                    _mm256_or_si256(nibbles_bcast(&blk.qs), hi),
                );
                d[i] = f16_to_f32(blk.d);
            }
            blocks.len()
        }
        _ => {
            let blocks = b::<BlockQ8_0>(w);
            let flip = _mm256_set1_epi8(i8::MIN);
            for (i, blk) in blocks.iter().enumerate() {
                // SAFETY: 32 bytes readable.
                let v = unsafe { _mm256_loadu_si256(blk.qs.as_ptr().cast()) };
                store32(&mut q[32 * i..], _mm256_xor_si256(v, flip));
                d[i] = f16_to_f32(blk.d);
            }
            blocks.len()
        }
    };
    if nb % 2 == 1 {
        q[32 * nb..32 * nb + 32].fill(0);
        d[nb] = 0.0;
    }
}

#[inline]
#[target_feature(enable = "avx2")]
fn store32(dst: &mut [u8], v: __m256i) {
    assert!(dst.len() >= 32);
    // SAFETY: 32 writable bytes checked above.
    unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), v) }
}

/// `ROWS` decoded rows × `T` tokens into `res[r][k]`.
///
/// Per token and pair: four `vpdpbusd` give 16 lanes per row (8 per block); two rounds of
/// pairwise lane sums (`vpermt2d` + add) fold the four rows into one vector of 4 lanes each
/// (2 per block), so the conversion and scaling run once per four rows.
///
/// # Safety
/// `q` holds `ROWS` decoded rows of `pairs` pairs and `dw` their expanded scales; each
/// activation covers `pairs` pairs of quants, scales and sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<const T: usize>(
    q: &[u8],
    dw: &[f32],
    pairs: usize,
    y: &[Act; TOK],
    sh: i32,
    res: &mut [[f32; TOK]; ROWS],
) {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let shift = _mm_cvtsi32_si128(sh);
    let fold = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(
            _mm512_permutex2var_epi32(a, even, b),
            _mm512_permutex2var_epi32(a, odd, b),
        )
    };
    let mut acc = [_mm512_setzero_ps(); T];
    let qp = q.as_ptr();
    for p in 0..pairs {
        // SAFETY (whole loop body): p < pairs, and the caller guarantees `pairs` pairs in
        // every row and activation array.
        unsafe {
            let wv: [__m512i; ROWS] =
                std::array::from_fn(|r| _mm512_loadu_si512(qp.add((r * pairs + p) * 64).cast()));
            let dwv = _mm512_loadu_ps(dw.as_ptr().add(16 * p));
            for k in 0..T {
                let a = y[k];
                let yv = _mm512_loadu_si512(a.q.add(64 * p).cast());
                let z = _mm512_setzero_si512();
                let i: [__m512i; ROWS] = std::array::from_fn(|r| _mm512_dpbusd_epi32(z, wv[r], yv));
                let sums = fold(fold(i[0], i[1]), fold(i[2], i[3]));
                let corr = _mm512_sll_epi32(_mm512_loadu_si512(a.s.add(16 * p).cast()), shift);
                let sums = _mm512_add_epi32(sums, corr);
                let s = _mm512_mul_ps(dwv, _mm512_loadu_ps(a.d.add(16 * p)));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), s, acc[k]);
            }
        }
    }
    for k in 0..T {
        // SAFETY: __m512 and [f32; 16] have the same size and any bit pattern is valid.
        let lanes: [f32; 16] = unsafe { std::mem::transmute::<__m512, [f32; 16]>(acc[k]) };
        for r in 0..ROWS {
            let l = &lanes[4 * r..4 * r + 4];
            res[r][k] = (l[0] + l[1]) + (l[2] + l[3]);
        }
    }
}
