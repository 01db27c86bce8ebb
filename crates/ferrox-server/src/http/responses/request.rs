//! A `/v1/responses` request body (OpenAI API reference, "Create a model response") and its
//! translation into the chat request the server already checks and runs: `tools` (function
//! tools, namespaces of them), `tool_choice`, `text.format`, `reasoning`, `include` and the
//! sampling fields. What ferrox does not implement and would change the answer is a 400
//! naming it.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::ApiError;
use crate::api::{chat_json, ChatRequest};

/// Fields that change nothing ferrox computes: bookkeeping for the client's side, routing
/// keys (`prompt_cache_key` is read by deploy/haproxy.cfg; ferrox reuses cached prefixes on
/// its own), stream framing.
const HARMLESS: &[&str] = &[
    "metadata",
    "user",
    "safety_identifier",
    "service_tier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "client_metadata",
    "stream_options",
];

/// The `include` values ferrox returns.
const INCLUDES: &[&str] = &["reasoning.encrypted_content"];

#[derive(Debug, Deserialize)]
pub(in crate::http) struct ResponsesBody {
    pub model: String,
    /// A string (one user message) or a list of input items.
    pub input: Option<Value>,
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Vec<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// `{format: {type: text | json_object | json_schema, ...}, verbosity}`.
    pub text: Option<Value>,
    /// `{effort, summary}`.
    pub reasoning: Option<Value>,
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_logprobs: Option<i64>,
    /// Not in OpenAI's reference; the chat routes take it too (reproducible sampling).
    pub seed: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub include: Vec<String>,
    pub truncation: Option<String>,
    pub background: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ResponsesBody {
    /// The response is kept for `previous_response_id` (the API's default).
    pub fn store(&self) -> bool {
        self.store.unwrap_or(true)
    }

    /// Reasoning items carry the reasoning text in `encrypted_content`.
    pub fn wants_encrypted(&self) -> bool {
        self.include
            .iter()
            .any(|i| i == "reasoning.encrypted_content")
    }

    /// `reasoning.summary` was asked for: reasoning items carry it as their summary.
    pub fn wants_summary(&self) -> bool {
        self.reasoning
            .as_ref()
            .and_then(|r| r.get("summary"))
            .is_some_and(|s| !s.is_null())
    }
}

/// The chat request a Responses one stands for (`messages` from `input`, prior turns
/// included), and the namespace each namespaced function belongs to.
pub(super) struct Translated {
    pub chat: ChatRequest,
    pub namespaces: HashMap<String, String>,
}

/// Refuses what ferrox cannot do faithfully.
pub(super) fn check(b: &ResponsesBody) -> Result<(), ApiError> {
    if let Some(k) = b.extra.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return Err(ApiError::bad(format!(
            "unsupported parameter `{k}`: ferrox does not implement it, and ignoring it would change the answer"
        ))
        .param(k.clone())
        .code("unsupported_parameter"));
    }
    if let Some(i) = b.include.iter().find(|i| !INCLUDES.contains(&i.as_str())) {
        return Err(ApiError::bad(format!(
            "include `{i}` is not supported (supported: {})",
            INCLUDES.join(", ")
        ))
        .param("include"));
    }
    let refuse = |cond: bool, p: &str, msg: &str| match cond {
        true => Err(ApiError::bad(msg.to_string()).param(p.to_string())),
        false => Ok(()),
    };
    refuse(
        b.background == Some(true),
        "background",
        "background responses are not supported",
    )?;
    refuse(
        b.truncation.as_deref().is_some_and(|t| t != "disabled"),
        "truncation",
        "truncation must be \"disabled\": ferrox does not drop input items to fit the context",
    )?;
    refuse(
        b.top_logprobs.is_some_and(|n| n != 0),
        "top_logprobs",
        "top_logprobs is not supported on /v1/responses",
    )
}

/// Builds the chat request; `messages` are the conversation already translated.
pub(super) fn chat_request(
    b: &ResponsesBody,
    messages: Vec<Value>,
) -> Result<Translated, ApiError> {
    let fields = [
        ("max_tokens", json!(b.max_output_tokens)),
        ("temperature", json!(b.temperature)),
        ("top_p", json!(b.top_p)),
        ("seed", json!(b.seed)),
        ("parallel_tool_calls", json!(b.parallel_tool_calls)),
    ];
    let mut r = chat_json(&b.model, messages, fields);
    let (tools, namespaces) = tools(&b.tools)?;
    if !tools.is_empty() {
        r["tools"] = json!(tools);
    }
    if let Some(tc) = &b.tool_choice {
        r["tool_choice"] = tool_choice(tc)?;
    }
    if let Some(t) = &b.text {
        text(t, &mut r)?;
    }
    if let Some(reasoning) = &b.reasoning {
        effort(reasoning, &mut r)?;
    }
    let chat = serde_json::from_value(r).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(Translated { chat, namespaces })
}

/// Function tools (and those of `namespace` groups) as chat tools; hosted tools
/// (web_search, file_search, …) are refused: ferrox does not run them.
fn tools(list: &[Value]) -> Result<(Vec<Value>, HashMap<String, String>), ApiError> {
    let (mut out, mut namespaces) = (Vec::new(), HashMap::new());
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") => out.push(function(t, &format!("tools[{i}]"))?),
            Some("namespace") => {
                let ns = t.get("name").and_then(Value::as_str).unwrap_or_default();
                let inner = t.get("tools").and_then(Value::as_array);
                for (j, f) in inner.into_iter().flatten().enumerate() {
                    let f = function(f, &format!("tools[{i}].tools[{j}]"))?;
                    if let Some(name) = f.pointer("/function/name").and_then(Value::as_str) {
                        namespaces.insert(name.to_string(), ns.to_string());
                    }
                    out.push(f);
                }
            }
            other => {
                return Err(ApiError::bad(format!(
                    "tools[{i}]: type `{}` is not supported: ferrox offers function tools only (it runs no hosted tools)",
                    other.unwrap_or("(none)")
                ))
                .param("tools"))
            }
        }
    }
    Ok((out, namespaces))
}

/// One Responses function tool (`{type, name, description, parameters, strict}`) in the chat
/// form.
fn function(t: &Value, at: &str) -> Result<Value, ApiError> {
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(
            ApiError::bad(format!("{at}: only function tools are supported")).param("tools"),
        );
    }
    let mut f = json!({"name": t.get("name")});
    for k in ["description", "parameters", "strict"] {
        if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
            f[k] = v.clone();
        }
    }
    Ok(json!({"type": "function", "function": f}))
}

fn tool_choice(tc: &Value) -> Result<Value, ApiError> {
    match tc {
        Value::String(_) => Ok(tc.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            Ok(json!({"type": "function", "function": {"name": o.get("name")}}))
        }
        _ => Err(ApiError::bad(format!(
            "tool_choice must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"name\": …}}, got {tc}"
        ))
        .param("tool_choice")),
    }
}

/// `text.format` as `response_format` (the structured-output engine); `verbosity` only at
/// its default, which is what every answer here is.
fn text(t: &Value, r: &mut Value) -> Result<(), ApiError> {
    if let Some(v) = t.get("verbosity").filter(|v| !v.is_null()) {
        if v != "medium" {
            return Err(ApiError::bad(format!(
                "text.verbosity {v} is not supported (only \"medium\")"
            ))
            .param("text.verbosity"));
        }
    }
    let Some(f) = t.get("format").filter(|f| !f.is_null()) else {
        return Ok(());
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text") => {}
        Some("json_object") => r["response_format"] = json!({"type": "json_object"}),
        Some("json_schema") => {
            r["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": f.get("name"), "schema": f.get("schema"),
                "strict": f.get("strict"), "description": f.get("description"),
            }})
        }
        other => {
            return Err(ApiError::bad(format!(
                "text.format.type must be text, json_object or json_schema, got {}",
                other.unwrap_or("(none)")
            ))
            .param("text.format"))
        }
    }
    Ok(())
}

/// `reasoning.effort`: the chat route's `reasoning_effort` (a template variable, gpt-oss's);
/// `none` turns thinking off where the template can (`enable_thinking`).
fn effort(reasoning: &Value, r: &mut Value) -> Result<(), ApiError> {
    match reasoning.get("effort").and_then(Value::as_str) {
        None => {}
        Some(e @ ("low" | "medium" | "high")) => r["reasoning_effort"] = json!(e),
        Some("minimal") => r["reasoning_effort"] = json!("low"),
        Some("xhigh") => r["reasoning_effort"] = json!("high"),
        Some("none") => r["chat_template_kwargs"] = json!({"enable_thinking": false}),
        Some(e) => {
            return Err(
                ApiError::bad(format!("reasoning.effort `{e}` is unknown")).param("reasoning")
            )
        }
    }
    match reasoning.get("summary") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if matches!(s.as_str(), "auto" | "concise" | "detailed") => Ok(()),
        Some(s) => Err(ApiError::bad(format!(
            "reasoning.summary must be auto, concise or detailed, got {s}"
        ))
        .param("reasoning")),
    }
}
