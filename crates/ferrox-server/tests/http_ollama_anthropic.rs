//! The Ollama and Anthropic routes' own shapes on the fake backend: NDJSON lines and SSE
//! event names, their error bodies, `x-api-key`, refused fields (the official clients against
//! a real model are in ferrox-cli's `api_clients` test).

mod common;
use common::*;

use serde_json::{json, Value};

fn lines(body: &str) -> Vec<Value> {
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test]
async fn ollama_chat_streams_ndjson_and_answers_whole() {
    let a = server(1, 4, None).await;
    let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                      "options": {"num_predict": 3, "temperature": 0, "num_ctx": 2048}});
    let r = post(&a, "/api/chat", body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.head.to_ascii_lowercase().contains("application/x-ndjson"));
    let ls = lines(&r.body);
    let last = ls.last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "length");
    assert_eq!(last["eval_count"], 3);
    assert!(ls[..ls.len() - 1].iter().all(|l| l["done"] == false));
    let streamed: String = ls
        .iter()
        .map(|l| l["message"]["content"].as_str().unwrap())
        .collect();
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let w = post(&a, "/api/chat", whole).await.json();
    assert_eq!(w["message"]["content"], json!(streamed));
    assert_eq!(w["message"]["role"], "assistant");
    assert!(w["created_at"].as_str().unwrap().ends_with('Z'));
    // An empty conversation loads the model.
    let load = post(
        &a,
        "/api/chat",
        json!({"model": "fake-model", "messages": []}),
    )
    .await;
    assert_eq!(load.json()["done_reason"], "load");
}

#[tokio::test]
async fn ollama_refusals_are_ollama_errors() {
    let a = server(1, 4, None).await;
    let cases = [
        (
            "/api/chat",
            json!({"options": {"mirostat": 1}}),
            400,
            "mirostat",
        ),
        ("/api/chat", json!({"format": 7}), 400, "format"),
        ("/api/chat", json!({"model": "other"}), 404, "other"),
        (
            "/api/generate",
            json!({"suffix": "x", "system": "be brief"}),
            400,
            "suffix",
        ),
        (
            "/api/generate",
            json!({"template": "{{ .Prompt }}"}),
            400,
            "template",
        ),
        ("/api/generate", json!({"context": [1, 2]}), 400, "context"),
        ("/api/generate", json!({"images": ["aGk="]}), 400, "images"),
    ];
    for (path, extra, status, needle) in cases {
        let mut b = json!({"model": "fake-model", "prompt": "hi", "stream": false,
                           "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = post(&a, path, b).await;
        assert_eq!(r.status, status, "{path} {extra}: {}", r.body);
        let msg = r.json()["error"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{msg}");
    }
    // Neutral values of options ferrox does not implement are accepted.
    let ok = json!({"model": "fake-model", "prompt": "hi", "stream": false,
                    "options": {"mirostat": 0, "typical_p": 1.0, "num_predict": 2}});
    assert_eq!(post(&a, "/api/generate", ok).await.status, 200);
    let v = get(&a, "/api/version").await.json();
    assert!(v["version"].is_string());
    let tags = get(&a, "/api/tags").await.json();
    assert_eq!(tags["models"][0]["name"], "fake-model");
    // No embeddings on this backend: a clear 501.
    let e = post(
        &a,
        "/api/embed",
        json!({"model": "fake-model", "input": [1, 2]}),
    )
    .await;
    assert_eq!(e.status, 501, "{}", e.body);
}

#[tokio::test]
async fn anthropic_messages_stream_events_and_errors() {
    let a = server(1, 4, Some("k3y")).await;
    let body = json!({"model": "fake-model", "max_tokens": 3, "stream": true,
                      "system": [{"type": "text", "text": "be brief"}],
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
    let r = request(
        &a,
        "POST",
        "/v1/messages",
        &[("x-api-key", "k3y"), ("content-type", "application/json")],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<&str> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    for n in [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert!(
        r.body.contains("\"stop_reason\":\"max_tokens\""),
        "{}",
        r.body
    );
    let unauthorized = post(&a, "/v1/messages", body.clone()).await;
    assert_eq!(unauthorized.status, 401);
    assert_eq!(unauthorized.json()["error"]["type"], "authentication_error");
    let key = [("x-api-key", "k3y"), ("content-type", "application/json")];
    for (extra, needle) in [
        (json!({"max_tokens": null}), "max_tokens"),
        (json!({"top_a": 1}), "top_a"),
        (
            json!({"messages": [{"role": "developer", "content": "x"}]}),
            "role",
        ),
        (json!({"tool_choice": {"type": "maybe"}}), "tool_choice"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            "image",
        ),
    ] {
        let mut b = body.clone();
        b["stream"] = json!(false);
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = request(&a, "POST", "/v1/messages", &key, &b.to_string()).await;
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        let v = r.json();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{v}"
        );
    }
}
