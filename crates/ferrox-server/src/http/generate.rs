//! `/v1/chat/completions` and `/v1/completions`: the request checks, submission to the
//! scheduler, and the whole-response form (the streamed form is in `stream`).

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_tokenizer::TokenId;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::{check_auth, parse_body};
use super::params::{grammar, validate};
use super::stream::stream_response;
use super::{new_id, unix_now, ApiError, AppState, Shared};
use crate::api::{ChatRequest, CommonParams, CompletionRequest, PromptField, Usage};
use crate::backend::{Event, GenParams, GenSummary, Job, SubmitError};

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Chat,
    Completion,
}

pub(super) async fn chat(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
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
        let mut params = validate(&s, &req.common, prompt.len())?;
        compile_grammar(&s, &req.common, &mut params).await?;
        start(&s, Kind::Chat, &req.common, prompt, params).await
    }
    .await;
    finish(&s, r)
}

pub(super) async fn completions(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
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
        let mut params = validate(&s, &req.common, prompt.len())?;
        compile_grammar(&s, &req.common, &mut params).await?;
        start(&s, Kind::Completion, &req.common, prompt, params).await
    }
    .await;
    finish(&s, r)
}

/// Compiles the request's grammar on a blocking thread (a large schema takes a while and must
/// not hold up an async worker); a grammar the backend refuses is a 400 naming the parameter
/// it came from, with the compiler's message.
async fn compile_grammar(
    s: &Shared,
    c: &CommonParams,
    params: &mut GenParams,
) -> Result<(), ApiError> {
    let Some(spec) = params.grammar.clone() else {
        return Ok(());
    };
    let param = grammar(c)?.map_or("response_format", |(_, p)| p);
    let backend = s.backend.clone();
    let compiled = tokio::task::spawn_blocking(move || backend.compile_grammar(&spec))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the grammar compiler failed",
            )
        })?
        .map_err(|e| ApiError::bad(e).param(param))?;
    params.compiled = Some(compiled);
    Ok(())
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

/// What every response or chunk of one generation repeats.
pub(super) struct Meta {
    id: String,
    created: u64,
    model: String,
    pub(super) kind: Kind,
    prompt_tokens: usize,
    pub(super) include_usage: bool,
}

impl Meta {
    pub(super) fn usage(&self, s: &GenSummary) -> Value {
        serde_json::to_value(Usage::new(self.prompt_tokens, s.completion_tokens))
            .unwrap_or(Value::Null)
    }

    /// One streamed chunk; `delta` is text (None for the role or final chunk).
    pub(super) fn chunk(&self, first: bool, text: Option<&str>, finish: Option<&str>) -> Value {
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
    let mut error = None;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Error(e) => error = Some(e),
            Event::Done(s) => {
                summary = Some(s);
                break;
            }
        }
    }
    if let Some(e) = error {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e).into_response();
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
