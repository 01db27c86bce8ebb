//! Slots and the bounded queue against a fake backend: a disconnecting client frees its slot,
//! a full queue answers 503 with Retry-After.

mod common;
use common::*;
use std::time::{Duration, Instant};

use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_the_slot() {
    let a = server(1, 4, None).await;
    // 60 tokens at 50 ms: 3 s if nobody cancelled it.
    let s = running_stream(&a, 60).await;
    let t = Instant::now();
    drop(s);
    while metric(&a, "slots_busy").await != 0.0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "slot still busy after disconnect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metric(&a, "requests_cancelled_total").await, 1.0);
    // The freed slot serves the next request at once.
    let r = complete(&a, json!({"prompt": "q", "max_tokens": 2})).await;
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_503_with_retry_after() {
    let a = server(1, 1, None).await;
    let _running = running_stream(&a, 40).await;
    let _queued = open_stream(&a, 2).await;
    let t = Instant::now();
    while metric(&a, "queue_depth").await != 1.0 {
        assert!(t.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = complete(&a, json!({"prompt": "q", "max_tokens": 2})).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.head.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        r.head
    );
    assert!(r.json()["error"]["message"].is_string());
    assert_eq!(metric(&a, "requests_rejected_total").await, 1.0);
}
