//! The HTTP server tests' fake backend and raw HTTP client.
// Each test file is its own crate and uses a part of these.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_server::api::ChatPrompt;
use ferrox_server::backend::RenderedChat;
use ferrox_server::backend::{
    Backend, BackendError, CompiledGrammar, DraftCount, Event, FinishReason, GenParams, GenSummary,
    GrammarSpec, Stepper, TokenLogprob,
};
use ferrox_server::Options;
use ferrox_tokenizer::chat_output::ToolFormat;
use ferrox_tokenizer::fim::FimInput;
use ferrox_tokenizer::template::{ChatTemplate, Message};
use ferrox_tokenizer::TokenId;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// The chunked-body decoder, which the ferrox-cli tests' blocking client includes too.
mod chunked;
use chunked::dechunk;

/// A backend whose tokens are bytes and whose engine writes `w0 w1 ...`, one word a step
/// (50 ms a step while a prompt containing "slow" runs). A prompt containing "panic" makes the
/// step panic after two words; "fault" fails that generation alone after two words, as the
/// real engine does when a step panics on one request; "refuse" is refused at admission, "seed" writes `seed=N ` ("window" `last_n=N`, the repetition window)
/// first; with log-probabilities asked for, word `i` has log-probability `-i/10`. Grammars: a
/// GBNF text containing `bad` is refused at compile time, one containing `fail` fails during
/// generation; any other compiled grammar makes the engine write `{"grammar": "<kind>"}`
/// instead of words. Chat: a message `template: SRC` is rendered through the real (sandboxed)
/// chat template `SRC` (its errors are template errors); one containing `stuck-template`
/// takes 3 s to render (a template the sandbox cannot stop).
pub struct FakeAs(pub &'static str);

/// The fake backend as `fake-model` (alias `fake:alias`).
#[allow(non_upper_case_globals)]
pub const Fake: FakeAs = FakeAs("fake-model");

/// One running fake generation: emits `w0 `, `w1 `, ... one word per step.
struct FakeGen {
    id: u64,
    i: usize,
    /// Pieces written before the words.
    script: Vec<String>,
    slow: bool,
    panic: bool,
    fault: bool,
    text: String,
    params: GenParams,
}

struct FakeStepper {
    slots: usize,
    running: Vec<FakeGen>,
    /// Steps taken: the fake's draft counters (two drafted, one accepted a step).
    steps: u64,
}

impl Stepper for FakeStepper {
    fn capacity(&self) -> usize {
        self.slots
    }
    fn active(&self) -> usize {
        self.running.len()
    }
    fn admit(&mut self, id: u64, prompt: &[TokenId], params: &GenParams) -> Result<(), String> {
        assert!(self.running.len() < self.slots, "admitted past capacity");
        let text = String::from_utf8_lossy(&prompt.iter().map(|&t| t as u8).collect::<Vec<_>>())
            .into_owned();
        if text.contains("refuse") {
            return Err("refused on purpose".into());
        }
        self.running.push(FakeGen {
            id,
            i: 0,
            slow: text.contains("slow"),
            panic: text.contains("panic"),
            fault: text.contains("fault"),
            script: if text.contains("tools") {
                [
                    "Checking.\n<tool",
                    "_call>\n{\"name\": \"get_weather\", ",
                    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                ]
                .map(String::from)
                .to_vec()
            } else if text.contains("think") {
                ["ponder", "ing</th", "ink>\n\n"].map(String::from).to_vec()
            } else {
                Vec::new()
            },
            text: if text.contains("seed") {
                format!("seed={} ", params.sampler.seed)
            } else if text.contains("window") {
                format!("last_n={} ", params.sampler.penalty_last_n)
            } else {
                String::new()
            },
            params: params.clone(),
        });
        Ok(())
    }
    fn drafter_counts(&self, out: &mut Vec<DraftCount>) {
        let (drafted, accepted) = (2 * self.steps, self.steps);
        *out = vec![DraftCount {
            drafter: "fake",
            drafted,
            accepted,
        }];
    }
    fn step(&mut self, events: &mut dyn FnMut(u64, Event)) {
        self.steps += 1;
        if self.running.iter().any(|g| g.slow) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.running.iter().any(|g| g.panic && g.i >= 2) {
            panic!("fake engine failure");
        }
        self.running.retain_mut(|g| {
            if g.fault && g.i >= 2 {
                events(
                    g.id,
                    Event::Failed("the engine failed on this request".into()),
                );
                return false;
            }
            let done = |finish, completion_tokens| {
                Event::Done(GenSummary {
                    finish,
                    completion_tokens,
                    cancelled: false,
                    stop_string: None,
                    cached_tokens: 0,
                })
            };
            if let Some(c) = &g.params.compiled {
                let spec =
                    c.0.downcast_ref::<GrammarSpec>()
                        .expect("the fake's grammar");
                assert_eq!(Some(spec), g.params.grammar.as_ref());
                match spec {
                    GrammarSpec::Gbnf(t) if t.contains("fail") => {
                        events(g.id, Event::Text("{".into()));
                        events(g.id, Event::Failed("the grammar could not continue".into()));
                        return false;
                    }
                    spec => {
                        let kind = format!("{spec:?}");
                        let kind = kind.split([' ', '(']).next().unwrap_or("");
                        events(g.id, Event::Text(format!("{{\"grammar\": \"{kind}\"}}")));
                    }
                }
                events(g.id, done(FinishReason::Stop, 1));
                return false;
            }
            if g.i >= g.params.max_tokens {
                events(g.id, done(FinishReason::Length, g.i));
                return false;
            }
            let piece = if let Some(p) = g.script.get(g.i) {
                p.clone()
            } else if g.i == 0 && !g.text.is_empty() {
                g.text.clone()
            } else {
                format!("w{} ", g.i)
            };
            if let Some(n) = g.params.logprobs {
                let lp = -(g.i as f32) / 10.0;
                let alt = |k: usize| (format!("a{k}"), vec![b'a'], lp - 1.0 - k as f32);
                events(
                    g.id,
                    Event::Logprob(TokenLogprob {
                        token: piece.clone(),
                        bytes: piece.clone().into_bytes(),
                        logprob: lp,
                        top: (0..n).map(alt).collect(),
                    }),
                );
            }
            g.i += 1;
            g.text.push_str(&piece);
            if let Some(k) = g
                .params
                .stop
                .iter()
                .position(|s| g.text.contains(s.as_str()))
            {
                let mut ev = done(FinishReason::Stop, g.i);
                if let Event::Done(s) = &mut ev {
                    s.stop_string = Some(k);
                }
                events(g.id, ev);
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

impl Backend for FakeAs {
    fn model_id(&self) -> &str {
        self.0
    }
    fn aliases(&self) -> Vec<String> {
        if self.0 == "fake-model" {
            vec!["fake:alias".into()]
        } else {
            vec![format!("{}.gguf", self.0)]
        }
    }
    fn ctx_size(&self) -> usize {
        64
    }
    fn vocab_size(&self) -> usize {
        256
    }
    fn chat_prompt(&self, chat: &ChatPrompt<'_>) -> Result<RenderedChat, BackendError> {
        let mut s = String::new();
        for m in chat.messages {
            let text = m.content.text().unwrap();
            if let Some(src) = text.strip_prefix("template: ") {
                let t = ChatTemplate::new(src, "", "")
                    .map_err(|e| BackendError::Template(e.to_string()))?;
                let msgs = [Message::user("hi")];
                s = t
                    .render(&msgs, true)
                    .map_err(|e| BackendError::Template(e.to_string()))?;
                continue;
            }
            if text.contains("stuck-template") {
                std::thread::sleep(Duration::from_secs(3));
            }
            s.push_str(&text);
        }
        if chat.tools.is_some() {
            s.push_str(" tools");
        }
        Ok(RenderedChat {
            tokens: self.text_prompt(&s),
            tool_format: ToolFormat::Hermes,
            in_reasoning: s.contains("think"),
        })
    }
    fn text_prompt(&self, text: &str) -> Vec<TokenId> {
        text.bytes().map(TokenId::from).collect()
    }
    /// `P…S…M` around the parts; a prefix starting `no-fim` plays a model without FIM tokens.
    fn fim_prompt(
        &self,
        input: &FimInput<'_>,
        _max_tokens: Option<usize>,
    ) -> Result<Vec<TokenId>, BackendError> {
        if input.prefix.starts_with("no-fim") {
            return Err(BackendError::Unsupported(
                "fill-in-the-middle is not supported by this model: its vocabulary has no prefix, suffix, middle token".into(),
            ));
        }
        let extra: String = input.extra.iter().map(|c| c.text).collect();
        let (p, s) = (input.prefix, input.suffix);
        Ok(self.text_prompt(&format!("{extra}P{p}{}S{s}M", input.prompt)))
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
    fn new_stepper(&self, slots: usize) -> Box<dyn Stepper> {
        Box::new(FakeStepper {
            slots,
            running: Vec::new(),
            steps: 0,
        })
    }
    fn compile_grammar(&self, grammar: &GrammarSpec) -> Result<CompiledGrammar, String> {
        match grammar {
            GrammarSpec::Gbnf(t) if t.contains("bad") => Err("fake: bad grammar".into()),
            g => Ok(CompiledGrammar(Arc::new(g.clone()))),
        }
    }
}

/// A server on a free local port over [`Fake`]; its address.
pub async fn server(parallel: usize, queue: usize, api_key: Option<&str>) -> String {
    let options = Options {
        api_key: api_key.map(String::from),
        ..Options::default()
    };
    server_with(parallel, queue, options).await
}

/// A fresh [`server`] (one slot, a queue of 4, no key) and its answer to one JSON `POST`: the
/// opening most tests share.
pub async fn serve_post(path: &str, body: Value) -> (String, Resp) {
    let a = server(1, 4, None).await;
    let r = post(&a, path, body).await;
    (a, r)
}

/// Serves the models of `registry` (the several-model front); its address.
pub async fn serve_registry(registry: ferrox_server::Registry) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let front = Arc::new(ferrox_server::Front::new(Arc::new(registry)));
    tokio::spawn(ferrox_server::http::serve_models_until(
        listener,
        front,
        std::future::pending(),
    ));
    addr
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The line HAProxy's agent check gets on `port` (retried while the server starts).
pub async fn agent_line(port: u16) -> String {
    let mut tries = 0;
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)).await {
            Ok(s) => break s,
            Err(e) if tries > 100 => panic!("agent port {port}: {e}"),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut line = String::new();
    s.read_to_string(&mut line).await.unwrap();
    line
}

/// [`server`] with any [`Options`].
pub async fn server_with(parallel: usize, queue: usize, options: Options) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(ferrox_server::serve(
        listener,
        Arc::new(Fake),
        parallel,
        queue,
        options,
    ));
    addr
}

pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    /// Asserts the status is `status` and the body names `needle` (an error that says what).
    pub fn assert_names(&self, status: u16, needle: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert!(self.body.contains(needle), "{}", self.body);
    }

    /// The `data:` payloads of an SSE body.
    pub fn events(&self) -> Vec<String> {
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

    /// The JSON chunks of an SSE body that ends with `[DONE]`.
    pub fn chunks(&self) -> Vec<Value> {
        let ev = self.events();
        assert_eq!(
            ev.last().map(String::as_str),
            Some("[DONE]"),
            "{}",
            self.body
        );
        ev[..ev.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect()
    }
}

/// The items of the array at JSON `pointer` (say `/choices/0/delta/tool_calls`) of every
/// streamed chunk, in order: what a stream spreads over its chunks, joined.
pub fn streamed_items<'a>(chunks: &'a [Value], pointer: &str) -> Vec<&'a Value> {
    chunks
        .iter()
        .filter_map(|c| c.pointer(pointer)?.as_array())
        .flatten()
        .collect()
}

pub async fn request(
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

/// A `POST` of `body` as it is, with content type `content_type`.
pub async fn post_raw(addr: &str, path: &str, content_type: &str, body: &str) -> Resp {
    request(addr, "POST", path, &[("Content-Type", content_type)], body).await
}

/// A JSON `POST`.
pub async fn post(addr: &str, path: &str, body: Value) -> Resp {
    post_raw(addr, path, "application/json", &body.to_string()).await
}

/// A completion request for the fake model: `{"model": "fake-model"}` with `fields` put over it.
pub async fn complete(addr: &str, fields: Value) -> Resp {
    let mut body = json!({"model": "fake-model"});
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    post(addr, "/v1/completions", body).await
}

/// A `GET` without headers.
pub async fn get(addr: &str, path: &str) -> Resp {
    request(addr, "GET", path, &[], "").await
}

/// The ids `/v1/models` lists, in order.
pub async fn model_ids(addr: &str) -> Vec<Value> {
    get(addr, "/v1/models").await.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect()
}

/// A `GET` with `Authorization: Bearer {key}`.
pub async fn get_with_key(addr: &str, path: &str, key: &str) -> Resp {
    let auth = format!("Bearer {key}");
    request(addr, "GET", path, &[("Authorization", &auth)], "").await
}

/// The value of `ferrox_{name}` on `/metrics`.
pub async fn metric(addr: &str, name: &str) -> f64 {
    let r = get(addr, "/metrics").await;
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("ferrox_{name} ")))
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits (up to 5 s) until metric `name` is `value`.
pub async fn wait_for(addr: &str, name: &str, value: f64) {
    let t = Instant::now();
    while metric(addr, name).await != value {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{name} never reached {value}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`open_stream`] once its response has begun (200) and it holds a slot.
pub async fn running_stream(addr: &str, max_tokens: usize) -> TcpStream {
    let mut s = open_stream(addr, max_tokens).await;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    wait_for(addr, "slots_busy", 1.0).await;
    s
}

/// A streaming "slow" completion of `max_tokens`, request sent, response not read.
pub async fn open_stream(addr: &str, max_tokens: usize) -> TcpStream {
    let body =
        json!({"model": "fake-model", "prompt": "slow", "max_tokens": max_tokens, "stream": true})
            .to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s
}
