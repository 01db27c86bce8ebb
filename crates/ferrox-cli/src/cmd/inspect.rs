//! `ferrox inspect MODEL`: a GGUF file's metadata and tensor table, in the spirit of gguf-py's
//! `gguf-dump` (long arrays and strings abbreviated).

use anyhow::Context;
use ferrox_format::gguf::{GgufFile, MetaArray, MetaValue};
use std::io::{self, Write};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a .gguf path (any shard of a split set), a catalog name or hf:OWNER/REPO/FILE.gguf.
    #[arg(value_name = "MODEL", required_unless_present = "model")]
    pub path: Option<String>,
    /// Model, as a flag (same as the positional MODEL).
    #[arg(short = 'm', long = "model", conflicts_with = "path")]
    pub model: Option<String>,
    /// Print every array element and full strings.
    #[arg(long)]
    pub full: bool,
}

/// Array elements and string characters shown before "...".
const SHOWN_ELEMS: usize = 6;
const SHOWN_CHARS: usize = 80;

pub fn run(args: Args) -> anyhow::Result<()> {
    let model = args.path.or(args.model).context("no model given")?;
    let path = super::model::resolve(Some(&model))?;
    let file = GgufFile::open(&path).with_context(|| format!("reading {}", path.display()))?;
    match print(&file, &path, args.full) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn print(f: &GgufFile, path: &std::path::Path, full: bool) -> io::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let (elems, chars) = if full {
        (usize::MAX, usize::MAX)
    } else {
        (SHOWN_ELEMS, SHOWN_CHARS)
    };
    writeln!(
        out,
        "* {}: GGUF v{}, {} shard(s), alignment {}",
        path.display(),
        f.version(),
        f.shard_count(),
        f.alignment()
    )?;
    writeln!(out, "* Dumping {} key/value pair(s)", f.metadata().len())?;
    for (i, (key, v)) in f.metadata().iter().enumerate() {
        let (ty, n) = match v {
            MetaValue::Array(a) => (format!("[{}]", a.elem_type().name()), a.len()),
            other => (other.meta_type().name().to_string(), 1),
        };
        writeln!(
            out,
            "{:>6}: {ty:<10} | {n:>8} | {key} = {}",
            i + 1,
            show_value(v, elems, chars)
        )?;
    }
    let total: u64 = f.tensors().iter().map(|t| t.n_bytes).sum();
    writeln!(
        out,
        "* Dumping {} tensor(s), {} bytes",
        f.tensors().len(),
        total
    )?;
    writeln!(
        out,
        "{:>6}  {:<8} {:<26} {:>12}  name",
        "#", "type", "shape", "bytes"
    )?;
    for (i, t) in f.tensors().iter().enumerate() {
        let shape = format!(
            "[{}]",
            t.dims
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        writeln!(
            out,
            "{:>6}: {:<8} {:<26} {:>12}  {}",
            i + 1,
            t.ty.name(),
            shape,
            t.n_bytes,
            t.name
        )?;
    }
    out.flush()
}

fn show_str(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

fn show_value(v: &MetaValue, elems: usize, chars: usize) -> String {
    match v {
        MetaValue::String(s) => show_str(s, chars),
        MetaValue::Array(a) => show_array(a, elems, chars),
        MetaValue::U8(x) => x.to_string(),
        MetaValue::I8(x) => x.to_string(),
        MetaValue::U16(x) => x.to_string(),
        MetaValue::I16(x) => x.to_string(),
        MetaValue::U32(x) => x.to_string(),
        MetaValue::I32(x) => x.to_string(),
        MetaValue::U64(x) => x.to_string(),
        MetaValue::I64(x) => x.to_string(),
        MetaValue::F32(x) => x.to_string(),
        MetaValue::F64(x) => x.to_string(),
        MetaValue::Bool(x) => x.to_string(),
    }
}

fn show_array(a: &MetaArray, elems: usize, chars: usize) -> String {
    let shown: Vec<String> = match a {
        // Avoid cloning every string of a 262k vocabulary just to print six.
        MetaArray::String(s) => s.iter().take(elems).map(|x| show_str(x, chars)).collect(),
        _ => a
            .iter()
            .take(elems)
            .map(|x| show_value(&x, elems, chars))
            .collect(),
    };
    let more = if a.len() > shown.len() { ", ..." } else { "" };
    format!("[{}{more}]", shown.join(", "))
}
