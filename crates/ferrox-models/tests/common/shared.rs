//! Test helpers for the repository's Python scripts and JSON fixtures, shared by the
//! ferrox-models tests (`common`) and the ferrox-cli tests (`common::server`, by `#[path]`).

use std::path::Path;

/// The interpreter the tests' Python scripts run under: the repository's `.venv` (where
/// `scripts/test` installs the packages they import) when it exists, else `python3` on PATH.
pub fn python() -> std::process::Command {
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3");
    if venv.exists() {
        std::process::Command::new(venv)
    } else {
        std::process::Command::new("python3")
    }
}

/// A JSON file, parsed (a missing or malformed file panics with its path).
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// An array of non-negative integers (token ids).
pub fn ids(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// An array of numbers, as f64.
pub fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}
