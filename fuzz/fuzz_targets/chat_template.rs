//! Fuzzes chat templates through the sandbox: a fuzzed template source rendered over fuzzed
//! messages, tools and template variables, then marked and tokenized so that message text
//! cannot become control tokens (`render_chat_text`, `encode_prompt`). A hostile template is
//! an error (fuel, output size, time budget), never a panic, an abort or a hang.
//!
//! Input (UTF-8): the template source, then NUL-separated parts. A part `tools:JSON` gives
//! the tools, `kwargs:JSON` the template variables; any other part is a message whose first
//! character picks the role (`s` system, `u` user, `a` assistant, `t` tool, else the rest
//! of the part up to a `:` is the role).
#![no_main]

use std::sync::OnceLock;

use ferrox_core::storage::Bytes;
use ferrox_format::gguf::{to_bytes, GgufFile, MetaArray, MetaValue};
use ferrox_tokenizer::template::{render_chat_text, ChatTemplate, Message};
use ferrox_tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

/// Control tokens the template markers of common families use.
const CONTROL: &[&str] = &[
    "<|im_start|>",
    "<|im_end|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
];

/// A byte-level BPE tokenizer (GPT-2 bytes, no merges) with the control tokens above.
fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let mut tokens: Vec<String> = (0..=255u8).map(byte_char).map(String::from).collect();
        let mut types = vec![1i32; tokens.len()];
        for c in CONTROL {
            tokens.push(c.to_string());
            types.push(3);
        }
        let strs = MetaArray::String(tokens.iter().map(String::as_str).collect());
        let s = |x: &str| MetaValue::String(x.into());
        let meta = vec![
            ("tokenizer.ggml.model".to_string(), s("gpt2")),
            ("tokenizer.ggml.pre".to_string(), s("qwen2")),
            ("tokenizer.ggml.tokens".to_string(), MetaValue::Array(strs)),
            (
                "tokenizer.ggml.merges".to_string(),
                MetaValue::Array(MetaArray::String(std::iter::empty::<&str>().collect())),
            ),
            (
                "tokenizer.ggml.token_type".to_string(),
                MetaValue::Array(MetaArray::I32(types)),
            ),
            ("tokenizer.ggml.bos_token_id".to_string(), MetaValue::U32(261)),
            ("tokenizer.ggml.eos_token_id".to_string(), MetaValue::U32(262)),
        ];
        let file = GgufFile::from_bytes(Bytes::from_vec(to_bytes(&meta, &[]))).expect("gguf");
        Tokenizer::from_gguf(&file).expect("tokenizer")
    })
}

/// GPT-2's byte-to-character map.
fn byte_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let below = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + below).unwrap_or('?')
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = s.split('\0');
    let source = parts.next().unwrap_or("");
    let (mut messages, mut tools, mut kwargs) = (Vec::new(), None, None);
    for p in parts.take(32) {
        if let Some(j) = p.strip_prefix("tools:") {
            tools = serde_json::from_str::<serde_json::Value>(j).ok();
        } else if let Some(j) = p.strip_prefix("kwargs:") {
            kwargs = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(j).ok();
        } else {
            let mut cs = p.chars();
            let role = match cs.next() {
                Some('s') => "system".to_string(),
                Some('u') => "user".to_string(),
                Some('a') => "assistant".to_string(),
                Some('t') => "tool".to_string(),
                _ => p.split(':').next().unwrap_or("").to_string(),
            };
            messages.push(Message::new(role, cs.as_str()));
        }
    }
    let Ok(t) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let tok = tokenizer();
    let Ok(ct) = render_chat_text(tok, Some(&t), &messages, tools.as_ref(), kwargs.as_ref())
    else {
        return;
    };
    let mut end = 0;
    for r in &ct.literal {
        assert!(r.start >= end && r.start <= r.end && r.end <= ct.text.len());
        assert!(ct.text.is_char_boundary(r.start) && ct.text.is_char_boundary(r.end));
        end = r.end;
    }
    let ids = tok.encode_prompt(&ct.text, &ct.literal);
    assert!(ids.iter().all(|&i| (i as usize) < tok.vocab_size()));
    // Every byte comes back (the vocabulary has all 256), after the BOS a prompt may get.
    let back = tok.decode(&ids);
    assert!(back == ct.text || back == format!("<s>{}", ct.text), "{back:?}");
});
