//! AVX-512 (F, BW, VL, VNNI) kernels for the K-quants Q4_K, Q5_K and Q6_K against Q8_K
//! activations. Block layouts are ggml's (ggml/src/ggml-common.h, `block_q4_K` / `block_q5_K`
//! / `block_q6_K` / `block_q8_K`); `vpdpbusd` and `vpdpwssd` are as in the Intel SDM
//! ("Multiply and Add Unsigned and Signed Bytes" / "Multiply and Add Signed Word Integers").
//!
//! Weights are unsigned bytes (Q4_K q ∈ [0, 15], Q5_K [0, 31], Q6_K [0, 63] meaning q − 32).
//! Per 64 elements, `vpdpbusd` gives 16 lanes of 4 products each; such a sum fits in i16
//! (|·| ≤ 63·128·4), so two chunks' lanes pack into words (`vpackssdw`, never saturating) and
//! `vpmaddwd` / `vpdpwssd` against per-word sub-block scales apply the scales and accumulate,
//! exactly. Mins (Q4_K/Q5_K, Σ_j m_j·(bsum_2j + bsum_2j+1)) and the Q6_K offset
//! (−32·Σ_g sc_g·bsum_g) come from the activation block sums, also in exact integers.
//!
//! Rows go four at a time. For up to `DIRECT_MAX` tokens each super-block is decoded straight
//! into registers (decode, memory-bound); for more, the four rows are decoded once into a
//! thread-local scratch and every token group reads them back. Both paths feed the same
//! integer and float steps, so they give the same bits. Per super-block and token, the four
//! rows' integer lanes are folded (`vpermt2d` + add) into one vector, so the conversion and
//! the FMA with d·d_y run once per four rows.
//!
//! Per (row, token) the arithmetic is fixed: exact i32 lanes per super-block, converted and
//! fused-multiply-added into 4 f32 lanes, super-blocks in order; the 4 lanes are summed once at
//! the end in a fixed order. Nothing depends on the tile, neighbouring rows or the batch, so
//! gemm rows equal gemv bit for bit.

// Kernels index parallel per-row / per-token arrays by number.
#![allow(clippy::needless_range_loop)]

use super::avx2::{k4_scales_mins, q6k_half};
use super::BlockArgs;
use crate::quant::blocks::*;
use crate::quant::GgmlType;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Weight rows decoded together; their sums share one vector in the tile.
const ROWS: usize = 4;

/// Tokens per register tile.
const TOK: usize = 4;

/// Up to this many tokens, blocks are decoded straight into registers (once per token group);
/// beyond, rows are decoded once into the scratch and every token group reads them back.
const DIRECT_MAX: usize = 4;

/// Blocks ahead of the current one prefetched by the direct path.
const PREFETCH: usize = 4;

/// The types with a kernel here.
pub(super) fn has_kernel(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K)
}

/// Rows and tokens the matmul should hand to one `dot_block` call.
pub(super) const TILE: (usize, usize) = (16, 64);

/// For chunk pair h, word w of `vpackssdw(p_2h, p_2h+1)` (128-bit lane l = w / 8, j = w % 8)
/// is `vpdpbusd` lane 4l + j % 4 of chunk 2h + j / 4; the tables give its sub-block, which
/// selects its scale (Q4_K/Q5_K: 32 elements per sub-block, Q6_K: 16).
const fn pack_idx(q6: bool) -> [[i16; 32]; 2] {
    i16_table!(2, 32, |h, w| {
        let (l, j) = (w / 8, w % 8);
        let chunk = 2 * h + j / 4;
        let lane = 4 * l + j % 4;
        (if q6 {
            4 * chunk + lane / 4
        } else {
            2 * chunk + lane / 8
        }) as i16
    })
}
static K4_IDX: [[i16; 32]; 2] = pack_idx(false);
static K6_IDX: [[i16; 32]; 2] = pack_idx(true);

const Q4K: u8 = 0;
const Q5K: u8 = 1;
const Q6K: u8 = 2;

/// One decoded super-block of one row.
#[derive(Clone, Copy)]
struct Blk {
    /// 4 chunks of 64 unsigned weights, element order.
    q: [__m512i; 4],
    /// Scale words for chunk pairs (0, 1) and (2, 3) in `vpackssdw` order.
    s: [__m512i; 2],
    /// Q4_K/Q5_K: mins as [m0, m0, m1, m1, .., m7, m7]; Q6_K: −32·sc_g (16 words).
    mn: __m256i,
    /// f16 bits of d and dmin (converted four rows at a time by `dw_lanes`).
    d: u16,
    dmin: u16,
}

/// [`BlockArgs`] for the k-quant rows this module has a kernel for (`has_kernel`).
///
/// # Safety
/// As for `avx512::dot_block`, but with Q8_K activations (no pair layout).
pub(super) unsafe fn dot_block(a: BlockArgs<'_>, out: &mut [f32]) {
    let (ty, w, acts) = (a.ty, a.w, a.acts);
    let cols = acts.cols();
    let nsb = cols / QK_K;
    let row_bytes = ty.row_bytes(cols).expect("validated by kernels::dot_block");
    let y = &acts.q8k;
    assert!(y.len() >= (a.t0 + a.nt) * nsb, "Q8_K activations present");
    let job = Job {
        w,
        row_bytes,
        rows: w.len() / row_bytes,
        y,
        nsb,
        t0: a.t0,
        nt: a.nt,
        kind: match ty {
            GgmlType::Q4K => Q4K,
            GgmlType::Q5K => Q5K,
            _ => Q6K,
        },
    };
    // SAFETY: forwarded from the caller; the job's shapes are checked above.
    unsafe {
        if a.nt <= DIRECT_MAX {
            dot_direct(&job, out)
        } else {
            dot_decoded(&job, out)
        }
    }
}

/// The operands of one `dot_block` call.
struct Job<'a> {
    w: &'a [u8],
    row_bytes: usize,
    rows: usize,
    /// Q8_K activations, `nsb` blocks per token.
    y: &'a [BlockQ8K],
    nsb: usize,
    t0: usize,
    nt: usize,
    kind: u8,
}

impl Job<'_> {
    /// For rows `r0..r0 + rr`, runs `f(token count, &[activation row; TOK], &mut res)` on each
    /// group of up to TOK tokens and scatters the results into `out`.
    #[inline(always)]
    fn token_groups(
        &self,
        out: &mut [f32],
        r0: usize,
        rr: usize,
        mut f: impl FnMut(usize, &[*const BlockQ8K; TOK], &mut [[f32; TOK]; ROWS]),
    ) {
        let (nt, nsb) = (self.nt, self.nsb);
        let mut t = 0;
        while t < nt {
            let n = (nt - t).min(TOK);
            let ys: [*const BlockQ8K; TOK] =
                std::array::from_fn(|k| self.y[(self.t0 + t + k.min(n - 1)) * nsb..].as_ptr());
            let mut res = [[0f32; TOK]; ROWS];
            f(n, &ys, &mut res);
            for r in 0..rr {
                for k in 0..n {
                    out[(r0 + r) * nt + t + k] = res[r][k];
                }
            }
            t += n;
        }
    }
}

/// Up to `DIRECT_MAX` tokens: each super-block decoded straight into registers.
///
/// # Safety
/// As [`dot_block`].
#[inline(always)]
unsafe fn dot_direct(job: &Job, out: &mut [f32]) {
    let (rows, row_bytes, nsb, kind) = (job.rows, job.row_bytes, job.nsb, job.kind);
    for r0 in (0..rows).step_by(ROWS) {
        let rr = (rows - r0).min(ROWS);
        // Missing rows repeat the last one (their results are dropped).
        let wr: [*const u8; ROWS] =
            std::array::from_fn(|r| job.w[(r0 + r.min(rr - 1)) * row_bytes..].as_ptr());
        job.token_groups(out, r0, rr, |n, ys, res| {
            macro_rules! go {
                ($t:literal, $k:ident) => {
                    // SAFETY: every row pointer starts a row of `nsb` blocks of `kind`;
                    // every activation row covers `nsb` blocks.
                    unsafe { direct::<$t, $k>(&wr, nsb, ys, res) }
                };
            }
            match (n, kind) {
                (4, Q4K) => go!(4, Q4K),
                (4, Q5K) => go!(4, Q5K),
                (4, _) => go!(4, Q6K),
                (3, Q4K) => go!(3, Q4K),
                (3, Q5K) => go!(3, Q5K),
                (3, _) => go!(3, Q6K),
                (2, Q4K) => go!(2, Q4K),
                (2, Q5K) => go!(2, Q5K),
                (2, _) => go!(2, Q6K),
                (_, Q4K) => go!(1, Q4K),
                (_, Q5K) => go!(1, Q5K),
                (_, _) => go!(1, Q6K),
            }
        });
    }
}

/// Decoded rows in the scratch: per (super-block, row) one `Blk`'s vectors; `dw[sb]` the 16
/// f32 lanes multiplying the folded sums (`dw_lanes`). Rows past the end are zero.
#[derive(Default)]
struct Decoded {
    q: Vec<__m512i>,
    s: Vec<__m512i>,
    mn: Vec<__m256i>,
    dw: Vec<__m512>,
}

thread_local! {
    static DECODED: RefCell<Decoded> = RefCell::new(Decoded::default());
}

/// More than `DIRECT_MAX` tokens: four rows at a time decoded once into the scratch, which
/// every token group reads back.
///
/// # Safety
/// As [`dot_block`].
#[inline(always)]
unsafe fn dot_decoded(job: &Job, out: &mut [f32]) {
    let (rows, row_bytes, nsb, kind) = (job.rows, job.row_bytes, job.nsb, job.kind);
    DECODED.with(|dec| {
        let mut dec = dec.borrow_mut();
        let dec = &mut *dec;
        // SAFETY: AVX-512 F per the caller.
        let (zi, zf) = unsafe { (_mm512_setzero_si512(), _mm512_setzero_ps()) };
        dec.q.resize(nsb * ROWS * 4, zi);
        dec.s.resize(nsb * ROWS * 2, zi);
        // SAFETY: AVX per the caller.
        dec.mn.resize(nsb * ROWS, unsafe { _mm256_setzero_si256() });
        dec.dw.resize(nsb, zf);
        for r0 in (0..rows).step_by(ROWS) {
            let rr = (rows - r0).min(ROWS);
            let wr: [Option<&[u8]>; ROWS] = std::array::from_fn(|r| {
                (r < rr).then(|| &job.w[(r0 + r) * row_bytes..(r0 + r + 1) * row_bytes])
            });
            // SAFETY: features per the caller; rows are `nsb` blocks of `kind`; the scratch
            // holds `nsb` super-blocks.
            unsafe { decode_rows(kind, &wr, nsb, dec) };
            job.token_groups(out, r0, rr, |n, ys, res| {
                macro_rules! go {
                    ($t:literal) => {
                        // SAFETY: scratch and every activation row cover `nsb` super-blocks.
                        unsafe {
                            match kind {
                                Q6K => tile::<$t, Q6K>(dec, nsb, ys, res),
                                _ => tile::<$t, Q4K>(dec, nsb, ys, res),
                            }
                        }
                    };
                }
                match n {
                    4 => go!(4),
                    3 => go!(3),
                    2 => go!(2),
                    _ => go!(1),
                }
            });
        }
    });
}

/// Decodes super-block `$sb` of the row at pointer `$row` into a `Blk` (a macro so that it
/// inlines into the direct kernel). Expands inside an `unsafe` block of a function with the
/// AVX-512 features; the row must hold more than `$sb` blocks of `$kind`.
macro_rules! decode_block {
    ($kind:expr, $row:expr, $sb:expr) => {{
        let (row, sb): (*const u8, usize) = ($row, $sb);
        let m4 = _mm256_set1_epi8(0x0F);
        let join = |lo: __m256i, hi: __m256i| _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        let idx = if $kind == Q6K { &K6_IDX } else { &K4_IDX };
        // Unsafe operations run in the caller's unsafe block, which guarantees block `sb` is
        // readable (blocks have alignment 1, every bit pattern valid).
        {
            let (i0, i1) = (
                _mm512_loadu_si512(idx[0].as_ptr().cast()),
                _mm512_loadu_si512(idx[1].as_ptr().cast()),
            );
            if $kind == Q6K {
                let b = &*row.cast::<BlockQ6K>().add(sb);
                let mut q = [_mm512_setzero_si512(); 4];
                for h in 0..2 {
                    let [e0, e1, e2, e3] = q6k_half(b, h);
                    q[2 * h] = join(e0, e1);
                    q[2 * h + 1] = join(e2, e3);
                }
                let s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.scales.as_ptr().cast()));
                let s16z = _mm512_castsi256_si512(s16);
                Blk {
                    q,
                    s: [
                        _mm512_permutexvar_epi16(i0, s16z),
                        _mm512_permutexvar_epi16(i1, s16z),
                    ],
                    mn: _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s16, 5)),
                    d: u16::from_le_bytes(b.d),
                    dmin: 0,
                }
            } else {
                let (d, dmin, scales, qs, qh) = if $kind == Q4K {
                    let b = &*row.cast::<BlockQ4K>().add(sb);
                    (b.d, b.dmin, &b.scales, &b.qs, None)
                } else {
                    let b = &*row.cast::<BlockQ5K>().add(sb);
                    (b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh))
                };
                let hb = qh.map(|h| _mm256_loadu_si256(h.as_ptr().cast()));
                let mut q = [_mm512_setzero_si512(); 4];
                for c in 0..4 {
                    let v = _mm256_loadu_si256(qs.as_ptr().add(32 * c).cast());
                    let mut lo = _mm256_and_si256(v, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    if let Some(hb) = hb {
                        // Bit 2c of qh[l] is bit 4 of element 64c + l, bit 2c + 1 of element
                        // 64c + 32 + l.
                        let b4 = _mm256_set1_epi8(0x10);
                        let bit = _mm256_set1_epi8(1 << (2 * c));
                        let h0 = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
                        let bit = _mm256_set1_epi8(1 << (2 * c + 1));
                        let h1 = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
                        lo = _mm256_or_si256(lo, _mm256_and_si256(h0, b4));
                        hi = _mm256_or_si256(hi, _mm256_and_si256(h1, b4));
                    }
                    q[c] = join(lo, hi);
                }
                let (s8, m8) = k4_scales_mins(scales);
                let s16 =
                    _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(s8.as_ptr().cast())));
                // Mins to [m0, m0, m1, m1, ...]: duplicate each word within its 128-bit half.
                let m16 = _mm256_cvtepu8_epi16(_mm_loadl_epi64(m8.as_ptr().cast()));
                let m16 = _mm256_permute4x64_epi64(m16, 0b01_01_00_00);
                let pairs = _mm256_setr_epi8(
                    0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 8, 9, 10, 11, 10, 11, 12,
                    13, 12, 13, 14, 15, 14, 15,
                );
                Blk {
                    q,
                    s: [
                        _mm512_permutexvar_epi16(i0, s16),
                        _mm512_permutexvar_epi16(i1, s16),
                    ],
                    mn: _mm256_shuffle_epi8(m16, pairs),
                    d: u16::from_le_bytes(d),
                    dmin: u16::from_le_bytes(dmin),
                }
            }
        }
    }};
}

/// Decodes super-block `sb` of the row at `row`.
///
/// # Safety
/// `row` starts a row of more than `sb` blocks of `KIND`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn decode_block<const KIND: u8>(row: *const u8, sb: usize) -> Blk {
    // SAFETY: forwarded from the caller.
    unsafe { decode_block!(KIND, row, sb) }
}

/// The f32 multipliers of a super-block's folded sums for rows with f16 scales `d` / `dmin`:
/// Q4_K/Q5_K [d_r, d_r] at lanes 2r and −dmin_r at 8 + 2r (the fold order of `finish`); Q6_K
/// d_r at lanes 4r..4r + 4.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn dw_lanes<const KIND: u8>(d: [u16; ROWS], dmin: [u16; ROWS]) -> __m512 {
    let h = _mm_setr_epi16(
        d[0] as i16,
        d[1] as i16,
        d[2] as i16,
        d[3] as i16,
        dmin[0] as i16,
        dmin[1] as i16,
        dmin[2] as i16,
        dmin[3] as i16,
    );
    let f = _mm512_castps256_ps512(_mm256_cvtph_ps(h));
    if KIND == Q6K {
        let idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        _mm512_permutexvar_ps(idx, f)
    } else {
        let idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        let neg = _mm512_setr_epi32(
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            -1 << 31,
            -1 << 31,
            -1 << 31,
            -1 << 31,
            -1 << 31,
            -1 << 31,
            -1 << 31,
            -1 << 31,
        );
        _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_permutexvar_ps(idx, f)),
            neg,
        ))
    }
}

/// Decodes `ROWS` rows (zeros for `None`) into the scratch.
///
/// # Safety
/// Each row is `nsb` blocks of `kind`; the scratch is sized for `nsb` super-blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn decode_rows(kind: u8, w: &[Option<&[u8]>; ROWS], nsb: usize, dec: &mut Decoded) {
    for r in 0..ROWS {
        if let Some(row) = w[r] {
            assert!(row.len() >= nsb * kind_bytes(kind), "row length");
        }
    }
    let bsz = kind_bytes(kind);
    let ptrs: [*const u8; ROWS] =
        std::array::from_fn(|r| w[r].map_or(std::ptr::null(), |x| x.as_ptr()));
    for sb in 0..nsb {
        prefetch(&ptrs, sb, bsz);
        let (mut d, mut dmin) = ([0u16; ROWS], [0u16; ROWS]);
        for r in 0..ROWS {
            let b = match w[r] {
                // SAFETY: the row holds `nsb` blocks (asserted above).
                Some(row) => unsafe {
                    match kind {
                        Q4K => decode_block::<Q4K>(row.as_ptr(), sb),
                        Q5K => decode_block::<Q5K>(row.as_ptr(), sb),
                        _ => decode_block::<Q6K>(row.as_ptr(), sb),
                    }
                },
                None => Blk {
                    q: [_mm512_setzero_si512(); 4],
                    s: [_mm512_setzero_si512(); 2],
                    mn: _mm256_setzero_si256(),
                    d: 0,
                    dmin: 0,
                },
            };
            let i = sb * ROWS + r;
            dec.q[4 * i..4 * i + 4].copy_from_slice(&b.q);
            dec.s[2 * i..2 * i + 2].copy_from_slice(&b.s);
            dec.mn[i] = b.mn;
            (d[r], dmin[r]) = (b.d, b.dmin);
        }
        dec.dw[sb] = match kind {
            Q6K => dw_lanes::<Q6K>(d, dmin),
            _ => dw_lanes::<Q4K>(d, dmin),
        };
    }
}

/// Four rows advance together, which the hardware prefetchers follow poorly: fetches block
/// `sb + PREFETCH` of each row (past a row's end this is the next row, soon needed).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn prefetch(w: &[*const u8; ROWS], sb: usize, bsz: usize) {
    for r in 0..ROWS {
        let p = w[r].wrapping_add((sb + PREFETCH) * bsz);
        let mut o = 0;
        while o < bsz {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o).cast());
            o += 64;
        }
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(bsz - 1).cast());
    }
}

/// Bytes of one block of `kind`.
fn kind_bytes(kind: u8) -> usize {
    match kind {
        Q4K => std::mem::size_of::<BlockQ4K>(),
        Q5K => std::mem::size_of::<BlockQ5K>(),
        _ => std::mem::size_of::<BlockQ6K>(),
    }
}

/// One row's 16 exact i32 lanes for one token and super-block: 4 `vpdpbusd` (16 lanes of 4
/// products, each fitting i16), packed pairwise to words (`vpackssdw`, never saturating) and
/// multiplied by their scales with `vpmaddwd`/`vpdpwssd`. Q6_K adds its −32 offset on lanes
/// 0-7 (the zero upper half of the offset vector leaves lanes 8-15 alone).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn row_lanes<const KIND: u8>(
    q: &[__m512i; 4],
    s: &[__m512i; 2],
    mn: __m256i,
    y: &[__m512i; 4],
    bs: __m512i,
) -> __m512i {
    let z = _mm512_setzero_si512();
    let p0 = _mm512_dpbusd_epi32(z, q[0], y[0]);
    let p1 = _mm512_dpbusd_epi32(z, q[1], y[1]);
    let p2 = _mm512_dpbusd_epi32(z, q[2], y[2]);
    let p3 = _mm512_dpbusd_epi32(z, q[3], y[3]);
    let a = _mm512_madd_epi16(_mm512_packs_epi32(p0, p1), s[0]);
    let a = _mm512_dpwssd_epi32(a, _mm512_packs_epi32(p2, p3), s[1]);
    if KIND == Q6K {
        _mm512_dpwssd_epi32(a, bs, _mm512_zextsi256_si512(mn))
    } else {
        a
    }
}

/// Folds four rows' lanes (and Q4_K/Q5_K min sums) and accumulates one super-block of one
/// token: two rounds of pairwise lane sums (`vpermt2d` + add) leave 4 lanes per row; Q4_K/Q5_K
/// fold once more with the min sums (per row 2 lanes × d, 2 lanes × −dmin). One conversion,
/// one multiply d·d_y and one FMA per four rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn finish<const KIND: u8>(
    ia: &[__m512i; ROWS],
    mn: &[__m256i; ROWS],
    bs: __m512i,
    dw: __m512,
    yd: f32,
    acc: __m512,
) -> __m512 {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let fold = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(
            _mm512_permutex2var_epi32(a, even, b),
            _mm512_permutex2var_epi32(a, odd, b),
        )
    };
    let s = fold(fold(ia[0], ia[1]), fold(ia[2], ia[3]));
    let sums = if KIND == Q6K {
        s
    } else {
        let join = |a: __m256i, b: __m256i| _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        let m01 = _mm512_madd_epi16(bs, join(mn[0], mn[1]));
        let m23 = _mm512_madd_epi16(bs, join(mn[2], mn[3]));
        fold(s, fold(m01, m23))
    };
    let f = _mm512_mul_ps(dw, _mm512_set1_ps(yd));
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), f, acc)
}

/// Each token's 4 lanes per row summed in a fixed order.
#[inline]
fn reduce<const T: usize, const KIND: u8>(acc: &[__m512; T], res: &mut [[f32; TOK]; ROWS]) {
    for k in 0..T {
        // SAFETY: __m512 and [f32; 16] have the same size and any bit pattern is valid.
        let l: [f32; 16] = unsafe { std::mem::transmute::<__m512, [f32; 16]>(acc[k]) };
        for r in 0..ROWS {
            res[r][k] = if KIND == Q6K {
                (l[4 * r] + l[4 * r + 1]) + (l[4 * r + 2] + l[4 * r + 3])
            } else {
                (l[2 * r] + l[2 * r + 1]) + (l[8 + 2 * r] + l[9 + 2 * r])
            };
        }
    }
}

/// One token's quants of super-block `sb` and its block sums twice (both 256-bit halves).
///
/// # Safety
/// `y` covers more than `sb` blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn act(y: *const BlockQ8K, sb: usize) -> ([__m512i; 4], __m512i, f32) {
    // SAFETY: per the caller; BlockQ8K is plain data.
    unsafe {
        let b = &*y.add(sb);
        let q = std::array::from_fn(|c| _mm512_loadu_si512(b.qs.as_ptr().add(64 * c).cast()));
        let bs = _mm512_broadcast_i64x4(_mm256_loadu_si256(b.bsums.as_ptr().cast()));
        (q, bs, b.d)
    }
}

/// `ROWS` rows × `T` tokens, decoding each block straight into registers.
///
/// # Safety
/// Every `w` pointer starts a row of `nsb` blocks of `KIND`; every activation row covers
/// `nsb` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn direct<const T: usize, const KIND: u8>(
    w: &[*const u8; ROWS],
    nsb: usize,
    y: &[*const BlockQ8K; TOK],
    res: &mut [[f32; TOK]; ROWS],
) {
    let bsz = kind_bytes(KIND);
    let mut acc = [_mm512_setzero_ps(); T];
    for sb in 0..nsb {
        prefetch(w, sb, bsz);
        // SAFETY: sb < nsb blocks of every activation row.
        let ya: [([__m512i; 4], __m512i, f32); T] =
            std::array::from_fn(|k| unsafe { act(y[k], sb) });
        let mut ia = [[_mm512_setzero_si512(); ROWS]; T];
        let mut mn = [_mm256_setzero_si256(); ROWS];
        let (mut d, mut dmin) = ([0u16; ROWS], [0u16; ROWS]);
        // Row by row, so only one row's decoded block is live.
        for r in 0..ROWS {
            // SAFETY: sb < nsb blocks of row r.
            let b: Blk = unsafe { decode_block!(KIND, w[r], sb) };
            for k in 0..T {
                ia[k][r] = row_lanes::<KIND>(&b.q, &b.s, b.mn, &ya[k].0, ya[k].1);
            }
            (mn[r], d[r], dmin[r]) = (b.mn, b.d, b.dmin);
        }
        let dw = dw_lanes::<KIND>(d, dmin);
        for k in 0..T {
            acc[k] = finish::<KIND>(&ia[k], &mn, ya[k].1, dw, ya[k].2, acc[k]);
        }
    }
    reduce::<T, KIND>(&acc, res);
}

/// `ROWS` decoded rows from the scratch × `T` tokens.
///
/// # Safety
/// `dec` holds `ROWS` decoded rows of `nsb` super-blocks; every activation row covers `nsb`
/// blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tile<const T: usize, const KIND: u8>(
    dec: &Decoded,
    nsb: usize,
    y: &[*const BlockQ8K; TOK],
    res: &mut [[f32; TOK]; ROWS],
) {
    assert!(dec.q.len() >= nsb * ROWS * 4 && dec.s.len() >= nsb * ROWS * 2);
    assert!(dec.mn.len() >= nsb * ROWS && dec.dw.len() >= nsb);
    let mut acc = [_mm512_setzero_ps(); T];
    for sb in 0..nsb {
        let i = sb * ROWS;
        let mn: &[__m256i; ROWS] = dec.mn[i..i + ROWS].try_into().expect("ROWS rows");
        for k in 0..T {
            // SAFETY: sb < nsb blocks of every activation row.
            let (yq, bs, yd) = unsafe { act(y[k], sb) };
            let mut ia = [_mm512_setzero_si512(); ROWS];
            for r in 0..ROWS {
                let q: &[__m512i; 4] = dec.q[4 * (i + r)..4 * (i + r) + 4]
                    .try_into()
                    .expect("4 chunks");
                let s: &[__m512i; 2] = dec.s[2 * (i + r)..2 * (i + r) + 2]
                    .try_into()
                    .expect("2 scale vectors");
                ia[r] = row_lanes::<KIND>(q, s, mn[r], &yq, bs);
            }
            acc[k] = finish::<KIND>(&ia, mn, bs, dec.dw[sb], yd, acc[k]);
        }
    }
    reduce::<T, KIND>(&acc, res);
}
