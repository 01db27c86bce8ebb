//! The Ollama and Anthropic routes and embeddings of `ferrox serve`, driven by the official
//! `ollama`, `anthropic` and `openai` Python clients (`scripts/test` installs them) against the
//! real default model: greedy answers equal `ferrox run`'s and the OpenAI route's, and an
//! embedding equals the one computed from `ferrox logits --hidden`'s states.

mod common;
use common::server::{floats, python_json};
use serde_json::{json, Value};

const MODEL: &str = "qwen2.5-coder:0.5b-instruct";
const PROMPT: &str = "Write a haiku about the sea.";

#[test]
fn ollama_client_matches_greedy_generation() {
    let path = common::model(MODEL);
    let model = path.to_str().unwrap();
    let expected = common::greedy_run(model, PROMPT, 12);
    let (_server, addr) = common::serve(model, &["--parallel", "2"]);
    let v = python_json(
        "ollama_client.py",
        &[
            format!("http://{addr}"),
            MODEL.into(),
            PROMPT.into(),
            "12".into(),
        ],
    );
    for k in ["chat", "chat_stream", "generate", "generate_stream"] {
        assert_eq!(v[k], json!(expected), "{k}: {v}");
    }
    assert_eq!(v["chat_done"][0], true);
    assert_eq!(v["chat_done"][1], "length", "12 tokens cut the haiku short");
    assert_eq!(v["chat_done"][3], 12);
    assert!(v["chat_stream_chunks"].as_u64().unwrap() > 2, "{v}");
    assert_eq!(v["chat_stream_last"], json!([true, "length", 12]));
    assert_eq!(v["generate_done"], json!([true, "length"]));
    // raw: the prompt without the chat template continues differently.
    assert_ne!(v["generate_raw"], json!(expected));
    assert!(v["multi_turn"].as_str().unwrap().contains("Rome"), "{v}");
    let listed: Vec<&str> = v["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(listed.contains(&MODEL), "{listed:?}");
    let show = &v["show"];
    assert_eq!(show["family"], "qwen2");
    assert_eq!(show["quantization"], "Q4_K_M");
    assert_eq!(show["format"], "gguf");
    assert_eq!(show["context_length"], 32768);
    assert!(show["template"].as_str().unwrap().contains("<|im_start|>"));
    assert!(show["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("tools")));
    assert_eq!(v["ps"], json!([[MODEL, 4096]]));
    assert!(v["version"]["version"].is_string());
    assert_eq!(v["embed_shape"], json!([2, 896]));
    let person = &v["json_format"];
    assert!(person["name"].is_string() && person["age"].is_i64(), "{v}");
    assert_eq!(v["unsupported"][0], 400);
    assert!(v["unsupported"][1].as_str().unwrap().contains("mirostat"));
    assert_eq!(v["unknown_model"], 404);
}

#[test]
fn anthropic_client_matches_the_openai_route() {
    let (_server, addr) = common::serve_model(MODEL, &["--parallel", "2"]);
    let v = python_json(
        "anthropic_client.py",
        &[format!("http://{addr}"), MODEL.into(), "48".into()],
    );
    let openai = &v["openai"];
    assert!(!openai.as_str().unwrap().is_empty());
    assert_eq!(&v["whole"], openai, "{v}");
    assert_eq!(&v["stream"], openai, "{v}");
    assert_eq!(v["whole_stop"], v["stream_stop"]);
    assert_eq!(v["usage"][0], v["openai_prompt_tokens"]);
    assert_eq!(v["count_tokens"], v["openai_prompt_tokens"]);
    let [edited, by_hand, original] = [0, 1, 2].map(|i| v["cm_tokens"][i].as_u64().unwrap());
    assert_eq!(edited, by_hand, "{v}");
    assert!(original > by_hand + 50, "{v}");
    assert_eq!(v["cm_usage"], by_hand);
    let applied = &v["cm_applied"]["applied_edits"][0];
    assert_eq!(applied["cleared_tool_uses"], 1, "{v}");
    assert_eq!(applied["cleared_input_tokens"], original - by_hand, "{v}");
    assert_eq!(
        v["stream_first_last"],
        json!(["message_start", "message_stop"])
    );
    for ev in [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
    ] {
        assert!(v["stream_events"].as_array().unwrap().contains(&json!(ev)));
    }
    assert_eq!(
        v["stop_sequence"],
        json!(["1, 2, 3, 4, ", "stop_sequence", "5"])
    );
    assert_eq!(
        v["tool"],
        json!([["get_weather", {"city": "Paris"}]]),
        "{v}"
    );
    assert_eq!(v["tool_stop"], "tool_use");
    assert_eq!(v["tool_stream"], v["tool"]);
    let t = &v["tool_result_tokens"];
    assert!(t[1].as_u64() > t[0].as_u64(), "{t}");
    assert_eq!(v["error"], json!([400, "invalid_request_error"]));
}

#[test]
fn embeddings_match_pooled_hidden_states() {
    let path = common::model(MODEL);
    let model = path.to_str().unwrap();
    let texts = [
        "The cat sat on the mat.",
        "A kitten is resting on a rug.",
        "Quarterly tax filings are due in April.",
    ];
    let (server, addr) = common::serve(model, &["--parallel", "1"]);
    let mut args = vec![format!("http://{addr}/v1"), MODEL.to_string()];
    args.extend(texts.iter().map(|t| t.to_string()));
    let v = python_json("embeddings_client.py", &args);
    drop(server);
    let cos = |i: usize, j: usize| v["cos"][i][j].as_f64().unwrap();
    for i in 0..3 {
        assert!((cos(i, i) - 1.0).abs() < 1e-6, "{}", cos(i, i));
    }
    assert!(
        cos(0, 1) > cos(0, 2) + 0.2 && cos(0, 1) > cos(1, 2) + 0.2,
        "related texts rank above the unrelated one: {}",
        v["cos"]
    );
    let vec0 = floats(&v["vectors"][0]);
    let again = floats(&v["again"]);
    assert_eq!(
        vec0, again,
        "base64 and float transfers carry the same vector"
    );
    // The default pooling of a causal model: the last position's normed state, L2-normalised.
    let out = std::env::temp_dir().join(format!("ferrox-embd-{}.npy", std::process::id()));
    common::ferrox_ok([
        "logits",
        "-m",
        model,
        "--hidden",
        "-o",
        out.to_str().unwrap(),
        texts[0],
    ]);
    let (header, h) = common::read_npy(&out);
    std::fs::remove_file(&out).ok();
    assert!(header.contains("(1, 896)"), "{header}");
    let norm = h.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let max_diff = h
        .iter()
        .zip(&vec0)
        .map(|(&x, &y)| (x as f64 / norm - y).abs())
        .fold(0.0, f64::max);
    assert!(max_diff < 1e-5, "embedding differs by {max_diff}");
    assert_eq!(v["usage"][0], v["usage"][1]);
}
