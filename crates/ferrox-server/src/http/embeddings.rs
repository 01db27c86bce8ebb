//! Embeddings of the loaded model: OpenAI's `/v1/embeddings` (inputs as strings or token
//! arrays, `encoding_format` float or base64 — the official client asks for base64), Ollama's
//! `/api/embed` and its older `/api/embeddings`. Vectors are pooled and L2-normalised by the
//! backend (llama.cpp's method); the work runs on a blocking thread.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::{check_auth, parse_body, Authed};
use super::params::check_model;
use super::{ApiError, Shared};
use crate::backend::BackendError;
use ferrox_tokenizer::TokenId;

/// Most inputs one request may embed.
const MAX_INPUTS: usize = 2048;
/// Fields that change nothing ferrox computes.
const HARMLESS: &[&str] = &["user", "keep_alive", "options"];

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<TokenId>),
    IdLists(Vec<Vec<TokenId>>),
}

#[derive(Debug, Deserialize)]
pub(super) struct OpenAiBody {
    model: String,
    input: Input,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct OllamaBody {
    model: String,
    input: Input,
    /// Cut inputs longer than the context instead of failing (Ollama's default).
    #[serde(default = "yes")]
    truncate: bool,
    dimensions: Option<usize>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
pub(super) struct OllamaLegacyBody {
    model: String,
    prompt: String,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// The checks every form shares; the token lists to embed (tokenized off the async workers).
async fn token_lists(
    s: &Shared,
    model: &str,
    input: Input,
    dimensions: Option<usize>,
    extra: &Map<String, Value>,
    truncate: bool,
) -> Result<Vec<Vec<TokenId>>, ApiError> {
    if let Some(k) = extra.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return Err(ApiError::bad(format!("unsupported parameter `{k}`")).param(k.clone()));
    }
    let b = &s.backend;
    check_model(b.as_ref(), model)?;
    if dimensions.is_some() {
        return Err(ApiError::bad(
            "dimensions is not supported: this model's embeddings have a fixed size",
        )
        .param("dimensions"));
    }
    let mut lists = super::off_workers(s, move |b| match input {
        Input::Text(t) => vec![b.tokenize(&t, true)],
        Input::Texts(v) => v.iter().map(|t| b.tokenize(t, true)).collect(),
        Input::Ids(ids) => vec![ids],
        Input::IdLists(v) => v,
    })
    .await?;
    if lists.is_empty() || lists.len() > MAX_INPUTS {
        return Err(ApiError::bad(format!("input takes 1 to {MAX_INPUTS} items")).param("input"));
    }
    let (ctx, vocab) = (b.ctx_size(), b.vocab_size());
    for (i, l) in lists.iter_mut().enumerate() {
        if l.is_empty() {
            return Err(ApiError::bad(format!("input {i} is empty")).param("input"));
        }
        if let Some(bad) = l.iter().find(|&&t| t >= vocab) {
            return Err(ApiError::bad(format!(
                "input {i}: token id {bad} is outside the vocabulary (size {vocab})"
            ))
            .param("input"));
        }
        if l.len() > ctx {
            if !truncate {
                return Err(ApiError::bad(format!(
                    "input {i} has {} tokens; the context holds {ctx}",
                    l.len()
                ))
                .param("input")
                .code("context_length_exceeded"));
            }
            l.truncate(ctx);
        }
    }
    Ok(lists)
}

/// Embeds on a blocking thread; returns the vectors and the tokens they cover.
async fn run(s: &Shared, lists: Vec<Vec<TokenId>>) -> Result<(Vec<Vec<f32>>, usize), ApiError> {
    let tokens = lists.iter().map(Vec::len).sum();
    let backend = s.backend.clone();
    let vectors = tokio::task::spawn_blocking(move || backend.embed(&lists))
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "embedding failed"))?
        .map_err(|e| match e {
            BackendError::Unsupported(m) => ApiError::new(StatusCode::NOT_IMPLEMENTED, m),
            e => ApiError::bad(e.to_string()).param("input"),
        })?;
    let m = &s.scheduler.metrics;
    m.requests.fetch_add(1, Ordering::Relaxed);
    m.prompt_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    Ok((vectors, tokens))
}

/// Little-endian f32 bytes in base64 (OpenAI's `encoding_format: "base64"`).
fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (c.get(1).copied().unwrap_or(0) as u32) << 8
            | c.get(2).copied().unwrap_or(0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) async fn openai(Authed { s, body }: Authed<OpenAiBody>) -> Response {
    let r = async {
        let b = body?;
        let base64 = match b.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(ApiError::bad(format!(
                    "encoding_format must be float or base64, got `{other}`"
                ))
                .param("encoding_format"))
            }
        };
        let lists = token_lists(&s, &b.model, b.input, b.dimensions, &b.extra, false).await?;
        let (vectors, tokens) = run(&s, lists).await?;
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let e = if base64 {
                    json!(base64_f32(v))
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": i, "embedding": e})
            })
            .collect();
        Ok::<_, ApiError>(
            Json(json!({
                "object": "list", "data": data, "model": b.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }))
            .into_response(),
        )
    }
    .await;
    r.unwrap_or_else(IntoResponse::into_response)
}

pub(super) async fn ollama(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let r = async {
        check_auth(&s, &headers)?;
        let t = Instant::now();
        let b: OllamaBody = parse_body(&headers, &body)?;
        let lists = token_lists(&s, &b.model, b.input, b.dimensions, &b.extra, b.truncate).await?;
        let (vectors, tokens) = run(&s, lists).await?;
        Ok::<_, ApiError>(
            Json(json!({
                "model": b.model, "embeddings": vectors,
                "total_duration": t.elapsed().as_nanos() as u64, "load_duration": 0,
                "prompt_eval_count": tokens,
            }))
            .into_response(),
        )
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

pub(super) async fn ollama_legacy(Authed { s, body }: Authed<OllamaLegacyBody>) -> Response {
    let r = async {
        let b = body?;
        let lists = token_lists(&s, &b.model, Input::Text(b.prompt), None, &b.extra, true).await?;
        let (mut vectors, _) = run(&s, lists).await?;
        Ok::<_, ApiError>(Json(json!({"embedding": vectors.pop()})).into_response())
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_standard_alphabet() {
        // 1.0f32 = 00 00 80 3f; 2.0 = 00 00 00 40.
        assert_eq!(super::base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(super::base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(super::base64_f32(&[]), "");
    }
}
