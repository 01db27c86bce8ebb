//! Python client scripts against a running `ferrox serve` (started with `super::serve`).

/// Runs `script` (under this crate's `tests/`) with python3 and `args`; its stdout as JSON.
pub fn python_json(script: &str, args: &[String]) -> serde_json::Value {
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed (.ci/run installs what it needs):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{script}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}
