//! Fuzzes a model file all the way down: GGUF → validated config → decoder construction →
//! tokenizer check → a forward of a few tokens. Any input is either refused with a typed error
//! or gives a model that runs; a panic, an abort or an allocation past `-malloc_limit_mb` is
//! a finding.
//!
//! Random bytes rarely get past the parser (the `gguf_parse` target covers it), so the input
//! is mostly a list of edits to a valid tiny model of `fixtures/gguf-tiny` (one per family):
//! metadata values set (any type, including the wrong one), removed or added among the keys
//! the loaders read, tensors reshaped, retyped or dropped (their data resized to match, up to
//! a cap). An input that starts with `GGUF` is taken as a whole file instead.
#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::{Arbitrary, Unstructured};
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use ferrox_format::gguf::{to_bytes, GgufFile, MetaArray, MetaValue, TensorOut};
use ferrox_models::arch::gguf::GgufMeta;
use ferrox_models::arch::gguf_config;
use ferrox_models::validate::check_tokenizer;
use ferrox_models::weights::GgufSource;
use ferrox_tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

/// Largest tensor data an edit may create (the tiny models' tensors are ≤ 256 KiB).
const MAX_TENSOR_BYTES: usize = 1 << 20;
/// Models up to this size also run a forward (bigger valid ones are only constructed).
const MAX_FORWARD_PARAMS: usize = 4 << 20;

macro_rules! bases {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_bytes!(concat!(
            "../../crates/ferrox-models/tests/fixtures/gguf-tiny/", $name, ".gguf")) as &[u8])),*]
    };
}

/// One tiny model per family the GGUF loaders know (dense, sliding window, MoE, MLA, sparse
/// attention, recurrent layers, MXFP4 experts).
const BASES: &[(&str, &[u8])] = bases![
    "llama",
    "gemma2",
    "phi3",
    "mistral",
    "mixtral",
    "qwen2_moe",
    "qwen3_next",
    "deepseek_v3",
    "glm_moe_dsa",
    "gpt_oss_mxfp4",
    "granitemoe",
    "granite",
    "smollm3",
];

/// Keys the GGUF loaders read, below `{arch}.` (the architecture's own prefix).
const ARCH_KEYS: &[&str] = &[
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "vocab_size",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "attention.kv_lora_rank",
    "attention.q_lora_rank",
    "attention.layer_norm_rms_epsilon",
    "attention.scale",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attention.recurrent_layers",
    "attention.indexer.head_count",
    "attention.indexer.key_length",
    "attention.indexer.top_k",
    "attention.indexer.types",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.attn_factor",
    "rope.scaling.original_context_length",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_log_multiplier",
    "rope.scaling.finetuned",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_count",
    "expert_shared_feed_forward_length",
    "expert_gating_func",
    "expert_group_count",
    "expert_group_used_count",
    "expert_weights_norm",
    "expert_weights_scale",
    "leading_dense_block_count",
    "full_attention_interval",
    "embedding_scale",
    "residual_scale",
    "logit_scale",
    "ssm.conv_kernel",
    "ssm.group_count",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.time_step_rank",
];

/// Keys outside the architecture's prefix that loading reads.
const OTHER_KEYS: &[&str] = &[
    "general.architecture",
    "general.alignment",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix",
];

#[derive(Debug, Arbitrary)]
enum Val {
    Small(u8),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    U32s(Vec<u32>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
    Bools(Vec<bool>),
    Strs(Vec<String>),
}

impl Val {
    fn meta(self) -> MetaValue {
        match self {
            Val::Small(x) => MetaValue::U32(u32::from(x)),
            Val::U32(x) => MetaValue::U32(x),
            Val::I32(x) => MetaValue::I32(x),
            Val::U64(x) => MetaValue::U64(x),
            Val::I64(x) => MetaValue::I64(x),
            Val::F32(x) => MetaValue::F32(x),
            Val::F64(x) => MetaValue::F64(x),
            Val::Bool(x) => MetaValue::Bool(x),
            Val::Str(s) => MetaValue::String(s),
            Val::U32s(v) => MetaValue::Array(MetaArray::U32(v)),
            Val::I32s(v) => MetaValue::Array(MetaArray::I32(v)),
            Val::F32s(v) => MetaValue::Array(MetaArray::F32(v)),
            Val::Bools(v) => MetaValue::Array(MetaArray::Bool(v)),
            Val::Strs(v) => MetaValue::Array(MetaArray::String(
                v.iter().map(String::as_str).collect(),
            )),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Edit {
    /// Sets the `k`-th key the file has.
    Set(u16, Val),
    /// Sets (adds) the `k`-th key of `ARCH_KEYS`.
    SetArch(u8, Val),
    /// Sets (adds) the `k`-th key of `OTHER_KEYS`.
    SetOther(u8, Val),
    Remove(u16),
    /// Gives tensor `t` new dimensions (its data resized to them).
    Dims(u16, Vec<u16>),
    /// Gives tensor `t` another type id (its data resized to it).
    Type(u16, u8),
    DropTensor(u16),
    /// Appends a copy of tensor `t` under another layer's number.
    CopyTensor(u16, u8),
}

#[derive(Debug, Arbitrary)]
struct Input {
    base: u8,
    edits: Vec<Edit>,
}

type Model = (Vec<(String, MetaValue)>, Vec<TensorOut>);

fn base(i: usize) -> &'static Model {
    static MODELS: OnceLock<Vec<Model>> = OnceLock::new();
    let all = MODELS.get_or_init(|| {
        BASES
            .iter()
            .map(|(name, bytes)| {
                let f = GgufFile::from_bytes(Bytes::from_vec(bytes.to_vec()))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                (f.metadata().to_vec(), f.tensors_out())
            })
            .collect()
    });
    &all[i % all.len()]
}

fn resize(t: &mut TensorOut) {
    let n: u64 = t.dims.iter().product();
    let (bs, ts) = (t.ty.block_size() as u64, t.ty.type_size() as u64);
    let bytes = (n / bs.max(1)).saturating_mul(ts);
    t.data.resize(bytes.min(MAX_TENSOR_BYTES as u64) as usize, 0);
}

fn set(meta: &mut Vec<(String, MetaValue)>, key: String, v: MetaValue) {
    match meta.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = v,
        None => meta.push((key, v)),
    }
}

fn apply(meta: &mut Vec<(String, MetaValue)>, tensors: &mut Vec<TensorOut>, e: Edit) {
    let arch = meta
        .iter()
        .find(|(k, _)| k == "general.architecture")
        .and_then(|(_, v)| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let nt = tensors.len().max(1);
    match e {
        Edit::Set(k, v) if !meta.is_empty() => {
            let i = k as usize % meta.len();
            meta[i].1 = v.meta();
        }
        Edit::Set(..) => {}
        Edit::SetArch(k, v) => {
            let key = ARCH_KEYS[k as usize % ARCH_KEYS.len()];
            set(meta, format!("{arch}.{key}"), v.meta());
        }
        Edit::SetOther(k, v) => {
            let key = OTHER_KEYS[k as usize % OTHER_KEYS.len()];
            set(meta, key.to_string(), v.meta());
        }
        Edit::Remove(k) if !meta.is_empty() => {
            meta.remove(k as usize % meta.len());
        }
        Edit::Remove(_) => {}
        Edit::Dims(t, dims) if !tensors.is_empty() => {
            let t = &mut tensors[t as usize % nt];
            t.dims = dims.iter().take(4).map(|&d| u64::from(d)).collect();
            resize(t);
        }
        Edit::Type(t, ty) if !tensors.is_empty() => {
            if let Ok(ty) = GgmlType::from_id(u32::from(ty)) {
                let t = &mut tensors[t as usize % nt];
                t.ty = ty;
                resize(t);
            }
        }
        Edit::DropTensor(t) if !tensors.is_empty() => {
            tensors.remove(t as usize % nt);
        }
        Edit::CopyTensor(t, layer) if !tensors.is_empty() => {
            let mut c = tensors[t as usize % nt].clone();
            c.name = match c.name.strip_prefix("blk.") {
                Some(rest) => {
                    let rest = rest.split_once('.').map_or(rest, |(_, r)| r);
                    format!("blk.{layer}.{rest}")
                }
                None => format!("{}.{layer}", c.name),
            };
            if !tensors.iter().any(|x| x.name == c.name) {
                tensors.push(c);
            }
        }
        _ => {}
    }
}

/// Loads `bytes` as the CLI does, then runs a few tokens through a small enough model.
fn run(bytes: Vec<u8>) {
    let Ok(file) = GgufFile::from_bytes(Bytes::from_vec(bytes)) else {
        return;
    };
    let g = GgufMeta {
        file: Arc::new(file),
    };
    let Ok((arch, cfg)) = gguf_config(&g) else {
        return;
    };
    let src = GgufSource {
        file: g.file.clone(),
        dequantize: false,
    };
    let Ok(dec) = ferrox_models::build::build(arch, cfg, &src) else {
        return;
    };
    let Ok(tok) = Tokenizer::from_gguf(&g.file) else {
        return;
    };
    if check_tokenizer(&dec, &tok).is_err() {
        return;
    }
    let params: usize = g.file.tensors().iter().map(|t| t.n_elements as usize).sum();
    if params > MAX_FORWARD_PARAMS {
        return;
    }
    let ids = tok.encode("Hello, fuzz! 12", true, true);
    let ids: Vec<_> = ids.into_iter().take(6).collect();
    if ids.is_empty() {
        return;
    }
    let mut caches = dec.new_caches();
    let logits = dec.forward_batch(&ids, 0, &mut caches);
    assert_eq!(logits.len(), ids.len());
    assert!(logits.iter().all(|r| r.len() == dec.vocab_size()));
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(b"GGUF") {
        return run(data.to_vec());
    }
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let (meta, tensors) = base(usize::from(input.base));
    let (mut meta, mut tensors) = (meta.clone(), tensors.clone());
    for e in input.edits.into_iter().take(16) {
        apply(&mut meta, &mut tensors, e);
    }
    run(to_bytes(&meta, &tensors));
});
