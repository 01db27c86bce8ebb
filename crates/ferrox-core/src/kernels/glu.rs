//! Gated activations `g ← act(g) · u` for SwiGLU (SiLU), gpt-oss's clamped SwiGLU and GeGLU
//! (GELU, tanh form; Hendrycks & Gimpel 2016), with `exp` evaluated as 2^n · p(r): n = round(x·log2 e), r = x − n·ln 2 in
//! two parts (Cody–Waite), p a degree-6 Taylor polynomial (|r| ≤ ln2/2, error < 1 ulp-ish).
//!
//! Every element is computed by the same function whatever its position, so a SIMD lane and
//! the scalar tail agree bit for bit (batch invariance); rows are split across threads.

/// Which activation gates the `up` projection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Glu {
    Silu,
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `g' = min(g, limit)`, `u' = clamp(u, ±limit)`,
    /// `g' · sigmoid(alpha · g') · (u' + 1)` (OpenAI's reference `swiglu`, transformers'
    /// `GptOssExperts._apply_gate`, llama.cpp's `swiglu_oai`).
    SwigluOai {
        alpha: f32,
        limit: f32,
    },
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1/k! for k = 6..=0, Horner order.
const P: [f32; 7] = [
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];
const GELU_C: f32 = 0.797_884_6; // sqrt(2/pi)
const GELU_K: f32 = 0.044715;

/// exp(x) for x in [-87, 88] (clamped below; +inf from 88.7), scalar form of the SIMD lanes (same ops in
/// the same order, fused multiply-adds included).
#[inline]
fn exp_ref(x: f32) -> f32 {
    let x = x.clamp(-87.0, 89.0);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p = P[0];
    for c in &P[1..] {
        p = p.mul_add(r, *c);
    }
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[inline]
fn act_ref(kind: Glu, x: f32) -> f32 {
    // 0.5·(1 + tanh y) = sigmoid(2y), so GELU-tanh is x·sigmoid(2y) like SiLU's x·sigmoid(x),
    // without the cancellation of 1 + tanh y for negative x.
    let z = match kind {
        Glu::Silu => x,
        Glu::GeluTanh => 2.0 * GELU_C * (GELU_K * x * x).mul_add(x, x),
        Glu::SwigluOai { alpha, .. } => alpha * x,
    };
    x / (1.0 + exp_ref(0.0 - z))
}

/// `(g, u)` as the activation sees them: clamped for gpt-oss, the up side shifted by one.
#[inline]
fn clamp_ref(kind: Glu, g: f32, u: f32) -> (f32, f32) {
    match kind {
        Glu::SwigluOai { limit, .. } => (g.min(limit), u.max(-limit).min(limit) + 1.0),
        _ => (g, u),
    }
}

/// `g[i] = act(g[i]) · u[i]` for `rows` rows of `g.len() / rows` elements.
pub fn glu(kind: Glu, g: &mut [f32], u: &[f32], rows: usize) {
    assert_eq!(g.len(), u.len(), "glu: lengths");
    assert!(rows > 0 && g.len().is_multiple_of(rows), "glu: rows");
    let width = g.len() / rows;
    if g.len() >= 1 << 15 && rows > 1 {
        crate::pool::for_each_chunk_mut(g, width, |r, g| {
            glu_row(kind, g, &u[r * width..(r + 1) * width])
        });
    } else {
        g.chunks_mut(width)
            .zip(u.chunks(width))
            .for_each(|(g, u)| glu_row(kind, g, u));
    }
}

fn glu_row(kind: Glu, g: &mut [f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::isa() != super::Isa::Scalar {
        // SAFETY: `isa()` reports AVX2/FMA only when the CPU has them; lengths are equal.
        unsafe { avx2::glu_row(kind, g, u) };
        return;
    }
    glu_row_ref(kind, g, u)
}

/// The scalar form: the same per-element arithmetic as the SIMD lanes.
pub fn glu_row_ref(kind: Glu, g: &mut [f32], u: &[f32]) {
    for (a, &b) in g.iter_mut().zip(u) {
        let (x, y) = clamp_ref(kind, *a, b);
        *a = act_ref(kind, x) * y;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp8(x: __m256) -> __m256 {
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
            _mm256_set1_ps(89.0),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let neg = _mm256_sub_ps(_mm256_setzero_ps(), n);
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(p, _mm256_castsi256_ps(bits))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn act8(kind: Glu, x: __m256) -> __m256 {
        let z = match kind {
            Glu::Silu => x,
            Glu::SwigluOai { alpha, .. } => _mm256_mul_ps(_mm256_set1_ps(alpha), x),
            Glu::GeluTanh => {
                let x2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_K), x), x);
                _mm256_mul_ps(_mm256_set1_ps(2.0 * GELU_C), _mm256_fmadd_ps(x2, x, x))
            }
        };
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
        _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }

    /// Eight lanes of `clamp_ref` (min/max of non-NaN floats are exact, as `f32::min`/`max`).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn clamp8(kind: Glu, g: __m256, u: __m256) -> (__m256, __m256) {
        match kind {
            Glu::SwigluOai { limit, .. } => {
                let lim = _mm256_set1_ps(limit);
                let u = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-limit)), lim);
                (_mm256_min_ps(g, lim), _mm256_add_ps(u, _mm256_set1_ps(1.0)))
            }
            _ => (g, u),
        }
    }

    /// # Safety
    /// The CPU must support AVX2 and FMA; `g` and `u` have equal lengths.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn glu_row(kind: Glu, g: &mut [f32], u: &[f32]) {
        let mut gc = g.chunks_exact_mut(8);
        let mut uc = u.chunks_exact(8);
        for (a, b) in (&mut gc).zip(&mut uc) {
            // SAFETY: both chunks hold 8 floats.
            unsafe {
                let (x, y) = clamp8(
                    kind,
                    _mm256_loadu_ps(a.as_ptr()),
                    _mm256_loadu_ps(b.as_ptr()),
                );
                _mm256_storeu_ps(a.as_mut_ptr(), _mm256_mul_ps(act8(kind, x), y));
            }
        }
        glu_row_ref(kind, gc.into_remainder(), uc.remainder());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.01).collect();
        v.extend([
            0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0, 1e6, -1e6,
        ]);
        v.extend([f32::MAX, f32::MIN, 1e-8, -87.5, 88.5]);
        v
    }

    #[test]
    fn exp_is_accurate() {
        for i in -8700..=8800 {
            let x = i as f32 * 0.01;
            let (got, want) = (exp_ref(x), (x as f64).exp());
            assert!(
                ((got as f64 - want) / want).abs() < 4e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn activations_match_the_textbook_formulas() {
        for x in inputs() {
            let silu = x as f64 / (1.0 + (-(x as f64)).exp());
            let y = 0.797_884_560_802_865_4 * (x as f64 + 0.044715 * (x as f64).powi(3));
            let gelu = 0.5 * x as f64 * (1.0 + y.tanh());
            for (kind, want) in [(Glu::Silu, silu), (Glu::GeluTanh, gelu)] {
                let got = act_ref(kind, x) as f64;
                let tol = 1e-6 * want.abs().max(1e-30) + 1e-7 * (x as f64).abs().min(1.0);
                assert!(
                    (got - want).abs() <= tol,
                    "{kind:?}({x}) = {got}, want {want}"
                );
            }
        }
    }

    #[test]
    fn clamped_swiglu_matches_the_reference_formula() {
        let kind = Glu::SwigluOai {
            alpha: 1.702,
            limit: 7.0,
        };
        for g in inputs().into_iter().filter(|v| v.abs() < 1e5) {
            let u = g * 0.37 - 1.0;
            let (gc, uc) = ((g as f64).min(7.0), (u as f64).clamp(-7.0, 7.0));
            let want = gc / (1.0 + (-1.702 * gc).exp()) * (uc + 1.0);
            let (mut a, b) = ([g], [u]);
            glu_row_ref(kind, &mut a, &b);
            let tol = 1e-6 * want.abs() + 1e-7;
            assert!(
                (a[0] as f64 - want).abs() <= tol,
                "({g}, {u}): {} vs {want}",
                a[0]
            );
        }
    }

    #[test]
    fn simd_lanes_equal_the_scalar_form_bit_for_bit() {
        let x = inputs();
        let u: Vec<f32> = x.iter().map(|v| 1.0 + v.abs().min(3.0)).collect();
        let oai = Glu::SwigluOai {
            alpha: 1.702,
            limit: 7.0,
        };
        for kind in [Glu::Silu, Glu::GeluTanh, oai] {
            let mut want = x.clone();
            glu_row_ref(kind, &mut want, &u);
            for rows in [1, 16] {
                let mut got = x.clone();
                glu(kind, &mut got, &u, rows);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{kind:?} element {i} ({})", x[i]);
                }
            }
        }
    }
}
