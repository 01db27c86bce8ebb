//! Scalar references: dequantization bit-exact against gguf-py (fixture written by
//! scripts/quant_block_vectors.py from random and real llama-quantize blocks), activation quantizers, and integer dot products against
//! dequantize-then-f32-dot on random blocks including extreme scales.

use ferrox_core::kernels::ActBuf;
use ferrox_core::quant::act::{quantize_row_q8_0, quantize_row_q8_1, quantize_row_q8_k};
use ferrox_core::quant::blocks::*;
use ferrox_core::quant::{dequantize_row, dot_row_ref, GgmlType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

mod common;
use common::{dot_types, random_row};

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn type_by_name(name: &str) -> GgmlType {
    (0..64)
        .filter_map(|id| GgmlType::from_id(id).ok())
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("unknown type {name}"))
}

#[test]
fn dequantize_matches_gguf_py_bit_exactly() {
    let text = include_str!("fixtures/block_vectors.json");
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let obj = v.as_object().unwrap();
    // Random blocks of every type gguf-py dequantizes, and real llama-quantize blocks of the
    // IQ1 / IQ2 / IQ3 / ternary types ("real:TYPE").
    let real = obj.keys().filter(|k| k.starts_with("real:")).count();
    assert_eq!((obj.len() - real, real), (24, 9), "vectors per type");
    for (name, e) in obj {
        let ty = type_by_name(name.trim_start_matches("real:"));
        let bytes = hex_decode(e["bytes"].as_str().unwrap());
        let n = e["n"].as_u64().unwrap() as usize;
        let mut out = vec![0f32; n];
        dequantize_row(ty, &bytes, &mut out).unwrap();
        let mut h = Sha256::new();
        for x in &out {
            h.update(x.to_le_bytes());
        }
        let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, e["sha256"].as_str().unwrap(), "{name}");
    }
}

#[test]
fn dot_with_quantized_activation_matches_dequantized_dot() {
    let mut rng = StdRng::seed_from_u64(7);
    let cols = 512;
    let mut act = ActBuf::default();
    for ty in dot_types() {
        for extreme in [false, true] {
            for x_scale in [1.0f32, 1e-3, 300.0] {
                let w = random_row(&mut rng, ty, cols, extreme);
                let mut wf = vec![0f32; cols];
                dequantize_row(ty, &w, &mut wf).unwrap();
                let x: Vec<f32> = (0..cols)
                    .map(|_| rng.gen_range(-1.0f32..1.0) * x_scale)
                    .collect();
                act.quantize(ty.act_type().unwrap(), &x, cols);
                let got = dot_row_ref(ty, &w, act.row(0)).unwrap() as f64;
                let exact: f64 = wf.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                // Activation rounding: half a step of the block's scale per element (blocks of
                // 32 or 256), plus f16 rounding of that scale and f32 accumulation.
                let blk = ty.act_type().map(|a| match a {
                    ferrox_core::quant::ActType::Q8K => 256,
                    _ => 32,
                });
                let mut tol = 0f64;
                for (wc, xc) in wf.chunks(blk.unwrap()).zip(x.chunks(blk.unwrap())) {
                    let amax = xc.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                    let step = if ty.act_type() == Some(ferrox_core::quant::ActType::F32) {
                        0.0
                    } else {
                        amax / 127.0
                    };
                    for (&a, &b) in wc.iter().zip(xc) {
                        tol +=
                            (a as f64).abs() * (0.5 * step + 2e-3 * (b as f64).abs() + 1e-6 * amax);
                    }
                }
                tol += 1e-30;
                assert!(
                    (got - exact).abs() <= tol,
                    "{ty:?} extreme={extreme} x_scale={x_scale}: got {got} exact {exact} tol {tol}"
                );
                // The tolerance is meaningful: a wrong sign or a dropped block would exceed it.
                assert!(tol < exact.abs().max(1e-30) * 0.5 || exact.abs() < tol * 4.0);
            }
        }
    }
}

/// `n` values uniform in `range` (from `seed`) and their blocks of `block` from `quantize`.
fn random_quantized<B: Default + Clone>(
    seed: u64,
    n: usize,
    range: std::ops::Range<f32>,
    block: usize,
    quantize: fn(&[f32], &mut [B]),
) -> (Vec<f32>, Vec<B>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let x: Vec<f32> = (0..n).map(|_| rng.gen_range(range.clone())).collect();
    let mut b = vec![B::default(); n / block];
    quantize(&x, &mut b);
    (x, b)
}

#[test]
fn q8_0_roundtrip_within_half_step() {
    let (x, mut b) = random_quantized(3, 256, -5.0..5.0, 32, quantize_row_q8_0);
    for (blk, xb) in b.iter().zip(x.chunks(32)) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = f16_to_f32(blk.d);
        assert!((d - amax / 127.0).abs() <= amax / 127.0 * 1e-3);
        assert!(blk.qs.iter().any(|&q| q.abs() == 127));
        for (&q, &v) in blk.qs.iter().zip(xb) {
            assert!((q as f32 * d - v).abs() <= 0.5 * d * 1.01 + amax * 1e-3);
        }
    }
    // Half-way values round away from zero (roundf).
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -2.5;
    quantize_row_q8_0(&x, &mut b[..1]);
    assert_eq!((b[0].qs[0], b[0].qs[1], b[0].qs[2]), (127, 3, -3));
    // An all-zero block has zero scale and quants.
    quantize_row_q8_0(&[0.0; 32], &mut b[..1]);
    assert_eq!(b[0], BlockQ8_0::default());
}

#[test]
fn q8_1_sum_term() {
    let (_, b) = random_quantized(4, 64, -1.0..3.0, 32, quantize_row_q8_1);
    for blk in &b {
        let sum: i32 = blk.qs.iter().map(|&q| q as i32).sum();
        let want = sum as f32 * f16_to_f32(blk.d);
        assert!((f16_to_f32(blk.s) - want).abs() <= want.abs() * 2e-3);
    }
}

#[test]
fn q8_k_semantics() {
    // Largest magnitude negative: iscale = -127 / max > 0, so it maps to -127.
    let mut x = vec![0.25f32; 256];
    x[5] = -1.0;
    x[6] = 0.5; // 63.5 rounds half to even → 64
    let mut b = vec![BlockQ8K::default(); 1];
    quantize_row_q8_k(&x, &mut b);
    assert_eq!(b[0].qs[5], -127);
    assert_eq!(b[0].qs[6], 64);
    assert_eq!(b[0].qs[0], 32); // 31.75 → 32
    assert!((b[0].d - 1.0 / 127.0).abs() < 1e-9);
    for (g, s) in b[0].bsums.iter().enumerate() {
        let want: i16 = b[0].qs[16 * g..16 * g + 16].iter().map(|&q| q as i16).sum();
        assert_eq!(*s, want);
    }
    // Positive max: iscale < 0, d < 0 and the max maps to -127; values never exceed 127.
    let mut x = vec![-0.999f32; 256];
    x[0] = 1.0;
    quantize_row_q8_k(&x, &mut b);
    assert_eq!(b[0].qs[0], -127);
    assert!(b[0].qs[1] == 127 && b[0].d < 0.0);
    quantize_row_q8_k(&[0.0; 256], &mut b);
    assert_eq!(b[0], BlockQ8K::default());
}

#[test]
fn q8_k_and_q8_1_dequantize() {
    let mut b = BlockQ8K {
        d: 0.5,
        ..Default::default()
    };
    b.qs[3] = -7;
    let mut raw = Vec::new();
    raw.extend_from_slice(&b.d.to_le_bytes());
    raw.extend(b.qs.iter().map(|&q| q as u8));
    raw.extend(b.bsums.iter().flat_map(|s| s.to_le_bytes()));
    let mut out = vec![1f32; 256];
    dequantize_row(GgmlType::Q8K, &raw, &mut out).unwrap();
    assert_eq!(out[3], -3.5);
    assert_eq!(out[4], 0.0);
    let q = BlockQ8_1 {
        d: f32_to_f16(0.25),
        s: [0; 2],
        qs: [4; 32],
    };
    let mut out = vec![0f32; 32];
    dequantize_row(GgmlType::Q8_1, blocks_as_bytes(&[q]), &mut out).unwrap();
    assert!(out.iter().all(|&v| v == 1.0));
}

#[test]
fn length_errors_are_typed() {
    let mut out = vec![0f32; 32];
    assert!(dequantize_row(GgmlType::Q4_0, &[0u8; 17], &mut out).is_err());
    let mut out = vec![0f32; 31];
    assert!(dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut out).is_err());
    let mut act = ActBuf::default();
    act.quantize(ferrox_core::quant::ActType::Q8_0, &[0.0; 32], 32);
    assert!(dot_row_ref(GgmlType::Q4K, &[0u8; 18], act.row(0)).is_err());
}
