//! `ferrox perplexity`: llama-perplexity's method — the tokenized file is cut into
//! non-overlapping chunks of `-c` tokens (the first token of each chunk becomes BOS when the
//! model adds one), and each chunk's second half is scored on predicting its next token.
//! The last line of stdout is `PPL = <value>`.

use super::engine;
use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: super::engine::ModelFlags,
    /// Text file to score.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Chunk (context) size.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Score at most this many chunks (default: all).
    #[arg(long)]
    pub chunks: Option<usize>,
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.threads);
    let eng = args.model.load(true, &Default::default())?;
    let tok = eng.tokenizer()?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let t0 = Instant::now();
    let tokens = tok.encode(&text, true, false);
    eprintln!(
        "tokenized {} tokens in {:.2} s",
        tokens.len(),
        t0.elapsed().as_secs_f64()
    );
    let bos = if tok.adds_bos() { tok.bos_id() } else { None };
    let t1 = Instant::now();
    let out = std::io::stdout();
    let r = ferrox_models::perplexity::perplexity(
        &eng.decoder,
        &tokens,
        args.ctx,
        bos,
        args.chunks,
        |i, p| {
            let mut o = out.lock();
            let _ = write!(o, "[{}]{p:.4},", i + 1);
            let _ = o.flush();
        },
    )?;
    println!();
    eprintln!(
        "{} chunks of {} in {:.1} s",
        r.chunks,
        args.ctx,
        t1.elapsed().as_secs_f64()
    );
    println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.err);
    println!("PPL = {:.4}", r.ppl);
    Ok(())
}
