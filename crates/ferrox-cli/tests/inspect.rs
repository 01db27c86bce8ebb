//! `ferrox inspect` on the real models: the tensor table is complete and the file is not read
//! into memory (peak RSS of the child stays far below the model size).

use std::ffi::OsStr;

mod common;
use common::model;

fn inspect(model: impl AsRef<OsStr>) -> String {
    common::ferrox_ok([OsStr::new("inspect"), model.as_ref()])
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
    let rss = common::children_max_rss() / 1024;
    assert!(
        rss < 64 * 1024 && rss < size_kib / 4,
        "inspect peak RSS {rss} KiB for a {size_kib} KiB model"
    );
}

#[test]
fn inspect_refuses_garbage() {
    let p = std::env::temp_dir().join(format!("ferrox-inspect-{}.gguf", std::process::id()));
    std::fs::write(&p, b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
    let out = common::ferrox([OsStr::new("inspect"), p.as_os_str()]);
    std::fs::remove_file(&p).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("header"), "{err}");
}
