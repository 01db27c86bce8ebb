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
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
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

/// Result of a perplexity run.
pub struct Ppl {
    pub ppl: f64,
    pub err: f64,
    pub chunks: usize,
}

/// Scores `tokens` in chunks of `n_ctx`; `progress` receives each chunk's running estimate.
pub fn perplexity(
    dec: &ferrox_models::decoder::Decoder,
    tokens: &[usize],
    n_ctx: usize,
    bos: Option<usize>,
    max_chunks: Option<usize>,
    mut progress: impl FnMut(usize, f64),
) -> anyhow::Result<Ppl> {
    anyhow::ensure!(n_ctx >= 4, "context size {n_ctx} is too small");
    let mut n_chunk = tokens.len() / n_ctx;
    if let Some(m) = max_chunks {
        n_chunk = n_chunk.min(m);
    }
    anyhow::ensure!(
        n_chunk >= 1,
        "need at least {n_ctx} tokens, the file has {}",
        tokens.len()
    );
    let first = n_ctx / 2;
    let vocab = dec.vocab_size();
    let mut caches = dec.new_caches();
    let mut logits = Vec::new();
    let mut chunk = Vec::with_capacity(n_ctx);
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for i in 0..n_chunk {
        let start = i * n_ctx;
        chunk.clear();
        chunk.extend_from_slice(&tokens[start..start + n_ctx]);
        if let Some(b) = bos {
            chunk[0] = b;
        }
        dec.forward_into(&chunk, 0, &mut caches, first, &mut logits);
        // Row r is position first + r, predicting the original token after it.
        for r in 0..n_ctx - 1 - first {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let target = tokens[start + first + r + 1];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&l| ((l - max) as f64).exp()).sum();
            let lp = (row[target] - max) as f64 - sum.ln();
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        progress(i, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = (nll2 / count as f64 - mean * mean).max(0.0);
    let err = if count > 1 {
        ppl * (var / (count - 1) as f64).sqrt()
    } else {
        0.0
    };
    Ok(Ppl {
        ppl,
        err,
        chunks: n_chunk,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.threads);
    let eng = engine::load(args.model.as_deref(), true)?;
    let tok = eng.tokenizer()?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let t0 = Instant::now();
    let tokens: Vec<usize> = tok
        .encode(&text, true, false)
        .into_iter()
        .map(|t| t as usize)
        .collect();
    eprintln!(
        "tokenized {} tokens in {:.2} s",
        tokens.len(),
        t0.elapsed().as_secs_f64()
    );
    let bos = if tok.adds_bos() {
        tok.bos_id().map(|b| b as usize)
    } else {
        None
    };
    let t1 = Instant::now();
    let out = std::io::stdout();
    let r = perplexity(&eng.decoder, &tokens, args.ctx, bos, args.chunks, |i, p| {
        let mut o = out.lock();
        let _ = write!(o, "[{}]{p:.4},", i + 1);
        let _ = o.flush();
    })?;
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
