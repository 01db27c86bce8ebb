//! `WeightMatrix`: the only door from model code into the kernels. A weight is `rows` output
//! features by `cols` input features, stored row-major in its GGML type, borrowed from the map.
//!
//! Batch invariance: every output element is produced by the same per-row reduction whatever
//! the batch size or thread split, so `gemm` rows are bit-identical to `gemv`.

use crate::quant::{self, GgmlType, QuantError};
use crate::storage::Bytes;
use rayon::prelude::*;

#[derive(Clone, Debug)]
pub struct WeightMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: Bytes,
}

impl WeightMatrix {
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: Bytes) -> Result<Self, QuantError> {
        let row_bytes = ty.row_bytes(cols).ok_or(QuantError::Misaligned {
            ty,
            cols,
            block: ty.block_size(),
        })?;
        let expected = row_bytes.checked_mul(rows).ok_or(QuantError::Length {
            got: data.len(),
            expected: usize::MAX,
        })?;
        if data.len() != expected {
            return Err(QuantError::Length {
                got: data.len(),
                expected,
            });
        }
        Ok(WeightMatrix {
            ty,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// An owned f32 matrix (tests, random weights, converted safetensors).
    pub fn from_f32(rows: usize, cols: usize, values: &[f32]) -> Self {
        assert_eq!(values.len(), rows * cols, "from_f32: wrong element count");
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::new(GgmlType::F32, rows, cols, Bytes::from_vec(bytes)).expect("f32 layout")
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    pub fn row_data(&self, r: usize) -> &[u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Dequantizes row `r` into `out` (`cols` elements): embedding lookups.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        quant::dequantize_row(self.ty, self.row_data(r), out)
    }

    /// y[rows] = W · x[cols].
    pub fn gemv(&self, x: &[f32], y: &mut [f32]) {
        self.gemm(x, 1, y)
    }

    /// Y[n, rows] = X[n, cols] · Wᵀ.
    pub fn gemm(&self, x: &[f32], n: usize, y: &mut [f32]) {
        assert_eq!(x.len(), n * self.cols, "gemm: input shape");
        assert_eq!(y.len(), n * self.rows, "gemm: output shape");
        const CHUNK: usize = 64;
        let rows = self.rows;
        // Output is [n, rows]; split over row blocks so every thread reads each weight row once.
        let mut out_t = vec![0f32; n * rows];
        out_t
            .par_chunks_mut(CHUNK * n)
            .enumerate()
            .for_each(|(ci, block)| {
                let r0 = ci * CHUNK;
                let mut w = vec![0f32; self.cols];
                for (i, col) in block.chunks_mut(n).enumerate() {
                    self.dequantize_row(r0 + i, &mut w)
                        .expect("weight rows validated at construction");
                    for (b, o) in col.iter_mut().enumerate() {
                        *o = dot_f32(&w, &x[b * self.cols..(b + 1) * self.cols]);
                    }
                }
            });
        for b in 0..n {
            for r in 0..rows {
                y[b * rows + r] = out_t[r * n + b];
            }
        }
    }
}

fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for i in 0..chunks {
        for j in 0..8 {
            acc[j] += a[i * 8 + j] * b[i * 8 + j];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_rows_equal_gemv() {
        let (rows, cols, n) = (70, 40, 3);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let m = WeightMatrix::from_f32(rows, cols, &w);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let mut y = vec![0f32; n * rows];
        m.gemm(&x, n, &mut y);
        for b in 0..n {
            let mut yb = vec![0f32; rows];
            m.gemv(&x[b * cols..(b + 1) * cols], &mut yb);
            assert_eq!(&y[b * rows..(b + 1) * rows], &yb[..]);
        }
    }
}
