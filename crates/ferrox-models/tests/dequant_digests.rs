//! Every tensor of both small real models (and of the tiny MXFP4 gpt-oss file) dequantizes
//! bit-exactly as gguf-py's `gguf.quants.dequantize` does: sha256 of the f32 little-endian
//! output, compared with fixtures/dequant_digests.json (written by
//! scripts/gguf_dequant_digests.py).

use ferrox_core::quant::dequantize_row;
use ferrox_format::gguf::GgufFile;
use ferrox_hub::ensure_model;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The catalog model's path, pulled when missing (never skipped).
fn model(name: &str) -> PathBuf {
    ensure_model(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn check(name: &str) {
    check_file(&model(name));
}

fn check_file(path: &std::path::Path) {
    let file = path.file_name().unwrap().to_str().unwrap();
    let text = include_str!("fixtures/dequant_digests.json");
    let all: serde_json::Value = serde_json::from_str(text).unwrap();
    let want = all[file].as_object().expect("digests for this model");
    let f = GgufFile::open(path).unwrap();
    assert_eq!(f.tensors().len(), want.len(), "tensor count");
    let bad: Vec<String> = f
        .tensors()
        .par_iter()
        .filter_map(|t| {
            let w = &want[&t.name];
            assert_eq!(w["type"].as_str(), Some(t.ty.name()), "{}", t.name);
            assert_eq!(w["n"].as_u64(), Some(t.n_elements), "{}", t.name);
            let data = f.tensor_data(t);
            let cols = t.dims[0] as usize;
            let row_bytes = t.ty.row_bytes(cols).unwrap();
            let mut out = vec![0f32; cols];
            let mut bytes = vec![0u8; cols * 4];
            let mut h = Sha256::new();
            for row in data.chunks_exact(row_bytes) {
                dequantize_row(t.ty, row, &mut out).unwrap();
                for (b, v) in bytes.chunks_exact_mut(4).zip(&out) {
                    b.copy_from_slice(&v.to_le_bytes());
                }
                h.update(&bytes);
            }
            let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            (got != w["sha256"].as_str().unwrap()).then(|| format!("{} ({})", t.name, t.ty.name()))
        })
        .collect();
    assert!(bad.is_empty(), "{file}: digests differ for {bad:?}");
}

#[test]
fn qwen25_coder_05b_dequantizes_bit_exactly() {
    check("qwen2.5-coder:0.5b-instruct");
}

#[test]
fn gemma3_270m_dequantizes_bit_exactly() {
    check("gemma3:270m");
}

/// MXFP4 (gpt-oss's expert type) on the tiny gpt-oss file (scripts/hf_tiny_to_gguf.py
/// --mxfp4-experts; gguf-py quantized the stacks).
#[test]
fn gpt_oss_mxfp4_experts_dequantize_bit_exactly() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf-tiny");
    check_file(&dir.join("gpt_oss_mxfp4.gguf"));
}
