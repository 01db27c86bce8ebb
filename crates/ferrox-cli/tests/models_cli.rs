//! `ferrox list`, `rm` and `show`, and `run` reading its prompt from standard input.

use std::io::Write;
use std::process::Stdio;

mod common;
use common::DEFAULT_MODEL;

fn tiny(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ferrox-models/tests/fixtures/gguf-tiny")
        .join(name)
}

#[test]
fn list_and_rm_work_on_the_models_folder() {
    let home = std::env::temp_dir().join(format!("ferrox-models-cli-{}", std::process::id()));
    let models = home.join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(tiny("llama.gguf"), models.join("tiny-llama.gguf")).unwrap();
    let run = |args: &[&str]| {
        common::command()
            .env("FERROX_HOME", &home)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().starts_with("NAME"), "{text}");
    assert!(text.contains("tiny-llama.gguf"), "{text}");

    let missing = run(&["rm", "nothing.gguf"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not a downloaded model"));
    // A path outside the models folder is never deleted.
    let outside = run(&["rm", "../x.gguf"]);
    assert!(!outside.status.success());

    assert!(run(&["rm", "tiny-llama.gguf"]).status.success());
    assert!(!models.join("tiny-llama.gguf").exists());
    let text = String::from_utf8_lossy(&run(&["list"]).stdout).into_owned();
    assert!(!text.contains("tiny-llama"), "{text}");
    std::fs::remove_dir_all(&home).ok();
}

#[test]
fn show_prints_the_card_from_metadata() {
    let path = tiny("qwen2_moe.gguf");
    let out = common::ferrox_ok(["show", path.to_str().unwrap()]);
    assert!(out.contains("qwen2_moe (GGUF `qwen2moe`)"), "{out}");
    assert!(out.contains("experts"), "{out}");
    assert!(out.contains("parameters"), "{out}");
    let model = common::model(DEFAULT_MODEL);
    let card = common::ferrox_ok(["show", model.to_str().unwrap()]);
    assert!(card.contains("context length         32768"), "{card}");
    let template = common::ferrox_ok(["show", "--template", model.to_str().unwrap()]);
    assert!(template.contains("<|im_start|>"), "{template}");
}

#[test]
fn run_reads_the_prompt_from_stdin() {
    let model = common::model(DEFAULT_MODEL);
    let m = model.to_str().unwrap();
    let prompt = "Name a prime number.";
    let direct = common::ferrox_ok(["run", "-m", m, "--temp", "0", "-n", "6", prompt]);
    let mut child = common::command()
        .args(["run", "-m", m, "--temp", "0", "-n", "6"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(prompt.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), direct);
}
