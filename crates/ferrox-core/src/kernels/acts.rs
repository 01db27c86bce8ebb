//! Activation rows quantized for the kernels' dot products (`ActBuf`), with the pair layout
//! the AVX-512 kernels read. It lives on the kernel side because `quantize` dispatches to the
//! SIMD quantizers; the formats it fills (`quant::blocks`, `quant::ActRow`) know no kernel.

use crate::quant::blocks::{f16_to_f32, BlockQ8K, BlockQ8_0, BlockQ8_1, QK_K};
use crate::quant::{act, ActRow, ActType};

/// Owned quantized activations: `n` rows of `cols` elements in one format. Reused as scratch.
#[derive(Debug, Default)]
pub struct ActBuf {
    ty: Option<ActType>,
    cols: usize,
    rows: usize,
    pub(crate) f32: Vec<f32>,
    pub(crate) bf16: Vec<u16>,
    pub(crate) q8_0: Vec<BlockQ8_0>,
    pub(crate) q8_1: Vec<BlockQ8_1>,
    pub(crate) q8k: Vec<BlockQ8K>,
    /// f32 copies of the Q8_0 block scales (kernels avoid an f16 conversion per block and row).
    pub(crate) d8: Vec<f32>,
    /// Σq of each Q8_0 block (the interleaved kernels' offset correction).
    pub(crate) sum8: Vec<i32>,
    /// f32 copies of the Q8_1 blocks' `s` (d·Σq, the min term of Q4_1 / Q5_1); their scales
    /// go to `d8` as Q8_0's do.
    pub(crate) s8: Vec<f32>,
    /// Q8_0 in pairs of blocks for the AVX-512 kernels (filled when the CPU has them): per row
    /// and pair, 64 quants; 16 lanes of scales [d_a, d_a, d_b, d_b] × 4; 16 lanes of negated
    /// block sums [−Σq_a, 0, −Σq_b, 0] × 4 (the lane order of the kernel's reduced sums); an
    /// odd tail block pairs with a zero block.
    pair_q: Vec<i8>,
    pair_d: Vec<f32>,
    pair_s: Vec<i32>,
}

impl ActBuf {
    fn fill_pairs(&mut self) {
        let nb = self.cols / 32;
        let pairs = nb.div_ceil(2);
        let n = self.rows * pairs;
        self.pair_q.clear();
        self.pair_q.resize(n * 64, 0);
        self.pair_d.clear();
        self.pair_d.resize(n * 16, 0.0);
        self.pair_s.clear();
        self.pair_s.resize(n * 16, 0);
        for r in 0..self.rows {
            for i in 0..nb {
                let b = &self.q8_0[r * nb + i];
                let (p, half) = (r * pairs + i / 2, i % 2);
                self.pair_q[p * 64 + 32 * half..p * 64 + 32 * half + 32].copy_from_slice(&b.qs);
                let neg_sum = -b.qs.iter().map(|&q| q as i32).sum::<i32>();
                for quad in 0..4 {
                    let l = p * 16 + 4 * quad + 2 * half;
                    self.pair_d[l..l + 2].fill(self.d8[r * nb + i]);
                    self.pair_s[l] = neg_sum;
                }
            }
        }
    }

    /// The AVX-512 pair layout (quants, expanded scales, expanded negated sums); empty when
    /// the CPU lacks AVX-512 or the format is not Q8_0.
    pub(crate) fn pairs(&self) -> (&[i8], &[f32], &[i32]) {
        (&self.pair_q, &self.pair_d, &self.pair_s)
    }

    /// Quantizes `n` rows of `x` (each `cols` long) to `ty`, reusing the buffers.
    pub fn quantize(&mut self, ty: ActType, x: &[f32], cols: usize) {
        assert!(cols > 0 && x.len().is_multiple_of(cols), "ActBuf: shape");
        self.ty = Some(ty);
        self.cols = cols;
        self.rows = x.len() / cols;
        match ty {
            ActType::F32 => {
                self.f32.clear();
                self.f32.extend_from_slice(x);
            }
            ActType::Bf16 => {
                self.bf16.clear();
                self.bf16.extend(x.iter().map(|&v| act::f32_to_bf16(v)));
            }
            ActType::Q8_0 => {
                self.q8_0.resize(x.len() / 32, BlockQ8_0::default());
                act::per_row(x, cols, &mut self.q8_0, 32, |xr, br| {
                    super::quantize_row_q8_0(super::isa(), xr, br)
                });
                self.d8.clear();
                self.d8.extend(self.q8_0.iter().map(|b| f16_to_f32(b.d)));
                self.sum8.clear();
                self.sum8.extend(
                    self.q8_0
                        .iter()
                        .map(|b| b.qs.iter().map(|&q| q as i32).sum::<i32>()),
                );
                if super::Isa::Avx512.supported() {
                    self.fill_pairs();
                }
            }
            ActType::Q8_1 => {
                self.q8_1.resize(x.len() / 32, BlockQ8_1::default());
                act::per_row(x, cols, &mut self.q8_1, 32, act::quantize_row_q8_1);
                self.d8.clear();
                self.d8.extend(self.q8_1.iter().map(|b| f16_to_f32(b.d)));
                self.s8.clear();
                self.s8.extend(self.q8_1.iter().map(|b| f16_to_f32(b.s)));
            }
            ActType::Q8K => {
                self.q8k.resize(x.len() / QK_K, BlockQ8K::default());
                act::per_row(x, cols, &mut self.q8k, QK_K, |xr, br| {
                    super::quantize_row_q8_k(super::isa(), xr, br)
                });
            }
        }
    }

    /// Rows `rows` of `src`, in that order (a batch's rows routed to one expert): the same
    /// buffers `quantize` gives on those rows of its input, since every format is per row.
    pub fn gather(&mut self, src: &ActBuf, rows: &[usize]) {
        fn take<T: Copy>(dst: &mut Vec<T>, src: &[T], per_row: usize, rows: &[usize]) {
            dst.clear();
            for &r in rows {
                dst.extend_from_slice(&src[r * per_row..(r + 1) * per_row]);
            }
        }
        let ty = src.ty.expect("ActBuf::gather from an unquantized buffer");
        assert!(
            rows.iter().all(|&r| r < src.rows),
            "ActBuf::gather: row out of range"
        );
        (self.ty, self.cols, self.rows) = (Some(ty), src.cols, rows.len());
        let c = src.cols;
        match ty {
            ActType::F32 => take(&mut self.f32, &src.f32, c, rows),
            ActType::Bf16 => take(&mut self.bf16, &src.bf16, c, rows),
            ActType::Q8_0 => {
                take(&mut self.q8_0, &src.q8_0, c / 32, rows);
                take(&mut self.d8, &src.d8, c / 32, rows);
                take(&mut self.sum8, &src.sum8, c / 32, rows);
                // `quantize` fills the pair layout exactly when the CPU has AVX-512.
                let pairs = if src.pair_q.is_empty() {
                    0
                } else {
                    (c / 32).div_ceil(2)
                };
                take(&mut self.pair_q, &src.pair_q, pairs * 64, rows);
                take(&mut self.pair_d, &src.pair_d, pairs * 16, rows);
                take(&mut self.pair_s, &src.pair_s, pairs * 16, rows);
            }
            ActType::Q8_1 => {
                take(&mut self.q8_1, &src.q8_1, c / 32, rows);
                take(&mut self.d8, &src.d8, c / 32, rows);
                take(&mut self.s8, &src.s8, c / 32, rows);
            }
            ActType::Q8K => take(&mut self.q8k, &src.q8k, c / QK_K, rows),
        }
    }

    pub fn act_type(&self) -> Option<ActType> {
        self.ty
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Rows quantized by the last `quantize` call.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i` of the last `quantize` call.
    pub fn row(&self, i: usize) -> ActRow<'_> {
        let c = self.cols;
        match self.ty.expect("ActBuf::row before quantize") {
            ActType::F32 => ActRow::F32(&self.f32[i * c..(i + 1) * c]),
            ActType::Bf16 => ActRow::Bf16(&self.bf16[i * c..(i + 1) * c]),
            ActType::Q8_0 => ActRow::Q8_0(&self.q8_0[i * c / 32..(i + 1) * c / 32]),
            ActType::Q8_1 => ActRow::Q8_1(&self.q8_1[i * c / 32..(i + 1) * c / 32]),
            ActType::Q8K => ActRow::Q8K(&self.q8k[i * c / QK_K..(i + 1) * c / QK_K]),
        }
    }
}
