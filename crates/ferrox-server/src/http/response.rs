//! The bodies of one generation request: the whole-response JSON (`chat.completion`,
//! `text_completion`) and the pieces streamed chunks are made of, for `n` choices (OpenAI API
//! reference: the chat completion object, the legacy completion object, `logprobs`).

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::endpoint::Kind;
use super::tools::{call_json, split_answer, OutputSetup};
use super::ApiError;
use crate::api::Usage;
use crate::backend::{Event, GenSummary, TokenLogprob};

/// What every response or chunk of one request repeats.
pub(super) struct Meta {
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) kind: Kind,
    pub(super) prompt_tokens: usize,
    pub(super) include_usage: bool,
    /// The request asked for log-probabilities.
    pub(super) want_logprobs: bool,
    /// Chat: how answers are split into reasoning, content and tool calls.
    pub(super) output: Option<OutputSetup>,
}

impl Meta {
    /// Usage of the request: the prompt once, the completions of every choice, and the prompt
    /// tokens served from a cache (OpenAI's `prompt_tokens_details.cached_tokens`).
    pub(super) fn usage(&self, completion_tokens: usize, cached_tokens: usize) -> Value {
        let mut v = serde_json::to_value(Usage::new(self.prompt_tokens, completion_tokens))
            .unwrap_or(Value::Null);
        v["prompt_tokens_details"] = json!({"cached_tokens": cached_tokens});
        v
    }

    /// The `logprobs` object of a choice for these tokens (`null` when none were asked for);
    /// `offset`: the choice's text length before the first of them (completions'
    /// `text_offset`).
    pub(super) fn logprobs(&self, lps: &[TokenLogprob], offset: usize) -> Value {
        if !self.want_logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat => {
                let entry =
                    |t: &str, b: &[u8], lp: f32| json!({"token": t, "logprob": lp, "bytes": b});
                let content: Vec<Value> = lps
                    .iter()
                    .map(|l| {
                        let mut e = entry(&l.token, &l.bytes, l.logprob);
                        e["top_logprobs"] =
                            l.top.iter().map(|(t, b, lp)| entry(t, b, *lp)).collect();
                        e
                    })
                    .collect();
                json!({"content": content, "refusal": null})
            }
            Kind::Completion => {
                let mut at = offset;
                let mut offsets = Vec::with_capacity(lps.len());
                for l in lps {
                    offsets.push(at);
                    at += l.token.len();
                }
                let top: Vec<serde_json::Map<String, Value>> = lps
                    .iter()
                    .map(|l| {
                        l.top
                            .iter()
                            .map(|(t, _, lp)| (t.clone(), json!(lp)))
                            .collect()
                    })
                    .collect();
                json!({
                    "tokens": lps.iter().map(|l| &l.token).collect::<Vec<_>>(),
                    "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
        }
    }

    /// One streamed chunk of choice `index`: `text` (None for the role or final chunk), its
    /// log-probabilities, the finish reason on the last.
    pub(super) fn chunk(
        &self,
        index: usize,
        first: bool,
        text: Option<&str>,
        logprobs: Value,
        finish: Option<&str>,
    ) -> Value {
        let v = match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                return self.delta_chunk(index, delta, logprobs, finish);
            }
            Kind::Completion => json!({
                "id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": "ferrox",
                "choices": [{"index": index, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish}],
            }),
        };
        self.with_usage_slot(v)
    }

    /// A chat chunk of choice `index` carrying `delta` (content, reasoning or tool calls).
    pub(super) fn delta_chunk(
        &self,
        index: usize,
        delta: serde_json::Map<String, Value>,
        logprobs: Value,
        finish: Option<&str>,
    ) -> Value {
        self.with_usage_slot(json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": "ferrox",
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }))
    }

    /// With `include_usage`, every chunk has a `usage` field (null until the last).
    fn with_usage_slot(&self, mut v: Value) -> Value {
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }
}

/// One finished choice.
struct Choice {
    text: String,
    logprobs: Vec<TokenLogprob>,
    summary: GenSummary,
}

/// Waits for one generation's end; an engine failure is the request's 500.
async fn collect_one(mut rx: UnboundedReceiver<Event>) -> Result<Choice, ApiError> {
    let (mut text, mut logprobs) = (String::new(), Vec::new());
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Logprob(l) => logprobs.push(l),
            Event::Text(t) => text.push_str(&t),
            Event::Done(summary) => {
                return Ok(Choice {
                    text,
                    logprobs,
                    summary,
                })
            }
            Event::Failed(msg) => return Err(ApiError::failed(msg)),
        }
    }
    Err(ApiError::unfinished())
}

/// The whole response of every choice (they run concurrently; collected in order).
pub(super) async fn collect_response(meta: Meta, rxs: Vec<UnboundedReceiver<Event>>) -> Response {
    let mut choices = Vec::with_capacity(rxs.len());
    let (mut completion_tokens, mut cached_tokens) = (0, None);
    for (index, rx) in rxs.into_iter().enumerate() {
        let c = match collect_one(rx).await {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        };
        completion_tokens += c.summary.completion_tokens;
        cached_tokens.get_or_insert(c.summary.cached_tokens);
        let (mut finish, logprobs) = (c.summary.finish.as_str(), meta.logprobs(&c.logprobs, 0));
        choices.push(match (meta.kind, &meta.output) {
            (Kind::Chat, Some(setup)) => {
                let (reasoning, content, calls) = split_answer(setup, &c.text);
                let mut message = json!({"role": "assistant", "content": content, "refusal": null});
                if !reasoning.is_empty() {
                    message["reasoning_content"] = json!(reasoning);
                }
                if !calls.is_empty() {
                    message["tool_calls"] = calls.iter().map(|c| call_json(c, None)).collect();
                    if content.is_empty() {
                        message["content"] = Value::Null;
                    }
                    finish = "tool_calls";
                }
                json!({"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish})
            }
            (Kind::Chat, None) => json!({
                "index": index,
                "message": {"role": "assistant", "content": c.text, "refusal": null},
                "logprobs": logprobs, "finish_reason": finish,
            }),
            (Kind::Completion, _) => json!({
                "index": index, "text": c.text, "logprobs": logprobs, "finish_reason": finish,
            }),
        });
    }
    let object = match meta.kind {
        Kind::Chat => "chat.completion",
        Kind::Completion => "text_completion",
    };
    Json(json!({
        "id": meta.id, "object": object, "created": meta.created, "model": meta.model,
        "system_fingerprint": "ferrox",
        "choices": choices,
        "usage": meta.usage(completion_tokens, cached_tokens.unwrap_or(0)),
    }))
    .into_response()
}
