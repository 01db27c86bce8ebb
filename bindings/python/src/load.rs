//! Loading a model for `ferrox.Llama`: a path or a catalog name (pulled on first use, as
//! `ferrox run -m` does), the decoder and its tokenizer, the KV-cache types, the threads.

use std::path::{Path, PathBuf};

use ferrox_core::cache::{CacheFormat, KvType};
use ferrox_hub::{Hub, HubOptions, ModelRef, NoProgress};
use ferrox_models::decoder::Decoder;
use ferrox_tokenizer::Tokenizer;

/// Where catalog models live and which Python runs pip for a pull.
pub struct Place {
    /// `$FERROX_HOME` as the CLI reads it (models in `<home>/models`).
    pub home: PathBuf,
    /// The interpreter that loaded the bindings.
    pub python: String,
}

/// What loading asks for; the Python layer fills it from `Llama(...)`'s keywords.
pub struct LoadOptions {
    pub threads: usize,
    pub cache_type_k: Option<String>,
    pub cache_type_v: Option<String>,
}

/// The file `model` names: an existing path, a file in the models directory, or a catalog
/// name / `hf:` reference (pulled when missing).
pub fn resolve(model: &str, place: &Place) -> Result<PathBuf, String> {
    let p = Path::new(model);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    let mut options = HubOptions::new(place.home.clone());
    options.python = place.python.clone();
    let hub = Hub::with_options(&options);
    let in_dir = hub.models_dir().join(model);
    if in_dir.exists() {
        return Ok(in_dir);
    }
    let r = ModelRef::parse(model).map_err(|e| format!("{model}: {e}"))?;
    hub.resolve(&r, &NoProgress)
        .map_err(|e| format!("{model}: {e}"))
}

fn kv_type(s: Option<&str>, what: &str) -> Result<KvType, String> {
    match s {
        None => Ok(default_kv_type()),
        Some(s) => KvType::parse(s)
            .ok_or_else(|| format!("{what}: unknown cache type {s:?} (f32, f16, bf16 or q8_0)")),
    }
}

/// As `ferrox run`'s default: bf16 where its products are the faster ones, else f16.
fn default_kv_type() -> KvType {
    if ferrox_core::kernels::bf16_attention_pays() {
        KvType::Bf16
    } else {
        KvType::F16
    }
}

/// The decoder and tokenizer of the model at `path`; every failure is a message.
pub fn load(path: &Path, options: &LoadOptions) -> Result<(Decoder, Tokenizer), String> {
    ferrox_core::pool::set_threads(options.threads);
    if options.threads > 0 {
        // Only the first initialisation counts; a second Llama keeps the first's pool.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .build_global();
    }
    let k = kv_type(options.cache_type_k.as_deref(), "cache_type_k")?;
    let v = kv_type(options.cache_type_v.as_deref(), "cache_type_v")?;
    let at = || format!("loading {}", path.display());
    let mut decoder = Decoder::load(path).map_err(|e| format!("{}: {e}", at()))?;
    let tokenizer = if let Some(g) = &decoder.gguf {
        Tokenizer::from_gguf(g).map_err(|e| format!("{}: tokenizer: {e}", at()))?
    } else if path.join("tokenizer.json").exists() {
        Tokenizer::from_hf_dir(path).map_err(|e| format!("{}: tokenizer.json: {e}", at()))?
    } else {
        return Err(format!("{}: no tokenizer found", at()));
    };
    ferrox_models::validate::check_tokenizer(&decoder, &tokenizer)
        .map_err(|e| format!("{}: {e}", at()))?;
    let format = CacheFormat {
        k,
        v,
        bf16_products: false,
    };
    decoder
        .set_cache_format(format)
        .map_err(|e| format!("cache_type_k={k}, cache_type_v={v}: {e}"))?;
    if let Some(g) = &decoder.gguf {
        g.release_pages();
    }
    Ok((decoder, tokenizer))
}
