//! Structured output fields on the HTTP side (fake backend): `response_format`, llama-server's
//! `grammar` and `json_schema` reach the backend's compiler as the right `GrammarSpec`, what
//! it refuses is a 400 naming the parameter, a grammar failing mid-generation is an error (a
//! 500, or an `error` chunk in a stream).

mod common;
use common::*;

use serde_json::{json, Value};

fn chat(extra: Value) -> Value {
    let mut b = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn content(r: &Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn grammar_fields_reach_the_backend() {
    let a = server(2, 8, None).await;
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let cases = [
        (
            json!({"response_format": {"type": "json_object"}}),
            "JsonObject",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}}),
            "JsonSchema",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": schema}}),
            "JsonSchema",
        ),
        (json!({"json_schema": schema}), "JsonSchema"),
        (json!({"grammar": "root ::= \"a\""}), "Gbnf"),
        (json!({"grammar": "%llguidance {}\nstart: \"a\""}), "Lark"),
    ];
    for (fields, kind) in cases {
        let r = post(&a, "/v1/chat/completions", chat(fields.clone())).await;
        assert_eq!(
            content(&r),
            format!("{{\"grammar\": \"{kind}\"}}"),
            "{fields}"
        );
    }
    // Completions take them too; `text` is no grammar.
    let r = complete(&a, json!({"prompt": "x", "grammar": "root ::= \"a\""})).await;
    assert_eq!(r.json()["choices"][0]["text"], "{\"grammar\": \"Gbnf\"}");
    let r = post(
        &a,
        "/v1/chat/completions",
        chat(json!({"response_format": {"type": "text"}, "max_tokens": 2})),
    )
    .await;
    assert_eq!(content(&r), "w0 w1 ");
}

#[tokio::test]
async fn bad_grammar_requests_are_400s_naming_the_parameter() {
    let a = server(1, 4, None).await;
    let cases = [
        (
            json!({"response_format": {"type": "xml"}}),
            "response_format",
            "xml",
        ),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "response_format",
            "json_schema",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            "response_format",
            "schema",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": [1]}}}),
            "response_format",
            "object",
        ),
        (json!({"json_schema": "string"}), "json_schema", "object"),
        (
            json!({"grammar": "root ::= bad"}),
            "grammar",
            "fake: bad grammar",
        ),
        (
            json!({"grammar": "root ::= \"a\"", "json_schema": {"type": "object"}}),
            "json_schema",
            "at most one",
        ),
    ];
    for (fields, param, needle) in cases {
        let r = post(&a, "/v1/chat/completions", chat(fields.clone())).await;
        assert_eq!(r.status, 400, "{fields}: {}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["param"], param, "{fields}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{fields}: {msg}");
    }
    let r = complete(&a, json!({"prompt": "ok", "max_tokens": 1})).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_grammar_failing_mid_generation_is_an_error() {
    let (a, r) = serve_post(
        "/v1/chat/completions",
        chat(json!({"grammar": "root ::= fail"})),
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.body);
    let v = r.json();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("could not continue"));
    let r = post(
        &a,
        "/v1/chat/completions",
        chat(json!({"grammar": "root ::= fail", "stream": true})),
    )
    .await;
    let chunks = r.chunks();
    assert!(
        chunks.iter().any(|c| c["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("could not continue"))),
        "{}",
        r.body
    );
    let m = get(&a, "/metrics").await;
    assert_eq!(m.status, 200);
}
