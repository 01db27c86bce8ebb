//! Both small real models parse, their tensors are in range, and their views are zero-copy.

use ferrox_format::gguf::{GgufFile, MetaArray};
use std::path::PathBuf;

/// A catalog model's file, pulled by the hub when missing (never skipped).
fn model(name: &str) -> PathBuf {
    ferrox_hub::ensure_model(name).unwrap_or_else(|e| panic!("model {name}: {e}"))
}

fn check_common(f: &GgufFile) {
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    let mut prev_end = 0;
    for t in f.tensors() {
        assert_eq!(t.offset % 32, 0, "{}", t.name);
        assert!(t.offset >= prev_end, "{} overlaps its predecessor", t.name);
        prev_end = t.offset + t.n_bytes;
        let d = f.tensor_data(t);
        assert_eq!(d.len() as u64, t.n_bytes);
        assert_eq!(f.tensor(&t.name).map(|x| &x.name), Some(&t.name));
    }
}

#[test]
fn gemma3_270m_parses() {
    let f = GgufFile::open(&model("gemma3:270m")).unwrap();
    check_common(&f);
    assert_eq!(f.architecture(), Some("gemma3"));
    assert_eq!(f.tensors().len(), 236);
    assert_eq!(f.get_u64("gemma3.block_count"), Some(18));
    assert_eq!(f.get_u64("gemma3.embedding_length"), Some(640));
    assert_eq!(f.get_f32("gemma3.rope.freq_base"), Some(1_000_000.0));
    assert_eq!(f.get_bool("tokenizer.ggml.add_bos_token"), Some(true));
    let toks = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(toks.len(), 262_144);
    assert_eq!(&toks[..3], &["<pad>", "<eos>", "<bos>"]);
    assert_eq!(
        f.get_f32_array("tokenizer.ggml.scores").unwrap().len(),
        262_144
    );
    let types = f.get_i64_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(types[..3], [3, 3, 3]);
    assert!(matches!(
        f.get_array("tokenizer.ggml.token_type"),
        Some(MetaArray::I32(_))
    ));

    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.dims, [640, 262_144]);
    let w = f.weight_matrix("token_embd.weight").unwrap();
    assert_eq!((w.rows(), w.cols()), (262_144, 640));
    let norm = f.weight_matrix("output_norm.weight").unwrap();
    assert_eq!((norm.rows(), norm.cols()), (1, 640));
    assert!(f.weight_matrix("no.such.tensor").is_err());
}

#[test]
fn qwen25_coder_05b_parses() {
    let path = model("qwen2.5-coder:0.5b-instruct");
    let f = GgufFile::open(&path).unwrap();
    check_common(&f);
    assert_eq!(f.architecture(), Some("qwen2"));
    assert_eq!(f.get_u64("qwen2.block_count"), Some(24));
    assert_eq!(f.tensors().len(), 291);
    let toks = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    let merges = f.get_str_array("tokenizer.ggml.merges").unwrap();
    assert_eq!(toks.len(), 151_936);
    assert!(!merges.is_empty());
    assert!(f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("im_start"));
    // The view is the file's bytes at the recorded offset.
    let t = f.tensor("output_norm.weight").unwrap();
    let raw = std::fs::read(&path).unwrap();
    let start = t.file_offset as usize;
    assert_eq!(
        &f.tensor_data(t)[..],
        &raw[start..start + t.n_bytes as usize]
    );
}
