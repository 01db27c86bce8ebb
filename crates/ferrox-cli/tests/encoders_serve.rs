//! `ferrox serve` and `ferrox embed` over encoder models, end to end: all-minilm:l6-v2's
//! embeddings through the official `openai` and `ollama` clients equal sentence-transformers'
//! (the fixture of crates/ferrox-models/tests/encoders.rs); generation routes answer 400; the
//! tiny reranker's `/v1/rerank` (Cohere / Jina shape) and llama-server's `/rerank` (`texts`)
//! give the same order as transformers' scores; bad rerank input is a 400 naming the problem.

mod common;

use common::server::{floats, post_json, python_json, read_json};
use serde_json::{json, Value};

fn fixture(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ferrox-models/tests/fixtures/encoders")
        .join(rel)
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

const MINILM: &str = "all-minilm:l6-v2";

#[test]
fn minilm_serves_embeddings_to_official_clients() {
    let _ = common::model(MINILM);
    let f = read_json(&fixture("minilm_embeddings.json"));
    let picks = [0usize, 6, 9, 16];
    let texts: Vec<String> = picks
        .iter()
        .map(|&i| f["sentences"][i].as_str().unwrap().to_string())
        .collect();
    let (server, addr) = common::serve(MINILM, &[]);
    let mut args = vec![addr.clone(), MINILM.to_string()];
    args.extend(texts.iter().cloned());
    let v = python_json("encoders_client.py", &args);
    for (k, &i) in picks.iter().enumerate() {
        let want = floats(&f["embeddings"][i]);
        for key in ["vectors", "ollama"] {
            let c = cosine(&floats(&v[key][k]), &want);
            assert!(c >= 0.9999, "{key} {i}: cosine {c}");
        }
    }
    assert_eq!(
        v["again"], v["vectors"][0],
        "base64 and float transfers agree"
    );
    assert_eq!(v["chat"]["status"], 400, "{}", v["chat"]);
    assert!(v["chat"]["message"]
        .as_str()
        .unwrap()
        .contains("does not generate"));
    let (status, body) = post_json(
        &addr,
        "/v1/rerank",
        &json!({"query": "q", "documents": ["d"]}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("no rerank head"), "{body}");
    drop(server);
}

#[test]
fn embed_cli_prints_json_lines() {
    let f = read_json(&fixture("minilm_embeddings.json"));
    let texts = [
        f["sentences"][1].as_str().unwrap(),
        f["sentences"][4].as_str().unwrap(),
    ];
    let out = common::ferrox_ok(["embed", "-m", MINILM, texts[0], texts[1]]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for (line, i) in lines.iter().zip([1, 4]) {
        let c = cosine(&floats(&line["embedding"]), &floats(&f["embeddings"][i]));
        assert!(c >= 0.9999, "cosine {c}");
    }
}

#[test]
fn tiny_reranker_serves_rerank() {
    let f = read_json(&fixture("rerank.json"));
    let dir = fixture("tiny-reranker");
    let (server, addr) = common::serve(dir.to_str().unwrap(), &[]);
    let docs = f["documents"].clone();
    let n = docs.as_array().unwrap().len();
    let scores = floats(&f["scores"]);
    let mut want: Vec<usize> = (0..n).collect();
    want.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let order = |v: &Value| -> Vec<usize> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["index"].as_u64().unwrap() as usize)
            .collect()
    };
    let cohere = json!({"query": f["query"], "documents": docs, "top_n": 3,
                        "return_documents": true});
    let (status, a) = post_json(&addr, "/v1/rerank", &cohere);
    assert_eq!(status, 200, "{a}");
    assert_eq!(order(&a), want[..3], "{a}");
    for r in a["results"].as_array().unwrap() {
        let i = r["index"].as_u64().unwrap() as usize;
        let s = r["relevance_score"].as_f64().unwrap();
        assert!((s - scores[i]).abs() < 1e-4, "{s} vs {}", scores[i]);
        assert_eq!(r["document"]["text"], docs[i]);
    }
    let llama = json!({"query": f["query"], "texts": docs});
    let (status, b) = post_json(&addr, "/rerank", &llama);
    assert_eq!(status, 200, "{b}");
    assert_eq!(order(&b), want);
    let bad = [
        (json!({"query": "q", "documents": []}), "documents"),
        (
            json!({"query": "x".repeat(1 << 20), "documents": ["d"]}),
            "query",
        ),
        (
            json!({"query": "q", "documents": ["d"], "top_n": 0}),
            "top_n",
        ),
        (
            json!({"query": "q", "documents": ["d"], "top_n": 2}),
            "top_n",
        ),
    ];
    for (body, param) in bad {
        let (status, e) = post_json(&addr, "/v1/rerank", &body);
        assert_eq!(status, 400, "{e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }
    let model = dir.to_str().unwrap();
    let (status, e) = post_json(
        &addr,
        "/v1/embeddings",
        &json!({"model": model, "input": "hi"}),
    );
    assert!(status >= 400, "{status} {e}");
    assert!(e.to_string().contains("reranker"), "{e}");
    drop(server);
}
