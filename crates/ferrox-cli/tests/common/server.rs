//! Python client scripts against a running `ferrox serve` (started with `super::serve`).

#[path = "../../../ferrox-models/tests/common/shared.rs"]
mod shared;
#[allow(unused_imports)] // each test file uses a part of these
pub use shared::{floats, python, read_json};
#[path = "../../../ferrox-server/tests/common/chunked.rs"]
mod chunked;

/// Runs `script` (under this crate's `tests/`) with python3 and `args`; its stdout as JSON.
pub fn python_json(script: &str, args: &[String]) -> serde_json::Value {
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = python().arg(&path).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed (scripts/test installs the packages it imports into .venv):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{script}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `POST path` with a JSON body to a running server (plain HTTP/1.1, connection closed after);
/// the status and the JSON answer.
pub fn post_json(addr: &str, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let (status, body) = http(addr, "POST", path, &body.to_string());
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, v)
}

/// One HTTP/1.1 request; the status and the (de-chunked) body.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        chunked::dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}
