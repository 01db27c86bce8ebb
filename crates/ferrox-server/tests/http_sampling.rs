//! The sampling surface over the fake backend: log-probabilities (chat and completions, whole
//! and streamed), `n` choices, fresh seeds for unseeded requests, `logit_bias` passed through,
//! and engine failures answered as errors (500, or an SSE error event and `finish_reason:
//! "error"`), never as a normal finish.

mod common;
use common::*;

use serde_json::{json, Value};

fn chat_body(content: &str, extra: Value) -> Value {
    let mut b = json!({"model": "fake-model", "messages": [{"role": "user", "content": content}], "max_tokens": 3});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn chat_logprobs_whole_and_streamed() {
    let a = server(2, 4, None).await;
    let body = chat_body("hi", json!({"logprobs": true, "top_logprobs": 2}));
    let v = post(&a, "/v1/chat/completions", body.clone()).await.json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3, "{v}");
    for (i, e) in content.iter().enumerate() {
        assert_eq!(e["token"], format!("w{i} "));
        assert!((e["logprob"].as_f64().unwrap() + i as f64 / 10.0).abs() < 1e-6);
        assert_eq!(e["bytes"].as_array().unwrap().len(), 3);
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        assert!(top[0]["logprob"].as_f64() >= top[1]["logprob"].as_f64());
    }
    // Without logprobs the field is null.
    let plain = post(&a, "/v1/chat/completions", chat_body("hi", json!({})))
        .await
        .json();
    assert!(plain["choices"][0]["logprobs"].is_null());

    let mut b = body;
    b["stream"] = json!(true);
    let chunks = post(&a, "/v1/chat/completions", b).await.chunks();
    let streamed = streamed_items(&chunks, "/choices/0/logprobs/content");
    assert_eq!(streamed.len(), 3);
    assert_eq!(streamed[2]["token"], "w2 ");
}

#[tokio::test]
async fn completion_logprobs_legacy_format() {
    let a = server(1, 4, None).await;
    let v = complete(&a, json!({"prompt": "x", "max_tokens": 2, "logprobs": 1}))
        .await
        .json();
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"], json!(["w0 ", "w1 "]));
    assert_eq!(lp["text_offset"], json!([0, 3]));
    assert_eq!(lp["top_logprobs"][1].as_object().unwrap().len(), 1);
    assert!((lp["token_logprobs"][1].as_f64().unwrap() + 0.1).abs() < 1e-6);
}

#[tokio::test]
async fn n_choices_whole_and_streamed() {
    let a = server(4, 8, None).await;
    let v = post(&a, "/v1/chat/completions", chat_body("hi", json!({"n": 3})))
        .await
        .json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["message"]["content"], "w0 w1 w2 ");
    }
    assert_eq!(v["usage"]["completion_tokens"], 9);

    let body = chat_body(
        "hi",
        json!({"n": 2, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let chunks = post(&a, "/v1/chat/completions", body).await.chunks();
    for i in 0..2 {
        let text: String = chunks
            .iter()
            .filter(|c| c["choices"][0]["index"] == i)
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "w0 w1 w2 ", "choice {i}");
        let finishes = chunks
            .iter()
            .filter(|c| {
                c["choices"][0]["index"] == i && c["choices"][0]["finish_reason"] == "length"
            })
            .count();
        assert_eq!(finishes, 1, "choice {i}");
    }
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 6);
}

#[tokio::test]
async fn unseeded_requests_get_fresh_seeds() {
    let a = server(2, 4, None).await;
    let text = |v: Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = text(
        post(&a, "/v1/chat/completions", chat_body("seed", json!({})))
            .await
            .json(),
    );
    let second = text(
        post(&a, "/v1/chat/completions", chat_body("seed", json!({})))
            .await
            .json(),
    );
    assert_ne!(first, second, "two unseeded requests share a seed");
    let seeded = chat_body("seed", json!({"seed": 42, "n": 2}));
    let v = post(&a, "/v1/chat/completions", seeded.clone())
        .await
        .json();
    assert!(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("seed=42 "));
    assert!(v["choices"][1]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("seed=43 "));
    let again = post(&a, "/v1/chat/completions", seeded).await.json();
    assert_eq!(v["choices"], again["choices"]);
}

#[tokio::test]
async fn engine_failure_is_an_error_not_a_stop() {
    let body = chat_body("panic", json!({"max_tokens": 10}));
    let (a, r) = serve_post("/v1/chat/completions", body).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "server_error");

    let r = post(
        &a,
        "/v1/chat/completions",
        chat_body("panic", json!({"max_tokens": 10, "stream": true})),
    )
    .await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(
        events.iter().any(|e| e.contains("\"server_error\"")),
        "{events:?}"
    );
    let chunks: Vec<Value> = events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&json!("error")]);

    let r = post(&a, "/v1/chat/completions", chat_body("refuse", json!({}))).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.body.contains("refused on purpose"));

    // The server goes on.
    let ok = post(
        &a,
        "/v1/chat/completions",
        chat_body("hi", json!({"user": "u1"})),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

/// `repeat_last_n`: -1 and any window past the context are the whole context; a window
/// inside it stays as asked.
#[tokio::test]
async fn repetition_windows_stop_at_the_context() {
    let a = server(1, 4, None).await;
    for (asked, got) in [(-1i64, 64), (100_000_000_000, 64), (16, 16)] {
        let body = chat_body("window", json!({"repeat_last_n": asked}));
        let v = post(&a, "/v1/chat/completions", body).await.json();
        let text = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            text.starts_with(&format!("last_n={got} ")),
            "{asked}: {text}"
        );
    }
}
