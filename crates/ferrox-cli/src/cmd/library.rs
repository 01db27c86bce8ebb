//! The server's model store (Ollama's `/api/tags`, `/api/show`, `/api/pull`) over the models
//! folder and the catalog — the same files `ferrox list`, `show` and `pull` use.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use ferrox_hub::{Hub, ModelRef, PullProgress};
use ferrox_server::{Library, ModelCard, ModelEntry, PullStatus};

use super::models::{card, display_name, downloaded};

pub struct HubLibrary {
    pub hub: Hub,
}

impl HubLibrary {
    /// The file a name stands for, without downloading anything.
    fn path(&self, name: &str) -> Result<PathBuf, String> {
        match ModelRef::parse(name).map_err(|e| e.to_string())? {
            ModelRef::Catalog(e) => {
                let p = self.hub.path_of(e);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(format!("model '{name}' not found; pull it first"))
                }
            }
            ModelRef::Path(p) if p.is_file() => Ok(p),
            _ => {
                // A file name in the models folder (as `/api/tags` lists unknown files).
                let p = self.hub.models_dir().join(name);
                if p.is_file() && p.parent() == Some(self.hub.models_dir()) {
                    Ok(p)
                } else {
                    Err(format!("model '{name}' not found"))
                }
            }
        }
    }
}

impl Library for HubLibrary {
    fn list(&self) -> Result<Vec<ModelEntry>, String> {
        let files = downloaded(self.hub.models_dir()).map_err(|e| e.to_string())?;
        Ok(files
            .iter()
            .map(|path| {
                let meta = std::fs::metadata(path).ok();
                let file = path.file_name().unwrap_or_default().to_string_lossy();
                let entry = ferrox_hub::CATALOG.iter().find(|e| e.file == file);
                ModelEntry {
                    name: display_name(&file),
                    size: meta.as_ref().map_or(0, |m| m.len()),
                    modified: meta
                        .and_then(|m| m.modified().ok())
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_secs()),
                    digest: entry.map(|e| e.sha256.to_string()),
                    card: card(path).ok(),
                }
            })
            .collect())
    }

    fn card(&self, name: &str) -> Result<ModelCard, String> {
        card(&self.path(name)?).map_err(|e| format!("{e:#}"))
    }

    fn pull(&self, name: &str, progress: &(dyn Fn(PullStatus) + Sync)) -> Result<(), String> {
        let relay = Relay {
            to: progress,
            last: AtomicU64::new(u64::MAX),
        };
        self.hub
            .pull(name, &relay)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Hub progress as `PullStatus`es, at most one per percent of a stage.
struct Relay<'a> {
    to: &'a (dyn Fn(PullStatus) + Sync),
    /// The last (stage, percent) sent, packed.
    last: AtomicU64,
}

impl Relay<'_> {
    fn bytes(&self, stage: &'static str, code: u64, done: u64, total: u64) {
        let pct = (done * 100).checked_div(total).unwrap_or(0);
        if self.last.swap(code << 8 | pct, Ordering::Relaxed) != code << 8 | pct {
            (self.to)(PullStatus::Bytes { stage, done, total });
        }
    }
}

impl PullProgress for Relay<'_> {
    fn message(&self, msg: &str) {
        (self.to)(PullStatus::Message(msg.to_string()));
    }
    fn download(&self, done: u64, total: u64) {
        self.bytes("downloading", 1, done, total);
    }
    fn assemble(&self, done: u64, total: u64) {
        self.bytes("assembling", 2, done, total);
    }
    fn verify(&self, done: u64, total: u64) {
        self.bytes("verifying sha256 digest", 3, done, total);
    }
}
