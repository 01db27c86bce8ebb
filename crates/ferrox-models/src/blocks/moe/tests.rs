//! Tests of the MoE block: routing, the grouped and per-expert paths, mixed experts.

use super::*;
use crate::config::Activation;

fn mat(rows: usize, cols: usize, seed: u32) -> WeightMatrix {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let h = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(2_654_435_761);
            ((h >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 0.6
        })
        .collect();
    WeightMatrix::from_f32(rows, cols, &v)
}

fn expert(d: usize, f: usize, seed: u32) -> Expert {
    GatedMlp::new(
        mat(f, d, seed),
        mat(f, d, seed + 1),
        mat(d, f, seed + 2),
        Activation::Silu,
    )
}

fn block(scoring: RouterScoring, n_group: usize, shared: bool) -> MoeBlock {
    let (d, f, e) = (12, 8, 8);
    MoeBlock {
        router: Some(mat(e, d, 99)),
        router_bias: None,
        correction_bias: (scoring == RouterScoring::Sigmoid)
            .then(|| (0..e).map(|i| (i as f32 - 3.5) * 0.05).collect()),
        experts: (0..e).map(|i| expert(d, f, 10 * i as u32)).collect(),
        shared: shared.then(|| expert(d, 2 * f, 1000)),
        shared_gate: None,
        routing: Routing {
            scoring,
            n_active: 3,
            n_group,
            topk_group: 2.min(n_group),
            norm_topk_prob: true,
            routed_scaling_factor: 2.5,
        },
        remote: None,
        scratch: Default::default(),
    }
}

/// Per-token reference: route, then run the chosen experts one token at a time.
fn reference(b: &MoeBlock, x: &[f32], n: usize) -> Vec<f32> {
    let d = b.hidden_dim();
    let e = b.experts.len();
    let mut out = vec![0f32; n * d];
    for t in 0..n {
        let xt = &x[t * d..(t + 1) * d];
        let mut logits = vec![0f32; e];
        b.router.as_ref().unwrap().gemv(xt, &mut logits);
        for (ei, w) in b.route(&logits) {
            let mut y = vec![0f32; d];
            b.experts[ei].forward(xt, 1, &mut y);
            for i in 0..d {
                out[t * d + i] += w * y[i];
            }
        }
        if let Some(s) = &b.shared {
            let mut y = vec![0f32; d];
            s.forward(xt, 1, &mut y);
            for i in 0..d {
                out[t * d + i] += y[i];
            }
        }
    }
    out
}

/// The block's output for `n` rows of 12 at once is within 1e-5 of the per-token reference
/// (each value, so a NaN fails too), and row `t` run alone gives the same bits (batch
/// invariance).
fn assert_batch_matches_reference(b: &MoeBlock, x: &[f32], n: usize, t: usize, what: &str) {
    let mut out = vec![0f32; n * 12];
    b.forward_rows(x, n, &mut out);
    let want = reference(b, x, n);
    for (i, (a, w)) in out.iter().zip(&want).enumerate() {
        assert!(
            (a - w).abs() < 1e-5,
            "{what}: value {i} is {a}, reference {w}"
        );
    }
    let row = t * 12..(t + 1) * 12;
    let mut one = vec![0f32; 12];
    b.forward_rows(&x[row.clone()], 1, &mut one);
    assert_eq!(&out[row], &one[..], "{what}");
}

#[test]
fn grouped_batch_matches_per_token_reference() {
    for (scoring, groups, shared) in [
        (RouterScoring::Softmax, 1, false),
        (RouterScoring::Sigmoid, 4, true),
    ] {
        let b = block(scoring, groups, shared);
        let n = 7;
        let x: Vec<f32> = (0..n * 12)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
            .collect();
        assert_batch_matches_reference(&b, &x, n, 3, &format!("{scoring:?}"));
    }
}

/// Runs `forward_rows` and, on the same routing, the per-expert path.
fn grouped_and_each(b: &MoeBlock, x: &[f32], n: usize) -> (Vec<f32>, Vec<f32>) {
    let d = b.hidden_dim();
    let mut grouped = vec![0f32; n * d];
    b.forward_rows(x, n, &mut grouped);
    let mut logits = vec![0f32; n * b.experts.len()];
    b.router.as_ref().unwrap().gemm(x, n, &mut logits);
    let mut per_expert = vec![Vec::new(); b.experts.len()];
    for t in 0..n {
        for (e, w) in b.route(&logits[t * b.experts.len()..(t + 1) * b.experts.len()]) {
            per_expert[e].push((t, w));
        }
    }
    let mut each = vec![0f32; n * d];
    b.forward_each(x, &per_expert, &mut Vec::new(), &mut Vec::new(), &mut each);
    if let Some(s) = &b.shared {
        let mut y = vec![0f32; n * d];
        s.forward(x, n, &mut y);
        for (o, v) in each.iter_mut().zip(&y) {
            *o += 1.0 * v;
        }
    }
    (grouped, each)
}

/// The grouped path gives the per-expert path's bits, on f32 experts and on a quantized
/// layer (Q4_K gate/up, Q5_0 down, interleaved where the CPU has the kernels).
#[test]
fn grouped_path_equals_per_expert_path() {
    use crate::blocks::moe::bench::{random_layer, MoeShape};
    let quantized = random_layer(
        MoeShape {
            hidden: 256,
            n_experts: 8,
            n_active: 3,
            n_shared: 1,
            expert_ffn: 96,
        },
        3,
    );
    let f32_block = block(RouterScoring::Sigmoid, 4, true);
    for b in [&f32_block, &quantized] {
        assert!(super::grouped::uniform(&b.experts));
        let (d, n) = (b.hidden_dim(), 11);
        let x: Vec<f32> = (0..n * d)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0)
            .collect();
        let (grouped, each) = grouped_and_each(b, &x, n);
        assert_eq!(grouped, each);
    }
}

/// Experts of different widths are not uniform: they run one by one, with the same result
/// as the per-token reference and the same batch invariance.
#[test]
fn mixed_experts_run_one_by_one() {
    let mut b = block(RouterScoring::Softmax, 1, false);
    b.experts[5] = expert(12, 16, 555);
    assert!(!super::grouped::uniform(&b.experts));
    let n = 7;
    let x: Vec<f32> = (0..n * 12)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
        .collect();
    assert_batch_matches_reference(&b, &x, n, 2, "mixed widths");
}

#[test]
fn bias_selects_but_does_not_weight() {
    let r = Routing {
        scoring: RouterScoring::Sigmoid,
        n_active: 2,
        n_group: 1,
        topk_group: 1,
        norm_topk_prob: false,
        routed_scaling_factor: 1.0,
    };
    let logits = [2.0, 1.0, 0.0, -1.0];
    let bias = [0.0, 0.0, 0.0, 10.0];
    let got = route(&r, Some(&bias), &logits);
    assert_eq!(got[0].0, 3);
    assert!((got[0].1 - 1.0 / (1.0 + 1f32.exp())).abs() < 1e-7);
    assert_eq!(got[1].0, 0);
}

#[test]
fn groups_limit_selection() {
    // Two groups of two; the best single expert is in group 1 but group 0's pair is better.
    let r = Routing {
        scoring: RouterScoring::Sigmoid,
        n_active: 2,
        n_group: 2,
        topk_group: 1,
        norm_topk_prob: true,
        routed_scaling_factor: 2.0,
    };
    let got = route(&r, None, &[1.0, 1.0, 3.0, -5.0]);
    let mut ids: Vec<usize> = got.iter().map(|c| c.0).collect();
    ids.sort();
    assert_eq!(ids, vec![0, 1]);
    let s: f32 = got.iter().map(|c| c.1).sum();
    assert!((s - 2.0).abs() < 1e-6);
}

#[test]
fn dense_is_one_expert() {
    let e = expert(12, 8, 5);
    let b = MoeBlock::dense(expert(12, 8, 5));
    let x: Vec<f32> = (0..24).map(|i| i as f32 / 10.0 - 1.0).collect();
    let mut a = vec![0f32; 24];
    let mut want = vec![0f32; 24];
    b.forward_rows(&x, 2, &mut a);
    e.forward(&x, 2, &mut want);
    assert_eq!(a, want);
}

#[test]
fn routed_counts_add_up_each_tokens_experts() {
    let b = block(RouterScoring::Softmax, 1, false);
    assert!(b.routed_counts().is_empty());
    let (d, n) = (12, 5);
    let x: Vec<f32> = (0..n * d).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut out = vec![0f32; n * d];
    b.forward_rows(&x, n, &mut out);
    b.forward_rows(&x[..d], 1, &mut out[..d]);
    let counts = b.routed_counts();
    assert_eq!(counts.len(), 8);
    let k = b.routing.n_active as u64;
    assert_eq!(counts.iter().sum::<u64>(), (n as u64 + 1) * k);
    // The token seen twice counts twice for each of its experts.
    for (e, _) in b.route(&{
        let mut l = vec![0f32; 8];
        b.router.as_ref().unwrap().gemm(&x[..d], 1, &mut l);
        l
    }) {
        assert!(counts[e] >= 2, "expert {e}");
    }
}
