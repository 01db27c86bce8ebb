//! A generation the engine fails (as the real engine does when a step panics on one request)
//! ends that request only: a 500, or an SSE error event after the text it streamed; the
//! requests running beside it finish with the text of an undisturbed run; the server goes on.

mod common;
use common::*;

use serde_json::{json, Value};

fn body(prompt: &str, stream: bool) -> Value {
    json!({"model": "fake-model", "prompt": prompt, "max_tokens": 6, "stream": stream})
}

/// The streamed text of a completion, and whether it ended with an error event.
fn streamed(r: &Resp) -> (String, bool) {
    let mut text = String::new();
    let mut failed = false;
    for e in r.events() {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&e).unwrap();
        if v.get("error").is_some() {
            failed = true;
            continue;
        }
        text.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
        failed |= v["choices"][0]["finish_reason"] == "error";
    }
    (text, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_generation_ends_only_its_request() {
    let addr = server(3, 8, None).await;
    let (a, b) = tokio::join!(
        post(&addr, "/v1/completions", body("slow a", true)),
        post(&addr, "/v1/completions", body("slow b", true)),
    );
    let clean = [streamed(&a), streamed(&b)];
    assert!(clean.iter().all(|(t, f)| !t.is_empty() && !f), "{clean:?}");

    // Streamed: an error event after the words it had; the others unchanged.
    let (a, b, bad) = tokio::join!(
        post(&addr, "/v1/completions", body("slow a", true)),
        post(&addr, "/v1/completions", body("slow b", true)),
        post(&addr, "/v1/completions", body("slow fault", true)),
    );
    assert_eq!([streamed(&a), streamed(&b)], clean);
    assert_eq!(bad.status, 200);
    let (text, failed) = streamed(&bad);
    assert!(failed, "{}", bad.body);
    assert_eq!(text, "w0 w1 ");
    assert!(bad.body.contains("server_error"), "{}", bad.body);

    // Not streamed: a 500 for it alone.
    let (a, bad) = tokio::join!(
        post(&addr, "/v1/completions", body("slow a", false)),
        post(&addr, "/v1/completions", body("slow fault", false)),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["choices"][0]["text"], clean[0].0.as_str());
    assert_eq!(bad.status, 500, "{}", bad.body);
    assert_eq!(bad.json()["error"]["type"], "server_error");

    // The engine keeps serving.
    let r = post(&addr, "/v1/completions", body("ok", false)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(metric(&addr, "slots_busy").await, 0.0);
}
