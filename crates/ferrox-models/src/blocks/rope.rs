//! Rotary position embedding (Su et al. 2021, RoFormer), with the frequency rules of
//! transformers' `ROPE_INIT_FUNCTIONS`: default, linear, llama3 and YaRN (DeepSeek-V3).
//! Rotates the first `rotary_dim` dims of each head, either as two halves (NeoX,
//! `rotate_half`) or as adjacent pairs (GPT-J / interleaved).
//!
//! LongRoPE (Phi-3) has two per-pair factor sets. transformers picks one per forward call by
//! the call's last position (`seq_len > original_max_position_embeddings`: long), llama.cpp
//! one per context by its size (`n_ctx_seq > n_ctx_orig_yarn`). Here the choice is by each
//! position: short below the original context, long from there on. That is transformers'
//! choice whenever tokens arrive one at a time (generation) and for any prompt within the
//! original context, keeps batched and token-by-token rows identical, and differs from
//! transformers only for a single prompt forward that crosses the original context (there
//! transformers rotates the whole prompt with the long factors).

use super::Real;
use crate::config::{RopeConfig, RopeScaling};

/// YaRN's magnitude correction for a context stretched `scale` times, `0.1·m·ln(scale) + 1`
/// (transformers' `yarn_get_mscale`); 1 when not stretched.
pub fn yarn_mscale<F: Real>(scale: F, m: F) -> F {
    if scale <= F::ONE {
        F::ONE
    } else {
        F::TENTH * m * scale.ln() + F::ONE
    }
}

#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f32>,
    /// LongRoPE: from this position on, these frequencies instead of `inv_freq`.
    long: Option<(usize, Vec<f32>)>,
    rotary_dim: usize,
    interleaved: bool,
    /// Multiplies cos and sin (YaRN's attention factor; 1 otherwise).
    pub attn_factor: f32,
}

impl Rope {
    pub fn new(cfg: &RopeConfig) -> Self {
        let d = cfg.rotary_dim;
        let base: Vec<f64> = (0..d / 2)
            .map(|i| 1.0 / (cfg.theta as f64).powf((2 * i) as f64 / d as f64))
            .collect();
        let mut attn_factor = 1.0f32;
        let inv: Vec<f64> = match cfg.scaling {
            RopeScaling::None => base,
            RopeScaling::Factors { attn_factor: a, .. } => {
                attn_factor = a;
                base
            }
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor as f64).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let (factor, lo, hi) = (
                    factor as f64,
                    low_freq_factor as f64,
                    high_freq_factor as f64,
                );
                let old = original_max_position as f64;
                let low_wavelen = old / lo;
                let high_wavelen = old / hi;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - lo) / (hi - lo);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn {
                factor,
                original_max_position,
                beta_fast,
                beta_slow,
                mscale,
                mscale_all_dim,
                truncate,
            } => {
                let factor = factor as f64;
                attn_factor = if mscale != 0.0 && mscale_all_dim != 0.0 {
                    (yarn_mscale(factor, mscale as f64)
                        / yarn_mscale(factor, mscale_all_dim as f64)) as f32
                } else {
                    yarn_mscale(factor, 1.0) as f32
                };
                let theta = cfg.theta as f64;
                let dim = d as f64;
                let correction = |rot: f64| {
                    dim * (original_max_position as f64 / (rot * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * theta.ln())
                };
                let (low, high) = (correction(beta_fast as f64), correction(beta_slow as f64));
                let (low, high) = if truncate {
                    (low.floor(), high.ceil())
                } else {
                    (low, high)
                };
                let (low, high) = (low.max(0.0), high.min(dim - 1.0));
                let high = if low == high { high + 0.001 } else { high };
                base.iter()
                    .enumerate()
                    .map(|(i, &f)| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let extrapolation = 1.0 - ramp;
                        (f / factor) * (1.0 - extrapolation) + f * extrapolation
                    })
                    .collect()
            }
        };
        Rope {
            inv_freq: inv.iter().map(|&f| f as f32).collect(),
            long: None,
            rotary_dim: d,
            interleaved: cfg.interleaved,
            attn_factor,
        }
    }

    /// Divides each rotated pair's frequency by its factor: llama.cpp's `rope_freqs` tensor,
    /// in which the converter stores Llama 3.x frequency scaling. `None` when the factor count
    /// is not the pair count.
    pub fn with_freq_factors(mut self, factors: &[f32]) -> Option<Self> {
        if factors.len() != self.inv_freq.len() {
            return None;
        }
        for (f, &k) in self.inv_freq.iter_mut().zip(factors) {
            *f /= k;
        }
        Some(self)
    }

    /// LongRoPE's long factors: from position `from` on, each pair's frequency divided by its
    /// long factor. Divides the frequencies as they stand, so call it before
    /// [`with_freq_factors`](Self::with_freq_factors) applies the short ones. `None` when the
    /// factor count is not the pair count.
    pub fn with_long_factors(mut self, factors: &[f32], from: usize) -> Option<Self> {
        if factors.len() != self.inv_freq.len() {
            return None;
        }
        let long = self.inv_freq.iter().zip(factors).map(|(f, k)| f / k);
        self.long = Some((from, long.collect()));
        Some(self)
    }

    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// Rotates `n_heads` heads of `head_dim` laid out contiguously in `x`, at position `pos`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, head_dim: usize, pos: usize) {
        let half = self.rotary_dim / 2;
        let p = pos as f32;
        let inv_freq = match &self.long {
            Some((from, long)) if pos >= *from => long,
            _ => &self.inv_freq,
        };
        for (i, &f) in inv_freq.iter().enumerate() {
            let (s, c) = (p * f).sin_cos();
            let (s, c) = (s * self.attn_factor, c * self.attn_factor);
            for h in 0..n_heads {
                let head = &mut x[h * head_dim..(h + 1) * head_dim];
                let (a, b) = if self.interleaved {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (xa, xb) = (head[a], head[b]);
                head[a] = xa * c - xb * s;
                head[b] = xb * c + xa * s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotated(rope: &Rope, pos: usize) -> Vec<f32> {
        let mut x: Vec<f32> = (0..8).map(|i| 0.25 + i as f32).collect();
        rope.apply(&mut x, 1, 8, pos);
        x
    }

    /// Short factors below the original context, long ones from it on; both sets divide the
    /// unscaled frequencies.
    #[test]
    fn long_factors_from_the_original_context_on() {
        let cfg = RopeConfig {
            theta: 10_000.0,
            scaling: RopeScaling::Factors {
                attn_factor: 1.2,
                original_max_position: 32,
            },
            rotary_dim: 8,
            interleaved: false,
        };
        let (short, long) = ([1.0, 1.5, 2.0, 4.0], [2.0, 3.0, 5.0, 8.0]);
        let both = Rope::new(&cfg)
            .with_long_factors(&long, 32)
            .and_then(|r| r.with_freq_factors(&short))
            .unwrap();
        let only_short = Rope::new(&cfg).with_freq_factors(&short).unwrap();
        let only_long = Rope::new(&cfg).with_freq_factors(&long).unwrap();
        for pos in [0, 5, 31] {
            assert_eq!(rotated(&both, pos), rotated(&only_short, pos), "at {pos}");
        }
        for pos in [32, 33, 100] {
            assert_eq!(rotated(&both, pos), rotated(&only_long, pos), "at {pos}");
        }
        assert_ne!(rotated(&only_short, 40), rotated(&only_long, 40));
        assert!(Rope::new(&cfg).with_long_factors(&long[..3], 32).is_none());
    }
}
