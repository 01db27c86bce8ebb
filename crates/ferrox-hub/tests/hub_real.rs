//! `ensure_model` on the real models directory: both small catalog models end up present and
//! verified (pulled from the registry if missing), and asking again is instant.

use std::time::{Duration, Instant};

use ferrox_hub::{ensure_model, lookup, Hub, NoProgress, Status};

#[test]
fn ensure_model_gives_verified_small_models() {
    for name in ["gemma3:270m", "qwen2.5-coder:0.5b-instruct"] {
        let path = ensure_model(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let entry = lookup(name).unwrap();
        assert_eq!(path.file_name().unwrap(), entry.file);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), entry.bytes);
        let t = Instant::now();
        assert_eq!(ensure_model(name).unwrap(), path);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let hub = Hub::new(path.parent().unwrap());
        assert_eq!(hub.status(entry, &NoProgress).unwrap(), Status::Verified);
    }
}
