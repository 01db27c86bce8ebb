//! Loading a model for the inference subcommands: resolve `-m`, load the decoder and its
//! tokenizer, set the thread count.

use anyhow::Context;
use ferrox_models::decoder::Decoder;
use ferrox_models::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct Engine {
    pub decoder: Decoder,
    pub tokenizer: Option<Tokenizer>,
    pub path: PathBuf,
}

impl Engine {
    pub fn tokenizer(&self) -> anyhow::Result<&Tokenizer> {
        self.tokenizer
            .as_ref()
            .with_context(|| format!("{}: no tokenizer found", self.path.display()))
    }
}

/// Sets the worker threads (0 = all cores). Must run before any parallel work.
pub fn set_threads(threads: usize) {
    if threads > 0 {
        // A second initialisation (tests calling twice) is harmless to ignore.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global();
    }
}

/// A path as given, or a model name looked up in the models directory.
pub fn resolve(model: Option<&str>) -> anyhow::Result<PathBuf> {
    let name = model.unwrap_or("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    let p = Path::new(name);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    let home = std::env::var_os("FERROX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ferrox")))
        .context("no HOME or FERROX_HOME")?;
    for cand in [name.to_string(), format!("{name}.gguf")] {
        let p = home.join("models").join(cand);
        if p.exists() {
            return Ok(p);
        }
    }
    anyhow::bail!("model `{name}` not found")
}

pub fn load(model: Option<&str>, verbose: bool) -> anyhow::Result<Engine> {
    let path = resolve(model)?;
    let t0 = Instant::now();
    let decoder = Decoder::load(&path).with_context(|| format!("loading {}", path.display()))?;
    let tokenizer = if let Some(g) = &decoder.gguf {
        Some(Tokenizer::from_gguf(g).context("reading the GGUF tokenizer")?)
    } else if path.join("tokenizer.json").exists() {
        Some(Tokenizer::from_hf_dir(&path).context("reading tokenizer.json")?)
    } else {
        None
    };
    if verbose {
        eprintln!(
            "loaded {} ({:?}, {} layers, vocab {}) in {:.2} s",
            path.display(),
            decoder.config.arch,
            decoder.config.n_layers,
            decoder.vocab_size(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(Engine {
        decoder,
        tokenizer,
        path,
    })
}
