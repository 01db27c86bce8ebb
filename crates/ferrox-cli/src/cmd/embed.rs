//! `ferrox embed`: sentence embeddings of texts with a BERT-family encoder (all-MiniLM, bge,
//! e5 …), one JSON line per text (`{"index": i, "tokens": n, "embedding": [...]}`); with
//! `--query`, the texts are documents ranked by a cross-encoder (`{"index", "relevance_score"}`).
//! All texts go through one batched forward pass (`ferrox_models::encoder`).

use std::io::{BufRead, Write};
use std::time::Instant;

use anyhow::Context;
use ferrox_models::encoder::Encoder;

#[derive(clap::Args)]
pub struct Args {
    /// Encoder model: a catalog name (all-minilm:l6-v2), a model directory or a `bert` GGUF.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Texts to embed (none: one text per line of stdin).
    pub texts: Vec<String>,
    /// Rank the texts as documents against this query (a reranker model).
    #[arg(long)]
    pub query: Option<String>,
    /// Threads (0 = all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
}

/// Loads an encoder named by `-m` (pulling a catalog model when needed).
pub fn load(model: &str) -> anyhow::Result<Encoder> {
    let path = super::model::resolve(Some(model))?;
    if !ferrox_models::encoder::is_encoder(&path) {
        anyhow::bail!(
            "{} is not an encoder (BERT family); `ferrox embed` needs an embedding or reranker model",
            path.display()
        );
    }
    Encoder::load(&path).with_context(|| format!("loading {}", path.display()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    super::engine::set_threads(args.threads);
    let enc = load(&args.model)?;
    let texts = match args.texts.is_empty() {
        true => std::io::stdin()
            .lock()
            .lines()
            .collect::<Result<Vec<_>, _>>()
            .context("reading stdin")?,
        false => args.texts,
    };
    let t0 = Instant::now();
    let mut out = std::io::stdout().lock();
    if let Some(q) = &args.query {
        let docs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let scores = enc.rank(q, &docs)?;
        for (i, s) in scores.iter().enumerate() {
            writeln!(
                out,
                "{}",
                serde_json::json!({"index": i, "relevance_score": s})
            )?;
        }
    } else {
        let inputs = texts
            .iter()
            .map(|t| enc.tokenize(t))
            .collect::<Result<Vec<_>, _>>()?;
        let vectors = enc.embed(&inputs)?;
        for (i, (v, e)) in vectors.iter().zip(&inputs).enumerate() {
            let line = serde_json::json!({"index": i, "tokens": e.ids.len(), "embedding": v});
            writeln!(out, "{line}")?;
        }
    }
    eprintln!(
        "{} texts in {:.1} ms",
        texts.len(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
