//! The Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`), following
//! Anthropic's API reference: content blocks (text, tool_use, tool_result, thinking), the
//! streaming events `message_start` … `message_stop`, `stop_reason`s and `x-api-key`. Requests
//! are translated into the OpenAI chat request the server already checks and runs.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};

use super::answer::{collect, Piece, Pieces};
use super::error::Authed;
use super::generate::{prepare_chat, render, Prepared};
use super::submit::submit_one;
use super::{new_id, ApiError, Shared};
use crate::backend::{FinishReason, GenSummary};
use ferrox_tokenizer::chat_output::ToolCall;
use request::{chat_request, fold_system_turns, MessagesBody};

mod context;
mod request;

/// The request with its `context_management` edits applied (those it reports).
async fn read(s: &Shared, mut b: MessagesBody) -> Result<(MessagesBody, Vec<Value>), ApiError> {
    let applied = context::apply(s, &mut b).await?;
    Ok((b, applied))
}

pub(super) async fn count_tokens(Authed { s, body }: Authed<MessagesBody>) -> Response {
    let r = async {
        let (b, _) = read(&s, body?).await?;
        let mut req = chat_request(&b)?;
        let rendered = match render(&s, &req).await {
            Err(e) if fold_system_turns(&mut req) => render(&s, &req).await.map_err(|_| e)?,
            r => r?,
        };
        Ok::<_, ApiError>(Json(json!({"input_tokens": rendered.0.tokens.len()})).into_response())
    }
    .await;
    r.unwrap_or_else(ApiError::anthropic)
}

/// The request made ready to run. A template that refuses system turns mid-conversation gets
/// them folded into the neighbouring user turns.
async fn prepare(s: &Shared, b: &MessagesBody) -> Result<Prepared, ApiError> {
    let mut req = chat_request(b)?;
    match prepare_chat(s, &req).await {
        Err(e) if fold_system_turns(&mut req) => prepare_chat(s, &req).await.map_err(|_| e),
        r => r,
    }
}

pub(super) async fn messages(Authed { s, body }: Authed<MessagesBody>) -> Response {
    let r = async {
        let (b, applied) = read(&s, body?).await?;
        let max_tokens = match b.max_tokens {
            None => return Err(ApiError::bad("max_tokens: field required")),
            Some(m) if m < 1 => {
                return Err(ApiError::bad(format!(
                    "max_tokens must be at least 1, got {m}"
                )))
            }
            Some(m) => m as usize,
        };
        let mut p = prepare(&s, &b).await?;
        // A budget past the context is clamped to what the prompt leaves (llama-server's and
        // vLLM's answer); the generation then ends with `max_tokens`.
        p.params.max_tokens = p.params.max_tokens.min(max_tokens);
        let msg = Msg {
            id: new_id("msg"),
            model: b.model.clone(),
            input_tokens: p.prompt.len(),
            stops: p.params.stop.clone(),
            omit_thinking: b.thinking_omitted(),
            applied,
        };
        let rx = submit_one(&s, p.prompt, &p.params)?;
        let pieces = Pieces::new(rx, p.output.as_ref());
        if b.stream {
            // A long prompt's prefill sends nothing for minutes: Anthropic's `ping` events keep
            // clients' idle-stream watchdogs (Claude Code's aborts and retries) quiet.
            let ping = event("ping", json!({"type": "ping"}));
            let alive = KeepAlive::new()
                .interval(std::time::Duration::from_secs(10))
                .event(ping);
            return Ok(Sse::new(events(msg, pieces))
                .keep_alive(alive)
                .into_response());
        }
        whole(msg, pieces).await
    }
    .await;
    r.unwrap_or_else(ApiError::anthropic)
}

/// What the message object repeats.
struct Msg {
    id: String,
    model: String,
    input_tokens: usize,
    stops: Vec<String>,
    /// `thinking.display: "omitted"`: thinking blocks carry no text.
    omit_thinking: bool,
    /// `context_management.applied_edits`.
    applied: Vec<Value>,
}

impl Msg {
    /// `stop_reason` and `stop_sequence` of an ended generation.
    fn stop(&self, summary: &GenSummary, called: bool) -> (&'static str, Value) {
        if called {
            return ("tool_use", Value::Null);
        }
        match (summary.finish, summary.stop_string) {
            (FinishReason::Length, _) => ("max_tokens", Value::Null),
            (_, Some(i)) => ("stop_sequence", json!(self.stops.get(i))),
            _ => ("end_turn", Value::Null),
        }
    }

    /// Anthropic's usage: prompt tokens served from the prefix cache are cache reads.
    fn usage(&self, cached: usize, output_tokens: usize) -> Value {
        json!({
            "input_tokens": self.input_tokens - cached.min(self.input_tokens),
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": output_tokens,
        })
    }

    fn context_management(&self) -> Value {
        json!({"applied_edits": self.applied})
    }

    fn object(&self, content: Vec<Value>, stop: (&str, Value), usage: Value) -> Value {
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content,
            "stop_reason": if stop.0.is_empty() { Value::Null } else { json!(stop.0) },
            "stop_sequence": stop.1,
            "usage": usage,
            "context_management": self.context_management(),
        })
    }
}

fn tool_use(c: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": new_id("toolu"), "name": c.name, "input": c.arguments})
}

async fn whole(msg: Msg, mut pieces: Pieces) -> Result<Response, ApiError> {
    let a = collect(&mut pieces).await?;
    let mut content = Vec::new();
    if !a.reasoning.is_empty() {
        let thinking = if msg.omit_thinking { "" } else { &a.reasoning };
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
    }
    if !a.content.is_empty() || a.calls.is_empty() {
        content.push(json!({"type": "text", "text": a.content}));
    }
    content.extend(a.calls.iter().map(tool_use));
    let summary = a.summary;
    let stop = msg.stop(&summary, !a.calls.is_empty());
    let usage = msg.usage(summary.cached_tokens, summary.completion_tokens);
    Ok(Json(msg.object(content, stop, usage)).into_response())
}

fn event(kind: &str, v: Value) -> SseEvent {
    SseEvent::default().event(kind).data(v.to_string())
}

/// The streaming state: which content block is open.
struct Streaming {
    msg: Msg,
    pieces: Pieces,
    /// Index and type of the open block.
    open: Option<(usize, &'static str)>,
    next_index: usize,
    called: bool,
}

impl Streaming {
    /// Closes the open block unless it is of `kind`; opens one of `kind` (with `start`).
    fn block(&mut self, kind: &'static str, start: Value, out: &mut Vec<SseEvent>) -> usize {
        if let Some((i, k)) = self.open {
            if k == kind && kind != "tool_use" {
                return i;
            }
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
        let i = self.next_index;
        self.next_index += 1;
        self.open = Some((i, kind));
        out.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        i
    }

    fn delta(i: usize, delta: Value) -> SseEvent {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": delta}),
        )
    }

    /// The events of one piece; `None` after the last.
    fn on(&mut self, piece: Piece) -> Vec<SseEvent> {
        let mut out = Vec::new();
        match piece {
            Piece::Reasoning(t) => {
                let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                let i = self.block("thinking", start, &mut out);
                if !self.msg.omit_thinking {
                    out.push(Self::delta(
                        i,
                        json!({"type": "thinking_delta", "thinking": t}),
                    ));
                }
            }
            Piece::Content(t) => {
                let start = json!({"type": "text", "text": ""});
                let i = self.block("text", start, &mut out);
                out.push(Self::delta(i, json!({"type": "text_delta", "text": t})));
            }
            Piece::Call(c) => {
                self.called = true;
                let mut start = tool_use(&c);
                start["input"] = json!({});
                let i = self.block("tool_use", start, &mut out);
                let partial = c.arguments.to_string();
                out.push(Self::delta(
                    i,
                    json!({"type": "input_json_delta", "partial_json": partial}),
                ));
            }
            Piece::Done(summary) => {
                if self.open.is_none() {
                    // An empty answer is still one (empty) text block.
                    let start = json!({"type": "text", "text": ""});
                    self.block("text", start, &mut out);
                }
                if let Some((i, _)) = self.open.take() {
                    out.push(event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": i}),
                    ));
                }
                let (reason, seq) = self.msg.stop(&summary, self.called);
                out.push(event(
                    "message_delta",
                    json!({
                        "type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": seq},
                        "usage": self.msg.usage(summary.cached_tokens, summary.completion_tokens),
                        "context_management": self.msg.context_management(),
                    }),
                ));
                out.push(event("message_stop", json!({"type": "message_stop"})));
            }
            Piece::Failed(msg) => {
                let e = ApiError::failed(msg);
                out.push(event("error", e.anthropic_body()));
            }
        }
        out
    }
}

fn events(msg: Msg, pieces: Pieces) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let start = msg.object(Vec::new(), ("", Value::Null), msg.usage(0, 0));
    let opening = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": start}),
        ),
        event("ping", json!({"type": "ping"})),
    ];
    let st = Streaming {
        msg,
        pieces,
        open: None,
        next_index: 0,
        called: false,
    };
    let body = stream::unfold(st, |mut st| async move {
        let piece = st.pieces.next().await?;
        let out = st.on(piece);
        Some((out, st))
    });
    stream::iter([opening])
        .chain(body)
        .flat_map(|evs| stream::iter(evs.into_iter().map(Ok)))
}
