//! `ferrox inspect` on the real models: the tensor table is complete and the file is not read
//! into memory (peak RSS of the child stays far below the model size).

use std::path::PathBuf;
use std::process::Command;

/// A catalog model's file, pulled by the hub when missing (never skipped).
fn model(name: &str) -> PathBuf {
    ferrox_hub::ensure_model(name).unwrap_or_else(|e| panic!("model {name}: {e}"))
}

/// Peak RSS in KiB over all children waited for so far.
fn children_max_rss_kib() -> i64 {
    // SAFETY: getrusage only writes the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut u), 0);
        u.ru_maxrss
    }
}

fn inspect(model: impl AsRef<std::ffi::OsStr>) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .arg("inspect")
        .arg(model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn tensor_rows(out: &str) -> usize {
    out.lines()
        .skip_while(|l| !l.starts_with("* Dumping") || !l.contains("tensor(s)"))
        .skip(2)
        .count()
}

#[test]
fn inspect_real_models() {
    // A catalog name resolves through the hub, like `inspect $(ferrox pull gemma3:270m)`.
    model("gemma3:270m");
    let gemma = inspect("gemma3:270m");
    assert!(gemma.contains("* Dumping 236 tensor(s)"), "{gemma}");
    assert_eq!(tensor_rows(&gemma), 236);
    assert!(gemma.contains("general.architecture = \"gemma3\""));
    // Long arrays are abbreviated.
    let toks = gemma
        .lines()
        .find(|l| l.contains("tokenizer.ggml.tokens ="))
        .unwrap();
    assert!(toks.contains("262144") && toks.ends_with(", ...]") && toks.len() < 200);
    assert!(gemma.contains("Q8_0     [640, 262144]"));

    let qwen_path = model("qwen2.5-coder:0.5b-instruct");
    let size_kib = std::fs::metadata(&qwen_path).unwrap().len() / 1024;
    let qwen = inspect(&qwen_path);
    assert_eq!(tensor_rows(&qwen), 291);
    let rss = children_max_rss_kib();
    assert!(
        rss < 64 * 1024 && (rss as u64) < size_kib / 4,
        "inspect peak RSS {rss} KiB for a {size_kib} KiB model"
    );
}

#[test]
fn inspect_refuses_garbage() {
    let p = std::env::temp_dir().join(format!("ferrox-inspect-{}.gguf", std::process::id()));
    std::fs::write(&p, b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .arg("inspect")
        .arg(&p)
        .output()
        .unwrap();
    std::fs::remove_file(&p).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("header"), "{err}");
}
