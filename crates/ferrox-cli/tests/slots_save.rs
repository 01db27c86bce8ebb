//! llama-server's `POST /slots/{id}?action=save|restore|erase` with `--slot-save-path` on the
//! real engine: a saved slot restored after an erase serves its prompt from the cache with the
//! same output; a corrupted or foreign file is a 400 naming why, and the server goes on.

mod common;
use common::server::post_json;
use serde_json::{json, Value};

const MODEL: &str = "gemma3:270m";
const PROMPT: &str = "A slot keeps the keys and values of its prompt, so the next request that \
                      starts with the same words does not compute them again. Continue:";

fn complete(addr: &str) -> (String, u64) {
    let body = json!({"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0});
    let (status, v) = post_json(addr, "/v1/completions", &body);
    assert_eq!(status, 200, "{v}");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    (
        v["choices"][0]["text"].as_str().unwrap().to_string(),
        cached.unwrap(),
    )
}

fn slot(addr: &str, action: &str, file: &str) -> (u16, Value) {
    let path = format!("/slots/0?action={action}");
    post_json(addr, &path, &json!({"filename": file}))
}

#[test]
fn a_saved_slot_restores_its_prompt_and_bad_files_are_refused() {
    common::model(MODEL);
    let dir = tempfile::tempdir().unwrap();
    let save_path = dir.path().to_str().unwrap();
    // No prefix cache: what is cached comes from the slot alone.
    let args = [
        "--parallel",
        "1",
        "--cache-ram",
        "0",
        "--slot-save-path",
        save_path,
    ];
    let (_server, addr) = common::serve(MODEL, &args);
    let (text, _) = complete(&addr);

    let (status, saved) = slot(&addr, "save", "s.bin");
    assert_eq!(status, 200, "{saved}");
    let n = saved["n_saved"].as_u64().unwrap();
    assert!(n > 20, "{saved}");
    assert_eq!(saved["id_slot"], 0);
    assert_eq!(saved["filename"], "s.bin");
    let bytes = std::fs::read(dir.path().join("s.bin")).unwrap();
    assert_eq!(saved["n_written"], bytes.len());
    assert!(saved["timings"]["save_ms"].as_f64().is_some(), "{saved}");

    let (status, erased) = slot(&addr, "erase", "");
    assert_eq!((status, erased["n_erased"].as_u64()), (200, Some(n)));
    assert_eq!(
        complete(&addr),
        (text.clone(), 0),
        "an erased slot holds nothing"
    );
    slot(&addr, "erase", "");
    let (status, restored) = slot(&addr, "restore", "s.bin");
    assert_eq!(status, 200, "{restored}");
    assert_eq!(restored["n_restored"].as_u64(), Some(n));
    assert_eq!(restored["n_read"], bytes.len());
    let (again, cached) = complete(&addr);
    assert_eq!(again, text);
    assert!(cached > 20, "restored slot served {cached} cached tokens");

    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x40;
    std::fs::write(dir.path().join("bad.bin"), flipped).unwrap();
    std::fs::write(dir.path().join("junk.bin"), b"not a slot file").unwrap();
    for (file, why) in [
        ("bad.bin", "checksum"),
        ("junk.bin", "too short"),
        ("../s.bin", "Invalid filename"),
    ] {
        let (status, v) = slot(&addr, "restore", file);
        assert_eq!(status, 400, "{file}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{file}: {msg}");
    }
    let (status, v) = post_json(&addr, "/slots/7?action=save", &json!({"filename": "x.bin"}));
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("no slot 7"), "{msg}");
    let (after, kept) = complete(&addr);
    assert_eq!(after, text, "serving goes on");
    assert_eq!(kept, cached, "a refused file leaves the slot as it was");
}
