//! The HTTP layer: routes, auth, request validation, OpenAI response and SSE chunk formats
//! (OpenAI API reference, "chat.completion.chunk" / "text_completion" streaming objects).

mod error;
mod generate;
mod metrics;
mod params;
pub mod render;
mod response;
mod stream;
mod tools;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::api::{DetokenizeRequest, TokenizeRequest};
use crate::backend::{Backend, Scheduler};
pub use error::ApiError;
use error::{check_auth, parse_body};

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
    /// Chat renders still running past their timeout (`render`).
    renders_overdue: Arc<std::sync::atomic::AtomicUsize>,
}

impl AppState {
    pub fn new(backend: Arc<dyn Backend>, scheduler: Scheduler, options: Options) -> AppState {
        AppState {
            backend,
            scheduler,
            options,
            started: unix_now(),
            renders_overdue: Default::default(),
        }
    }
}

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics::metrics))
        .route("/v1/chat/completions", post(generate::chat))
        .route("/v1/completions", post(generate::completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .fallback(not_found)
        .with_state(state)
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
