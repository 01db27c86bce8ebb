//! The Anthropic route as coding agents use it, on the fake backend (its prompt is the
//! messages' text, one token a byte, in a 64-token context): Claude Code's request shape,
//! system turns mid-conversation, `context_management` edits, `max_tokens` clamped to the
//! context, and what stays refused (Claude Code itself is in ferrox-cli's `claude_code` test).

mod common;
use common::*;

use serde_json::{json, Value};

const CLEARED: &str = "[cleared to save context]";

async fn anthropic(a: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> Resp {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    request(a, "POST", path, &h, &body.to_string()).await
}

/// What Claude Code 2.1 sends (captured), shrunk to the fake's context.
fn claude_code_body() -> Value {
    json!({
        "model": "fake-model", "max_tokens": 32000, "stream": true,
        "metadata": {"user_id": "{\"session_id\":\"x\"}"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "system": [{"type": "text", "text": "S"},
                   {"type": "text", "text": "Y", "cache_control": {"type": "ephemeral"}}],
        // Deferred: not in the prompt (the fake would answer a call were it offered).
        "tools": [{"name": "Later", "description": "d", "input_schema": {"type": "object"},
                   "defer_loading": true}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "system", "content": [{"type": "text", "text": "env",
                                            "cache_control": {"type": "ephemeral"}}]},
        ],
    })
}

// A flag ferrox has never heard of is accepted too: flags only unlock fields, checked on their own.
const BETAS: &str = "claude-code-20250219,interleaved-thinking-2025-05-14,\
    context-management-2025-06-27,mid-conversation-tool-changes-2026-07-01,\
    thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24,\
    fallback-credit-2026-06-01,future-feature-2099-01-01";

#[tokio::test]
async fn claude_codes_request_runs_with_max_tokens_clamped() {
    let a = server(1, 4, None).await;
    let beta = [
        ("anthropic-beta", BETAS),
        ("anthropic-version", "2023-06-01"),
    ];
    let r = anthropic(&a, "/v1/messages?beta=true", &beta, &claude_code_body()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let data: Vec<Value> = r
        .body
        .lines()
        .filter_map(|l| serde_json::from_str(l.strip_prefix("data: ")?).ok())
        .collect();
    let delta = data
        .iter()
        .find(|v| v["type"] == "message_delta")
        .expect("message_delta");
    // The system turn is rendered where it stands: "S\nY" + "hi" + "env".
    let prompt = "S\nYhienv".len();
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens", "{delta}");
    assert_eq!(delta["usage"]["output_tokens"], 64 - prompt, "{delta}");
    assert_eq!(delta["context_management"]["applied_edits"], json!([]));
    let count = anthropic(&a, "/v1/messages/count_tokens", &beta, &claude_code_body()).await;
    assert_eq!(count.json()["input_tokens"], prompt, "{}", count.body);
}

/// A conversation with two tool uses whose first result is long.
fn tool_conversation(first_result: &str) -> Value {
    json!({
        "model": "fake-model", "max_tokens": 2,
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read",
                                               "input": {"p": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                          "content": first_result}]},
            {"role": "system", "content": "s"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "Read",
                                               "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b",
                                          "content": [{"type": "text", "text": "R2"}]}]},
        ],
    })
}

#[tokio::test]
async fn clear_tool_uses_renders_the_hand_cleared_prompt() {
    let a = server(1, 4, None).await;
    let long = "0123456789".repeat(4);
    let mut edited = tool_conversation(&long);
    let edit = json!({"type": "clear_tool_uses_20250919",
                      "trigger": {"type": "tool_uses", "value": 2},
                      "keep": {"type": "tool_uses", "value": 1}});
    edited["context_management"] = json!({"edits": [edit]});
    let by_hand = tool_conversation(CLEARED);
    let count = |b: Value| {
        let a = a.clone();
        async move {
            let r = anthropic(&a, "/v1/messages/count_tokens", &[], &b).await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()["input_tokens"].as_u64().unwrap()
        }
    };
    let (n_edited, n_hand) = (count(edited.clone()).await, count(by_hand).await);
    assert_eq!(n_edited, n_hand);
    let original = count(tool_conversation(&long)).await;
    assert_eq!(original - n_hand, (long.len() - CLEARED.len()) as u64);
    let r = anthropic(&a, "/v1/messages", &[], &edited).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(
        v["context_management"]["applied_edits"],
        json!([{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 1,
                "cleared_input_tokens": original - n_hand}])
    );
    assert_eq!(v["usage"]["input_tokens"], n_hand);
    // Not triggered (one more tool use needed), or freeing too little: not applied.
    for e in [
        json!({"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 3}}),
        json!({"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 1},
               "trigger": {"type": "input_tokens", "value": 1},
               "clear_at_least": {"type": "input_tokens", "value": 1000}}),
    ] {
        let mut b = tool_conversation(&long);
        b["context_management"] = json!({"edits": [e]});
        assert_eq!(count(b.clone()).await, original, "{e}");
        let r = anthropic(&a, "/v1/messages", &[], &b).await.json();
        assert_eq!(r["context_management"]["applied_edits"], json!([]), "{e}");
    }
}

#[tokio::test]
async fn clear_thinking_keeps_the_last_turns() {
    let a = server(1, 4, None).await;
    let turn = |t: &str| {
        json!({"role": "assistant", "content": [
        {"type": "thinking", "thinking": t, "signature": ""}, {"type": "text", "text": "ok"}]})
    };
    let body = json!({"model": "fake-model", "max_tokens": 1, "messages": [
        {"role": "user", "content": "a"}, turn("x"), {"role": "user", "content": "b"}, turn("y"),
        {"role": "user", "content": "c"}],
        "context_management": {"edits": [{"type": "clear_thinking_20251015",
                                          "keep": {"type": "thinking_turns", "value": 1}}]}});
    let r = anthropic(&a, "/v1/messages", &[], &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let edits = &r.json()["context_management"]["applied_edits"];
    assert_eq!(edits[0]["type"], "clear_thinking_20251015", "{edits}");
    assert_eq!(edits[0]["cleared_thinking_turns"], 1, "{edits}");
}

#[tokio::test]
async fn what_ferrox_cannot_do_stays_refused() {
    let a = server(1, 4, None).await;
    let base = json!({"model": "fake-model", "max_tokens": 1,
                      "messages": [{"role": "user", "content": "hi"}]});
    for (extra, header, needle) in [
        (
            json!({"future_field": 1}),
            "future-feature-2099-01-01",
            "future_field",
        ),
        (
            json!({"context_management": {"edits": [{"type": "compact_20260112"}]}}),
            "",
            "compact_20260112",
        ),
        (
            json!({"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": 2}]}}),
            "",
            "keep",
        ),
        (
            json!({"context_management": {"edits": [], "mode": "x"}}),
            "",
            "mode",
        ),
        (
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "",
            "web_search_20250305",
        ),
        (
            json!({"tools": [{"name": "t", "input_schema": {}, "input_examples": []}]}),
            "",
            "input_examples",
        ),
        (
            json!({"thinking": {"type": "adaptive", "display": "full"}}),
            "",
            "display",
        ),
        (json!({"max_tokens": 0}), "", "max_tokens"),
    ] {
        let mut b = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let h: Vec<(&str, &str)> = match header {
            "" => vec![],
            h => vec![("anthropic-beta", h)],
        };
        let r = anthropic(&a, "/v1/messages", &h, &b).await;
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{needle}: {msg}");
    }
}

/// Claude Code's billing line (its `cch` differs per request) is not part of the prompt, so
/// sessions share their prefix.
#[tokio::test]
async fn the_billing_line_is_not_prompt() {
    let a = server(1, 4, None).await;
    let count = |system: Value| {
        let a = a.clone();
        async move {
            let body = json!({"model": "fake-model", "system": system,
                              "messages": [{"role": "user", "content": "hi"}]});
            let r = anthropic(&a, "/v1/messages/count_tokens", &[], &body).await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()["input_tokens"].as_u64().unwrap()
        }
    };
    let line =
        "x-anthropic-billing-header: cc_version=2.1.1.abc; cc_entrypoint=sdk-cli; cch=36ee5;";
    let plain = count(json!([{"type": "text", "text": "You are a coder."}])).await;
    let blocks = count(json!([{"type": "text", "text": line},
                              {"type": "text", "text": "You are a coder."}]))
    .await;
    let string = count(json!(format!("{line}\nYou are a coder."))).await;
    assert_eq!((blocks, string), (plain, plain));
}
