//! Activation quantizers for integer dot products, with the semantics of ggml-quants.c
//! `quantize_row_q8_0_ref`, `quantize_row_q8_1_ref` and `quantize_row_q8_K_ref`.

use super::blocks::*;

/// One Q8_0 block: d = amax / 127, q = round-half-away(x / d); returns d (stored as f16).
#[inline]
fn quantize_block_q8_0(xb: &[f32], qs: &mut [i8; 32]) -> f32 {
    let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(xb) {
        *q = (v * id).round() as i8;
    }
    d
}

/// Q8_0: d = amax / 127, q = round-half-away(x / d), d stored as f16.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), out.len() * 32, "quantize_row_q8_0: length");
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        b.d = f32_to_f16(quantize_block_q8_0(xb, &mut b.qs));
    }
}

/// Q8_1: as Q8_0 plus `s = d * sum(q)` (f16), used by the min term of Q4_1 / Q5_1.
pub fn quantize_row_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    assert_eq!(x.len(), out.len() * 32, "quantize_row_q8_1: length");
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        let d = quantize_block_q8_0(xb, &mut b.qs);
        b.d = f32_to_f16(d);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.s = f32_to_f16(sum as f32 * d);
    }
}

/// Q8_K: scale from the signed value of largest magnitude (iscale = -127 / max), round half
/// to even, clamp at 127, f32 scale `d = 1 / iscale`, and sums of each 16 quants.
pub fn quantize_row_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(x.len(), out.len() * QK_K, "quantize_row_q8_k: length");
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = g.iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

/// `v` as bf16, rounded to nearest even (a NaN stays a quiet NaN).
pub fn f32_to_bf16(v: f32) -> u16 {
    let b = v.to_bits();
    if v.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// A bf16 as f32, a subnormal read as zero (the DAZ of `vdpbf16ps`).
fn bf16_daz(b: u16) -> f32 {
    match b & 0x7F80 {
        0 => f32::from_bits(u32::from(b & 0x8000) << 16),
        _ => f32::from_bits(u32::from(b) << 16),
    }
}

/// A subnormal f32 flushed to (signed) zero (the FTZ of `vdpbf16ps`).
fn ftz(v: f32) -> f32 {
    if v != 0.0 && v.abs() < f32::MIN_POSITIVE {
        f32::from_bits(v.to_bits() & 0x8000_0000)
    } else {
        v
    }
}

/// Scalar reference of the BF16 × bf16 products (`kernels::x16_f`): as Intel's SDM defines
/// `VDPBF16PS` (verified on Zen 4), a pair of columns adds its odd product then its even one
/// to an f32 accumulator, each add rounded (bf16 products are exact in f32), subnormal inputs
/// and results flushed to zero; pairs alternate between two accumulators, summed at the end.
/// A missing odd column of the last pair counts as zero.
pub fn dot_bf16_pairs(w: &[u16], x: &[u16]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_bf16_pairs: lengths");
    let mut acc = [0f32; 2];
    for (p, (wp, xp)) in w.chunks(2).zip(x.chunks(2)).enumerate() {
        let a = &mut acc[p % 2];
        let (w1, x1) = (
            wp.get(1).copied().unwrap_or(0),
            xp.get(1).copied().unwrap_or(0),
        );
        *a = ftz(ftz(*a) + bf16_daz(w1) * bf16_daz(x1));
        *a = ftz(*a + bf16_daz(wp[0]) * bf16_daz(xp[0]));
    }
    acc[0] + acc[1]
}

/// Elements of `x` per pool task when its rows are quantized in parallel (each row is
/// quantized alone, so the split never changes a bit; a single row stays on the caller).
const QUANT_PAR: usize = 1 << 15;

/// `f(row of x, its blocks)` for every `cols`-long row of `x` and the `cols / per_block`
/// blocks of `out` it fills: long batches in parallel pieces of whole rows.
pub(crate) fn per_row<B: Send>(
    x: &[f32],
    cols: usize,
    out: &mut [B],
    per_block: usize,
    f: impl Fn(&[f32], &mut [B]) + Sync,
) {
    let nb = cols / per_block;
    let rows = (QUANT_PAR / cols).max(1);
    let run = |i: usize, blocks: &mut [B]| {
        let xs = &x[i * rows * cols..][..blocks.len() / nb * cols];
        for (xr, br) in xs.chunks_exact(cols).zip(blocks.chunks_exact_mut(nb)) {
            f(xr, br);
        }
    };
    // One piece (a decoded row) runs on the caller: `pool::for_each` with one task.
    crate::pool::for_each_chunk_mut(out, rows * nb, run);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let bf = |bits: u32| f32_to_bf16(f32::from_bits(bits));
        assert_eq!(bf(0x3F80_0000), 0x3F80); // 1.0 exact
        assert_eq!(bf(0x3F80_7FFF), 0x3F80); // below half: down
        assert_eq!(bf(0x3F80_8000), 0x3F80); // tie, even stays
        assert_eq!(bf(0x3F81_8000), 0x3F82); // tie, odd rounds up
        assert_eq!(bf(0x3F80_8001), 0x3F81); // above half: up
        assert_eq!(bf(0x7F7F_FFFF), 0x7F80); // largest finite rounds to infinity
        assert!(f32::from_bits(u32::from(f32_to_bf16(f32::NAN)) << 16).is_nan());
    }

    #[test]
    fn bf16_pairs_alternate_accumulators_odd_product_first() {
        let b = |v: f32| f32_to_bf16(v);
        // One pair: (0 + 1·1) + 2^24·1 -> exact sums.
        assert_eq!(
            dot_bf16_pairs(&[b(16777216.0), b(1.0)], &[b(1.0), b(1.0)]),
            16777216.0
        );
        // Pairs 0 and 2 share an accumulator (2^24 after pair 0); pair 2 adds its odd product
        // first: 2^24 + 1 rounds back to 2^24, then -2^24 gives 0 (even first would give 1).
        let w = [
            b(0.0),
            b(16777216.0),
            b(0.0),
            b(0.0),
            b(-16777216.0),
            b(1.0),
        ];
        assert_eq!(dot_bf16_pairs(&w, &[b(1.0); 6]), 0.0);
        // Pairs 0 and 2 share an accumulator, pair 1 has its own; a missing odd column is 0.
        let w = [b(1.0), b(2.0), b(4.0), b(8.0), b(16.0)];
        let x = [b(1.0); 5];
        assert_eq!(dot_bf16_pairs(&w, &x), 31.0);
    }
}
