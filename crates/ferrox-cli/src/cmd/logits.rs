//! `ferrox logits`: raw logits as a float32 `.npy` file `[rows, vocab]` — the last position, or
//! every position with `--all`; with `--hidden`, the final hidden states `[rows, hidden]`
//! (after the output norm: what embeddings pool). Checks ferrox against any other engine.

use super::engine;
use anyhow::Context;
use ferrox_tokenizer::TokenId;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: super::engine::ModelFlags,
    /// Token ids, comma-separated (instead of text).
    #[arg(long, value_delimiter = ',', conflicts_with = "text")]
    pub ids: Option<Vec<TokenId>>,
    /// Text, tokenized with BOS as the model says.
    pub text: Option<String>,
    /// Every position instead of the last.
    #[arg(long)]
    pub all: bool,
    /// The final hidden states (after the output norm) instead of logits.
    #[arg(long)]
    pub hidden: bool,
    /// Output `.npy` file.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Threads (0 = all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    #[command(flatten)]
    pub dist: super::dist::DistArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.threads);
    let eng = args.model.load(false, &args.dist)?;
    let ids: Vec<TokenId> = match (&args.ids, &args.text) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => eng.tokenizer()?.encode(text, true, true),
        (None, None) => anyhow::bail!("give --ids or a text"),
    };
    anyhow::ensure!(!ids.is_empty(), "no tokens to evaluate");
    let dec = &eng.decoder;
    let vocab = dec.vocab_size();
    if let Some(bad) = ids.iter().find(|&&t| t >= dec.embed.rows()) {
        anyhow::bail!("token id {bad} is outside the vocabulary ({vocab})");
    }
    let mut caches = dec.new_caches();
    let first = if args.all { 0 } else { ids.len() - 1 };
    let (out, width) = if args.hidden {
        let h = dec.hidden_states(&ids, 0, &mut caches, first);
        (h, dec.config.hidden_dim)
    } else {
        let mut logits = Vec::new();
        dec.forward_into(&ids, 0, &mut caches, first, &mut logits);
        (logits, vocab)
    };
    super::dist::report(eng.cluster.as_ref(), dec.config.hidden_dim);
    super::dist::save_load(&args.dist, dec)?;
    let rows = ids.len() - first;
    super::npy::write_f32(&args.output, &[rows, width], &out)
        .with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!(
        "wrote {} [{rows}, {width}] for {} tokens",
        args.output.display(),
        ids.len()
    );
    Ok(())
}
