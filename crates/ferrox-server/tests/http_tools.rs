//! Tool calls and reasoning over the fake backend (its answers to a prompt with tools are a
//! Hermes `<tool_call>` split across pieces; to a prompt that opens a `<think>` block, a
//! thought then words): parsed into `message.tool_calls` / `reasoning_content`, whole and
//! streamed, and the tool fields checked.

mod common;
use common::*;

use serde_json::{json, Value};

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

fn chat(messages: Value, extra: Value) -> Value {
    let mut b = json!({"model": "fake-model", "messages": messages, "max_tokens": 5});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test]
async fn tool_call_whole_and_streamed() {
    let a = server(1, 4, None).await;
    let body = chat(
        user("weather?"),
        json!({"tools": weather_tools(), "max_tokens": 3}),
    );
    let v = post(&a, "/v1/chat/completions", body.clone()).await.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert_eq!(choice["message"]["content"], "Checking.\n");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));
    assert!(call["id"].as_str().unwrap().starts_with("call"));

    let mut b = body;
    b["stream"] = json!(true);
    let chunks = post(&a, "/v1/chat/completions", b).await.chunks();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Checking.\n", "no marker leaks into content");
    let calls = streamed_items(&chunks, "/choices/0/delta/tool_calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn tool_choice_none_and_round_trip_messages() {
    let a = server(1, 4, None).await;
    let none = chat(
        user("weather?"),
        json!({"tools": weather_tools(), "tool_choice": "none"}),
    );
    let v = post(&a, "/v1/chat/completions", none).await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "w0 w1 w2 w3 w4 ");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());

    // The assistant's call and the tool's answer go back in.
    let msgs = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]);
    let r = post(&a, "/v1/chat/completions", chat(msgs, json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let low = chat(user("hi"), json!({"reasoning_effort": "low"}));
    assert_eq!(post(&a, "/v1/chat/completions", low).await.status, 200);
}

#[tokio::test]
async fn reasoning_is_split_whole_and_streamed() {
    let a = server(1, 4, None).await;
    let body = chat(user("think first"), json!({"max_tokens": 5}));
    let v = post(&a, "/v1/chat/completions", body.clone()).await.json();
    let m = &v["choices"][0]["message"];
    assert_eq!(m["reasoning_content"], "pondering");
    assert_eq!(m["content"], "w3 w4 ");
    let mut b = body;
    b["stream"] = json!(true);
    let chunks = post(&a, "/v1/chat/completions", b).await.chunks();
    let field = |f: &str| -> String {
        chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"][f].as_str())
            .collect()
    };
    assert_eq!(field("reasoning_content"), "pondering");
    assert_eq!(field("content"), "w3 w4 ");
}

#[tokio::test]
async fn bad_tool_fields() {
    let a = server(1, 4, None).await;
    let cases = [
        (json!({"tools": [{"type": "retrieval"}]}), "tools"),
        (
            json!({"tools": [{"type": "function", "function": {}}]}),
            "tools",
        ),
        (
            json!({"tools": weather_tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": weather_tools(), "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
    ];
    for (extra, param) in cases {
        let r = post(&a, "/v1/chat/completions", chat(user("x"), extra.clone())).await;
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        assert_eq!(r.json()["error"]["param"], param, "{extra}");
    }
}

/// `tool_choice: "required"` (or a named function) becomes a grammar the backend compiles and
/// the engine enforces; it cannot be combined with another grammar.
#[tokio::test]
async fn required_tool_choice_is_a_grammar() {
    let a = server(1, 4, None).await;
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "get_weather"}}),
    ] {
        let body = chat(
            user("weather?"),
            json!({"tools": weather_tools(), "tool_choice": choice}),
        );
        let v = post(&a, "/v1/chat/completions", body).await.json();
        // The fake engine answers a compiled grammar with its kind.
        assert_eq!(
            v["choices"][0]["message"]["content"], "{\"grammar\": \"Lark\"}",
            "{v}"
        );
    }
    let both = chat(
        user("weather?"),
        json!({"tools": weather_tools(), "tool_choice": "required",
               "response_format": {"type": "json_object"}}),
    );
    let r = post(&a, "/v1/chat/completions", both).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "tool_choice");
}
