//! Fuzzes tokenizer construction from GGUF metadata (`tokenizer.ggml.*`, any types and
//! lengths), then encoding fuzzed text and decoding fuzzed ids with what was built. Either
//! the metadata is refused with a typed error, or every encode gives ids inside the
//! vocabulary and decoding (whole or streamed) never panics.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use ferrox_core::storage::Bytes;
use ferrox_format::gguf::{to_bytes, GgufFile, MetaArray, MetaValue};
use ferrox_tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

const MODELS: &[&str] = &["llama", "gpt2", "bert", "t5", "none", "rwkv"];
const PRES: &[&str] = &[
    "default",
    "llama3",
    "qwen2",
    "gpt-2",
    "starcoder",
    "deepseek-v3",
    "deepseek-coder",
    "falcon",
    "glm4",
    "dbrx",
];

#[derive(Debug, Arbitrary)]
enum Pick {
    Known(u8),
    Other(String),
    Absent,
}

impl Pick {
    fn value(self, known: &[&str]) -> Option<String> {
        match self {
            Pick::Known(i) => Some(known[i as usize % known.len()].to_string()),
            Pick::Other(s) => Some(s),
            Pick::Absent => None,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    model: Pick,
    pre: Pick,
    /// Adds the 256 byte tokens (`<0xNN>` for SentencePiece, GPT-2's byte characters for BPE).
    byte_tokens: bool,
    tokens: Vec<String>,
    /// Token types; their count may differ from the tokens'.
    types: Vec<i8>,
    scores: Vec<f32>,
    /// Merges as pairs of token indices (rendered `"a b"`), plus raw ones.
    merges: Vec<(u16, u16)>,
    raw_merges: Vec<String>,
    ids: [Option<u32>; 4],
    flags: [Option<bool>; 3],
    text: String,
    decode: Vec<u32>,
}

/// GPT-2's byte-to-character map (printable bytes as themselves, the rest above U+0100).
fn byte_char(b: u8) -> char {
    let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable {
        return char::from(b);
    }
    let below = (0..b)
        .filter(|&x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
        .count() as u32;
    char::from_u32(256 + below).unwrap_or('?')
}

fn metadata(inp: Input) -> (Vec<(String, MetaValue)>, String, Vec<u32>) {
    let model = inp.model.value(MODELS);
    let spm = model.as_deref() == Some("llama");
    let mut tokens: Vec<String> = inp.tokens.into_iter().take(400).collect();
    let mut types: Vec<i32> = inp.types.iter().take(400).map(|&t| i32::from(t)).collect();
    if inp.byte_tokens {
        for b in 0..=255u8 {
            tokens.push(match spm {
                true => format!("<0x{b:02X}>"),
                false => byte_char(b).to_string(),
            });
            types.push(if spm { 6 } else { 1 });
        }
    }
    let merges: Vec<String> = inp
        .merges
        .iter()
        .take(400)
        .filter_map(|&(a, b)| {
            let n = tokens.len();
            (n > 0).then(|| format!("{} {}", tokens[a as usize % n], tokens[b as usize % n]))
        })
        .chain(inp.raw_merges.into_iter().take(16))
        .collect();
    let mut m: Vec<(String, MetaValue)> = Vec::new();
    let mut put = |k: &str, v: MetaValue| m.push((format!("tokenizer.ggml.{k}"), v));
    if let Some(model) = model {
        put("model", MetaValue::String(model));
    }
    if let Some(pre) = inp.pre.value(PRES) {
        put("pre", MetaValue::String(pre));
    }
    let strs = |v: &[String]| MetaArray::String(v.iter().map(String::as_str).collect());
    put("tokens", MetaValue::Array(strs(&tokens)));
    put("token_type", MetaValue::Array(MetaArray::I32(types)));
    if !inp.scores.is_empty() {
        let scores = inp.scores.into_iter().take(tokens.len()).collect();
        put("scores", MetaValue::Array(MetaArray::F32(scores)));
    }
    if !merges.is_empty() {
        put("merges", MetaValue::Array(strs(&merges)));
    }
    let names = ["bos_token_id", "eos_token_id", "unknown_token_id", "eot_token_id"];
    for (name, id) in names.iter().zip(inp.ids) {
        if let Some(id) = id {
            put(name, MetaValue::U32(id % (tokens.len() as u32 + 4)));
        }
    }
    let flags = ["add_bos_token", "add_eos_token", "add_space_prefix"];
    for (name, f) in flags.iter().zip(inp.flags) {
        if let Some(f) = f {
            put(name, MetaValue::Bool(f));
        }
    }
    (m, inp.text, inp.decode)
}

fuzz_target!(|data: &[u8]| {
    let Ok(inp) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let (meta, text, decode) = metadata(inp);
    let decode: Vec<usize> = decode.into_iter().map(|i| i as usize).collect();
    let Ok(file) = GgufFile::from_bytes(Bytes::from_vec(to_bytes(&meta, &[]))) else {
        return;
    };
    let Ok(tok) = Tokenizer::from_gguf(&file) else {
        return;
    };
    let n = tok.vocab_size();
    for (add, parse) in [(true, true), (false, false), (false, true)] {
        let ids = tok.encode(&text, add, parse);
        assert!(ids.iter().all(|&i| i < n), "id past the vocabulary");
        let _ = tok.decode(&ids);
    }
    let _ = tok.decode(&decode);
    let _ = tok.decode_skip_special(&decode);
    let mut stream = tok.stream_decoder().skip_special(true);
    for &id in &decode {
        let _ = stream.push(id);
    }
    let _ = stream.finish();
});
