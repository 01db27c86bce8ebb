//! Hostile GGUF files (`common/crafted.rs`: a valid tiny model with one value changed) are
//! refused at load with a `LoadError` naming the key, never a panic or a huge allocation; and
//! a float key stored as an integer means that number.

#[path = "common/crafted.rs"]
mod crafted;

use ferrox_format::gguf::{to_bytes, GgufFile, MetaValue};
use ferrox_models::decoder::Decoder;
use ferrox_models::validate::check_tokenizer;
use ferrox_models::weights::LoadError;
use ferrox_tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `bytes` in a file of their own (removed when dropped).
struct TempModel(PathBuf);

impl TempModel {
    fn new(tag: &str, bytes: &[u8]) -> TempModel {
        let name = format!("ferrox-crafted-{}-{tag}.gguf", std::process::id());
        let path = std::env::temp_dir().join(name.replace([' ', '/', '^', '>', '(', ')'], "_"));
        std::fs::write(&path, bytes).unwrap();
        TempModel(path)
    }
}

impl Drop for TempModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Loads the decoder and its tokenizer as the CLI does.
fn load(path: &Path) -> Result<Decoder, LoadError> {
    let dec = Decoder::load(path)?;
    let tok = Tokenizer::from_gguf(dec.gguf.as_ref().expect("a GGUF model")).expect("tokenizer");
    check_tokenizer(&dec, &tok)?;
    Ok(dec)
}

#[test]
fn every_crafted_file_is_refused_naming_its_key() {
    for c in crafted::cases(manifest()) {
        let f = TempModel::new(c.name, &c.bytes);
        match load(&f.0) {
            Ok(_) => panic!("{}: loaded", c.name),
            Err(e) => {
                let named = match &e {
                    LoadError::Value { key, .. } => key.clone(),
                    LoadError::Tensor { name, .. } => name.clone(),
                    other => panic!("{}: not a named refusal: {other:?}", c.name),
                };
                assert_eq!(named, c.key, "{}: {e}", c.name);
                eprintln!("{}: {e}", c.name);
            }
        }
    }
}

#[test]
fn a_float_key_stored_as_an_integer_means_that_number() {
    let base = crafted::tiny_gguf_path(manifest(), "llama");
    let f = GgufFile::open(&base).unwrap();
    let mut meta = f.metadata().to_vec();
    let at = meta
        .iter()
        .position(|(k, _)| k == "llama.rope.freq_base")
        .unwrap();
    assert_eq!(meta[at].1, MetaValue::F32(10_000.0));
    meta[at].1 = MetaValue::U32(10_000);
    let file = TempModel::new("int-theta", &to_bytes(&meta, &f.tensors_out()));
    let (a, b) = (load(&base).unwrap(), load(&file.0).unwrap());
    assert_eq!(b.config.rope, a.config.rope);
    let ids = [5, 9, 200, 3];
    let (mut ca, mut cb) = (a.new_caches(), b.new_caches());
    assert_eq!(
        a.forward_batch(&ids, 0, &mut ca),
        b.forward_batch(&ids, 0, &mut cb)
    );

    // Another value than the default (10000), so a silently defaulted key would show.
    meta[at].1 = MetaValue::I64(500_000);
    let file = TempModel::new("int-theta-2", &to_bytes(&meta, &f.tensors_out()));
    assert_eq!(load(&file.0).unwrap().config.rope.theta, 500_000.0);
}
