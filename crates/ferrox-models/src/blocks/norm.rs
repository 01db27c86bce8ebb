//! RMSNorm (Zhang & Sennrich 2019): `x / sqrt(mean(x²) + eps) * w`. Gemma's `(1 + w)` form is
//! folded into the weight at load time.

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
        let d = self.dim();
        for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            let s = inv_rms(xr, self.eps);
            for ((o, &v), &w) in or.iter_mut().zip(xr).zip(&self.weight) {
                *o = v * s * w;
            }
        }
    }

    /// In place, each row of `dim()`.
    pub fn forward_inplace(&self, x: &mut [f32]) {
        let d = self.dim();
        for xr in x.chunks_exact_mut(d) {
            let s = inv_rms(xr, self.eps);
            for (v, &w) in xr.iter_mut().zip(&self.weight) {
                *v = *v * s * w;
            }
        }
    }
}

fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let mean = (ss / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}
