//! AVX-512 attention for the query heads that share one KV head (grouped-query attention,
//! Ainslie et al. 2023): each key and value row is loaded once for the whole group instead of
//! once per head. Per (head, key) and per output element the arithmetic is exactly that of
//! `avx2::scores` / `avx2::weighted_sum` — the 16 lanes of a zmm accumulator are AVX2's two
//! 8-lane accumulators side by side — so results equal the per-head path (`head`) bit for bit.

use super::HeadKv;
use std::arch::x86_64::*;

/// `scores[g * len + j] = q_g · key(start + j) · scale` for the `g` heads in `q` (`g × d`).
///
/// # Safety
/// AVX-512 F/DQ and AVX2/FMA available; `d` is a multiple of 16; the key rows
/// `start..start + len` hold the head's columns (checked by the caller).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(super) unsafe fn scores(
    q: &[f32],
    g: usize,
    kv: HeadKv<'_>,
    start: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let (d, len) = (kv.dim, scores.len() / g);
    assert!(q.len() == g * d && d.is_multiple_of(16) && scores.len() == g * len);
    for j in 0..len {
        let key = &kv.keys[(start + j) * kv.stride + kv.col..][..d];
        for h in 0..g {
            let qh = &q[h * d..(h + 1) * d];
            let mut z = _mm512_setzero_ps();
            for c in (0..d).step_by(16) {
                // SAFETY: c + 16 <= d for both rows.
                let (a, b) = unsafe {
                    (
                        _mm512_loadu_ps(qh.as_ptr().add(c)),
                        _mm512_loadu_ps(key.as_ptr().add(c)),
                    )
                };
                z = _mm512_fmadd_ps(a, b, z);
            }
            // AVX2's `hsum_ps(acc[0] + acc[1])`.
            let v = _mm256_add_ps(_mm512_castps512_ps256(z), _mm512_extractf32x8_ps(z, 1));
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            scores[h * len + j] = _mm_cvtss_f32(s) * scale;
        }
    }
}

/// `out_g = Σ_j p[g * len + j] · value(start + j)` for `G` heads (`out` is `G × d`), each
/// element one fused chain in key order from zero. `p` holds the normalised weights.
///
/// # Safety
/// AVX-512 F and AVX2/FMA available; `d` is a multiple of 16; the value rows
/// `start..start + len` hold the head's columns (checked by the caller).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn weighted_sum<const G: usize>(
    p: &[f32],
    kv: HeadKv<'_>,
    start: usize,
    out: &mut [f32],
) {
    let (d, len) = (kv.dim, p.len() / G);
    assert!(out.len() == G * d && d.is_multiple_of(16) && p.len() == G * len);
    let mut c = 0;
    while c < d {
        // Two vectors of columns at a time, one for the last 16 when d is an odd multiple.
        let wide = c + 32 <= d;
        let mut acc = [[_mm512_setzero_ps(); 2]; G];
        for j in 0..len {
            let row = (start + j) * kv.stride + kv.col + c;
            let v = &kv.values[row..row + if wide { 32 } else { 16 }];
            // SAFETY: `v` holds 16 (or 32) floats.
            let v0 = unsafe { _mm512_loadu_ps(v.as_ptr()) };
            let v1 = if wide {
                // SAFETY: as above.
                unsafe { _mm512_loadu_ps(v.as_ptr().add(16)) }
            } else {
                v0
            };
            for h in 0..G {
                let a = _mm512_set1_ps(p[h * len + j]);
                acc[h][0] = _mm512_fmadd_ps(a, v0, acc[h][0]);
                if wide {
                    acc[h][1] = _mm512_fmadd_ps(a, v1, acc[h][1]);
                }
            }
        }
        for h in 0..G {
            let o = &mut out[h * d + c..h * d + c + if wide { 32 } else { 16 }];
            // SAFETY: `o` holds 16 (or 32) floats.
            unsafe {
                _mm512_storeu_ps(o.as_mut_ptr(), acc[h][0]);
                if wide {
                    _mm512_storeu_ps(o.as_mut_ptr().add(16), acc[h][1]);
                }
            }
        }
        c += if wide { 32 } else { 16 };
    }
}

#[cfg(test)]
mod tests {
    use super::super::{attend_group, head, HeadKv, Isa, Scoring};

    /// Grouped AVX-512 attention equals the per-head AVX2 path bit for bit, for every group
    /// size and head widths that are even and odd multiples of 16, with and without a cap.
    #[test]
    fn group_matches_per_head_bit_for_bit() {
        if Isa::detect() != Isa::Avx512 {
            eprintln!("no AVX-512: skipped");
            return;
        }
        let mut seed = 1u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        };
        for (d, nkv) in [(128, 2), (80, 1), (16, 3)] {
            let stride = nkv * d;
            let positions = 37;
            let keys: Vec<f32> = (0..positions * stride).map(|_| rnd()).collect();
            let values: Vec<f32> = (0..positions * stride).map(|_| rnd() * 10.0).collect();
            for g in 1..=8 {
                let sinks: Vec<f32> = (0..g).map(|_| rnd() * 3.0).collect();
                for (softcap, sink) in [(None, false), (Some(5.0), false), (None, true)] {
                    let q: Vec<f32> = (0..g * d).map(|_| rnd()).collect();
                    let how = Scoring {
                        scale: 0.125,
                        softcap,
                        sinks: sink.then_some(&sinks[..]),
                    };
                    let kv = HeadKv {
                        keys: &keys,
                        values: &values,
                        stride,
                        col: (nkv - 1) * d,
                        dim: d,
                    };
                    let (start, len) = (3, 30);
                    let mut sc = vec![0f32; g * len];
                    let mut out = vec![0f32; g * d];
                    attend_group(&q, kv, start, how, &mut sc, &mut out);
                    for h in 0..g {
                        let mut sc1 = vec![0f32; len];
                        let mut o1 = vec![0f32; d];
                        let qh = &q[h * d..(h + 1) * d];
                        let sk = sink.then(|| sinks[h]);
                        head(qh, kv, start, 0.125, softcap, sk, &mut sc1, &mut o1);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&out[h * d..(h + 1) * d]),
                            bits(&o1),
                            "d {d} g {g} head {h} sink {sink}"
                        );
                    }
                }
            }
        }
    }

    /// A sink logit joins the softmax's denominator and takes no value (transformers'
    /// `eager_attention_forward` of gpt-oss: softmax over `[scores, sink]`, sink column dropped).
    #[test]
    fn sink_matches_reference() {
        let (d, len, g) = (16, 9, 2);
        let f = |i: usize| ((i * 37 % 23) as f32 - 11.0) / 7.0;
        let keys: Vec<f32> = (0..len * d).map(f).collect();
        let values: Vec<f32> = (0..len * d).map(|i| f(i + 5) * 3.0).collect();
        let q: Vec<f32> = (0..g * d).map(|i| f(i + 11)).collect();
        let sinks = [2.5f32, -1.0];
        let kv = HeadKv {
            keys: &keys,
            values: &values,
            stride: d,
            col: 0,
            dim: d,
        };
        let how = Scoring {
            scale: 0.25,
            softcap: None,
            sinks: Some(&sinks),
        };
        let mut sc = vec![0f32; g * len];
        let mut out = vec![0f32; g * d];
        attend_group(&q, kv, 0, how, &mut sc, &mut out);
        for h in 0..g {
            let mut logits: Vec<f64> = (0..len)
                .map(|j| {
                    (0..d)
                        .map(|c| q[h * d + c] as f64 * keys[j * d + c] as f64)
                        .sum::<f64>()
                        * 0.25
                })
                .collect();
            logits.push(sinks[h] as f64);
            let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|l| (l - max).exp()).sum();
            for c in 0..d {
                let want: f64 = (0..len)
                    .map(|j| (logits[j] - max).exp() / z * values[j * d + c] as f64)
                    .sum();
                let got = out[h * d + c] as f64;
                assert!(
                    (got - want).abs() < 1e-5,
                    "head {h} col {c}: {got} vs {want}"
                );
            }
        }
    }
}
