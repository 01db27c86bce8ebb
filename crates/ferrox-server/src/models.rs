//! Several models behind one server, scheduled as Ollama does (docs/api.md, "keep_alive" and
//! "List Running Models"): names map to models that load on first use (each with its own
//! engine thread and slots), stay loaded for their keep-alive after the last request (default
//! 5 minutes; 0 unloads as soon as the request ends; negative keeps the model), and give way,
//! least recently used and idle first, when more than `max_loaded` are loaded or their memory
//! (weights and caches) passes `max_bytes`. A name not
//! listed is looked up by the binary's discovery hook (a model pulled or put in the models
//! folder after the start) and added. An unloaded model's engine thread is joined and its
//! backend dropped off the request path, then the release hook gives the heap back.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::backend::{Backend, Metrics, Scheduler};
use crate::http::{AppState, Options};

/// Loads a model (reads files, may take seconds): called on a blocking thread.
pub type Loader = Arc<dyn Fn() -> Result<Arc<dyn Backend>, String> + Send + Sync>;

/// A model the server may serve.
pub struct ModelSpec {
    /// The name listed and matched in `model`.
    pub name: String,
    /// Other names accepted in `model`.
    pub aliases: Vec<String>,
    /// Bytes of the model file (`size` in `/api/tags` and `/api/ps`).
    pub size: u64,
    pub loader: Loader,
}

/// How long a model stays loaded after its last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    Forever,
    For(Duration),
}

/// Ollama's default keep-alive.
pub const DEFAULT_KEEP_ALIVE: KeepAlive = KeepAlive::For(Duration::from_secs(300));

/// Parses Ollama's `keep_alive`: a number of seconds or a Go duration string (`"10m"`,
/// `"1h30m"`, `"0"`; a bare number in a string is seconds, as `OLLAMA_KEEP_ALIVE` reads it);
/// negative means forever.
pub fn parse_keep_alive(v: &Value) -> Result<KeepAlive, String> {
    let bad = || format!("keep_alive: invalid duration {v} (a number of seconds or e.g. \"5m\")");
    let secs = match v {
        Value::Number(n) => n.as_f64().ok_or_else(bad)?,
        Value::String(s) => go_duration(s.trim())
            .or_else(|| s.trim().parse().ok())
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if !secs.is_finite() {
        return Err(bad());
    }
    Ok(if secs < 0.0 {
        KeepAlive::Forever
    } else {
        KeepAlive::For(Duration::from_secs_f64(secs.min(1e12)))
    })
}

/// Seconds of a Go `time.ParseDuration` string: signed sequence of decimal numbers with units.
fn go_duration(s: &str) -> Option<f64> {
    let (sign, mut rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0.0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[u..];
        total += value * unit;
    }
    Some(sign * total)
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the model `{name}` does not exist; this server serves {}", list(.served))]
    Unknown { name: String, served: Vec<String> },
    #[error("two models are named `{0}`; give each -m a distinct model")]
    Duplicate(String),
    #[error("the model `{0}` could not be loaded: {1}")]
    Load(String, String),
    #[error("the model `{0}` is still loading; retry shortly")]
    Busy(String),
}

fn list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the models are run.
#[derive(Debug, Clone)]
pub struct ModelsConfig {
    pub parallel: usize,
    pub queue: usize,
    /// Models loaded at once (0: no limit).
    pub max_loaded: usize,
    /// Bytes the loaded models may hold together: weights, slot caches and prefix caches
    /// (0: no limit). One model is kept loaded whatever its size.
    pub max_bytes: u64,
    pub keep_alive: KeepAlive,
    /// How long a request waits for its model to load before a 503.
    pub load_timeout: Duration,
}

/// How long an unload waits for the model's prompt cache to reach the disk.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// A loaded model.
struct Loaded {
    app: Arc<AppState>,
    router: axum::Router,
    /// Requests holding a lease.
    active: usize,
    last_used: Instant,
    keep: KeepAlive,
}

impl Loaded {
    /// The memory a loaded model holds: its weights and the caches its engine reported after
    /// its last step.
    fn bytes(&self, weights: u64) -> u64 {
        let m = &self.app.scheduler.metrics;
        let caches = m.kv_bytes.load(Ordering::Relaxed) + m.prefix_bytes.load(Ordering::Relaxed);
        weights + caches as u64
    }
}

struct Entry {
    spec: ModelSpec,
    /// One load at a time per model; requests for it wait here, other models do not.
    load: tokio::sync::Mutex<()>,
    state: Mutex<Option<Loaded>>,
}

impl Entry {
    fn answers_to(&self, name: &str) -> bool {
        self.spec.name == name || self.spec.aliases.iter().any(|a| a == name)
    }
}

/// What `/api/ps` shows of a loaded model.
pub struct Running {
    pub name: String,
    pub size: u64,
    /// None: kept until the server stops.
    pub expires_at: Option<SystemTime>,
    pub ctx: usize,
}

/// Finds a model the registry does not list yet by the name a request (or a pull) gives:
/// None when there is none, an error naming what is wrong with the one there is.
pub type Discover = Arc<dyn Fn(&str) -> Option<Result<ModelSpec, String>> + Send + Sync>;

/// The models of a server.
pub struct Registry {
    /// In the order given, then as discovered; never shrinks.
    entries: RwLock<Vec<Arc<Entry>>>,
    config: ModelsConfig,
    options: Options,
    discover: Option<Discover>,
    /// Called once an unloaded model's engine and weights are gone (the binary gives freed
    /// heap back to the system there).
    release: Option<fn()>,
}

fn lock(m: &Mutex<Option<Loaded>>) -> MutexGuard<'_, Option<Loaded>> {
    // A panic while holding the lock leaves plain data behind: still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn clash(a: &ModelSpec, b: &ModelSpec) -> bool {
    a.name == b.name || b.aliases.contains(&a.name) || a.aliases.contains(&b.name)
}

impl Registry {
    /// Fails when two models share a name (or one's name is another's alias).
    pub fn new(
        specs: Vec<ModelSpec>,
        config: ModelsConfig,
        options: Options,
    ) -> Result<Registry, ModelError> {
        for (i, a) in specs.iter().enumerate() {
            if specs[..i].iter().any(|b| clash(a, b)) {
                return Err(ModelError::Duplicate(a.name.clone()));
            }
        }
        let entries = specs.into_iter().map(|s| Arc::new(Entry::new(s))).collect();
        Ok(Registry {
            entries: RwLock::new(entries),
            config,
            options,
            discover: None,
            release: None,
        })
    }

    /// Models asked for by a name not listed are looked up with `discover` (e.g. the model
    /// store, after `/api/pull`) and added.
    pub fn with_discovery(mut self, discover: Discover) -> Registry {
        self.discover = Some(discover);
        self
    }

    /// `release` runs after each unload, once the model's memory has been dropped.
    pub fn with_release(mut self, release: fn()) -> Registry {
        self.release = Some(release);
        self
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    fn entries(&self) -> Vec<Arc<Entry>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every model's name and size, in `-m` order.
    pub fn names(&self) -> Vec<(String, u64)> {
        self.entries()
            .iter()
            .map(|e| (e.spec.name.clone(), e.spec.size))
            .collect()
    }

    fn find(&self, name: Option<&str>) -> Result<Arc<Entry>, ModelError> {
        let entries = self.entries();
        let unknown = |name: &str| ModelError::Unknown {
            name: name.to_string(),
            served: entries.iter().map(|e| e.spec.name.clone()).collect(),
        };
        let Some(name) = name else {
            // Requests that name no model go to the first.
            return entries.first().cloned().ok_or_else(|| unknown(""));
        };
        entries
            .iter()
            .find(|e| e.answers_to(name))
            .cloned()
            .ok_or_else(|| unknown(name))
    }

    /// The model `name`, listed or found by discovery (which may read files: call it on a
    /// blocking thread).
    pub fn find_or_discover(&self, name: &str) -> Result<(), ModelError> {
        self.lookup(name).map(|_| ())
    }

    fn lookup(&self, name: &str) -> Result<Arc<Entry>, ModelError> {
        let missing = match self.find(Some(name)) {
            Ok(e) => return Ok(e),
            Err(e) => e,
        };
        let Some(discover) = &self.discover else {
            return Err(missing);
        };
        let spec = match discover(name) {
            None => return Err(missing),
            Some(Err(e)) => return Err(ModelError::Load(name.to_string(), e)),
            Some(Ok(spec)) => spec,
        };
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        // Found under another of its names, or added meanwhile by another request.
        if let Some(e) = entries.iter().find(|e| clash(&e.spec, &spec)) {
            return Ok(e.clone());
        }
        tracing::info!("serving {} (found as `{name}`)", spec.name);
        let entry = Arc::new(Entry::new(spec));
        entries.push(entry.clone());
        Ok(entry)
    }

    /// The model `name` (the first when None), loaded if need be, held until the lease drops.
    /// `keep` (the request's keep-alive) replaces the model's when given.
    pub async fn acquire(
        self: &Arc<Self>,
        name: Option<&str>,
        keep: Option<KeepAlive>,
    ) -> Result<Lease, ModelError> {
        let entry = match (self.find(name), name) {
            // Discovery may read files: off the async workers.
            (Err(_), Some(n)) if self.discover.is_some() => {
                let (r, owned) = (self.clone(), n.to_string());
                tokio::task::spawn_blocking(move || r.lookup(&owned))
                    .await
                    .map_err(|_| ModelError::Load(n.into(), "its lookup panicked".into()))??
            }
            (found, _) => found?,
        };
        if let Some(l) = self.take(&entry, keep) {
            return Ok(l);
        }
        let name = entry.spec.name.clone();
        let _loading = tokio::time::timeout(self.config.load_timeout, entry.load.lock())
            .await
            .map_err(|_| ModelError::Busy(name.clone()))?;
        if let Some(l) = self.take(&entry, keep) {
            return Ok(l);
        }
        // Room first, so the old and the new model are not in memory together.
        self.evict_over_limit(Some(&entry), Some(entry.spec.size));
        tracing::info!("loading {name}");
        let loader = entry.spec.loader.clone();
        // A load that panics is that model's failure alone.
        let backend = tokio::task::spawn_blocking(move || loader())
            .await
            .map_err(|_| ModelError::Load(name.clone(), "the loader panicked".into()))?
            .map_err(|e| ModelError::Load(name.clone(), e))?;
        let scheduler = Scheduler::start(backend.clone(), self.config.parallel, self.config.queue);
        let app = Arc::new(AppState::new(backend, scheduler, self.options.clone()));
        let router = crate::http::router(app.clone());
        *lock(&entry.state) = Some(Loaded {
            app,
            router,
            active: 0,
            last_used: Instant::now(),
            keep: self.config.keep_alive,
        });
        let lease = self.take(&entry, keep).ok_or(ModelError::Busy(name))?;
        self.evict_over_limit(Some(&entry), None);
        Ok(lease)
    }

    fn take(self: &Arc<Self>, entry: &Arc<Entry>, keep: Option<KeepAlive>) -> Option<Lease> {
        let mut st = lock(&entry.state);
        let l = st.as_mut()?;
        l.active += 1;
        l.last_used = Instant::now();
        if let Some(k) = keep {
            l.keep = k;
        }
        Some(Lease {
            router: l.router.clone(),
            app: l.app.clone(),
            registry: self.clone(),
            entry: entry.clone(),
        })
    }

    /// Unloads the least recently used idle models (never `keep`) while more than `max_loaded`
    /// are loaded or they hold more than `max_bytes`, counting a model about to load (its
    /// weights' bytes) in `incoming`.
    fn evict_over_limit(&self, keep: Option<&Arc<Entry>>, incoming: Option<u64>) {
        let (max, budget) = (self.config.max_loaded, self.config.max_bytes);
        if max == 0 && budget == 0 {
            return;
        }
        let entries = self.entries();
        loop {
            let loaded: Vec<(&Arc<Entry>, usize, Instant, u64)> = entries
                .iter()
                .filter_map(|e| {
                    let st = lock(&e.state);
                    let l = st.as_ref()?;
                    Some((e, l.active, l.last_used, l.bytes(e.spec.size)))
                })
                .collect();
            let held: u64 = loaded.iter().map(|l| l.3).sum::<u64>() + incoming.unwrap_or(0);
            let count = loaded.len() + usize::from(incoming.is_some());
            let too_many = max != 0 && count > max;
            // The last model stays, whatever its size, until another needs the room.
            let too_big = budget != 0 && held > budget && count > 1;
            if !too_many && !too_big {
                return;
            }
            let victim = loaded
                .iter()
                .filter(|(e, active, _, _)| keep.is_none_or(|k| !Arc::ptr_eq(e, k)) && *active == 0)
                .min_by_key(|l| l.2);
            let Some(&(e, _, _, _)) = victim else {
                // Every other model is busy: it goes when idle (the sweep).
                return;
            };
            self.unload_if_idle(e, |_| true);
        }
    }

    fn unload_if_idle(&self, entry: &Entry, when: impl Fn(&Loaded) -> bool) {
        let mut st = lock(&entry.state);
        if st.as_ref().is_some_and(|l| l.active == 0 && when(l)) {
            tracing::info!("unloading {}", entry.spec.name);
            self.unload(&mut st);
        }
    }

    /// Drops a loaded model: the engine thread ends when the last sender (in its state) is
    /// gone, and with it the last hold on the weights. A thread of its own waits for that,
    /// then runs the release hook, so no request waits.
    fn unload(&self, st: &mut Option<Loaded>) {
        let Some(loaded) = st.take() else {
            return;
        };
        let release = self.release;
        let unloader = move || {
            let engine = loaded.app.scheduler.take_thread();
            let backend = loaded.app.backend.clone();
            drop(loaded);
            if let Some(t) = engine {
                let _ = t.join();
            }
            if !backend.flush(FLUSH_TIMEOUT) {
                tracing::warn!(
                    "{}: some prompt-cache blocks were not written",
                    backend.model_id()
                );
            }
            drop(backend);
            if let Some(f) = release {
                f();
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("ferrox-unload".into())
            .spawn(unloader)
        {
            tracing::warn!("unloading without waiting for the engine: {e}");
        }
    }

    /// Writes every loaded model's pending disk state (at exit); false when some did not
    /// finish within `timeout`.
    pub fn flush(&self, timeout: Duration) -> bool {
        let states = self.loaded_states();
        states.iter().all(|(_, app)| app.backend.flush(timeout))
    }

    /// Unloads idle models whose keep-alive has passed, and idle ones over `max_loaded`.
    pub fn sweep(&self) {
        let now = Instant::now();
        for e in self.entries() {
            self.unload_if_idle(&e, |l| match l.keep {
                KeepAlive::Forever => false,
                KeepAlive::For(d) => l.last_used + d <= now,
            });
        }
        self.evict_over_limit(None, None);
    }

    /// The loaded models.
    pub fn running(&self) -> Vec<Running> {
        self.sweep();
        self.entries()
            .iter()
            .filter_map(|e| {
                let st = lock(&e.state);
                let l = st.as_ref()?;
                let expires_at = match l.keep {
                    KeepAlive::Forever => None,
                    KeepAlive::For(d) => {
                        let left = (l.last_used + d).saturating_duration_since(Instant::now());
                        Some(SystemTime::now() + left)
                    }
                };
                Some(Running {
                    name: e.spec.name.clone(),
                    size: l.bytes(e.spec.size),
                    expires_at,
                    ctx: l.app.backend.ctx_size(),
                })
            })
            .collect()
    }

    /// Each loaded model's name and counters (for `/metrics`) and its state.
    pub fn loaded_states(&self) -> Vec<(String, Arc<AppState>)> {
        self.entries()
            .iter()
            .filter_map(|e| {
                let st = lock(&e.state);
                Some((e.spec.name.clone(), st.as_ref()?.app.clone()))
            })
            .collect()
    }

    /// Requests running or waiting on any model (for drains).
    pub fn busy(&self) -> bool {
        self.loaded_states().iter().any(|(_, a)| {
            let m: &Metrics = &a.scheduler.metrics;
            m.busy_slots.load(std::sync::atomic::Ordering::SeqCst) > 0
                || m.queue_depth.load(std::sync::atomic::Ordering::SeqCst) > 0
        }) || self
            .entries()
            .iter()
            .any(|e| lock(&e.state).as_ref().is_some_and(|l| l.active > 0))
    }
}

impl Entry {
    fn new(spec: ModelSpec) -> Entry {
        Entry {
            spec,
            load: tokio::sync::Mutex::new(()),
            state: Mutex::new(None),
        }
    }
}

/// A request's hold on a loaded model: it is not unloaded while held.
pub struct Lease {
    pub router: axum::Router,
    pub app: Arc<AppState>,
    registry: Arc<Registry>,
    entry: Arc<Entry>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut st = lock(&self.entry.state);
        if let Some(l) = st.as_mut() {
            l.active -= 1;
            l.last_used = Instant::now();
            if l.active == 0 && l.keep == KeepAlive::For(Duration::ZERO) {
                tracing::info!("unloading {} (keep_alive 0)", self.entry.spec.name);
                self.registry.unload(&mut st);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_follows_ollama() {
        let secs = |s: u64| KeepAlive::For(Duration::from_secs(s));
        assert_eq!(parse_keep_alive(&json!(0)), Ok(secs(0)));
        assert_eq!(parse_keep_alive(&json!("0")), Ok(secs(0)));
        assert_eq!(parse_keep_alive(&json!(30)), Ok(secs(30)));
        assert_eq!(parse_keep_alive(&json!("5m")), Ok(secs(300)));
        assert_eq!(parse_keep_alive(&json!("1h30m")), Ok(secs(5400)));
        assert_eq!(
            parse_keep_alive(&json!("1.5s")),
            Ok(KeepAlive::For(Duration::from_millis(1500)))
        );
        assert_eq!(parse_keep_alive(&json!(-1)), Ok(KeepAlive::Forever));
        assert_eq!(parse_keep_alive(&json!("-1m")), Ok(KeepAlive::Forever));
        assert_eq!(parse_keep_alive(&json!("5")), Ok(secs(5)));
        for bad in [
            json!("abc"),
            json!("nan"),
            json!(""),
            json!("5x"),
            json!(true),
            json!([1]),
        ] {
            assert!(parse_keep_alive(&bad).is_err(), "{bad}");
        }
    }
}
