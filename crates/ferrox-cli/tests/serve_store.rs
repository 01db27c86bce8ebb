//! Where a several-model `ferrox serve` finds its models (issue 40): `--models-dir` serves
//! each file by its stem (and one added later), and names an unreadable one without
//! stopping; without -m the pulled catalog is served, the default model ready at start, and a
//! model `/api/pull`ed later is listed and served without a restart.

mod common;
use common::server::{http, post_json};
use serde_json::{json, Value};
use std::path::Path;

const GEMMA: &str = "gemma3:270m";

fn ids(addr: &str, path: &str, list: &str, key: &str) -> Vec<String> {
    let (status, body) = http(addr, "GET", path, "");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let items = v[list].as_array().unwrap();
    items
        .iter()
        .map(|m| m[key].as_str().unwrap().to_string())
        .collect()
}

fn complete(addr: &str, model: &str) -> (u16, Value) {
    let body = json!({"model": model, "prompt": "The sea is", "max_tokens": 4, "temperature": 0});
    post_json(addr, "/v1/completions", &body)
}

/// `ferrox serve` on a free port, one small slot per model.
fn serve_cmd() -> std::process::Command {
    let mut cmd = common::command();
    cmd.args(["serve", "--port", "0", "--parallel", "1", "-c", "512"]);
    cmd
}

fn link(from: &Path, to: &Path) {
    std::os::unix::fs::symlink(from, to).unwrap();
}

#[test]
fn a_models_dir_serves_files_by_stem_and_names_a_bad_one() {
    let gemma = common::model(GEMMA);
    let dir = tempfile::tempdir().unwrap();
    link(&gemma, &dir.path().join("tiny.gguf"));
    std::fs::write(dir.path().join("junk.gguf"), "not a model").unwrap();
    let mut cmd = serve_cmd();
    cmd.arg("--models-dir").arg(dir.path());
    let (_server, addr, log) = common::serve_logged(cmd);
    let log = log.join("\n");
    assert!(
        log.contains("junk.gguf") && log.contains("not a GGUF"),
        "{log}"
    );
    assert_eq!(ids(&addr, "/v1/models", "data", "id"), ["junk", "tiny"]);

    let (status, v) = complete(&addr, "tiny");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "tiny");
    let (status, v) = complete(&addr, "junk");
    assert_eq!(status, 500, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("junk.gguf"), "{msg}");
    assert_eq!(complete(&addr, "tiny").0, 200, "the others still serve");

    // A file put there later is served by its name; names that are paths are not looked up.
    link(&gemma, &dir.path().join("late.gguf"));
    let (status, v) = complete(&addr, "late");
    assert_eq!(status, 200, "{v}");
    for outside in ["../tiny", gemma.to_str().unwrap()] {
        assert_eq!(complete(&addr, outside).0, 404, "{outside}");
    }
}

#[test]
fn without_m_the_pulled_catalog_is_served_and_a_pull_adds_a_model() {
    let qwen = common::model(common::DEFAULT_MODEL);
    let gemma = common::model(GEMMA);
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    std::fs::create_dir(&models).unwrap();
    link(&qwen, &models.join(qwen.file_name().unwrap()));
    let mut cmd = serve_cmd();
    cmd.env("FERROX_HOME", home.path());
    let (_server, addr, _) = common::serve_logged(cmd);
    assert_eq!(
        ids(&addr, "/v1/models", "data", "id"),
        [common::DEFAULT_MODEL]
    );
    // As before: the default model is loaded at start.
    assert_eq!(
        ids(&addr, "/api/ps", "models", "name"),
        [common::DEFAULT_MODEL]
    );
    let (status, v) = complete(&addr, common::DEFAULT_MODEL);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], common::DEFAULT_MODEL);

    // The download itself is tests/pull.rs's: here the file arrives, then the pull verifies it.
    link(&gemma, &models.join(gemma.file_name().unwrap()));
    let (status, v) = post_json(
        &addr,
        "/api/pull",
        &json!({"model": GEMMA, "stream": false}),
    );
    assert_eq!((status, &v), (200, &json!({"status": "success"})));
    let names = ids(&addr, "/v1/models", "data", "id");
    assert_eq!(names, [common::DEFAULT_MODEL, GEMMA]);
    let (status, v) = complete(&addr, GEMMA);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], GEMMA);
}
