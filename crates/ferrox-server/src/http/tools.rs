//! Tool calling and reasoning in chat requests: the `tools` / `tool_choice` /
//! `parallel_tool_calls` fields checked (OpenAI API reference, "Function calling"), and how the
//! answer is read back: reasoning split off, calls parsed in the template's format
//! (`ferrox_tokenizer::chat_output`) into `message.tool_calls`.

use serde_json::{json, Value};

use super::{new_id, ApiError};
use crate::api::ChatRequest;
use crate::backend::GrammarSpec;
use ferrox_tokenizer::chat_output::{OutputParser, OutputPart, ToolCall, ToolFormat};

/// What the request allows the model to do with its tools.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ToolChoice {
    /// No tools offered, or `"none"`: the answer is text.
    None,
    Auto,
    /// `"required"`: at least one call.
    Required,
    /// This function must be called.
    Named(String),
}

/// The request's tools, checked.
#[derive(Debug, Clone)]
pub(super) struct ToolPlan {
    pub choice: ToolChoice,
    /// More than one call per answer allowed.
    pub parallel: bool,
}

impl ToolPlan {
    /// Checks `tools`, `tool_choice` and `parallel_tool_calls`.
    pub fn of(req: &ChatRequest) -> Result<ToolPlan, ApiError> {
        let bad = |msg: String, p: &'static str| ApiError::bad(msg).param(p);
        let tools = req.tools.as_deref().unwrap_or_default();
        let mut names = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad(
                    format!("tools[{i}]: only type \"function\" is supported"),
                    "tools",
                ));
            }
            let name = t
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad(format!("tools[{i}]: function.name is required"), "tools"))?;
            if names.contains(&name) {
                return Err(bad(format!("tools: `{name}` is defined twice"), "tools"));
            }
            names.push(name);
        }
        let choice = match &req.tool_choice {
            None | Some(Value::Null) if tools.is_empty() => ToolChoice::None,
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" if tools.is_empty() => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" if tools.is_empty() => {
                    return Err(bad(
                        "tool_choice \"required\" needs tools".into(),
                        "tool_choice",
                    ))
                }
                "required" => ToolChoice::Required,
                other => {
                    return Err(bad(
                        format!("unknown tool_choice \"{other}\""),
                        "tool_choice",
                    ))
                }
            },
            Some(v) => {
                let name = v
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": …}}".into(), "tool_choice"))?;
                if !names.contains(&name) {
                    return Err(bad(
                        format!("tool_choice names `{name}`, which is not among the tools"),
                        "tool_choice",
                    ));
                }
                ToolChoice::Named(name.to_string())
            }
        };
        Ok(ToolPlan {
            choice,
            parallel: req.parallel_tool_calls.unwrap_or(true),
        })
    }

    /// With `tool_choice` `"required"` or a named function, the grammar the answer must follow:
    /// one call in the template's format (or several with `parallel_tool_calls`), its name
    /// among the allowed tools and its arguments valid under that tool's `parameters` schema.
    pub fn forced_grammar(
        &self,
        req: &ChatRequest,
        format: ToolFormat,
    ) -> Result<Option<GrammarSpec>, ApiError> {
        let allowed: Vec<&Value> = match &self.choice {
            ToolChoice::None | ToolChoice::Auto => return Ok(None),
            ToolChoice::Required => req.tools.iter().flatten().collect(),
            ToolChoice::Named(n) => req
                .tools
                .iter()
                .flatten()
                .filter(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(n))
                .collect(),
        };
        let (args_key, open, close) = match format {
            ToolFormat::Hermes => ("arguments", "<tool_call>\n", "\n</tool_call>"),
            ToolFormat::Llama3Json => ("parameters", "", ""),
            other => {
                return Err(ApiError::bad(format!(
                    "tool_choice \"required\" or a named function is not supported for this model's tool-call format ({other:?})"
                ))
                .param("tool_choice"))
            }
        };
        let options: Vec<Value> = allowed
            .iter()
            .map(|t| {
                let name = t.pointer("/function/name").cloned().unwrap_or(Value::Null);
                let params = t
                    .pointer("/function/parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"}));
                json!({
                    "type": "object",
                    "properties": {"name": {"const": name}, args_key: params},
                    "required": ["name", args_key],
                    "additionalProperties": false,
                })
            })
            .collect();
        let schema = json!({"anyOf": options});
        let call = format!("{}%json {}{}", lark_str(open), schema, lark_str(close));
        let calls = if self.parallel && format == ToolFormat::Hermes {
            "call (\"\\n\" call)*"
        } else {
            "call"
        };
        Ok(Some(GrammarSpec::Lark(format!(
            "start: {calls}\ncall: {}\n",
            call.trim()
        ))))
    }

    /// The tools to show the template (none when the model may not call them).
    pub fn offered<'r>(&self, req: &'r ChatRequest) -> Option<&'r [Value]> {
        (self.choice != ToolChoice::None)
            .then_some(req.tools.as_deref())
            .flatten()
    }
}

/// How one choice's output is read back.
#[derive(Debug, Clone)]
pub(super) struct OutputSetup {
    /// The template's call format; `ToolFormat::None` when no tools are offered.
    pub format: ToolFormat,
    /// The offered tools' names.
    pub names: Vec<String>,
    pub in_reasoning: bool,
    pub parallel: bool,
}

impl OutputSetup {
    pub fn parser(&self) -> OutputParser {
        OutputParser::new(self.format, self.in_reasoning).with_tools(self.names.clone())
    }
}

/// The function names of `tools` (checked by [`ToolPlan::of`]).
pub(super) fn tool_names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

/// A parsed call as OpenAI's `tool_calls` entry (`arguments` a JSON string). Streamed, the
/// entry also carries its `index`.
pub(super) fn call_json(call: &ToolCall, index: Option<usize>) -> Value {
    let mut v = json!({
        "id": new_id("call"),
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments.to_string()},
    });
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

/// A whole answer split into (reasoning, content, calls); with `parallel` off only the first
/// call is kept.
pub(super) fn split_answer(setup: &OutputSetup, text: &str) -> (String, String, Vec<ToolCall>) {
    let mut parser = setup.parser();
    let mut parts = Vec::new();
    parser.push(text, &mut parts);
    parser.finish(&mut parts);
    let (mut reasoning, mut content, mut calls) = (String::new(), String::new(), Vec::new());
    for p in parts {
        match p {
            OutputPart::Reasoning(t) => reasoning.push_str(&t),
            OutputPart::Content(t) => content.push_str(&t),
            OutputPart::ToolCall(c) if setup.parallel || calls.is_empty() => calls.push(c),
            OutputPart::ToolCall(_) => {}
        }
    }
    (reasoning, content, calls)
}

/// `s` as a Lark string literal followed by a space (nothing for the empty string).
fn lark_str(s: &str) -> String {
    if s.is_empty() {
        return String::new();
    }
    format!("{} ", serde_json::to_string(s).unwrap_or_default())
}
