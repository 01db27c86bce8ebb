//! `ferrox serve -m A -m B`: several models in one server. Each loads on its first request
//! (its own engine thread and slots) and unloads after Ollama's keep-alive or when
//! `--max-loaded` needs room; the server crate's model registry decides when, this module
//! provides the loaders.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use ferrox_backend::{BackendConfig, ModelBackend};
use ferrox_models::decoder::Decoder;
use ferrox_server::models::{parse_keep_alive, KeepAlive, DEFAULT_KEEP_ALIVE};
use ferrox_server::{Backend, ModelSpec, ModelsConfig, Registry};
use ferrox_tokenizer::Tokenizer;

use super::engine;
use super::serve_args::{served_id, Args};
use super::serve_listen::{listen, stop_signal};

/// What a loader needs of the flags.
#[derive(Clone)]
struct LoadSettings {
    cache: engine::CacheArgs,
    dist: super::dist::DistArgs,
    config: BackendConfig,
}

/// A decoder's weights, kept after the first load: `ModelBackend` borrows them for the
/// process's life, so a reload after an unload reuses them instead of leaking a second copy.
type Weights = (&'static Decoder, &'static Tokenizer);

/// Loads `name` (at `path`) into a backend serving it as `id`.
fn load(
    name: &str,
    path: &std::path::Path,
    s: &LoadSettings,
    kept: &Mutex<Option<Weights>>,
) -> anyhow::Result<Arc<dyn Backend>> {
    if ferrox_models::encoder::is_encoder(path) {
        return super::serve_encoder::backend(name, path);
    }
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    let (decoder, tokenizer) = match *kept {
        Some(w) => w,
        None => {
            let mut eng = engine::load_with(Some(name), true, &s.dist)?;
            s.cache.apply(&mut eng)?;
            let tokenizer = eng
                .tokenizer
                .with_context(|| format!("{}: no tokenizer found", eng.path.display()))?;
            let w: Weights = (
                Box::leak(Box::new(eng.decoder)),
                Box::leak(Box::new(tokenizer)),
            );
            *kept = Some(w);
            w
        }
    };
    // Pages the weights in and starts the thread pool before the request runs.
    decoder.forward_token(0, 0, &mut decoder.new_caches());
    Ok(Arc::new(ModelBackend::new(
        decoder,
        tokenizer,
        s.config.clone(),
    )))
}

/// One model's entry: its served id, the names it answers to, its loader.
fn spec(name: &str, settings: &LoadSettings, extra: Vec<String>) -> anyhow::Result<ModelSpec> {
    let path: PathBuf = super::model::resolve(Some(name))?;
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id = served_id(name, &file);
    let mut aliases = vec![name.to_string(), file, path.display().to_string()];
    aliases.extend(extra);
    aliases.retain(|a| *a != id);
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let mut settings = settings.clone();
    settings.config.id = id.clone();
    settings.config.aliases = aliases.clone();
    let kept = Mutex::new(None);
    let model = name.to_string();
    Ok(ModelSpec {
        name: id,
        aliases,
        size,
        loader: Arc::new(move || {
            load(&model, &path, &settings, &kept).map_err(|e| format!("{e:#}"))
        }),
    })
}

/// `--alias NAME=MODEL` flags by the `-m` they name.
fn aliases_for(flags: &[String], models: &[String]) -> anyhow::Result<Vec<Vec<String>>> {
    let mut out = vec![Vec::new(); models.len()];
    for f in flags {
        let (alias, model) = f
            .split_once('=')
            .filter(|(a, _)| !a.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--alias {f}: expected NAME=MODEL"))?;
        let i = models
            .iter()
            .position(|m| m == model || served_id(m, "") == model)
            .ok_or_else(|| anyhow::anyhow!("--alias {f}: `{model}` is not one of the -m models"))?;
        out[i].push(alias.to_string());
    }
    Ok(out)
}

/// The server-wide keep-alive (`--keep-alive`, Ollama's `OLLAMA_KEEP_ALIVE`).
pub(super) fn keep_alive(flag: Option<&str>) -> anyhow::Result<KeepAlive> {
    let Some(v) = flag else {
        return Ok(DEFAULT_KEEP_ALIVE);
    };
    parse_keep_alive(&serde_json::json!(v)).map_err(|e| anyhow::anyhow!("--{e}"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Each model's blocks would need their own flush on unload and at exit: not wired yet.
    anyhow::ensure!(
        args.cache_dir.is_none(),
        "--cache-dir keeps one model's prompt cache: give a single -m with it"
    );
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
        },
    };
    let extra = aliases_for(&args.aliases, &args.model)?;
    let specs = args
        .model
        .iter()
        .zip(extra)
        .map(|(m, e)| spec(m, &settings, e))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let config = ModelsConfig {
        parallel: args.parallel,
        queue: args.queue,
        max_loaded: args.max_loaded,
        keep_alive: keep_alive(args.keep_alive.as_deref())?,
        load_timeout: Duration::from_secs(args.load_timeout),
    };
    let (parallel, ctx) = (args.parallel, args.ctx);
    listen(&args, |listener, bound, options| async move {
        let registry = Arc::new(Registry::new(specs, config, options)?);
        let names: Vec<String> = registry.names().into_iter().map(|(n, _)| n).collect();
        eprintln!(
            "serving {} on http://{bound} ({parallel} slots each, ctx {ctx}; loaded on first use)",
            names.join(", "),
        );
        let front = Arc::new(ferrox_server::Front::new(registry));
        ferrox_server::http::serve_models_until(listener, front, stop_signal()).await?;
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
        let models = ["a.gguf".to_string(), "b.gguf".to_string()];
        let got = aliases_for(&["x=b.gguf".into(), "y=a.gguf".into()], &models).unwrap();
        assert_eq!(got, [vec!["y".to_string()], vec!["x".to_string()]]);
        assert!(aliases_for(&["x=c.gguf".into()], &models).is_err());
        assert!(aliases_for(&["x".into()], &models).is_err());
    }
}
