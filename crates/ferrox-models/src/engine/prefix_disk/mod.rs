//! The engine's prefix cache on disk (`ferrox serve --cache-dir`): every block the RAM tree
//! ([`PrefixCache`](super::PrefixCache)) holds is also a file, so a restarted server starts
//! with the blocks its predecessor computed. The idea is llama-server's `--cache-ram` prompt
//! cache plus its `--slot-save-path` files; the format is ferrox's own ([`format`]): one file
//! per block, named by a hash of the model identity, the cache types and the whole token
//! prefix, carrying that prefix, the block's rows per layer and a checksum.
//!
//! Files are written by a background thread (the engine loop only hands it shared rows), as
//! blocks enter the tree — so a crash loses nothing written and eviction from RAM needs no
//! write — and flushed at shutdown. The directory is bounded by a byte budget, least recently
//! used file first (ancestors count as more recent than their descendants, so a prefix is
//! never left without its parent). At start, files are read back newest first within the RAM
//! budget; a file that fails to read, parse or verify is reported, removed and never loaded.

pub mod format;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ferrox_core::cache::CacheRows;

use format::PrefixHasher;
pub use format::{BlockFile, CacheKey, DiskError};

use super::prefix_block::BLOCK;
use crate::TokenId;

/// Where warnings go (the server's log); the library itself does not log.
pub type Warn = Arc<dyn Fn(String) + Send + Sync>;

/// Largest file read back: far above any model's block (16 positions of every layer).
const MAX_FILE: u64 = 1 << 30;
/// Messages queued for the writer; past this, puts are dropped (a later one re-sends).
const QUEUE: usize = 256;
const EXT: &str = "fxkv";

enum Msg {
    /// A prefix the tree holds (whole blocks) and each block's rows: missing files are
    /// written, present ones marked used.
    Put {
        tokens: Vec<TokenId>,
        rows: Vec<Arc<[CacheRows]>>,
    },
    /// A file was found bad and removed.
    Forget(String),
    Flush(mpsc::Sender<()>),
}

/// The engine side of the writer: cheap to clone, never blocks.
#[derive(Clone)]
pub struct DiskSink {
    tx: SyncSender<Msg>,
}

impl DiskSink {
    pub(crate) fn put(&self, tokens: Vec<TokenId>, rows: Vec<Arc<[CacheRows]>>) {
        // A full queue drops this put: the next insert of the prefix sends it again.
        let _ = self.tx.try_send(Msg::Put { tokens, rows });
    }
}

/// One model's (and cache types') directory of block files and its writer thread.
pub struct PrefixDisk {
    dir: PathBuf,
    key: CacheKey,
    tx: Mutex<SyncSender<Msg>>,
    warn: Warn,
}

impl PrefixDisk {
    /// Opens (creating) `root`'s directory for `key` and starts its writer, which keeps the
    /// directory within `budget` bytes.
    pub fn open(
        root: &Path,
        key: CacheKey,
        budget: u64,
        warn: Warn,
    ) -> Result<PrefixDisk, DiskError> {
        let dir = root.join(key.dir_name());
        fs::create_dir_all(&dir)?;
        let mut writer = Writer {
            dir: dir.clone(),
            key,
            budget,
            files: HashMap::new(),
            total: 0,
            stamp: 0,
            warn: warn.clone(),
        };
        for (name, len, stamp) in list(&dir)? {
            writer.total += len;
            writer.stamp = writer.stamp.max(stamp);
            writer.files.insert(name, File { len, stamp });
        }
        writer.evict();
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("ferrox-prefix-disk".into())
            .spawn(move || writer.run(rx))?;
        Ok(PrefixDisk {
            dir,
            key,
            tx: Mutex::new(tx),
            warn,
        })
    }

    pub fn key(&self) -> CacheKey {
        self.key
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn sink(&self) -> DiskSink {
        DiskSink {
            tx: self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Waits (up to `timeout`) until everything queued so far is on disk; false on timeout.
    pub fn flush(&self, timeout: Duration) -> bool {
        let (ack, done) = mpsc::channel();
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        tx.send(Msg::Flush(ack)).is_ok() && done.recv_timeout(timeout).is_ok()
    }

    /// The intact files, most recently used first, while their sizes fit `budget` bytes,
    /// ordered shortest prefix first (parents before children). Bad files are reported
    /// through the warning hook and removed.
    pub fn load(&self, budget: usize) -> Vec<BlockFile> {
        let mut files = match list(&self.dir) {
            Ok(f) => f,
            Err(e) => {
                (self.warn)(format!("prompt cache {}: {e}", self.dir.display()));
                return Vec::new();
            }
        };
        // Newest first; among equals, shorter files (shorter prefixes) first.
        files.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.cmp(&b.1)));
        let mut used = 0u64;
        let mut out = Vec::new();
        for (name, len, _) in files {
            if used + len > budget as u64 {
                continue;
            }
            let path = self.dir.join(&name);
            match read_block(&path, len, &self.key) {
                Ok(b) => {
                    used += len;
                    out.push(b);
                }
                Err(e) => {
                    (self.warn)(format!(
                        "prompt cache file {} skipped and removed: {e}",
                        path.display()
                    ));
                    let _ = fs::remove_file(&path);
                    let _ = self.tx.lock().map(|tx| tx.send(Msg::Forget(name)));
                }
            }
        }
        out.sort_by_key(|b| b.tokens.len());
        out
    }
}

/// A model file's identity for [`CacheKey::model`]: a hash of its size and of its first,
/// middle and last MiB (the header with every tensor's name, type and offset, and samples of
/// the weights, so a fine-tune with the same header still differs), plus `extra` (what else
/// changes the numbers: the engine's version). Cheap at any model size; a renamed or copied
/// file keeps its cache.
pub fn model_identity(path: &Path, extra: &[u8]) -> std::io::Result<[u8; 32]> {
    use sha2::{Digest, Sha256};
    use std::io::{Read, Seek, SeekFrom};
    const PART: u64 = 1 << 20;
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    h.update(extra);
    let mut buf = Vec::new();
    for at in [
        0,
        (len / 2).saturating_sub(PART / 2),
        len.saturating_sub(PART),
    ] {
        f.seek(SeekFrom::Start(at))?;
        buf.clear();
        f.by_ref().take(PART).read_to_end(&mut buf)?;
        h.update(&buf);
    }
    Ok(h.finalize().into())
}

/// Reads and verifies one file whose listed size was `len`.
fn read_block(path: &Path, len: u64, key: &CacheKey) -> Result<BlockFile, DiskError> {
    if len > MAX_FILE {
        return Err(DiskError::Invalid("file too large"));
    }
    let bytes = fs::read(path)?;
    format::decode(&bytes, key)
}

/// The block files of `dir`: name, size and last use (nanoseconds since the epoch).
fn list(dir: &Path) -> std::io::Result<Vec<(String, u64, u128)>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(EXT) || name.starts_with('.') {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        out.push((name, meta.len(), nanos(meta.modified().ok())));
    }
    Ok(out)
}

fn nanos(t: Option<SystemTime>) -> u128 {
    t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

struct File {
    len: u64,
    stamp: u128,
}

/// The writer thread's state: the directory's files and their last use.
struct Writer {
    dir: PathBuf,
    key: CacheKey,
    budget: u64,
    files: HashMap<String, File>,
    total: u64,
    stamp: u128,
    warn: Warn,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        for msg in rx {
            match msg {
                Msg::Put { tokens, rows } => self.put(&tokens, &rows),
                Msg::Forget(name) => {
                    if let Some(f) = self.files.remove(&name) {
                        self.total -= f.len;
                    }
                }
                Msg::Flush(ack) => {
                    let _ = ack.send(());
                }
            }
        }
    }

    /// A later stamp than any so far, close to the clock (so restarts keep the order).
    fn next_stamp(&mut self) -> u128 {
        self.stamp = (self.stamp + 1).max(nanos(Some(SystemTime::now())));
        self.stamp
    }

    fn put(&mut self, tokens: &[TokenId], rows: &[Arc<[CacheRows]>]) {
        let mut h = PrefixHasher::new(&self.key);
        let names: Vec<String> = tokens.chunks_exact(BLOCK).map(|b| h.next(b)).collect();
        // Deepest first, so every ancestor ends up more recent than its descendants.
        for (i, name) in names.iter().enumerate().rev() {
            let stamp = self.next_stamp();
            let path = self.dir.join(name);
            if let Some(f) = self.files.get_mut(name) {
                f.stamp = stamp;
                // The file's time carries its last use over a restart.
                let _ = fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                continue;
            }
            let Some(r) = rows.get(i) else { continue };
            let bytes = format::encode(&self.key, &tokens[..(i + 1) * BLOCK], r);
            let tmp = self.dir.join(format!(".{name}.tmp"));
            // Written aside then renamed: a reader never sees half a file.
            match fs::write(&tmp, &bytes).and_then(|()| fs::rename(&tmp, &path)) {
                Ok(()) => {
                    self.total += bytes.len() as u64;
                    let len = bytes.len() as u64;
                    self.files.insert(name.clone(), File { len, stamp });
                }
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    (self.warn)(format!("prompt cache: writing {}: {e}", path.display()));
                    return;
                }
            }
        }
        self.evict();
    }

    /// Removes least recently used files until the directory fits its budget.
    fn evict(&mut self) {
        while self.total > self.budget {
            let Some(name) = self
                .files
                .iter()
                .min_by_key(|(_, f)| f.stamp)
                .map(|(n, _)| n.clone())
            else {
                return;
            };
            let f = self.files.remove(&name).expect("listed");
            self.total -= f.len;
            let _ = fs::remove_file(self.dir.join(&name));
        }
    }
}

#[cfg(test)]
mod tests;
