//! Gated feed-forward: `down(act(gate(x)) * up(x))` — SwiGLU (Shazeer 2020) with SiLU, GeGLU
//! with GELU-tanh (Gemma), gpt-oss's clamped SwiGLU with biases on all three projections.

use super::{add_bias, FfnBlock};
use crate::config::Activation;
use ferrox_core::kernels::glu::{glu, Glu};
use ferrox_core::matmul::WeightMatrix;
use std::cell::RefCell;

pub struct GatedMlp {
    pub gate: WeightMatrix,
    pub up: WeightMatrix,
    pub down: WeightMatrix,
    pub act: Activation,
    /// Biases of the gate, up and down projections (gpt-oss's experts), or none.
    pub biases: Option<MlpBiases>,
}

pub struct MlpBiases {
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

thread_local! {
    /// Gate and up activations `[n, ffn_dim]`, shared by every layer on this thread.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

impl GatedMlp {
    pub fn new(gate: WeightMatrix, up: WeightMatrix, down: WeightMatrix, act: Activation) -> Self {
        GatedMlp {
            gate,
            up,
            down,
            act,
            biases: None,
        }
    }

    pub fn ffn_dim(&self) -> usize {
        self.gate.rows()
    }

    /// The gated activation kernel of `act`.
    pub fn glu_kind(&self) -> Glu {
        match self.act {
            Activation::Silu => Glu::Silu,
            Activation::GeluTanh => Glu::GeluTanh,
            Activation::SwigluOai { alpha, limit } => Glu::SwigluOai { alpha, limit },
        }
    }
}

impl FfnBlock for GatedMlp {
    fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) {
        let f = self.ffn_dim();
        super::with_scratch(&SCRATCH, |(g, u)| {
            if g.len() < n * f {
                g.resize(n * f, 0.0);
                u.resize(n * f, 0.0);
            }
            let (g, u) = (&mut g[..n * f], &mut u[..n * f]);
            self.gate.gemm(x, n, g);
            self.up.gemm(x, n, u);
            let b = self.biases.as_ref();
            add_bias(g, b.map(|b| &b.gate[..]));
            add_bias(u, b.map(|b| &b.up[..]));
            glu(self.glu_kind(), g, u, n);
            self.down.gemm(g, n, out);
            add_bias(out, b.map(|b| &b.down[..]));
        })
    }
}
