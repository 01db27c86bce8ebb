//! Every SIMD kernel against the scalar reference on random rows (ordinary and extreme scales),
//! and batch invariance of `dot_rows`: any token grouping gives bit-identical outputs.
#![allow(clippy::needless_range_loop)]

use ferrox_core::kernels::{dot_rows, ActBuf, Isa, Kernel};
use ferrox_core::quant::{dequantize_row, GgmlType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{dot_types, random_row};

fn simd_isas() -> Vec<Isa> {
    Isa::all()
        .iter()
        .copied()
        .filter(|i| *i != Isa::Scalar && i.supported())
        .collect()
}

#[test]
fn simd_kernels_match_scalar_reference() {
    let isas = simd_isas();
    let mut rng = StdRng::seed_from_u64(11);
    let mut acts = ActBuf::default();
    let mut checked = 0;
    for &isa in &isas {
        for ty in dot_types() {
            if !isa.has_kernel(ty) {
                continue;
            }
            for cols in [256usize, 512, 4864 / 256 * 256 + 256] {
                for extreme in [false, true] {
                    let w = random_row(&mut rng, ty, cols, extreme);
                    let x: Vec<f32> = (0..3 * cols)
                        .map(|i| rng.gen_range(-1.0f32..1.0) * [1.0, 1e-3, 300.0][i / cols])
                        .collect();
                    acts.quantize(ty.act_type().unwrap(), &x, cols);
                    let mut simd = [0f32; 3];
                    let mut refr = [0f32; 3];
                    dot_rows(isa, ty, &w, &acts, 0, &mut simd);
                    dot_rows(Isa::Scalar, ty, &w, &acts, 0, &mut refr);
                    let mut wf = vec![0f32; cols];
                    dequantize_row(ty, &w, &mut wf).unwrap();
                    for t in 0..3 {
                        let xs = &x[t * cols..(t + 1) * cols];
                        let mag: f64 = wf.iter().zip(xs).map(|(a, b)| (a * b).abs() as f64).sum();
                        let diff = (simd[t] as f64 - refr[t] as f64).abs();
                        assert!(
                            diff <= 4e-5 * mag * 1.05 + 1e-35,
                            "{isa:?} {ty:?} cols={cols} extreme={extreme} t={t}: simd {} ref {} mag {mag}",
                            simd[t],
                            refr[t]
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    if Isa::Avx2.supported() {
        assert!(
            checked >= 9 * 3 * 2 * 3,
            "all AVX2 kernels exercised ({checked})"
        );
    }
}

#[test]
fn float_kernels_handle_ragged_tails() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut acts = ActBuf::default();
    for &isa in &simd_isas() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for cols in [1usize, 7, 8, 9, 31, 33, 100] {
                let w = random_row(&mut rng, ty, cols, false);
                let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
                acts.quantize(ty.act_type().unwrap(), &x, cols);
                let (mut a, mut b) = ([0f32], [0f32]);
                dot_rows(isa, ty, &w, &acts, 0, &mut a);
                dot_rows(Isa::Scalar, ty, &w, &acts, 0, &mut b);
                assert!(
                    (a[0] - b[0]).abs() <= 1e-5 * (1.0 + b[0].abs()),
                    "{ty:?} {cols}: {a:?} vs {b:?}"
                );
            }
        }
    }
}

#[test]
fn token_grouping_is_bit_invariant() {
    let mut rng = StdRng::seed_from_u64(13);
    let mut acts = ActBuf::default();
    let cols = 512;
    let n = 7;
    for &isa in Isa::all().iter().filter(|i| i.supported()) {
        for ty in dot_types() {
            let w = random_row(&mut rng, ty, cols, false);
            let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            acts.quantize(ty.act_type().unwrap(), &x, cols);
            let mut all = vec![0f32; n];
            dot_rows(isa, ty, &w, &acts, 0, &mut all);
            for t in 0..n {
                let mut one = [0f32];
                dot_rows(isa, ty, &w, &acts, t, &mut one);
                assert_eq!(
                    one[0].to_bits(),
                    all[t].to_bits(),
                    "{isa:?} {ty:?} token {t}"
                );
            }
            // A group starting mid-batch (3 tokens from 2) as well.
            let mut mid = [0f32; 3];
            dot_rows(isa, ty, &w, &acts, 2, &mut mid);
            for k in 0..3 {
                assert_eq!(mid[k].to_bits(), all[2 + k].to_bits(), "{isa:?} {ty:?}");
            }
        }
    }
}

/// The blocks of `x` (`block` values each) from the `isa` quantizer and from the reference.
fn both_ways<B: Default + Clone>(
    x: &[f32],
    block: usize,
    isa: Isa,
    simd: fn(Isa, &[f32], &mut [B]),
    reference: fn(&[f32], &mut [B]),
) -> (Vec<B>, Vec<B>) {
    let (mut a, mut b) = (
        vec![B::default(); x.len() / block],
        vec![B::default(); x.len() / block],
    );
    simd(isa, x, &mut a);
    reference(x, &mut b);
    (a, b)
}

/// The SIMD activation quantizers give the reference's bytes exactly (ties, extremes, zeros,
/// non-finite values).
#[test]
fn simd_quantizers_match_reference_bitwise() {
    use ferrox_core::kernels::{quantize_row_q8_0, quantize_row_q8_k};
    use ferrox_core::quant::act;
    let mut rng = StdRng::seed_from_u64(5);
    for isa in simd_isas() {
        for case in 0..60 {
            let n = 512;
            let scale = [1.0f32, 1e-30, 3e30, 127.0][case % 4];
            let mut x: Vec<f32> = (0..n)
                .map(|_| rng.gen_range(-1.0f32..1.0) * scale)
                .collect();
            match case % 6 {
                // Exact halves after scaling (ties), duplicated extremes of both signs.
                1 => x.iter_mut().for_each(|v| *v = (*v * 8.0).round() / 8.0),
                2 => {
                    x[3] = -2.0 * scale;
                    x[9] = 2.0 * scale;
                }
                3 => x[..256].iter_mut().for_each(|v| *v = 0.0),
                4 => x[17] = f32::NAN,
                5 => x[40] = f32::INFINITY,
                _ => {}
            }
            let (a, b) = both_ways(&x, 32, isa, quantize_row_q8_0, act::quantize_row_q8_0);
            for (p, q) in a.iter().zip(&b) {
                assert_eq!((p.d, p.qs), (q.d, q.qs), "{isa:?} q8_0 case {case}");
            }
            let (a, b) = both_ways(&x, 256, isa, quantize_row_q8_k, act::quantize_row_q8_k);
            for (p, q) in a.iter().zip(&b) {
                assert_eq!(p.d.to_bits(), q.d.to_bits(), "{isa:?} q8_k d case {case}");
                assert_eq!((p.qs, p.bsums), (q.qs, q.bsums), "{isa:?} q8_k case {case}");
            }
        }
    }
}

/// The f32 attention helpers agree with plain f64 sums on every length (ragged tails too).
#[test]
fn f32_dot_and_axpy_match_f64() {
    use ferrox_core::kernels::{f32_axpy, f32_dot};
    let mut rng = StdRng::seed_from_u64(9);
    for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 64, 100, 128, 256] {
        let a: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0) * 1e3).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let mag: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as f64 * *y as f64).abs())
            .sum();
        let got = f32_dot(&a, &b) as f64;
        assert!(
            (got - want).abs() <= 1e-6 * mag + 1e-30,
            "n={n}: {got} vs {want}"
        );
        let mut y = a.clone();
        f32_axpy(&mut y, 0.37, &b);
        for i in 0..n {
            let w = a[i] as f64 + 0.37f32 as f64 * b[i] as f64;
            assert!(
                (y[i] as f64 - w).abs() <= 1e-6 * w.abs().max(1.0),
                "n={n} i={i}"
            );
        }
    }
}

/// `dot_block` on `isa` against the scalar reference for 7 rows and every token count 1..=9,
/// ordinary and extreme scales, each row width of `widths`.
fn check_dot_block(isa: Isa, ty: GgmlType, widths: &[usize], rng: &mut StdRng) {
    use ferrox_core::kernels::dot_block;
    let mut acts = ActBuf::default();
    for &cols in widths {
        for extreme in [false, true] {
            let rows = 7;
            let w: Vec<u8> = (0..rows)
                .flat_map(|_| random_row(rng, ty, cols, extreme))
                .collect();
            let n = 9;
            let x: Vec<f32> = (0..n * cols)
                .map(|i| rng.gen_range(-1.0f32..1.0) * [1.0, 1e-3, 300.0][i / cols % 3])
                .collect();
            acts.quantize(ty.act_type().unwrap(), &x, cols);
            let rb = ty.row_bytes(cols).unwrap();
            let mut wf = vec![0f32; cols];
            for nt in 1..=n {
                let mut simd = vec![0f32; rows * nt];
                let mut refr = vec![0f32; rows * nt];
                dot_block(isa, ty, &w, &acts, n - nt, nt, &mut simd);
                dot_block(Isa::Scalar, ty, &w, &acts, n - nt, nt, &mut refr);
                for r in 0..rows {
                    dequantize_row(ty, &w[r * rb..(r + 1) * rb], &mut wf).unwrap();
                    for k in 0..nt {
                        let t = n - nt + k;
                        let xs = &x[t * cols..(t + 1) * cols];
                        let mag: f64 = wf.iter().zip(xs).map(|(a, b)| (a * b).abs() as f64).sum();
                        let (s, e) = (simd[r * nt + k], refr[r * nt + k]);
                        assert!(
                            (s as f64 - e as f64).abs() <= 4e-5 * mag * 1.05 + 1e-35,
                            "{ty:?} cols={cols} extreme={extreme} nt={nt} row {r} token {t}: \
                             simd {s} ref {e} mag {mag}"
                        );
                    }
                }
            }
        }
    }
}

/// On an AVX-512 CPU the K-quants take the AVX-512 kernel, and it matches the scalar reference
/// for several rows (not a multiple of the kernel's four) and 1..=9 tokens — both the direct
/// (few tokens) and the decoded-scratch paths — on model widths and extreme scales. The same
/// for the other Q8_K-paired types and their AVX-512 kernel (token groups of 8, 4, 2, 1).
#[test]
fn avx512_kquant_kernels_match_reference() {
    use GgmlType::*;
    let kernels = [
        (Q4K, Kernel::Avx512K),
        (Q5K, Kernel::Avx512K),
        (Q6K, Kernel::Avx512K),
    ]
    .into_iter()
    .chain(
        [
            Q2K, Q3K, IQ4XS, IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S, IQ1S, IQ1M, TQ1_0, TQ2_0,
        ]
        .map(|t| (t, Kernel::Avx512Q8K)),
    );
    check_avx512(kernels, &[256, 512, 4864, 8960], 17);
}

/// The 32-element types on AVX-512: odd block counts (a half pair), 1..=9 tokens (per-pair
/// decoding and the decoded scratch), several rows.
#[test]
fn avx512_block32_kernels_match_reference() {
    use GgmlType::*;
    let kernels = [Q4_0, Q5_0, Q8_0, IQ4NL, MXFP4].map(|t| (t, Kernel::Avx512));
    check_avx512(kernels, &[32, 96, 224, 896], 19);
}

/// On an AVX-512 CPU each type of `kernels` is dispatched to its kernel and matches the scalar
/// reference at each of `widths` (`check_dot_block`, from a generator seeded with `seed`).
fn check_avx512(
    kernels: impl IntoIterator<Item = (GgmlType, Kernel)>,
    widths: &[usize],
    seed: u64,
) {
    if !Isa::Avx512.supported() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    for (ty, kernel) in kernels {
        assert_eq!(Isa::Avx512.kernel(ty), kernel, "{ty:?} dispatch");
        check_dot_block(Isa::Avx512, ty, widths, &mut rng);
    }
}

/// The AVX2 kernels of every type, through `dot_block` (several rows, 1..=9 tokens).
#[test]
fn avx2_kernels_match_reference_on_blocks() {
    if !Isa::Avx2.supported() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(23);
    for ty in dot_types() {
        if Isa::Avx2.has_kernel(ty) && ty.block_size() > 1 {
            check_dot_block(Isa::Avx2, ty, &[256, 768], &mut rng);
        }
    }
}
