//! `ferrox serve` on the default model, driven by the official `openai` Python client:
//! chat and completion, streaming and not; greedy chat text, alone and with four clients at
//! once, equals what `ferrox run --temp 0` prints for the same prompt.

mod common;
use common::DEFAULT_MODEL;

const PROMPT: &str = "Write a Python function that checks whether a number is prime.";
const N: usize = 32;
const KEY: &str = "test-key";

fn start(model: &str) -> (common::Server, String) {
    common::serve(model, &["--parallel", "2", "-c", "2048", "--api-key", KEY])
}

/// What `ferrox run` prints for the prompt, greedy (its stdout ends with one newline).
fn cli_greedy(model: &str) -> String {
    let n = N.to_string();
    let text = common::ferrox_ok(["run", "-m", model, "--temp", "0", "-n", &n, PROMPT]);
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

#[test]
fn openai_client_chat_and_completions_match_greedy_generation() {
    let path = common::model(DEFAULT_MODEL);
    let expected = cli_greedy(path.to_str().unwrap());
    assert!(!expected.trim().is_empty());

    let (_server, addr) = start(path.to_str().unwrap());
    let v = common::server::python_json(
        "openai_client.py",
        &[
            format!("http://{addr}/v1"),
            DEFAULT_MODEL.to_string(),
            PROMPT.to_string(),
            N.to_string(),
        ],
    );
    assert_eq!(
        v["chat"],
        expected.as_str(),
        "server chat vs `ferrox run --temp 0`"
    );
    for (i, t) in v["chat_concurrent"].as_array().unwrap().iter().enumerate() {
        assert_eq!(t, expected.as_str(), "concurrent chat {i}");
    }
    assert_eq!(v["chat_stream"], expected.as_str());
    assert_eq!(v["chat_usage"], v["chat_stream_usage"]);
    assert_eq!(v["chat_usage"][1], N);
    assert_eq!(v["chat_finish"], "length");
    assert_eq!(v["chat_stream_finish"], "length");
    assert_eq!(v["completion"], v["completion_stream"]);
    assert!(!v["completion"].as_str().unwrap().is_empty());
    assert_eq!(v["models"], serde_json::json!([DEFAULT_MODEL]));
    assert_eq!(v["unknown_model"], "NotFoundError");
    assert_eq!(
        v["n2"],
        serde_json::json!([expected, expected]),
        "n = 2 greedy"
    );
    let (u, s) = (&v["unseeded"], &v["seeded"]);
    assert_ne!(u[0], u[1], "unseeded temperature-1 requests must differ");
    assert_eq!(s[0], s[1], "one seed, one text");
    check_chat_logprobs(&v, &expected);
    check_completion_logprobs(path.to_str().unwrap(), &v["completion_logprobs"]);
}

/// Greedy chat log-probabilities: each chosen token is its own best alternative, the
/// alternatives are sorted, the tokens spell the greedy text, streaming reports the same.
fn check_chat_logprobs(v: &serde_json::Value, expected: &str) {
    let entries = v["chat_logprobs"].as_array().unwrap();
    assert_eq!(entries.len(), 8);
    let mut text = String::new();
    for e in entries {
        let (tok, lp, top) = (&e[0], e[1].as_f64().unwrap(), e[2].as_array().unwrap());
        text.push_str(tok.as_str().unwrap());
        assert_eq!(top.len(), 3);
        assert_eq!(&top[0][0], tok, "greedy picks the most likely token");
        assert!((top[0][1].as_f64().unwrap() - lp).abs() < 1e-6);
        assert!(top.windows(2).all(|w| w[0][1].as_f64() >= w[1][1].as_f64()));
        assert!(lp <= 0.0);
    }
    assert!(expected.starts_with(&text), "{text:?} vs {expected:?}");
    let streamed: Vec<_> = entries
        .iter()
        .map(|e| [e[0].clone(), e[1].clone()])
        .collect();
    assert_eq!(v["chat_stream_logprobs"], serde_json::json!(streamed));
}

/// Completion log-probabilities equal `ferrox logits` on the prompt plus the generated ids
/// (log-softmax of each row) within 1e-4, alternatives included.
fn check_completion_logprobs(model: &str, lp: &serde_json::Value) {
    let ids = |v: &serde_json::Value| -> usize {
        v.as_str()
            .unwrap()
            .strip_prefix("token_id:")
            .unwrap()
            .parse()
            .unwrap()
    };
    let generated: Vec<usize> = lp["tokens"].as_array().unwrap().iter().map(ids).collect();
    let prompt: Vec<usize> = serde_json::from_str(&common::ferrox_ok([
        "tokenize", "-m", model, "--ids", PROMPT,
    ]))
    .unwrap();
    let all: Vec<String> = prompt
        .iter()
        .chain(&generated)
        .map(|t| t.to_string())
        .collect();
    let out = std::env::temp_dir().join(format!("ferrox-serve-lp-{}.npy", std::process::id()));
    common::ferrox_ok([
        "logits",
        "-m",
        model,
        "--all",
        "--ids",
        &all.join(","),
        "-o",
        out.to_str().unwrap(),
    ]);
    let (_, logits) = common::read_npy(&out);
    std::fs::remove_file(&out).ok();
    let vocab = logits.len() / all.len();
    for (i, &tok) in generated.iter().enumerate() {
        let row = &logits[(prompt.len() - 1 + i) * vocab..(prompt.len() + i) * vocab];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let z = max
            + row
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        let want = row[tok] as f64 - z;
        let got = lp["token_logprobs"][i].as_f64().unwrap();
        assert!((got - want).abs() < 1e-4, "token {i}: {got} vs {want}");
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert_eq!(top.len(), 5);
        for &t in &order[..5] {
            let got = top[&format!("token_id:{t}")].as_f64().unwrap();
            assert!(
                (got - (row[t] as f64 - z)).abs() < 1e-4,
                "alternative {t} at {i}"
            );
        }
    }
}
