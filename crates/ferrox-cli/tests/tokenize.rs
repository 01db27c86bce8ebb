//! `ferrox tokenize`: `--ids` prints exactly one JSON array equal to llama-tokenize's, for each
//! flag variant; the default form prints `id -> 'piece'` lines.

use std::ffi::OsStr;
use std::path::Path;

mod common;
use common::model;

fn fixture(name: &str) -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ferrox-tokenizer/tests/fixtures/tokenize")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn tokenize(model: &Path, text_file: &Path, flags: &[&str]) -> String {
    let head = ["tokenize".as_ref(), "-m".as_ref(), model.as_os_str()];
    let file = ["-f".as_ref(), text_file.as_os_str()];
    common::ferrox_ok(
        head.into_iter()
            .chain(file)
            .chain(flags.iter().map(OsStr::new)),
    )
}

#[test]
fn ids_variants_match_llama_tokenize() {
    let dir = std::env::temp_dir().join(format!("ferrox-tokenize-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, fx, pick) in [
        (
            "qwen2.5-coder:0.5b-instruct",
            "qwen2.5-coder-0.5b-instruct.json",
            5,
        ),
        ("gemma3:270m", "gemma3-270m.json", 2),
    ] {
        let m = model(file);
        let f = fixture(fx);
        let s = f["strings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == pick)
            .unwrap();
        let text_file = dir.join("text.txt");
        std::fs::write(&text_file, s["text"].as_str().unwrap()).unwrap();
        for (variant, flags) in [
            ("default", &[][..]),
            ("no_bos", &["--no-bos"][..]),
            ("no_parse_special", &["--no-parse-special"][..]),
            (
                "no_bos_no_parse_special",
                &["--no-bos", "--no-parse-special"][..],
            ),
        ] {
            let mut all = vec!["--ids"];
            all.extend_from_slice(flags);
            let stdout = tokenize(&m, &text_file, &all);
            // Exactly one JSON value on stdout: an array of ids.
            let v: serde_json::Value =
                serde_json::from_str(stdout.trim_end()).expect("one JSON array");
            assert_eq!(v, s[variant], "{file} {variant}");
            assert_eq!(stdout.lines().count(), 1);
        }
        if pick == 2 {
            let pretty = tokenize(&m, &text_file, &[]);
            assert!(
                pretty.lines().next().unwrap().ends_with("-> '<bos>'"),
                "{pretty}"
            );
            assert!(pretty.contains("-> '\t'"), "{pretty}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
