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
    let mut child = common::command()
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("ferrox {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
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
