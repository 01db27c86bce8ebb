//! `ferrox serve` against hostile input: message text typed as control tokens stays text (the
//! default model), and a model with a hostile chat template fails its chat requests quickly
//! while the server keeps answering (a crafted tiny GGUF).

mod common;
#[path = "../../ferrox-models/tests/common/crafted.rs"]
mod crafted;

use common::server::{http, post_json};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn prompt_tokens(addr: &str, path: &str, body: serde_json::Value) -> u64 {
    let (status, v) = post_json(addr, path, &body);
    assert_eq!(status, 200, "{v}");
    v["usage"]["prompt_tokens"].as_u64().unwrap()
}

/// Content `x<|im_start|>` costs more prompt tokens than `x` plus one special token would; a
/// raw completion prompt still parses it as one.
#[test]
fn typed_control_tokens_cost_their_text() {
    let (_server, addr) =
        common::serve_model(common::DEFAULT_MODEL, &["--parallel", "1", "-c", "512"]);
    let chat = |content: &str| {
        json!({"model": common::DEFAULT_MODEL, "max_tokens": 1, "temperature": 0,
               "messages": [{"role": "user", "content": content}]})
    };
    let plain = prompt_tokens(&addr, "/v1/chat/completions", chat("x"));
    let forged = prompt_tokens(&addr, "/v1/chat/completions", chat("x<|im_start|>"));
    assert!(forged > plain + 1, "{forged} vs {plain}");
    let complete =
        |prompt: &str| json!({"model": common::DEFAULT_MODEL, "max_tokens": 1, "prompt": prompt});
    let raw = prompt_tokens(&addr, "/v1/completions", complete("x<|im_start|>"));
    let raw_plain = prompt_tokens(&addr, "/v1/completions", complete("x"));
    assert_eq!(raw, raw_plain + 1);
}

/// A model whose template never ends: each chat is refused within a second, `/health` answers
/// within 100 ms meanwhile, completions still work.
#[test]
fn hostile_template_fails_only_its_requests() {
    let dir = tempfile::tempdir().unwrap();
    let src =
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}";
    let file = dir.path().join("hostile.gguf");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&file, crafted::with_chat_template(manifest, src)).unwrap();
    let (_server, addr) = common::serve(file.to_str().unwrap(), &["--parallel", "2", "-t", "1"]);
    let watcher = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            let end = Instant::now() + Duration::from_secs(3);
            while Instant::now() < end {
                let t = Instant::now();
                assert_eq!(http(&addr, "GET", "/health", "").0, 200);
                worst = worst.max(t.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            worst
        })
    };
    let model = file.to_str().unwrap();
    for _ in 0..3 {
        let t = Instant::now();
        let body = json!({"model": model, "max_tokens": 2,
                          "messages": [{"role": "user", "content": "hi"}]});
        let (status, v) = post_json(&addr, "/v1/chat/completions", &body);
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("chat template"),
            "{v}"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    let body = json!({"model": model, "max_tokens": 2, "prompt": "hi"});
    assert_eq!(post_json(&addr, "/v1/completions", &body).0, 200);
    let worst = watcher.join().unwrap();
    assert!(worst < Duration::from_millis(100), "/health took {worst:?}");
}

/// A body declared larger than `--max-body-mb` is refused at once, before any of it is read
/// (not after the body deadline, nor after buffering the limit); a chunked body with no
/// declared length is cut off at the limit.
#[test]
fn oversized_bodies_are_refused_early() {
    use std::io::{Read, Write};
    let (_server, addr) = common::serve_model(
        common::DEFAULT_MODEL,
        &[
            "--parallel",
            "1",
            "-c",
            "512",
            "--max-body-mb",
            "1",
            "--body-timeout",
            "20",
        ],
    );
    let send = |head: &str, body: &[u8]| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let t = Instant::now();
        s.write_all(head.as_bytes()).unwrap();
        // The server may answer and close before taking all of it.
        let _ = s.write_all(body);
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let raw = String::from_utf8_lossy(&raw).to_string();
        (raw, t.elapsed())
    };
    let post = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                Content-Type: application/json\r\n";
    // Declared 64 MiB, nothing sent: only the header can answer in time.
    let (raw, took) = send(&format!("{post}Content-Length: {}\r\n\r\n", 64 << 20), b"");
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(raw.contains("larger than 1048576 bytes"), "{raw}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Chunked, 2 MiB in 64 KiB chunks.
    let chunk = format!("10000\r\n{}\r\n", "x".repeat(1 << 16));
    let body = chunk.repeat(32) + "0\r\n\r\n";
    let (raw, _) = send(
        &format!("{post}Transfer-Encoding: chunked\r\n\r\n"),
        body.as_bytes(),
    );
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    // The server still answers.
    assert_eq!(http(&addr, "GET", "/health", "").0, 200);
}
