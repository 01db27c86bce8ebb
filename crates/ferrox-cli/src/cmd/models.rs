//! The model-file verbs next to `pull`, as ollama has them: `list` (what is downloaded), `rm`,
//! `show` (a model's card, read from its GGUF metadata without loading the weights).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use ferrox_format::gguf::GgufFile;
use ferrox_hub::CATALOG;
use ferrox_models::arch::{gguf_config, GgufMeta};

use super::model::{hub, resolve};

#[derive(clap::Args)]
pub struct ListArgs {}

#[derive(clap::Args)]
pub struct RmArgs {
    /// Catalog names or file names under the models folder.
    #[arg(required = true)]
    pub names: Vec<String>,
}

#[derive(clap::Args)]
pub struct ShowArgs {
    /// Model: a catalog name, a path or hf:OWNER/REPO/FILE.gguf (default: the catalog default).
    pub model: Option<String>,
    /// Print only the chat template.
    #[arg(long)]
    pub template: bool,
}

/// The catalog name of a downloaded file, else its file name.
fn display_name(file: &str) -> String {
    CATALOG
        .iter()
        .find(|e| e.file == file)
        .map_or_else(|| file.to_string(), |e| e.name.to_string())
}

/// The `.gguf` files in the models folder, sorted by name.
fn downloaded(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for e in entries {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "gguf") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

pub fn list(_: ListArgs) -> anyhow::Result<()> {
    let hub = hub()?;
    println!("{:<34} {:>9}  {:<20} PATH", "NAME", "SIZE", "MODIFIED");
    for path in downloaded(hub.models_dir())? {
        let meta = std::fs::metadata(&path)?;
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or_else(|| "-".into(), |d| utc(d.as_secs()));
        println!(
            "{:<34} {:>6} MB  {:<20} {}",
            display_name(&file),
            meta.len() / 1_000_000,
            modified,
            path.display()
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM` (UTC) of a Unix time.
fn utc(secs: u64) -> String {
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let (y, mo, d) = ferrox_tokenizer::template::civil_date((secs / 86_400) as i64);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}")
}

pub fn rm(args: RmArgs) -> anyhow::Result<()> {
    let hub = hub()?;
    for name in &args.names {
        let path = match ferrox_hub::lookup(name) {
            Some(e) => hub.path_of(e),
            None => hub.models_dir().join(name),
        };
        // Only files in the models folder: `rm` never deletes a path given from elsewhere.
        anyhow::ensure!(
            path.parent() == Some(hub.models_dir())
                && path.extension().is_some_and(|x| x == "gguf"),
            "{name}: not a downloaded model (see `ferrox list`)"
        );
        anyhow::ensure!(
            path.is_file(),
            "{name}: not a downloaded model (see `ferrox list`)"
        );
        std::fs::remove_file(&path).with_context(|| format!("{name}: {}", path.display()))?;
        let _ = std::fs::remove_file(path.with_extension("gguf.sha256"));
        println!("deleted {}", path.display());
    }
    Ok(())
}

pub fn show(args: ShowArgs) -> anyhow::Result<()> {
    let path = resolve(args.model.as_deref())?;
    let file = GgufFile::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let g = GgufMeta {
        file: Arc::new(file),
    };
    let template = g.file.get_str("tokenizer.chat_template");
    if args.template {
        println!("{}", template.unwrap_or(""));
        return Ok(());
    }
    let (arch, cfg) = gguf_config(&g)?;
    let params: u64 = g.file.tensors().iter().map(|t| t.n_elements).sum();
    // The quantization: the type holding most of the weights' bytes.
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for t in g.file.tensors() {
        *by_type.entry(t.ty.name()).or_default() += t.n_bytes;
    }
    let quant = by_type
        .iter()
        .max_by_key(|(_, b)| **b)
        .map_or("-", |(t, _)| *t);
    let row = |k: &str, v: String| println!("  {k:<22} {v}");
    println!("Model");
    row(
        "name",
        g.file.get_str("general.name").unwrap_or("-").to_string(),
    );
    row("family", format!("{} (GGUF `{}`)", arch.name, g.arch()));
    row("parameters", human(params));
    row("quantization", quant.to_string());
    row("context length", cfg.max_seq_len.to_string());
    row("embedding length", cfg.hidden_dim.to_string());
    row("layers", cfg.n_layers.to_string());
    row(
        "attention heads",
        format!("{} (KV {})", cfg.n_heads, cfg.n_kv_heads),
    );
    if cfg.moe.n_experts > 0 {
        row(
            "experts",
            format!(
                "{} routed, {} active, {} shared",
                cfg.moe.n_experts, cfg.moe.n_experts_active, cfg.moe.n_shared_experts
            ),
        );
    }
    row("vocabulary", cfg.vocab_size.to_string());
    row(
        "chat template",
        match template {
            Some(t) => format!("{} lines (`ferrox show --template`)", t.lines().count()),
            None => "none (plain prompts)".into(),
        },
    );
    row("file", path.display().to_string());
    Ok(())
}

/// 494032768 → `494.03M`.
fn human(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(1_796_317_896), "2026-12-03 17:11");
        assert_eq!(human(494_032_768), "494.03M");
    }
}
