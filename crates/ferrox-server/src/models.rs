//! Several models behind one server, scheduled as Ollama does (docs/api.md, "keep_alive" and
//! "List Running Models"): names map to models that load on first use (each with its own
//! engine thread and slots), stay loaded for their keep-alive after the last request (default
//! 5 minutes; 0 unloads as soon as the request ends; negative keeps the model), and give way,
//! least recently used and idle first, when more than `max_loaded` are loaded.

use std::sync::{Arc, Mutex, MutexGuard};
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
    pub keep_alive: KeepAlive,
    /// How long a request waits for its model to load before a 503.
    pub load_timeout: Duration,
}

/// A loaded model.
struct Loaded {
    app: Arc<AppState>,
    router: axum::Router,
    /// Requests holding a lease.
    active: usize,
    last_used: Instant,
    keep: KeepAlive,
}

struct Entry {
    spec: ModelSpec,
    /// One load at a time per model; requests for it wait here, other models do not.
    load: tokio::sync::Mutex<()>,
    state: Mutex<Option<Loaded>>,
}

/// What `/api/ps` shows of a loaded model.
pub struct Running {
    pub name: String,
    pub size: u64,
    /// None: kept until the server stops.
    pub expires_at: Option<SystemTime>,
    pub ctx: usize,
}

/// The models of a server.
pub struct Registry {
    entries: Vec<Entry>,
    config: ModelsConfig,
    options: Options,
}

fn lock(m: &Mutex<Option<Loaded>>) -> MutexGuard<'_, Option<Loaded>> {
    // A panic while holding the lock leaves plain data behind: still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// Fails when two models share a name (or one's name is another's alias).
    pub fn new(
        specs: Vec<ModelSpec>,
        config: ModelsConfig,
        options: Options,
    ) -> Result<Registry, ModelError> {
        for (i, a) in specs.iter().enumerate() {
            for b in &specs[..i] {
                if a.name == b.name || b.aliases.contains(&a.name) || a.aliases.contains(&b.name) {
                    return Err(ModelError::Duplicate(a.name.clone()));
                }
            }
        }
        let entries = specs
            .into_iter()
            .map(|spec| Entry {
                spec,
                load: tokio::sync::Mutex::new(()),
                state: Mutex::new(None),
            })
            .collect();
        Ok(Registry {
            entries,
            config,
            options,
        })
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Every model's name and size, in `-m` order.
    pub fn names(&self) -> Vec<(String, u64)> {
        self.entries
            .iter()
            .map(|e| (e.spec.name.clone(), e.spec.size))
            .collect()
    }

    fn find(&self, name: Option<&str>) -> Result<usize, ModelError> {
        let Some(name) = name else {
            // Requests that name no model go to the first.
            return Ok(0);
        };
        self.entries
            .iter()
            .position(|e| e.spec.name == name || e.spec.aliases.iter().any(|a| a == name))
            .ok_or_else(|| ModelError::Unknown {
                name: name.to_string(),
                served: self.entries.iter().map(|e| e.spec.name.clone()).collect(),
            })
    }

    /// The model `name` (the first when None), loaded if need be, held until the lease drops.
    /// `keep` (the request's keep-alive) replaces the model's when given.
    pub async fn acquire(
        self: &Arc<Self>,
        name: Option<&str>,
        keep: Option<KeepAlive>,
    ) -> Result<Lease, ModelError> {
        let i = self.find(name)?;
        if let Some(l) = self.take(i, keep) {
            return Ok(l);
        }
        let entry = &self.entries[i];
        let name = entry.spec.name.clone();
        let _loading = tokio::time::timeout(self.config.load_timeout, entry.load.lock())
            .await
            .map_err(|_| ModelError::Busy(name.clone()))?;
        if let Some(l) = self.take(i, keep) {
            return Ok(l);
        }
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
        let lease = self.take(i, keep).ok_or(ModelError::Busy(name))?;
        self.evict_over_limit(i);
        Ok(lease)
    }

    fn take(self: &Arc<Self>, i: usize, keep: Option<KeepAlive>) -> Option<Lease> {
        let mut st = lock(&self.entries[i].state);
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
            index: i,
        })
    }

    /// Unloads the least recently used idle models while more than `max_loaded` are loaded.
    fn evict_over_limit(&self, keep_index: usize) {
        let max = self.config.max_loaded;
        if max == 0 {
            return;
        }
        loop {
            let loaded: Vec<(usize, usize, Instant)> = (0..self.entries.len())
                .filter_map(|j| {
                    lock(&self.entries[j].state)
                        .as_ref()
                        .map(|l| (j, l.active, l.last_used))
                })
                .collect();
            if loaded.len() <= max {
                return;
            }
            let victim = loaded
                .iter()
                .filter(|(j, active, _)| *j != keep_index && *active == 0)
                .min_by_key(|(_, _, t)| *t);
            let Some(&(j, _, _)) = victim else {
                // Every other model is busy: it goes when idle (the sweep).
                return;
            };
            self.unload_if_idle(j, |_| true);
        }
    }

    fn unload_if_idle(&self, i: usize, when: impl Fn(&Loaded) -> bool) {
        let mut st = lock(&self.entries[i].state);
        if st.as_ref().is_some_and(|l| l.active == 0 && when(l)) {
            tracing::info!("unloading {}", self.entries[i].spec.name);
            // The engine thread ends when the last sender (in the state) drops.
            *st = None;
        }
    }

    /// Unloads idle models whose keep-alive has passed, and idle ones over `max_loaded`.
    pub fn sweep(&self) {
        let now = Instant::now();
        for i in 0..self.entries.len() {
            self.unload_if_idle(i, |l| match l.keep {
                KeepAlive::Forever => false,
                KeepAlive::For(d) => l.last_used + d <= now,
            });
        }
        self.evict_over_limit(usize::MAX);
    }

    /// The loaded models.
    pub fn running(&self) -> Vec<Running> {
        self.sweep();
        self.entries
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
                    size: e.spec.size,
                    expires_at,
                    ctx: l.app.backend.ctx_size(),
                })
            })
            .collect()
    }

    /// Each loaded model's name and counters (for `/metrics`) and its state.
    pub fn loaded_states(&self) -> Vec<(String, Arc<AppState>)> {
        self.entries
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
            .entries
            .iter()
            .any(|e| lock(&e.state).as_ref().is_some_and(|l| l.active > 0))
    }
}

/// A request's hold on a loaded model: it is not unloaded while held.
pub struct Lease {
    pub router: axum::Router,
    pub app: Arc<AppState>,
    registry: Arc<Registry>,
    index: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let entry = &self.registry.entries[self.index];
        let mut st = lock(&entry.state);
        if let Some(l) = st.as_mut() {
            l.active -= 1;
            l.last_used = Instant::now();
            if l.active == 0 && l.keep == KeepAlive::For(Duration::ZERO) {
                tracing::info!("unloading {} (keep_alive 0)", entry.spec.name);
                *st = None;
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
