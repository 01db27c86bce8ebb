//! Throughput of `WeightMatrix::gemv` / `gemm` on the real models' shapes. Ignored by default:
//! `cargo test --release -p ferrox-core --test bench_matmul -- --ignored --nocapture`.
//! Each case cycles through enough copies of the matrix (≥ [`KNOBS`]`.total_mb`) that weights
//! come from DRAM. What runs is set by [`KNOBS`] (edit it to narrow a run).

use ferrox_core::matmul::WeightMatrix;
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

mod common;
use common::random_row;

/// What a run measures.
struct Knobs {
    /// Megabytes of matrix copies cycled through per case.
    total_mb: usize,
    /// Best single call instead of the mean (filters out preemption; cache-resident use).
    min: bool,
    /// Types to run (`["Q5_0"]`); empty runs every case.
    only: &'static [&'static str],
    /// Batch sizes; `None`: 1, 2, 4, 8 (1 for the vocabulary-sized matrix).
    batches: Option<&'static [usize]>,
    /// `Some("plain")` or `Some("x16")` (interleaved); `None` runs both, alternating.
    layout: Option<&'static str>,
}

const KNOBS: Knobs = Knobs {
    total_mb: 256,
    min: false,
    only: &[],
    batches: None,
    layout: None,
};

fn bench(ty: GgmlType, rows: usize, cols: usize, batches: &[usize], x16: bool) {
    let mut rng = StdRng::seed_from_u64(1);
    let proto: Vec<u8> = (0..rows.min(64))
        .flat_map(|_| random_row(&mut rng, ty, cols, false))
        .collect();
    let row_bytes = ty.row_bytes(cols).unwrap();
    let bytes = row_bytes * rows;
    let total_mb = KNOBS.total_mb;
    let copies = (total_mb << 20).div_ceil(bytes).max(1);
    let mats: Vec<WeightMatrix> = (0..copies)
        .map(|_| {
            let mut d = Vec::with_capacity(bytes);
            while d.len() < bytes {
                let take = (bytes - d.len()).min(proto.len());
                d.extend_from_slice(&proto[..take]);
            }
            let m = WeightMatrix::new(ty, rows, cols, Bytes::from_vec(d)).unwrap();
            if x16 {
                m.interleave()
            } else {
                m
            }
        })
        .collect();
    // The "x16" runs are the load-time layout: interleaved, or converted (`quant::convert`).
    if x16 && mats[0].bytes().len() == bytes && !mats[0].is_interleaved() {
        return;
    }
    let nmax = *batches.iter().max().unwrap();
    let x: Vec<f32> = (0..nmax * cols)
        .map(|_| rng.gen_range(-1.0f32..1.0))
        .collect();
    let mut y = vec![0f32; nmax * rows];
    let mut base = 0f64;
    for &n in batches {
        for m in &mats {
            m.gemm(&x[..n * cols], n, &mut y[..n * rows]);
        }
        let reps = (3 * (256 << 20) / (copies * bytes)).clamp(3, 200);
        let t = Instant::now();
        let cpu0 = cpu_seconds();
        for _ in 0..reps {
            for m in &mats {
                m.gemm(&x[..n * cols], n, &mut y[..n * rows]);
            }
        }
        let mut per = t.elapsed().as_secs_f64() / (reps * copies) as f64;
        if KNOBS.min {
            // Best single call: filters out preemption by other processes (cache-resident use).
            per = f64::MAX;
            for _ in 0..reps {
                for m in &mats {
                    let t1 = Instant::now();
                    m.gemm(&x[..n * cols], n, &mut y[..n * rows]);
                    per = per.min(t1.elapsed().as_secs_f64());
                }
            }
        }
        let t = Instant::now() - t.elapsed();
        if n == 1 {
            base = per;
        }
        let cpu = cpu_seconds() - cpu0;
        println!(
            "{:>5}{} {rows:>6}x{cols:<5} n={n:<2} {:>8.1} us  {:>6.2} GB/s  x{:.2} of n=1  (cpu {:.0}%: {:.2} GB/s per busy core)",
            ty.name(),
            if x16 { "x16" } else { "   " },
            per * 1e6,
            bytes as f64 / per / 1e9,
            per / base,
            100.0 * cpu / t.elapsed().as_secs_f64(),
            (reps * copies * bytes) as f64 / cpu / 1e9
        );
    }
}

/// Process CPU time (user + system) from /proc/self/stat, in seconds (10 ms resolution):
/// other processes share this machine, so GB/s per busy core is the steadier number.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

#[test]
#[ignore]
fn bench_gemv_gemm() {
    println!(
        "threads {} isa {:?}",
        rayon::current_num_threads(),
        ferrox_core::kernels::isa()
    );
    let cases = [
        (GgmlType::Q4K, 896, 4864),
        (GgmlType::Q6K, 896, 4864),
        (GgmlType::Q5_0, 4864, 896),
        (GgmlType::Q8_0, 4864, 896),
        (GgmlType::Q4_0, 4864, 896),
        (GgmlType::IQ4NL, 4864, 896),
        (GgmlType::Q5_0, 896, 896),
        (GgmlType::Q8_0, 151936, 896),
        // Float weights: an MLP projection of the 0.5B each way.
        (GgmlType::F16, 4864, 896),
        (GgmlType::BF16, 896, 4864),
        (GgmlType::F32, 4864, 896),
        // The 256-element low-bit types as llama-quantize writes the 0.5B's ffn_down.
        (GgmlType::Q2K, 896, 4864),
        (GgmlType::Q3K, 896, 4864),
        (GgmlType::IQ4XS, 896, 4864),
        (GgmlType::IQ3S, 896, 4864),
        (GgmlType::IQ3XXS, 896, 4864),
        (GgmlType::IQ2S, 896, 4864),
        (GgmlType::IQ2XS, 896, 4864),
        (GgmlType::IQ2XXS, 896, 4864),
        (GgmlType::IQ1M, 896, 4864),
        (GgmlType::IQ1S, 896, 4864),
        (GgmlType::TQ2_0, 896, 4864),
        (GgmlType::TQ1_0, 896, 4864),
    ];
    for (ty, r, c) in cases {
        if !KNOBS.only.is_empty() && !KNOBS.only.contains(&ty.name()) {
            continue;
        }
        let batches: Vec<usize> = match KNOBS.batches {
            Some(v) => v
                .iter()
                .copied()
                .filter(|&n| r < 100_000 || n <= 8)
                .collect(),
            None if r > 100_000 => vec![1],
            None => vec![1, 2, 4, 8],
        };
        for x16 in [false, true] {
            if KNOBS
                .layout
                .is_none_or(|l| l == if x16 { "x16" } else { "plain" })
            {
                bench(ty, r, c, &batches, x16);
            }
        }
    }
}
