//! A `ferrox serve` child process for the client tests: started on a free port, killed on drop.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ferrox serve -m MODEL --port 0 ARGS…`; returns it with its `host:port` once it listens.
pub fn start(model: &str, args: &[&str]) -> (Server, String) {
    let mut child = super::command()
        .args(["serve", "-m", model, "--port", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let server = Server(child);
    let addr = loop {
        let line = lines
            .next()
            .expect("server exited before listening")
            .unwrap();
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (server, addr)
}

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
        "{script} failed (.ci/run installs its packages with pip):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{script}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}
