//! Fill-in-the-middle on the fake backend: llama-server's `/infill` (its fields, response and
//! SSE shape, validation), and `suffix` on `/v1/completions` and Ollama's `/api/generate`
//! building the same prompt. The fake lays a FIM prompt out as `extra P prefix prompt S suffix
//! M`, one token a byte, so the prompt's length shows what went in.

mod common;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn infill_answers_as_llama_server() {
    let body =
        json!({"input_prefix": "ab", "input_suffix": "cd", "n_predict": 3, "temperature": 0});
    let (a, r) = serve_post("/infill", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["content"], "w0 w1 w2 ");
    assert_eq!(v["stop"], true);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["model"], "fake-model");
    assert_eq!(v["tokens_predicted"], 3);
    // "PabScdM".
    assert_eq!(v["tokens_evaluated"], 7);
    assert_eq!(v["timings"]["predicted_n"], 3);

    // Extra chunks come first; `prompt` follows the prefix; stop words are llama-server's.
    let v = post(
        &a,
        "/infill",
        json!({
            "input_prefix": "ab", "input_suffix": "cd", "prompt": "z",
            "input_extra": [{"filename": "f.py", "text": "xy"}, {"text": "q"}],
            "n_predict": 8, "stop": ["w2"]
        }),
    )
    .await
    .json();
    assert_eq!(v["tokens_evaluated"], 11, "{v}");
    assert_eq!(v["content"], "w0 w1 ");
    assert_eq!(v["stop_type"], "word");
    assert_eq!(v["stopping_word"], "w2");

    // n_predict -1: up to the context.
    let v = post(
        &a,
        "/infill",
        json!({"input_prefix": "", "input_suffix": "", "n_predict": -1}),
    )
    .await
    .json();
    assert_eq!(v["tokens_predicted"], 64 - 3);
}

/// llama-server's `n_probs`: each generated token's log-probability and its alternatives in
/// `completion_probabilities`, whole and streamed; 0 is none, and `logprobs` beside it is a 400.
#[tokio::test]
async fn infill_reports_n_probs() {
    let a = server(1, 4, None).await;
    let req = json!({"input_prefix": "ab", "input_suffix": "cd", "n_predict": 3, "n_probs": 2});
    let v = post(&a, "/infill", req.clone()).await.json();
    let probs = v["completion_probabilities"]
        .as_array()
        .expect("probabilities");
    assert_eq!(probs.len(), 3, "{v}");
    assert_eq!(probs[1]["token"], "w1 ");
    assert_eq!(probs[1]["logprob"].as_f64().unwrap() as f32, -0.1);
    assert_eq!(probs[1]["top_logprobs"].as_array().unwrap().len(), 2);
    assert_eq!(probs[1]["top_logprobs"][0]["token"], "a0");

    let mut body = req.clone();
    body["stream"] = json!(true);
    let r = post(&a, "/infill", body).await;
    let streamed: usize = r
        .body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .map(|v| v["completion_probabilities"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(streamed, 3, "{}", r.body);

    let mut body = req.clone();
    body["n_probs"] = json!(0);
    let v = post(&a, "/infill", body).await.json();
    assert!(v.get("completion_probabilities").is_none(), "{v}");
    let mut body = req;
    body["logprobs"] = json!(2);
    let r = post(&a, "/infill", body).await;
    r.assert_names(400, "n_probs");
}

#[tokio::test]
async fn infill_streams_data_objects() {
    let body = json!({"input_prefix": "ab", "input_suffix": "cd", "n_predict": 3, "stream": true});
    let (_, r) = serve_post("/infill", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ev: Vec<Value> = r
        .events()
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(ev.len(), 4, "{}", r.body);
    let text: String = ev.iter().map(|e| e["content"].as_str().unwrap()).collect();
    assert_eq!(text, "w0 w1 w2 ");
    assert!(ev[..3].iter().all(|e| e["stop"] == false));
    let last = ev.last().unwrap();
    assert_eq!(last["stop"], true);
    assert_eq!(last["content"], "");
    assert_eq!(last["stop_type"], "limit");
    assert_eq!(last["tokens_predicted"], 3);
}

#[tokio::test]
async fn infill_refuses_bad_requests() {
    let a = server(1, 4, None).await;
    let cases = [
        (json!({"input_prefix": "a"}), "input_suffix"),
        (json!({"input_suffix": "a"}), "input_prefix"),
        (json!({"input_prefix": 1, "input_suffix": "a"}), "string"),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]}),
            "text",
        ),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "input_extra": {"text": "x"}}),
            "sequence",
        ),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "n_indent": 4}),
            "n_indent",
        ),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "n_predict": 2, "max_tokens": 2}),
            "n_predict",
        ),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "n_predict": 0}),
            "max_tokens",
        ),
        (
            json!({"input_prefix": "a", "input_suffix": "b", "model": "other"}),
            "other",
        ),
    ];
    for (body, needle) in cases {
        let r = post(&a, "/infill", body.clone()).await;
        assert!(
            r.status == 400 || (needle == "other" && r.status == 404),
            "{body}: {} {}",
            r.status,
            r.body
        );
        assert!(r.body.contains(needle), "{body}: {}", r.body);
    }
}

#[tokio::test]
async fn a_model_without_fim_tokens_is_a_400_naming_them() {
    let (a, r) = serve_post(
        "/infill",
        json!({"input_prefix": "no-fim", "input_suffix": "b"}),
    )
    .await;
    r.assert_names(400, "prefix, suffix, middle");
    let r = complete(&a, json!({"prompt": "no-fim", "suffix": "b"})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "suffix");
    let r = post(
        &a,
        "/api/generate",
        json!({
            "model": "fake-model", "prompt": "no-fim", "suffix": "b", "stream": false
        }),
    )
    .await;
    r.assert_names(400, "middle");
}

#[tokio::test]
async fn suffix_builds_the_infill_prompt() {
    let a = server(1, 4, None).await;
    let v = complete(&a, json!({"prompt": "ab", "suffix": "cd", "max_tokens": 2}))
        .await
        .json();
    assert_eq!(v["choices"][0]["text"], "w0 w1 ");
    assert_eq!(v["usage"]["prompt_tokens"], 7, "{v}");
    // An empty prefix is a hole at the start of the file.
    let v = complete(&a, json!({"prompt": "", "suffix": "cd", "max_tokens": 1}))
        .await
        .json();
    assert_eq!(v["usage"]["prompt_tokens"], 5, "{v}");
    let v = post(
        &a,
        "/api/generate",
        json!({
            "model": "fake-model", "prompt": "ab", "suffix": "cd", "stream": false,
            "options": {"num_predict": 2}
        }),
    )
    .await
    .json();
    assert_eq!(v["response"], "w0 w1 ");
    assert_eq!(v["prompt_eval_count"], 7, "{v}");
}
