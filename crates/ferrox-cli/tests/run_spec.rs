//! `ferrox run` speculates by default: stdout is exactly the `--no-spec` text (greedy and
//! seeded sampling), and `--verbose` reports the speculation statistics on stderr only.

mod common;
use common::ferrox_checked as ferrox;

#[test]
fn speculative_run_prints_the_plain_text_and_reports_stats() {
    let prompt = "Add type hints to this function and return it unchanged otherwise:\n\n```python\ndef scale(values, factor):\n    result = []\n    for value in values:\n        result.append(value * factor)\n    return result\n```";
    for sampling in [&["--temp", "0"][..], &["--temp", "0.8", "--seed", "5"][..]] {
        let mut args = vec!["run", "-m", "qwen2.5-coder:0.5b-instruct", "-n", "64"];
        args.extend_from_slice(sampling);
        args.push(prompt);
        let plain = ferrox([&args[..], &["--no-spec"]].concat());
        let spec = ferrox([&args[..], &["--verbose"]].concat());
        assert_eq!(
            String::from_utf8_lossy(&spec.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{sampling:?}"
        );
        let err = String::from_utf8_lossy(&spec.stderr);
        let stats = err
            .lines()
            .find(|l| l.starts_with("speculation:"))
            .unwrap_or_else(|| panic!("no speculation stats on stderr: {err}"));
        eprintln!("{sampling:?}: {stats}");
        assert!(!String::from_utf8_lossy(&spec.stdout).contains("speculation:"));
        assert!(!String::from_utf8_lossy(&plain.stderr).contains("speculation:"));
    }
}

/// `--draft-model` (llama.cpp's `-md`): `run` prints the plain text and reports the draft
/// model's drafts; a model with another vocabulary is refused naming the flag; `serve` answers
/// with the plain text and counts the draft model's drafts in `/metrics`.
#[test]
fn a_draft_model_drafts_without_changing_the_text() {
    let model = "qwen2.5-coder:0.5b-instruct";
    let prompt = "Explain in plain words why the sky is blue.";
    let args = ["run", "-m", model, "--temp", "0", "-n", "32", prompt];
    let plain = ferrox([&args[..], &["--no-spec"]].concat());
    let with = ferrox([&args[..], &["--verbose", "--draft-model", model]].concat());
    assert_eq!(
        String::from_utf8_lossy(&with.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
    let err = String::from_utf8_lossy(&with.stderr);
    let line = err.lines().find(|l| l.starts_with("drafts by drafter:"));
    assert!(
        line.is_some_and(|l| l.contains("draft-model")),
        "no draft-model drafts reported: {err}"
    );

    let refused = common::ferrox([&args[..], &["--draft-model", "gemma3:270m"]].concat());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("--draft-model gemma3:270m cannot draft"),
        "{err}"
    );

    let (_server, addr) = common::serve(model, &["--draft-model", model, "--parallel", "1"]);
    let (status, v) = common::server::post_json(
        &addr,
        "/v1/chat/completions",
        &serde_json::json!({
            "model": model, "max_tokens": 32, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]
        }),
    );
    assert_eq!(status, 200, "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(text, String::from_utf8_lossy(&plain.stdout).trim_end());
    let (_, metrics) = common::server::http(&addr, "GET", "/metrics", "");
    let drafted = metrics
        .lines()
        .find(|l| l.starts_with("ferrox_draft_tokens_total{drafter=\"draft-model\"}"));
    assert!(drafted.is_some(), "{metrics}");
}
