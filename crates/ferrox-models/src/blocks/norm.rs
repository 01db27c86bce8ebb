//! RMSNorm (Zhang & Sennrich 2019): `x / sqrt(mean(x²) + eps) * w`. Gemma's `(1 + w)` form is
//! folded into the weight at load time. LayerNorm (Ba et al. 2016) with bias for encoders.

use super::Real;
use ferrox_core::pool;

/// Elements per pool task of a long block's row-wise steps (norms, residual adds): each row
/// is computed as alone, so the split never changes a bit; 16 rows of a 4096-wide model. A
/// single piece (a decoded row) runs on the caller (`pool::for_each` with one task).
pub(crate) const PAR_ELEMS: usize = 1 << 16;

#[derive(Debug, Clone)]
pub struct RmsNorm {
    pub weight: Vec<f32>,
    pub eps: f32,
}

impl RmsNorm {
    /// `offset_one`: the checkpoint stores `w` for a `(1 + w)` norm (HF Gemma).
    pub fn new(mut weight: Vec<f32>, eps: f32, offset_one: bool) -> Self {
        if offset_one {
            for w in &mut weight {
                *w += 1.0;
            }
        }
        RmsNorm { weight, eps }
    }

    pub fn dim(&self) -> usize {
        self.weight.len()
    }

    /// Normalizes each row of `x` (rows of `dim()`) into `out`.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), out.len(), "RmsNorm::forward: shapes");
        let chunk = rows_chunk(self.dim());
        pool::for_each_chunk_mut(out, chunk, |i, o| {
            o.copy_from_slice(&x[i * chunk..][..o.len()]);
            norm_rows::<f64>(o, &self.weight, self.eps);
        });
    }

    /// In place, each row of `dim()`.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        rms_norm_rows::<f64>(x, &self.weight, self.eps);
    }
}

/// LayerNorm (Ba et al. 2016) with weight and bias, as BERT's post-norms: `(x - mean) /
/// sqrt(var + eps) * w + b` per row, mean and variance summed in f64.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
    pub eps: f32,
}

impl LayerNorm {
    /// In place, each row of `weight.len()`.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        let d = self.weight.len();
        pool::for_each_chunk_mut(x, rows_chunk(d), |_, c| {
            for row in c.chunks_exact_mut(d) {
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                let var = row
                    .iter()
                    .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                    .sum::<f64>()
                    / d as f64;
                let s = 1.0 / (var + self.eps as f64).sqrt();
                for ((v, &w), &b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                    *v = ((*v as f64 - mean) * s) as f32 * w + b;
                }
            }
        });
    }
}

/// Normalizes each row of `w.len()` of `x` in place, summing squares in `A`: f64 for
/// [`RmsNorm`]; f32 for MLA's latent norms (so their outputs stay as they were).
pub fn rms_norm_rows<A: Real>(x: &mut [f32], w: &[f32], eps: f32) {
    pool::for_each_chunk_mut(x, rows_chunk(w.len()), |_, c| norm_rows::<A>(c, w, eps));
}

/// Whole rows of `dim` in about [`PAR_ELEMS`] elements.
pub(crate) fn rows_chunk(dim: usize) -> usize {
    dim.max(1) * (PAR_ELEMS / dim.max(1)).max(1)
}

/// [`rms_norm_rows`] on the calling thread.
fn norm_rows<A: Real>(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let ss: A = xr.iter().map(|&v| A::from_f32(v) * A::from_f32(v)).sum();
        let mean = (ss / A::from_usize(xr.len())).to_f32();
        let s = 1.0 / (mean + eps).sqrt();
        for (v, &w) in xr.iter_mut().zip(w) {
            *v = *v * s * w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block long enough to be normalized in parallel pieces gives each row's bits alone.
    #[test]
    fn long_blocks_normalize_as_rows_alone() {
        let dim = 1536;
        let rows = 2 * PAR_ELEMS / dim + 3;
        let x: Vec<f32> = (0..rows * dim)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 97.0)
            .collect();
        let w: Vec<f32> = (0..dim).map(|i| 0.5 + (i % 13) as f32 / 8.0).collect();
        let norm = RmsNorm::new(w, 1e-6, false);
        let mut out = vec![0.0; rows * dim];
        norm.forward(&x, &mut out);
        let mut inplace = x.clone();
        norm.forward_inplace(&mut inplace);
        for (r, xr) in x.chunks_exact(dim).enumerate() {
            let mut alone = xr.to_vec();
            norm_rows::<f64>(&mut alone, &norm.weight, norm.eps);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out[r * dim..][..dim]), bits(&alone), "row {r}");
            assert_eq!(bits(&inplace[r * dim..][..dim]), bits(&alone), "row {r}");
        }
    }
}
