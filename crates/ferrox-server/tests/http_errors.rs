//! Each bad input gets an OpenAI error JSON with the right 4xx status, and the server keeps
//! working after them (fake backend, 64-token context).

mod common;
use common::*;

use serde_json::{json, Value};

/// A valid chat request with `extra`'s fields put over it.
fn chat(extra: Value) -> String {
    let mut b = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b.to_string()
}

/// Posts each `(what, body, status, needle)` to `path`: an OpenAI error with `status` whose
/// message contains `needle`.
async fn expect_errors(addr: &str, path: &str, cases: Vec<(&str, String, u16, &str)>) {
    for (what, body, status, needle) in cases {
        let r = post_raw(addr, path, "application/json", &body).await;
        assert_eq!(r.status, status, "{what}: {}", r.body);
        let v = r.json();
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {v}"));
        assert!(msg.contains(needle), "{what}: {msg}");
        assert!(v["error"]["type"].is_string(), "{what}");
    }
}

/// The server still answers a good request.
async fn still_works(addr: &str) {
    let ok = json!({"model": "fake-model", "prompt": "ok", "max_tokens": 1});
    assert_eq!(post(addr, "/v1/completions", ok).await.status, 200);
}

#[tokio::test]
async fn unreadable_bodies() {
    let a = server(1, 4, None).await;
    let cases = vec![
        (
            "malformed JSON",
            "{\"model\": \"fake-model\", \"messages\": [".into(),
            400,
            "malformed JSON",
        ),
        ("not JSON at all", "hello".into(), 400, "malformed JSON"),
        (
            "wrong type",
            chat(json!({"messages": "hi"})),
            400,
            "invalid request",
        ),
        (
            "wrong type max_tokens",
            chat(json!({"max_tokens": "ten"})),
            400,
            "invalid request",
        ),
        (
            "missing messages",
            json!({"model": "fake-model"}).to_string(),
            400,
            "messages",
        ),
    ];
    expect_errors(&a, "/v1/chat/completions", cases).await;
    let r = post_raw(&a, "/v1/completions", "text/plain", "{}").await;
    assert_eq!(r.status, 415);
    still_works(&a).await;
}

#[tokio::test]
async fn bad_chat_fields() {
    let a = server(1, 4, None).await;
    let long = "x".repeat(100);
    let cases = vec![
        (
            "unknown model",
            chat(json!({"model": "gpt-4o"})),
            404,
            "gpt-4o",
        ),
        (
            "empty messages",
            chat(json!({"messages": []})),
            400,
            "messages must not be empty",
        ),
        (
            "bad role",
            chat(json!({"messages": [{"role": "wizard", "content": "x"}]})),
            400,
            "role",
        ),
        (
            "prompt longer than context",
            chat(json!({"messages": [{"role": "user", "content": long}]})),
            400,
            "maximum context length",
        ),
        (
            "max_tokens beyond context",
            chat(json!({"max_tokens": 1000})),
            400,
            "does not fit",
        ),
        (
            "max_tokens zero",
            chat(json!({"max_tokens": 0})),
            400,
            "at least 1",
        ),
        ("n too large", chat(json!({"n": 9})), 400, "n = 9"),
        (
            "unsupported parameter",
            chat(json!({"modalities": ["audio"]})),
            400,
            "unsupported parameter `modalities`",
        ),
        (
            "logit_bias outside the vocabulary",
            chat(json!({"logit_bias": {"300": 1}})),
            400,
            "outside the vocabulary",
        ),
        (
            "logit_bias too strong",
            chat(json!({"logit_bias": {"3": 101}})),
            400,
            "[-100, 100]",
        ),
        (
            "top_logprobs without logprobs",
            chat(json!({"top_logprobs": 2})),
            400,
            "top_logprobs",
        ),
        (
            "temperature",
            chat(json!({"temperature": 7})),
            400,
            "temperature",
        ),
        ("top_p", chat(json!({"top_p": 0})), 400, "top_p"),
    ];
    expect_errors(&a, "/v1/chat/completions", cases).await;
    still_works(&a).await;
}

#[tokio::test]
async fn bad_completion_prompts() {
    let a = server(1, 4, None).await;
    let r = complete(&a, json!({"prompt": ""})).await;
    assert_eq!(r.status, 400);
    let r = complete(&a, json!({"prompt": "x".repeat(100)})).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (400, Some("context_length_exceeded"))
    );
    still_works(&a).await;
}
