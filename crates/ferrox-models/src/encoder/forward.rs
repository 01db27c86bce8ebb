//! The BERT forward pass over a packed batch (Hugging Face `modeling_bert.py`): the inputs'
//! tokens are rows of one matrix, so every product reads each weight once for the whole batch;
//! attention runs per input over its own rows only (bidirectional, no padding, no mask).

use ferrox_core::kernels::{attend_group, HeadKv, Scoring};
use ferrox_core::matmul::WeightMatrix;
use ferrox_core::pool;
use ferrox_tokenizer::wordpiece::Encoded;

use crate::arch::bert::BertConfig;
use crate::blocks::norm::LayerNorm;

/// `y = W x + b`.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub w: WeightMatrix,
    pub b: Vec<f32>,
}

impl Linear {
    /// `n` rows of `x` → `n` rows of `w.rows()`.
    pub fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        let mut y = vec![0f32; n * self.w.rows()];
        self.w.gemm(x, n, &mut y);
        for row in y.chunks_exact_mut(self.w.rows()) {
            row.iter_mut().zip(&self.b).for_each(|(v, &b)| *v += b);
        }
        y
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub out: Linear,
    pub attn_norm: LayerNorm,
    pub up: Linear,
    pub down: Linear,
    pub out_norm: LayerNorm,
}

/// Embedding tables and the blocks.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    pub tokens: WeightMatrix,
    pub positions: WeightMatrix,
    pub types: WeightMatrix,
    pub embd_norm: LayerNorm,
    pub layers: Vec<Layer>,
}

/// erf through erfc's Chebyshev fit (Numerical Recipes' `erfcc`, fractional error < 1.2e-7),
/// in f64.
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

/// BERT's GELU, the exact form: `x · Φ(x) = x/2 · (1 + erf(x/√2))`.
pub(crate) fn gelu_erf(x: &mut [f32]) {
    pool::for_each_chunk_mut(x, 1 << 14, |_, c| {
        for v in c {
            let x = *v as f64;
            *v = (0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32;
        }
    });
}

impl Body {
    /// Final hidden states `[Σ len, hidden]` of the packed inputs (each within the position
    /// table and the vocabulary: the caller checks).
    pub fn forward(&self, cfg: &BertConfig, inputs: &[Encoded]) -> Vec<f32> {
        let d = cfg.hidden;
        let spans = spans(inputs);
        let n = spans.last().map_or(0, |&(s, l)| s + l);
        let mut x = vec![0f32; n * d];
        let mut tmp = vec![0f32; d];
        let mut row = 0;
        for e in inputs {
            for (p, (&id, &ty)) in e.ids.iter().zip(&e.types).enumerate() {
                let r = &mut x[row * d..][..d];
                // The tables were checked to be float types with a kernel at load.
                let _ = self.tokens.dequantize_row(id, r);
                for (table, i) in [(&self.positions, p), (&self.types, ty as usize)] {
                    let _ = table.dequantize_row(i, &mut tmp);
                    r.iter_mut().zip(&tmp).for_each(|(a, &b)| *a += b);
                }
                row += 1;
            }
        }
        self.embd_norm.forward_inplace(&mut x);
        for l in &self.layers {
            layer(cfg, l, &mut x, n, &spans);
        }
        x
    }
}

/// `(first row, length)` of each input in the packed batch.
pub(crate) fn spans(inputs: &[Encoded]) -> Vec<(usize, usize)> {
    let mut start = 0;
    inputs
        .iter()
        .map(|e| {
            let s = (start, e.ids.len());
            start += e.ids.len();
            s
        })
        .collect()
}

fn layer(cfg: &BertConfig, l: &Layer, x: &mut [f32], n: usize, spans: &[(usize, usize)]) {
    let d = cfg.hidden;
    let (q, k, v) = (l.q.forward(x, n), l.k.forward(x, n), l.v.forward(x, n));
    let mut attn = vec![0f32; n * d];
    attend(cfg, &q, &k, &v, spans, &mut attn);
    let o = l.out.forward(&attn, n);
    x.iter_mut().zip(&o).for_each(|(a, &b)| *a += b);
    l.attn_norm.forward_inplace(x);
    let mut h = l.up.forward(x, n);
    gelu_erf(&mut h);
    let y = l.down.forward(&h, n);
    x.iter_mut().zip(&y).for_each(|(a, &b)| *a += b);
    l.out_norm.forward_inplace(x);
}

/// Every row attends to all rows of its own input, head by head.
fn attend(
    cfg: &BertConfig,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    spans: &[(usize, usize)],
    out: &mut [f32],
) {
    let (d, hd) = (cfg.hidden, cfg.head_dim());
    let mut owner = Vec::with_capacity(out.len() / d);
    for &(s, len) in spans {
        owner.extend(std::iter::repeat_n((s, len), len));
    }
    let longest = spans.iter().map(|s| s.1).max().unwrap_or(0);
    let how = Scoring::scaled(1.0 / (hd as f32).sqrt());
    const ROWS: usize = 8;
    pool::for_each_chunk_mut(out, ROWS * d, |c, chunk| {
        let mut scores = vec![0f32; longest];
        for (j, o) in chunk.chunks_exact_mut(d).enumerate() {
            let r = c * ROWS + j;
            let (start, len) = owner[r];
            for h in 0..cfg.heads {
                let kv = HeadKv {
                    keys: k,
                    values: v,
                    stride: d,
                    col: h * hd,
                    dim: hd,
                };
                let qh = &q[r * d + h * hd..][..hd];
                attend_group(
                    qh,
                    kv,
                    start,
                    how,
                    &mut scores[..len],
                    &mut o[h * hd..][..hd],
                );
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (-2.0, -0.995_322_265_0),
            (3.5, 0.999_999_256_9),
        ] {
            assert!((super::erf(x) - want).abs() < 2e-7, "erf({x})");
        }
    }
}
