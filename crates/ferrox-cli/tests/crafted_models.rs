//! Hostile model files (the models crate's `crafted.rs`: a valid tiny GGUF with one value
//! changed) through the binary: `ferrox run` and `ferrox logits` exit with status 1 and a
//! message naming the key, without a panic, an abort or a hang.

mod common;
#[path = "../../ferrox-models/tests/common/crafted.rs"]
mod crafted;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `ferrox ARGS` to its end, killed after 60 s (a hang fails the test, not the suite).
fn run_bounded(args: &[&str]) -> std::process::Output {
    let child = common::command()
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let hung = format!("ferrox {args:?} hung");
    common::output_within(child, Duration::from_secs(60), &hung)
}

#[test]
fn crafted_models_exit_1_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = crafted::cases(Path::new(env!("CARGO_MANIFEST_DIR")));
    for (i, c) in cases.iter().enumerate() {
        let path = dir.path().join(format!("crafted-{i}.gguf"));
        std::fs::write(&path, &c.bytes).unwrap();
        let model = path.to_str().unwrap();
        let npy = dir.path().join("out.npy");
        let npy = npy.to_str().unwrap();
        let runs: [&[&str]; 2] = [
            &["run", "-m", model, "-n", "4", "-t", "1", "hi"],
            &["logits", "-m", model, "-t", "1", "-o", npy, "hi"],
        ];
        for args in runs {
            let out = run_bounded(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{} {args:?}: {err}", c.name);
            assert!(!err.contains("panicked"), "{} {args:?}: {err}", c.name);
            assert!(
                err.contains(&format!("`{}`", c.key)),
                "{} {args:?}: the message does not name `{}`: {err}",
                c.name,
                c.key
            );
        }
    }
}

/// A model whose chat template loops for ever or asks for terabytes: `ferrox run` through the
/// template fails quickly with the sandbox's message (exit 1); `--raw` does not render it.
#[test]
fn hostile_chat_templates_fail_the_run_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let templates = [
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
        "{{ messages | tojson(indent=2**40) }}",
    ];
    for (i, src) in templates.iter().enumerate() {
        let path = dir.path().join(format!("template-{i}.gguf"));
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::write(&path, crafted::with_chat_template(manifest, src)).unwrap();
        let model = path.to_str().unwrap();
        let t = Instant::now();
        let out = run_bounded(&["run", "-m", model, "-n", "2", "-t", "1", "hi"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{src}: {err}");
        assert!(
            err.contains("chat template") && !err.contains("panicked"),
            "{src}: {err}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{src}: {:?}",
            t.elapsed()
        );
        let out = run_bounded(&["run", "-m", model, "--raw", "-n", "2", "-t", "1", "hi"]);
        assert!(
            out.status.success(),
            "{src} --raw: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
