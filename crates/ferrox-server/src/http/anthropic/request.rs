//! An Anthropic Messages request (Anthropic's API reference, "Messages") as the OpenAI chat
//! request the server checks and runs: system turns where they stand, content blocks, tools
//! (deferred ones only once a `tool_reference` loads them), `thinking` and `output_config`.
//! `anthropic-beta` flags are accepted whatever they name: a flag only unlocks request fields,
//! and each field is checked on its own (one ferrox does not implement is refused by name), so a
//! client's new flag never breaks it.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::ApiError;
use crate::api::{chat_json, ChatMessage, ChatRequest, MessageContent};

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

/// Tool definition keys that only hint (caching, streaming granularity).
const TOOL_HINTS: &[&str] = &["cache_control", "eager_input_streaming"];

#[derive(Debug, Deserialize)]
pub(in crate::http) struct MessagesBody {
    pub model: String,
    /// Required by the Messages API (not by `count_tokens`).
    pub max_tokens: Option<i64>,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub system: Option<Content>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    /// `[{name, description, input_schema, defer_loading}]`.
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// `{type: auto | any | tool | none, name, disable_parallel_tool_use}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// `{type: "enabled", budget_tokens}`, `{type: "disabled"}`, `{type: "adaptive"}`, with
    /// `display: "summarized" | "omitted"`.
    #[serde(default)]
    pub thinking: Option<Value>,
    /// `{effort, format: {type: "json_schema", schema}}`.
    #[serde(default)]
    pub output_config: Option<Value>,
    /// `{edits: [...]}` (see `context`).
    #[serde(default)]
    pub context_management: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl MessagesBody {
    /// Whether the answer's thinking text is left out (`thinking.display: "omitted"`).
    pub fn thinking_omitted(&self) -> bool {
        self.thinking
            .as_ref()
            .and_then(|t| t.get("display"))
            .and_then(Value::as_str)
            == Some("omitted")
    }
}

#[derive(Debug, Clone, Deserialize)]
pub(in crate::http) struct Message {
    pub role: String,
    pub content: Content,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(in crate::http) enum Content {
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

/// Claude Code's first system block, `x-anthropic-billing-header: cc_version=…; cch=…;`, is
/// Anthropic's billing bookkeeping, not instructions, and its `cch` changes from request to
/// request: left in, every session's prompt differs from the 20th token on and no prefix is
/// ever reused. Dropped as vLLM and SGLang do (ollama's launcher turns it off in the client).
const BILLING_LINE: &str = "x-anthropic-billing-header:";

fn without_billing_line(system: &Content) -> Content {
    match system {
        Content::Text(t) if t.starts_with(BILLING_LINE) => {
            Content::Text(t.split_once('\n').map_or("", |(_, rest)| rest).to_string())
        }
        Content::Text(_) => system.clone(),
        Content::Blocks(blocks) => Content::Blocks(
            blocks
                .iter()
                .filter(|b| {
                    let text = b.get("text").and_then(Value::as_str).unwrap_or_default();
                    !(b.get("type").and_then(Value::as_str) == Some("text")
                        && text.starts_with(BILLING_LINE))
                })
                .cloned()
                .collect(),
        ),
    }
}

/// A `tool_result`'s content as text: text blocks, and `tool_reference` blocks (the tool
/// search's answer: that tool is now loaded) as a line naming the tool.
fn tool_result_text(b: &Value) -> Result<String, ApiError> {
    let blocks = match b.get("content") {
        None | Some(Value::Null) => return Ok(String::new()),
        Some(Value::String(s)) => return Ok(s.clone()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::bad("tool_result content must be text")),
    };
    let mut out = Vec::new();
    for c in blocks {
        match c.get("type").and_then(Value::as_str) {
            Some("tool_reference") => out.push(format!(
                "Tool loaded: {}",
                c.get("tool_name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )),
            _ => out.push(text_of(&Content::Blocks(vec![c.clone()]), "tool_result")?),
        }
    }
    Ok(out.join("\n"))
}

/// One Anthropic message as OpenAI messages: a user turn's `tool_result` blocks become tool
/// turns, an assistant's `tool_use` blocks its calls, `thinking` its reasoning; a system turn
/// stays a system turn where it stands (the template renders it there).
fn openai_messages(m: &Message, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let blocks = match (m.role.as_str(), &m.content) {
        ("system", c) => {
            out.push(json!({"role": "system", "content": text_of(c, "system turn")?}));
            return Ok(());
        }
        ("user" | "assistant", Content::Text(t)) => {
            out.push(json!({"role": m.role, "content": t}));
            return Ok(());
        }
        ("user" | "assistant", Content::Blocks(b)) => b,
        (role, _) => {
            return Err(ApiError::bad(format!(
                "messages: role must be user, assistant or system, got `{role}`"
            )))
        }
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
                let content = tool_result_text(b)?;
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

/// Names of the tools a `tool_reference` block loads anywhere in the conversation.
fn referenced_tools(messages: &[Message]) -> Vec<String> {
    let mut names = Vec::new();
    for m in messages {
        let Content::Blocks(blocks) = &m.content else {
            continue;
        };
        for b in blocks.iter().filter_map(|b| b.get("content")?.as_array()) {
            for c in b {
                if c.get("type").and_then(Value::as_str) == Some("tool_reference") {
                    if let Some(n) = c.get("tool_name").and_then(Value::as_str) {
                        names.push(n.to_string());
                    }
                }
            }
        }
    }
    names
}

/// Tool definitions as OpenAI functions. A tool with `defer_loading: true` is left out of the
/// prompt until a `tool_reference` loads it (Anthropic's tool search); server tools (a `type`
/// other than `custom`) and unknown keys are refused.
fn tools(tools: &[Value], messages: &[Message]) -> Result<Vec<Value>, ApiError> {
    let loaded = referenced_tools(messages);
    let mut out = Vec::new();
    for t in tools {
        let obj = t
            .as_object()
            .ok_or_else(|| ApiError::bad("tools: each tool must be an object"))?;
        if let Some(kind) = obj.get("type").and_then(Value::as_str) {
            if kind != "custom" {
                return Err(ApiError::bad(format!(
                    "tools: server tool type `{kind}` is not supported by ferrox"
                )));
            }
        }
        let known = [
            "name",
            "description",
            "input_schema",
            "type",
            "defer_loading",
        ];
        if let Some(k) = obj
            .keys()
            .find(|k| !known.contains(&k.as_str()) && !TOOL_HINTS.contains(&k.as_str()))
        {
            return Err(ApiError::bad(format!(
                "tools: unsupported tool field `{k}`: ferrox does not implement it"
            )));
        }
        let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
        let deferred = obj.get("defer_loading") == Some(&Value::Bool(true));
        if deferred && !loaded.iter().any(|n| n == name) {
            continue;
        }
        out.push(json!({"type": "function", "function": {
            "name": name, "description": obj.get("description"),
            "parameters": obj.get("input_schema"),
        }}));
    }
    Ok(out)
}

/// The OpenAI chat request an Anthropic one stands for. `max_tokens` is left to the caller:
/// Anthropic's is clamped to what the context leaves (`super::messages`).
pub(super) fn chat_request(b: &MessagesBody) -> Result<ChatRequest, ApiError> {
    if let Some(k) = b.extra.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return Err(ApiError::bad(format!(
            "unsupported parameter `{k}`: ferrox does not implement it, and ignoring it would change the answer"
        )));
    }
    let mut messages = Vec::new();
    if let Some(sys) = &b.system {
        let text = text_of(&without_billing_line(sys), "system")?;
        messages.push(json!({"role": "system", "content": text}));
    }
    for m in &b.messages {
        openai_messages(m, &mut messages)?;
    }
    let fields = [
        ("temperature", json!(b.temperature)),
        ("top_p", json!(b.top_p)),
        ("top_k", json!(b.top_k)),
        ("stop", json!(b.stop_sequences)),
    ];
    let mut r = chat_json(&b.model, messages, fields);
    if let Some(t) = &b.tools {
        let offered = tools(t, &b.messages)?;
        if !offered.is_empty() {
            r["tools"] = json!(offered);
        }
    }
    if let Some(tc) = &b.tool_choice {
        tool_choice(tc, &mut r)?;
    }
    if let Some(t) = &b.thinking {
        thinking(t, &mut r)?;
    }
    output_config(b.output_config.as_ref(), &mut r)?;
    serde_json::from_value(r).map_err(|e| ApiError::bad(e.to_string()))
}

fn tool_choice(tc: &Value, r: &mut Value) -> Result<(), ApiError> {
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
    Ok(())
}

/// `thinking`: enabled / disabled switch the template's thinking; adaptive leaves the
/// template's own default. `display` only shapes the answer (`MessagesBody::thinking_omitted`).
fn thinking(t: &Value, r: &mut Value) -> Result<(), ApiError> {
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
    match t.get("display").and_then(Value::as_str) {
        None | Some("summarized" | "omitted") => Ok(()),
        Some(d) => Err(ApiError::bad(format!(
            "thinking.display must be summarized or omitted, got `{d}`"
        ))),
    }
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

/// Folds system turns after the first message into the neighbouring user turn (the one
/// before, else the one after; alone, one of their own), for templates that only take a
/// leading system message. False when there was none to fold.
pub(super) fn fold_system_turns(req: &mut ChatRequest) -> bool {
    let late = |i: usize, m: &ChatMessage| i > 0 && m.role == "system";
    if !req.messages.iter().enumerate().any(|(i, m)| late(i, m)) {
        return false;
    }
    let mut out: Vec<ChatMessage> = Vec::with_capacity(req.messages.len());
    let mut pending: Option<String> = None;
    for (i, m) in std::mem::take(&mut req.messages).into_iter().enumerate() {
        let text = m.content.text().unwrap_or_default();
        match out.last_mut() {
            Some(prev) if late(i, &m) && prev.role == "user" => {
                let joined = format!("{}\n\n{text}", prev.content.text().unwrap_or_default());
                prev.content = MessageContent::Text(joined);
            }
            _ if late(i, &m) => {
                pending = Some(pending.map_or(text.clone(), |p| p + "\n\n" + &text))
            }
            _ => {
                let mut m = m;
                if let Some(p) = pending.take().filter(|_| m.role == "user") {
                    m.content = MessageContent::Text(format!("{p}\n\n{text}"));
                }
                out.push(m);
            }
        }
    }
    if let Some(p) = pending {
        out.push(ChatMessage {
            role: "user".into(),
            content: MessageContent::Text(p),
            tool_calls: None,
            tool_call_id: None,
            name: None,
            reasoning_content: None,
        });
    }
    req.messages = out;
    true
}
