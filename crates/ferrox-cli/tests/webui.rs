//! The chat page end to end: `ferrox serve` on the default model with an API key, driven in
//! headless Chromium through chromedriver by `webui_browser.py` (W3C WebDriver over plain
//! HTTP, standard library only). The page asks for the key, streams an answer that is stopped
//! mid-way and kept, survives a reload, then streams a short answer to the end with its usage
//! line. Chromium and chromedriver come from Debian (`scripts/test` installs them); a browser that
//! does not start fails the test with chromedriver's message.

mod common;
use common::DEFAULT_MODEL;

const KEY: &str = "page-key";

#[test]
fn chat_page_streams_stops_and_restores_in_a_browser() {
    let started = std::time::Instant::now();
    let (_server, addr) = common::serve_model(
        DEFAULT_MODEL,
        &["--parallel", "1", "-c", "2048", "--api-key", KEY],
    );
    // target/webui-screenshot.png, beside the build's other outputs.
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    let shot = target.join("webui-screenshot.png");
    let _ = std::fs::remove_file(&shot);
    let v = common::server::python_json(
        "webui_browser.py",
        &[
            format!("http://{addr}"),
            KEY.to_string(),
            shot.display().to_string(),
        ],
    );
    assert_eq!(v["model"], DEFAULT_MODEL);

    // Streamed: the answer grew over at least three polls before the stop.
    let lengths: Vec<u64> = v["lengths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(
        lengths.len() >= 3 && lengths.windows(2).all(|w| w[0] < w[1]),
        "{lengths:?}"
    );
    // Stopped: the partial answer stays and grows no more.
    assert_eq!(v["state"], "stopped", "{v}");
    assert!(v["meta"].as_str().unwrap().contains("stopped"), "{v}");
    let answer = v["answer"].as_str().unwrap();
    assert!(!answer.is_empty());
    assert_eq!(v["answer_later"], answer, "the answer grew after the stop");
    // Restored after a reload, prompt, partial answer and sidebar title.
    let restored = &v["after_reload"];
    assert_eq!(restored["answer"], answer);
    assert_eq!(restored["user"], restored["title"]);
    assert!(restored["user"]
        .as_str()
        .unwrap()
        .starts_with("Count from 1"));
    assert_eq!(v["state_after_reload"], "stopped");

    // A turn that ends by itself reports its usage and speed; its code has copy buttons.
    assert_eq!(v["second_state"], "done", "{v}");
    let meta = v["second_meta"].as_str().unwrap();
    assert!(
        meta.contains("generated tokens") && meta.contains("tokens/s"),
        "{meta}"
    );
    assert!(v["code_blocks"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(
        v["saved_turns"],
        serde_json::json!(["user", "assistant", "user", "assistant"])
    );

    // The markdown renderer escapes HTML and drops non-http(s) links.
    let html = v["markdown"].as_str().unwrap();
    assert!(html.contains("&lt;img") && !html.contains("<img"), "{html}");
    assert!(!html.contains("href=\"javascript"), "{html}");
    assert!(html.contains("<strong>b</strong>") && html.contains("class=\"copy\""));

    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    eprintln!(
        "browser test: {} s (driver {} s), screenshot {}",
        started.elapsed().as_secs(),
        v["seconds"],
        shot.display()
    );
}
