//! A response's output items as the answer is produced, and the streaming events that report
//! them (OpenAI API reference, "Streaming events": `response.created`,
//! `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, `response.reasoning_summary_text.delta`, …,
//! `response.completed`, each with a `sequence_number`). The whole (non-streamed) response is
//! the same state machine with its events dropped, so both forms agree.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::super::answer::Piece;
use super::super::new_id;
use super::input::encode_reasoning;
use crate::backend::{FinishReason, GenSummary};
use ferrox_tokenizer::chat_output::ToolCall;

/// What the response object repeats, fixed for the request.
pub(super) struct Head {
    pub id: String,
    pub created_at: u64,
    /// The request fields the response object echoes (model, instructions, tools, …).
    pub echo: Value,
    pub input_tokens: usize,
    /// Reasoning goes into the items' `summary` (else into their `content` only).
    pub summary: bool,
    /// Reasoning items carry `encrypted_content`.
    pub encrypted: bool,
    /// Function name → its namespace, for tools offered in a `namespace` group.
    pub namespaces: HashMap<String, String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Reasoning,
    Message,
}

/// The item being streamed.
struct Open {
    kind: Kind,
    id: String,
    text: String,
}

/// The output so far.
pub(super) struct Turn {
    head: Head,
    items: Vec<Value>,
    open: Option<Open>,
    seq: u64,
    /// The assistant turn as a chat message (for the store).
    reasoning: String,
    content: String,
    calls: Vec<Value>,
    /// Generated tokens that were reasoning (counted by the caller, who can tokenize).
    pub reasoning_tokens: usize,
}

impl Turn {
    pub fn new(head: Head) -> Turn {
        Turn {
            head,
            items: Vec::new(),
            open: None,
            seq: 0,
            reasoning: String::new(),
            content: String::new(),
            calls: Vec::new(),
            reasoning_tokens: 0,
        }
    }

    pub fn id(&self) -> &str {
        &self.head.id
    }

    /// The reasoning text so far.
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    fn event(&mut self, kind: &str, mut v: Value) -> Value {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        v
    }

    /// The response object; `usage` and the ending fields are set by the caller.
    pub fn response(&self, status: &str) -> Value {
        let mut r = json!({
            "id": self.head.id, "object": "response", "created_at": self.head.created_at,
            "status": status, "error": null, "incomplete_details": null,
            "output": self.items, "usage": null,
        });
        if let (Some(r), Some(echo)) = (r.as_object_mut(), self.head.echo.as_object()) {
            r.extend(echo.clone());
        }
        r
    }

    /// `response.created` and `response.in_progress`.
    pub fn opening(&mut self) -> Vec<Value> {
        let r = self.response("in_progress");
        let created = self.event("response.created", json!({"response": r}));
        let progress = self.event("response.in_progress", json!({"response": r}));
        vec![created, progress]
    }

    /// The assistant turn this response added, as a chat message.
    pub fn assistant_message(&self) -> Value {
        let mut m = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            m["tool_calls"] = json!(self.calls);
        }
        if !self.reasoning.is_empty() {
            m["reasoning_content"] = json!(self.reasoning);
        }
        m
    }

    /// The events of one piece (the final response from `Done` / `Failed` is `ended`).
    pub fn on(&mut self, piece: Piece, out: &mut Vec<Value>) -> Option<Ended> {
        match piece {
            Piece::Reasoning(t) => {
                self.reasoning.push_str(&t);
                self.text(Kind::Reasoning, t, out);
            }
            Piece::Content(t) => {
                self.content.push_str(&t);
                self.text(Kind::Message, t, out);
            }
            Piece::Call(c) => self.call(&c, out),
            Piece::Done(summary) => return Some(self.done(&summary, out)),
            Piece::Failed(msg) => {
                self.close(out);
                let mut r = self.response("failed");
                r["error"] = json!({"code": "server_error", "message": msg});
                out.push(self.event("response.failed", json!({"response": r})));
                return Some(Ended::Failed(msg));
            }
        }
        None
    }

    fn text(&mut self, kind: Kind, delta: String, out: &mut Vec<Value>) {
        if self.open.as_ref().is_none_or(|o| o.kind != kind) {
            self.close(out);
            self.start(kind, out);
        }
        let index = self.items.len();
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.text.push_str(&delta);
        let id = open.id.clone();
        let ev = match (kind, self.head.summary) {
            (Kind::Message, _) => self.event(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": []}),
            ),
            (Kind::Reasoning, true) => self.event(
                "response.reasoning_summary_text.delta",
                json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": delta}),
            ),
            (Kind::Reasoning, false) => self.event(
                "response.reasoning_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
            ),
        };
        out.push(ev);
    }

    fn start(&mut self, kind: Kind, out: &mut Vec<Value>) {
        let index = self.items.len();
        let open = Open {
            kind,
            id: new_id(if kind == Kind::Message { "msg" } else { "rs" }),
            text: String::new(),
        };
        let (item, part) = match kind {
            Kind::Message => (
                json!({"type": "message", "id": open.id, "status": "in_progress", "role": "assistant", "content": []}),
                (
                    "response.content_part.added",
                    "content_index",
                    output_text(""),
                ),
            ),
            Kind::Reasoning => (
                json!({"type": "reasoning", "id": open.id, "summary": []}),
                (
                    "response.reasoning_summary_part.added",
                    "summary_index",
                    summary_text(""),
                ),
            ),
        };
        let added = json!({"output_index": index, "item": item});
        out.push(self.event("response.output_item.added", added));
        if kind == Kind::Message || self.head.summary {
            let (name, key, part) = part;
            let v = json!({"item_id": open.id, "output_index": index, key: 0, "part": part});
            out.push(self.event(name, v));
        }
        self.open = Some(open);
    }

    /// Ends the open item: its `.done` events, then it joins the output.
    fn close(&mut self, out: &mut Vec<Value>) {
        let Some(Open { kind, id, text }) = self.open.take() else {
            return;
        };
        let index = self.items.len();
        let at = json!({"item_id": id, "output_index": index});
        let with = |extra: Value| {
            let mut v = at.clone();
            if let (Some(v), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                v.extend(e.clone());
            }
            v
        };
        let item = match kind {
            Kind::Message => {
                let part = output_text(&text);
                let done = with(json!({"content_index": 0, "text": text, "logprobs": []}));
                out.push(self.event("response.output_text.done", done));
                let done = with(json!({"content_index": 0, "part": part}));
                out.push(self.event("response.content_part.done", done));
                json!({"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [part]})
            }
            Kind::Reasoning => {
                let mut item = json!({"type": "reasoning", "id": id, "summary": [],
                                      "content": [{"type": "reasoning_text", "text": text}]});
                if self.head.summary {
                    let done = with(json!({"summary_index": 0, "text": text}));
                    out.push(self.event("response.reasoning_summary_text.done", done));
                    let part = summary_text(&text);
                    let done = with(json!({"summary_index": 0, "part": part}));
                    out.push(self.event("response.reasoning_summary_part.done", done));
                    item["summary"] = json!([part]);
                } else {
                    let done = with(json!({"content_index": 0, "text": text}));
                    out.push(self.event("response.reasoning_text.done", done));
                }
                if self.head.encrypted {
                    item["encrypted_content"] = json!(encode_reasoning(&text));
                }
                item
            }
        };
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.items.push(item);
    }

    fn call(&mut self, c: &ToolCall, out: &mut Vec<Value>) {
        self.close(out);
        let index = self.items.len();
        let (id, call_id, args) = (new_id("fc"), new_id("call"), c.arguments.to_string());
        let mut item = json!({"type": "function_call", "id": id, "call_id": call_id,
                              "name": c.name, "arguments": "", "status": "in_progress"});
        if let Some(ns) = self.head.namespaces.get(&c.name) {
            item["namespace"] = json!(ns);
        }
        let added = json!({"output_index": index, "item": item});
        out.push(self.event("response.output_item.added", added));
        let at = json!({"item_id": id, "output_index": index});
        let mut delta = at.clone();
        delta["delta"] = json!(args);
        out.push(self.event("response.function_call_arguments.delta", delta));
        let mut done = at;
        done["arguments"] = json!(args);
        done["name"] = json!(c.name);
        out.push(self.event("response.function_call_arguments.done", done));
        item["arguments"] = json!(args);
        item["status"] = json!("completed");
        let done = json!({"output_index": index, "item": item});
        out.push(self.event("response.output_item.done", done));
        self.items.push(item);
        self.calls.push(json!({"id": call_id, "type": "function",
                               "function": {"name": c.name, "arguments": args}}));
    }

    fn done(&mut self, summary: &GenSummary, out: &mut Vec<Value>) -> Ended {
        self.close(out);
        if self.items.is_empty() {
            // An empty answer is still one (empty) message.
            self.start(Kind::Message, out);
            self.close(out);
        }
        let cut = summary.finish == FinishReason::Length;
        let mut r = self.response(if cut { "incomplete" } else { "completed" });
        if cut {
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        r["usage"] = json!({
            "input_tokens": self.head.input_tokens,
            "input_tokens_details": {"cached_tokens": summary.cached_tokens},
            "output_tokens": summary.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens.min(summary.completion_tokens)},
            "total_tokens": self.head.input_tokens + summary.completion_tokens,
        });
        let kind = if cut {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.event(kind, json!({"response": r})));
        Ended::Response(r)
    }
}

/// How a response ended.
pub(super) enum Ended {
    /// The final response object.
    Response(Value),
    Failed(String),
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn summary_text(text: &str) -> Value {
    json!({"type": "summary_text", "text": text})
}
