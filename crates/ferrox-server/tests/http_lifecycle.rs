//! Readiness, drain and the instance header (fake backend): a drain turns `/health/ready` to
//! 503 and refuses new work with 503 + `Retry-After` while a running stream finishes; the
//! agent-check port says `ready up 100%`, then `drain`.

mod common;
use common::*;

use ferrox_server::Options;
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn drain_refuses_new_work_and_lets_running_streams_finish() {
    let agent_port = free_port();
    let options = Options {
        instance_id: "replica-7".into(),
        drain_timeout: Duration::from_secs(20),
        agent_addr: Some(format!("127.0.0.1:{agent_port}")),
        ..Options::default()
    };
    let a = server_with(2, 4, options).await;
    let r = get(&a, "/health/ready").await;
    assert_eq!(r.status, 200);
    assert!(r
        .head
        .to_ascii_lowercase()
        .contains("x-ferrox-instance: replica-7"));
    assert_eq!(agent_line(agent_port).await, "ready up 100%\n");
    // A stream holds a slot through the drain.
    let mut stream = running_stream(&a, 30).await;
    let d = post(&a, "/admin/drain", json!({})).await;
    assert_eq!(d.status, 202, "{}", d.body);
    assert_eq!(get(&a, "/health/ready").await.status, 503);
    assert_eq!(get(&a, "/health").await.status, 200, "alive while draining");
    let refused = complete(&a, json!({"prompt": "hi", "max_tokens": 1})).await;
    assert_eq!(refused.status, 503);
    assert!(refused.head.to_ascii_lowercase().contains("retry-after: 1"));
    assert!(refused
        .head
        .to_ascii_lowercase()
        .contains("x-ferrox-instance: replica-7"));
    assert_eq!(agent_line(agent_port).await, "drain\n");
    // The running stream completes normally.
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_string(&mut body))
        .await
        .expect("the stream ends")
        .unwrap();
    assert!(body.contains("[DONE]"), "{body}");
    let _ = stream.shutdown().await;
    // Then the server exits: connections are refused.
    let t = std::time::Instant::now();
    while tokio::net::TcpStream::connect(&a).await.is_ok() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the drained server exits"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
