//! Gated feed-forward: `down(act(gate(x)) * up(x))` — SwiGLU (Shazeer 2020) with SiLU, GeGLU
//! with GELU-tanh (Gemma).

use super::FfnBlock;
use crate::config::Activation;
use ferrox_core::kernels::glu::{glu, Glu};
use ferrox_core::matmul::WeightMatrix;
use std::sync::Mutex;

pub struct GatedMlp {
    pub gate: WeightMatrix,
    pub up: WeightMatrix,
    pub down: WeightMatrix,
    pub act: Activation,
    scratch: Mutex<(Vec<f32>, Vec<f32>)>,
}

impl GatedMlp {
    pub fn new(gate: WeightMatrix, up: WeightMatrix, down: WeightMatrix, act: Activation) -> Self {
        GatedMlp {
            gate,
            up,
            down,
            act,
            scratch: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    pub fn ffn_dim(&self) -> usize {
        self.gate.rows()
    }
}

impl FfnBlock for GatedMlp {
    fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) {
        let f = self.ffn_dim();
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (g, u) = &mut *guard;
        if g.len() < n * f {
            g.resize(n * f, 0.0);
            u.resize(n * f, 0.0);
        }
        let (g, u) = (&mut g[..n * f], &mut u[..n * f]);
        self.gate.gemm(x, n, g);
        self.up.gemm(x, n, u);
        let kind = match self.act {
            Activation::Silu => Glu::Silu,
            Activation::GeluTanh => Glu::GeluTanh,
        };
        glu(kind, g, u, n);
        self.down.gemm(g, n, out);
    }
}
