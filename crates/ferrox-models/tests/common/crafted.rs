//! Hostile model files: a valid tiny GGUF (`gguf-tiny/llama.gguf`, `mixtral.gguf`) with one
//! value changed. Each must be refused at load with an error naming the key (or tensor) it
//! came from. Shared by the library test (`ferrox-models/tests/crafted_gguf.rs`) and the CLI
//! test (`ferrox-cli/tests/crafted_models.rs`), which includes this file by path.
#![allow(dead_code)]

use ferrox_core::quant::GgmlType;
use ferrox_format::gguf::{to_bytes, GgufFile, MetaArray, MetaValue, TensorOut};
use std::path::{Path, PathBuf};

/// One crafted file: what was changed, the key its refusal must name, the file's bytes.
pub struct Crafted {
    pub name: &'static str,
    pub key: String,
    pub bytes: Vec<u8>,
}

/// `gguf-tiny/{name}.gguf` under the models crate's fixtures, from `manifest` (any crate's
/// `CARGO_MANIFEST_DIR`).
pub fn tiny_gguf_path(manifest: &Path, name: &str) -> PathBuf {
    manifest
        .join("../ferrox-models/tests/fixtures/gguf-tiny")
        .join(format!("{name}.gguf"))
}

struct Model {
    meta: Vec<(String, MetaValue)>,
    tensors: Vec<TensorOut>,
}

impl Model {
    fn open(path: &Path) -> Model {
        let f = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Model {
            meta: f.metadata().to_vec(),
            tensors: f.tensors_out(),
        }
    }

    fn set(mut self, key: &str, v: MetaValue) -> Self {
        match self.meta.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.meta.push((key.to_string(), v)),
        }
        self
    }

    fn tensor(mut self, name: &str, edit: impl FnOnce(&mut TensorOut)) -> Self {
        let t = self.tensors.iter_mut().find(|t| t.name == name);
        edit(t.unwrap_or_else(|| panic!("no tensor {name}")));
        self
    }

    fn drop(mut self, name: &str) -> Self {
        self.tensors.retain(|t| t.name != name);
        self
    }

    /// The file with `llama.{key}` set to `v`, refused by that key.
    fn bad_key(self, key: &str, v: MetaValue, name: &'static str) -> Crafted {
        let key = format!("llama.{key}");
        self.set(&key, v).crafted(name, &key)
    }
    fn crafted(self, name: &'static str, key: &str) -> Crafted {
        Crafted {
            name,
            key: key.to_string(),
            bytes: to_bytes(&self.meta, &self.tensors),
        }
    }
}

/// The tokenizer arrays with `extra` more tokens than the embedding has rows.
fn grow_vocab(m: Model, extra: usize) -> Model {
    let get = |k: &str| match m.meta.iter().find(|(key, _)| key == k) {
        Some((_, MetaValue::Array(a))) => a.clone(),
        _ => panic!("no array {k}"),
    };
    let (MetaArray::String(toks), MetaArray::F32(mut scores), MetaArray::I32(mut types)) = (
        get("tokenizer.ggml.tokens"),
        get("tokenizer.ggml.scores"),
        get("tokenizer.ggml.token_type"),
    ) else {
        panic!("unexpected tokenizer array types");
    };
    let added: Vec<String> = (0..extra).map(|i| format!("<extra_{i}>")).collect();
    let toks = toks
        .iter()
        .chain(added.iter().map(String::as_str))
        .collect();
    scores.extend(std::iter::repeat_n(0.0, extra));
    types.extend(std::iter::repeat_n(1, extra));
    m.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(toks)),
    )
    .set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(scores)),
    )
    .set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    )
}

/// Every crafted file, from the fixtures found through `manifest`.
pub fn cases(manifest: &Path) -> Vec<Crafted> {
    let llama = || Model::open(&tiny_gguf_path(manifest, "llama"));
    let mixtral = || Model::open(&tiny_gguf_path(manifest, "mixtral"));
    let u32v = MetaValue::U32;
    vec![
        llama().bad_key("attention.head_count", u32v(0), "head_count = 0"),
        llama().bad_key("block_count", MetaValue::U64(1 << 40), "block_count = 2^40"),
        llama().bad_key("attention.head_count_kv", u32v(3), "3 KV heads for 4 heads"),
        llama().bad_key(
            "attention.head_count_kv",
            MetaValue::I32(-1),
            "negative KV heads",
        ),
        llama().bad_key(
            "rope.dimension_count",
            u32v(32),
            "rope dim 32 > head dim 16",
        ),
        llama().bad_key("attention.key_length", u32v(0), "head dim 0"),
        llama().bad_key("context_length", u32v(0), "context 0"),
        llama().bad_key("context_length", MetaValue::U64(1 << 40), "context 2^40"),
        llama().bad_key("embedding_length", MetaValue::U64(1 << 40), "hidden 2^40"),
        llama().bad_key(
            "rope.freq_base",
            MetaValue::String("1e4".into()),
            "float key as a string",
        ),
        llama().bad_key(
            "attention.layer_norm_rms_epsilon",
            u32v(0),
            "norm epsilon 0 (an integer)",
        ),
        llama()
            .tensor("token_embd.weight", |t| {
                t.dims = vec![64, 0];
                t.data.clear();
            })
            .tensor("output.weight", |t| {
                t.dims = vec![64, 0];
                t.data.clear();
            })
            .crafted("vocab 0", "token_embd.weight"),
        grow_vocab(llama(), 88).crafted(
            "tokenizer larger than the embedding",
            "tokenizer.ggml.tokens",
        ),
        llama()
            .tensor("blk.0.attn_q.weight", |t| {
                t.ty = GgmlType::I32;
                t.data = vec![0; 64 * 64 * 4];
            })
            .crafted("I32 weights (no kernel)", "blk.0.attn_q.weight"),
        llama()
            .tensor("blk.1.ffn_up.weight", |t| {
                t.ty = GgmlType::I8;
                t.data = vec![0; 64 * 128];
            })
            .crafted("I8 weights (no kernel)", "blk.1.ffn_up.weight"),
        // Found by fuzz/gguf_model: the lone up projection was read as fused gate/up.
        llama().drop("blk.0.ffn_gate.weight").crafted(
            "no ffn_gate beside an unfused ffn_up",
            "blk.0.ffn_up.weight",
        ),
        mixtral().bad_key("expert_used_count", u32v(0), "0 experts used"),
        mixtral().bad_key("expert_used_count", u32v(5), "5 of 4 experts used"),
    ]
}

/// `gguf-tiny/llama.gguf` with `src` as its chat template.
pub fn with_chat_template(manifest: &Path, src: &str) -> Vec<u8> {
    Model::open(&tiny_gguf_path(manifest, "llama"))
        .set("tokenizer.chat_template", MetaValue::String(src.into()))
        .crafted("chat template", "tokenizer.chat_template")
        .bytes
}
