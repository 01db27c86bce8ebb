//! Encode throughput on ~1 MB of real text (the Python standard library sources), for both real
//! models, compared with HF `tokenizers` from Python built equivalently (`tokenizer_hf.py`,
//! needs `pip install gguf tokenizers`; skipped with a note when Python lacks them).
//!
//! Run: `cargo bench -p ferrox-tokenizer --bench tokenizer_encode`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ferrox_format::gguf::GgufFile;
use ferrox_tokenizer::Tokenizer;

/// A directory of `.py` files (edit to point elsewhere).
const CORPUS_DIR: &str = "/root/.pyenv/versions/3.11.7/lib/python3.11";

fn corpus() -> String {
    let dir = CORPUS_DIR;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e} (point CORPUS_DIR at a directory of .py files)"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    let mut out = String::new();
    for f in files {
        out.push_str(&std::fs::read_to_string(&f).unwrap_or_default());
        if out.len() >= 1_000_000 {
            break;
        }
    }
    out
}

fn main() {
    let text = corpus();
    let tmp = std::env::temp_dir().join(format!("ferrox-tok-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let corpus_path = tmp.join("corpus.txt");
    std::fs::write(&corpus_path, &text).unwrap();
    for name in ["qwen2.5-coder:0.5b-instruct", "gemma3:270m"] {
        let path = ferrox_hub::ensure_model(name).expect("model");
        let t0 = Instant::now();
        let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
        let load = t0.elapsed().as_secs_f64();
        let mut best = f64::INFINITY;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            ids = tok.encode(&text, false, true);
            best = best.min(t0.elapsed().as_secs_f64());
        }
        println!(
            "{name}: {} bytes -> {} tokens, {:.2} MB/s (ferrox, best of 3; load {load:.2}s)",
            text.len(),
            ids.len(),
            text.len() as f64 / best / 1e6
        );
        let ids_path = tmp.join("ids.json");
        std::fs::write(&ids_path, serde_json::to_string(&ids).unwrap()).unwrap();
        python(&path, &corpus_path, &ids_path);
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

fn python(model: &Path, corpus: &Path, ids: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/tokenizer_hf.py");
    match Command::new("python3")
        .arg(script)
        .arg(model)
        .arg(corpus)
        .arg(ids)
        .output()
    {
        Ok(o) if o.status.success() => print!("{}", String::from_utf8_lossy(&o.stdout)),
        Ok(o) => println!(
            "  (Python comparison unavailable: {})",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ),
        Err(e) => println!("  (Python comparison unavailable: {e})"),
    }
}
