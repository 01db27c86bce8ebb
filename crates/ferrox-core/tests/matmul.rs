//! `WeightMatrix` products: gemm rows bit-identical to gemv for every batch size (parallel
//! path included), and close to the dequantized f32 product.

use ferrox_core::matmul::WeightMatrix;
use ferrox_core::quant::{ActType, GgmlType};
use ferrox_core::storage::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::{random_row, GRID_TYPES};

fn random_matrix(rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> WeightMatrix {
    let mut data = Vec::new();
    for _ in 0..rows {
        data.extend(random_row(rng, ty, cols, false));
    }
    WeightMatrix::new(ty, rows, cols, Bytes::from_vec(data)).unwrap()
}

/// Random `n` × cols activations; every gemm over the first `nb` of them (for each `nb` in
/// `batches`) must give gemv's bits row by row. Returns the gemv outputs (`n` × rows).
fn assert_gemm_is_gemv(
    rng: &mut StdRng,
    m: &WeightMatrix,
    n: usize,
    batches: &[usize],
) -> (Vec<f32>, Vec<f32>) {
    let (rows, cols) = (m.rows(), m.cols());
    let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let mut single = vec![0f32; n * rows];
    for b in 0..n {
        m.gemv(
            &x[b * cols..(b + 1) * cols],
            &mut single[b * rows..(b + 1) * rows],
        );
    }
    for &nb in batches {
        let mut y = vec![0f32; nb * rows];
        m.gemm(&x[..nb * cols], nb, &mut y);
        for (i, (a, b)) in y.iter().zip(&single).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{:?} {rows}x{cols} n={nb} elem {i}",
                m.ty()
            );
        }
    }
    (x, single)
}

/// Asserts that `got`, a product's output for row `r` of `m` on the input row `x`, is the
/// exact product within activation quantization error (`what` names the case).
fn assert_row_product(m: &WeightMatrix, x: &[f32], r: usize, got: f32, what: &str) {
    let cols = m.cols();
    let mut w = vec![0f32; cols];
    m.dequantize_row(r, &mut w).unwrap();
    let exact: f32 = w.iter().zip(&x[..cols]).map(|(a, b)| a * b).sum();
    let mag: f32 = w.iter().zip(&x[..cols]).map(|(a, b)| (a * b).abs()).sum();
    assert!(
        (got - exact).abs() <= 0.02 * mag + 1e-6,
        "{what}: {got} vs {exact}"
    );
}

#[test]
fn gemm_is_bit_identical_to_gemv_for_every_batch_size() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(21);
    for ty in [
        Q4_0, Q5_0, Q8_0, Q4K, Q5K, Q6K, F16, F32, Q4_1, Q5_1, Q2K, Q3K, IQ4NL, IQ4XS, MXFP4,
    ]
    .into_iter()
    .chain(GRID_TYPES)
    {
        // 300 x 512 is above the parallel threshold for every type.
        let (rows, cols) = (300, 512);
        let m = random_matrix(&mut rng, ty, rows, cols);
        let (x, single) = assert_gemm_is_gemv(&mut rng, &m, 11, &[1, 2, 3, 4, 5, 8, 9, 11]);
        // And the product is the matrix product (within activation quantization error).
        for r in [0, rows / 2, rows - 1] {
            assert_row_product(&m, &x, r, single[r], &format!("{ty:?} row {r}"));
        }
    }
}

/// A batch long enough that its activations are quantized in parallel pieces of rows (every
/// activation type: Q8_K, Q8_0, Q8_1, bf16) still gives gemv's bits row by row.
#[test]
fn long_batches_quantized_in_pieces_equal_gemv() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(23);
    for ty in [Q4K, Q4_0, Q4_1, BF16] {
        let m = random_matrix(&mut rng, ty, 48, 512);
        // 97 rows of 512: three pieces of 64 rows and the remainder.
        assert_gemm_is_gemv(&mut rng, &m, 97, &[97]);
    }
}

/// Odd shapes of the 32-element types: a row count that leaves a partial row group and an odd
/// number of blocks per row (a half block pair), at every batch size around the point where
/// the kernels switch from decoding per token tile to decoding once per batch.
#[test]
fn gemm_equals_gemv_on_ragged_shapes() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(22);
    for ty in [Q4_0, Q5_0, Q8_0, IQ4NL, MXFP4] {
        for (rows, cols) in [(301, 96), (7, 32), (130, 224)] {
            let m = random_matrix(&mut rng, ty, rows, cols);
            let (x, single) = assert_gemm_is_gemv(&mut rng, &m, 17, &[2, 5, 7, 8, 9, 16, 17]);
            let r = rows - 1;
            assert_row_product(&m, &x, r, single[r], &format!("{ty:?} {rows}x{cols}"));
        }
    }
}

/// K-quants and the other Q8_K-paired types through `WeightMatrix`: every batch size 1..=9
/// (the AVX-512 kernels' direct and decoded-scratch paths, token groups of 8 / 4 / 2 / 1)
/// gives gemv's bits; rows not a multiple of 4.
#[test]
fn kquant_gemm_is_bit_identical_to_gemv() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(23);
    for ty in [Q4K, Q5K, Q6K, Q2K, Q3K, IQ4XS]
        .into_iter()
        .chain(GRID_TYPES)
    {
        for (rows, cols) in [(13, 256), (37, 4864)] {
            let m = random_matrix(&mut rng, ty, rows, cols);
            assert_gemm_is_gemv(&mut rng, &m, 9, &(1..=9).collect::<Vec<_>>());
        }
    }
}

/// The interleaved layout (AVX-512 CPUs): rows dequantize to the same values, gemm rows equal
/// gemv bit for bit across the 64-token split, and products agree with the ggml-layout kernels
/// up to f32 summation order (the integer block sums are exact on both).
#[test]
fn interleaved_matrices_match_the_ggml_layout() {
    use ferrox_core::kernels::{interleaves, isa};
    use ferrox_core::quant::repack::LAYOUT_TYPES;
    let mut rng = StdRng::seed_from_u64(24);
    for ty in LAYOUT_TYPES {
        let shapes: &[(usize, usize)] = if ty.block_size() == 1 {
            &[(16, 2), (16, 6), (48, 96), (304, 896)]
        } else if ty.block_size() == 256 {
            &[(16, 256), (48, 1536), (304, 4864)]
        } else {
            &[(16, 32), (48, 96), (304, 896)]
        };
        for &(rows, cols) in shapes {
            let plain = random_matrix(&mut rng, ty, rows, cols);
            let m = plain.clone().interleave();
            assert_eq!(m.is_interleaved(), interleaves(isa(), ty), "{ty:?}");
            let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
            for r in [0, 5, rows - 1] {
                plain.dequantize_row(r, &mut a).unwrap();
                m.dequantize_row(r, &mut b).unwrap();
                assert_eq!(a, b, "{ty:?} row {r}");
            }
            let n = 70;
            let (x, single) = assert_gemm_is_gemv(&mut rng, &m, n, &[1, 2, 3, 8, 17, 64, 65, 70]);
            let mut want = vec![0f32; n * rows];
            plain.gemm(&x, n, &mut want);
            for (i, (g, w)) in single.iter().zip(&want).enumerate() {
                let (t, r) = (i / rows, i % rows);
                plain.dequantize_row(r, &mut a).unwrap();
                let mag: f32 = a
                    .iter()
                    .zip(&x[t * cols..])
                    .map(|(p, q)| (p * q).abs())
                    .sum();
                // BF16 with `vdpbf16ps` takes bf16 activations (2^-9 relative each).
                let tol = if m.act_type() == ActType::Bf16 {
                    4e-3
                } else {
                    1e-5
                };
                assert!(
                    (g - w).abs() <= tol * mag + 1e-6,
                    "{ty:?} {rows}x{cols} token {t} row {r}: {g} vs {w}"
                );
            }
        }
    }
}

/// Interleaved BF16 weights against bf16 activations (`vdpbf16ps`, where the CPU has it):
/// every output equals the scalar reference `dot_row_ref` on the bf16-rounded inputs, bit for
/// bit, at every batch size; odd widths keep the row layout and f32 activations.
#[test]
fn bf16_dot_products_equal_the_scalar_reference() {
    use ferrox_core::kernels::ActBuf;
    use ferrox_core::quant::dot_row_ref;
    let mut rng = StdRng::seed_from_u64(26);
    for (rows, cols) in [(16, 2), (32, 10), (48, 896), (16, 7)] {
        let plain = random_matrix(&mut rng, GgmlType::BF16, rows, cols);
        let m = plain.clone().interleave();
        if cols % 2 == 1 {
            assert!(!m.is_interleaved() && m.act_type() == ActType::F32);
        } else {
            let bf16 = ferrox_core::kernels::bf16_dot();
            assert_eq!(m.act_type() == ActType::Bf16, bf16, "{rows}x{cols}");
        }
        if m.act_type() != ActType::Bf16 {
            continue;
        }
        let n = 13;
        let (x, single) = assert_gemm_is_gemv(&mut rng, &m, n, &[1, 2, 12, 13]);
        let mut acts = ActBuf::default();
        acts.quantize(ActType::Bf16, &x, cols);
        let row_bytes = cols * 2;
        for t in 0..n {
            for r in 0..rows {
                let w = &plain.bytes()[r * row_bytes..(r + 1) * row_bytes];
                let want = dot_row_ref(GgmlType::BF16, w, acts.row(t)).unwrap();
                let got = single[t * rows + r];
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{rows}x{cols} token {t} row {r}"
                );
            }
        }
    }
}

/// The load-time conversions (`quant::convert`, AVX-512 CPUs): IQ1_S / IQ1_M to the ternary
/// layout and TQ1_0 to TQ2_0 give exactly the products and the dequantized rows of the file's
/// blocks, gemm rows equal gemv at every batch size, and the conversion really ran.
#[test]
fn converted_matrices_equal_the_file_layout_bit_for_bit() {
    use ferrox_core::kernels::{conversion, isa};
    let mut rng = StdRng::seed_from_u64(25);
    use GgmlType::*;
    for ty in [IQ1S, IQ1M, TQ1_0, IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S] {
        for (rows, cols) in [(13, 256), (37, 4864), (300, 1792)] {
            let plain = random_matrix(&mut rng, ty, rows, cols);
            let m = plain.clone().interleave();
            let converted = conversion(isa(), ty).is_some();
            assert_eq!(m.bytes().len() != plain.bytes().len(), converted, "{ty:?}");
            if ty == GgmlType::TQ1_0 && converted {
                assert_eq!(m.ty(), GgmlType::TQ2_0);
            }
            let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
            for r in [0, 5, rows - 1] {
                plain.dequantize_row(r, &mut a).unwrap();
                m.dequantize_row(r, &mut b).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "{ty:?} row {r}");
            }
            let n = 9;
            let (x, single) = assert_gemm_is_gemv(&mut rng, &m, n, &(1..=9).collect::<Vec<_>>());
            let mut want = vec![0f32; n * rows];
            plain.gemm(&x, n, &mut want);
            for (i, (g, w)) in single.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{ty:?} {rows}x{cols} output {i}");
            }
        }
    }
}

/// The mixture-of-experts path: one input quantized once, rows gathered per expert
/// (`ActBuf::gather`, repeats and any order), several matrices in one `gemm_batch` region
/// (serial below the parallel threshold, parallel above, interleaved layouts included): every
/// output row has `gemv`'s bits on the gathered input row.
#[test]
fn gemm_batch_over_gathered_rows_equals_gemv() {
    use ferrox_core::kernels::ActBuf;
    use ferrox_core::matmul::{gemm_batch, Gemm};
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(25);
    for ty in [Q4K, Q6K, Q5_0, Q8_0, IQ4NL, Q4_1, IQ4XS, F32] {
        for (rows, cols) in [(16, 256), (272, 512)] {
            let mats: Vec<WeightMatrix> = (0..3)
                .map(|_| random_matrix(&mut rng, ty, rows, cols).interleave())
                .collect();
            let n = 9;
            let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            let mut src = ActBuf::default();
            src.quantize(mats[0].act_type(), &x, cols);
            let order = [3, 0, 7, 3, 8, 1, 5, 5];
            let mut acts = ActBuf::default();
            acts.gather(&src, &order);
            // (first gathered row, rows, output offset): a gap before the last product.
            let jobs = [(0, 2, 0), (2, 5, 2 * rows), (7, 1, 8 * rows)];
            let mut y = vec![f32::NAN; 9 * rows];
            gemm_batch(
                jobs.len(),
                |i| Gemm {
                    w: &mats[i],
                    acts: &acts,
                    a0: jobs[i].0,
                    n: jobs[i].1,
                    off: jobs[i].2,
                },
                &mut y,
            );
            let mut want = vec![0f32; rows];
            for (i, &(a0, nr, off)) in jobs.iter().enumerate() {
                for k in 0..nr {
                    let t = order[a0 + k];
                    mats[i].gemv(&x[t * cols..(t + 1) * cols], &mut want);
                    let got = &y[off + k * rows..off + (k + 1) * rows];
                    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "{ty:?} {rows}x{cols} job {i} row {k}.{r}"
                        );
                    }
                }
            }
            assert!(
                y[7 * rows..8 * rows].iter().all(|v| v.is_nan()),
                "the gap is untouched"
            );
        }
    }
}

#[test]
#[should_panic(expected = "outputs overlap")]
fn gemm_batch_refuses_overlapping_outputs() {
    use ferrox_core::kernels::ActBuf;
    use ferrox_core::matmul::{gemm_batch, Gemm};
    let m = WeightMatrix::from_f32(4, 32, &[0.5; 128]);
    let mut acts = ActBuf::default();
    acts.quantize(m.act_type(), &[1.0; 64], 32);
    let mut y = vec![0f32; 12];
    let job = |i: usize| Gemm {
        w: &m,
        acts: &acts,
        a0: 0,
        n: 2,
        off: 4 * i,
    };
    gemm_batch(2, job, &mut y);
}
