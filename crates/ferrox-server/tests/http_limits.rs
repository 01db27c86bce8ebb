//! Limits against hostile clients (fake backend): request headers and idle connections time
//! out, a stalled body times out, oversized bodies get 413, the connection cap holds new
//! connections back, a body without `Content-Type: application/json` gets 415, and without an
//! API key only IP literals, `localhost` and allowed names are accepted as Host.

mod common;
use common::*;

use ferrox_server::{Limits, Options};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn tight() -> Options {
    Options {
        limits: Limits {
            max_connections: 2,
            header_timeout: Duration::from_millis(400),
            body_timeout: Duration::from_millis(400),
            max_body_bytes: 4096,
        },
        allowed_hosts: vec!["ferrox.internal".into()],
        ..Options::default()
    }
}

/// Reads until the server closes; what it sent and how long that took.
async fn until_closed(s: &mut TcpStream) -> (String, Duration) {
    let t = Instant::now();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

/// Connects, sends `bytes` (nothing when empty) and waits for the server to close.
async fn send_and_wait(a: &str, bytes: &[u8]) -> (String, Duration) {
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(bytes).await.unwrap();
    until_closed(&mut s).await
}

#[tokio::test]
async fn slow_and_idle_clients_are_cut_off() {
    let a = server_with(1, 4, tight()).await;
    // Half a request line, then nothing.
    let (_, took) =
        send_and_wait(&a, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n").await;
    assert!(took < Duration::from_secs(3), "header deadline: {took:?}");
    // A connection that never sends anything.
    let (_, took) = send_and_wait(&a, b"").await;
    assert!(took < Duration::from_secs(3), "idle deadline: {took:?}");
    // A kept-alive connection that goes quiet after a request.
    let (resp, took) = send_and_wait(&a, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        took < Duration::from_secs(3),
        "keep-alive idle deadline: {took:?}"
    );
    // A body that stops arriving.
    let (resp, took) = send_and_wait(&a, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"").await;
    assert!(took < Duration::from_secs(3), "body deadline: {took:?}");
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp}");
    // A body trickled a byte at a time: the deadline is for the whole body.
    let mut s = TcpStream::connect(&a).await.unwrap();
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
        .await
        .unwrap();
    let t = Instant::now();
    for _ in 0..20 {
        if s.write_all(b" ").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (resp, _) = until_closed(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp}");
    assert!(t.elapsed() < Duration::from_secs(4));
    // The server still answers.
    assert_eq!(get(&a, "/health").await.status, 200);
}

#[tokio::test]
async fn bodies_hosts_and_content_types_are_checked() {
    let a = server_with(1, 4, tight()).await;
    let big = json!({"model": "fake-model", "prompt": "x".repeat(8000)}).to_string();
    let r = post_raw(&a, "/v1/completions", "application/json", &big).await;
    assert_eq!(r.status, 413, "{}", r.body);
    let ok = json!({"model": "fake-model", "prompt": "hi", "max_tokens": 1}).to_string();
    let r = request(&a, "POST", "/v1/completions", &[], &ok).await;
    assert_eq!(r.status, 415, "no content type: {}", r.body);
    let r = post_raw(&a, "/v1/completions", "text/plain", &ok).await;
    assert_eq!(r.status, 415);
    let with_host = |host: &'static str| {
        let (a, ok) = (a.clone(), ok.clone());
        async move {
            let req = format!("POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{ok}", ok.len());
            let (resp, _) = send_and_wait(&a, req.as_bytes()).await;
            resp.split(' ').nth(1).unwrap_or("").to_string()
        }
    };
    assert_eq!(with_host("evil.example:8080").await, "403");
    assert_eq!(with_host("localhost:8080").await, "200");
    assert_eq!(with_host("127.0.0.1").await, "200");
    assert_eq!(with_host("[::1]:8080").await, "200");
    assert_eq!(with_host("ferrox.internal").await, "200");
    // With an API key the key is the gate, whatever the Host.
    let keyed = server_with(
        1,
        4,
        Options {
            api_key: Some("k".into()),
            ..tight()
        },
    )
    .await;
    let req = "GET /v1/models HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer k\r\nConnection: close\r\n\r\n";
    assert!(send_and_wait(&keyed, req.as_bytes())
        .await
        .0
        .starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn the_connection_cap_holds_new_connections_back() {
    let mut o = tight();
    o.limits.header_timeout = Duration::from_secs(5);
    let a = server_with(1, 4, o).await;
    // Two connections that hold their permits (headers not finished).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(&a).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let third = tokio::spawn({
        let a = a.clone();
        async move {
            let t = Instant::now();
            let r = get(&a, "/health").await;
            (r.status, t.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !third.is_finished(),
        "a third connection waits for a permit"
    );
    drop(held);
    let (status, took) = third.await.unwrap();
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(500), "{took:?}");
}
