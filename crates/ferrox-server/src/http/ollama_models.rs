//! Ollama's model-management routes (docs/api.md): `/api/tags` (downloaded models),
//! `/api/show` (a model's card), `/api/ps` (the loaded model), `/api/version`, `/api/pull`
//! (catalog downloads, progress as NDJSON). The model store is the binary's `Library`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::check_auth;
use super::ollama::{rfc3339, rfc3339_now};
use super::{ApiError, Shared};
use crate::library::{parameter_size, Library, ModelCard, PullStatus};

/// The Ollama API release whose routes and fields these follow (clients gate features on it).
const OLLAMA_API_VERSION: &str = "0.12.0";

pub(super) async fn version() -> Json<Value> {
    Json(json!({"version": OLLAMA_API_VERSION}))
}

fn library(o: &super::Options) -> Option<Arc<dyn Library>> {
    o.library.as_ref().map(|l| l.0.clone())
}

/// The model store, or the 404 of a server without one.
fn store(o: &super::Options) -> Result<Arc<dyn Library>, ApiError> {
    library(o).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "this server has no model store"))
}

/// Runs a library call on a blocking thread (file reads, hashing, downloads).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the model store failed"))?
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, e))
}

/// Ollama's `details` object of a card.
pub(super) fn details(c: &ModelCard) -> Value {
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": c.family,
        "families": [c.family],
        "parameter_size": parameter_size(c.parameters),
        "quantization_level": c.quantization,
    })
}

pub(super) async fn tags(State(s): State<Shared>, headers: HeaderMap) -> Response {
    let r = async {
        check_auth(&s, &headers)?;
        let entries = match library(&s.options) {
            Some(lib) => blocking(move || lib.list()).await?,
            None => Vec::new(),
        };
        let mut models: Vec<Value> = entries
            .iter()
            .map(|e| {
                json!({
                    "name": e.name,
                    "model": e.name,
                    "modified_at": rfc3339(e.modified, 0),
                    "size": e.size,
                    "digest": e.digest.clone().unwrap_or_default(),
                    "details": e.card.as_ref().map_or(json!({"format": "gguf"}), details),
                })
            })
            .collect();
        // The served model is always listed (it may be a path outside the models folder).
        let id = s.backend.model_id();
        let served = std::iter::once(id.to_string()).chain(s.backend.aliases());
        if !entries.iter().any(|e| served.clone().any(|n| n == e.name)) {
            models.push(json!({"name": id, "model": id, "modified_at": rfc3339_now(), "size": 0, "digest": "", "details": {"format": "gguf"}}));
        }
        Ok::<_, ApiError>(Json(json!({"models": models})).into_response())
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

#[derive(Deserialize)]
struct ShowBody {
    /// `name` in older clients.
    #[serde(alias = "name")]
    model: String,
    #[serde(default)]
    #[allow(dead_code)]
    verbose: bool,
}

pub(super) async fn show(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    show_with(&s.options, headers, body).await
}

/// `/api/show` for a server with these options.
pub(super) async fn show_with(o: &super::Options, headers: HeaderMap, body: Bytes) -> Response {
    let r = async {
        super::error::auth(o, &headers)?;
        let b: ShowBody = super::error::parse_body(&headers, &body)?;
        let lib = store(o)?;
        // The served model is known by its id and aliases; the store by catalog name or path.
        let name = b.model.clone();
        let c = blocking(move || lib.card(&name)).await?;
        let mut info = serde_json::Map::new();
        let a = &c.architecture;
        info.insert("general.architecture".into(), json!(a));
        info.insert("general.parameter_count".into(), json!(c.parameters));
        if let Some(n) = &c.name {
            info.insert("general.name".into(), json!(n));
        }
        for (k, v) in [
            ("context_length", c.context_length),
            ("embedding_length", c.embedding_length),
            ("block_count", c.layers),
            ("attention.head_count", c.heads),
            ("attention.head_count_kv", c.kv_heads),
            ("vocab_size", c.vocab),
        ] {
            info.insert(format!("{a}.{k}"), json!(v));
        }
        if c.experts.0 > 0 {
            info.insert(format!("{a}.expert_count"), json!(c.experts.0));
            info.insert(format!("{a}.expert_used_count"), json!(c.experts.1));
        }
        let mut capabilities = vec!["completion"];
        if c.template.as_deref().is_some_and(|t| t.contains("tools")) {
            capabilities.push("tools");
        }
        if c.template.as_deref().is_some_and(|t| t.contains("<think>")) {
            capabilities.push("thinking");
        }
        Ok(Json(json!({
            "license": "",
            "modelfile": format!("# ferrox serves GGUF files directly; no Modelfile\nFROM {}\n", b.model),
            "parameters": "",
            "template": c.template.clone().unwrap_or_default(),
            "details": details(&c),
            "model_info": info,
            "capabilities": capabilities,
            "modified_at": rfc3339_now(),
        }))
        .into_response())
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

pub(super) async fn ps(State(s): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(e) = check_auth(&s, &headers) {
        return e.ollama();
    }
    let id = s.backend.model_id().to_string();
    let card = match library(&s.options) {
        Some(lib) => {
            let name = id.clone();
            blocking(move || lib.card(&name)).await.ok()
        }
        None => None,
    };
    let size = card.as_ref().map_or(0, |c| c.size);
    Json(json!({"models": [{
        "name": id, "model": id, "size": size, "digest": "",
        "details": card.as_ref().map_or(json!({"format": "gguf"}), details),
        // Loaded for the life of the process.
        "expires_at": "2318-01-01T00:00:00Z",
        "size_vram": 0,
        "context_length": s.backend.ctx_size(),
    }]}))
    .into_response()
}

#[derive(Deserialize)]
struct PullBody {
    #[serde(alias = "name")]
    model: String,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    insecure: bool,
}

/// One progress object in Ollama's shape.
fn pull_line(p: &PullStatus) -> Value {
    match p {
        PullStatus::Message(m) => json!({"status": m}),
        PullStatus::Bytes { stage, done, total } => {
            json!({"status": stage, "digest": stage, "total": total, "completed": done})
        }
    }
}

pub(super) async fn pull(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    pull_with(&s.options, headers, body, None).await
}

/// What a server does with a model once pulled (a several-model server starts serving it);
/// an error fails the pull with its message. Called on a blocking thread.
pub(super) type Pulled = Box<dyn FnOnce(&str) -> Result<(), String> + Send>;

/// `/api/pull` for a server with these options; `then` runs after a successful download.
pub(super) async fn pull_with(
    o: &super::Options,
    headers: HeaderMap,
    body: Bytes,
    then: Option<Pulled>,
) -> Response {
    let r = async {
        super::error::auth(o, &headers)?;
        let b: PullBody = super::error::parse_body(&headers, &body)?;
        let lib = store(o)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let name = b.model.clone();
        let job = tokio::task::spawn_blocking(move || {
            let progress = |p: PullStatus| {
                let _ = tx.send(pull_line(&p));
            };
            let _ = tx.send(json!({"status": "pulling manifest"}));
            let r = lib.pull(&name, &progress);
            let r = match (r, then) {
                (Ok(()), Some(serve)) => serve(&name),
                (r, _) => r,
            };
            let _ = tx.send(match &r {
                Ok(()) => json!({"status": "success"}),
                Err(e) => json!({"error": e}),
            });
            r
        });
        if !b.stream.unwrap_or(true) {
            return match job.await {
                Ok(Ok(())) => Ok(Json(json!({"status": "success"})).into_response()),
                Ok(Err(e)) => Err(ApiError::new(StatusCode::NOT_FOUND, e)),
                Err(_) => Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the download failed",
                )),
            };
        }
        let lines = futures_util::stream::unfold(rx, |mut rx| async move {
            let v = rx.recv().await?;
            Some((
                Ok::<_, std::convert::Infallible>(Bytes::from(format!("{v}\n"))),
                rx,
            ))
        });
        let mut r = Response::new(Body::from_stream(lines));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/x-ndjson"),
        );
        Ok(r)
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}
