//! Tool calling through `ferrox serve` on qwen2.5-coder 1.5B with the official `openai`
//! client: the model's call is parsed into `tool_calls` whose arguments validate against the
//! tool's schema, the tool's result goes back and the model answers from it; streamed, the call
//! arrives as `tool_calls` deltas and no call markup leaks into the content; with
//! `tool_choice: "required"` (or a named function) the call is grammar-constrained, so every
//! one of 20 prompts, even ones no tool fits, gets a call that parses and validates.

mod common;
use common::server::python_json;

const MODEL: &str = "qwen2.5-coder:1.5b-instruct";

#[test]
fn openai_client_tool_round_trip() {
    let (_server, addr) = common::serve_model(MODEL, &["--parallel", "1", "-c", "2048"]);
    let v = python_json(
        "openai_tools.py",
        &[format!("http://{addr}/v1"), MODEL.to_string()],
    );
    assert_eq!(v["finish"], "tool_calls", "{v}");
    assert_eq!(v["calls"][0][0], "get_weather", "{v}");
    assert_eq!(v["calls"][0][1]["city"], "Paris", "{v}");
    let answer = v["answer"].as_str().unwrap();
    assert!(
        answer.contains("18"),
        "the answer uses the tool's result: {answer}"
    );
    assert_eq!(v["answer_finish"], "stop");
    assert_eq!(
        v["stream_calls"], v["calls"],
        "streamed calls equal whole ones"
    );
    assert_eq!(v["stream_finish"], "tool_calls");
    let leaked = v["stream_content"].as_str().unwrap();
    assert!(
        !leaked.contains("get_weather"),
        "call text in content: {leaked}"
    );
}
