//! decode(encode(s)) == s over ~1 MB of real text for both real models, and the streaming
//! decoder's pieces concatenate to the same text.

mod tokenizer_common;

use std::time::Instant;

use ferrox_tokenizer::Tokenizer;
use tokenizer_common::*;

fn roundtrip(name: &str, tok: &Tokenizer, text: &str) {
    let t0 = Instant::now();
    let ids = tok.encode(text, false, true);
    let dt = t0.elapsed().as_secs_f64();
    eprintln!(
        "{name}: {} bytes -> {} tokens in {:.3}s ({:.2} MB/s)",
        text.len(),
        ids.len(),
        dt,
        text.len() as f64 / dt / 1e6
    );
    assert!(ids.len() > text.len() / 10, "suspiciously few tokens");
    let back = tok.decode(&ids);
    if back != text {
        let at = back
            .bytes()
            .zip(text.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(back.len().min(text.len()));
        let ctx = String::from_utf8_lossy(
            &text.as_bytes()[at.saturating_sub(40)..(at + 40).min(text.len())],
        );
        panic!("{name}: roundtrip differs at byte {at}: {ctx:?}");
    }
    let mut d = tok.stream_decoder();
    let mut streamed = String::with_capacity(text.len());
    for &id in &ids {
        streamed.push_str(&d.push(id));
    }
    streamed.push_str(&d.finish());
    assert!(streamed == text, "{name}: streamed text differs");
    // Without special-token parsing the text still round-trips.
    let plain = tok.encode(text, false, false);
    assert_eq!(tok.decode(&plain), text);
}

#[test]
fn qwen_roundtrip_1mb() {
    let text = corpus();
    assert!(text.len() >= 1_000_000);
    roundtrip("qwen2.5-coder", qwen(), &text);
}

#[test]
fn gemma_roundtrip_1mb() {
    let text = corpus();
    roundtrip("gemma3", gemma(), &text);
}
