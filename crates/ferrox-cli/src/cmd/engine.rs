//! Loading a model for the inference subcommands: resolve `-m`, load the decoder and its
//! tokenizer, set the thread count.

use super::heap::trim_heap;
use anyhow::Context;
use ferrox_core::cache::{CacheFormat, KvType};
use ferrox_models::decoder::Decoder;
use ferrox_models::speculative::DraftModel;
use ferrox_tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The model a command loads and the KV cache it runs with: `-m` and the cache flags, the
/// same for `run`, `chat`, `logits`, `perplexity` and `bench`.
#[derive(clap::Args)]
pub struct ModelFlags {
    /// Model: a catalog name, a path (GGUF file or Hugging Face directory) or
    /// hf:OWNER/REPO/FILE.gguf (default: the catalog default).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

impl ModelFlags {
    /// The model, spread over an MPI job as `dist` asks, its caches in the flags' format.
    pub fn load(&self, verbose: bool, dist: &super::dist::DistArgs) -> anyhow::Result<LoadedModel> {
        let mut eng = load_with(self.model.as_deref(), verbose, dist)?;
        self.cache.apply(&mut eng)?;
        Ok(eng)
    }
}

/// The KV cache's element types (llama.cpp's `--cache-type-k/-v`).
#[derive(clap::Args, Clone, Debug)]
pub struct CacheArgs {
    /// Element type of cached keys: f32, f16, bf16 or q8_0 (default: bf16 where its products
    /// are the faster ones — AMD CPUs with AVX-512 BF16 — else f16, as llama.cpp).
    #[arg(long = "cache-type-k", visible_alias = "ctk", value_parser = parse_kv_type)]
    pub cache_type_k: Option<KvType>,
    /// Element type of cached values (as `--cache-type-k`).
    #[arg(long = "cache-type-v", visible_alias = "ctv", value_parser = parse_kv_type)]
    pub cache_type_v: Option<KvType>,
    /// Attention products in bf16 over an f16 or q8_0 cache too (a bf16 cache always takes
    /// them; AVX-512 BF16): long prompts ~10% faster, decoding deep in a context ~9% slower.
    #[arg(long = "attn-bf16")]
    pub attn_bf16: bool,
}

fn parse_kv_type(s: &str) -> Result<KvType, String> {
    KvType::parse(s).ok_or_else(|| format!("unknown cache type {s:?} (f32, f16, bf16 or q8_0)"))
}

impl CacheArgs {
    /// Half the memory of f32 and, deep in a context, faster decoding (attention reads every
    /// cached row per token). bf16 where its products are the faster ones (attention
    /// multiplies it as stored, `kernels::bf16_attention_pays`), at llama.cpp's perplexity
    /// (see the README); f16 elsewhere, as llama.cpp.
    pub fn default_type() -> KvType {
        if ferrox_core::kernels::bf16_attention_pays() {
            KvType::Bf16
        } else {
            KvType::F16
        }
    }

    /// The key and value types asked for, [`Self::default_type`] where not given.
    pub fn types(&self) -> (KvType, KvType) {
        (
            self.cache_type_k.unwrap_or_else(Self::default_type),
            self.cache_type_v.unwrap_or_else(Self::default_type),
        )
    }

    /// The cache format asked for: these types ([`Self::default_type`] where not given) and
    /// `--attn-bf16`.
    pub fn format(&self) -> CacheFormat {
        let (k, v) = self.types();
        CacheFormat {
            k,
            v,
            bf16_products: self.attn_bf16,
        }
    }

    /// Gives the decoder this cache format; an unsupported one is an error naming the flags.
    pub fn apply(&self, eng: &mut LoadedModel) -> anyhow::Result<()> {
        // Pipeline stages in other processes take the format from each forward's header.
        let f = self.format();
        let bf16 = if f.bf16_products { " --attn-bf16" } else { "" };
        eng.decoder.set_cache_format(f).with_context(|| {
            let flags = format!("--cache-type-k {} --cache-type-v {}{bf16}", f.k, f.v);
            format!("unsupported KV cache format ({flags})")
        })
    }
}

/// A model loaded for a command: its decoder (and the MPI job behind it, if any), its
/// tokenizer, the file it came from.
pub struct LoadedModel {
    pub decoder: Decoder,
    pub tokenizer: Option<Tokenizer>,
    pub path: PathBuf,
    /// The MPI job this process drives (`--expert-parallel`); dropping it stops the others.
    pub cluster: Option<super::dist::Cluster>,
}

impl LoadedModel {
    pub fn tokenizer(&self) -> anyhow::Result<&Tokenizer> {
        self.tokenizer
            .as_ref()
            .with_context(|| format!("{}: no tokenizer found", self.path.display()))
    }
}

/// Sets the worker threads (0 = all cores): the hot loop's pool and rayon's (loading). Must run
/// before any parallel work.
pub fn set_threads(threads: usize) {
    ferrox_core::pool::set_threads(threads);
    if threads > 0 {
        // A second initialisation (tests calling twice) is harmless to ignore.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global();
    }
}

pub fn load(model: Option<&str>, verbose: bool) -> anyhow::Result<LoadedModel> {
    load_with(model, verbose, &super::dist::DistArgs::default())
}

/// [`load`], spread over an MPI job as `dist` asks. Ranks other than 0 serve their experts
/// and exit inside this call.
pub fn load_with(
    model: Option<&str>,
    verbose: bool,
    dist: &super::dist::DistArgs,
) -> anyhow::Result<LoadedModel> {
    let cluster = super::dist::start(dist)?;
    let path = super::model::resolve(model)?;
    let t0 = Instant::now();
    let (decoder, cluster) = super::dist::load(cluster, &path, dist)?;
    let tokenizer = if let Some(g) = &decoder.gguf {
        Some(Tokenizer::from_gguf(g).context("reading the GGUF tokenizer")?)
    } else if path.join("tokenizer.json").exists() {
        Some(Tokenizer::from_hf_dir(&path).context("reading tokenizer.json")?)
    } else {
        None
    };
    if let Some(t) = &tokenizer {
        ferrox_models::validate::check_tokenizer(&decoder, t)
            .with_context(|| format!("loading {}", path.display()))?;
    }
    // The tokenizer read the metadata through the map; loading is over.
    if let Some(g) = &decoder.gguf {
        g.release_pages();
    }
    trim_heap();
    if verbose {
        eprintln!(
            "loaded {} ({:?}, {} layers{}, vocab {}) in {:.2} s",
            path.display(),
            decoder.config.arch,
            decoder.config.n_layers,
            match decoder.mtp {
                Some(_) => " + an MTP block (drafts with --drafter auto)",
                None => "",
            },
            decoder.vocab_size(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(LoadedModel {
        decoder,
        tokenizer,
        path,
        cluster,
    })
}

/// A `--draft-model`, loaded once with the cache format of the model it drafts for; which
/// models it can draft for is checked per model ([`LoadedDraft::for_target`]).
pub struct LoadedDraft {
    name: String,
    decoder: Arc<Decoder>,
    tokenizer: Tokenizer,
}

impl LoadedDraft {
    /// Loads `name`, its caches in `format` (the models' it drafts for).
    pub fn load(name: &str, format: CacheFormat, verbose: bool) -> anyhow::Result<LoadedDraft> {
        let mut eng = load(Some(name), verbose).with_context(|| format!("--draft-model {name}"))?;
        eng.decoder
            .set_cache_format(format)
            .with_context(|| format!("--draft-model {name}: cache format {format:?}"))?;
        let tokenizer = eng
            .tokenizer
            .take()
            .with_context(|| format!("--draft-model {name}: no tokenizer found"))?;
        Ok(LoadedDraft {
            name: name.to_string(),
            decoder: Arc::new(eng.decoder),
            tokenizer,
        })
    }

    /// This model as the draft model of `target`, if their vocabularies agree.
    pub fn for_target(&self, target: &Decoder, tok: &Tokenizer) -> anyhow::Result<DraftModel> {
        DraftModel::new(target, tok, self.decoder.clone(), &self.tokenizer)
            .with_context(|| format!("--draft-model {} cannot draft for this model", self.name))
    }
}
