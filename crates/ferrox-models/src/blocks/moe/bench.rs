//! Speed of one MoE layer shaped like GLM-4.5-Air (hidden 4096, 128 experts, 8 active + 1
//! shared, expert FFN 1408) with Q4_K weights filled from random data (`down`, 1408 wide, in
//! Q5_0 as llama.cpp stores it), at a given batch size:
//! tokens/s and the weight bandwidth it implies (bytes of every expert the batch touched, read
//! once per forward). `ferrox bench` prints these rows.

use super::{MoeBlock, Routing};
use crate::blocks::GatedMlp;
use crate::config::{Activation, RouterScoring};
use ferrox_core::matmul::WeightMatrix;
use ferrox_core::quant::blocks::f32_to_f16;
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct MoeShape {
    pub hidden: usize,
    pub n_experts: usize,
    pub n_active: usize,
    pub n_shared: usize,
    pub expert_ffn: usize,
}

/// GLM-4.5-Air's MoE layer.
pub const GLM45_AIR: MoeShape = MoeShape {
    hidden: 4096,
    n_experts: 128,
    n_active: 8,
    n_shared: 1,
    expert_ffn: 1408,
};

#[derive(Debug, Clone, Copy)]
pub struct MoeBenchRow {
    pub batch: usize,
    pub tokens_per_s: f64,
    pub gb_per_s: f64,
    /// Distinct routed experts the batch used (per forward, averaged).
    pub experts_touched: f64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `rows x cols` Q4_K matrix of random blocks with small finite scales. A width that is not a
/// multiple of 256 (the expert FFN's 1408 feeding `down`) gets Q5_0, as llama.cpp's quantizer
/// falls back for Q4_K.
fn random_q4k(rows: usize, cols: usize, rng: &mut Rng) -> WeightMatrix {
    let ty = if cols.is_multiple_of(256) {
        GgmlType::Q4K
    } else {
        GgmlType::Q5_0
    };
    let (block_elems, block_bytes) = ty.block_layout();
    let n_blocks = rows * cols / block_elems;
    let mut bytes = vec![0u8; n_blocks * block_bytes];
    for chunk in bytes.chunks_mut(8) {
        let r = rng.next().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    for b in bytes.chunks_mut(block_bytes) {
        b[..2].copy_from_slice(&f32_to_f16(0.002 + 0.002 * rng.unit()));
        if ty == GgmlType::Q4K {
            b[2..4].copy_from_slice(&f32_to_f16(0.002 * rng.unit()));
        }
    }
    // Interleaved as a loaded model's experts are (where the CPU has the kernels).
    WeightMatrix::new(ty, rows, cols, Bytes::from_vec(bytes))
        .expect("block-aligned shape")
        .interleave()
}

fn random_f32(rows: usize, cols: usize, rng: &mut Rng) -> WeightMatrix {
    let v: Vec<f32> = (0..rows * cols).map(|_| rng.unit() - 0.5).collect();
    WeightMatrix::from_f32(rows, cols, &v)
}

/// A random layer of `shape` (router in f32, experts in Q4_K).
pub fn random_layer(shape: MoeShape, seed: u64) -> MoeBlock {
    let mut rng = Rng(seed);
    let (d, f) = (shape.hidden, shape.expert_ffn);
    let mut expert = |f: usize| {
        GatedMlp::new(
            random_q4k(f, d, &mut rng),
            random_q4k(f, d, &mut rng),
            random_q4k(d, f, &mut rng),
            Activation::Silu,
        )
    };
    let experts = (0..shape.n_experts).map(|_| expert(f)).collect();
    let shared = (shape.n_shared > 0).then(|| expert(f * shape.n_shared));
    MoeBlock {
        router_bias: None,
        router: Some(random_f32(shape.n_experts, d, &mut rng)),
        correction_bias: Some(vec![0.0; shape.n_experts]),
        experts,
        shared,
        shared_gate: None,
        routing: Routing {
            scoring: RouterScoring::Sigmoid,
            n_active: shape.n_active,
            n_group: 1,
            topk_group: 1,
            norm_topk_prob: true,
            routed_scaling_factor: 1.0,
        },
        remote: None,
        scratch: Default::default(),
    }
}

/// Times `forward` on `batch` random rows for about `seconds` (at least 2 runs after a warm-up).
pub fn bench(layer: &MoeBlock, batch: usize, seconds: f64) -> MoeBenchRow {
    let d = layer.hidden_dim();
    let mut rng = Rng(batch as u64 + 7);
    let expert_bytes = layer.experts[0].gate.bytes().len()
        + layer.experts[0].up.bytes().len()
        + layer.experts[0].down.bytes().len();
    let shared_bytes = layer.shared.as_ref().map_or(0, |s| {
        s.gate.bytes().len() + s.up.bytes().len() + s.down.bytes().len()
    });
    let router_bytes = layer.router.as_ref().map_or(0, |r| r.bytes().len());
    let mut out = vec![0f32; batch * d];
    let (mut runs, mut tokens, mut bytes, mut touched) = (0usize, 0usize, 0f64, 0usize);
    let mut elapsed = 0f64;
    let mut warm = false;
    while !warm || runs < 2 || elapsed < seconds {
        let x: Vec<f32> = (0..batch * d).map(|_| rng.unit() - 0.5).collect();
        let used = layer.experts_used(&x, batch);
        let t = Instant::now();
        layer.forward_rows(&x, batch, &mut out);
        let dt = t.elapsed().as_secs_f64();
        if !warm {
            warm = true;
            continue;
        }
        runs += 1;
        elapsed += dt;
        tokens += batch;
        touched += used;
        bytes += (used * expert_bytes + shared_bytes + router_bytes) as f64;
    }
    MoeBenchRow {
        batch,
        tokens_per_s: tokens as f64 / elapsed,
        gb_per_s: bytes / elapsed / 1e9,
        experts_touched: touched as f64 / runs as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_random_q4k_layer_runs_and_reports() {
        let shape = MoeShape {
            hidden: 256,
            n_experts: 8,
            n_active: 2,
            n_shared: 1,
            expert_ffn: 288,
        };
        let layer = random_layer(shape, 1);
        let row = bench(&layer, 4, 0.0);
        assert!(row.tokens_per_s > 0.0 && row.gb_per_s > 0.0);
        assert!((2.0..=8.0).contains(&row.experts_touched));
        let mut y = vec![0f32; 256];
        layer.forward_rows(&vec![0.1; 256], 1, &mut y);
        assert!(y.iter().all(|v| v.is_finite()));
    }
}
