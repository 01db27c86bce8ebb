//! AVX-512 (F, BW, VL, VNNI) kernels for the 32-element block types Q4_0, Q5_0, Q8_0, IQ4_NL
//! and MXFP4.
//! `vpdpbusd` (Intel SDM: "Multiply and Add Unsigned and Signed Bytes") multiplies unsigned
//! weight bytes with signed activation bytes, four products per i32 lane.
//!
//! Weights are made unsigned by their offset (Q4_0 stores q with x = d·(q − 8), Q5_0 q − 16,
//! Q8_0 and the IQ4_NL codebook values are shifted by 128, MXFP4's doubled E2M1 values by 16) and each block's sum is corrected by −offset·Σy, all in exact
//! integers. Rows are first decoded, four at a time, into unsigned bytes and f32 block scales;
//! then every token of the batch runs against them (weights decoded once per batch).
//!
//! Per (row, token) the arithmetic is fixed: for each pair of blocks, 4 exact i32 partial sums
//! (2 per block) are converted to f32 and fused-multiply-added with the block scale product
//! d_w·d_y into 4 f32 lanes, pairs in order; the lanes are summed once at the end. Nothing
//! depends on the tile, the neighbouring rows or the batch, so gemm rows equal gemv bit for bit.

// Kernels index parallel per-row / per-token arrays by number.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use super::BlockArgs;
use crate::quant::blocks::e8m0_to_f32_half;
use crate::quant::GgmlType;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Weight rows decoded together; their block sums share one vector in the tile.
const ROWS: usize = 4;

/// The types with a kernel here (the rest use the AVX2 kernels).
pub(super) fn has_kernel(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4NL | GgmlType::MXFP4
    )
}

/// Rows and tokens the matmul should hand to one `dot_block` call.
pub(super) const TILE: (usize, usize) = (4 * ROWS, 64);

/// Tokens per tile.
const TOK: usize = 4;

/// Block pairs ahead of the current one that the register-decoding path prefetches.
const PREFETCH_PAIRS: usize = 6;

/// From this many tokens the rows are decoded once into scratch; below, per pair in registers.
const SCRATCH_MIN_TOKENS: usize = 8;

/// `ROWS` decoded rows: `q` unsigned weights (per pair, the rows' 64 bytes each, in order) and
/// `dw` per pair the 16 lanes [d_r0a, d_r0a, d_r0b, d_r0b, d_r1a, ...] of block scales, in the
/// lane order of the folded sums.
#[derive(Default)]
struct Decoded {
    q: Vec<u8>,
    dw: Vec<f32>,
}

thread_local! {
    static DECODED: RefCell<Decoded> = RefCell::new(Decoded::default());
}

/// [`BlockArgs`] for the Q4_0 / Q5_0 / Q8_0 rows this module has a kernel for (`has_kernel`).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C are present; `a` as [`BlockArgs`] says, with
/// Q8_0 activations in the pair layout (`ActBuf::pairs`); `out.len()` = rows × nt.
pub(super) unsafe fn dot_block(a: BlockArgs<'_>, out: &mut [f32]) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match a.ty {
            GgmlType::Q4_0 => dot_rows::<Q4_0>(a, out),
            GgmlType::Q5_0 => dot_rows::<Q5_0>(a, out),
            GgmlType::IQ4NL => dot_rows::<IQ4NL>(a, out),
            GgmlType::MXFP4 => dot_rows::<MXFP4>(a, out),
            _ => dot_rows::<Q8_0>(a, out),
        }
    }
}

const Q4_0: u8 = 0;
const Q5_0: u8 = 1;
const Q8_0: u8 = 2;
const IQ4NL: u8 = 3;
const MXFP4: u8 = 4;

/// Bytes per block and log2 of the weight offset of each kind.
const fn kind(k: u8) -> (usize, i32) {
    match k {
        Q4_0 => (18, 3),
        Q5_0 => (22, 4),
        IQ4NL => (18, 7),
        MXFP4 => (17, 4),
        _ => (34, 7),
    }
}

/// A codebook shifted by `offset` into unsigned bytes.
const fn shifted(values: [i8; 16], offset: i16) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (values[i] as i16 + offset) as u8;
        i += 1;
    }
    t
}

pub(super) const IQ4NL_U: [u8; 16] = shifted(crate::quant::blocks::IQ4NL_VALUES, 128);
const MXFP4_U: [u8; 16] = shifted(crate::quant::blocks::MXFP4_VALUES, 16);

/// `table[v]` for each byte `v` < 16 of `v` (`vpshufb` in every 128-bit lane).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) fn lookup(table: &[u8; 16], v: __m512i) -> __m512i {
    // SAFETY: 16 bytes readable.
    let t = unsafe { _mm_loadu_si128(table.as_ptr().cast()) };
    _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), v)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_rows<const K: u8>(a: BlockArgs<'_>, out: &mut [f32]) {
    let (w, acts, t0, nt) = (a.w, a.acts, a.t0, a.nt);
    let cols = acts.cols();
    let nb = cols / 32;
    let pairs = nb.div_ceil(2);
    let row_bytes = kind(K).0 * nb;
    assert!(row_bytes > 0 && w.len().is_multiple_of(row_bytes));
    let rows = w.len() / row_bytes;
    let (yq, yd, ys) = acts.pairs();
    assert!(
        yq.len() >= (t0 + nt) * pairs * 64
            && yd.len() >= (t0 + nt) * pairs * 16
            && ys.len() >= (t0 + nt) * pairs * 16,
        "pair layout present"
    );
    let act = |t: usize| {
        let i = t * pairs;
        Act {
            q: yq[i * 64..].as_ptr(),
            d: yd[i * 16..].as_ptr(),
            s: ys[i * 16..].as_ptr(),
        }
    };
    DECODED.with(|dec| {
        let mut dec = dec.borrow_mut();
        let Decoded { q, dw } = &mut *dec;
        for r0 in (0..rows).step_by(ROWS) {
            let rr = (rows - r0).min(ROWS);
            let raw = Raw::<K> {
                rows: std::array::from_fn(|r| w[(r0 + r.min(rr - 1)) * row_bytes..].as_ptr()),
                live: rr,
                nb,
            };
            let mut emit = |t: usize, n: usize, res: &TileOut| {
                for r in 0..rr {
                    for k in 0..n {
                        out[(r0 + r) * nt + t + k] = res[r][k];
                    }
                }
            };
            if nt >= SCRATCH_MIN_TOKENS {
                q.resize(pairs * ROWS * 64, 0);
                dw.resize(pairs * 16, 0.0);
                for p in 0..pairs {
                    // SAFETY: p < pairs; the scratch holds `pairs` pairs.
                    unsafe {
                        let (wv, d) = raw.pair(p);
                        for r in 0..ROWS {
                            _mm512_storeu_si512(
                                q.as_mut_ptr().add((p * ROWS + r) * 64).cast(),
                                wv[r],
                            );
                        }
                        _mm512_storeu_ps(dw.as_mut_ptr().add(16 * p), d);
                    }
                }
                let dec = Scratch {
                    q: q.as_ptr(),
                    dw: dw.as_ptr(),
                };
                // SAFETY: the scratch and the activations cover `pairs` pairs.
                unsafe { tiles(&dec, pairs, t0, nt, &act, kind(K).1, &mut emit) };
            } else {
                // SAFETY: the raw rows and the activations cover `pairs` pairs.
                unsafe { tiles(&raw, pairs, t0, nt, &act, kind(K).1, &mut emit) };
            }
        }
    });
}

/// Every token of `t0..t0 + nt` against the four rows of `w`, in tiles of up to `TOK`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tiles<W: Weights>(
    w: &W,
    pairs: usize,
    t0: usize,
    nt: usize,
    act: &dyn Fn(usize) -> Act,
    sh: i32,
    emit: &mut dyn FnMut(usize, usize, &TileOut),
) {
    let mut t = 0;
    while t < nt {
        let n = (nt - t).min(TOK);
        let y: [Act; TOK] = std::array::from_fn(|j| act(t0 + t + j.min(n - 1)));
        let mut res: TileOut = [[0f32; TOK]; ROWS];
        // SAFETY: forwarded from the caller.
        unsafe {
            match n {
                4 => tile::<W, 4>(w, pairs, &y, sh, &mut res),
                3 => tile::<W, 3>(w, pairs, &y, sh, &mut res),
                2 => tile::<W, 2>(w, pairs, &y, sh, &mut res),
                _ => tile::<W, 1>(w, pairs, &y, sh, &mut res),
            }
        }
        emit(t, n, &res);
        t += n;
    }
}

/// A tile's results, `[row][token]`.
type TileOut = [[f32; TOK]; ROWS];

/// One token's activation pairs: quants, expanded scales, expanded negated sums.
#[derive(Clone, Copy)]
struct Act {
    q: *const i8,
    d: *const f32,
    s: *const i32,
}

/// Four rows' unsigned weights and expanded scales, one block pair at a time.
trait Weights {
    /// # Safety
    /// `p` < the rows' number of pairs; AVX-512 F/BW/VL/VNNI available.
    unsafe fn pair(&self, p: usize) -> ([__m512i; ROWS], __m512);
}

/// Rows decoded into scratch.
struct Scratch {
    q: *const u8,
    dw: *const f32,
}

impl Weights for Scratch {
    #[inline]
    unsafe fn pair(&self, p: usize) -> ([__m512i; ROWS], __m512) {
        // SAFETY: the scratch holds the pair (caller).
        unsafe {
            (
                std::array::from_fn(|r| _mm512_loadu_si512(self.q.add((p * ROWS + r) * 64).cast())),
                _mm512_loadu_ps(self.dw.add(16 * p)),
            )
        }
    }
}

/// Rows in their GGUF blocks (`live` of them; the rest read as zero), decoded per pair.
struct Raw<const K: u8> {
    rows: [*const u8; ROWS],
    live: usize,
    nb: usize,
}

impl<const K: u8> Weights for Raw<K> {
    #[inline]
    unsafe fn pair(&self, p: usize) -> ([__m512i; ROWS], __m512) {
        // SAFETY: features and bounds per the caller.
        unsafe { self.decode(p) }
    }
}

impl<const K: u8> Raw<K> {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn decode(&self, p: usize) -> ([__m512i; ROWS], __m512) {
        let (bs, _) = kind(K);
        let (a, b) = (2 * p, 2 * p + 1);
        let has_b = b < self.nb;
        let mut wv = [_mm512_setzero_si512(); ROWS];
        // The eight f16 scales (row-major, a then b) packed in two u64s: built in registers, as
        // a stack array read back whole would stall store forwarding every pair.
        let mut h = [0u64; 2];
        // MXFP4's E8M0 scales as f32, in the same order.
        let mut e = [0f32; 2 * ROWS];
        for r in 0..self.live {
            // SAFETY: block a (and b when has_b) lie inside row r (caller: p < pairs).
            unsafe {
                let ba = self.rows[r].add(bs * a);
                let bb = self.rows[r].add(bs * b);
                // Four rows advance side by side, which the hardware prefetchers follow poorly;
                // fetch a few pairs ahead (past the row's end: the next rows, soon needed).
                let ahead = ba.wrapping_add(2 * bs * PREFETCH_PAIRS);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(2 * bs - 1).cast());
                if K == MXFP4 {
                    e[2 * r] = e8m0_to_f32_half(ba.read());
                    e[2 * r + 1] = if has_b {
                        e8m0_to_f32_half(bb.read())
                    } else {
                        0.0
                    };
                } else {
                    let da = ba.cast::<u16>().read_unaligned() as u64;
                    let db = if has_b {
                        bb.cast::<u16>().read_unaligned() as u64
                    } else {
                        0
                    };
                    h[r / 2] |= (da | db << 16) << (32 * (r % 2));
                }
                wv[r] = match K {
                    Q8_0 => {
                        let qa = _mm256_loadu_si256(ba.add(2).cast());
                        let qb = if has_b {
                            _mm256_loadu_si256(bb.add(2).cast())
                        } else {
                            _mm256_set1_epi8(i8::MIN)
                        };
                        let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qa), qb);
                        _mm512_xor_si512(v, _mm512_set1_epi8(i8::MIN))
                    }
                    _ => {
                        let off = match K {
                            Q5_0 => 6,
                            MXFP4 => 1,
                            _ => 2,
                        };
                        let qa = _mm_loadu_si128(ba.add(off).cast());
                        let qb = if has_b {
                            _mm_loadu_si128(bb.add(off).cast())
                        } else {
                            _mm_setzero_si128()
                        };
                        // [qa, qa, qb, qb] then the high nibbles in the odd 128-bit lanes.
                        let ab = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(qa), qb);
                        let v = _mm512_permutexvar_epi64(
                            _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                            _mm512_castsi256_si512(ab),
                        );
                        let v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
                        let v = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
                        if K == Q5_0 {
                            let qha = ba.add(2).cast::<u32>().read_unaligned() as u64;
                            let qhb = if has_b {
                                bb.add(2).cast::<u32>().read_unaligned() as u64
                            } else {
                                0
                            };
                            _mm512_mask_add_epi8(v, qha | qhb << 32, v, _mm512_set1_epi8(0x10))
                        } else if K == IQ4NL {
                            lookup(&IQ4NL_U, v)
                        } else if K == MXFP4 {
                            lookup(&MXFP4_U, v)
                        } else {
                            v
                        }
                    }
                };
            }
        }
        let d8 = if K == MXFP4 {
            // SAFETY: 8 f32 readable.
            unsafe { _mm256_loadu_ps(e.as_ptr()) }
        } else {
            _mm256_cvtph_ps(_mm_set_epi64x(h[1] as i64, h[0] as i64))
        };
        let dw = _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
            _mm512_castps256_ps512(d8),
        );
        (wv, dw)
    }
}

/// `ROWS` rows × `T` tokens into `res[r][k]`.
///
/// Per token and pair: four `vpdpbusd` give 16 lanes per row (8 per block); two rounds of
/// pairwise lane sums (`vpermt2d` + add) fold the four rows into one vector of 4 lanes each
/// (2 per block), so the conversion and scaling run once per four rows.
///
/// # Safety
/// `w` yields `pairs` pairs; each activation covers `pairs` pairs of quants, scales and sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<W: Weights, const T: usize>(
    w: &W,
    pairs: usize,
    y: &[Act; TOK],
    sh: i32,
    res: &mut TileOut,
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
    for p in 0..pairs {
        // SAFETY (whole loop body): p < pairs, and the caller guarantees `pairs` pairs in
        // the weights and every activation array.
        unsafe {
            let (wv, dwv) = w.pair(p);
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
