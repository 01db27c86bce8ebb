//! Rerank (`/v1/rerank`, llama-server's `/rerank`): the Jina / Cohere request shape — `query`,
//! `documents` (strings or `{"text": …}`; llama-server's `texts` too), `top_n`,
//! `return_documents` — answered with `results` sorted by `relevance_score` (the cross-encoder's
//! logit, as llama-server returns it). Also the guard that keeps an encoder model (embeddings,
//! rerank) off the generation routes.

use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::Authed;
use super::params::check_model;
use super::{ApiError, Shared};
use crate::backend::BackendError;

/// Most documents one request may rank.
const MAX_DOCUMENTS: usize = 1024;
/// Longest query, in bytes: a cross-encoder reads a few hundred tokens of query and document
/// together, so a longer query is a mistake rather than something to truncate.
const MAX_QUERY_BYTES: usize = 16 * 1024;
/// Fields that change nothing ferrox computes.
const HARMLESS: &[&str] = &["user", "max_chunks_per_doc", "rank_fields"];

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Document {
    Text(String),
    Object { text: String },
}

#[derive(Debug, Deserialize)]
pub(super) struct Body {
    model: Option<String>,
    query: String,
    documents: Option<Vec<Document>>,
    /// llama-server / TEI's name for the documents.
    texts: Option<Vec<Document>>,
    top_n: Option<usize>,
    return_documents: Option<bool>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

fn check(s: &Shared, b: &Body, n: usize) -> Result<(), ApiError> {
    if let Some(k) = b.extra.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return Err(ApiError::bad(format!("unsupported parameter `{k}`")).param(k.clone()));
    }
    if let Some(m) = &b.model {
        check_model(s.backend.as_ref(), m)?;
    }
    if b.query.is_empty() || b.query.len() > MAX_QUERY_BYTES {
        return Err(ApiError::bad(format!(
            "query must be 1 to {MAX_QUERY_BYTES} bytes, got {}",
            b.query.len()
        ))
        .param("query"));
    }
    if n == 0 || n > MAX_DOCUMENTS {
        return Err(ApiError::bad(format!(
            "documents must hold 1 to {MAX_DOCUMENTS} documents, got {n}"
        ))
        .param("documents"));
    }
    match b.top_n {
        Some(0) => Err(ApiError::bad("top_n must be at least 1").param("top_n")),
        Some(t) if t > n => Err(ApiError::bad(format!(
            "top_n is {t} but there are only {n} documents"
        ))
        .param("top_n")),
        _ => Ok(()),
    }
}

pub(super) async fn rerank(Authed { s, body }: Authed<Body>) -> Response {
    let r = async {
        let mut b = body?;
        let docs = match (b.documents.take(), b.texts.take()) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad("give documents or texts, not both").param("texts"))
            }
            (Some(d), None) | (None, Some(d)) => d,
            (None, None) => return Err(ApiError::bad("documents is required").param("documents")),
        };
        let docs: Vec<String> = docs
            .into_iter()
            .map(|d| match d {
                Document::Text(t) | Document::Object { text: t } => t,
            })
            .collect();
        check(&s, &b, docs.len())?;
        if let Some(i) = docs.iter().position(String::is_empty) {
            return Err(ApiError::bad(format!("document {i} is empty")).param("documents"));
        }
        let backend = s.backend.clone();
        let (query, texts) = (b.query.clone(), docs.clone());
        let scores = tokio::task::spawn_blocking(move || backend.rerank(&query, &texts))
            .await
            .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "rerank failed"))?
            .map_err(|e| match e {
                BackendError::Unsupported(m) => ApiError::bad(m).param("model"),
                e => ApiError::bad(e.to_string()).param("documents"),
            })?;
        let mut order: Vec<usize> = (0..docs.len()).collect();
        // Stable: equal scores keep document order.
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        order.truncate(b.top_n.unwrap_or(docs.len()));
        let results: Vec<Value> = order
            .iter()
            .map(|&i| {
                let mut r = json!({"index": i, "relevance_score": scores[i]});
                if b.return_documents.unwrap_or(false) {
                    r["document"] = json!({"text": docs[i]});
                }
                r
            })
            .collect();
        s.scheduler.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let model = b.model.unwrap_or_else(|| s.backend.model_id().to_string());
        Ok::<_, ApiError>(
            Json(json!({
                "id": format!("rerank-{}", super::unix_now()),
                "object": "list", "model": model, "results": results,
            }))
            .into_response(),
        )
    }
    .await;
    r.unwrap_or_else(IntoResponse::into_response)
}

/// Routes an encoder model serves; every other POST is a generation route.
const ENCODER_ROUTES: &[&str] = &[
    "/v1/embeddings",
    "/api/embed",
    "/api/embeddings",
    "/v1/rerank",
    "/rerank",
    "/tokenize",
    "/detokenize",
    "/admin/drain",
    "/api/show",
    "/api/pull",
];

/// Answers 400 to generation requests when the model does not generate (an encoder).
pub(super) async fn encoder_guard(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if s.backend.generates()
        || req.method() != Method::POST
        || ENCODER_ROUTES.contains(&req.uri().path())
    {
        return next.run(req).await;
    }
    ApiError::bad(format!(
        "`{}` is an encoder (embedding or rerank) model and does not generate text; use \
         /v1/embeddings, /api/embed or /v1/rerank",
        s.backend.model_id()
    ))
    .param("model")
    .into_response()
}
