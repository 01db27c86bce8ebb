//! The HTTP layer against a fake backend: health, model list, metrics, auth and the
//! tokenizer endpoints.

mod common;
use common::*;
use serde_json::json;

#[tokio::test]
async fn health_models_metrics() {
    let a = server(1, 4, None).await;
    let r = get(&a, "/health").await;
    assert_eq!((r.status, r.json()["status"].as_str()), (200, Some("ok")));
    let m = get(&a, "/v1/models").await.json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "fake-model");
    assert_eq!(m["data"][0]["object"], "model");
    let r = get(&a, "/metrics").await;
    assert_eq!(r.status, 200);
    for name in [
        "requests_total",
        "prompt_tokens_total",
        "completion_tokens_total",
        "queue_depth",
        "decode_tokens_per_second",
        "speculative_acceptance_ratio",
    ] {
        assert!(
            r.body.contains(&format!("\nferrox_{name} ")),
            "{name}: {}",
            r.body
        );
    }
    // After a generation, draft tokens per drafter (the fake counts two drafted and one
    // accepted a step).
    let body = json!({"model": "fake-model", "prompt": "hi", "max_tokens": 3});
    assert_eq!(post(&a, "/v1/completions", body).await.status, 200);
    let r = get(&a, "/metrics").await;
    let sample = |name: &str| -> u64 {
        let at = format!("\nferrox_{name}{{drafter=\"fake\"}} ");
        let i = r
            .body
            .find(&at)
            .unwrap_or_else(|| panic!("{name}: {}", r.body));
        let v = r.body[i + at.len()..].lines().next().unwrap();
        v.parse().unwrap()
    };
    let (drafted, accepted) = (
        sample("draft_tokens_total"),
        sample("draft_accepted_tokens_total"),
    );
    assert!(accepted > 0 && drafted == 2 * accepted, "{}", r.body);
    assert_eq!(
        r.body
            .matches("# TYPE ferrox_draft_tokens_total counter")
            .count(),
        1
    );
    assert_eq!(get(&a, "/nope").await.status, 404);
}

#[tokio::test]
async fn api_key_is_required_when_set() {
    let a = server(1, 4, Some("sekret")).await;
    let r = get(&a, "/v1/models").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    let r = get_with_key(&a, "/v1/models", "wrong").await;
    assert_eq!(r.status, 401);
    let r = get_with_key(&a, "/v1/models", "sekret").await;
    assert_eq!(r.status, 200);
    let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let r = post(&a, "/v1/chat/completions", body).await;
    assert_eq!(r.status, 401);
    assert_eq!(get(&a, "/health").await.status, 200);
}

#[tokio::test]
async fn tokenize_and_detokenize() {
    let (a, r) = serve_post("/tokenize", json!({"content": "AB", "add_special": true})).await;
    assert_eq!(r.json()["tokens"], json!([1000, 65, 66]));
    let v = post(&a, "/detokenize", json!({"tokens": [72, 105]}))
        .await
        .json();
    assert_eq!(v["content"], "Hi");
    let r = post(&a, "/detokenize", json!({"tokens": [5000]})).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("5000"));
}
