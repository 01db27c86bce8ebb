//! Helpers for the tokenizer tests: the real models' tokenizers, loaded once per test binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ferrox_format::gguf::GgufFile;
use ferrox_tokenizer::Tokenizer;

pub const QWEN: &str = "qwen2.5-coder:0.5b-instruct";
pub const GEMMA: &str = "gemma3:270m";

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Path of a catalog model, pulled if missing (never a silent skip).
pub fn model_path(name: &str) -> PathBuf {
    ferrox_hub::ensure_model(name).unwrap_or_else(|e| panic!("model {name}: {e}"))
}

pub fn load(name: &str) -> Tokenizer {
    let f = GgufFile::open(&model_path(name)).expect("open gguf");
    Tokenizer::from_gguf(&f).expect("tokenizer from gguf")
}

pub fn qwen() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| load(QWEN))
}

pub fn gemma() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| load(GEMMA))
}

/// Where the corpus comes from: the first of these that holds `.py` files, then the next.
pub const CORPUS_DIRS: &[&str] = &[
    "/root/.pyenv/versions/3.11.7/lib/python3.11",
    "/usr/lib/python3.11",
    "/usr/lib/python3",
];

/// ~1 MB of real text: the Python standard library sources when present (as on the dev and CI
/// machines), else this repository's Rust sources repeated.
pub fn corpus() -> String {
    let mut out = String::new();
    for d in CORPUS_DIRS {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "py"))
            .collect();
        files.sort();
        for f in files {
            if let Ok(s) = std::fs::read_to_string(&f) {
                out.push_str(&s);
            }
            if out.len() >= 1_000_000 {
                return out;
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut own = String::new();
    collect_rs(&src, &mut own);
    assert!(!own.is_empty());
    while out.len() < 1_000_000 {
        out.push_str(&own);
    }
    out
}

fn collect_rs(dir: &Path, out: &mut String) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect_rs(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
}
