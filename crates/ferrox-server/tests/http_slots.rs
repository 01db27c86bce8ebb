//! llama-server's `/slots/{id}?action=...` on the fake engine: without a save path a 501 with
//! llama-server's message; with one, bad slot ids, actions and file names are 400s naming
//! the problem, an engine that keeps no slots answers 501, and nothing is written outside the
//! save path. (The real engine's save and restore: ferrox-cli's tests/slots_save.rs.)

mod common;

use common::{post, server_with};
use ferrox_server::Options;
use serde_json::json;

#[tokio::test]
async fn without_a_save_path_slot_actions_are_not_supported() {
    let addr = server_with(1, 4, Options::default()).await;
    let r = post(&addr, "/slots/0?action=save", json!({"filename": "x.bin"})).await;
    assert_eq!(r.status, 501, "{}", r.body);
    assert!(
        r.body.contains("This server does not support slots action"),
        "{}",
        r.body
    );
    // llama-server's error type for a feature the server was not started with.
    assert_eq!(r.json()["error"]["type"], "not_supported_error");
}

#[tokio::test]
async fn bad_requests_name_their_problem() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        slot_save_path: Some(dir.path().to_path_buf()),
        ..Options::default()
    };
    let addr = server_with(1, 4, options).await;
    // (path, the body's `filename`, what the 400 names).
    let cases = [
        ("/slots/x?action=save", "a.bin", "Invalid slot ID"),
        ("/slots/0?action=fly", "a.bin", "Invalid action"),
        ("/slots/0", "a.bin", "Invalid action"),
        ("/slots/0?action=save", "../a.bin", "Invalid filename"),
        ("/slots/0?action=save", "a/b.bin", "Invalid filename"),
        ("/slots/0?action=restore", "..", "Invalid filename"),
        ("/slots/0?action=restore", "none.bin", "none.bin"),
    ]
    .map(|(path, file, needle)| (path, json!({"filename": file}), needle));
    // A body without `filename`.
    let unnamed = ("/slots/0?action=save", json!({"file": "a.bin"}), "filename");
    for (path, body, needle) in cases.into_iter().chain([unnamed]) {
        let r = post(&addr, path, body.clone()).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.body);
        assert!(r.body.contains(needle), "{path} {body}: {}", r.body);
    }
    // The fake engine keeps no slots it could save.
    let r = post(&addr, "/slots/0?action=save", json!({"filename": "a.bin"})).await;
    assert_eq!(r.status, 501, "{}", r.body);
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(written.is_empty(), "{written:?}");
}
