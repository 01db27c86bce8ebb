//! Which models a several-model `ferrox serve` offers (issue 40, after Ollama's model store):
//! each `-m`; every model in `--models-dir` under its file stem (a `.gguf` file, or a Hugging
//! Face model directory with a `config.json`); with neither, the pulled catalog (what
//! `ferrox pull --list` shows as present, in `$FERROX_HOME/models`), the default model first.
//! A name asked for later — a model pulled through `/api/pull`, a file added to the models
//! dir — is found on demand by [`discover`]. A file that cannot be read is reported by name
//! and stays listed (its requests fail with that message); the others are served.

use std::io::Read;
use std::path::{Path, PathBuf};

use ferrox_hub::{CATALOG, DEFAULT_MODEL};

/// A model to serve: its name, the other names it answers to, where it is, and what is wrong
/// with it when it cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Found {
    pub name: String,
    pub aliases: Vec<String>,
    pub path: PathBuf,
    pub problem: Option<String>,
}

impl Found {
    fn at(name: String, path: PathBuf) -> Found {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut aliases = vec![file.clone(), path.display().to_string()];
        // A catalog file answers to its catalog name too.
        if let Some(e) = CATALOG.iter().find(|e| e.file == file) {
            aliases.push(e.name.to_string());
        }
        aliases.retain(|a| *a != name);
        aliases.dedup();
        let problem = unreadable(&path);
        Found {
            name,
            aliases,
            path,
            problem,
        }
    }
}

/// The `-m`-style name of a model dir entry: a `.gguf` file's stem (a split GGUF by its
/// first shard), a directory's name when it holds a Hugging Face `config.json`.
fn stem_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name.starts_with('.') {
        return None;
    }
    if path.is_dir() {
        return path.join("config.json").exists().then(|| name.to_string());
    }
    let stem = name.strip_suffix(".gguf")?;
    // `x-00002-of-00003.gguf` is part of `x-00001-of-00003.gguf`.
    if let Some((head, _of)) = stem.rsplit_once("-of-") {
        if let Some((_, part)) = head.rsplit_once('-') {
            if part.len() == 5 && part.bytes().all(|b| b.is_ascii_digit()) && part != "00001" {
                return None;
            }
        }
    }
    Some(stem.to_string())
}

/// Why the model at `path` cannot be served, when its first bytes say so already.
fn unreadable(path: &Path) -> Option<String> {
    let shown = path.display();
    if path.is_dir() {
        return std::fs::read(path.join("config.json"))
            .err()
            .map(|e| format!("{shown}/config.json: {e}"));
    }
    let mut magic = [0u8; 4];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Err(e) => Some(format!("{shown}: cannot be read: {e}")),
        Ok(()) if &magic != b"GGUF" => Some(format!(
            "{shown}: not a GGUF file (it does not start with `GGUF`)"
        )),
        Ok(()) => None,
    }
}

/// Every model in `dir`, by name. The folder itself must be readable.
pub(super) fn models_dir(dir: &Path) -> anyhow::Result<Vec<Found>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("--models-dir {}: {e}", dir.display()))?;
    let mut out: Vec<Found> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let path = e.path();
            Some(Found::at(stem_of(&path)?, path))
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The pulled catalog: the default model (pulled now when missing, as `ferrox serve` always
/// did), then every other model present in the models folder.
pub(super) fn catalog() -> anyhow::Result<Vec<Found>> {
    let default = super::model::resolve(None)?;
    let mut out = vec![Found::at(DEFAULT_MODEL.to_string(), default.clone())];
    let hub = super::model::hub()?;
    for e in CATALOG.iter().filter(|e| e.name != DEFAULT_MODEL) {
        let path = hub.path_of(e);
        if path.exists() {
            out.push(Found::at(e.name.to_string(), path));
        }
    }
    for path in super::models::downloaded(hub.models_dir())? {
        let known = out.iter().any(|f| f.path == path);
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let catalog_file = CATALOG.iter().any(|e| e.file == file);
        if let (false, false, Some(stem)) = (known, catalog_file, stem_of(&path)) {
            out.push(Found::at(stem, path));
        }
    }
    Ok(out)
}

/// A model named `name` that is not listed yet: a present catalog model, or an entry of
/// `models_dir`. Names that are paths are not looked up (a client picks among the server's
/// models, not among its files).
pub(super) fn discover(name: &str, models_dir: Option<&Path>) -> Option<Found> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return None;
    }
    if let Some(dir) = models_dir {
        for path in [dir.join(format!("{name}.gguf")), dir.join(name)] {
            if path.exists() && stem_of(&path).as_deref() == Some(name) {
                return Some(Found::at(name.to_string(), path));
            }
        }
    }
    let entry = ferrox_hub::lookup(name)?;
    let path = super::model::hub().ok()?.path_of(entry);
    path.exists()
        .then(|| Found::at(entry.name.to_string(), path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_dir_lists_models_by_stem_and_names_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("good.gguf"), b"GGUF\x03\0\0\0").unwrap();
        std::fs::write(p.join("junk.gguf"), b"hello").unwrap();
        std::fs::write(p.join("notes.txt"), b"GGUF").unwrap();
        std::fs::write(p.join("big-00001-of-00002.gguf"), b"GGUF").unwrap();
        std::fs::write(p.join("big-00002-of-00002.gguf"), b"GGUF").unwrap();
        std::fs::create_dir(p.join("encoder")).unwrap();
        std::fs::write(p.join("encoder/config.json"), b"{}").unwrap();
        std::fs::create_dir(p.join("empty")).unwrap();
        let found = models_dir(p).unwrap();
        let names: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["big-00001-of-00002", "encoder", "good", "junk"]);
        assert!(found[2].problem.is_none());
        assert!(found[2].aliases.contains(&"good.gguf".to_string()));
        let junk = found[3].problem.as_deref().unwrap();
        assert!(
            junk.contains("junk.gguf") && junk.contains("not a GGUF"),
            "{junk}"
        );

        assert_eq!(discover("good", Some(p)).unwrap().name, "good");
        assert_eq!(discover("encoder", Some(p)).unwrap().name, "encoder");
        for bad in [
            "notes",
            "../good",
            "/etc/passwd",
            "",
            ".hidden",
            "big-00002-of-00002",
        ] {
            assert!(discover(bad, Some(p)).is_none(), "{bad}");
        }
        let missing = models_dir(&p.join("nope")).unwrap_err().to_string();
        assert!(
            missing.contains("--models-dir") && missing.contains("nope"),
            "{missing}"
        );
    }
}
