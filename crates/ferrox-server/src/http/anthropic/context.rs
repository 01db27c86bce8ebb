//! `context_management` edits (Anthropic's "Context editing", beta
//! `context-management-2025-06-27`), applied to the conversation before it is rendered:
//! - `clear_thinking_20251015 {keep}`: thinking blocks of all but the last `keep` assistant
//!   turns that have some are dropped (`keep: "all"` keeps them; default: the last one).
//! - `clear_tool_uses_20250919 {trigger, keep, clear_at_least, exclude_tools,
//!   clear_tool_inputs}`: once the prompt passes `trigger` (input tokens, default 100 000, or
//!   tool uses), the results of the oldest tool uses but the last `keep` (default 3) are
//!   replaced by [`CLEARED`] (and their inputs by `{}` with `clear_tool_inputs`); a clearing
//!   that frees fewer than `clear_at_least` input tokens is not applied.
//!
//! The answer reports each applied edit with what it cleared.

use serde_json::{json, Value};

use super::super::generate::render;
use super::super::{ApiError, Shared};
use super::request::{chat_request, Content, MessagesBody};

/// What a cleared tool result says instead.
pub(super) const CLEARED: &str = "[cleared to save context]";

const DEFAULT_TRIGGER_TOKENS: usize = 100_000;
const DEFAULT_KEEP_TOOL_USES: usize = 3;

enum Edit {
    /// Keep the thinking of the last this many turns (`None`: all).
    ClearThinking {
        keep: Option<usize>,
    },
    ClearToolUses(ToolEdit),
}

struct ToolEdit {
    trigger: Trigger,
    keep: usize,
    clear_at_least: usize,
    exclude: Vec<String>,
    /// All inputs (`true`), none, or those of the named tools.
    inputs: Inputs,
}

enum Trigger {
    InputTokens(usize),
    ToolUses(usize),
}

enum Inputs {
    All,
    Named(Vec<String>),
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad(format!("context_management: {}", msg.into()))
}

/// `{type, value}` with the given type; its value.
fn counted(v: Option<&Value>, kind: &str, what: &str) -> Result<Option<usize>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match (v.get("type").and_then(Value::as_str), v.get("value")) {
        (Some(t), Some(n)) if t == kind => n
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| bad(format!("{what}.value must be a non-negative integer"))),
        _ => Err(bad(format!("{what} must be {{type: \"{kind}\", value}}"))),
    }
}

fn names(v: Option<&Value>, what: &str) -> Result<Vec<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|n| n.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(format!("{what} must be a list of tool names"))),
        Some(_) => Err(bad(format!("{what} must be a list of tool names"))),
    }
}

fn parse_edit(e: &Value) -> Result<Edit, ApiError> {
    let fields: &[&str] = match e.get("type").and_then(Value::as_str) {
        Some("clear_thinking_20251015") => &["type", "keep"],
        Some("clear_tool_uses_20250919") => &[
            "type",
            "trigger",
            "keep",
            "clear_at_least",
            "exclude_tools",
            "clear_tool_inputs",
        ],
        other => {
            return Err(bad(format!(
                "edit type {} is not supported",
                other.unwrap_or("(none)")
            )))
        }
    };
    let obj = e.as_object().into_iter().flatten();
    if let Some((k, _)) = obj.clone().find(|(k, _)| !fields.contains(&k.as_str())) {
        return Err(bad(format!("unknown edit field `{k}`")));
    }
    if fields.len() == 2 {
        let keep = match e.get("keep") {
            Some(Value::String(s)) if s == "all" => None,
            k => Some(counted(k, "thinking_turns", "keep")?.unwrap_or(1)),
        };
        return Ok(Edit::ClearThinking { keep });
    }
    let trigger = match e.get("trigger").and_then(|t| t.get("type")?.as_str()) {
        Some("tool_uses") => {
            Trigger::ToolUses(counted(e.get("trigger"), "tool_uses", "trigger")?.unwrap_or(0))
        }
        _ => Trigger::InputTokens(
            counted(e.get("trigger"), "input_tokens", "trigger")?.unwrap_or(DEFAULT_TRIGGER_TOKENS),
        ),
    };
    let inputs = match e.get("clear_tool_inputs") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Inputs::Named(Vec::new()),
        Some(Value::Bool(true)) => Inputs::All,
        v => Inputs::Named(names(v, "clear_tool_inputs")?),
    };
    Ok(Edit::ClearToolUses(ToolEdit {
        trigger,
        keep: counted(e.get("keep"), "tool_uses", "keep")?.unwrap_or(DEFAULT_KEEP_TOOL_USES),
        clear_at_least: counted(e.get("clear_at_least"), "input_tokens", "clear_at_least")?
            .unwrap_or(0),
        exclude: names(e.get("exclude_tools"), "exclude_tools")?,
        inputs,
    }))
}

fn parse(cm: &Value) -> Result<Vec<Edit>, ApiError> {
    if let Some(k) = cm
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| *k != "edits")
    {
        return Err(bad(format!("unknown field `{k}`")));
    }
    match cm.get("edits") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(parse_edit).collect(),
        Some(_) => Err(bad("edits must be a list")),
    }
}

/// The blocks of each message's block list, mutably.
fn blocks_mut(b: &mut MessagesBody) -> impl Iterator<Item = (&str, &mut Vec<Value>)> {
    b.messages.iter_mut().filter_map(|m| match &mut m.content {
        Content::Blocks(v) => Some((m.role.as_str(), v)),
        Content::Text(_) => None,
    })
}

fn kind(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// Drops thinking blocks from all but the last `keep` assistant turns holding some; the
/// number of turns cleared.
fn clear_thinking(b: &mut MessagesBody, keep: usize) -> usize {
    let thinking = |v: &Value| matches!(kind(v), "thinking" | "redacted_thinking");
    let turns: Vec<&mut Vec<Value>> = blocks_mut(b)
        .filter(|(role, v)| *role == "assistant" && v.iter().any(thinking))
        .map(|(_, v)| v)
        .collect();
    let clear = turns.len().saturating_sub(keep);
    for v in turns.into_iter().take(clear) {
        v.retain(|x| !thinking(x));
    }
    clear
}

/// Clears the results (and inputs, as asked) of the oldest tool uses but the last `keep`;
/// the number cleared.
fn clear_tool_uses(b: &mut MessagesBody, e: &ToolEdit) -> usize {
    let uses: Vec<(String, String)> = blocks_mut(b)
        .filter(|(role, _)| *role == "assistant")
        .flat_map(|(_, v)| v.iter().filter(|x| kind(x) == "tool_use"))
        .map(|x| {
            let s = |k: &str| {
                x.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (s("id"), s("name"))
        })
        .collect();
    let clear: Vec<&(String, String)> = uses[..uses.len().saturating_sub(e.keep)]
        .iter()
        .filter(|(_, name)| !e.exclude.contains(name))
        .collect();
    for (_, v) in blocks_mut(b) {
        for x in v.iter_mut() {
            let id_key = if kind(x) == "tool_use" {
                "id"
            } else {
                "tool_use_id"
            };
            let id = x.get(id_key).and_then(Value::as_str).unwrap_or_default();
            let Some((_, name)) = clear.iter().find(|(i, _)| i == id) else {
                continue;
            };
            match kind(x) {
                "tool_result" => x["content"] = json!(CLEARED),
                "tool_use" if matches!(&e.inputs, Inputs::All) => x["input"] = json!({}),
                "tool_use" if matches!(&e.inputs, Inputs::Named(n) if n.contains(name)) => {
                    x["input"] = json!({})
                }
                _ => {}
            }
        }
    }
    clear.len()
}

async fn prompt_len(s: &Shared, b: &MessagesBody) -> Result<usize, ApiError> {
    Ok(render(s, &chat_request(b)?).await?.0.tokens.len())
}

fn tool_uses(b: &mut MessagesBody) -> usize {
    blocks_mut(b)
        .flat_map(|(_, v)| v.iter().filter(|x| kind(x) == "tool_use"))
        .count()
}

/// Applies the request's edits to `b`; the `applied_edits` to report.
pub(super) async fn apply(s: &Shared, b: &mut MessagesBody) -> Result<Vec<Value>, ApiError> {
    let Some(cm) = b.context_management.take() else {
        return Ok(Vec::new());
    };
    let mut applied = Vec::new();
    for edit in parse(&cm)? {
        match edit {
            Edit::ClearThinking { keep: None } => {}
            Edit::ClearThinking { keep: Some(keep) } => {
                let before = prompt_len(s, b).await?;
                let n = clear_thinking(b, keep);
                if n > 0 {
                    let cleared = before.saturating_sub(prompt_len(s, b).await?);
                    applied.push(json!({"type": "clear_thinking_20251015",
                        "cleared_thinking_turns": n, "cleared_input_tokens": cleared}));
                }
            }
            Edit::ClearToolUses(e) => {
                let before = prompt_len(s, b).await?;
                let triggered = match e.trigger {
                    Trigger::InputTokens(n) => before >= n,
                    Trigger::ToolUses(n) => tool_uses(b) >= n,
                };
                if !triggered {
                    continue;
                }
                let saved = b.messages.clone();
                let n = clear_tool_uses(b, &e);
                let cleared = before.saturating_sub(prompt_len(s, b).await?);
                if n == 0 || cleared < e.clear_at_least {
                    b.messages = saved;
                    continue;
                }
                applied.push(json!({"type": "clear_tool_uses_20250919",
                    "cleared_tool_uses": n, "cleared_input_tokens": cleared}));
            }
        }
    }
    Ok(applied)
}
