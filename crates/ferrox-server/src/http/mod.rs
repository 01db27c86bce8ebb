//! The HTTP layer: routes, auth, request validation, OpenAI response and SSE chunk formats
//! (OpenAI API reference, "chat.completion.chunk" / "text_completion" streaming objects).

mod answer;
mod anthropic;
mod embeddings;
mod endpoint;
mod error;
mod generate;
mod infill;
mod lifecycle;
mod listen;
mod metrics;
mod multi;
mod ollama;
mod ollama_models;
mod page;
mod params;
pub mod render;
mod reqlog;
mod rerank;
mod response;
mod responses;
mod slots;
mod stream;
mod submit;
mod tools;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::api::{DetokenizeRequest, TokenizeRequest};
use crate::backend::{Backend, Scheduler};
use crate::library::Library;
pub use error::ApiError;
pub use listen::Limits;
pub use multi::{serve_until as serve_models_until, Front};
pub use responses::StoreLimits;

use error::{check_auth, Authed};

/// Server settings that are not the model.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Bearer token required on every endpoint but `/health` (and the chat page) when set.
    pub api_key: Option<String>,
    /// The models on disk, for Ollama's model-management routes.
    pub library: Option<LibraryHandle>,
    /// Serve the chat page at `/` (and its assets under `/ui/`); otherwise they are 404s.
    pub webui: bool,
    /// This replica's name, sent as `X-Ferrox-Instance` on every response.
    pub instance_id: String,
    /// How long a drain waits for running requests before the server exits anyway.
    pub drain_timeout: std::time::Duration,
    /// Where to answer HAProxy's agent checks (`host:port`), if anywhere.
    pub agent_addr: Option<String>,
    /// Connection and request limits.
    pub limits: Limits,
    /// Without an API key: Host names accepted besides IP literals and `localhost` (a web
    /// page on another site reaching the server through DNS rebinding names its own host).
    pub allowed_hosts: Vec<String>,
    /// How many `/v1/responses` results are kept for `previous_response_id`.
    pub response_store: StoreLimits,
    /// Log one line per request on stderr (route, status, tokens, times).
    pub log_requests: bool,
    /// Where llama-server's `/slots/{id}?action=save|restore` keep their files (off: 501).
    pub slot_save_path: Option<std::path::PathBuf>,
}

/// A shared [`Library`].
#[derive(Clone)]
pub struct LibraryHandle(pub Arc<dyn Library>);

impl std::fmt::Debug for LibraryHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Library")
    }
}

pub struct AppState {
    pub backend: Arc<dyn Backend>,
    pub scheduler: Scheduler,
    pub options: Options,
    started: u64,
    /// Chat renders still running past their timeout (`render`).
    renders_overdue: Arc<std::sync::atomic::AtomicUsize>,
    /// Draining: not ready, new requests refused.
    pub draining: std::sync::atomic::AtomicBool,
    drain_requested: tokio::sync::Notify,
    /// Stored `/v1/responses` results.
    responses: responses::Store,
}

impl AppState {
    pub fn new(backend: Arc<dyn Backend>, scheduler: Scheduler, options: Options) -> AppState {
        let responses = responses::Store::new(options.response_store);
        AppState {
            backend,
            scheduler,
            options,
            started: unix_now(),
            renders_overdue: Default::default(),
            draining: Default::default(),
            drain_requested: tokio::sync::Notify::new(),
            responses,
        }
    }
}

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    let mut r = Router::new();
    if state.options.webui {
        r = page::routes(r);
    }
    r.route("/health", get(health))
        .route("/health/ready", get(lifecycle::ready))
        .route("/admin/drain", post(lifecycle::drain))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics::metrics))
        .route("/v1/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completions))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::retrieve))
        .route("/infill", post(infill::infill))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(embeddings::ollama))
        .route("/api/embeddings", post(embeddings::ollama_legacy))
        .route("/api/tags", get(ollama_models::tags))
        .route("/api/show", post(ollama_models::show))
        .route("/api/ps", get(ollama_models::ps))
        .route("/api/version", get(ollama_models::version))
        .route("/api/pull", post(ollama_models::pull))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/slots/{id}", post(slots::action))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rerank::encoder_guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            reqlog::middleware,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            lifecycle::middleware,
        ))
        .with_state(state)
}

/// Serves `state` on `listener` until `stop` resolves or a drain is asked for over HTTP;
/// then drains (readiness off, new requests 503, running ones finish within
/// `Options::drain_timeout`) and returns. Answers agent checks when configured.
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    state: Shared,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Some(addr) = &state.options.agent_addr {
        let agent = tokio::net::TcpListener::bind(addr).await?;
        let s = state.clone();
        tokio::spawn(lifecycle::agent(agent, move || s.agent_reply()));
    }
    let shutdown = {
        let state = state.clone();
        async move {
            tokio::select! {
                _ = stop => state.start_drain(),
                _ = state.drain_requested.notified() => {}
            }
            state.drained(state.options.drain_timeout).await;
        }
    };
    let limits = state.options.limits;
    let app = listen::layers(router(state), &limits);
    // After the drain, open connections (idle keep-alives, a stream past the timeout) get a
    // moment to flush.
    listen::serve(
        listener,
        app,
        limits,
        shutdown,
        std::time::Duration::from_secs(1),
    )
    .await
}

/// Runs tokenizer work on a blocking thread: a long prompt takes milliseconds that the async
/// workers (which also answer `/health` and stream every response) must not spend.
pub(super) async fn off_workers<T: Send + 'static>(
    s: &Shared,
    f: impl FnOnce(&dyn Backend) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let backend = s.backend.clone();
    tokio::task::spawn_blocking(move || f(backend.as_ref()))
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the tokenizer failed"))
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

async fn tokenize(Authed { s, body }: Authed<TokenizeRequest>) -> Result<Json<Value>, ApiError> {
    let r = body?;
    let tokens = off_workers(&s, move |b| b.tokenize(&r.content, r.add_special)).await?;
    Ok(Json(json!({"tokens": tokens})))
}

async fn detokenize(
    Authed { s, body }: Authed<DetokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let r = body?;
    let text = off_workers(&s, move |b| b.detokenize(&r.tokens))
        .await?
        .map_err(|e| ApiError::bad(e.to_string()).param("tokens"))?;
    Ok(Json(json!({"content": text})))
}
