//! AVX-512 VNNI GEMM kernels for Q4_K / Q5_K / Q6_K / Q3_K / Q2_K / IQ4_XS weights in the 16-row interleaved ("x16")
//! layout of `quant::repack_k` against Q8_K activations. Block formats are ggml's
//! (ggml/src/ggml-common.h, `block_q4_K` / `block_q6_K` / `block_q3_K` / `block_iq4_xs` /
//! `block_q8_K`); `vpdpbusd` and
//! `vpdpwssd` are as in the Intel SDM ("Multiply and Add Unsigned and Signed Bytes" / "Multiply
//! and Add Signed Word Integers").
//!
//! Every 32-bit lane of a weight vector is one row, so
//! `vpdpbusd acc, w, [activation dword]{1to16}` multiplies 4 consecutive k of 16 rows by the
//! same 4 activation bytes and no horizontal reduction is ever needed: a group of 16 rows and
//! one token end in one vector, stored with one 64-byte store.
//!
//! Once per call the activations are copied into records, one per (super-block, token) with
//! the tokens of a super-block adjacent (`q4k_pre` / `q6k_pre`): quants, precomputed terms
//! and scale. Every activation operand is then a constant displacement from one pointer per
//! super-block; with a base + index address a `vpdpbusd` with a broadcast memory operand is
//! un-laminated into two uops, which measured 2.2x slower in the kernels' dependency chains.
//!
//! Integer sums are exact and scales are applied in integers per super-block. Both kernels
//! start each short `vpdpbusd` chain from an activation-side offset precomputed once per call
//! (per token and super-block), which re-centres the unsigned weights
//! so that the chain's sum fits an i16 and takes its sub-block scale with one `vpdpwssd`
//! against (sc, 0) words:
//! * Q4_K: per sub-block (32 k), D_j = Σ (q − 8)·a starts from −8·S_j (S_j the sub-block's
//!   activation sum, |D_j| ≤ 32·8·127); then I = Σ_j sc_j·D_j + Σ_j 8·sc_j·S_j and the mins
//!   M = Σ_j m_j·S_j come from word pairs of scales / mins against (S_2i, S_2i+1) dwords.
//! * Q5_K: as Q4_K with q to 31 and −16·S per 16 k (|·| ≤ 16·16·127), two chains a sub-block.
//! * Q6_K: per 8 k, Σ (q − 32)·a starts from −32·Σa (|·| ≤ 8·32·127).
//! * Q2_K: per 16 k, Σ q·a (q to 3, |·| ≤ 16·3·127) from 0; mins as Q4_K's, per 16 k.
//! * Q3_K: per 16 k, Σ (q − 4)·a starts from −4·Σa (|·| ≤ 16·4·127), q = low | hbit << 2.
//! * IQ4_XS: the codebook + 128 as unsigned bytes (one `vpshufb`); per sub-block (32 k),
//!   D_j = Σ v·a starts from −128·S_j. |D_j| ≤ 32·127·127 is no i16, so the scale is applied
//!   with `vpmulld` (|Σ_j ls_j·D_j| ≤ 8·32·516128 < 2^31).
//!
//! Both bounds use that Q8_K quants are in [−127, 127] (ggml's `quantize_row_q8_K` scales
//! by −127/max and clamps at 127, so −128 never occurs).
//!
//! Per (row, token) the float steps are fixed: per super-block Q4_K / Q5_K
//! / Q2_K `acc += (d·I − dmin·M)·d_a`, Q6_K / Q3_K / IQ4_XS `acc += I·(d·d_a)`, super-blocks in order. The sequence depends on
//! neither the token count, the group nor neighbouring rows or tokens, so any batch gives the
//! bits of per-token calls.

// Kernels index parallel per-token arrays by number.
#![allow(clippy::needless_range_loop)]
// Called by the matmul dispatch for repacked weights (until that lands, only by tests).

use super::avx512::{lookup, IQ4NL_U};
use crate::quant::blocks::{BlockQ8K, QK_K};
use crate::quant::repack_k::{q3k_hm, q3k_low, Q2K_QS, Q4K_QS, Q5K_QH, Q5K_QS, Q5K_SUB};
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows per interleaved group (one per 32-bit lane).
pub(super) const ROWS: usize = 16;
/// Tokens per register tile: the weights of a sub-block are unpacked once per tile.
const TOK: usize = 8;
/// Bytes of one super-block tile of 16 rows.
const Q4K_TILE: usize = ROWS * 144;
const Q6K_TILE: usize = ROWS * 210;
/// Tiles ahead of the current one that are prefetched (the weights stream once at nt ≤ TOK).
const PREFETCH: usize = 2;
/// Activation record per (super-block, token), in i32: 64 of quants (256 bytes), the terms
/// from `Q*_PRE` on, the f32 scale at `Q*_D`.
const Q4K_REC: usize = 80;
const Q4K_PRE: usize = 64;
const Q4K_D: usize = 76;
const Q6K_REC: usize = 112;
const Q6K_PRE: usize = 64;
const Q6K_D: usize = 96;
const Q5K_TILE: usize = ROWS * 176;
const Q5K_REC: usize = 96;
const Q5K_PRE: usize = 64;
const Q5K_D: usize = 84;
const Q2K_TILE: usize = ROWS * 84;
const Q2K_REC: usize = 80;
const Q2K_PRE: usize = 64;
const Q2K_D: usize = 73;
const Q3K_TILE: usize = ROWS * 110;
const IQ4XS_TILE: usize = ROWS * 136;
const Q3K_REC: usize = 96;
const Q3K_PRE: usize = 64;
const Q3K_D: usize = 80;
const IQ4XS_REC: usize = 80;
const IQ4XS_PRE: usize = 64;
const IQ4XS_D: usize = 72;
/// Offset of the index vectors in an IQ4_XS tile (`quant::repack_k`).
const IQ4XS_QS: usize = 128;

/// A `vpshufb` control: in every dword d (within its 128-bit lane), byte b takes byte
/// `picks[b]` of d (−1: zero).
const fn shuf(picks: [i8; 4]) -> [u8; 64] {
    let mut t = [0x80u8; 64];
    let mut d = 0;
    while d < 16 {
        let mut b = 0;
        while b < 4 {
            if picks[b] >= 0 {
                t[4 * d + b] = (4 * (d % 4)) as u8 + picks[b] as u8;
            }
            b += 1;
        }
        d += 1;
    }
    t
}
/// Byte j as the zero-extended low word, high word 0.
static SC_W: [[u8; 64]; 4] = [
    shuf([0, -1, -1, -1]),
    shuf([1, -1, -1, -1]),
    shuf([2, -1, -1, -1]),
    shuf([3, -1, -1, -1]),
];
/// Bytes 2i and 2i + 1 as two zero-extended words.
static PAIR_W: [[u8; 64]; 2] = [shuf([0, -1, 1, -1]), shuf([2, -1, 3, -1])];
/// Byte j as the high byte of the low word (sign-extended by `vpsraw 8`), high word 0.
static SC_HI: [[u8; 64]; 4] = [
    shuf([-1, 0, -1, -1]),
    shuf([-1, 1, -1, -1]),
    shuf([-1, 2, -1, -1]),
    shuf([-1, 3, -1, -1]),
];

/// `ternlog` immediate for A | (B & C).
const OR_AND: i32 = 0xF8;

thread_local! {
    /// Per-call activation records (`q4k_pre` / `q6k_pre`), reused across calls.
    static PRE: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// The activation dword at byte `$off` of `$p`, broadcast (folds into a `{1to16}` operand).
/// Expands inside an `unsafe` block that guarantees the 4 bytes are readable.
macro_rules! bcast {
    ($p:expr, $off:expr) => {
        _mm512_set1_epi32(std::ptr::read_unaligned($p.add($off).cast::<i32>()))
    };
}

/// `vpdpwssd $acc, $a, $b` kept as one instruction: for generic x86-64 tuning LLVM splits the
/// intrinsic into `vpmaddwd` + `vpaddd`, one more vector uop on the kernels' busiest ports.
/// Expands inside an `unsafe` block of a function with AVX-512 VNNI.
macro_rules! dpwssd {
    ($acc:expr, $a:expr, $b:expr) => {{
        let mut acc: __m512i = $acc;
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) $a,
            b = in(zmm_reg) $b,
            options(pure, nomem, nostack, preserves_flags),
        );
        acc
    }};
}

/// `$acc + Σ_i vpdpbusd($w_i, dword at $q + 4i broadcast)` over the given weight vectors, in
/// order. Written out because LLVM addresses the broadcasts as base + index, which un-laminates
/// each `vpdpbusd` into two uops; here every operand is `[q + const]`. Expands inside an
/// `unsafe` block of a function with AVX-512 VNNI that guarantees the bytes are readable.
macro_rules! dpbusd_chain {
    ($acc:expr, $q:expr, [$w0:expr, $w1:expr]) => {{
        let mut acc: __m512i = $acc;
        std::arch::asm!(
            "vpdpbusd {acc}, {w0}, [{q}]{{1to16}}",
            "vpdpbusd {acc}, {w1}, [{q} + 4]{{1to16}}",
            acc = inout(zmm_reg) acc,
            q = in(reg) $q,
            w0 = in(zmm_reg) $w0,
            w1 = in(zmm_reg) $w1,
            options(pure, readonly, nostack, preserves_flags),
        );
        acc
    }};
    ($acc:expr, $q:expr, [$w0:expr, $w1:expr, $w2:expr, $w3:expr,
                          $w4:expr, $w5:expr, $w6:expr, $w7:expr]) => {{
        let mut acc: __m512i = $acc;
        std::arch::asm!(
            "vpdpbusd {acc}, {w0}, [{q}]{{1to16}}",
            "vpdpbusd {acc}, {w1}, [{q} + 4]{{1to16}}",
            "vpdpbusd {acc}, {w2}, [{q} + 8]{{1to16}}",
            "vpdpbusd {acc}, {w3}, [{q} + 12]{{1to16}}",
            "vpdpbusd {acc}, {w4}, [{q} + 16]{{1to16}}",
            "vpdpbusd {acc}, {w5}, [{q} + 20]{{1to16}}",
            "vpdpbusd {acc}, {w6}, [{q} + 24]{{1to16}}",
            "vpdpbusd {acc}, {w7}, [{q} + 28]{{1to16}}",
            acc = inout(zmm_reg) acc,
            q = in(reg) $q,
            w0 = in(zmm_reg) $w0,
            w1 = in(zmm_reg) $w1,
            w2 = in(zmm_reg) $w2,
            w3 = in(zmm_reg) $w3,
            w4 = in(zmm_reg) $w4,
            w5 = in(zmm_reg) $w5,
            w6 = in(zmm_reg) $w6,
            w7 = in(zmm_reg) $w7,
            options(pure, readonly, nostack, preserves_flags),
        );
        acc
    }};
}

/// Prefetches the `bytes`-long tile at `p` (any address: prefetches never fault). Into L2
/// (`T1`): a whole tile's lines asked for L1 at once held its few miss buffers, and one-token
/// products stalled on the prefetches themselves (Sapphire Rapids: qwen3-30b-a3b-shaped tg128
/// 49–52 → 64–66 t/s, the 1.5B's 19.2–19.3 → 20.0–20.7; prefill unchanged).
#[inline(always)]
fn prefetch_tile(p: *const u8, bytes: usize) {
    let mut o = 0;
    while o < bytes {
        // SAFETY: `_mm_prefetch` is a hint that never faults, whatever the address; SSE is
        // part of x86-64.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(o).cast()) };
        o += 64;
    }
}

/// `acc[k] += I_k·(d·d_a)` (Q6_K / Q3_K / IQ4_XS): `tile`'s d[16] f16 first, token k's d_a
/// at `r + k·rb + d_at`.
///
/// # Safety
/// AVX-512 F and F16C; the tile's first 32 bytes and the T records' scales are readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn add_scaled<const T: usize>(
    tile: *const u8,
    (r, rb, d_at): (*const u8, usize, usize),
    is: &[__m512i; T],
    acc: &mut [__m512; T],
) {
    // SAFETY: per the caller.
    unsafe {
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(tile.cast()));
        for k in 0..T {
            let da = std::ptr::read(r.add(k * rb + d_at).cast::<f32>());
            let f = _mm512_mul_ps(d, _mm512_set1_ps(da));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[k]), f, acc[k]);
        }
    }
}

/// `acc[k] += (d·I_k − dmin·M_k)·d_a` (Q4_K / Q5_K / Q2_K): d[16] then dmin[16] f16 first in
/// `tile`, token k's d_a at `r + k·rb + d_at`.
///
/// # Safety
/// As `add_scaled`, with the tile's first 64 bytes readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn add_with_mins<const T: usize>(
    tile: *const u8,
    (r, rb, d_at): (*const u8, usize, usize),
    (is, im): (&[__m512i; T], &[__m512i; T]),
    acc: &mut [__m512; T],
) {
    // SAFETY: per the caller.
    unsafe {
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(tile.cast()));
        let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(tile.add(32).cast()));
        for k in 0..T {
            let da = _mm512_set1_ps(std::ptr::read(r.add(k * rb + d_at).cast::<f32>()));
            let t = _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[k]));
            let t = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(im[k]), t);
            acc[k] = _mm512_fmadd_ps(t, da, acc[k]);
        }
    }
}

/// Stores token k's 16 outputs at `out + k·ld`.
///
/// # Safety
/// AVX-512 F; `out + k * ld .. + 16` is writable for k < T.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn store<const T: usize>(acc: &[__m512; T], out: *mut f32, ld: usize) {
    for k in 0..T {
        // SAFETY: per the caller.
        unsafe { _mm512_storeu_ps(out.add(k * ld), acc[k]) };
    }
}

/// Defines `unsafe fn $name<const T: usize>(w, nsb, rec, stride, out, ld)`, one group × `T`
/// tokens, from what differs per type: `$setup` runs once; then per super-block, with
/// `$tile` its tile (the tile `PREFETCH` ahead prefetched whole into L2) and `$r` its `T`
/// records, `$body` adds into the `T` accumulators `$acc`, stored at `out + k·ld` at the end.
///
/// # Safety (of the defined function)
/// AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C; `w` holds `nsb` tiles; `rec` + sb·stride holds `T`
/// records for sb < nsb; `out + k * ld .. + 16` is writable for k < T.
macro_rules! tile_kernel {
    ($(#[$m:meta])* fn $name:ident, $tile_bytes:expr, |$tile:ident, $r:ident, $acc:ident| {
        $($setup:stmt;)*
    } $body:block) => {
        $(#[$m])*
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        unsafe fn $name<const T: usize>(
            w: *const u8,
            nsb: usize,
            rec: *const u8,
            stride: usize,
            out: *mut f32,
            ld: usize,
        ) {
            $($setup)*
            let mut $acc = [_mm512_setzero_ps(); T];
            for sb in 0..nsb {
                // SAFETY (whole block): sb < nsb, so the tile and the T records at r are in
                // bounds; tiles are plain bytes read unaligned; shuffle tables are 64 bytes.
                unsafe {
                    let $tile = w.add(sb * $tile_bytes);
                    prefetch_tile($tile.wrapping_add(PREFETCH * $tile_bytes), $tile_bytes);
                    let $r = rec.add(sb * stride);
                    $body
                }
            }
            // SAFETY: per the caller.
            unsafe { store(&$acc, out, ld) }
        }
    };
}

/// Checks slice shapes; returns (super-blocks per row, groups).
fn shapes(w: &[u8], cols: usize, acts: &[BlockQ8K], nt: usize, tile: usize) -> (usize, usize) {
    assert!(cols > 0 && cols.is_multiple_of(QK_K), "whole super-blocks");
    let nsb = cols / QK_K;
    assert!(w.len().is_multiple_of(nsb * tile), "whole groups");
    assert!(acts.len() >= nt * nsb, "activation rows");
    (nsb, w.len() / (nsb * tile))
}

/// Runs `$tile::<n>(group, nsb, records, stride, out, ld)` over every group and tile of up to
/// TOK tokens (`n` a literal for the register arrays), with the records `$fill` writes
/// (`$rec` i32 each; `stride` bytes from one super-block's records to the next).
macro_rules! gemm_body {
    ($w:expr, $cols:expr, $acts:expr, $nt:expr, $y:expr, $ld:expr,
     $tile_bytes:expr, $rec:expr, $fill:ident, $tile:ident) => {{
        let (w, acts, nt, y, ld) = ($w, $acts, $nt, $y, $ld);
        let (nsb, groups) = shapes(w, $cols, acts, nt, $tile_bytes);
        PRE.with(|pre| {
            let mut pre = pre.borrow_mut();
            pre.resize(nt * nsb * $rec, 0);
            $fill(&acts[..nt * nsb], nt, nsb, &mut pre);
            let stride = nt * $rec * 4;
            for g in 0..groups {
                let wg = w[g * nsb * $tile_bytes..].as_ptr();
                let mut t = 0;
                while t < nt {
                    let n = (nt - t).min(TOK);
                    // Token t's record of super-block 0.
                    let r = pre[t * $rec..].as_ptr().cast::<u8>();
                    // Token t's row of y, columns g*16..g*16 + 16.
                    let out = y.wrapping_add(t * ld + g * ROWS);
                    // SAFETY: features per the caller; `wg` holds `nsb` tiles; `r` + sb·stride
                    // holds n records for sb < nsb (shapes checked); `out` per the caller.
                    unsafe {
                        match n {
                            8 => $tile::<8>(wg, nsb, r, stride, out, ld),
                            7 => $tile::<7>(wg, nsb, r, stride, out, ld),
                            6 => $tile::<6>(wg, nsb, r, stride, out, ld),
                            5 => $tile::<5>(wg, nsb, r, stride, out, ld),
                            4 => $tile::<4>(wg, nsb, r, stride, out, ld),
                            3 => $tile::<3>(wg, nsb, r, stride, out, ld),
                            2 => $tile::<2>(wg, nsb, r, stride, out, ld),
                            _ => $tile::<1>(wg, nsb, r, stride, out, ld),
                        }
                    }
                    t += n;
                }
            }
        })
    }};
}

/// `pub(crate) unsafe fn $name(w, cols, acts, nt, y, ld)`: `gemm_q4k` for `$ty` groups (records
/// by `$fill`, tiles by `$tile`).
macro_rules! gemm_entry {
    ($ty:ident, $name:ident, $tile_bytes:expr, $rec:expr, $fill:ident, $tile:ident) => {
        #[doc = concat!("As `gemm_q4k`, for ", stringify!($ty), " groups.")]
        ///
        /// # Safety
        /// The CPU has AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C; `y` is valid for those writes.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn $name(
            w: &[u8],
            cols: usize,
            acts: &[BlockQ8K],
            nt: usize,
            y: *mut f32,
            ld: usize,
        ) {
            gemm_body!(w, cols, acts, nt, y, ld, $tile_bytes, $rec, $fill, $tile)
        }
    };
}

/// y[k * ld + g * 16 + i] = dot(row i of group g, activation row k) for g < groups, i < 16,
/// k < nt. `w` = `groups` repacked Q4_K groups (groups * 16 * row_bytes bytes); `acts` = nt
/// activation rows of cols/256 `BlockQ8K` each, contiguous.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C; `y` is valid for those writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4k(
    w: &[u8],
    cols: usize,
    acts: &[BlockQ8K],
    nt: usize,
    y: *mut f32,
    ld: usize,
) {
    gemm_body!(w, cols, acts, nt, y, ld, Q4K_TILE, Q4K_REC, q4k_pre, q4k_tile)
}

/// Copies block (token k, super-block sb) of `acts` (token-major) into `rec` at slot
/// sb·nt + k: its quants, then `terms`, then its scale.
fn records(
    acts: &[BlockQ8K],
    nt: usize,
    nsb: usize,
    rec: &mut [i32],
    size: usize,
    (pre, d): (usize, usize),
    mut terms: impl FnMut(&BlockQ8K, &mut [i32]),
) {
    for (i, b) in acts.iter().enumerate() {
        let (k, sb) = (i / nsb, i % nsb);
        let r = &mut rec[(sb * nt + k) * size..][..size];
        // SAFETY: 256 quant bytes into the record's first 64 i32 (size > 64), no overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(b.qs.as_ptr().cast::<u8>(), r.as_mut_ptr().cast(), QK_K)
        };
        terms(b, &mut r[pre..d]);
        r[d] = b.d.to_bits() as i32;
    }
}

/// Q4_K records: S_j = Σ of the 32 quants of sub-block j (bsum_2j + bsum_2j+1, |·| ≤ 4064,
/// an i16); terms 0..8: −8·S_j; 8..12: words (S_2i, S_2i+1).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q4k_pre(acts: &[BlockQ8K], nt: usize, nsb: usize, rec: &mut [i32]) {
    let ones = _mm256_set1_epi16(1);
    records(acts, nt, nsb, rec, Q4K_REC, (Q4K_PRE, Q4K_D), |b, p| {
        // SAFETY: 16 i16 block sums in, 12 i32 out (`p` holds Q4K_D − Q4K_PRE = 12).
        unsafe {
            let bs = _mm256_loadu_si256(b.bsums.as_ptr().cast());
            let s = _mm256_madd_epi16(bs, ones);
            let neg8 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 3));
            _mm256_storeu_si256(p.as_mut_ptr().cast(), neg8);
            // Words [S0..S3, S0..S3 | S4..S7, S4..S7] (no saturation: |S_j| ≤ 4064); the
            // first qword of each half holds the pairs.
            let w = _mm256_permute4x64_epi64(_mm256_packs_epi32(s, s), 0b00_00_10_00);
            _mm_storeu_si128(p.as_mut_ptr().add(8).cast(), _mm256_castsi256_si128(w));
        }
    });
}

/// One Q4_K group × `T` tokens (`k4_tile`).
///
/// # Safety
/// As `k4_tile`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4k_tile<const T: usize>(
    w: *const u8,
    nsb: usize,
    rec: *const u8,
    stride: usize,
    out: *mut f32,
    ld: usize,
) {
    // SAFETY: forwarded.
    unsafe { k4_tile::<T, false>(w, nsb, rec, stride, out, ld) }
}

/// One Q5_K group × `T` tokens (`k4_tile`).
///
/// # Safety
/// As `k4_tile`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q5k_tile<const T: usize>(
    w: *const u8,
    nsb: usize,
    rec: *const u8,
    stride: usize,
    out: *mut f32,
    ld: usize,
) {
    // SAFETY: forwarded.
    unsafe { k4_tile::<T, true>(w, nsb, rec, stride, out, ld) }
}

/// Sub-block j's 4-bit quants `lo[p]` (k 8p..8p + 4) and `hi[p]` (k 8p + 4..8p + 8) of a
/// Q4_K / Q5_K tile, with Q5_K's bit 4 from its high-bit vector (byte b, bit 2p + h).
///
/// # Safety
/// `tile` is a whole Q4_K (`Q5` false) or Q5_K tile, j < 8.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn k4_quants<const Q5: bool>(tile: *const u8, j: usize) -> ([__m512i; 4], [__m512i; 4]) {
    let m4 = _mm512_set1_epi8(0x0F);
    let sub = if Q5 {
        Q5K_QS + Q5K_SUB * j
    } else {
        Q4K_QS + 256 * j
    };
    // SAFETY: per the caller, the 4 vectors of sub-block j (and its high bits) are in the tile.
    let v: [__m512i; 4] =
        std::array::from_fn(|p| unsafe { _mm512_loadu_si512(tile.add(sub + 64 * p).cast()) });
    let mut lo = v.map(|x| _mm512_and_si512(x, m4));
    let mut hi = v.map(|x| _mm512_and_si512(_mm512_srli_epi16(x, 4), m4));
    if Q5 {
        // SAFETY: as above.
        let h = unsafe { _mm512_loadu_si512(tile.add(sub + Q5K_QH - Q5K_QS).cast()) };
        let b4 = _mm512_set1_epi8(0x10);
        // Bit 2p + h of each byte to bit 4 (16-bit shifts: the bits kept stay in their byte).
        let at = [
            (_mm512_slli_epi16(h, 4), _mm512_slli_epi16(h, 3)),
            (_mm512_slli_epi16(h, 2), _mm512_slli_epi16(h, 1)),
            (h, _mm512_srli_epi16(h, 1)),
            (_mm512_srli_epi16(h, 2), _mm512_srli_epi16(h, 3)),
        ];
        for p in 0..4 {
            lo[p] = _mm512_ternarylogic_epi32(lo[p], at[p].0, b4, OR_AND);
            hi[p] = _mm512_ternarylogic_epi32(hi[p], at[p].1, b4, OR_AND);
        }
    }
    (lo, hi)
}

/// One Q4_K / Q5_K group × `T` tokens. Q4_K: with D_j = Σ (q − 8)·a over sub-block j
/// (|·| ≤ 32·8·127, an i16: `vpdpbusd` starts from −8·S_j), I = Σ_j sc_j·D_j + Σ_j 8·sc_j·S_j
/// = Σ_j sc_j·Σ q·a and M = Σ_j m_j·S_j, all exact. Q5_K (q to 31): the same with 16 for 8
/// over each half of a sub-block (|Σ_16 (q − 16)·a| ≤ 16·16·127), two `vpdpwssd` a sub-block.
///
/// # Safety
/// AVX-512 as in `gemm_q4k`; `w` holds `nsb` tiles; `rec` + sb·stride holds `T` records for
/// sb < nsb; `out + k * ld .. + 16` is writable for k < T.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn k4_tile<const T: usize, const Q5: bool>(
    w: *const u8,
    nsb: usize,
    rec: *const u8,
    stride: usize,
    out: *mut f32,
    ld: usize,
) {
    let m4 = _mm512_set1_epi8(0x0F);
    let m6 = _mm512_set1_epi8(0x3F);
    let m30 = _mm512_set1_epi8(0x30);
    let z = _mm512_setzero_si512();
    let tile_bytes = if Q5 { Q5K_TILE } else { Q4K_TILE };
    // Record geometry (bytes): token stride, the chains' start terms, the (S_2i, S_2i+1) words
    // and the scale.
    let rb = 4 * if Q5 { Q5K_REC } else { Q4K_REC };
    let pb = 4 * if Q5 { Q5K_PRE } else { Q4K_PRE };
    let words = pb + if Q5 { 64 } else { 32 };
    let d_at = 4 * if Q5 { Q5K_D } else { Q4K_D };
    // log2 of the chains' offset (8 or 16): the scales' factor in the word-pair step.
    let offset = _mm512_set1_epi32(if Q5 { 4 } else { 3 });
    let mut acc = [_mm512_setzero_ps(); T];
    for sb in 0..nsb {
        // SAFETY (whole block): sb < nsb, so the tile and the T records at r are in bounds;
        // tiles are plain bytes read unaligned; shuffle tables are 64 bytes.
        unsafe {
            let tile = w.add(sb * tile_bytes);
            // Q5_K prefetches its larger tile a sub-block at a time (the whole tile at once
            // measured 0.49 against 0.30 ms from DRAM at one token; Q4_K prefers it whole).
            let ahead = tile.wrapping_add(PREFETCH * tile_bytes);
            let per = (tile_bytes - Q4K_QS) / 8;
            prefetch_tile(ahead, if Q5 { Q4K_QS } else { tile_bytes });
            // Token k's record at r + k·rb: one base register, constant displacements.
            let r = rec.add(sb * stride);
            // 6-bit scales and mins (ggml get_scale_min_k4) on whole dword lanes: bytes
            // 0..4 of sc/m_lo are sub-blocks 0..3, of sc/m_hi sub-blocks 4..7.
            let s0 = _mm512_loadu_si512(tile.add(64).cast());
            let s1 = _mm512_loadu_si512(tile.add(128).cast());
            let s2 = _mm512_loadu_si512(tile.add(192).cast());
            let sc_lo = _mm512_and_si512(s0, m6);
            let m_lo = _mm512_and_si512(s1, m6);
            let top = _mm512_and_si512(_mm512_srli_epi32(s0, 2), m30);
            let sc_hi = _mm512_ternarylogic_epi32(top, s2, m4, OR_AND);
            let top = _mm512_and_si512(_mm512_srli_epi32(s1, 2), m30);
            let m_hi = _mm512_ternarylogic_epi32(top, _mm512_srli_epi32(s2, 4), m4, OR_AND);

            let mut is = [z; T];
            for j in 0..8 {
                let src = if j < 4 { sc_lo } else { sc_hi };
                let ctl = _mm512_loadu_si512(SC_W[j % 4].as_ptr().cast());
                let sw = _mm512_shuffle_epi8(src, ctl);
                let (lo, hi) = k4_quants::<Q5>(tile, j);
                if Q5 {
                    prefetch_tile(ahead.wrapping_add(Q4K_QS + per * j), per);
                }
                let q = r.add(32 * j);
                for k in 0..T {
                    let q = q.add(k * rb);
                    if Q5 {
                        let pj = r.add(pb + 8 * j + k * rb);
                        let d = dpbusd_chain!(bcast!(pj, 0), q, [lo[0], hi[0]]);
                        let d = dpbusd_chain!(d, q.add(8), [lo[1], hi[1]]);
                        is[k] = dpwssd!(is[k], d, sw);
                        let d = dpbusd_chain!(bcast!(pj, 4), q.add(16), [lo[2], hi[2]]);
                        let d = dpbusd_chain!(d, q.add(24), [lo[3], hi[3]]);
                        is[k] = dpwssd!(is[k], d, sw);
                    } else {
                        let d = dpbusd_chain!(
                            bcast!(r, pb + 4 * j + k * rb),
                            q,
                            [lo[0], hi[0], lo[1], hi[1], lo[2], hi[2], lo[3], hi[3]]
                        );
                        is[k] = dpwssd!(is[k], d, sw);
                    }
                }
            }

            // Word pairs (c·sc_2i, c·sc_2i+1), c the chains' offset (8 or 16), and
            // (m_2i, m_2i+1) against (S_2i, S_2i+1).
            let mut im = [z; T];
            for i in 0..4 {
                let ctl = _mm512_loadu_si512(PAIR_W[i % 2].as_ptr().cast());
                let (sc, m) = if i < 2 { (sc_lo, m_lo) } else { (sc_hi, m_hi) };
                let scc = _mm512_sllv_epi32(_mm512_shuffle_epi8(sc, ctl), offset);
                let mw = _mm512_shuffle_epi8(m, ctl);
                for k in 0..T {
                    let s = bcast!(r, k * rb + words + 4 * i);
                    is[k] = dpwssd!(is[k], scc, s);
                    im[k] = dpwssd!(im[k], mw, s);
                }
            }

            add_with_mins(tile, (r, rb, d_at), (&is, &im), &mut acc);
        }
    }
    // SAFETY: per the caller.
    unsafe { store(&acc, out, ld) }
}

gemm_entry!(Q5_K, gemm_q5k, Q5K_TILE, Q5K_REC, q5k_pre, q5k_tile);

/// Q5_K records: terms 0..16: −16·bsum_h (the chains over each 16 k); 16..20: words
/// (S_2i, S_2i+1) as Q4_K's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q5k_pre(acts: &[BlockQ8K], nt: usize, nsb: usize, rec: &mut [i32]) {
    let ones = _mm256_set1_epi16(1);
    records(acts, nt, nsb, rec, Q5K_REC, (Q5K_PRE, Q5K_D), |b, p| {
        // SAFETY: 16 i16 block sums in, 20 i32 out (`p` holds Q5K_D − Q5K_PRE = 20).
        unsafe {
            let bs = _mm256_loadu_si256(b.bsums.as_ptr().cast());
            let h = _mm512_slli_epi32(_mm512_cvtepi16_epi32(bs), 4);
            _mm512_storeu_si512(
                p.as_mut_ptr().cast(),
                _mm512_sub_epi32(_mm512_setzero_si512(), h),
            );
            let s = _mm256_madd_epi16(bs, ones);
            let w = _mm256_permute4x64_epi64(_mm256_packs_epi32(s, s), 0b00_00_10_00);
            _mm_storeu_si128(p.as_mut_ptr().add(16).cast(), _mm256_castsi256_si128(w));
        }
    });
}

gemm_entry!(Q6_K, gemm_q6k, Q6K_TILE, Q6K_REC, q6k_pre, q6k_tile);

/// Q6_K records: term h (0..32) = −32·Σ of quants 8h..8h + 8 (`vpsadbw` of the quants
/// biased by 128 gives Σ + 1024 per 8 bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q6k_pre(acts: &[BlockQ8K], nt: usize, nsb: usize, rec: &mut [i32]) {
    let bias = _mm512_set1_epi8(-128);
    // −32·(s − 1024) = 32768 − 32·s.
    let c = _mm512_set1_epi64(32768);
    records(acts, nt, nsb, rec, Q6K_REC, (Q6K_PRE, Q6K_D), |b, o| {
        for c4 in 0..4 {
            // SAFETY: 64 of the 256 quants; 8 i32 of the 32 outputs.
            unsafe {
                let q = _mm512_loadu_si512(b.qs.as_ptr().add(64 * c4).cast());
                let s = _mm512_sad_epu8(_mm512_xor_si512(q, bias), _mm512_setzero_si512());
                let v = _mm512_sub_epi64(c, _mm512_slli_epi64(s, 5));
                _mm256_storeu_si256(o.as_mut_ptr().add(8 * c4).cast(), _mm512_cvtepi64_epi32(v));
            }
        }
    });
}

tile_kernel! {
    /// One Q6_K group × `T` tokens.
    ///
    /// # Safety
    /// AVX-512 as in `gemm_q6k`; `w` holds `nsb` tiles; `a` holds `T` rows of `nsb` blocks and
    /// `pre` their terms; `out + k * ld .. + 16` is writable for k < T.
    fn q6k_tile, Q6K_TILE, |tile, r, acc| {
        let m4 = _mm512_set1_epi8(0x0F);
        let m30 = _mm512_set1_epi8(0x30);
        let z = _mm512_setzero_si512();
    } {
        // Token k's record at r + k·RB: one base register, constant displacements.
        const RB: usize = Q6K_REC * 4;
        const PB: usize = Q6K_PRE * 4;
        let sc: [__m512i; 4] =
            std::array::from_fn(|s| _mm512_loadu_si512(tile.add(32 + 64 * s).cast()));
        let mut is = [z; T];
        for j in 0..16 {
            // (sc_j, 0) words: the byte lands in the high half of the low word and an
            // arithmetic shift sign-extends it.
            let ctl = _mm512_loadu_si512(SC_HI[j % 4].as_ptr().cast());
            let sw = _mm512_srai_epi16(_mm512_shuffle_epi8(sc[j / 4], ctl), 8);
            let base = tile.add(288 + 192 * j);
            let l0 = _mm512_loadu_si512(base.cast());
            let l1 = _mm512_loadu_si512(base.add(64).cast());
            let h = _mm512_loadu_si512(base.add(128).cast());
            // k 16j + 4c + b: low nibble | (bits 2c..2c + 1 of the high byte) << 4.
            let q0 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(l0, m4),
                _mm512_slli_epi16(h, 4),
                m30,
                OR_AND,
            );
            let q1 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                _mm512_slli_epi16(h, 2),
                m30,
                OR_AND,
            );
            let q2 = _mm512_ternarylogic_epi32(_mm512_and_si512(l1, m4), h, m30, OR_AND);
            let q3 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                _mm512_srli_epi16(h, 2),
                m30,
                OR_AND,
            );
            let q = r.add(16 * j);
            let pj = r.add(PB + 8 * j);
            for k in 0..T {
                let q = q.add(k * RB);
                // Σ (q − 32)·a over 8 k, starting from −32·Σa: fits an i16.
                let r0 = dpbusd_chain!(bcast!(pj, k * RB), q, [q0, q1]);
                let r1 = dpbusd_chain!(bcast!(pj, k * RB + 4), q.add(8), [q2, q3]);
                is[k] = dpwssd!(is[k], r0, sw);
                is[k] = dpwssd!(is[k], r1, sw);
            }
        }
        add_scaled(tile, (r, RB, 4 * Q6K_D), &is, &mut acc);
    }
}

gemm_entry!(Q3_K, gemm_q3k, Q3K_TILE, Q3K_REC, q3k_pre, q3k_tile);

/// Q3_K records: term j (0..16) = −4·Σ of quants 16j..16j + 16 (−4·bsum_j).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q3k_pre(acts: &[BlockQ8K], nt: usize, nsb: usize, rec: &mut [i32]) {
    records(acts, nt, nsb, rec, Q3K_REC, (Q3K_PRE, Q3K_D), |b, p| {
        // SAFETY: 16 i16 block sums in, 16 i32 out (`p` holds Q3K_D − Q3K_PRE = 16).
        unsafe {
            let s = _mm512_cvtepi16_epi32(_mm256_loadu_si256(b.bsums.as_ptr().cast()));
            let v = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 2));
            _mm512_storeu_si512(p.as_mut_ptr().cast(), v);
        }
    });
}

tile_kernel! {
    /// One Q3_K group × `T` tokens: per 16 k, D = Σ (q − 4)·a (an i16) takes its signed scale
    /// with one `vpdpwssd`.
    ///
    /// # Safety
    /// AVX-512 as in `gemm_q3k`; `w` holds `nsb` tiles; `rec` + sb·stride holds `T` records for
    /// sb < nsb; `out + k * ld .. + 16` is writable for k < T.
    fn q3k_tile, Q3K_TILE, |tile, r, acc| {
        let m3 = _mm512_set1_epi8(3);
        let m4 = _mm512_set1_epi8(0x0F);
        let bit2 = _mm512_set1_epi8(4);
        let m30 = _mm512_set1_epi8(0x30);
        let c32 = _mm512_set1_epi8(32);
        let z = _mm512_setzero_si512();
    } {
        const RB: usize = Q3K_REC * 4;
        const PB: usize = Q3K_PRE * 4;
        // Scales 4s..4s + 4 as signed bytes of sc[s] (ggml: low nibble from scales[i] or
        // the high one of scales[i − 8], bits 4..6 from scales[8 + i % 4], minus 32).
        let s0 = _mm512_loadu_si512(tile.add(32).cast());
        let s1 = _mm512_loadu_si512(tile.add(96).cast());
        let s2 = _mm512_loadu_si512(tile.add(160).cast());
        let sc = [
            (_mm512_and_si512(s0, m4), _mm512_slli_epi16(s2, 4)),
            (_mm512_and_si512(s1, m4), _mm512_slli_epi16(s2, 2)),
            (_mm512_and_si512(_mm512_srli_epi16(s0, 4), m4), s2),
            (
                _mm512_and_si512(_mm512_srli_epi16(s1, 4), m4),
                _mm512_srli_epi16(s2, 2),
            ),
        ]
        .map(|(lo, hi)| _mm512_sub_epi8(_mm512_ternarylogic_epi32(lo, hi, m30, OR_AND), c32));
        let mut is = [z; T];
        for j in 0..16 {
            let ctl = _mm512_loadu_si512(SC_HI[j % 4].as_ptr().cast());
            let sw = _mm512_srai_epi16(_mm512_shuffle_epi8(sc[j / 4], ctl), 8);
            let lb = _mm512_loadu_si512(tile.add(q3k_low(j)).cast());
            let hm = _mm512_loadu_si512(tile.add(q3k_hm(j / 2)).cast());
            let hb = if j % 2 == 0 {
                hm
            } else {
                _mm512_srli_epi16(hm, 4)
            };
            // k 16j + 4c + b: low bits 2c..2c + 1 | (hmask bit c) << 2.
            let q0 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(lb, m3),
                _mm512_slli_epi16(hb, 2),
                bit2,
                OR_AND,
            );
            let q1 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(_mm512_srli_epi16(lb, 2), m3),
                _mm512_slli_epi16(hb, 1),
                bit2,
                OR_AND,
            );
            let q2 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(_mm512_srli_epi16(lb, 4), m3),
                hb,
                bit2,
                OR_AND,
            );
            let q3 = _mm512_ternarylogic_epi32(
                _mm512_and_si512(_mm512_srli_epi16(lb, 6), m3),
                _mm512_srli_epi16(hb, 1),
                bit2,
                OR_AND,
            );
            let q = r.add(16 * j);
            let pj = r.add(PB + 4 * j);
            for k in 0..T {
                let q = q.add(k * RB);
                let d = dpbusd_chain!(bcast!(pj, k * RB), q, [q0, q1]);
                let d = dpbusd_chain!(d, q.add(8), [q2, q3]);
                is[k] = dpwssd!(is[k], d, sw);
            }
        }
        add_scaled(tile, (r, RB, 4 * Q3K_D), &is, &mut acc);
    }
}

gemm_entry!(IQ4_XS, gemm_iq4xs, IQ4XS_TILE, IQ4XS_REC, iq4xs_pre, iq4xs_tile);

/// IQ4_XS records: term j (0..8) = −128·S_j, S_j the sub-block's activation sum.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn iq4xs_pre(acts: &[BlockQ8K], nt: usize, nsb: usize, rec: &mut [i32]) {
    let ones = _mm256_set1_epi16(1);
    records(
        acts,
        nt,
        nsb,
        rec,
        IQ4XS_REC,
        (IQ4XS_PRE, IQ4XS_D),
        |b, p| {
            // SAFETY: 16 i16 block sums in, 8 i32 out (`p` holds IQ4XS_D − IQ4XS_PRE = 8).
            unsafe {
                let s = _mm256_madd_epi16(_mm256_loadu_si256(b.bsums.as_ptr().cast()), ones);
                let v = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 7));
                _mm256_storeu_si256(p.as_mut_ptr().cast(), v);
            }
        },
    );
}

tile_kernel! {
    /// One IQ4_XS group × `T` tokens: per sub-block, D_j = Σ v·a (v the codebook value) times
    /// its scale ls_j − 32 with `vpmulld`, summed exactly in i32.
    ///
    /// # Safety
    /// AVX-512 as in `gemm_iq4xs`; `w` holds `nsb` tiles; `rec` + sb·stride holds `T` records
    /// for sb < nsb; `out + k * ld .. + 16` is writable for k < T.
    fn iq4xs_tile, IQ4XS_TILE, |tile, r, acc| {
        let m4 = _mm512_set1_epi8(0x0F);
        let m3 = _mm512_set1_epi32(3);
        let m15 = _mm512_set1_epi32(15);
        let c32 = _mm512_set1_epi32(32);
        let z = _mm512_setzero_si512();
    } {
        const RB: usize = IQ4XS_REC * 4;
        const PB: usize = IQ4XS_PRE * 4;
        let sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(tile.add(32).cast()));
        let sl = _mm512_loadu_si512(tile.add(64).cast());
        let mut is = [z; T];
        for j in 0..8 {
            // ls_j − 32: bits 4j..4j + 4 of scales_l, bits 2j..2j + 2 of scales_h on top.
            let lo = _mm512_and_si512(_mm512_srlv_epi32(sl, _mm512_set1_epi32(4 * j)), m15);
            let hi = _mm512_and_si512(_mm512_srlv_epi32(sh, _mm512_set1_epi32(2 * j)), m3);
            let ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), c32);
            let v: [__m512i; 4] = std::array::from_fn(|p| {
                _mm512_loadu_si512(tile.add(IQ4XS_QS + 256 * j as usize + 64 * p).cast())
            });
            // Codebook + 128 (`avx512::IQ4NL_U`), as IQ4_NL's interleaved kernel looks it up.
            let lo = v.map(|x| lookup(&IQ4NL_U, _mm512_and_si512(x, m4)));
            let hi = v.map(|x| lookup(&IQ4NL_U, _mm512_and_si512(_mm512_srli_epi16(x, 4), m4)));
            let q = r.add(32 * j as usize);
            let pj = r.add(PB + 4 * j as usize);
            for k in 0..T {
                let q = q.add(k * RB);
                let d = dpbusd_chain!(
                    bcast!(pj, k * RB),
                    q,
                    [lo[0], hi[0], lo[1], hi[1], lo[2], hi[2], lo[3], hi[3]]
                );
                is[k] = _mm512_add_epi32(is[k], _mm512_mullo_epi32(d, ls));
            }
        }
        add_scaled(tile, (r, RB, 4 * IQ4XS_D), &is, &mut acc);
    }
}

gemm_entry!(Q2_K, gemm_q2k, Q2K_TILE, Q2K_REC, q2k_pre, q2k_tile);

/// Q2_K records: terms 0..8 = the block sums as words (bsum_2i, bsum_2i+1); term 8 = 0, the
/// chains' start (a broadcast load: a zeroed xmm16+ register is not a dependency-breaking
/// idiom here, and chaining through it measured 2x slower at 4–8 tokens).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q2k_pre(acts: &[BlockQ8K], nt: usize, nsb: usize, rec: &mut [i32]) {
    records(acts, nt, nsb, rec, Q2K_REC, (Q2K_PRE, Q2K_D), |b, p| {
        // SAFETY: 16 i16 block sums in, 8 i32 out (`p` holds Q2K_D − Q2K_PRE = 9).
        unsafe {
            let bs = _mm256_loadu_si256(b.bsums.as_ptr().cast());
            _mm256_storeu_si256(p.as_mut_ptr().cast(), bs);
        }
        p[8] = 0;
    });
}

tile_kernel! {
    /// One Q2_K group × `T` tokens: per 16 k, Σ q·a (q in 0..4, |·| ≤ 16·3·127, an i16) takes its
    /// 4-bit scale with one `vpdpwssd`; the mins M = Σ_j m_j·bsum_j come from word pairs of mins
    /// against the block-sum words; then `acc += (d·I − dmin·M)·d_a` as Q4_K.
    ///
    /// # Safety
    /// AVX-512 as in `gemm_q2k`; `w` holds `nsb` tiles; `rec` + sb·stride holds `T` records for
    /// sb < nsb; `out + k * ld .. + 16` is writable for k < T.
    fn q2k_tile, Q2K_TILE, |tile, r, acc| {
        let m3 = _mm512_set1_epi8(3);
        let m15 = _mm512_set1_epi32(0x0F);
        let z = _mm512_setzero_si512();
    } {
        const RB: usize = Q2K_REC * 4;
        const PB: usize = Q2K_PRE * 4;
        // Scale bytes 4s..4s + 4 of each row: low nibble the scale, high the min.
        let sc: [__m512i; 4] =
            std::array::from_fn(|s| _mm512_loadu_si512(tile.add(64 + 64 * s).cast()));
        let mut is = [z; T];
        for j in 0..16 {
            let ctl = _mm512_loadu_si512(SC_W[j % 4].as_ptr().cast());
            let sw = _mm512_and_si512(_mm512_shuffle_epi8(sc[j / 4], ctl), m15);
            let lb = _mm512_loadu_si512(tile.add(Q2K_QS + 64 * j).cast());
            let q0 = _mm512_and_si512(lb, m3);
            let q1 = _mm512_and_si512(_mm512_srli_epi16(lb, 2), m3);
            let q2 = _mm512_and_si512(_mm512_srli_epi16(lb, 4), m3);
            let q3 = _mm512_and_si512(_mm512_srli_epi16(lb, 6), m3);
            let q = r.add(16 * j);
            for k in 0..T {
                let q = q.add(k * RB);
                let d = dpbusd_chain!(bcast!(r, k * RB + PB + 32), q, [q0, q1]);
                let d = dpbusd_chain!(d, q.add(8), [q2, q3]);
                is[k] = dpwssd!(is[k], d, sw);
            }
        }
        let mut im = [z; T];
        for i in 0..8 {
            let ctl = _mm512_loadu_si512(PAIR_W[i % 2].as_ptr().cast());
            let mw = _mm512_srli_epi16(_mm512_shuffle_epi8(sc[i / 2], ctl), 4);
            for k in 0..T {
                im[k] = dpwssd!(im[k], mw, bcast!(r, k * RB + PB + 4 * i));
            }
        }
        add_with_mins(tile, (r, RB, 4 * Q2K_D), (&is, &im), &mut acc);
    }
}

#[cfg(test)]
pub(super) mod tests_support {
    use super::*;
    use crate::kernels::ActBuf;
    use crate::quant::blocks::{
        f16_to_f32, f32_to_f16, iq4xs_scales, q3k_scales, scale_min_k4, BlockIQ4XS,
    };
    use crate::quant::repack_k::{
        repack_iq4xs, repack_q2k, repack_q3k, repack_q4k, repack_q5k, repack_q6k,
    };
    use crate::quant::{dot_row_ref, ActType, GgmlType};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    pub type Gemm = unsafe fn(&[u8], usize, &[BlockQ8K], usize, *mut f32, usize);

    pub fn has_simd() -> bool {
        use std::arch::is_x86_feature_detected as has;
        has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vl")
            && has!("avx512vnni")
            && has!("avx2")
            && has!("fma")
            && has!("f16c")
    }

    /// `rows` random rows in ggml layout: random quant and scale bytes, f16 d/dmin of
    /// magnitude 1e-4..1e-1 and either sign.
    pub fn random_rows(rng: &mut StdRng, ty: GgmlType, cols: usize, rows: usize) -> Vec<u8> {
        let (bsz, f16s): (usize, &[usize]) = match ty {
            GgmlType::Q4K => (144, &[0, 2]),
            GgmlType::Q5K => (176, &[0, 2]),
            GgmlType::Q2K => (84, &[80, 82]),
            GgmlType::Q3K => (110, &[108]),
            GgmlType::IQ4XS => (136, &[0]),
            _ => (210, &[208]),
        };
        let mut w: Vec<u8> = (0..rows * cols / QK_K * bsz).map(|_| rng.gen()).collect();
        for b in w.chunks_exact_mut(bsz) {
            for &o in f16s {
                let v = 10f32.powf(rng.gen_range(-4.0..-1.0)) * if rng.gen() { 1.0 } else { -1.0 };
                b[o..o + 2].copy_from_slice(&f32_to_f16(v));
            }
        }
        w
    }

    /// Activations for `nt` tokens: ordinary, extreme (±1e4), all-zero and mixed rows.
    pub fn random_acts(rng: &mut StdRng, cols: usize, nt: usize) -> ActBuf {
        let x: Vec<f32> = (0..nt * cols)
            .map(|i| match (i / cols) % 4 {
                0 => rng.gen_range(-1.0..1.0),
                1 => rng.gen_range(-1e4..1e4),
                2 => 0.0,
                _ if ((i % cols) / QK_K).is_multiple_of(2) => 0.0,
                _ => rng.gen_range(-3e3..3e3),
            })
            .collect();
        let mut acts = ActBuf::default();
        acts.quantize(ActType::Q8K, &x, cols);
        acts
    }

    /// Σ over super-blocks of the magnitudes of every term the reference adds: the error
    /// budget of the f32 steps.
    pub fn bound(ty: GgmlType, row: &[u8], acts: &[BlockQ8K]) -> f64 {
        let mut total = 0f64;
        for (sb, a) in acts.iter().enumerate() {
            let abs_a = |e: usize| (a.qs[e] as f64).abs();
            let da = (a.d as f64).abs();
            if matches!(ty, GgmlType::Q4K | GgmlType::Q5K) {
                let bsz = if ty == GgmlType::Q4K { 144 } else { 176 };
                let qmax = if ty == GgmlType::Q4K { 15.0 } else { 31.0 };
                let b = &row[sb * bsz..(sb + 1) * bsz];
                let sc: &[u8; 12] = b[4..16].try_into().unwrap();
                let (d, dmin) = (
                    f16_to_f32([b[0], b[1]]) as f64,
                    f16_to_f32([b[2], b[3]]) as f64,
                );
                for j in 0..8 {
                    let (s, m) = scale_min_k4(j, sc);
                    let sa: f64 = (32 * j..32 * j + 32).map(abs_a).sum();
                    total += da * (d.abs() * s as f64 * qmax * sa + dmin.abs() * m as f64 * sa);
                }
            } else if ty == GgmlType::Q2K {
                let b = &row[sb * 84..(sb + 1) * 84];
                let (d, dmin) = (
                    f16_to_f32([b[80], b[81]]) as f64,
                    f16_to_f32([b[82], b[83]]) as f64,
                );
                for g in 0..16 {
                    let sa: f64 = (16 * g..16 * g + 16).map(abs_a).sum();
                    let (s, m) = ((b[g] & 0x0F) as f64, (b[g] >> 4) as f64);
                    total += da * (d.abs() * s * 3.0 * sa + dmin.abs() * m * sa);
                }
            } else if ty == GgmlType::Q3K {
                let b = &row[sb * 110..(sb + 1) * 110];
                let d = f16_to_f32([b[108], b[109]]) as f64;
                let sc = q3k_scales(b[96..108].try_into().unwrap());
                for g in 0..16 {
                    let sa: f64 = (16 * g..16 * g + 16).map(abs_a).sum();
                    total += da * d.abs() * (sc[g] as f64).abs() * 4.0 * sa;
                }
            } else if ty == GgmlType::IQ4XS {
                let b = &row[sb * 136..(sb + 1) * 136];
                let blk = crate::quant::blocks::as_blocks::<BlockIQ4XS>(b).unwrap()[0];
                let d = f16_to_f32(blk.d) as f64;
                for (j, ls) in iq4xs_scales(&blk).into_iter().enumerate() {
                    let sa: f64 = (32 * j..32 * j + 32).map(abs_a).sum();
                    total += da * d.abs() * (ls as f64).abs() * 127.0 * sa;
                }
            } else {
                let b = &row[sb * 210..(sb + 1) * 210];
                let d = f16_to_f32([b[208], b[209]]) as f64;
                for g in 0..16 {
                    let sa: f64 = (16 * g..16 * g + 16).map(abs_a).sum();
                    total += da * d.abs() * (b[192 + g] as i8 as f64).abs() * 32.0 * sa;
                }
            }
        }
        total
    }

    pub fn repack(ty: GgmlType, rows: &[u8], cols: usize) -> Vec<u8> {
        let mut out = vec![0u8; rows.len()];
        let gb = ROWS * ty.row_bytes(cols).unwrap();
        for (s, d) in rows.chunks_exact(gb).zip(out.chunks_exact_mut(gb)) {
            match ty {
                GgmlType::Q4K => repack_q4k(s, cols, d),
                GgmlType::Q5K => repack_q5k(s, cols, d),
                GgmlType::Q2K => repack_q2k(s, cols, d),
                GgmlType::Q3K => repack_q3k(s, cols, d),
                GgmlType::IQ4XS => repack_iq4xs(s, cols, d),
                _ => repack_q6k(s, cols, d),
            }
        }
        out
    }

    /// Deterministic benchmark activations for `nt` tokens.
    pub fn bench_acts(cols: usize, nt: usize) -> ActBuf {
        let x: Vec<f32> = (0..nt * cols)
            .map(|i| ((i * 7919) % 1000) as f32 - 500.0)
            .collect();
        let mut acts = ActBuf::default();
        acts.quantize(ActType::Q8K, &x, cols);
        acts
    }

    pub fn run(
        gemm: Gemm,
        w: &[u8],
        cols: usize,
        acts: &[BlockQ8K],
        nt: usize,
        groups: usize,
    ) -> Vec<f32> {
        let ld = groups * ROWS + 3;
        let mut y = vec![f32::NAN; nt * ld];
        // SAFETY: AVX-512 checked by the caller; y holds nt rows of ld ≥ groups·16.
        unsafe { gemm(w, cols, acts, nt, y.as_mut_ptr(), ld) };
        (0..nt)
            .flat_map(|k| y[k * ld..k * ld + groups * ROWS].to_vec())
            .collect()
    }

    /// `gemm` (a kernel for `ty` in the x16 layout) against `dot_row_ref`, and batch
    /// invariance; nothing when the CPU lacks the kernel's instructions (`simd` false).
    pub fn check(ty: GgmlType, gemm: Gemm, simd: bool) {
        if !simd {
            return;
        }
        let mut rng = StdRng::seed_from_u64(ty as u64);
        for (cols, groups) in [(256, 2), (1536, 1), (4864, 1)] {
            let nsb = cols / QK_K;
            let row_bytes = ty.row_bytes(cols).unwrap();
            let rows = random_rows(&mut rng, ty, cols, groups * ROWS);
            let w = repack(ty, &rows, cols);
            let nt = 9;
            let acts = random_acts(&mut rng, cols, nt);
            let q8k = &acts.q8k[..nt * nsb];
            let y = run(gemm, &w, cols, q8k, nt, groups);
            for k in 0..nt {
                for r in 0..groups * ROWS {
                    let row = &rows[r * row_bytes..(r + 1) * row_bytes];
                    let want = dot_row_ref(ty, row, acts.row(k)).unwrap();
                    let got = y[k * groups * ROWS + r];
                    let tol = 1e-5 * bound(ty, row, &q8k[k * nsb..(k + 1) * nsb]) as f32;
                    assert!(
                        (got - want).abs() <= tol,
                        "{ty:?} cols {cols} row {r} token {k}: {got} vs {want} (tol {tol})"
                    );
                    if k % 4 == 2 {
                        assert_eq!(got, 0.0, "all-zero activations");
                    }
                }
            }
            // Batch invariance: every nt gives the bits of per-token calls.
            let single: Vec<Vec<f32>> = (0..nt)
                .map(|k| run(gemm, &w, cols, &q8k[k * nsb..(k + 1) * nsb], 1, groups))
                .collect();
            for n in 1..=nt {
                let y = run(gemm, &w, cols, &q8k[..n * nsb], n, groups);
                for k in 0..n {
                    let got: Vec<u32> = y[k * groups * ROWS..][..groups * ROWS]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    let want: Vec<u32> = single[k].iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "{ty:?} cols {cols} nt {n} token {k}");
                }
            }
        }
    }

    /// Saturated quants, scales and activations (±127 everywhere): the i16 bounds of the
    /// re-centred chains at their extremes.
    pub fn check_extremes(ty: GgmlType, gemm: Gemm, simd: bool) {
        if !simd {
            return;
        }
        let cols = 512;
        let nsb = cols / QK_K;
        let row_bytes = ty.row_bytes(cols).unwrap();
        let fills = [0x00u8, 0xFF, 0x80, 0x7F, 0x0F, 0xF0, 0x3F, 0xC0];
        let mut rows = Vec::new();
        for r in 0..ROWS {
            let mut row = vec![fills[r % fills.len()]; row_bytes];
            for b in row.chunks_exact_mut(row_bytes / nsb) {
                let d = f32_to_f16(if r % 2 == 0 { 0.01 } else { -0.003 });
                match ty {
                    GgmlType::Q4K | GgmlType::Q5K => {
                        b[0..2].copy_from_slice(&d);
                        b[2..4].copy_from_slice(&f32_to_f16(0.02));
                    }
                    // The fill saturates the scales (0xFF: ls 31 / +31, 0x00: −32) and quants.
                    GgmlType::Q3K => b[108..110].copy_from_slice(&d),
                    GgmlType::Q2K => {
                        b[80..82].copy_from_slice(&d);
                        b[82..84].copy_from_slice(&f32_to_f16(0.02));
                    }
                    GgmlType::IQ4XS => b[0..2].copy_from_slice(&d),
                    _ => {
                        // Scales alternate between the i8 extremes.
                        for (g, sc) in b[192..208].iter_mut().enumerate() {
                            *sc = if (g + r) % 2 == 0 { 0x80 } else { 0x7F };
                        }
                        b[208..210].copy_from_slice(&d);
                    }
                }
            }
            rows.extend(row);
        }
        let w = repack(ty, &rows, cols);
        let x: Vec<f32> = [1.0f32, -1.0, 0.5]
            .iter()
            .flat_map(|&v| (0..cols).map(move |e| if v == 0.5 && e % 3 == 0 { -1.0 } else { v }))
            .collect();
        let mut acts = ActBuf::default();
        acts.quantize(ActType::Q8K, &x, cols);
        let nt = 3;
        let q8k = &acts.q8k[..nt * nsb];
        let y = run(gemm, &w, cols, q8k, nt, 1);
        for k in 0..nt {
            for r in 0..ROWS {
                let row = &rows[r * row_bytes..(r + 1) * row_bytes];
                let want = dot_row_ref(ty, row, acts.row(k)).unwrap();
                let tol = 1e-5 * bound(ty, row, &q8k[k * nsb..(k + 1) * nsb]) as f32;
                let got = y[k * ROWS + r];
                assert!(
                    (got - want).abs() <= tol,
                    "{ty:?} extreme row {r} token {k}: {got} vs {want} (tol {tol})"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;
    use crate::quant::GgmlType;

    #[test]
    fn x16_gemm_extreme_quants() {
        check_extremes(GgmlType::Q4K, gemm_q4k, has_simd());
        check_extremes(GgmlType::Q6K, gemm_q6k, has_simd());
        check_extremes(GgmlType::Q5K, gemm_q5k, has_simd());
        check_extremes(GgmlType::Q3K, gemm_q3k, has_simd());
        check_extremes(GgmlType::Q2K, gemm_q2k, has_simd());
        check_extremes(GgmlType::IQ4XS, gemm_iq4xs, has_simd());
    }

    #[test]
    fn x16_gemm_q5k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q5K, gemm_q5k, has_simd());
    }

    #[test]
    fn x16_gemm_q2k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q2K, gemm_q2k, has_simd());
    }

    #[test]
    fn x16_gemm_q3k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q3K, gemm_q3k, has_simd());
    }

    #[test]
    fn x16_gemm_iq4xs_matches_reference_and_is_batch_invariant() {
        check(GgmlType::IQ4XS, gemm_iq4xs, has_simd());
    }

    #[test]
    fn x16_gemm_q4k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q4K, gemm_q4k, has_simd());
    }

    #[test]
    fn x16_gemm_q6k_matches_reference_and_is_batch_invariant() {
        check(GgmlType::Q6K, gemm_q6k, has_simd());
    }
}

#[cfg(test)]
mod bench {
    use super::tests_support::*;
    use super::*;
    use crate::quant::GgmlType;
    use std::time::Instant;

    /// Single-thread gemm_q4k / gemm_q6k on 8960×1536 against the row-wise AVX-512 path:
    /// `cargo test --release -p ferrox-core --lib x16_bench -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn x16_bench() {
        if !has_simd() {
            return;
        }
        let (rows, cols) = (8960, 1536);
        for (ty, gemm) in [
            (GgmlType::Q4K, gemm_q4k as Gemm),
            (GgmlType::Q6K, gemm_q6k),
            (GgmlType::Q5K, gemm_q5k),
            (GgmlType::Q3K, gemm_q3k),
            (GgmlType::Q2K, gemm_q2k),
            (GgmlType::IQ4XS, gemm_iq4xs),
        ] {
            let mut rng = rand::SeedableRng::seed_from_u64(1);
            let orig = random_rows(&mut rng, ty, cols, rows);
            let t = Instant::now();
            let w = repack(ty, &orig, cols);
            eprintln!(
                "{ty:?} {rows}x{cols}: repack {:.1} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
            let t = Instant::now();
            let rb = ty.row_bytes(cols).unwrap();
            let mut back = vec![0u8; orig.len()];
            for (wg, bg) in w.chunks_exact(16 * rb).zip(back.chunks_exact_mut(16 * rb)) {
                for (lane, row) in bg.chunks_exact_mut(rb).enumerate() {
                    crate::quant::repack::unpack_row(ty, cols, wg, lane, row)
                }
            }
            eprintln!(
                "{ty:?} {rows}x{cols}: unpack {:.1} ms",
                t.elapsed().as_secs_f64() * 1e3
            );
            assert!(back == orig, "round trip");
            for nt in [1, 8, 64] {
                let acts = bench_acts(cols, nt);
                let mut y = vec![0f32; nt * rows];
                let best = |f: &mut dyn FnMut()| {
                    f();
                    (0..if nt == 64 { 5 } else { 20 })
                        .map(|_| {
                            let t = Instant::now();
                            f();
                            t.elapsed().as_secs_f64()
                        })
                        .fold(f64::MAX, f64::min)
                };
                let q8k = &acts.q8k[..nt * cols / QK_K];
                // SAFETY: AVX-512 checked; y holds nt rows of `rows`.
                let new = best(&mut || unsafe { gemm(&w, cols, q8k, nt, y.as_mut_ptr(), rows) });
                let isa = crate::kernels::Isa::Avx512;
                let old =
                    best(&mut || crate::kernels::dot_block(isa, ty, &orig, &acts, 0, nt, &mut y));
                eprintln!(
                    "{ty:?} {rows}x{cols} nt={nt}: x16 {:.3} ms, row-wise {:.3} ms (cache-warm)",
                    new * 1e3,
                    old * 1e3
                );
                if nt == 1 {
                    // Decode from DRAM: cycle through copies well beyond the L3.
                    let copies = (256 << 20) / w.len() + 1;
                    let ws: Vec<Vec<u8>> = (0..copies).map(|_| w.clone()).collect();
                    let os: Vec<Vec<u8>> = (0..copies).map(|_| orig.clone()).collect();
                    let mut i = 0;
                    let new = best(&mut || {
                        i = (i + 1) % copies;
                        // SAFETY: as above.
                        unsafe { gemm(&ws[i], cols, q8k, 1, y.as_mut_ptr(), rows) }
                    });
                    let old = best(&mut || {
                        i = (i + 1) % copies;
                        crate::kernels::dot_block(isa, ty, &os[i], &acts, 0, 1, &mut y)
                    });
                    eprintln!(
                        "{ty:?} {rows}x{cols} nt=1: x16 {:.3} ms, row-wise {:.3} ms (DRAM)",
                        new * 1e3,
                        old * 1e3
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod hot {
    use super::tests_support::*;
    use super::*;
    use crate::quant::GgmlType;
    use std::time::Instant;

    /// Compute cost per 16-row super-block tile with the weights in L2 (1024×1536), by token
    /// count: `cargo test --release -p ferrox-core --lib x16_hot -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn x16_hot() {
        if !has_simd() {
            return;
        }
        let (rows, cols, reps) = (1024, 1536, 2000);
        for (ty, gemm) in [
            (GgmlType::Q4K, gemm_q4k as Gemm),
            (GgmlType::Q6K, gemm_q6k),
            (GgmlType::Q5K, gemm_q5k),
            (GgmlType::Q3K, gemm_q3k),
            (GgmlType::Q2K, gemm_q2k),
            (GgmlType::IQ4XS, gemm_iq4xs),
        ] {
            let mut rng = rand::SeedableRng::seed_from_u64(1);
            let w = repack(ty, &random_rows(&mut rng, ty, cols, rows), cols);
            for nt in [1usize, 2, 4, 8] {
                let acts = bench_acts(cols, nt);
                let mut y = vec![0f32; nt * rows];
                let q8k = &acts.q8k[..nt * cols / QK_K];
                let t = Instant::now();
                for _ in 0..reps {
                    // SAFETY: AVX-512 checked; y holds nt rows of `rows`.
                    unsafe { gemm(&w, cols, q8k, nt, y.as_mut_ptr(), rows) };
                }
                let tiles = (rows / ROWS * cols / QK_K * reps) as f64;
                eprintln!(
                    "{ty:?} nt={nt}: {:.1} ns per tile",
                    t.elapsed().as_secs_f64() * 1e9 / tiles
                );
            }
        }
    }
}
