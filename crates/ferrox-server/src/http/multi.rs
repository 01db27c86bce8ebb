//! The front of a several-model server: each request goes to the model its body's `model`
//! names (through that model's own router, so every route behaves as with one model), while
//! the lists (`/v1/models`, `/api/tags`, `/api/ps` per Ollama's docs/api.md, `/metrics` with a
//! `model` label), health, drain, HAProxy's agent check and the model store's routes answer
//! for all models; a model `/api/pull` fetches is served at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::error::{auth, host_ok};
use super::ollama::rfc3339;
use super::ApiError;
use crate::models::{parse_keep_alive, ModelError, Registry};

pub struct Front {
    pub registry: Arc<Registry>,
    pub draining: AtomicBool,
    drain_requested: tokio::sync::Notify,
    started: u64,
}

type F = Arc<Front>;

impl Front {
    /// HAProxy's agent check for the whole replica: `drain` while draining, else the weight
    /// of its most loaded model.
    pub fn agent_reply(&self) -> String {
        if self.draining.load(Ordering::SeqCst) {
            return "drain\n".into();
        }
        let states = self.registry.loaded_states();
        let weight = states.iter().map(|(_, a)| a.agent_weight()).min();
        format!("ready up {}%\n", weight.unwrap_or(100))
    }
}

impl Front {
    pub fn new(registry: Arc<Registry>) -> Front {
        Front {
            registry,
            draining: AtomicBool::new(false),
            drain_requested: tokio::sync::Notify::new(),
            started: super::unix_now(),
        }
    }
}

fn router(f: F) -> Router {
    Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/health/ready", get(ready))
        .route("/admin/drain", post(drain))
        .route("/v1/models", get(models))
        .route("/api/tags", get(tags))
        .route("/api/ps", get(ps))
        .route("/metrics", get(metrics))
        .route("/api/version", get(super::ollama_models::version))
        .route("/api/show", post(show))
        .route("/api/pull", post(pull))
        .fallback(dispatch)
        .layer(axum::middleware::from_fn_with_state(f.clone(), lifecycle))
        .with_state(f)
}

/// Serves the models of `front` until `stop` or a drain (see [`super::serve_until`]).
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    front: Arc<Front>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let options = front.registry.options().clone();
    if let Some(addr) = &options.agent_addr {
        let agent = tokio::net::TcpListener::bind(addr).await?;
        let f = front.clone();
        tokio::spawn(super::lifecycle::agent(agent, move || f.agent_reply()));
    }
    // Keep-alives expire even when no request comes to notice.
    let sweeper = {
        let registry = front.registry.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let r = registry.clone();
                let _ = tokio::task::spawn_blocking(move || r.sweep()).await;
            }
        })
    };
    let shutdown = {
        let f = front.clone();
        async move {
            tokio::select! {
                _ = stop => f.draining.store(true, Ordering::SeqCst),
                _ = f.drain_requested.notified() => {}
            }
            let deadline = Instant::now() + options.drain_timeout;
            while Instant::now() < deadline && f.registry.busy() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let limits = front.registry.options().limits;
    let app = super::listen::layers(router(front), &limits);
    let r = super::listen::serve(listener, app, limits, shutdown, Duration::from_secs(1)).await;
    sweeper.abort();
    r
}

/// The request's model and keep-alive, from a JSON body.
fn peek(body: &Bytes) -> (Option<String>, Option<Value>) {
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) else {
        return (None, None);
    };
    let model = match o.remove("model").or_else(|| o.remove("name")) {
        Some(Value::String(m)) if !m.is_empty() => Some(m),
        _ => None,
    };
    (model, o.remove("keep_alive").filter(|v| !v.is_null()))
}

fn is_ollama(path: &str) -> bool {
    path.starts_with("/api/")
}

async fn dispatch(State(f): State<F>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    // The listen layers have read and bounded the body already.
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let ollama = is_ollama(parts.uri.path());
    let fail = |e: ApiError| {
        if ollama {
            e.ollama()
        } else {
            e.into_response()
        }
    };
    let (model, keep) = if parts.method == Method::POST {
        peek(&bytes)
    } else {
        (None, None)
    };
    let keep = match keep.as_ref().map(parse_keep_alive).transpose() {
        Ok(k) => k,
        Err(e) => return fail(ApiError::bad(e).param("keep_alive")),
    };
    let lease = match f.registry.acquire(model.as_deref(), keep).await {
        Ok(l) => l,
        Err(e) => {
            // Which models exist is for clients with the key.
            if let Err(a) = auth(f.registry.options(), &parts.headers) {
                return fail(a);
            }
            return fail(model_error(e));
        }
    };
    let req = Request::from_parts(parts, Body::from(bytes));
    let resp = match lease.router.clone().oneshot(req).await {
        Ok(r) => r,
        Err(e) => match e {},
    };
    // The model stays leased until its answer (a stream, maybe) has been sent.
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &lease;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

fn model_error(e: ModelError) -> ApiError {
    let status = match &e {
        ModelError::Unknown { .. } => StatusCode::NOT_FOUND,
        ModelError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        ModelError::Load(..) | ModelError::Duplicate(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut a = ApiError::new(status, e.to_string()).param("model");
    if matches!(e, ModelError::Unknown { .. }) {
        a = a.code("model_not_found");
    }
    if matches!(e, ModelError::Busy(_)) {
        a.retry_after = Some(1);
    }
    a
}

/// Host check, drain refusal and the instance header, as one model's server does.
async fn lifecycle(State(f): State<F>, req: Request, next: Next) -> Response {
    let o = f.registry.options();
    if let Err(e) = host_ok(o, req.headers()) {
        return e.into_response();
    }
    let draining = f.draining.load(Ordering::SeqCst);
    super::lifecycle::drain_guard(draining, &o.instance_id, req, next).await
}

async fn ready(State(f): State<F>) -> Response {
    if f.draining.load(Ordering::SeqCst) {
        let body = Json(json!({"status": "draining"}));
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    Json(json!({"status": "ready"})).into_response()
}

async fn drain(State(f): State<F>, headers: HeaderMap) -> Response {
    if let Err(e) = auth(f.registry.options(), &headers) {
        return e.into_response();
    }
    f.draining.store(true, Ordering::SeqCst);
    f.drain_requested.notify_one();
    (StatusCode::ACCEPTED, Json(json!({"status": "draining"}))).into_response()
}

async fn models(State(f): State<F>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    auth(f.registry.options(), &headers)?;
    let data: Vec<Value> = f
        .registry
        .names()
        .into_iter()
        .map(|(id, _)| json!({"id": id, "object": "model", "created": f.started, "owned_by": "ferrox"}))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// Every served model, with the store's details where it has them.
async fn tags(State(f): State<F>, headers: HeaderMap) -> Response {
    let r = async {
        auth(f.registry.options(), &headers)?;
        let entries = match f.registry.options().library.clone() {
            Some(lib) => super::ollama_models::blocking(move || lib.0.list()).await?,
            None => Vec::new(),
        };
        let models: Vec<Value> = f
            .registry
            .names()
            .into_iter()
            .map(|(name, size)| {
                let e = entries.iter().find(|e| e.name == name);
                json!({
                    "name": name, "model": name,
                    "modified_at": rfc3339(e.map_or(f.started, |e| e.modified), 0),
                    "size": e.map_or(size, |e| e.size),
                    "digest": e.and_then(|e| e.digest.clone()).unwrap_or_default(),
                    "details": e.and_then(|e| e.card.as_ref())
                        .map_or(json!({"format": "gguf"}), super::ollama_models::details),
                })
            })
            .collect();
        Ok::<_, ApiError>(Json(json!({"models": models})).into_response())
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

/// The loaded models, each with when its keep-alive ends.
async fn ps(State(f): State<F>, headers: HeaderMap) -> Response {
    if let Err(e) = auth(f.registry.options(), &headers) {
        return e.ollama();
    }
    let r = f.registry.clone();
    let running = tokio::task::spawn_blocking(move || r.running())
        .await
        .unwrap_or_default();
    let models: Vec<Value> = running
        .iter()
        .map(|m| {
            let expires = m.expires_at.map_or_else(
                || "2318-01-01T00:00:00Z".to_string(),
                |t| {
                    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                    rfc3339(d.as_secs(), d.subsec_nanos())
                },
            );
            json!({
                "name": m.name, "model": m.name, "size": m.size, "digest": "",
                "details": {"format": "gguf"}, "expires_at": expires,
                "size_vram": 0, "context_length": m.ctx,
            })
        })
        .collect();
    Json(json!({"models": models})).into_response()
}

/// Each loaded model's counters, labelled with its name.
async fn metrics(State(f): State<F>, headers: HeaderMap) -> Result<Response, ApiError> {
    auth(f.registry.options(), &headers)?;
    // Prometheus' text format wants each metric's samples together, after its HELP / TYPE.
    let mut groups: Vec<(String, String, String)> = Vec::new();
    for (name, app) in f.registry.loaded_states() {
        let label = format!(
            "model=\"{}\"",
            name.replace('\\', "\\\\").replace('"', "\\\"")
        );
        for line in super::metrics::render(&app).lines() {
            let (metric, sample) = match line.strip_prefix("# ") {
                Some(h) => (h.split(' ').nth(1).unwrap_or(""), None),
                // A sample with labels of its own gets the model's beside them.
                None => match line.rsplit_once(' ') {
                    Some((m, v)) => match m.split_once('{') {
                        Some((name, rest)) => (name, Some(format!("{name}{{{label},{rest} {v}\n"))),
                        None => (m, Some(format!("{m}{{{label}}} {v}\n"))),
                    },
                    None => continue,
                },
            };
            let i = match groups.iter().position(|g| g.0 == metric) {
                Some(i) => i,
                None => {
                    groups.push((metric.to_string(), String::new(), String::new()));
                    groups.len() - 1
                }
            };
            match sample {
                Some(s) => groups[i].2.push_str(&s),
                // The first model's HELP and TYPE lines describe the metric.
                None if groups[i].2.is_empty() && !groups[i].1.contains(line) => {
                    groups[i].1.push_str(line);
                    groups[i].1.push('\n');
                }
                None => {}
            }
        }
    }
    let out: String = groups.into_iter().map(|(_, h, s)| h + &s).collect();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}

async fn show(State(f): State<F>, headers: HeaderMap, body: Bytes) -> Response {
    super::ollama_models::show_with(f.registry.options(), headers, body).await
}

/// Ollama's `/api/pull`; the pulled model is then served (and listed) without a restart.
async fn pull(State(f): State<F>, headers: HeaderMap, body: Bytes) -> Response {
    let registry = f.registry.clone();
    let serve: super::ollama_models::Pulled = Box::new(move |name: &str| {
        match registry.find_or_discover(name) {
            // Downloaded, but not servable under that name (an `hf:` reference: its file
            // is, by its own name).
            Ok(()) | Err(ModelError::Unknown { .. }) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    });
    super::ollama_models::pull_with(f.registry.options(), headers, body, Some(serve)).await
}
