//! Several models in one `ferrox serve` (`-m` repeated), driven by the official `ollama`
//! Python client: each model's greedy answer equals its `ferrox run --temp 0` text, `ps` lists
//! both, `keep_alive: 0` drops one, bad names and values are refused.

mod common;
use common::server::{post_json, python_json};
use serde_json::json;

const MODELS: [&str; 2] = ["qwen2.5-coder:0.5b-instruct", "gemma3:270m"];
const PROMPT: &str = "Write a haiku about the sea.";

#[test]
fn ollama_client_alternates_two_models_in_one_server() {
    for m in MODELS {
        common::model(m);
    }
    let expected: Vec<String> = MODELS
        .iter()
        .map(|m| common::greedy_run(m, PROMPT, 12))
        .collect();
    let mut cmd = common::command();
    cmd.args(["serve", "--port", "0", "--parallel", "2"]);
    for m in MODELS {
        cmd.args(["-m", m]);
    }
    let (_server, addr) = common::serve_with(cmd);
    let mut args = vec![format!("http://{addr}"), PROMPT.into(), "12".into()];
    args.extend(MODELS.iter().map(|m| m.to_string()));
    let v = python_json("multi_client.py", &args);
    for (m, want) in MODELS.iter().zip(&expected) {
        assert_eq!(v["answers"][m], json!([want, want]), "{m}: {v}");
    }
    assert_ne!(expected[0], expected[1], "two different models");
    let mut both: Vec<&str> = MODELS.to_vec();
    both.sort();
    assert_eq!(v["list"], json!(both), "{v}");
    assert_eq!(v["ps"], json!(both), "{v}");
    assert!(
        v["ps_sizes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.as_u64() > Some(100 << 20)),
        "{v}"
    );
    assert_eq!(v["ps_after_unload"], json!([MODELS[1]]), "{v}");
    assert_eq!(v["bad_keep_alive"], 400, "{v}");
    assert_eq!(v["unknown"][0], 404, "{v}");
    let msg = v["unknown"][1].as_str().unwrap();
    assert!(MODELS.iter().all(|m| msg.contains(m)), "{msg}");
}

#[test]
fn duplicate_models_are_a_startup_error() {
    let path = common::model(MODELS[1]);
    let out = common::ferrox([
        "serve",
        "--port",
        "0",
        "-m",
        MODELS[1],
        "-m",
        path.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("two models are named `gemma3:270m`"), "{err}");
}

/// The server's resident memory, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn generate(addr: &str, model: &str, keep_alive: serde_json::Value) {
    let body = json!({"model": model, "prompt": PROMPT, "stream": false,
        "options": {"temperature": 0, "num_predict": 8}, "keep_alive": keep_alive});
    let (status, v) = post_json(addr, "/api/generate", &body);
    assert_eq!(status, 200, "{model}: {v}");
}

fn loaded(addr: &str) -> Vec<String> {
    let (status, body) = common::server::http(addr, "GET", "/api/ps", "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let models = v["models"].as_array().unwrap();
    models
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

/// Issue 40's acceptance: after `keep_alive: 0` the model leaves `/api/ps` and the server's
/// RSS falls back to within 10% of its one-model level (weights unmapped, heap trimmed).
#[test]
fn keep_alive_zero_gives_the_models_memory_back() {
    for m in MODELS {
        common::model(m);
    }
    let mut cmd = common::command();
    cmd.args(["serve", "--port", "0", "--parallel", "1", "-c", "1024"]);
    for m in MODELS {
        cmd.args(["-m", m]);
    }
    let (server, addr) = common::serve_with(cmd);
    let pid = server.pid();
    generate(&addr, MODELS[0], json!(null));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let one = rss_kib(pid);
    generate(&addr, MODELS[1], json!(null));
    let two = rss_kib(pid);
    assert_eq!(loaded(&addr).len(), 2);
    generate(&addr, MODELS[1], json!(0));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut after = rss_kib(pid);
    while (after > one + one / 10 || loaded(&addr).len() > 1)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
        after = rss_kib(pid);
    }
    eprintln!("RSS: one model {one} KiB, two {two} KiB, after unloading one {after} KiB");
    assert_eq!(loaded(&addr), [MODELS[0]]);
    assert!(
        two > one + one / 5,
        "the second model took no memory? {one} → {two} KiB"
    );
    assert!(
        after <= one + one / 10,
        "RSS after unloading {after} KiB, one-model level {one} KiB"
    );
}
