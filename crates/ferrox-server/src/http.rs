//! The HTTP layer: routes, auth, request validation, OpenAI response and SSE chunk formats
//! (OpenAI API reference, "chat.completion.chunk" / "text_completion" streaming objects).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ferrox_tokenizer::TokenId;
use futures_util::stream::{self, Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::{
    ChatRequest, CommonParams, CompletionRequest, DetokenizeRequest, ErrorBody, ErrorDetail,
    PromptField, TokenizeRequest, Usage,
};
use crate::backend::{Backend, Event, GenParams, GenSummary, Job, Scheduler, SubmitError};

/// Server settings that are not the model.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Bearer token required on every endpoint but `/health` when set.
    pub api_key: Option<String>,
}

pub struct AppState {
    pub backend: Arc<dyn Backend>,
    pub scheduler: Scheduler,
    pub options: Options,
    started: u64,
}

impl AppState {
    pub fn new(backend: Arc<dyn Backend>, scheduler: Scheduler, options: Options) -> AppState {
        AppState {
            backend,
            scheduler,
            options,
            started: unix_now(),
        }
    }
}

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .fallback(not_found)
        .with_state(state)
}

/// An OpenAI-format error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        let kind = match status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            429 | 503 => "server_overloaded",
            500..=599 => "server_error",
            _ => "invalid_request_error",
        };
        ApiError {
            status,
            body: ErrorBody {
                error: ErrorDetail {
                    message: message.into(),
                    kind,
                    param: None,
                    code: None,
                },
            },
            retry_after: None,
        }
    }
    fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    fn param(mut self, p: &'static str) -> ApiError {
        self.body.error.param = Some(p);
        self
    }
    fn code(mut self, c: &'static str) -> ApiError {
        self.body.error.code = Some(c);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn new_id(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}-{:016x}{n:x}",
        t ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

fn check_auth(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.options.api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.map(str::trim) == Some(key.as_str()) {
        Ok(())
    } else {
        Err(
            ApiError::new(StatusCode::UNAUTHORIZED, "missing or invalid API key")
                .code("invalid_api_key"),
        )
    }
}

/// Parses a JSON body ourselves so malformed JSON and wrong types get OpenAI-format 400s.
fn parse_body<T: DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, ApiError> {
    if let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        if !ct.to_ascii_lowercase().starts_with("application/json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("expected Content-Type application/json, got {ct}"),
            ));
        }
    }
    serde_json::from_slice(body).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "malformed JSON"
        } else {
            "invalid request"
        };
        ApiError::bad(format!("{what}: {e}"))
    })
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint")
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn models(State(s): State<Shared>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    check_auth(&s, &headers)?;
    Ok(Json(json!({
        "object": "list",
        "data": [{
            "id": s.backend.model_id(),
            "object": "model",
            "created": s.started,
            "owned_by": "ferrox",
        }]
    })))
}

async fn metrics(State(s): State<Shared>, headers: HeaderMap) -> Result<Response, ApiError> {
    check_auth(&s, &headers)?;
    let m = &s.scheduler.metrics;
    let tokens = m.decode_tokens.load(Ordering::Relaxed);
    let nanos = m.decode_nanos.load(Ordering::Relaxed);
    let tps = if nanos > 0 {
        tokens as f64 / (nanos as f64 / 1e9)
    } else {
        0.0
    };
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, v: String| {
        out.push_str(&format!(
            "# HELP ferrox_{name} {help}\n# TYPE ferrox_{name} {kind}\nferrox_{name} {v}\n"
        ));
    };
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    metric(
        "requests_total",
        "counter",
        "Completion requests accepted.",
        ld(&m.requests),
    );
    metric(
        "request_errors_total",
        "counter",
        "Requests answered with an error.",
        ld(&m.errors),
    );
    metric(
        "requests_rejected_total",
        "counter",
        "Requests refused because the queue was full.",
        ld(&m.rejected),
    );
    metric(
        "requests_cancelled_total",
        "counter",
        "Generations stopped because the client went away.",
        ld(&m.cancelled),
    );
    metric(
        "prompt_tokens_total",
        "counter",
        "Prompt tokens received.",
        ld(&m.prompt_tokens),
    );
    metric(
        "completion_tokens_total",
        "counter",
        "Tokens generated.",
        ld(&m.completion_tokens),
    );
    metric(
        "queue_depth",
        "gauge",
        "Requests waiting for a slot.",
        m.queue_depth.load(Ordering::SeqCst).to_string(),
    );
    metric(
        "slots_busy",
        "gauge",
        "Slots generating.",
        m.busy_slots.load(Ordering::SeqCst).to_string(),
    );
    metric(
        "slots_total",
        "gauge",
        "Slots.",
        s.scheduler.parallel.to_string(),
    );
    metric(
        "decode_tokens_per_second",
        "gauge",
        "Generated tokens per second of engine time (all slots together).",
        format!("{tps:.3}"),
    );
    metric(
        "speculative_acceptance_ratio",
        "gauge",
        "Accepted draft tokens over proposed draft tokens.",
        {
            let d = m.draft_tokens.load(Ordering::Relaxed);
            let a = m.accepted_tokens.load(Ordering::Relaxed);
            format!("{:.4}", if d > 0 { a as f64 / d as f64 } else { 0.0 })
        },
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}

async fn tokenize(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    check_auth(&s, &headers)?;
    let r: TokenizeRequest = parse_body(&headers, &body)?;
    Ok(Json(
        json!({"tokens": s.backend.tokenize(&r.content, r.add_special)}),
    ))
}

async fn detokenize(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    check_auth(&s, &headers)?;
    let r: DetokenizeRequest = parse_body(&headers, &body)?;
    let text = s
        .backend
        .detokenize(&r.tokens)
        .map_err(|e| ApiError::bad(e.to_string()).param("tokens"))?;
    Ok(Json(json!({"content": text})))
}

/// Checks the shared fields; returns the generation settings.
fn validate(s: &AppState, c: &CommonParams, prompt_len: usize) -> Result<GenParams, ApiError> {
    let b = &s.backend;
    if c.model != b.model_id() && !b.aliases().iter().any(|a| a == &c.model) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "The model `{}` does not exist; this server serves `{}`",
                c.model,
                b.model_id()
            ),
        )
        .param("model")
        .code("model_not_found"));
    }
    if let Some(n) = c.n {
        if n != 1 {
            return Err(ApiError::bad(format!("n = {n} is not supported; only n = 1")).param("n"));
        }
    }
    let ctx = b.ctx_size();
    if prompt_len == 0 {
        return Err(ApiError::bad("the prompt is empty").param("messages"));
    }
    if prompt_len >= ctx {
        return Err(ApiError::bad(format!(
            "This model's maximum context length is {ctx} tokens; the prompt has {prompt_len} tokens"
        ))
        .code("context_length_exceeded"));
    }
    let room = ctx - prompt_len;
    let max_tokens = match c.max_completion_tokens.or(c.max_tokens) {
        None => room,
        Some(m) if m < 1 => {
            return Err(ApiError::bad(format!("max_tokens must be at least 1, got {m}")).param("max_tokens"))
        }
        Some(m) if m as u64 > room as u64 => {
            return Err(ApiError::bad(format!(
                "max_tokens = {m} does not fit: the context holds {ctx} tokens and the prompt uses {prompt_len}"
            ))
            .param("max_tokens")
            .code("context_length_exceeded"))
        }
        Some(m) => m as usize,
    };
    let temperature = c.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(
            ApiError::bad(format!("temperature must be in [0, 2], got {temperature}"))
                .param("temperature"),
        );
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad(format!("top_p must be in (0, 1], got {top_p}")).param("top_p"));
    }
    let min_p = c.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::bad(format!("min_p must be in [0, 1], got {min_p}")).param("min_p"));
    }
    let top_k = c.top_k.unwrap_or(0);
    if top_k < 0 {
        return Err(ApiError::bad(format!("top_k must be >= 0, got {top_k}")).param("top_k"));
    }
    let pen = |v: Option<f32>, name: &'static str| -> Result<f32, ApiError> {
        let v = v.unwrap_or(0.0);
        if (-2.0..=2.0).contains(&v) {
            Ok(v)
        } else {
            Err(ApiError::bad(format!("{name} must be in [-2, 2], got {v}")).param(name))
        }
    };
    let stop = c.stop.clone().into_vec();
    if stop.len() > 4 || stop.iter().any(String::is_empty) {
        return Err(ApiError::bad("stop takes up to 4 non-empty strings").param("stop"));
    }
    Ok(GenParams {
        max_tokens,
        stop,
        temperature,
        top_p,
        top_k: top_k as usize,
        min_p,
        presence_penalty: pen(c.presence_penalty, "presence_penalty")?,
        frequency_penalty: pen(c.frequency_penalty, "frequency_penalty")?,
        seed: c.seed.unwrap_or(0) as u64,
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let r = async {
        check_auth(&s, &headers)?;
        let req: ChatRequest = parse_body(&headers, &body)?;
        if req.messages.is_empty() {
            return Err(ApiError::bad("messages must not be empty").param("messages"));
        }
        for m in &req.messages {
            if !matches!(
                m.role.as_str(),
                "system" | "developer" | "user" | "assistant" | "tool"
            ) {
                return Err(
                    ApiError::bad(format!("unknown message role `{}`", m.role)).param("messages")
                );
            }
            if m.content.text().is_none() {
                return Err(
                    ApiError::bad("only text content parts are supported").param("messages")
                );
            }
        }
        let prompt = s
            .backend
            .chat_prompt(&req.messages)
            .map_err(|e| ApiError::bad(e.to_string()).param("messages"))?;
        let params = validate(&s, &req.common, prompt.len())?;
        start(&s, Kind::Chat, &req.common, prompt, params).await
    }
    .await;
    finish(&s, r)
}

async fn completions(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let r = async {
        check_auth(&s, &headers)?;
        let req: CompletionRequest = parse_body(&headers, &body)?;
        let text = match &req.prompt {
            PromptField::Text(t) => t.clone(),
            PromptField::Texts(v) if v.len() == 1 => v[0].clone(),
            PromptField::Texts(_) => {
                return Err(ApiError::bad("prompt must be one string").param("prompt"))
            }
        };
        if text.is_empty() {
            return Err(ApiError::bad("the prompt is empty").param("prompt"));
        }
        let prompt = s.backend.text_prompt(&text);
        let params = validate(&s, &req.common, prompt.len())?;
        start(&s, Kind::Completion, &req.common, prompt, params).await
    }
    .await;
    finish(&s, r)
}

fn finish(s: &AppState, r: Result<Response, ApiError>) -> Response {
    match r {
        Ok(r) => r,
        Err(e) => {
            s.scheduler.metrics.errors.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

async fn start(
    s: &Shared,
    kind: Kind,
    c: &CommonParams,
    prompt: Vec<TokenId>,
    params: GenParams,
) -> Result<Response, ApiError> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let prompt_tokens = prompt.len();
    s.scheduler
        .submit(Job {
            prompt,
            params,
            events: tx,
        })
        .map_err(|SubmitError::QueueFull| {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is busy; retry shortly",
            );
            e.retry_after = Some(1);
            e
        })?;
    let m = &s.scheduler.metrics;
    m.requests.fetch_add(1, Ordering::Relaxed);
    m.prompt_tokens
        .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    let meta = Meta {
        id: new_id(match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        }),
        created: unix_now(),
        model: c.model.clone(),
        kind,
        prompt_tokens,
        include_usage: c.stream_options.as_ref().is_some_and(|o| o.include_usage),
    };
    if c.stream {
        Ok(stream_response(meta, rx).into_response())
    } else {
        Ok(collect_response(meta, rx).await)
    }
}

struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    prompt_tokens: usize,
    include_usage: bool,
}

impl Meta {
    fn usage(&self, s: &GenSummary) -> Value {
        serde_json::to_value(Usage::new(self.prompt_tokens, s.completion_tokens))
            .unwrap_or(Value::Null)
    }

    /// One streamed chunk; `delta` is text (None for the role or final chunk).
    fn chunk(&self, first: bool, text: Option<&str>, finish: Option<&str>) -> Value {
        let mut v = match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "system_fingerprint": "ferrox",
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
                })
            }
            Kind::Completion => json!({
                "id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": "ferrox",
                "choices": [{"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}],
            }),
        };
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }
}

async fn collect_response(meta: Meta, mut rx: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    let mut summary = None;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Done(s) => {
                summary = Some(s);
                break;
            }
        }
    }
    let Some(summary) = summary else {
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "generation ended unexpectedly",
        )
        .into_response();
    };
    let finish = summary.finish.as_str();
    let body = match meta.kind {
        Kind::Chat => json!({
            "id": meta.id, "object": "chat.completion", "created": meta.created, "model": meta.model,
            "system_fingerprint": "ferrox",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                         "logprobs": null, "finish_reason": finish}],
            "usage": meta.usage(&summary),
        }),
        Kind::Completion => json!({
            "id": meta.id, "object": "text_completion", "created": meta.created, "model": meta.model,
            "system_fingerprint": "ferrox",
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
            "usage": meta.usage(&summary),
        }),
    };
    Json(body).into_response()
}

fn stream_response(
    meta: Meta,
    rx: UnboundedReceiver<Event>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    enum St {
        Start,
        Running,
        Usage(GenSummary),
        Done,
        End,
    }
    let data = |v: Value| SseEvent::default().data(v.to_string());
    let s = stream::unfold((St::Start, rx, meta), move |(st, rx, meta)| async move {
        match st {
            St::Start => {
                let ev = match meta.kind {
                    Kind::Chat => data(meta.chunk(true, Some(""), None)),
                    Kind::Completion => {
                        // Completions have no role chunk; go straight to text.
                        return next_text(rx, meta).await;
                    }
                };
                Some((vec![ev], (St::Running, rx, meta)))
            }
            St::Running => next_text(rx, meta).await,
            St::Usage(summary) => {
                let mut v = meta.chunk(false, None, None);
                v["choices"] = json!([]);
                v["usage"] = meta.usage(&summary);
                Some((vec![data(v)], (St::Done, rx, meta)))
            }
            St::Done => Some((
                vec![SseEvent::default().data("[DONE]")],
                (St::End, rx, meta),
            )),
            St::End => None,
        }
    });

    async fn next_text(
        mut rx: UnboundedReceiver<Event>,
        meta: Meta,
    ) -> Option<(Vec<SseEvent>, (St, UnboundedReceiver<Event>, Meta))> {
        let data = |v: Value| SseEvent::default().data(v.to_string());
        match rx.recv().await {
            Some(Event::Text(t)) => Some((
                vec![data(meta.chunk(false, Some(&t), None))],
                (St::Running, rx, meta),
            )),
            Some(Event::Done(summary)) => {
                let fin = data(meta.chunk(false, None, Some(summary.finish.as_str())));
                let next = if meta.include_usage {
                    St::Usage(summary)
                } else {
                    St::Done
                };
                Some((vec![fin], (next, rx, meta)))
            }
            None => Some((
                vec![data(
                    json!({"error": {"message": "generation ended unexpectedly", "type": "server_error", "param": null, "code": null}}),
                )],
                (St::Done, rx, meta),
            )),
        }
    }

    Sse::new(s.flat_map(|evs| stream::iter(evs.into_iter().map(Ok))))
}
