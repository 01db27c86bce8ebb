//! `ferrox serve`: the OpenAI-compatible server (crates/ferrox-server) over a loaded model.
//! Requests run on a continuous-batching `BatchEngine`: one batched forward per step for all
//! slots, each slot with its own KV caches (prefix reuse across turns) and prompt-lookup drafts.

use std::sync::Arc;

use ferrox_backend::{BackendConfig, ModelBackend};
use ferrox_server::Backend;

use super::engine;
use super::serve_args::{served_id, Args};
use super::serve_cache::{cache_disk, identity};
use super::serve_listen::serve_backend;

/// The names `--alias NAME=MODEL` adds; MODEL must be one the server answers to.
fn extra_aliases(flags: &[String], id: &str, names: &[String]) -> anyhow::Result<Vec<String>> {
    flags
        .iter()
        .map(|f| {
            let (alias, model) = f
                .split_once('=')
                .filter(|(a, _)| !a.is_empty())
                .ok_or_else(|| anyhow::anyhow!("--alias {f}: expected NAME=MODEL"))?;
            if model != id && !names.iter().any(|n| n == model) {
                anyhow::bail!("--alias {f}: this server serves `{id}`, not `{model}`");
            }
            Ok(alias.to_string())
        })
        .collect()
}

/// Whether `ferrox serve` without -m serves the pulled catalog (the default model first,
/// the others on demand). Spreading a model over MPI ranks stays a one-model feature: with
/// it the default model alone is served, as before.
fn catalog_serve(args: &Args) -> bool {
    let d = &args.dist;
    let dist = d.expert_parallel || d.pipeline_parallel || d.save_expert_load.is_some();
    args.model.is_empty() && !dist
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.model.len() > 1 || args.models_dir.is_some() || catalog_serve(&args) {
        return super::serve_multi::run(args);
    }
    engine::set_threads(args.threads);
    let model = args.model.first().cloned();
    let path = super::model::resolve(model.as_deref())?;
    if ferrox_models::encoder::is_encoder(&path) {
        return super::serve_encoder::run(args, &path);
    }
    let mut eng = engine::load_with(model.as_deref(), true, &args.dist)?;
    args.cache.apply(&mut eng)?;
    let tokenizer = eng
        .tokenizer
        .ok_or_else(|| anyhow::anyhow!("{}: no tokenizer found", eng.path.display()))?;
    let name = model.unwrap_or_else(|| ferrox_hub::DEFAULT_MODEL.to_string());
    let file = eng
        .path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let keyed = args.cache_dir.is_some() || args.slot_save_path.is_some();
    let identity = keyed
        .then(|| identity(&args.cache, &eng.path))
        .transpose()?;
    // With one model, a draft model that cannot draft for it is an error.
    let draft = match args.draft_model.as_deref().filter(|_| !args.no_spec) {
        Some(d) => Some(
            engine::LoadedDraft::load(d, eng.decoder.cache_format(), true)?
                .for_target(&eng.decoder, &tokenizer)?,
        ),
        None => None,
    };
    let decoder = Arc::new(eng.decoder);
    // Dropped when serving ends: stops the other ranks.
    let cluster = eng.cluster;
    // Catalog models are served under their catalog name however -m named them.
    let id = served_id(&name, &file);
    let mut aliases = vec![name, file, eng.path.display().to_string()];
    aliases.extend(extra_aliases(&args.aliases, &id, &aliases)?);
    let backend = ModelBackend::new(
        decoder.clone(),
        Arc::new(tokenizer),
        BackendConfig {
            id: id.clone(),
            aliases,
            ctx: args.ctx,
            no_spec: args.no_spec,
            pooling: args.pooling,
            cache_bytes: args.cache_ram.saturating_mul(1 << 20),
            recall_tokens: args.recall_tokens,
            cache_disk: cache_disk(args.cache_dir.as_ref(), args.cache_disk_mb, identity),
            identity,
            draft,
        },
    );
    let ctx = backend.ctx_size();
    let backend = Arc::new(backend);
    let flush = backend.clone();
    // Ready means warmed up: one forward pages the weights in and starts the thread pool
    // before the first request (or health check) arrives.
    decoder.forward_token(0, 0, &mut decoder.new_caches());
    let dist = args.dist.clone();
    serve_backend(args, backend, &id, ctx)?;
    if !flush.flush_cache_disk(std::time::Duration::from_secs(60)) {
        eprintln!("prompt cache: some blocks were not written before exit");
    }
    super::dist::save_load(&dist, &decoder)?;
    // With the `mpi` feature the cluster's drop stops the expert ranks; without it there is
    // nothing to drop.
    #[allow(clippy::drop_non_drop)]
    drop(cluster);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_name_the_served_model() {
        let names = ["qwen.gguf".to_string()];
        let ok = extra_aliases(&["claude-haiku=qwen:0.5b".into()], "qwen:0.5b", &names);
        assert_eq!(ok.unwrap(), ["claude-haiku"]);
        let by_file = extra_aliases(&["h=qwen.gguf".into()], "qwen:0.5b", &names);
        assert_eq!(by_file.unwrap(), ["h"]);
        let other = extra_aliases(&["h=llama".into()], "qwen:0.5b", &names).unwrap_err();
        assert!(other.to_string().contains("serves `qwen:0.5b`"), "{other}");
        assert!(extra_aliases(&["h".into()], "qwen:0.5b", &names).is_err());
    }
}
