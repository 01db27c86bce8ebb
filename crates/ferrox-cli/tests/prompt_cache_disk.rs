//! `ferrox serve --cache-dir` on the real 0.5B coder: a prompt's blocks survive a restart (the
//! first request after it is ≥ 90% cached and answers exactly as the cold run), and a
//! corrupted file is reported on stderr, never loaded, and the answer stays the same. With
//! several -m, each model keeps its own directory (keyed by the model's identity), written
//! at unload and at exit.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use common::server::post_json;
use serde_json::json;

const MODEL: &str = "qwen2.5-coder:0.5b-instruct";

/// A running server, its address and every stderr line it has written so far.
struct Run {
    server: common::Server,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

fn start(dir: &Path) -> Run {
    start_models(dir, &[MODEL])
}

/// A server of `models` (each `-m`) keeping its prompt cache in `dir`.
fn start_models(dir: &Path, models: &[&str]) -> Run {
    let mut cmd = common::command();
    cmd.args(["serve", "--port", "0", "--parallel", "1"]);
    for m in models {
        cmd.args(["-m", m]);
    }
    cmd.arg("--cache-dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = common::Server::from_child(child);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("server exited before listening")
            .unwrap();
        log.lock().unwrap().push(line.clone());
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let l = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    Run { server, addr, log }
}

/// SIGTERM, then the drained exit (which flushes the cache's files).
fn stop(mut run: Run) -> Vec<String> {
    // SAFETY: signals our own child.
    assert_eq!(
        unsafe { libc::kill(run.server.pid() as i32, libc::SIGTERM) },
        0
    );
    let status = run.server.child().wait().unwrap();
    assert!(status.success(), "{status}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let log = run.log.lock().unwrap().clone();
    log
}

fn prompt() -> String {
    (0..48)
        .map(|i| {
            format!(
                "Item {i}: the {} fox carried {} apples across river {}.\n",
                ["red", "quick", "tired"][i % 3],
                i * 7 % 13,
                i * 31 % 17
            )
        })
        .collect::<String>()
        + "Summarise the items above in one sentence:"
}

/// The completion's text, prompt tokens and cached prompt tokens.
fn complete(addr: &str) -> (String, u64, u64) {
    complete_with(addr, MODEL)
}

fn complete_with(addr: &str, model: &str) -> (String, u64, u64) {
    let (status, v) = post_json(
        addr,
        "/v1/completions",
        &json!({"model": model, "prompt": prompt(), "max_tokens": 24, "temperature": 0}),
    );
    assert_eq!(status, 200, "{v}");
    let usage = &v["usage"];
    (
        v["choices"][0]["text"].as_str().unwrap().to_string(),
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
    )
}

/// The block files under `dir` (one directory per model and cache type), shortest first.
fn block_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "fxkv"))
        .collect();
    out.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    out
}

#[test]
fn prompt_cache_survives_a_restart_and_refuses_a_corrupted_file() {
    common::model(MODEL);
    let dir = tempfile::tempdir().unwrap();

    let cold = start(dir.path());
    let (text, prompt_tokens, cached) = complete(&cold.addr);
    assert!(prompt_tokens > 400, "{prompt_tokens}");
    assert_eq!(cached, 0, "an empty cache dir serves nothing");
    stop(cold);
    let files = block_files(dir.path());
    assert!(files.len() as u64 >= prompt_tokens / 16, "{files:?}");

    let warm = start(dir.path());
    let (text2, _, cached2) = complete(&warm.addr);
    assert!(
        cached2 * 10 >= prompt_tokens * 9,
        "{cached2} of {prompt_tokens} cached after the restart"
    );
    assert_eq!(text2, text, "a restored cache answers as the cold run");
    stop(warm);

    // One flipped byte in the first block: reported, removed, so nothing of the prompt loads.
    let first = &block_files(dir.path())[0];
    let mut bytes = std::fs::read(first).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(first, &bytes).unwrap();
    let bad = start(dir.path());
    let (text3, _, cached3) = complete(&bad.addr);
    let log = stop(bad);
    assert!(
        log.iter()
            .any(|l| l.contains("skipped") && l.contains("checksum")),
        "{log:?}"
    );
    assert!(cached3 < 16, "{cached3} tokens came from a corrupted cache");
    assert_eq!(
        text3, text,
        "a cold prefill after a bad file answers the same"
    );
}

#[test]
fn several_models_keep_their_own_prompt_caches() {
    const GEMMA: &str = "gemma3:270m";
    common::model(MODEL);
    common::model(GEMMA);
    let dir = tempfile::tempdir().unwrap();
    let cold = start_models(dir.path(), &[MODEL, GEMMA]);
    let texts: Vec<String> = [MODEL, GEMMA]
        .iter()
        .map(|m| complete_with(&cold.addr, m).0)
        .collect();
    stop(cold);
    let dirs = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(dirs, 2, "one directory per model");

    let warm = start_models(dir.path(), &[MODEL, GEMMA]);
    for (m, text) in [MODEL, GEMMA].iter().zip(&texts) {
        let (again, prompt_tokens, cached) = complete_with(&warm.addr, m);
        assert!(
            cached * 10 >= prompt_tokens * 9,
            "{m}: {cached} of {prompt_tokens} cached after the restart"
        );
        assert_eq!(&again, text, "{m}");
    }
    stop(warm);
}
