//! llama-server's slot persistence (tools/server/README.md, "POST /slots/{id_slot}?action=
//! save", "restore", "erase"): with `--slot-save-path DIR`, an idle slot's tokens and keys
//! and values go to `DIR/<filename>` and come back from it, so a script can park a long
//! prompt's state and resume it later. Answers as llama-server's: `id_slot, filename,
//! n_saved, n_written, timings.save_ms` for a save, `n_restored, n_read, timings.restore_ms`
//! for a restore, `n_erased` for an erase. A file name with a path separator or `..` is
//! refused; a file that is not this model's slot file is a 400 naming why. Without a save
//! path the routes answer 501, as llama-server does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};

use super::error::{check_auth, parse_body};
use super::{ApiError, Shared};
use crate::backend::{SlotAction, SlotDone, SlotError, SlotTask};

/// Largest slot file read back (a long context of a large model stays far below).
const MAX_FILE: u64 = 4 << 30;

#[derive(serde::Deserialize)]
struct SlotBody {
    filename: String,
}

/// Whether `name` may name a file directly inside the save path: no separators, no `..`, no
/// control characters, no surrounding spaces, not empty or over 255 bytes.
pub fn valid_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && !name.contains("..")
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
        && name.trim() == name
}

pub(super) async fn action(
    State(s): State<Shared>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    check_auth(&s, &headers)?;
    let Some(dir) = s.options.slot_save_path.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support slots action. Start it with `--slot-save-path`",
        ));
    };
    let slot: usize = id
        .parse()
        .map_err(|_| ApiError::bad(format!("Invalid slot ID `{id}`")))?;
    match q.get("action").map(String::as_str) {
        Some("save") => save(&s, slot, &dir, &file_of(&headers, &body)?).await,
        Some("restore") => restore(&s, slot, &dir, &file_of(&headers, &body)?).await,
        Some("erase") => {
            let done = run(&s, slot, SlotAction::Erase).await?;
            Ok(Json(json!({"id_slot": slot, "n_erased": done.tokens})))
        }
        other => Err(ApiError::bad(format!(
            "Invalid action `{}`: expected save, restore or erase",
            other.unwrap_or("")
        ))),
    }
}

fn file_of(headers: &HeaderMap, body: &Bytes) -> Result<String, ApiError> {
    let b: SlotBody = parse_body(headers, body)?;
    if !valid_filename(&b.filename) {
        return Err(ApiError::bad(format!(
            "Invalid filename `{}`: a plain file name inside the slot save path (no path \
             separators, no `..`)",
            b.filename
        ))
        .param("filename"));
    }
    Ok(b.filename)
}

/// Runs `action` on the engine thread.
async fn run(s: &Shared, slot: usize, action: SlotAction) -> Result<SlotDone, ApiError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let task = SlotTask {
        slot,
        action,
        reply,
    };
    let busy = || ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is busy");
    s.scheduler.slot_action(task).map_err(|_| busy())?;
    match answer.await.map_err(|_| busy())? {
        Ok(done) => Ok(done),
        Err(SlotError::Invalid(m)) => Err(ApiError::bad(m)),
        Err(SlotError::Busy(m)) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m)),
        Err(SlotError::Unsupported(m)) => Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, m)),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let failed = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e);
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| failed(e.to_string()))
}

async fn save(s: &Shared, slot: usize, dir: &Path, name: &str) -> Result<Json<Value>, ApiError> {
    let t = Instant::now();
    let done = run(s, slot, SlotAction::Save).await?;
    let (path, written) = (dir.join(name), done.bytes.len());
    blocking(move || write_new(&path, &done.bytes)).await?;
    Ok(Json(json!({
        "id_slot": slot, "filename": name, "n_saved": done.tokens, "n_written": written,
        "timings": {"save_ms": t.elapsed().as_secs_f64() * 1e3},
    })))
}

/// Writes `path` whole or not at all (a temporary file renamed over it).
fn write_new(path: &PathBuf, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("partial~");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

async fn restore(s: &Shared, slot: usize, dir: &Path, name: &str) -> Result<Json<Value>, ApiError> {
    let t = Instant::now();
    let path = dir.join(name);
    let shown = name.to_string();
    let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let meta = std::fs::metadata(&path).map_err(|e| e.to_string())?;
        if meta.len() > MAX_FILE {
            return Err(format!("{} bytes is too large for a slot file", meta.len()));
        }
        std::fs::read(&path).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError::bad(format!("cannot read slot file `{shown}`: {e}")))?;
    let read = bytes.len();
    let done = run(s, slot, SlotAction::Restore(bytes))
        .await
        .map_err(|e| e.prefix(&format!("slot file `{name}`: ")))?;
    Ok(Json(json!({
        "id_slot": slot, "filename": name, "n_restored": done.tokens, "n_read": read,
        "timings": {"restore_ms": t.elapsed().as_secs_f64() * 1e3},
    })))
}

#[cfg(test)]
mod tests {
    use super::valid_filename;

    #[test]
    fn file_names_stay_inside_the_save_path() {
        for ok in ["x.bin", "slot 1.bin", "a.b.c", "ünïcode"] {
            assert!(valid_filename(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "/etc/passwd",
            "x..y",
            " x",
            "a\nb",
        ] {
            assert!(!valid_filename(bad), "{bad:?}");
        }
        assert!(!valid_filename(&"a".repeat(256)));
    }
}
