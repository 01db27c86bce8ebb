//! `ferrox serve -m A -m B` (or `--models-dir`, or no `-m`: the pulled catalog): several
//! models in one server, scheduled as Ollama does (docs/api.md, `keep_alive`). Each loads on
//! its first request (its own engine thread and slots) and unloads after its keep-alive or
//! when `--max-loaded` needs room, its weights freed and the heap trimmed; the server crate's
//! model registry decides when, this module provides the loaders ([`super::serve_set`] the
//! set of models).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ferrox_backend::{BackendConfig, ModelBackend};
use ferrox_server::models::{parse_keep_alive, Discover, KeepAlive, DEFAULT_KEEP_ALIVE};
use ferrox_server::{Backend, ModelSpec, ModelsConfig, Registry};

use super::engine;
use super::serve_args::{served_id, Args};
use super::serve_cache::{cache_disk, identity};
use super::serve_listen::{listen, stop_signal};
use super::serve_set::{self, Found};

/// What a loader needs of the flags.
#[derive(Clone)]
struct LoadSettings {
    cache: engine::CacheArgs,
    dist: super::dist::DistArgs,
    config: BackendConfig,
    /// `--cache-dir` (each model's blocks in a directory named by its identity) and
    /// `--cache-disk-mb`.
    cache_dir: Option<PathBuf>,
    cache_disk_mb: u64,
    /// `--slot-save-path` is set: slot files are keyed by the model's identity.
    slots: bool,
    /// `--draft-model`, loaded once for every model it can draft for.
    draft: Option<Arc<engine::LoadedDraft>>,
}

/// Loads `name` (at `path`) into a backend serving it as `id`. The backend owns the weights:
/// unloading the model frees them.
fn load(name: &str, path: &std::path::Path, s: &LoadSettings) -> anyhow::Result<Arc<dyn Backend>> {
    if ferrox_models::encoder::is_encoder(path) {
        return super::serve_encoder::backend(name, path);
    }
    let mut eng = engine::load_with(Some(name), true, &s.dist)?;
    s.cache.apply(&mut eng)?;
    let tokenizer = eng
        .tokenizer
        .with_context(|| format!("{}: no tokenizer found", eng.path.display()))?;
    let keyed = s.cache_dir.is_some() || s.slots;
    let identity = keyed.then(|| identity(&s.cache, path)).transpose()?;
    let mut config = s.config.clone();
    config.identity = identity;
    config.cache_disk = cache_disk(s.cache_dir.as_ref(), s.cache_disk_mb, identity);
    config.draft = s.draft.as_ref().and_then(|d| {
        d.for_target(&eng.decoder, &tokenizer)
            .inspect_err(|e| eprintln!("warning: {name}: {e:#}; it drafts without it"))
            .ok()
    });
    let decoder = eng.decoder;
    // Pages the weights in and starts the thread pool before the request runs.
    decoder.forward_token(0, 0, &mut decoder.new_caches());
    Ok(Arc::new(ModelBackend::new(
        Arc::new(decoder),
        Arc::new(tokenizer),
        config,
    )))
}

/// A `-m` model, resolved (pulled when need be) to its file.
fn named(name: &str) -> anyhow::Result<Found> {
    let path: PathBuf = super::model::resolve(Some(name))?;
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id = served_id(name, &file);
    let mut aliases = vec![name.to_string(), file, path.display().to_string()];
    aliases.retain(|a| *a != id);
    Ok(Found {
        name: id,
        aliases,
        path,
        problem: None,
    })
}

/// One model's entry: its served id, the names it answers to, its loader.
fn spec(found: Found, settings: &LoadSettings, extra: Vec<String>) -> ModelSpec {
    let Found {
        name,
        mut aliases,
        path,
        problem,
    } = found;
    aliases.extend(extra);
    aliases.retain(|a| *a != name);
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let mut settings = settings.clone();
    settings.config.id = name.clone();
    settings.config.aliases = aliases.clone();
    ModelSpec {
        name,
        aliases,
        size,
        loader: Arc::new(move || match &problem {
            Some(p) => Err(p.clone()),
            // By path: a catalog file is not verified again at each reload.
            None => {
                let (path, settings) = (path.clone(), settings.clone());
                at_low_priority(move || {
                    load(&path.display().to_string(), &path, &settings)
                        .map_err(|e| format!("{e:#}"))
                })
            }
        }),
    }
}

/// Runs a model load on a thread of its own at the lowest CPU priority (nice 19, inherited by
/// any thread it starts): the loaded models' engine threads keep their cores while another
/// model reads and repacks its weights, and on an idle machine the load runs at full speed.
fn at_low_priority<T: Send + 'static>(
    load: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    std::thread::Builder::new()
        .name("ferrox-load".into())
        .spawn(move || {
            #[cfg(target_os = "linux")]
            if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19)
            {
                tracing::warn!("loading at normal priority: {e}");
            }
            load()
        })
        .map_err(|e| format!("cannot start a loader thread: {e}"))?
        .join()
        .map_err(|_| "the loader panicked".to_string())?
}

/// `--alias NAME=MODEL` flags by the model (of `models`: each one's names) they name.
fn aliases_for(flags: &[String], models: &[Vec<&str>]) -> anyhow::Result<Vec<Vec<String>>> {
    let mut out = vec![Vec::new(); models.len()];
    for f in flags {
        let (alias, model) = f
            .split_once('=')
            .filter(|(a, _)| !a.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--alias {f}: expected NAME=MODEL"))?;
        let i = models
            .iter()
            .position(|names| names.contains(&model))
            .ok_or_else(|| {
                anyhow::anyhow!("--alias {f}: `{model}` is not one of the served models")
            })?;
        out[i].push(alias.to_string());
    }
    Ok(out)
}

/// The models to serve: each -m, the models dir, or else the pulled catalog.
fn model_set(args: &Args) -> anyhow::Result<Vec<Found>> {
    let mut found = args
        .model
        .iter()
        .map(|m| named(m))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(dir) = &args.models_dir {
        found.extend(serve_set::models_dir(dir)?);
    }
    if args.model.is_empty() && args.models_dir.is_none() {
        found = serve_set::catalog()?;
    }
    for f in &found {
        if let Some(p) = &f.problem {
            eprintln!("warning: {p}; requests for `{}` will fail", f.name);
        }
    }
    anyhow::ensure!(
        !found.is_empty(),
        "no model to serve: the models dir is empty"
    );
    Ok(found)
}

/// The registry's lookup of models asked for by a name it does not list yet.
fn discovery(settings: LoadSettings, models_dir: Option<PathBuf>) -> Discover {
    Arc::new(move |name: &str| {
        let found = serve_set::discover(name, models_dir.as_deref())?;
        Some(match &found.problem {
            Some(p) => Err(p.clone()),
            None => Ok(spec(found, &settings, Vec::new())),
        })
    })
}

/// The server-wide keep-alive (`--keep-alive`, Ollama's `OLLAMA_KEEP_ALIVE`).
pub(super) fn keep_alive(flag: Option<&str>) -> anyhow::Result<KeepAlive> {
    let Some(v) = flag else {
        return Ok(DEFAULT_KEEP_ALIVE);
    };
    parse_keep_alive(&serde_json::json!(v)).map_err(|e| anyhow::anyhow!("--{e}"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.threads);
    let settings = LoadSettings {
        cache: args.cache.clone(),
        dist: args.dist.clone(),
        config: BackendConfig {
            id: String::new(),
            aliases: Vec::new(),
            ctx: args.ctx,
            no_spec: args.no_spec,
            pooling: args.pooling,
            cache_bytes: args.cache_ram.saturating_mul(1 << 20),
            recall_tokens: args.recall_tokens,
            cache_disk: None,
            identity: None,
            draft: None,
        },
        cache_dir: args.cache_dir.clone(),
        cache_disk_mb: args.cache_disk_mb,
        slots: args.slot_save_path.is_some(),
        draft: match args.draft_model.as_deref().filter(|_| !args.no_spec) {
            Some(d) => Some(Arc::new(engine::LoadedDraft::load(
                d,
                args.cache.format(),
                true,
            )?)),
            None => None,
        },
    };
    let found = model_set(&args)?;
    let names: Vec<Vec<&str>> = found
        .iter()
        .map(|f| {
            let aliases = f.aliases.iter().map(String::as_str);
            std::iter::once(f.name.as_str()).chain(aliases).collect()
        })
        .collect();
    let extra = aliases_for(&args.aliases, &names)?;
    let specs: Vec<ModelSpec> = found
        .into_iter()
        .zip(extra)
        .map(|(f, e)| spec(f, &settings, e))
        .collect();
    let config = ModelsConfig {
        parallel: args.parallel,
        queue: args.queue,
        max_loaded: args.max_loaded,
        max_bytes: args.max_memory_mb.saturating_mul(1 << 20),
        keep_alive: keep_alive(args.keep_alive.as_deref())?,
        load_timeout: Duration::from_secs(args.load_timeout),
    };
    // Without -m the server is what `ferrox serve` always was, the default model ready at
    // start and kept, plus the other pulled models on demand.
    let catalog = args.model.is_empty() && args.models_dir.is_none();
    // Names asked for later are looked up in the models dir, else in the models folder.
    let folder = match &args.models_dir {
        Some(dir) => Some(dir.clone()),
        None => super::model::hub()
            .ok()
            .map(|h| h.models_dir().to_path_buf()),
    };
    let discover = discovery(settings, folder);
    let (parallel, ctx) = (args.parallel, args.ctx);
    listen(&args, |listener, bound, options| async move {
        let registry = Registry::new(specs, config, options)?
            .with_discovery(discover)
            .with_release(super::heap::trim_heap);
        let registry = Arc::new(registry);
        if catalog {
            drop(registry.acquire(None, Some(KeepAlive::Forever)).await?);
        }
        let names: Vec<String> = registry.names().into_iter().map(|(n, _)| n).collect();
        eprintln!(
            "serving {} on http://{bound} ({parallel} slots each, ctx {ctx}; {})",
            names.join(", "),
            if catalog {
                "the first is loaded, others on first use"
            } else {
                "loaded on first use"
            }
        );
        let front = Arc::new(ferrox_server::Front::new(registry.clone()));
        ferrox_server::http::serve_models_until(listener, front, stop_signal()).await?;
        if !registry.flush(Duration::from_secs(60)) {
            eprintln!("prompt cache: some blocks were not written before exit");
        }
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_flag_reads_seconds_and_durations() {
        assert_eq!(keep_alive(None).unwrap(), DEFAULT_KEEP_ALIVE);
        let secs = |s| KeepAlive::For(Duration::from_secs(s));
        assert_eq!(keep_alive(Some("30")).unwrap(), secs(30));
        assert_eq!(keep_alive(Some("10m")).unwrap(), secs(600));
        assert_eq!(keep_alive(Some("-1")).unwrap(), KeepAlive::Forever);
        assert!(keep_alive(Some("abc")).is_err());
    }

    #[test]
    fn aliases_go_to_the_model_they_name() {
        let models = [vec!["a", "a.gguf"], vec!["b", "b.gguf"]];
        let got = aliases_for(&["x=b.gguf".into(), "y=a".into()], &models).unwrap();
        assert_eq!(got, [vec!["y".to_string()], vec!["x".to_string()]]);
        assert!(aliases_for(&["x=c.gguf".into()], &models).is_err());
        assert!(aliases_for(&["x".into()], &models).is_err());
    }
}
