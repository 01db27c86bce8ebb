use super::*;
use std::time::Instant;

/// Deterministic values in [-1, 1).
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[test]
fn reading_the_checkpoint_equals_stepping_in_place() {
    let (dk, dv) = (16, 8);
    let s0 = noise(dk * dv, 1);
    let (q, k, v) = (noise(dk, 2), noise(dk, 3), noise(dv, 4));
    let mut kv = vec![0.0; dv];
    let (mut a, mut oa) = (s0.clone(), vec![0.0; dv]);
    delta_step(None, &mut a, &q, &k, &v, 0.7, 0.9, &mut kv, &mut oa);
    let (mut b, mut ob) = (vec![f32::NAN; dk * dv], vec![0.0; dv]);
    delta_step(Some(&s0), &mut b, &q, &k, &v, 0.7, 0.9, &mut kv, &mut ob);
    assert_eq!(a, b);
    assert_eq!(oa, ob);
}

/// A layer of `dims` whose projections are dummies (the recurrence never reads them).
fn layer(dims: LinearAttnConfig) -> GatedDeltaNet {
    let dummy = || WeightMatrix::from_f32(1, 1, &[0.0]);
    let nv = dims.n_v_heads;
    let w = DeltaNetWeights {
        proj: QkvzProj::Grouped(dummy()),
        ba: dummy(),
        conv: noise(dims.conv_dim() * dims.conv_kernel, 5),
        dt_bias: noise(nv, 6),
        a: noise(nv, 7).iter().map(|x| -1.0 - x.abs()).collect(),
        norm: vec![1.0; dims.v_head_dim],
        out: dummy(),
    };
    GatedDeltaNet::new(dims, 1e-6, w)
}

/// Seconds per call of `f`: the best of 7 rounds of `reps` calls (the least disturbed by
/// whatever else runs on the machine).
fn seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// What a rollback costs at Qwen3-Next-80B's sizes (32 value heads of 128 × 128, 16 key
/// heads, conv 4), one layer, one thread: replaying a position (what this design pays per
/// accepted position after a rejected draft) against copying the state once (what a
/// per-position checkpoint pays for every verified row, rejected or not). Run by hand:
/// `cargo test --release -p ferrox-models replay_vs_checkpoint -- --ignored --nocapture`.
#[test]
#[ignore = "timing, run by hand"]
fn replay_vs_checkpoint_cost() {
    pool::set_threads(1);
    let dims = LinearAttnConfig {
        conv_kernel: 4,
        n_k_heads: 16,
        n_v_heads: 32,
        k_head_dim: 128,
        v_head_dim: 128,
    };
    let l = layer(dims);
    let mut cache = l.state().new_cache();
    let (cd, nv) = (dims.conv_dim(), dims.n_v_heads);
    let m = 8;
    for p in 0..m {
        cache.append(&noise(cd, 10 + p as u64), &noise(2 * nv, 100 + p as u64));
    }
    let mut rec = RecScratch::default();
    let mut out = vec![0.0; m * dims.value_dim()];
    let mut st = cache.recurrent(dims.state_len());
    st.checkpoint.fill(0.0);
    *st.checkpoint_at = Some(0);
    let replay = seconds(20, || l.steps(&mut st, 0, m, &mut [], &mut rec)) / m as f64;
    let forward = seconds(20, || l.steps(&mut st, 0, m, &mut out, &mut rec)) / m as f64;
    let first = seconds(100, || l.steps(&mut st, 0, 1, &mut out, &mut rec));
    let (src, dst) = (st.checkpoint.clone(), &mut *st.state);
    let copy = seconds(100, || dst.copy_from_slice(&src));
    eprintln!(
        "per layer and position: replay {:.1} µs, forward step {:.1} µs, first (out-of-place) \
         step {:.1} µs, state copy ({} KiB) {:.1} µs",
        replay * 1e6,
        forward * 1e6,
        first * 1e6,
        dims.state_len() * 4 / 1024,
        copy * 1e6
    );
}
