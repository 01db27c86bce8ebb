//! `kernels::limit_conversions` (its own process: the budget is process-wide): conversions
//! that would grow the weights past the budget leave matrices in the file's layout, with the
//! same products.

use ferrox_core::kernels::{conversion, isa, limit_conversions};
use ferrox_core::matmul::WeightMatrix;
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;
use common::random_row;

#[test]
fn conversions_stop_at_the_budget() {
    let (ty, rows, cols) = (GgmlType::IQ1S, 32, 512);
    if conversion(isa(), ty).is_none() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(7);
    let matrix = |rng: &mut StdRng| {
        let data: Vec<u8> = (0..rows)
            .flat_map(|_| random_row(rng, ty, cols, false))
            .collect();
        WeightMatrix::new(ty, rows, cols, Bytes::from_vec(data)).unwrap()
    };
    let file_bytes = ty.row_bytes(cols).unwrap() * rows;
    let grown = cols / 256 * 80 * rows;
    // Room for one conversion and a half.
    limit_conversions((grown - file_bytes) * 3 / 2);
    let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let sizes: Vec<usize> = (0..3)
        .map(|_| {
            let plain = matrix(&mut rng);
            let m = plain.clone().interleave();
            let (mut a, mut b) = (vec![0f32; rows], vec![0f32; rows]);
            plain.gemv(&x, &mut a);
            m.gemv(&x, &mut b);
            assert_eq!(a, b);
            m.bytes().len()
        })
        .collect();
    assert_eq!(sizes, [grown, file_bytes, file_bytes]);
}
