//! BERT-family encoders against their references (fixtures from
//! scripts/gen_encoder_fixtures.py: sentence-transformers, HF `tokenizers`, transformers):
//! all-MiniLM-L6-v2 (catalog `all-minilm:l6-v2`) embeddings from safetensors and from a GGUF
//! in llama.cpp's `bert` layout (scripts/bert_to_gguf.py, converted here), WordPiece ids of 200
//! strings from both, and a tiny random `BertForSequenceClassification` reranker's scores.

mod common;
use common::{floats, ids, read_json};

use std::path::{Path, PathBuf};

use ferrox_models::encoder::{EncodeError, Encoder};
use ferrox_tokenizer::wordpiece::Encoded;

fn minilm_dir() -> PathBuf {
    ferrox_hub::ensure_model("all-minilm:l6-v2").expect("pull all-minilm:l6-v2")
}

/// Converts a model directory to a GGUF with the repository's llama.cpp-layout converter.
fn to_gguf(dir: &Path, name: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("ferrox-{name}-{}.gguf", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bert_to_gguf.py");
    let st = common::python()
        .arg(script)
        .arg(dir)
        .arg(&out)
        .status()
        .expect("run bert_to_gguf.py");
    assert!(st.success(), "bert_to_gguf.py failed");
    out
}

fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// `text` as sentence-transformers frames it: cut at max_seq_length 256 (`[SEP]` kept). A
/// GGUF only knows the position table's 512, as llama.cpp.
fn st_tokenize(enc: &Encoder, text: &str) -> Encoded {
    let mut e = enc.tokenize(text).unwrap();
    if e.ids.len() > 256 {
        let sep = *e.ids.last().unwrap();
        e.ids.truncate(256);
        e.types.truncate(256);
        e.ids[255] = sep;
    }
    e
}

fn check_wordpiece(enc: &Encoder, what: &str) {
    let f = read_json(&common::fixture("encoders/wordpiece_ids.json"));
    let strings = f["strings"].as_array().unwrap();
    assert_eq!(strings.len(), 200);
    for (s, want) in strings.iter().zip(f["ids"].as_array().unwrap()) {
        let got = st_tokenize(enc, s.as_str().unwrap());
        assert_eq!(got.ids, ids(want), "{what}: {s}");
    }
}

/// Embeds all 20 sentences in one batch; each within cosine 0.9999 of sentence-transformers;
/// the batch equals each sentence alone, bit for bit.
fn check_embeddings(enc: &Encoder, what: &str) {
    let f = read_json(&common::fixture("encoders/minilm_embeddings.json"));
    let sentences = f["sentences"].as_array().unwrap();
    let inputs: Vec<_> = sentences
        .iter()
        .map(|s| st_tokenize(enc, s.as_str().unwrap()))
        .collect();
    let got = enc.embed(&inputs).unwrap();
    let mut worst = 1.0f64;
    for ((v, want), s) in got
        .iter()
        .zip(f["embeddings"].as_array().unwrap())
        .zip(sentences)
    {
        let c = cosine(v, &floats(want));
        worst = worst.min(c);
        assert!(c >= 0.9999, "{what}: cosine {c} for {s}");
    }
    eprintln!("{what}: worst cosine {worst:.7}");
    for (i, input) in inputs.iter().enumerate().step_by(7) {
        let alone = enc.embed(std::slice::from_ref(input)).unwrap();
        assert_eq!(
            alone[0], got[i],
            "{what}: batch row {i} differs from the input alone"
        );
    }
}

#[test]
fn minilm_safetensors_matches_sentence_transformers() {
    let enc = Encoder::load(&minilm_dir()).unwrap();
    assert_eq!(
        enc.tokenizer.max_len(),
        256,
        "sentence_bert_config max_seq_length"
    );
    check_wordpiece(&enc, "safetensors");
    check_embeddings(&enc, "safetensors");
    assert_eq!(enc.rank("q", &["d"]), Err(EncodeError::NotRanker));
    check_bad_inputs(&enc);
}

#[test]
fn minilm_gguf_matches_sentence_transformers() {
    let gguf = to_gguf(&minilm_dir(), "minilm");
    let enc = Encoder::load(&gguf);
    let _ = std::fs::remove_file(&gguf);
    let enc = enc.unwrap();
    assert_eq!(enc.tokenizer.max_len(), 512, "bert.context_length");
    check_wordpiece(&enc, "gguf");
    check_embeddings(&enc, "gguf");
}

fn check_reranker(model: &Path, what: &str) {
    let f = read_json(&common::fixture("encoders/rerank.json"));
    let enc = Encoder::load(model).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(enc.is_ranker());
    let query = f["query"].as_str().unwrap();
    let docs: Vec<&str> = f["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    for (d, want) in docs.iter().zip(f["input_ids"].as_array().unwrap()) {
        let got = enc.tokenizer.encode_pair(query, d).unwrap();
        assert_eq!(got.ids, ids(want), "{what}: ids of {d}");
    }
    let scores = enc.rank(query, &docs).unwrap();
    for ((s, want), d) in scores.iter().zip(floats(&f["scores"])).zip(&docs) {
        assert!(
            (*s as f64 - want).abs() < 1e-4,
            "{what}: score {s} vs transformers {want} for {d}"
        );
    }
    let e = enc.embed(&[enc.tokenize("x").unwrap()]);
    assert_eq!(e, Err(EncodeError::NotEmbedding));
}

#[test]
fn tiny_reranker_matches_transformers() {
    let dir = common::fixture("encoders/tiny-reranker");
    check_reranker(&dir, "safetensors");
    let gguf = to_gguf(&dir, "tiny-reranker");
    check_reranker(&gguf, "gguf");
    let _ = std::fs::remove_file(&gguf);
}

/// Bad inputs are refused by name, never a panic.
fn check_bad_inputs(enc: &Encoder) {
    let mut e = enc.tokenize("the cat").unwrap();
    e.ids[1] = 1 << 20;
    let err = enc.embed(&[e]).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
    let mut e = enc.tokenize("the cat").unwrap();
    e.ids.clear();
    e.types.clear();
    let err = enc.embed(&[e]).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
    let long = enc.tokenize(&"cat ".repeat(5000)).unwrap();
    assert_eq!(
        long.ids.len(),
        enc.tokenizer.max_len(),
        "truncated to the model's length"
    );
}
