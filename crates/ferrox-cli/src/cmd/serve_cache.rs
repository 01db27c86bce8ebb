//! What keys a served model's files on disk — the prompt cache under `--cache-dir` and
//! llama-server's slot files: the model file's identity with the engine's version and cache
//! settings, and `--cache-dir`'s settings for it.

use super::engine;

/// The identity of the model file at `path` as the disk caches and slot files key it.
pub(super) fn identity(
    cache: &engine::CacheArgs,
    path: &std::path::Path,
) -> anyhow::Result<[u8; 32]> {
    // The engine's version and the cache flags too (bf16 attention products change every
    // later layer's keys and values): another build or setting computes other numbers.
    let variant = format!("ferrox {} {cache:?}", env!("CARGO_PKG_VERSION"));
    ferrox_models::engine::prefix_disk::model_identity(path, variant.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `--cache-dir`'s settings (`dir`, `--cache-disk-mb`), for the model of `identity`.
pub(super) fn cache_disk(
    dir: Option<&std::path::PathBuf>,
    disk_mb: u64,
    identity: Option<[u8; 32]>,
) -> Option<ferrox_backend::CacheDiskConfig> {
    Some(ferrox_backend::CacheDiskConfig {
        dir: dir?.clone(),
        budget: disk_mb.saturating_mul(1 << 20),
        model: identity?,
    })
}
