//! `ferrox spec-data`: the training data of a draft head, from any text. The files are
//! tokenized as raw text and cut into windows; each window is prefilled from an empty cache
//! and, for every position, the command keeps the token, the model's own greedy choice there
//! and its final hidden state (after the output norm: what the LM head and an MTP block read).
//! A head trained to predict the model's choice at `i + 1` from the state at `i` and token
//! `i + 1` learns the model itself, not the text (self-distillation without a generation pass;
//! see issue 38 and the EAGLE / Medusa papers).
//!
//! Output directory: `tokens.npy` (uint32 `[N]`), `choices.npy` (uint32 `[N]`), `hidden.npy`
//! (float16 `[N, hidden]`), `windows.npy` (uint32 `[W, 2]`: first row, length) and `meta.json`.

use super::engine;
use super::npy;
use anyhow::Context;
use ferrox_models::decoder::{SeqBatch, OWN_CACHES};
use ferrox_models::sampling::argmax;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Text files to read (raw text, no chat template).
    #[arg(short = 'f', long = "file", required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory (created).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Tokens per window (each prefilled from an empty cache).
    #[arg(long, default_value_t = 512)]
    pub window: usize,
    /// Read special-token text (`<|im_start|>`, ...) as those tokens: chat transcripts
    /// written out through the model's template.
    #[arg(long)]
    pub special: bool,
    /// Stop after this many positions.
    #[arg(long = "max-tokens", default_value_t = 200_000)]
    pub max_tokens: usize,
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
}

/// Windows shorter than this (a file's tail) are dropped: too little context to learn from.
const MIN_WINDOW: usize = 16;
/// Rows whose logits are computed at once for their argmax (bounds the logits buffer).
const HEAD_ROWS: usize = 16;

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.window >= MIN_WINDOW,
        "--window must be at least {MIN_WINDOW}"
    );
    engine::set_threads(args.threads);
    let eng = engine::load(args.model.as_deref(), true)?;
    let tok = eng.tokenizer()?;
    let dec = &eng.decoder;
    let (d, vocab) = (dec.config.hidden_dim, dec.vocab_size());

    let mut windows: Vec<Vec<u32>> = Vec::new();
    let mut total = 0;
    'files: for f in &args.files {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        let ids = tok.encode(&String::from_utf8_lossy(&bytes), false, args.special);
        for w in ids.chunks(args.window) {
            let w = &w[..w.len().min(args.max_tokens - total)];
            if w.len() < MIN_WINDOW {
                continue;
            }
            total += w.len();
            windows.push(w.iter().map(|&t| t as u32).collect());
            if total >= args.max_tokens {
                break 'files;
            }
        }
    }
    anyhow::ensure!(
        total > 0,
        "no window of at least {MIN_WINDOW} tokens in the files"
    );
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let path = |name: &str| args.output.join(name);
    let mut hidden_out = npy::Writer::create(&path("hidden.npy"), "<f2", &[total, d])?;
    let mut tokens = Vec::with_capacity(total);
    let mut choices = Vec::with_capacity(total);
    let mut spans = Vec::with_capacity(2 * windows.len());

    let t0 = Instant::now();
    let (mut logits, mut hidden, mut head) = (Vec::new(), Vec::new(), Vec::new());
    for w in &windows {
        let ids: Vec<usize> = w.iter().map(|&t| t as usize).collect();
        let mut caches = dec.new_caches();
        let mut seq = [SeqBatch {
            tokens: &ids,
            pos: 0,
            caches: &mut caches,
            // No logits from the forward: the argmax below takes them a few rows at a time.
            first_logit_row: ids.len(),
            key: OWN_CACHES,
            tree: None,
        }];
        dec.forward_multi_hidden(&mut seq, &mut logits, &mut hidden);
        for rows in hidden.chunks(HEAD_ROWS * d) {
            let n = rows.len() / d;
            head.resize(n * vocab, 0.0);
            dec.lm_head.gemm(rows, n, &mut head);
            choices.extend(head.chunks_exact(vocab).map(|l| argmax(l) as u32));
        }
        hidden_out.write_f16(&hidden)?;
        spans.extend([tokens.len() as u32, w.len() as u32]);
        tokens.extend_from_slice(w);
        let secs = t0.elapsed().as_secs_f64();
        eprint!(
            "\r{} / {total} positions, {:.0} tokens/s",
            tokens.len(),
            tokens.len() as f64 / secs
        );
    }
    eprintln!();
    hidden_out.finish()?;
    npy::write_u32(&path("tokens.npy"), &[total], &tokens)?;
    npy::write_u32(&path("choices.npy"), &[total], &choices)?;
    npy::write_u32(&path("windows.npy"), &[windows.len(), 2], &spans)?;
    let meta = serde_json::json!({
        "model": eng.path.display().to_string(),
        "arch": dec.config.arch,
        "hidden": d,
        "vocab": vocab,
        "window": args.window,
        "positions": total,
        "files": args.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
    });
    let mut f = std::fs::File::create(path("meta.json"))?;
    writeln!(f, "{}", serde_json::to_string_pretty(&meta)?)?;
    eprintln!(
        "wrote {} positions in {} windows to {} in {:.1} s",
        total,
        windows.len(),
        args.output.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
