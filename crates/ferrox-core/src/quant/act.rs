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
