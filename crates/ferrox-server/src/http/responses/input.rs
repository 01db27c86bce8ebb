//! `input` (OpenAI API reference, "Create a model response": input items) as chat messages:
//! messages with `input_text` / `output_text` parts, `function_call` and
//! `function_call_output` items, `reasoning` items. The assistant-side items of one turn
//! (reasoning, message, calls) become one assistant message, as the chat templates expect.

use serde_json::{json, Value};

use super::super::ApiError;

/// `encrypted_content` of ferrox's reasoning items: the reasoning text, hex-encoded behind
/// this tag. Not secret (ferrox has no hidden reasoning to protect); it lets a client that
/// keeps no server state (`store: false`) hand the reasoning back unchanged.
const REASONING_TAG: &str = "ferrox-reasoning-v1:";

pub(super) fn encode_reasoning(text: &str) -> String {
    let mut s = String::with_capacity(REASONING_TAG.len() + 2 * text.len());
    s.push_str(REASONING_TAG);
    for b in text.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn decode_reasoning(s: &str) -> Option<String> {
    let hex = s.strip_prefix(REASONING_TAG)?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = hex
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Adds the chat messages of `input` to `out` (the conversation so far).
pub(super) fn messages(input: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let items = match input {
        Value::String(s) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Value::Array(items) => items,
        Value::Null => return Ok(()),
        _ => return Err(ApiError::bad("input must be a string or a list of items").param("input")),
    };
    let mut turn = Assistant::default();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let field = |k: &str| item.get(k).cloned().unwrap_or(Value::Null);
        match kind {
            "message" if field("role") == "assistant" => {
                if !turn.calls.is_empty() {
                    turn.flush(out);
                }
                turn.content.push_str(&text(&field("content"), &at)?);
            }
            "message" => {
                turn.flush(out);
                let role = match field("role").as_str() {
                    Some("user") => "user",
                    // What the chat templates know as the system turn.
                    Some("system" | "developer") => "system",
                    _ => {
                        return Err(ApiError::bad(format!(
                            "{at}: role must be user, system, developer or assistant"
                        ))
                        .param("input"))
                    }
                };
                out.push(json!({"role": role, "content": text(&field("content"), &at)?}));
            }
            "function_call" => turn.calls.push(json!({
                "id": field("call_id"), "type": "function",
                "function": {"name": field("name"), "arguments": field("arguments")},
            })),
            "function_call_output" => {
                turn.flush(out);
                let output = text(&field("output"), &at)?;
                out.push(json!({"role": "tool", "tool_call_id": field("call_id"), "content": output}));
            }
            "reasoning" => {
                if !turn.calls.is_empty() || !turn.content.is_empty() {
                    turn.flush(out);
                }
                turn.reasoning.push_str(&reasoning(item, &at)?);
            }
            other => {
                return Err(ApiError::bad(format!(
                    "{at}: item type `{other}` is not supported (message, function_call, function_call_output and reasoning are)"
                ))
                .param("input"))
            }
        }
    }
    turn.flush(out);
    Ok(())
}

/// The assistant message being gathered from consecutive assistant-side items.
#[derive(Default)]
struct Assistant {
    reasoning: String,
    content: String,
    calls: Vec<Value>,
}

impl Assistant {
    fn flush(&mut self, out: &mut Vec<Value>) {
        let t = std::mem::take(self);
        if t.reasoning.is_empty() && t.content.is_empty() && t.calls.is_empty() {
            return;
        }
        let mut m = json!({"role": "assistant", "content": t.content});
        if !t.calls.is_empty() {
            m["tool_calls"] = json!(t.calls);
        }
        if !t.reasoning.is_empty() {
            m["reasoning_content"] = json!(t.reasoning);
        }
        out.push(m);
    }
}

/// A content field's text: a string, or parts of type input_text / output_text / refusal.
fn text(content: &Value, at: &str) -> Result<String, ApiError> {
    let parts = match content {
        Value::String(s) => return Ok(s.clone()),
        Value::Null => return Ok(String::new()),
        Value::Array(parts) => parts,
        _ => return Err(ApiError::bad(format!("{at}: content must be text")).param("input")),
    };
    let mut out = String::new();
    for p in parts {
        let key = match p.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text") => "text",
            Some("refusal") => "refusal",
            other => {
                return Err(ApiError::bad(format!(
                    "{at}: content part type `{}` is not supported (text only)",
                    other.unwrap_or("(none)")
                ))
                .param("input"))
            }
        };
        out.push_str(p.get(key).and_then(Value::as_str).unwrap_or_default());
    }
    Ok(out)
}

/// A reasoning item's text: ferrox's `encrypted_content` when present, else its
/// `reasoning_text` content, else its summary.
fn reasoning(item: &Value, at: &str) -> Result<String, ApiError> {
    if let Some(enc) = item.get("encrypted_content").and_then(Value::as_str) {
        return decode_reasoning(enc).ok_or_else(|| {
            ApiError::bad(format!(
                "{at}: encrypted_content was not made by ferrox (it holds another provider's reasoning, which ferrox cannot read)"
            ))
            .param("input")
        });
    }
    let parts = |k: &str| -> String {
        item.get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect()
    };
    let content = parts("content");
    Ok(if content.is_empty() {
        parts("summary")
    } else {
        content
    })
}

/// Leading system messages (and `instructions`, first) as one: several system turns, or one
/// after another turn, are more than many templates accept.
pub(super) fn system_first(instructions: Option<&str>, messages: Vec<Value>) -> Vec<Value> {
    let mut system: Vec<String> = instructions.map(String::from).into_iter().collect();
    let mut rest = messages.into_iter().peekable();
    while let Some(m) = rest.next_if(|m| m["role"] == "system") {
        system.push(m["content"].as_str().unwrap_or_default().to_string());
    }
    let mut out = Vec::new();
    if !system.is_empty() {
        out.push(json!({"role": "system", "content": system.join("\n\n")}));
    }
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_round_trips() {
        for t in ["", "think ✓ about\nit"] {
            assert_eq!(decode_reasoning(&encode_reasoning(t)).as_deref(), Some(t));
        }
        assert_eq!(decode_reasoning("gAAAAABo"), None);
        assert_eq!(decode_reasoning("ferrox-reasoning-v1:zz"), None);
    }

    #[test]
    fn assistant_items_of_a_turn_are_one_message() {
        let input = json!([
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "summary": [], "encrypted_content": encode_reasoning("hmm")},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ]);
        let mut out = Vec::new();
        messages(&input, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[1]["reasoning_content"], "hmm");
        assert_eq!(out[1]["content"], "ok");
        assert_eq!(out[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            out[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"})
        );
    }
}
