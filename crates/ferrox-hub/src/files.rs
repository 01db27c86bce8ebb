//! File helpers of the models directory: the size check, the sha256 sidecar line, atomic
//! writes, removal that ignores what is already gone, and sha256 (FIPS 180-4) of a file.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::{io_err, HubError, Status};

/// A model file's metadata when it is there with `bytes` bytes; otherwise the status that
/// says so (missing, or corrupt naming both sizes).
pub(crate) fn sized(path: &Path, bytes: u64) -> Result<Result<fs::Metadata, Status>, HubError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(Status::Missing)),
        Err(e) => return Err(io_err(format!("stat {}", path.display()))(e)),
    };
    if meta.len() != bytes {
        let why = format!("size {} bytes, expected {bytes}", meta.len());
        return Ok(Err(Status::Corrupt(why)));
    }
    Ok(Ok(meta))
}

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
    sha256_file_read(path, |_| ())
}

/// [`sha256_file`], telling `read` the bytes hashed so far after each 1 MiB.
pub(crate) fn sha256_file_read(path: &Path, mut read: impl FnMut(u64)) -> Result<String, HubError> {
    let mut f = File::open(path).map_err(io_err(format!("open {}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io_err(format!("read {}", path.display())))?;
        if n == 0 {
            return Ok(hex(&hasher.finalize()));
        }
        hasher.update(&buf[..n]);
        done += n as u64;
        read(done);
    }
}
