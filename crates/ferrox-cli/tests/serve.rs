//! `ferrox serve` on the default model, driven by the official `openai` Python client:
//! chat and completion, streaming and not; greedy chat text, alone and with four clients at
//! once, equals what `ferrox run --temp 0` prints for the same prompt.

use std::process::Command;

mod common;
use common::DEFAULT_MODEL;

const PROMPT: &str = "Write a Python function that checks whether a number is prime.";
const N: usize = 32;
const KEY: &str = "test-key";

fn start(model: &str) -> (common::Server, String) {
    common::serve(model, &["--parallel", "2", "-c", "2048", "--api-key", KEY])
}

/// What `ferrox run` prints for the prompt, greedy (its stdout ends with one newline).
fn cli_greedy(model: &str) -> String {
    let n = N.to_string();
    let text = common::ferrox_ok(["run", "-m", model, "--temp", "0", "-n", &n, PROMPT]);
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

#[test]
fn openai_client_chat_and_completions_match_greedy_generation() {
    let path = common::model(DEFAULT_MODEL);
    let expected = cli_greedy(path.to_str().unwrap());
    assert!(!expected.trim().is_empty());

    let (_server, addr) = start(path.to_str().unwrap());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(format!("http://{addr}/v1"))
        .args([DEFAULT_MODEL, PROMPT, &N.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openai client failed (.ci/run installs it with pip):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["chat"],
        expected.as_str(),
        "server chat vs `ferrox run --temp 0`"
    );
    for (i, t) in v["chat_concurrent"].as_array().unwrap().iter().enumerate() {
        assert_eq!(t, expected.as_str(), "concurrent chat {i}");
    }
    assert_eq!(v["chat_stream"], expected.as_str());
    assert_eq!(v["chat_usage"], v["chat_stream_usage"]);
    assert_eq!(v["chat_usage"][1], N);
    assert_eq!(v["chat_finish"], "length");
    assert_eq!(v["chat_stream_finish"], "length");
    assert_eq!(v["completion"], v["completion_stream"]);
    assert!(!v["completion"].as_str().unwrap().is_empty());
    assert_eq!(v["models"], serde_json::json!([DEFAULT_MODEL]));
    assert_eq!(v["unknown_model"], "NotFoundError");
}
