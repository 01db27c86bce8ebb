//! The Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`), following
//! Anthropic's API reference: content blocks (text, tool_use, tool_result, thinking), the
//! streaming events `message_start` … `message_stop`, `stop_reason`s and `x-api-key`. Requests
//! are translated into the OpenAI chat request the server already checks and runs.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::answer::{collect, Piece, Pieces};
use super::error::authed_body;
use super::generate::{prepare_chat, render, submit};
use super::{new_id, ApiError, Shared};
use crate::api::ChatRequest;
use crate::backend::{FinishReason, GenSummary};
use ferrox_tokenizer::chat_output::ToolCall;

/// Fields that change nothing ferrox computes (bookkeeping, routing, caching hints: ferrox
/// reuses cached prefixes on its own).
const HARMLESS: &[&str] = &[
    "metadata",
    "service_tier",
    "container",
    "cache_control",
    "inference_geo",
    "speed",
    "diagnostics",
    "user_profile_id",
    "workspace_id",
];

#[derive(Debug, Deserialize)]
struct MessagesBody {
    model: String,
    /// Required by the Messages API (not by `count_tokens`).
    max_tokens: Option<i64>,
    messages: Vec<Message>,
    #[serde(default)]
    system: Option<Content>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    #[serde(default)]
    stream: bool,
    /// `[{name, description, input_schema}]`.
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// `{type: auto | any | tool | none, name, disable_parallel_tool_use}`.
    #[serde(default)]
    tool_choice: Option<Value>,
    /// `{type: "enabled", budget_tokens}`, `{type: "disabled"}`, `{type: "adaptive"}`.
    #[serde(default)]
    thinking: Option<Value>,
    /// `{effort, format: {type: "json_schema", schema}}`.
    #[serde(default)]
    output_config: Option<Value>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Content,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

/// The text of text blocks (or a plain string); anything else is refused naming its type.
fn text_of(c: &Content, what: &str) -> Result<String, ApiError> {
    match c {
        Content::Text(t) => Ok(t.clone()),
        Content::Blocks(blocks) => {
            let mut out = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        out.push(b.get("text").and_then(Value::as_str).unwrap_or_default())
                    }
                    other => {
                        return Err(ApiError::bad(format!(
                            "{what}: content block type {} is not supported here",
                            other.unwrap_or("(none)")
                        )))
                    }
                }
            }
            Ok(out.join("\n"))
        }
    }
}

/// One Anthropic message as OpenAI messages: a user turn's `tool_result` blocks become tool
/// turns, an assistant's `tool_use` blocks its calls, `thinking` its reasoning.
fn openai_messages(m: &Message, out: &mut Vec<Value>) -> Result<(), ApiError> {
    if !matches!(m.role.as_str(), "user" | "assistant") {
        return Err(ApiError::bad(format!(
            "messages: role must be user or assistant, got `{}`",
            m.role
        )));
    }
    let blocks = match &m.content {
        Content::Text(t) => {
            out.push(json!({"role": m.role, "content": t}));
            return Ok(());
        }
        Content::Blocks(b) => b,
    };
    let (mut text, mut reasoning, mut calls) = (Vec::new(), String::new(), Vec::new());
    for b in blocks {
        let field = |k: &str| b.get(k).cloned().unwrap_or(Value::Null);
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push(field("text").as_str().unwrap_or_default().to_string()),
            Some("thinking") => reasoning.push_str(field("thinking").as_str().unwrap_or_default()),
            Some("redacted_thinking") => {}
            Some("tool_use") if m.role == "assistant" => calls.push(json!({
                "id": field("id"), "type": "function",
                "function": {"name": field("name"), "arguments": field("input").to_string()},
            })),
            Some("tool_result") if m.role == "user" => {
                let content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(a)) => text_of(&Content::Blocks(a.clone()), "tool_result")?,
                    Some(_) => return Err(ApiError::bad("tool_result content must be text")),
                };
                out.push(json!({"role": "tool", "tool_call_id": field("tool_use_id"), "content": content}));
            }
            other => {
                return Err(ApiError::bad(format!(
                    "messages: content block type {} is not supported in a {} turn",
                    other.unwrap_or("(none)"),
                    m.role
                )))
            }
        }
    }
    if !text.is_empty() || !calls.is_empty() || !reasoning.is_empty() {
        let mut v = json!({"role": m.role, "content": text.join("\n")});
        if !calls.is_empty() {
            v["tool_calls"] = json!(calls);
        }
        if !reasoning.is_empty() {
            v["reasoning_content"] = json!(reasoning);
        }
        out.push(v);
    }
    Ok(())
}

/// The OpenAI chat request an Anthropic one stands for.
fn chat_request(b: &MessagesBody) -> Result<ChatRequest, ApiError> {
    if let Some(k) = b.extra.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return Err(ApiError::bad(format!(
            "unsupported parameter `{k}`: ferrox does not implement it, and ignoring it would change the answer"
        )));
    }
    let mut messages = Vec::new();
    if let Some(sys) = &b.system {
        messages.push(json!({"role": "system", "content": text_of(sys, "system")?}));
    }
    for m in &b.messages {
        openai_messages(m, &mut messages)?;
    }
    let mut r = json!({"model": b.model, "messages": messages});
    for (k, v) in [
        ("max_tokens", json!(b.max_tokens)),
        ("temperature", json!(b.temperature)),
        ("top_p", json!(b.top_p)),
        ("top_k", json!(b.top_k)),
        ("stop", json!(b.stop_sequences)),
    ] {
        if !v.is_null() {
            r[k] = v;
        }
    }
    if let Some(tools) = &b.tools {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.get("name"), "description": t.get("description"),
                    "parameters": t.get("input_schema"),
                }})
            })
            .collect();
        r["tools"] = json!(tools);
    }
    if let Some(tc) = &b.tool_choice {
        let kind = tc.get("type").and_then(Value::as_str).unwrap_or("auto");
        r["tool_choice"] = match kind {
            "auto" => json!("auto"),
            "any" => json!("required"),
            "none" => json!("none"),
            "tool" => json!({"type": "function", "function": {"name": tc.get("name")}}),
            other => {
                return Err(ApiError::bad(format!(
                    "tool_choice type must be auto, any, tool or none, got `{other}`"
                )))
            }
        };
        if tc.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            r["parallel_tool_calls"] = json!(false);
        }
    }
    if let Some(t) = &b.thinking {
        // Adaptive: the template's own default decides.
        match t.get("type").and_then(Value::as_str) {
            Some("enabled" | "between_tools") => {
                r["chat_template_kwargs"] = json!({"enable_thinking": true})
            }
            Some("disabled") => r["chat_template_kwargs"] = json!({"enable_thinking": false}),
            Some("adaptive") => {}
            _ => {
                return Err(ApiError::bad(
                    "thinking.type must be enabled, disabled, adaptive or between_tools",
                ))
            }
        }
    }
    output_config(b.output_config.as_ref(), &mut r)?;
    serde_json::from_value(r).map_err(|e| ApiError::bad(e.to_string()))
}

/// `output_config`: the effort (gpt-oss-style templates' `reasoning_effort`; the top levels
/// are its highest) and a JSON-schema output format (structured output).
fn output_config(c: Option<&Value>, r: &mut Value) -> Result<(), ApiError> {
    let Some(c) = c.filter(|c| !c.is_null()) else {
        return Ok(());
    };
    match c.get("effort").and_then(Value::as_str) {
        None => {}
        Some(e @ ("low" | "medium" | "high")) => r["reasoning_effort"] = json!(e),
        Some("xhigh" | "max") => r["reasoning_effort"] = json!("high"),
        Some(e) => {
            return Err(ApiError::bad(format!(
                "output_config.effort `{e}` is unknown"
            )))
        }
    }
    if let Some(f) = c.get("format").filter(|f| !f.is_null()) {
        if f.get("type").and_then(Value::as_str) != Some("json_schema") {
            return Err(ApiError::bad(
                "output_config.format.type must be json_schema",
            ));
        }
        r["response_format"] = json!({"type": "json_schema", "json_schema": {
            "name": "output", "schema": f.get("schema"), "strict": true,
        }});
    }
    Ok(())
}

pub(super) async fn count_tokens(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let r = async {
        let b: MessagesBody = authed_body(&s, &headers, &body)?;
        let req = chat_request(&b)?;
        let (rendered, _) = render(&s, &req).await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": rendered.tokens.len()})).into_response())
    }
    .await;
    r.unwrap_or_else(ApiError::anthropic)
}

pub(super) async fn messages(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let r = async {
        let b: MessagesBody = authed_body(&s, &headers, &body)?;
        if b.max_tokens.is_none() {
            return Err(ApiError::bad("max_tokens: field required"));
        }
        let req = chat_request(&b)?;
        let p = prepare_chat(&s, &req).await?;
        let msg = Msg {
            id: new_id("msg"),
            model: b.model.clone(),
            input_tokens: p.prompt.len(),
            stops: p.params.stop.clone(),
        };
        let rx = submit(&s, p.prompt, &p.params, 1)?
            .pop()
            .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no generation"))?;
        let pieces = Pieces::new(rx, p.output.as_ref());
        if b.stream {
            return Ok(Sse::new(events(msg, pieces)).into_response());
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

    fn object(&self, content: Vec<Value>, stop: (&str, Value), output_tokens: usize) -> Value {
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content,
            "stop_reason": if stop.0.is_empty() { Value::Null } else { json!(stop.0) },
            "stop_sequence": stop.1,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": output_tokens},
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
        content.push(json!({"type": "thinking", "thinking": a.reasoning, "signature": ""}));
    }
    if !a.content.is_empty() || a.calls.is_empty() {
        content.push(json!({"type": "text", "text": a.content}));
    }
    content.extend(a.calls.iter().map(tool_use));
    let summary = a.summary;
    let stop = msg.stop(&summary, !a.calls.is_empty());
    Ok(Json(msg.object(content, stop, summary.completion_tokens)).into_response())
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
                out.push(Self::delta(
                    i,
                    json!({"type": "thinking_delta", "thinking": t}),
                ));
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
                        "usage": {"output_tokens": summary.completion_tokens},
                    }),
                ));
                out.push(event("message_stop", json!({"type": "message_stop"})));
            }
            Piece::Failed(msg) => {
                let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, msg);
                out.push(event("error", e.anthropic_body()));
            }
        }
        out
    }
}

fn events(msg: Msg, pieces: Pieces) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let start = msg.object(Vec::new(), ("", Value::Null), 0);
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
