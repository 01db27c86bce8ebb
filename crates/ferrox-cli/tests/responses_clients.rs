//! `/v1/responses` of `ferrox serve` against real models, through the clients that speak it:
//! the official `openai` Python client (greedy answers equal the chat route's, a tool round
//! trip, structured output, refusals) and Codex CLI (`codex exec` with a provider pointing at
//! ferrox, `wire_api = "responses"`), which `scripts/test` installs into `.tools/npm`.

mod common;
use common::server::{http, python_json};
use serde_json::json;

const PROMPT: &str = "Write a haiku about the sea.";

#[test]
fn openai_responses_match_chat_completions() {
    let model = "qwen2.5-coder:0.5b-instruct";
    let (_server, addr) = common::serve_model(model, &[]);
    let v = python_json(
        "responses_client.py",
        &[
            format!("http://{addr}/v1"),
            model.into(),
            PROMPT.into(),
            "12".into(),
        ],
    );
    let chat = &v["chat"];
    assert!(!chat.as_str().unwrap().is_empty(), "{v}");
    for k in ["whole", "stream", "retrieved"] {
        assert_eq!(&v[k], chat, "{k}: {v}");
    }
    assert_eq!(
        v["whole_status"],
        json!(["incomplete", "max_output_tokens"])
    );
    let u = v["usage"].as_array().unwrap();
    assert_eq!(u[1], 12);
    assert_eq!(u[2], u[0].as_u64().unwrap() + 12);
    assert_eq!(
        v["stream_first_last"],
        json!(["response.created", "response.incomplete"])
    );
    assert_eq!(v["stream_seq_ok"], true);
    assert_eq!(v["call"][0], "get_weather", "{v}");
    assert!(v["call"][1]["city"].as_str().unwrap().contains("Paris"));
    // The second turn carries the first (previous_response_id) and answers from the result.
    let tokens = v["after_call_input_tokens"].as_array().unwrap();
    assert!(tokens[1].as_u64() > tokens[0].as_u64(), "{v}");
    let after = v["after_call"].as_str().unwrap();
    assert!(
        after.contains("21") || after.to_lowercase().contains("sunny"),
        "{v}"
    );
    assert!(v["person"]["age"].is_i64(), "{v}");
    assert_eq!(v["unknown_field"][0], 400);
    assert!(v["unknown_field"][1]
        .as_str()
        .unwrap()
        .contains("frobnicate"));
    assert_eq!(v["missing_previous"][0], 404);
}

/// Codex CLI, as installed by `scripts/test` (pinned in scripts/test-npm-packages.txt).
fn codex() -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.tools/npm/node_modules/.bin/codex");
    assert!(
        p.exists(),
        "{} is missing: scripts/test installs Codex CLI there",
        p.display()
    );
    p
}

/// Codex's first prompt is its instructions and tools, ~8.6k tokens: 1.5-4 minutes of prefill on
/// 2 cores (AVX-512 to AVX2-only hosts).
#[test]
fn codex_exec_answers_through_responses() {
    let model = "qwen2.5-coder:1.5b-instruct";
    let (_server, addr) = common::serve_model(model, &["-c", "32768"]);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.py"), "print(6*7)\n").unwrap();
    // No retries (a failed request fails the run); a long idle limit (the first prompt is
    // Codex's whole system prompt and tool list, minutes of prefill on 2 cores); no hosted
    // web search (ferrox runs no hosted tools and refuses them).
    let config = format!(
        "model = \"{model}\"\nmodel_provider = \"ferrox\"\nweb_search = \"disabled\"\n\
         [model_providers.ferrox]\nname = \"ferrox\"\nbase_url = \"http://{addr}/v1\"\n\
         wire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\
         stream_idle_timeout_ms = 1800000\n"
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(codex())
        .args(["exec", "--skip-git-repo-check"])
        .arg("What does a.py print? Answer with the number only.")
        .current_dir(work.path())
        .env("CODEX_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("codex exec took {:.0?}", started.elapsed());
    assert!(out.status.success(), "codex failed:\n{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "no answer:\n{stderr}");
    let (_, metrics) = http(&addr, "GET", "/metrics", "");
    let value = |name: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    assert!(value("ferrox_requests_total ") >= 1.0, "{metrics}");
    assert_eq!(value("ferrox_request_errors_total "), 0.0, "{stderr}");
    eprintln!("codex answered: {}", stdout.trim());
}
