//! Scalar reference dot products of a weight row against a quantized activation row, paired as
//! ggml's `vec_dot` pairs them (ggml-cpu/quants.c `ggml_vec_dot_*_generic`).
//!
//! Every integer sum inside a block is exact (i32); each block contributes one or two f32 terms
//! and blocks are accumulated in order. SIMD kernels must give the same integer sums; their
//! float accumulation order may differ and is tested within tolerance.

use super::blocks::*;
use super::dequant::{k4_values, q5_values, q6k_values};

/// Σ over block pairs of `term(weight block, activation block)`, in block order.
#[inline]
fn sum_blocks<W, A>(w: &[W], a: &[A], term: impl Fn(&W, &A) -> f32) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.iter().zip(a) {
        acc += term(x, y);
    }
    acc
}

#[inline]
fn idot32(a: &[i8; 32], b: &[i8; 32]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

#[inline]
fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
    q
}

/// Σ (q[j] + offset) * y[j] over a 32-block.
#[inline]
fn sum_offset(q: &[u8; 32], offset: i32, y: &[i8; 32]) -> i32 {
    q.iter()
        .zip(y)
        .map(|(&a, &b)| (a as i32 + offset) * b as i32)
        .sum()
}

#[inline]
fn sum_lut(q: &[u8; 32], lut: &[i8; 16], y: &[i8; 32]) -> i32 {
    q.iter()
        .zip(y)
        .map(|(&a, &b)| lut[a as usize] as i32 * b as i32)
        .sum()
}

pub fn dot_q4_0_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let sumi = sum_offset(&nibbles(&x.qs), -8, &y.qs);
        sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d))
    })
}

pub fn dot_q4_1_q8_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let sumi = sum_offset(&nibbles(&x.qs), 0, &y.qs);
        sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d)) + f16_to_f32(x.m) * f16_to_f32(y.s)
    })
}

pub fn dot_q5_0_q8_0(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let sumi = sum_offset(&q5_values(x.qh, &x.qs), -16, &y.qs);
        sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d))
    })
}

pub fn dot_q5_1_q8_1(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let sumi = sum_offset(&q5_values(x.qh, &x.qs), 0, &y.qs);
        sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d)) + f16_to_f32(x.m) * f16_to_f32(y.s)
    })
}

pub fn dot_q8_0_q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |x, y| {
        idot32(&x.qs, &y.qs) as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d))
    })
}

/// Q8_1 weights (rare) pair with Q8_0 activations: the stored sum is not needed.
pub fn dot_q8_1_q8_0(w: &[BlockQ8_1], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |x, y| {
        idot32(&x.qs, &y.qs) as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d))
    })
}

pub fn dot_iq4nl_q8_0(w: &[BlockIQ4NL], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let sumi = sum_lut(&nibbles(&x.qs), &IQ4NL_VALUES, &y.qs);
        sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d))
    })
}

pub fn dot_mxfp4_q8_0(w: &[BlockMXFP4], a: &[BlockQ8_0]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let sumi = sum_lut(&nibbles(&x.qs), &MXFP4_VALUES, &y.qs);
        sumi as f32 * (e8m0_to_f32_half(x.e) * f16_to_f32(y.d))
    })
}

/// Σ over groups of 16 of bsums-weighted mins (K-quants with a min term).
#[inline]
fn kq_min_sum(y: &BlockQ8K, mins: &[i32], group: usize) -> i32 {
    // `group` = elements per min (16 or 32) → bsums per min = group / 16.
    let per = group / 16;
    mins.iter()
        .enumerate()
        .map(|(j, &m)| {
            let s: i32 = y.bsums[j * per..(j + 1) * per]
                .iter()
                .map(|&b| b as i32)
                .sum();
            m * s
        })
        .sum()
}

pub fn dot_q2k_q8k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let mut sumi = 0i32;
        for e in 0..QK_K {
            let (c, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let q = ((x.qs[32 * c + l] >> (2 * j)) & 3) as i32;
            sumi += (x.scales[e / 16] & 0x0F) as i32 * q * y.qs[e] as i32;
        }
        let mut mins = [0i32; 16];
        for (m, &s) in mins.iter_mut().zip(&x.scales) {
            *m = (s >> 4) as i32;
        }
        let summ = kq_min_sum(y, &mins, 16);
        (y.d * f16_to_f32(x.d)) * sumi as f32 - (y.d * f16_to_f32(x.dmin)) * summ as f32
    })
}

pub fn dot_q3k_q8k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let scales = q3k_scales(&x.scales);
        let mut sumi = 0i32;
        for e in 0..QK_K {
            let (c, j, l) = (e / 128, (e / 32) % 4, e % 32);
            let low = ((x.qs[32 * c + l] >> (2 * j)) & 3) as i32;
            let q = low
                - if (x.hmask[l] >> (e / 32)) & 1 == 0 {
                    4
                } else {
                    0
                };
            sumi += scales[e / 16] as i32 * q * y.qs[e] as i32;
        }
        (y.d * f16_to_f32(x.d)) * sumi as f32
    })
}

fn dot_q45k(x_d: [u8; 2], x_dmin: [u8; 2], scales: &[u8; 12], q: &[u8], y: &BlockQ8K) -> f32 {
    let mut sumi = 0i32;
    let mut mins = [0i32; 8];
    for (sub, m) in mins.iter_mut().enumerate() {
        let (sc, mn) = scale_min_k4(sub, scales);
        *m = mn as i32;
        let s: i32 = (0..32)
            .map(|l| q[32 * sub + l] as i32 * y.qs[32 * sub + l] as i32)
            .sum();
        sumi += sc as i32 * s;
    }
    let summ = kq_min_sum(y, &mins, 32);
    (y.d * f16_to_f32(x_d)) * sumi as f32 - (y.d * f16_to_f32(x_dmin)) * summ as f32
}

pub fn dot_q4k_q8k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let q = k4_values(&x.qs, |_, _| 0);
        dot_q45k(x.d, x.dmin, &x.scales, &q, y)
    })
}

pub fn dot_q5k_q8k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let q = k4_values(&x.qs, |sub, l| (x.qh[l] >> sub) & 1);
        dot_q45k(x.d, x.dmin, &x.scales, &q, y)
    })
}

pub fn dot_q6k_q8k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let q = q6k_values(x);
        let mut sumi = 0i32;
        for g in 0..16 {
            let s: i32 = (16 * g..16 * g + 16)
                .map(|e| (q[e] as i32 - 32) * y.qs[e] as i32)
                .sum();
            sumi += x.scales[g] as i32 * s;
        }
        (y.d * f16_to_f32(x.d)) * sumi as f32
    })
}

pub fn dot_iq4xs_q8k(w: &[BlockIQ4XS], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let mut sumi = 0i32;
        for (ib, ls) in iq4xs_scales(x).into_iter().enumerate() {
            let qs: &[u8; 16] = x.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
            let yq: &[i8; 32] = y.qs[32 * ib..32 * ib + 32].try_into().expect("32 quants");
            sumi += ls * sum_lut(&nibbles(qs), &IQ4NL_VALUES, yq);
        }
        (y.d * f16_to_f32(x.d)) * sumi as f32
    })
}

/// Q8_K × Q8_K (for completeness: Q8_K is an activation format).
pub fn dot_q8k_q8k(w: &[BlockQ8K], a: &[BlockQ8K]) -> f32 {
    sum_blocks(w, a, |x, y| {
        let s: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        (x.d * y.d) * s as f32
    })
}

/// Float rows: f32 accumulation in element order.
pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}
