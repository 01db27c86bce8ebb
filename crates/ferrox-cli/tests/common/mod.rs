//! Running the `ferrox` binary from the CLI tests.
// Each test file is its own crate and uses a part of these.
#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod server;

/// The catalog model used when none is named.
pub const DEFAULT_MODEL: &str = ferrox_hub::DEFAULT_MODEL;

/// A catalog model's file, pulled by the hub when missing (never skipped).
pub fn model(name: &str) -> PathBuf {
    ferrox_hub::ensure_model(name).unwrap_or_else(|e| panic!("model {name}: {e}"))
}

/// The binary under test, for runs that need an environment, a pipe or a spawned child.
pub fn command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrox"))
}

/// `ferrox ARGS` run to the end whatever its status, stdin closed, stdout and stderr captured.
pub fn ferrox<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    command().args(args).output().expect("ferrox starts")
}

/// The output of a finished run of a hand-built [`command`], asserted successful.
pub fn succeeded(out: Output) -> Output {
    check(out, "ferrox")
}

/// `ferrox ARGS`, asserted successful (with the arguments and stderr in the message).
pub fn ferrox_checked<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    check(ferrox(&args), &format!("ferrox {args:?}"))
}

/// The stdout of a successful `ferrox ARGS`.
pub fn ferrox_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    stdout(&ferrox_checked(args))
}

/// `ferrox run -m MODEL --temp 0 -n N PROMPT`'s text (its stdout without the final newline).
pub fn greedy_run(model: &str, prompt: &str, n: usize) -> String {
    let n = n.to_string();
    let text = ferrox_ok(["run", "-m", model, "--temp", "0", "-n", &n, prompt]);
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

/// `out`, asserted successful (its stdout and stderr in the message, under `what`).
pub fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The output of `child` (its stdout and stderr piped) once it exits; after `limit` it is
/// killed and the test fails with `hung` (a hang fails the test, not the suite).
pub fn output_within(mut child: Child, limit: Duration, hung: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{hung}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

/// Largest resident set of any child this process has waited for, in bytes.
pub fn children_max_rss() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) },
        0
    );
    ru.ru_maxrss as u64 * 1024
}

/// A running `ferrox serve`, killed when dropped.
pub struct Server(Child);

impl Server {
    /// Owns a spawned server process (killed when dropped).
    pub fn from_child(child: Child) -> Server {
        Server(child)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// The process, to wait for its exit.
    #[allow(dead_code)]
    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ferrox serve -m MODEL --port 0 ARGS...` once it listens, and its address.
pub fn serve(model: &str, args: &[&str]) -> (Server, String) {
    let mut cmd = command();
    cmd.args(["serve", "-m", model, "--port", "0"]).args(args);
    serve_with(cmd)
}

/// [`serve`] of catalog model `name` (pulled when missing).
pub fn serve_model(name: &str, args: &[&str]) -> (Server, String) {
    serve(model(name).to_str().unwrap(), args)
}

/// Spawns `cmd` (a `serve` on port 0, perhaps under a launcher) and waits until it listens.
pub fn serve_with(cmd: Command) -> (Server, String) {
    let (server, addr, _) = serve_logged(cmd);
    (server, addr)
}

/// [`serve_with`], and the stderr lines printed before the server listened.
pub fn serve_logged(mut cmd: Command) -> (Server, String, Vec<String>) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let server = Server(child);
    let mut before = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("server exited before listening: {before:#?}"))
            .unwrap();
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        before.push(line);
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (server, addr, before)
}

/// A float32 `.npy` file as written by `ferrox logits`: its header and data.
#[allow(dead_code)]
pub fn read_npy(path: &Path) -> (String, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0, "header must be 64-byte aligned");
    let header = String::from_utf8(b[10..10 + hlen].to_vec()).unwrap();
    let data = b[10 + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (header, data)
}
