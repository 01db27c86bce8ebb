//! File helpers of the models directory: the sha256 sidecar line, atomic writes, removal that
//! ignores what is already gone, and sha256 (FIPS 180-4) of a file.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::{io_err, HubError};

pub(crate) fn sidecar_line(sha256: &str, meta: &fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{sha256} {} {mtime}", meta.len())
}

pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<(), HubError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, data).map_err(io_err(format!("write {}", tmp.display())))?;
    fs::rename(&tmp, path).map_err(io_err(format!("rename {}", tmp.display())))
}

pub(crate) fn remove_if_exists(p: &Path) -> Result<(), HubError> {
    match fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err(format!("remove {}", p.display()))(e))
        }
        _ => Ok(()),
    }
}

pub(crate) fn remove_dir_if_exists(p: &Path) -> Result<(), HubError> {
    match fs::remove_dir_all(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err(format!("remove {}", p.display()))(e))
        }
        _ => Ok(()),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = File::open(path).map_err(io_err(format!("open {}", path.display())))?;
    let mut hasher = Sha256::new();
    io::copy(&mut f, &mut hasher).map_err(io_err(format!("read {}", path.display())))?;
    Ok(hex(&hasher.finalize()))
}
