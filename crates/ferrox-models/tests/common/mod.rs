//! Helpers shared by the integration tests.
#![allow(dead_code)]

use ferrox_models::decoder::Decoder;
use ferrox_models::engine::BatchParams;
use ferrox_models::generate::{GenerateOutput, GenerateParams, Session};
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{AdaptiveDraft, Drafter, Speculation};
use ferrox_tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

pub mod tiny;
// The Python interpreter and the JSON fixture readers, which the ferrox-cli tests include too.
mod shared;
/// The engine's own greedy choice (first index of the largest logit).
pub use ferrox_models::sampling::argmax;
pub use shared::*;

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Reads a little-endian float32 C-order `.npy` file: (shape, data).
pub fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..6], b"\x93NUMPY", "not a .npy file");
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[hstart..hstart + hlen]).unwrap();
    assert!(header.contains("'<f4'"), "npy dtype must be <f4: {header}");
    assert!(header.contains("'fortran_order': False"));
    let shape_str = header.split("'shape': (").nth(1).unwrap();
    let shape_str = &shape_str[..shape_str.find(')').unwrap()];
    let shape: Vec<usize> = shape_str
        .split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let data: Vec<f32> = bytes[hstart + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// A GGUF model and the tokenizer its file carries.
pub fn load_with_tokenizer(path: &Path) -> (Decoder, Tokenizer) {
    let dec = Decoder::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tok = Tokenizer::from_gguf(dec.gguf.as_ref().unwrap()).unwrap();
    (dec, tok)
}

/// Engine parameters: sampling at `temp` with `seed`, at most `max` tokens; no stop strings,
/// no log-probabilities, no constraint.
pub fn batch_params(temp: f32, seed: u64, max: usize) -> BatchParams {
    BatchParams {
        sampler: SamplerConfig {
            temperature: temp,
            seed,
            ..SamplerConfig::default()
        },
        logprobs: None,
        limits: GenerateParams {
            max_tokens: max,
            ..GenerateParams::default()
        },
    }
}

/// Plain decoding of `prompt` with `p`'s sampler, budget and stop strings in a fresh session
/// of `ctx` positions (no engine, no speculation, no reuse): what a batched request must
/// reproduce.
pub fn alone(
    dec: &Decoder,
    tok: &Tokenizer,
    ctx: usize,
    prompt: &[usize],
    p: &BatchParams,
) -> GenerateOutput {
    let mut s = Session::new(dec, tok, ctx);
    s.generate(
        prompt,
        &p.limits,
        &mut Sampler::new(p.sampler.clone()),
        |_| true,
    )
}

pub fn top_k(x: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[b].partial_cmp(&x[a]).unwrap().then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Speculation drafting with `drafter` exactly `len` tokens a step (no cost model: drafts are
/// made and verified whatever the machine's load).
pub fn fixed_speculation(drafter: Box<dyn Drafter>, len: usize) -> Option<Speculation> {
    let mut s = Speculation::new(drafter, len);
    s.adaptive = AdaptiveDraft::fixed(len);
    Some(s)
}

/// `n` tokens after `prompt` in session `s`, sampled with `config`, end of generation ignored.
pub fn tokens_of(
    s: &mut Session<'_>,
    prompt: &[usize],
    config: SamplerConfig,
    n: usize,
) -> Vec<usize> {
    let params = GenerateParams {
        max_tokens: n,
        ignore_eog: true,
        ..GenerateParams::default()
    };
    s.generate(prompt, &params, &mut Sampler::new(config), |_| true)
        .tokens
}
