//! The Qwen2.5 chat template from the real GGUF renders byte-identically to Python jinja2
//! (transformers' environment) on every fixture conversation.

mod tokenizer_common;

use ferrox_tokenizer::template::{render_prompt, ChatTemplate, Message};
use tokenizer_common::*;

#[test]
fn qwen_template_matches_jinja2() {
    let tok = qwen();
    let t = ChatTemplate::for_tokenizer(tok)
        .unwrap()
        .expect("qwen has a chat template");
    let f = read_json(&fixture("chat/qwen2.5-coder.json"));
    let cases = f["cases"].as_array().unwrap();
    assert!(cases.len() >= 6);
    for c in cases {
        let messages: Vec<Message> = serde_json::from_value(c["messages"].clone()).unwrap();
        let agp = c["add_generation_prompt"].as_bool().unwrap();
        let got = t.render(&messages, agp).unwrap();
        assert_eq!(got, c["expected"].as_str().unwrap(), "case {}", c["name"]);
    }
}

#[test]
fn qwen_template_tools_and_tool_turns() {
    let t = ChatTemplate::for_tokenizer(qwen()).unwrap().unwrap();
    let tools = serde_json::json!([{"type": "function", "function": {"name": "get_time", "parameters": {}}}]);
    let mut call = Message::assistant("");
    call.tool_calls =
        Some(serde_json::json!([{"function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]));
    let msgs = [Message::user("time?"), call, Message::tool("12:00")];
    let s = t.render_with_tools(&msgs, Some(&tools), true).unwrap();
    assert!(s.starts_with("<|im_start|>system\nYou are Qwen"), "{s}");
    assert!(s.contains("<tools>\n{\"function\": {\"name\": \"get_time\", \"parameters\": {}}, \"type\": \"function\"}\n</tools>"), "{s}");
    assert!(
        s.contains(
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>"
        ),
        "{s}"
    );
    assert!(
        s.contains("<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"),
        "{s}"
    );
    assert!(s.ends_with("<|im_start|>assistant\n"));
}

#[test]
fn gemma_base_uses_plain_fallback() {
    let g = gemma();
    assert!(ChatTemplate::for_tokenizer(g).unwrap().is_none());
    let p = render_prompt(g, &[Message::user("The capital of France is")], true).unwrap();
    assert_eq!(p, "The capital of France is");
}

/// A long conversation with tools renders on a twentieth of the fuel budget: the sandbox's
/// limits are far from what a real template needs.
#[test]
fn qwen_template_has_a_wide_fuel_margin() {
    let mut t = ChatTemplate::for_tokenizer(qwen()).unwrap().unwrap();
    t.set_fuel(ferrox_tokenizer::sandbox::FUEL / 20);
    let tools: Vec<serde_json::Value> = (0..20)
        .map(|i| serde_json::json!({"type": "function", "function": {"name": format!("f{i}"),
            "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}))
        .collect();
    let mut msgs = vec![Message::system("be brief")];
    for i in 0..200 {
        msgs.push(Message::user(format!("question {i}")));
        msgs.push(Message::assistant(format!("answer {i}")));
    }
    msgs.push(Message::user("last"));
    let s = t
        .render_with_tools(&msgs, Some(&serde_json::Value::Array(tools)), true)
        .unwrap();
    assert!(s.contains("answer 199") && s.contains("\"name\": \"f19\""));
}
