//! `ferrox tokenize -m MODEL TEXT`: token ids and pieces, like llama.cpp's `llama-tokenize`
//! (same flags: `--ids`, `--no-bos`, `--no-parse-special`, `-f`, `--stdin`, `--show-count`).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use ferrox_format::gguf::GgufFile;
use ferrox_tokenizer::{TokenId, Tokenizer};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a .gguf path, a Hugging Face model directory (tokenizer.json), a catalog name or
    /// hf:OWNER/REPO/FILE.gguf (pulled if missing), or a file name under $FERROX_HOME/models.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Text to tokenize.
    #[arg(value_name = "TEXT", conflicts_with_all = ["prompt", "file", "stdin"])]
    pub text: Option<String>,
    /// Text to tokenize (as llama-tokenize's -p).
    #[arg(short = 'p', long = "prompt", conflicts_with_all = ["file", "stdin"])]
    pub prompt: Option<String>,
    /// Read the text from a file (verbatim).
    #[arg(short = 'f', long = "file", conflicts_with = "stdin")]
    pub file: Option<PathBuf>,
    /// Read the text from standard input.
    #[arg(long)]
    pub stdin: bool,
    /// Print only the ids, as one JSON array.
    #[arg(long)]
    pub ids: bool,
    /// Do not add BOS/EOS even if the model asks for them.
    #[arg(long = "no-bos")]
    pub no_bos: bool,
    /// Treat special-token text (e.g. `<|im_end|>`) as plain text.
    #[arg(long = "no-parse-special")]
    pub no_parse_special: bool,
    /// Print the number of tokens at the end.
    #[arg(long = "show-count")]
    pub show_count: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let text = match (&args.text, &args.prompt, &args.file, args.stdin) {
        (Some(t), ..) | (None, Some(t), ..) => t.clone(),
        (None, None, Some(f), _) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None, None, true) => {
            let mut s = String::new();
            io::stdin()
                .read_to_string(&mut s)
                .context("reading stdin")?;
            s
        }
        _ => anyhow::bail!("no text given (TEXT, -p, -f FILE or --stdin)"),
    };
    let tok = load_tokenizer(&args.model)?;
    let ids = tok.encode(&text, !args.no_bos, !args.no_parse_special);
    let mut out = io::BufWriter::new(io::stdout().lock());
    let r = print(&mut out, &tok, &ids, &args).and_then(|_| out.flush());
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn print(out: &mut impl Write, tok: &Tokenizer, ids: &[TokenId], args: &Args) -> io::Result<()> {
    if args.ids {
        let list: Vec<String> = ids.iter().map(TokenId::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    } else {
        for &id in ids {
            let piece = String::from_utf8_lossy(tok.token_to_piece(id));
            writeln!(out, "{id:>6} -> '{piece}'")?;
        }
    }
    if args.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    Ok(())
}

/// A tokenizer from a GGUF file or a Hugging Face model directory.
pub fn load_tokenizer(model: &str) -> anyhow::Result<Tokenizer> {
    let path = resolve_model(model)?;
    if path.is_dir() {
        return Tokenizer::from_hf_dir(&path)
            .with_context(|| format!("loading {}", path.display()));
    }
    let f = GgufFile::open(&path).with_context(|| format!("reading {}", path.display()))?;
    Tokenizer::from_gguf(&f).with_context(|| format!("tokenizer of {}", path.display()))
}

fn resolve_model(model: &str) -> anyhow::Result<PathBuf> {
    let p = Path::new(model);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    // A catalog name or hf: reference (pulled if missing), or a file in the models directory.
    let hub = super::model::hub()?;
    let in_dir = hub.models_dir().join(model);
    if in_dir.exists() {
        return Ok(in_dir);
    }
    Ok(hub.resolve(
        &ferrox_hub::ModelRef::parse(model)?,
        &ferrox_hub::NoProgress,
    )?)
}
