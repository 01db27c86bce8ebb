//! Several models in one server (the model registry): the request's `model` picks, models load
//! on first use, Ollama's keep_alive and `--max-loaded` unload them, one model's failure stays
//! its own.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{get, model_ids, post, FakeAs};
use ferrox_server::models::{KeepAlive, ModelError, DEFAULT_KEEP_ALIVE};
use ferrox_server::{Backend, ModelSpec, ModelsConfig, Options, Registry};
use serde_json::{json, Value};

/// A fake model named `name`, counting its loads; "broken" fails to load.
fn spec(name: &'static str, loads: Arc<AtomicUsize>) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        aliases: vec![format!("{name}.gguf")],
        size: 1000,
        loader: Arc::new(move || {
            loads.fetch_add(1, Ordering::SeqCst);
            if name == "broken" {
                return Err("no such file".into());
            }
            if name == "slow" {
                std::thread::sleep(Duration::from_millis(1500));
            }
            Ok(Arc::new(FakeAs(name)) as Arc<dyn Backend>)
        }),
    }
}

fn config(max_loaded: usize) -> ModelsConfig {
    ModelsConfig {
        parallel: 2,
        queue: 8,
        max_loaded,
        max_bytes: 0,
        keep_alive: DEFAULT_KEEP_ALIVE,
        load_timeout: Duration::from_secs(10),
    }
}

async fn serve(names: &[&'static str], max_loaded: usize) -> (String, Vec<Arc<AtomicUsize>>) {
    serve_with(names, config(max_loaded)).await
}

async fn serve_with(
    names: &[&'static str],
    config: ModelsConfig,
) -> (String, Vec<Arc<AtomicUsize>>) {
    let loads: Vec<Arc<AtomicUsize>> = names.iter().map(|_| Arc::default()).collect();
    let specs = names
        .iter()
        .zip(&loads)
        .map(|(n, l)| spec(n, l.clone()))
        .collect();
    let registry = Registry::new(specs, config, Options::default()).unwrap();
    (common::serve_registry(registry).await, loads)
}

async fn generate(addr: &str, model: &str, extra: Value) -> common::Resp {
    let mut body = json!({"model": model, "prompt": "hi", "stream": false,
        "options": {"num_predict": 3}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    post(addr, "/api/generate", body).await
}

async fn ps_names(addr: &str) -> Vec<String> {
    let ps = get(addr, "/api/ps").await.json();
    ps["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_requests_model_picks_and_loads_on_first_use() {
    let (addr, loads) = serve(&["alpha", "beta"], 0).await;
    let ids = model_ids(&addr).await;
    assert_eq!(ids, [json!("alpha"), json!("beta")]);
    let tags = get(&addr, "/api/tags").await.json();
    assert_eq!(tags["models"].as_array().unwrap().len(), 2, "{tags}");
    assert!(
        ps_names(&addr).await.is_empty(),
        "nothing loaded before use"
    );
    assert_eq!(loads[0].load(Ordering::SeqCst), 0);

    for model in ["alpha", "beta", "alpha.gguf", "beta"] {
        let r = generate(&addr, model, json!({})).await;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        let served = model.trim_end_matches(".gguf");
        assert_eq!(r.json()["model"], model, "{model}");
        assert!(ps_names(&addr).await.contains(&served.to_string()));
    }
    let chat = post(
        &addr,
        "/v1/chat/completions",
        json!({"model": "beta", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    )
    .await;
    assert_eq!(chat.status, 200, "{}", chat.body);
    assert_eq!(loads[0].load(Ordering::SeqCst), 1, "alpha loaded once");
    assert_eq!(loads[1].load(Ordering::SeqCst), 1, "beta loaded once");
    assert_eq!(ps_names(&addr).await, ["alpha", "beta"]);
    let ps = get(&addr, "/api/ps").await.json();
    assert_eq!(ps["models"][0]["size"], 1000);
    assert!(
        ps["models"][0]["expires_at"].as_str().unwrap() < "2318",
        "{ps}"
    );

    let metrics = get(&addr, "/metrics").await.body;
    assert!(
        metrics.contains("ferrox_requests_total{model=\"alpha\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferrox_requests_total{model=\"beta\"}"),
        "{metrics}"
    );
    assert_eq!(metrics.matches("# TYPE ferrox_requests_total").count(), 1);
    // A sample with labels of its own keeps them beside the model's.
    assert!(
        metrics.contains("ferrox_draft_tokens_total{model=\"beta\",drafter=\"fake\"} "),
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("# TYPE ferrox_draft_tokens_total").count(),
        1
    );
}

#[tokio::test]
async fn unknown_models_and_bad_keep_alive_are_refused() {
    let (addr, loads) = serve(&["alpha", "beta"], 0).await;
    let r = generate(&addr, "gamma", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let msg = r.json()["error"].as_str().unwrap().to_string();
    assert!(msg.contains("`alpha`") && msg.contains("`beta`"), "{msg}");
    let r = post(
        &addr,
        "/v1/chat/completions",
        json!({"model": "gamma", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    for bad in [json!("abc"), json!("5x"), json!(true)] {
        let r = generate(&addr, "alpha", json!({"keep_alive": bad})).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(r.body.contains("keep_alive"), "{}", r.body);
    }
    assert_eq!(loads[0].load(Ordering::SeqCst), 0, "refused before loading");
}

#[tokio::test]
async fn keep_alive_zero_unloads_and_negative_keeps() {
    let (addr, loads) = serve(&["alpha", "beta"], 0).await;
    let r = generate(&addr, "alpha", json!({"keep_alive": 0})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(ps_names(&addr).await.is_empty(), "keep_alive 0 unloads");
    let r = generate(&addr, "alpha", json!({"keep_alive": "-1"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(loads[0].load(Ordering::SeqCst), 2, "loaded again");
    let ps = get(&addr, "/api/ps").await.json();
    assert_eq!(ps["models"][0]["expires_at"], "2318-01-01T00:00:00Z");
    // A short keep-alive expires on its own.
    let r = generate(&addr, "beta", json!({"keep_alive": "300ms"})).await;
    assert_eq!(r.status, 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(ps_names(&addr).await, ["alpha"]);
}

#[tokio::test]
async fn max_loaded_unloads_the_least_recently_used() {
    let (addr, loads) = serve(&["alpha", "beta", "gamma"], 2).await;
    for model in ["alpha", "beta", "alpha", "gamma"] {
        assert_eq!(generate(&addr, model, json!({})).await.status, 200);
    }
    // beta was used least recently.
    assert_eq!(ps_names(&addr).await, ["alpha", "gamma"]);
    assert_eq!(generate(&addr, "beta", json!({})).await.status, 200);
    assert_eq!(ps_names(&addr).await, ["beta", "gamma"]);
    assert_eq!(loads[1].load(Ordering::SeqCst), 2);
}

/// Each fake weighs 1000 bytes: a budget of 2500 holds two, and a budget below one model's
/// size still serves it.
#[tokio::test]
async fn a_memory_budget_unloads_the_least_recently_used() {
    let budget = |max_bytes| ModelsConfig {
        max_bytes,
        ..config(0)
    };
    let (addr, loads) = serve_with(&["alpha", "beta", "gamma"], budget(2500)).await;
    for model in ["alpha", "beta", "alpha", "gamma"] {
        assert_eq!(generate(&addr, model, json!({})).await.status, 200);
    }
    assert_eq!(ps_names(&addr).await, ["alpha", "gamma"]);
    let ps = get(&addr, "/api/ps").await.json();
    assert_eq!(ps["models"][0]["size"], 1000, "{ps}");
    assert_eq!(loads[1].load(Ordering::SeqCst), 1);
    let (addr, _) = serve_with(&["alpha", "beta"], budget(500)).await;
    for model in ["alpha", "beta"] {
        assert_eq!(generate(&addr, model, json!({})).await.status, 200);
        assert_eq!(ps_names(&addr).await, [model]);
    }
}

#[tokio::test]
async fn one_models_failure_stays_its_own() {
    let (addr, _) = serve(&["alpha", "broken", "slow"], 0).await;
    let r = generate(&addr, "broken", json!({})).await;
    r.assert_names(500, "no such file");
    // A panicking generation on alpha ends alone; the model keeps serving.
    let p = post(
        &addr,
        "/v1/completions",
        json!({"model": "alpha", "prompt": "panic", "max_tokens": 5}),
    );
    let _ = p.await;
    assert_eq!(generate(&addr, "alpha", json!({})).await.status, 200);
    // While `slow` loads, alpha answers.
    let slow = tokio::spawn({
        let addr = addr.clone();
        async move { generate(&addr, "slow", json!({})).await.status }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = std::time::Instant::now();
    assert_eq!(generate(&addr, "alpha", json!({})).await.status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(slow.await.unwrap(), 200);
}

#[test]
fn duplicate_names_are_refused() {
    let l = Arc::<AtomicUsize>::default;
    let dup = Registry::new(
        vec![spec("alpha", l()), spec("alpha", l())],
        config(0),
        Options::default(),
    );
    assert!(matches!(dup, Err(ModelError::Duplicate(n)) if n == "alpha"));
    let ok = Registry::new(vec![spec("alpha", l())], config(0), Options::default());
    assert!(ok.is_ok());
    assert_ne!(DEFAULT_KEEP_ALIVE, KeepAlive::Forever);
}
