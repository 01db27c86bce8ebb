//! Structured output through `ferrox serve` on the default model, driven by the official
//! `openai` Python client (`structured_client.py`): 20 strict `json_schema` answers, greedy,
//! every one parsing and validating under its schema (the `jsonschema` package), with
//! speculative decoding on and with `--no-spec`, the texts identical; a streamed schema
//! answer equal to the whole one, `json_object`, a GBNF `grammar`, and a refused schema as a
//! 400 naming `response_format`. `ferrox run` with `-j`, `--grammar-file` (GBNF) and a Lark
//! tool-call shape through `--grammar`.

mod common;
use common::DEFAULT_MODEL;

/// The client script's JSON against a server started with `args`.
fn run_client(model: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--parallel", "2", "-c", "2048", "--api-key", "test-key"];
    all.extend_from_slice(args);
    let (_server, addr) = common::serve(model, &all);
    common::server::python_json(
        "structured_client.py",
        &[format!("http://{addr}/v1"), DEFAULT_MODEL.to_string()],
    )
}

#[test]
fn strict_json_schemas_validate_and_speculation_changes_no_text() {
    let path = common::model(DEFAULT_MODEL);
    let spec = run_client(path.to_str().unwrap(), &[]);
    let plain = run_client(path.to_str().unwrap(), &["--no-spec"]);
    let (a, b) = (
        spec["schemas"].as_array().unwrap(),
        plain["schemas"].as_array().unwrap(),
    );
    assert_eq!(a.len(), 20);
    // The comparison means something only if drafts were verified under the grammar.
    let ratio = spec["acceptance"].as_f64().unwrap();
    eprintln!("draft acceptance under grammars: {ratio}");
    assert!(ratio > 0.0, "no draft was accepted");
    assert_eq!(plain["acceptance"], 0.0);
    for (what, v) in [("drafts", &spec), ("--no-spec", &plain)] {
        let masks = v["masks"].as_u64().unwrap();
        let secs = v["mask_seconds"].as_f64().unwrap();
        eprintln!(
            "{what}: {masks} grammar masks, {:.0} µs each",
            secs * 1e6 / masks.max(1) as f64
        );
        assert!(masks > 0);
    }
    // One mask per committed token (plus the end), drafts or not.
    assert_eq!(spec["masks"], plain["masks"]);
    for (x, y) in a.iter().zip(b) {
        let name = &x["name"];
        eprintln!(
            "{name}: {} tokens, {} s with drafts, {} s without",
            x["tokens"], x["secs"], y["secs"]
        );
        assert!(
            x["error"].is_null(),
            "{name}: {} in {}",
            x["error"],
            x["text"]
        );
        assert!(y["error"].is_null(), "{name} (--no-spec): {}", y["error"]);
        assert_eq!(
            x["finish"], "stop",
            "{name}: the grammar's end is the answer's end"
        );
        assert_eq!(x["text"], y["text"], "{name}: --no-spec changed the text");
    }
    assert_eq!(spec["stream"], a[2]["text"], "streamed schema answer");
    for k in ["stream", "json_object", "gbnf"] {
        assert_eq!(spec[k], plain[k], "{k}: --no-spec changed the text");
    }
    let obj: serde_json::Value = serde_json::from_str(spec["json_object"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("json_object: {e}: {}", spec["json_object"]));
    assert!(obj.is_object(), "{obj}");
    let g = spec["gbnf"].as_str().unwrap();
    assert!(
        g.starts_with("The answer is yes.") || g.starts_with("The answer is no."),
        "{g}"
    );
    assert!(
        g.ends_with('.') && g.len() <= "The answer is yes. ".len() + 32,
        "{g}"
    );
    let bad = &spec["bad_schema"];
    assert_eq!(bad["class"], "BadRequestError", "{bad}");
    assert_eq!(bad["param"], "response_format", "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("strnig"), "{bad}");
}

#[test]
fn run_takes_a_json_schema_or_a_gbnf_grammar() {
    let path = common::model(DEFAULT_MODEL);
    let m = path.to_str().unwrap();
    // `ferrox run -m MODEL --temp 0 ARGS`'s output.
    let greedy = |args: &[&str]| {
        common::ferrox_ok([["run", "-m", m, "--temp", "0"].as_slice(), args].concat())
    };
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
        "langs": {"type": "array", "items": {"enum": ["rust", "c", "go"]}, "maxItems": 3}},
        "required": ["name", "langs"], "additionalProperties": false}"#;
    let out = greedy(&["-n", "80", "-j", schema, "Describe Linus Torvalds"]);
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["name"].is_string() && v["langs"].is_array(), "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("yn.gbnf");
    std::fs::write(&file, "# yes or no\nroot ::= (\"yes\" | \"no\") \"!\"\n").unwrap();
    let file = file.to_str().unwrap();
    let out = greedy(&["--grammar-file", file, "Is water wet?"]);
    assert!(matches!(out.trim(), "yes!" | "no!"), "{out}");

    // llguidance Lark (llama.cpp's `%llguidance` marker): the tool-call shape a server can force.
    let lark = r#"%llguidance {}
start: "<tool_call>\n" %json{"type": "object", "properties": {"name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"], "additionalProperties": false}},
    "required": ["name", "arguments"], "additionalProperties": false} "\n</tool_call>"
"#;
    let out = greedy(&["-n", "80", "--grammar", lark, "Weather in Paris?"]);
    let call = out
        .trim()
        .strip_prefix("<tool_call>\n")
        .and_then(|c| c.strip_suffix("\n</tool_call>"))
        .unwrap_or_else(|| panic!("{out}"));
    let v: serde_json::Value = serde_json::from_str(call).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["name"], "get_weather", "{v}");
    assert!(v["arguments"]["city"].is_string(), "{v}");

    let bad = common::ferrox(["run", "-m", m, "--grammar", "root ::= nothing", "hi"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("nothing"), "{err}");
}
