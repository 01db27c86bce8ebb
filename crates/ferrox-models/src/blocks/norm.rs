//! RMSNorm (Zhang & Sennrich 2019): `x / sqrt(mean(x²) + eps) * w`. Gemma's `(1 + w)` form is
//! folded into the weight at load time.

use super::Real;

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
        out.copy_from_slice(x);
        self.forward_inplace(out);
    }

    /// In place, each row of `dim()`.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        rms_norm_rows::<f64>(x, &self.weight, self.eps);
    }
}

/// Normalizes each row of `w.len()` of `x` in place, summing squares in `A`: f64 for
/// [`RmsNorm`]; f32 for MLA's latent norms (so their outputs stay as they were).
pub fn rms_norm_rows<A: Real>(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let ss: A = xr.iter().map(|&v| A::from_f32(v) * A::from_f32(v)).sum();
        let mean = (ss / A::from_usize(xr.len())).to_f32();
        let s = 1.0 / (mean + eps).sqrt();
        for (v, &w) in xr.iter_mut().zip(w) {
            *v = *v * s * w;
        }
    }
}
