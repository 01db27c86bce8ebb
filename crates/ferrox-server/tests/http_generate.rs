//! Chat and completion generations against a fake backend: the OpenAI response objects and
//! SSE chunk formats, usage, stop strings and aliases.

mod common;
use common::*;
use serde_json::json;

#[tokio::test]
async fn chat_non_streaming() {
    let (a, r) = serve_post("/v1/chat/completions", json!({
        "model": "fake-model", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}],
        "max_tokens": 3, "temperature": 0
    })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], "fake-model");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "w0 w1 w2 ");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 13, "completion_tokens": 3, "total_tokens": 16,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    // Alias accepted; max_completion_tokens wins; stop ends with "stop".
    let v = post(&a, "/v1/chat/completions", json!({
        "model": "fake:alias", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_completion_tokens": 10, "stop": "w2"
    })).await.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["message"]["content"], "w0 w1 ");
}

#[tokio::test]
async fn chat_streaming_with_usage() {
    let (a, r) = serve_post(
        "/v1/chat/completions",
        json!({
            "model": "fake-model", "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}
        }),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.head
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{}",
        r.head
    );
    let chunks = r.chunks();
    let id = chunks[0]["id"].clone();
    assert!(chunks
        .iter()
        .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "w0 w1 w2 w3 ");
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert!(fin["usage"].is_null());
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    // Without include_usage: no usage chunk, no usage key.
    let r = post(&a, "/v1/chat/completions", json!({
        "model": "fake-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2, "stream": true
    })).await;
    let last = r.chunks().pop().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(last.get("usage").is_none());
}

#[tokio::test]
async fn completions_both_ways() {
    let a = server(1, 4, None).await;
    let v = complete(&a, json!({"prompt": "abc", "max_tokens": 2}))
        .await
        .json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "w0 w1 ");
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    let r = complete(
        &a,
        json!({"prompt": ["abc"], "max_tokens": 3, "stream": true}),
    )
    .await;
    let chunks = r.chunks();
    let text: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "w0 w1 w2 ");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
}
