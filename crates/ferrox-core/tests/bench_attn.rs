//! Time of one decode step's attention (`attend_rows`, one query row) per KV head at a given
//! depth, on the 1.5B's shape (head dim 128, 6 query heads per KV head, 2 KV heads), for each
//! cache type. Ignored by default:
//! `cargo test --release -p ferrox-core --test bench_attn -- --ignored --nocapture`.
//! Cycles through [`LAYERS`] caches so K/V come from DRAM, as they do across a model's layers.

use ferrox_core::cache::{CacheFormat, KvCache, KvType};
use ferrox_core::kernels::{attend_rows, FlashScratch, RowBlock, Scoring, TypedKv};
use std::time::Instant;

const LAYERS: usize = 28;
const NKV: usize = 2;
const D: usize = 128;
const G: usize = 6;

fn rnd(seed: &mut u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn bench(ty: KvType, depth: usize, rows: usize, layers: usize, parallel: bool, bf16: bool) {
    let mut seed = 7u64;
    let caches: Vec<KvCache> = (0..layers)
        .map(|_| {
            let mut c = KvCache::new(NKV, D);
            let layout = ferrox_core::kernels::key_layout(ty, D);
            c.set_format(CacheFormat::uniform(ty), layout).unwrap();
            for _ in 0..depth + rows {
                let (k, v) = (rnd(&mut seed, NKV * D), rnd(&mut seed, NKV * D));
                c.append(&k, &v);
            }
            c
        })
        .collect();
    let q = rnd(&mut seed, rows * NKV * G * D);
    let how = Scoring {
        bf16,
        ..Scoring::scaled(1.0 / (D as f32).sqrt())
    };
    // One KV head's calls over every layer, as one thread of a decode step makes them.
    let head = |h: usize, out: &mut [f32], sc: &mut FlashScratch| {
        for c in &caches {
            let blk = RowBlock {
                q: &q[h * G * D..],
                q_stride: NKV * G * D,
                rows,
                pos: depth,
                g: G,
                window: None,
            };
            let kv = TypedKv {
                keys: c.keys_view(),
                key_layout: c.key_layout(),
                values: c.values_view(),
                stride: NKV * D,
                col: h * D,
                dim: D,
            };
            attend_rows(&blk, kv, how, sc, &mut out[h * G * D..]);
        }
    };
    let mut times = Vec::new();
    // Enough calls per timing for a profile to see the kernel rather than the set-up.
    let reps = if layers == 1 { 2000 } else { 1 };
    for rep in 0..12 {
        let t = Instant::now();
        if parallel {
            // Each KV head on its own thread, as the decoder's (row, KV head) tasks run.
            std::thread::scope(|s| {
                for h in 0..NKV {
                    let head = &head;
                    s.spawn(move || {
                        let mut out = vec![0f32; rows * NKV * G * D];
                        let mut sc = FlashScratch::default();
                        for _ in 0..reps {
                            head(h, &mut out, &mut sc);
                        }
                    });
                }
            });
        } else {
            let mut out = vec![0f32; q.len()];
            let mut sc = FlashScratch::default();
            for _ in 0..reps {
                for h in 0..NKV {
                    head(h, &mut out, &mut sc);
                }
            }
        }
        if rep >= 2 {
            let calls = reps * if parallel { layers } else { layers * NKV };
            times.push(t.elapsed().as_secs_f64() / calls as f64);
        }
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = times[times.len() / 2];
    let bytes = (depth + rows) * D * 2 * ty.row_bytes(D) / D;
    println!(
        "{:>5}{} depth {depth:>6} rows {rows:>3} layers {layers:>2}{}: {:8.1} µs per {}, {:6.1} GB/s of K+V",
        ty.name(),
        if bf16 { " bf16" } else { "" },
        if parallel { " ∥" } else { "" },
        med * 1e6,
        if parallel { "layer (heads on 2 threads)" } else { "(KV head, call)" },
        bytes as f64 * if parallel { NKV as f64 } else { 1.0 } / med / 1e9
    );
}

#[test]
#[ignore]
fn decode_attention() {
    for depth in [4096, 16384] {
        for ty in [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0] {
            for bf16 in [false, true] {
                bench(ty, depth, 1, LAYERS, false, bf16);
                bench(ty, depth, 1, LAYERS, true, bf16);
            }
        }
    }
}

/// Cache-resident (one layer, 512 keys): the arithmetic alone.
#[test]
#[ignore]
fn decode_attention_resident() {
    for ty in [KvType::F32, KvType::F16, KvType::Bf16, KvType::Q8_0] {
        for bf16 in [false, true] {
            bench(ty, 512, 1, 1, false, bf16);
            bench(ty, 512, 1, 1, true, bf16);
        }
    }
}
