//! The model-file verbs next to `pull`, as ollama has them: `list` (what is downloaded), `rm`,
//! `show` (a model's card, read from its GGUF metadata without loading the weights).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use ferrox_format::gguf::GgufFile;
use ferrox_hub::CATALOG;
use ferrox_models::arch::{gguf_config, GgufMeta};
use ferrox_server::library::parameter_size as human;
use ferrox_server::ModelCard;

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
pub fn display_name(file: &str) -> String {
    CATALOG
        .iter()
        .find(|e| e.file == file)
        .map_or_else(|| file.to_string(), |e| e.name.to_string())
}

/// The `.gguf` files in the models folder, sorted by name.
pub fn downloaded(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
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

/// The card of the model file at `path`, from its GGUF metadata (no weights loaded).
pub fn card(path: &Path) -> anyhow::Result<ModelCard> {
    let file = GgufFile::open(path).with_context(|| format!("reading {}", path.display()))?;
    let g = GgufMeta {
        file: Arc::new(file),
    };
    let (arch, cfg) = gguf_config(&g)?;
    // The quantization: the type holding most of the weights' bytes.
    let mut by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for t in g.file.tensors() {
        *by_type.entry(t.ty.name()).or_default() += t.n_bytes;
    }
    Ok(ModelCard {
        name: g.file.get_str("general.name").map(String::from),
        family: arch.name.to_string(),
        architecture: g.arch().to_string(),
        parameters: g.file.tensors().iter().map(|t| t.n_elements).sum(),
        // The file's declared mix (`Q4_K_M`), else the type holding most bytes.
        quantization: g
            .file
            .get_u64("general.file_type")
            .and_then(file_type_name)
            .or_else(|| by_type.iter().max_by_key(|(_, b)| **b).map(|(t, _)| *t))
            .unwrap_or("-")
            .to_string(),
        context_length: cfg.max_seq_len,
        embedding_length: cfg.hidden_dim,
        layers: cfg.n_layers,
        heads: cfg.n_heads,
        kv_heads: cfg.n_kv_heads,
        experts: (cfg.moe.n_experts, cfg.moe.n_experts_active),
        vocab: cfg.vocab_size,
        template: g.file.get_str("tokenizer.chat_template").map(String::from),
        size: std::fs::metadata(path).map_or(0, |m| m.len()),
    })
}

pub fn show(args: ShowArgs) -> anyhow::Result<()> {
    let path = resolve(args.model.as_deref())?;
    let c = card(&path)?;
    if args.template {
        println!("{}", c.template.as_deref().unwrap_or(""));
        return Ok(());
    }
    let row = |k: &str, v: String| println!("  {k:<22} {v}");
    println!("Model");
    row("name", c.name.clone().unwrap_or_else(|| "-".into()));
    row(
        "family",
        format!("{} (GGUF `{}`)", c.family, c.architecture),
    );
    row("parameters", human(c.parameters));
    row("quantization", c.quantization.clone());
    row("context length", c.context_length.to_string());
    row("embedding length", c.embedding_length.to_string());
    row("layers", c.layers.to_string());
    row(
        "attention heads",
        format!("{} (KV {})", c.heads, c.kv_heads),
    );
    if c.experts.0 > 0 {
        row(
            "experts",
            format!("{} routed, {} active", c.experts.0, c.experts.1),
        );
    }
    row("vocabulary", c.vocab.to_string());
    row(
        "chat template",
        match &c.template {
            Some(t) => format!("{} lines (`ferrox show --template`)", t.lines().count()),
            None => "none (plain prompts)".into(),
        },
    );
    row("file", path.display().to_string());
    Ok(())
}

/// llama.cpp's `llama_ftype` names (`general.file_type`), as `llama-quantize` lists them.
fn file_type_name(t: u64) -> Option<&'static str> {
    Some(match t {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
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
