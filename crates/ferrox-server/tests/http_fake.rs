//! The HTTP layer against a fake backend: OpenAI response and SSE formats, auth, every
//! bad-input case, the bounded queue, and a disconnecting client freeing its slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_server::api::ChatMessage;
use ferrox_server::backend::{
    Backend, BackendError, Engine, Event, FinishReason, GenParams, GenSummary,
};
use ferrox_server::Options;
use ferrox_tokenizer::TokenId;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Fake;

/// One running fake generation: emits `w0 `, `w1 `, ... one word per step.
struct FakeGen {
    id: u64,
    i: usize,
    slow: bool,
    text: String,
    params: GenParams,
}

struct FakeEngine {
    slots: usize,
    running: Vec<FakeGen>,
}

impl Engine for FakeEngine {
    fn capacity(&self) -> usize {
        self.slots
    }
    fn active(&self) -> usize {
        self.running.len()
    }
    fn admit(&mut self, id: u64, prompt: &[TokenId], params: &GenParams) -> Result<(), String> {
        assert!(self.running.len() < self.slots, "admitted past capacity");
        let slow = String::from_utf8_lossy(&prompt.iter().map(|&t| t as u8).collect::<Vec<_>>())
            .contains("slow");
        self.running.push(FakeGen {
            id,
            i: 0,
            slow,
            text: String::new(),
            params: params.clone(),
        });
        Ok(())
    }
    fn step(&mut self, events: &mut dyn FnMut(u64, Event)) {
        if self.running.iter().any(|g| g.slow) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.running.retain_mut(|g| {
            let done = |finish, completion_tokens| {
                Event::Done(GenSummary {
                    finish,
                    completion_tokens,
                    cancelled: false,
                })
            };
            if g.i >= g.params.max_tokens {
                events(g.id, done(FinishReason::Length, g.i));
                return false;
            }
            let piece = format!("w{} ", g.i);
            g.i += 1;
            g.text.push_str(&piece);
            if g.params.stop.iter().any(|s| g.text.contains(s.as_str())) {
                events(g.id, done(FinishReason::Stop, g.i));
                return false;
            }
            events(g.id, Event::Text(piece));
            true
        });
    }
    fn cancel(&mut self, id: u64) {
        self.running.retain(|g| g.id != id);
    }
}

impl Backend for Fake {
    fn model_id(&self) -> &str {
        "fake-model"
    }
    fn aliases(&self) -> Vec<String> {
        vec!["fake:alias".into()]
    }
    fn ctx_size(&self) -> usize {
        64
    }
    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<TokenId>, BackendError> {
        let mut s = String::new();
        for m in messages {
            s.push_str(&m.content.text().unwrap());
        }
        Ok(self.text_prompt(&s))
    }
    fn text_prompt(&self, text: &str) -> Vec<TokenId> {
        text.bytes().map(TokenId::from).collect()
    }
    fn tokenize(&self, text: &str, add_special: bool) -> Vec<TokenId> {
        let mut v = if add_special { vec![1000] } else { vec![] };
        v.extend(text.bytes().map(TokenId::from));
        v
    }
    fn detokenize(&self, ids: &[TokenId]) -> Result<String, BackendError> {
        if let Some(bad) = ids.iter().find(|&&t| t > 255) {
            return Err(BackendError::BadTokens(format!(
                "token id {bad} is outside the vocabulary"
            )));
        }
        Ok(ids.iter().map(|&t| t as u8 as char).collect())
    }
    fn new_engine(&self, slots: usize) -> Box<dyn Engine> {
        Box::new(FakeEngine {
            slots,
            running: Vec::new(),
        })
    }
}

async fn server(parallel: usize, queue: usize, api_key: Option<&str>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let options = Options {
        api_key: api_key.map(String::from),
    };
    tokio::spawn(ferrox_server::serve(
        listener,
        Arc::new(Fake),
        parallel,
        queue,
        options,
    ));
    addr
}

struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    /// The `data:` payloads of an SSE body.
    fn events(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not SSE data: {e:?}"))
                    .to_string()
            })
            .collect()
    }
}

fn dechunk(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

async fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_string(&mut raw))
        .await
        .expect("response within 30 s")
        .unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Resp {
        status,
        head: head.to_string(),
        body,
    }
}

async fn post(addr: &str, path: &str, body: Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        &body.to_string(),
    )
    .await
}

#[tokio::test]
async fn health_models_metrics() {
    let a = server(1, 4, None).await;
    let r = request(&a, "GET", "/health", &[], "").await;
    assert_eq!((r.status, r.json()["status"].as_str()), (200, Some("ok")));
    let m = request(&a, "GET", "/v1/models", &[], "").await.json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "fake-model");
    assert_eq!(m["data"][0]["object"], "model");
    let r = request(&a, "GET", "/metrics", &[], "").await;
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
    assert_eq!(request(&a, "GET", "/nope", &[], "").await.status, 404);
}

#[tokio::test]
async fn api_key_is_required_when_set() {
    let a = server(1, 4, Some("sekret")).await;
    let r = request(&a, "GET", "/v1/models", &[], "").await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    let r = request(
        &a,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer wrong")],
        "",
    )
    .await;
    assert_eq!(r.status, 401);
    let r = request(
        &a,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer sekret")],
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let r = request(
        &a,
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(request(&a, "GET", "/health", &[], "").await.status, 200);
}

#[tokio::test]
async fn chat_non_streaming() {
    let a = server(1, 4, None).await;
    let r = post(&a, "/v1/chat/completions", json!({
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
        json!({"prompt_tokens": 13, "completion_tokens": 3, "total_tokens": 16})
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
    let a = server(1, 4, None).await;
    let r = post(
        &a,
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
    let ev = r.events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
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
        json!({"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9})
    );
    // Without include_usage: no usage chunk, no usage key.
    let r = post(&a, "/v1/chat/completions", json!({
        "model": "fake-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2, "stream": true
    })).await;
    let ev = r.events();
    let last: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(last.get("usage").is_none());
}

#[tokio::test]
async fn completions_both_ways() {
    let a = server(1, 4, None).await;
    let v = post(
        &a,
        "/v1/completions",
        json!({"model": "fake-model", "prompt": "abc", "max_tokens": 2}),
    )
    .await
    .json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "w0 w1 ");
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    let r = post(
        &a,
        "/v1/completions",
        json!({"model": "fake-model", "prompt": ["abc"], "max_tokens": 3, "stream": true}),
    )
    .await;
    let ev = r.events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
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

#[tokio::test]
async fn tokenize_and_detokenize() {
    let a = server(1, 4, None).await;
    let v = post(
        &a,
        "/tokenize",
        json!({"content": "AB", "add_special": true}),
    )
    .await
    .json();
    assert_eq!(v["tokens"], json!([1000, 65, 66]));
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

/// Each bad input gets an OpenAI error JSON with the right 4xx status.
#[tokio::test]
async fn bad_input_gets_openai_errors() {
    let a = server(1, 4, None).await;
    let long = "x".repeat(100);
    let chat = |extra: Value| {
        let mut b = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "malformed JSON",
            "{\"model\": \"fake-model\", \"messages\": [".into(),
            400,
            "malformed JSON",
        ),
        ("not JSON at all", "hello".into(), 400, "malformed JSON"),
        (
            "wrong type",
            chat(json!({"messages": "hi"})).to_string(),
            400,
            "invalid request",
        ),
        (
            "wrong type max_tokens",
            chat(json!({"max_tokens": "ten"})).to_string(),
            400,
            "invalid request",
        ),
        (
            "missing messages",
            json!({"model": "fake-model"}).to_string(),
            400,
            "messages",
        ),
        (
            "unknown model",
            chat(json!({"model": "gpt-4o"})).to_string(),
            404,
            "gpt-4o",
        ),
        (
            "empty messages",
            chat(json!({"messages": []})).to_string(),
            400,
            "messages must not be empty",
        ),
        (
            "bad role",
            chat(json!({"messages": [{"role": "wizard", "content": "x"}]})).to_string(),
            400,
            "role",
        ),
        (
            "prompt longer than context",
            chat(json!({"messages": [{"role": "user", "content": long}]})).to_string(),
            400,
            "maximum context length",
        ),
        (
            "max_tokens beyond context",
            chat(json!({"max_tokens": 1000})).to_string(),
            400,
            "does not fit",
        ),
        (
            "max_tokens zero",
            chat(json!({"max_tokens": 0})).to_string(),
            400,
            "at least 1",
        ),
        ("n > 1", chat(json!({"n": 2})).to_string(), 400, "n = 2"),
        (
            "temperature",
            chat(json!({"temperature": 7})).to_string(),
            400,
            "temperature",
        ),
        ("top_p", chat(json!({"top_p": 0})).to_string(), 400, "top_p"),
    ];
    for (what, body, status, needle) in cases {
        let r = request(
            &a,
            "POST",
            "/v1/chat/completions",
            &[("Content-Type", "application/json")],
            &body,
        )
        .await;
        assert_eq!(r.status, status, "{what}: {}", r.body);
        let v = r.json();
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {v}"));
        assert!(msg.contains(needle), "{what}: {msg}");
        assert!(v["error"]["type"].is_string(), "{what}");
    }
    let r = post(
        &a,
        "/v1/completions",
        json!({"model": "fake-model", "prompt": ""}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = post(
        &a,
        "/v1/completions",
        json!({"model": "fake-model", "prompt": long}),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_str()),
        (400, Some("context_length_exceeded"))
    );
    let r = request(
        &a,
        "POST",
        "/v1/completions",
        &[("Content-Type", "text/plain")],
        "{}",
    )
    .await;
    assert_eq!(r.status, 415);
    // The server still works after all that.
    assert_eq!(
        post(
            &a,
            "/v1/completions",
            json!({"model": "fake-model", "prompt": "ok", "max_tokens": 1})
        )
        .await
        .status,
        200
    );
}

async fn metric(addr: &str, name: &str) -> f64 {
    let r = request(addr, "GET", "/metrics", &[], "").await;
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("ferrox_{name} ")))
        .unwrap()
        .parse()
        .unwrap()
}

async fn wait_for(addr: &str, name: &str, value: f64) {
    let t = Instant::now();
    while metric(addr, name).await != value {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{name} never reached {value}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn open_stream(addr: &str, max_tokens: usize) -> TcpStream {
    let body =
        json!({"model": "fake-model", "prompt": "slow", "max_tokens": max_tokens, "stream": true})
            .to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_the_slot() {
    let a = server(1, 4, None).await;
    // 60 tokens at 50 ms: 3 s if nobody cancelled it.
    let mut s = open_stream(&a, 60).await;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    wait_for(&a, "slots_busy", 1.0).await;
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
    let r = post(
        &a,
        "/v1/completions",
        json!({"model": "fake-model", "prompt": "q", "max_tokens": 2}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_503_with_retry_after() {
    let a = server(1, 1, None).await;
    let mut running = open_stream(&a, 40).await;
    let mut buf = [0u8; 1024];
    let _ = running.read(&mut buf).await.unwrap();
    wait_for(&a, "slots_busy", 1.0).await;
    let _queued = open_stream(&a, 2).await;
    let t = Instant::now();
    while metric(&a, "queue_depth").await != 1.0 {
        assert!(t.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = post(
        &a,
        "/v1/completions",
        json!({"model": "fake-model", "prompt": "q", "max_tokens": 2}),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.head.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        r.head
    );
    assert!(r.json()["error"]["message"].is_string());
    assert_eq!(metric(&a, "requests_rejected_total").await, 1.0);
}
