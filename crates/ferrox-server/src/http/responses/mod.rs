//! The OpenAI Responses API (`POST /v1/responses`, `GET /v1/responses/{id}`), following
//! OpenAI's API reference ("Responses"): the request is translated into the chat request the
//! server already checks and runs (`request`, `input`), the answer read back as output items
//! and streaming events (`output`), responses kept for `previous_response_id` (`store`).

mod input;
mod output;
mod request;
mod store;

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};

use super::answer::Pieces;
use super::error::{check_auth, Authed};
use super::generate::prepare_chat;
use super::submit::{finish, submit_one};
use super::{new_id, unix_now, ApiError, Shared};
use crate::api::ChatRequest;
use output::{Ended, Head, Turn};
use request::ResponsesBody;
pub(super) use store::Store;
pub use store::StoreLimits;

pub(super) async fn create(Authed { s, body }: Authed<ResponsesBody>) -> Response {
    let r = async {
        let b = body?;
        request::check(&b)?;
        let mut history = match &b.previous_response_id {
            Some(id) => s
                .responses
                .get(id)
                .ok_or_else(|| not_stored(id))?
                .history
                .to_vec(),
            None => Vec::new(),
        };
        input::messages(b.input.as_ref().unwrap_or(&Value::Null), &mut history)?;
        if history.is_empty() {
            return Err(ApiError::bad("input must not be empty").param("input"));
        }
        let messages = input::system_first(b.instructions.as_deref(), history.clone());
        let t = request::chat_request(&b, messages)?;
        let p = prepare_chat(&s, &t.chat).await?;
        let head = Head {
            id: new_id("resp"),
            created_at: unix_now(),
            echo: echo(&b, &t.chat),
            input_tokens: p.prompt.len(),
            summary: b.wants_summary(),
            encrypted: b.wants_encrypted(),
            namespaces: t.namespaces,
        };
        let rx = submit_one(&s, p.prompt, &p.params)?;
        let run = Run {
            s: s.clone(),
            turn: Turn::new(head),
            pieces: Pieces::new(rx, p.output.as_ref()),
            history,
            store: b.store(),
        };
        if b.stream {
            return Ok(Sse::new(run.events()).into_response());
        }
        run.whole().await
    }
    .await;
    finish(&s, r)
}

pub(super) async fn retrieve(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_auth(&s, &headers)?;
    let stored = s.responses.get(&id).ok_or_else(|| not_stored(&id))?;
    Ok(Json(stored.response.as_ref().clone()))
}

fn not_stored(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("response `{id}` is not stored: it was made with store: false, never existed, or was evicted from the bounded in-memory store"),
    )
    .param("previous_response_id")
    .code("response_not_found")
}

/// The request fields the response object repeats, as ferrox ran them.
fn echo(b: &ResponsesBody, chat: &ChatRequest) -> Value {
    let format = b
        .text
        .as_ref()
        .and_then(|t| t.get("format"))
        .filter(|f| !f.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "text"}));
    let reasoning = b.reasoning.clone().unwrap_or_else(|| json!({}));
    json!({
        "model": b.model,
        "instructions": b.instructions,
        "max_output_tokens": b.max_output_tokens,
        "parallel_tool_calls": chat.parallel_tool_calls.unwrap_or(true),
        "previous_response_id": b.previous_response_id,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": b.store(),
        "temperature": b.temperature,
        "top_p": b.top_p,
        "text": {"format": format},
        "tool_choice": b.tool_choice.clone().unwrap_or_else(|| json!("auto")),
        "tools": b.tools,
        "truncation": "disabled",
        "metadata": b.extra.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "user": null,
    })
}

/// One running response: its generation read back into output items.
struct Run {
    s: Shared,
    turn: Turn,
    pieces: Pieces,
    /// The conversation before this turn (without instructions).
    history: Vec<Value>,
    store: bool,
}

impl Run {
    /// The events of the next piece; the final one is stored when asked.
    async fn step(&mut self) -> Option<(Vec<Value>, Option<Ended>)> {
        let piece = self.pieces.next().await?;
        if matches!(piece, super::answer::Piece::Done(_)) && !self.turn.reasoning().is_empty() {
            let text = self.turn.reasoning().to_string();
            let tokens = super::off_workers(&self.s, move |b| b.tokenize(&text, false).len());
            self.turn.reasoning_tokens = tokens.await.unwrap_or(0);
        }
        let mut out = Vec::new();
        let ended = self.turn.on(piece, &mut out);
        if let (Some(Ended::Response(r)), true) = (&ended, self.store) {
            let mut history = std::mem::take(&mut self.history);
            history.push(self.turn.assistant_message());
            let id = self.turn.id().to_string();
            self.s.responses.put(id, r.clone(), history);
        }
        Some((out, ended))
    }

    async fn whole(mut self) -> Result<Response, ApiError> {
        while let Some((_, ended)) = self.step().await {
            match ended {
                Some(Ended::Response(r)) => return Ok(Json(r).into_response()),
                Some(Ended::Failed(msg)) => return Err(ApiError::failed(msg)),
                None => {}
            }
        }
        Err(ApiError::unfinished())
    }

    fn events(mut self) -> impl Stream<Item = Result<SseEvent, Infallible>> {
        let opening = self.turn.opening();
        let body = stream::unfold(self, |mut run| async move {
            let (out, _) = run.step().await?;
            Some((out, run))
        });
        stream::iter([opening])
            .chain(body)
            .flat_map(|evs| stream::iter(evs.into_iter().map(|v| Ok(sse(v)))))
    }
}

fn sse(v: Value) -> SseEvent {
    let kind = v["type"].as_str().unwrap_or_default().to_string();
    SseEvent::default().event(kind).data(v.to_string())
}
