//! Parsing checks: every format, whole and fed in pieces.
use super::*;
use serde_json::json;

/// The parts of `text` fed `step` bytes (char-aligned) at a time.
fn parse(format: ToolFormat, thinking: bool, text: &str, step: usize) -> Vec<OutputPart> {
    let mut p = OutputParser::new(format, thinking);
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(step) {
        p.push(&piece.iter().collect::<String>(), &mut out);
    }
    p.finish(&mut out);
    // Merge what streaming split, to compare with the whole.
    let mut merged = Vec::new();
    for part in out {
        emit(&mut merged, part);
    }
    merged
}

/// `text` parses to `want` fed in pieces of each of `steps` bytes.
fn assert_parses_in_steps(format: ToolFormat, text: &str, steps: &[usize], want: &[OutputPart]) {
    for &step in steps {
        assert_eq!(parse(format, false, text, step), want, "step {step}");
    }
}

fn call(name: &str, args: Value) -> OutputPart {
    OutputPart::ToolCall(ToolCall {
        name: name.into(),
        arguments: args,
    })
}

fn content(s: &str) -> OutputPart {
    OutputPart::Content(s.into())
}

#[test]
fn hermes_calls_between_text_any_chunking() {
    let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    let want = [
        content("Let me check.\n"),
        call("get_weather", json!({"city": "Paris"})),
        content("\n"),
        call("now", json!({})),
    ];
    assert_parses_in_steps(ToolFormat::Hermes, text, &[1, 2, 3, 7, 1000], &want);
}

#[test]
fn broken_call_is_text_and_plain_text_passes() {
    let bad = "<tool_call>\n{not json}\n</tool_call> ok";
    assert_eq!(parse(ToolFormat::Hermes, false, bad, 2), vec![content(bad)]);
    let plain = "a < b and <tool is fine";
    assert_eq!(
        parse(ToolFormat::Hermes, false, plain, 1),
        vec![content(plain)]
    );
    assert_eq!(parse(ToolFormat::None, false, bad, 3), vec![content(bad)]);
}

#[test]
fn reasoning_is_split_off() {
    let text = "<think>\nLet me think.\n</think>\n\nThe answer is 4.";
    let want = [
        OutputPart::Reasoning("\nLet me think.\n".into()),
        content("The answer is 4."),
    ];
    assert_parses_in_steps(ToolFormat::Hermes, text, &[1, 4, 100], &want);
    // The prompt opened the block (DeepSeek-R1): the output starts inside it.
    assert_eq!(
        parse(ToolFormat::None, true, "hmm</think>yes", 2),
        vec![OutputPart::Reasoning("hmm".into()), content("yes")]
    );
}

#[test]
fn glm_llama_mistral_deepseek() {
    let glm = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
    assert_eq!(
        parse(ToolFormat::Glm45, false, glm, 5),
        vec![call("get_weather", json!({"city": "Beijing", "days": 3}))]
    );
    let llama = "{\"name\": \"f\", \"parameters\": {\"x\": 1}}";
    assert_eq!(
        parse(ToolFormat::Llama3Json, false, llama, 3),
        vec![call("f", json!({"x": 1}))]
    );
    assert_eq!(
        parse(ToolFormat::Llama3Json, false, "{not a call}", 3),
        vec![content("{not a call}")]
    );
    let mistral = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"arguments\": {}}]";
    assert_eq!(
        parse(ToolFormat::Mistral, false, mistral, 4),
        vec![call("f", json!({"x": 1})), call("g", json!({}))]
    );
    let ds = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"x\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    let got = parse(ToolFormat::DeepSeekV3, false, ds, 3);
    assert!(got.contains(&call("f", json!({"x": 2}))), "{got:?}");
}

#[test]
fn fenced_or_bare_json_answer_calls_an_offered_tool() {
    let run = |names: &[&str], text: &str| {
        let mut p = OutputParser::new(ToolFormat::Hermes, false)
            .with_tools(names.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for c in text.chars() {
            p.push(&c.to_string(), &mut out);
        }
        p.finish(&mut out);
        out
    };
    let fenced =
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```";
    assert_eq!(
        run(&["get_weather"], fenced),
        vec![call("get_weather", json!({"city": "Paris"}))]
    );
    let bare = "{\"name\": \"get_weather\", \"arguments\": {}}";
    assert_eq!(
        run(&["get_weather"], bare),
        vec![call("get_weather", json!({}))]
    );
    // Not an offered tool, or code that merely looks like JSON: text.
    assert_eq!(run(&["other"], bare), vec![content(bare)]);
    let code = "```python\nprint(1)\n```";
    assert_eq!(run(&["get_weather"], code), vec![content(code)]);
    // Without tools offered nothing is held.
    assert_eq!(
        parse(ToolFormat::Hermes, false, bare, 2),
        vec![content(bare)]
    );
}

#[test]
fn harmony_channels_and_calls() {
    let text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"SF\"}<|call|>";
    let want = [
        OutputPart::Reasoning("Need weather.".into()),
        call("get_weather", json!({"city": "SF"})),
    ];
    assert_parses_in_steps(ToolFormat::Harmony, text, &[1, 3, 1000], &want);
    // The recipient may come before the channel; the call may end with the output.
    let early = "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}";
    assert_eq!(
        parse(ToolFormat::Harmony, false, early, 2),
        vec![call("f", json!({}))]
    );
    let answer = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
    assert_eq!(
        parse(ToolFormat::Harmony, false, answer, 4),
        vec![OutputPart::Reasoning("think".into()), content("Hello!")]
    );
}

#[test]
fn formats_are_detected_from_templates() {
    assert_eq!(
        ToolFormat::detect("...<tool_call>\\n{\"name\": ..."),
        ToolFormat::Hermes
    );
    assert_eq!(
        ToolFormat::detect("<tool_call>{{ name }}<arg_key>"),
        ToolFormat::Glm45
    );
    assert_eq!(
        ToolFormat::detect("{{ '[TOOL_CALLS]' }}"),
        ToolFormat::Mistral
    );
    assert_eq!(ToolFormat::detect("no tools here"), ToolFormat::None);
}
