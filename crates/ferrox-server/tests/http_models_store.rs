//! The several-model server's store side: an unloaded model's backend is really dropped (its
//! engine thread joined, then the release hook runs), a model pulled through Ollama's
//! `/api/pull` is served and listed without a restart, a name only discovery knows is found
//! on first use, and HAProxy's agent check answers for the whole replica.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use common::{model_ids, post, FakeAs};
use ferrox_server::models::{Discover, DEFAULT_KEEP_ALIVE};
use ferrox_server::{
    Backend, Library, LibraryHandle, ModelCard, ModelEntry, ModelSpec, ModelsConfig, Options,
    PullStatus, Registry,
};
use serde_json::{json, Value};

/// Every fake backend loaded so far, to see which are still alive.
type Alive = Arc<Mutex<Vec<Weak<FakeAs>>>>;

fn spec(name: &'static str, alive: Alive) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        aliases: Vec::new(),
        size: 1000,
        loader: Arc::new(move || {
            let b = Arc::new(FakeAs(name));
            alive.lock().unwrap().push(Arc::downgrade(&b));
            Ok(b as Arc<dyn Backend>)
        }),
    }
}

fn config() -> ModelsConfig {
    ModelsConfig {
        parallel: 2,
        queue: 8,
        max_loaded: 0,
        max_bytes: 0,
        keep_alive: DEFAULT_KEEP_ALIVE,
        load_timeout: Duration::from_secs(10),
    }
}

/// A store whose pulls succeed for `gamma` (setting `pulled`) and `hf:` references, and fail
/// otherwise.
struct Store {
    pulled: Arc<AtomicBool>,
}

impl Library for Store {
    fn list(&self) -> Result<Vec<ModelEntry>, String> {
        Ok(Vec::new())
    }
    fn card(&self, name: &str) -> Result<ModelCard, String> {
        Err(format!("no card for {name}"))
    }
    fn pull(&self, name: &str, progress: &(dyn Fn(PullStatus) + Sync)) -> Result<(), String> {
        if name.starts_with("hf:") {
            return Ok(());
        }
        if name != "gamma" {
            return Err(format!("unknown model {name}"));
        }
        progress(PullStatus::Bytes {
            stage: "downloading",
            done: 10,
            total: 10,
        });
        self.pulled.store(true, Ordering::SeqCst);
        Ok(())
    }
}

static RELEASED: AtomicUsize = AtomicUsize::new(0);

fn released() {
    RELEASED.fetch_add(1, Ordering::SeqCst);
}

async fn serve(alive: Alive, pulled: Arc<AtomicBool>, options: Options) -> String {
    let specs = vec![spec("alpha", alive.clone()), spec("beta", alive.clone())];
    // `gamma` exists once pulled; `delta` is on disk but cannot be read.
    let found = pulled.clone();
    let discover: Discover = Arc::new(move |name: &str| match name {
        "gamma" if found.load(Ordering::SeqCst) => Some(Ok(spec("gamma", alive.clone()))),
        "delta" => Some(Err("/models/delta.gguf: not a GGUF file".into())),
        _ => None,
    });
    let registry = Registry::new(specs, config(), options)
        .unwrap()
        .with_discovery(discover)
        .with_release(released);
    common::serve_registry(registry).await
}

async fn generate(addr: &str, model: &str, keep_alive: Value) -> common::Resp {
    let body = json!({"model": model, "prompt": "hi", "stream": false,
        "options": {"num_predict": 3}, "keep_alive": keep_alive});
    post(addr, "/api/generate", body).await
}

fn live(alive: &Alive) -> usize {
    let v = alive.lock().unwrap();
    v.iter().filter(|w| w.strong_count() > 0).count()
}

#[tokio::test]
async fn an_unloaded_models_backend_is_dropped_then_released() {
    let alive = Alive::default();
    let addr = serve(alive.clone(), Arc::default(), Options::default()).await;
    assert_eq!(generate(&addr, "alpha", Value::Null).await.status, 200);
    assert_eq!(live(&alive), 1);
    let before = RELEASED.load(Ordering::SeqCst);
    let r = generate(&addr, "beta", json!(0)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(5);
    while (live(&alive) > 1 || RELEASED.load(Ordering::SeqCst) == before)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        live(&alive),
        1,
        "beta's backend is still held after its unload"
    );
    assert!(
        RELEASED.load(Ordering::SeqCst) > before,
        "no release after the unload"
    );
    // alpha stays, and beta loads again (a fresh backend).
    assert_eq!(generate(&addr, "beta", Value::Null).await.status, 200);
    assert_eq!(live(&alive), 2);
    assert_eq!(alive.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_pulled_model_is_served_without_a_restart() {
    let pulled = Arc::<AtomicBool>::default();
    let options = Options {
        library: Some(LibraryHandle(Arc::new(Store {
            pulled: pulled.clone(),
        }))),
        ..Options::default()
    };
    let addr = serve(Alive::default(), pulled, options).await;
    let r = generate(&addr, "gamma", Value::Null).await;
    assert_eq!(r.status, 404, "not pulled yet: {}", r.body);

    let r = post(&addr, "/api/pull", json!({"model": "gamma"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let lines: Vec<Value> = r
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["status"], "success", "{}", r.body);
    assert!(lines.iter().any(|l| l["completed"] == 10), "{}", r.body);
    let listed = model_ids(&addr).await;
    assert_eq!(listed, [json!("alpha"), json!("beta"), json!("gamma")]);
    let r = generate(&addr, "gamma", Value::Null).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["model"], "gamma");

    // Downloaded but served under its file's own name, not the reference: still a success.
    let hf = json!({"model": "hf:owner/repo/file.gguf", "stream": false});
    let r = post(&addr, "/api/pull", hf).await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "success"})));

    let r = post(
        &addr,
        "/api/pull",
        json!({"model": "omega", "stream": false}),
    )
    .await;
    r.assert_names(404, "unknown model omega");
}

#[tokio::test]
async fn a_model_that_cannot_be_read_fails_by_name_and_the_rest_serve() {
    let addr = serve(Alive::default(), Arc::default(), Options::default()).await;
    let r = generate(&addr, "delta", Value::Null).await;
    r.assert_names(500, "delta.gguf: not a GGUF file");
    assert_eq!(generate(&addr, "alpha", Value::Null).await.status, 200);
    let r = generate(&addr, "nothing", Value::Null).await;
    r.assert_names(404, "`alpha`");
}

#[tokio::test]
async fn the_agent_check_answers_for_the_replica() {
    let port = common::free_port();
    let options = Options {
        agent_addr: Some(format!("127.0.0.1:{port}")),
        ..Options::default()
    };
    let addr = serve(Alive::default(), Arc::default(), options).await;
    let check = || common::agent_line(port);
    assert_eq!(check().await, "ready up 100%\n");
    assert_eq!(generate(&addr, "alpha", Value::Null).await.status, 200);
    assert_eq!(check().await, "ready up 100%\n");
    let r = post(&addr, "/admin/drain", json!({})).await;
    assert_eq!(r.status, 202);
    assert_eq!(check().await, "drain\n");
}
