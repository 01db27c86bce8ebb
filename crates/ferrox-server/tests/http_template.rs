//! A hostile chat template fails its own request quickly and never holds up the server:
//! rendering runs off the async workers under the sandbox's limits and a timeout, and
//! `/health` keeps answering within 100 ms throughout.

mod common;
use common::*;

use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn chat(content: &str) -> serde_json::Value {
    json!({"model": "fake-model", "max_tokens": 2,
           "messages": [{"role": "user", "content": content}]})
}

/// Polls `/health` until `stop`, returning the slowest answer.
fn watch_health(addr: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut worst = Duration::ZERO;
        while !stop.load(Ordering::SeqCst) {
            let t = Instant::now();
            assert_eq!(get(&addr, "/health").await.status, 200);
            worst = worst.max(t.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        worst
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_templates_are_refused_within_a_second() {
    let addr = server(2, 8, None).await;
    let stop = Arc::new(AtomicBool::new(false));
    let health = watch_health(addr.clone(), stop.clone());
    let cases = [
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
        "{{ {'a': 1} | tojson(indent=2**40) }}",
        "{% for i in range(99999) %}{% for j in range(99999) %}{% set x = [i, j] | sort %}{% endfor %}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    ];
    for src in cases {
        let t = Instant::now();
        let r = post(
            &addr,
            "/v1/chat/completions",
            chat(&format!("template: {src}")),
        )
        .await;
        let took = t.elapsed();
        assert_eq!(r.status, 400, "{src}: {}", r.body);
        assert!(r.body.contains("chat template"), "{src}: {}", r.body);
        assert!(took < Duration::from_secs(1), "{src}: {took:?}");
    }
    // The server still serves chats.
    let r = post(&addr, "/v1/chat/completions", chat("hello")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    stop.store(true, Ordering::SeqCst);
    let worst = health.await.unwrap();
    assert!(worst < Duration::from_millis(100), "/health took {worst:?}");
}

/// A render the sandbox cannot stop: the request gets a 500 at the timeout; while two such
/// renders run on, new chats are refused at once (503) instead of piling up threads; the
/// server recovers when they end; `/health` answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_render_times_out_and_overdue_renders_are_bounded() {
    let addr = server(2, 8, None).await;
    let stop = Arc::new(AtomicBool::new(false));
    let health = watch_health(addr.clone(), stop.clone());
    let t = Instant::now();
    let stuck = |addr: String| async move {
        post(&addr, "/v1/chat/completions", chat("stuck-template")).await
    };
    let (a, b) = tokio::join!(stuck(addr.clone()), stuck(addr.clone()));
    let took = t.elapsed();
    for r in [&a, &b] {
        r.assert_names(500, "did not finish");
    }
    assert!(took < Duration::from_millis(2900), "{took:?}");
    let r = post(&addr, "/v1/chat/completions", chat("hello")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    // Completions do not render a template.
    let r = complete(&addr, json!({"prompt": "ok", "max_tokens": 1})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = post(&addr, "/v1/chat/completions", chat("hello")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    stop.store(true, Ordering::SeqCst);
    let worst = health.await.unwrap();
    assert!(worst < Duration::from_millis(100), "/health took {worst:?}");
}
