//! Token ids equal llama.cpp's (`llama-tokenize`, all four variants) for both real models.

mod tokenizer_common;

use ferrox_tokenizer::{TokenId, Tokenizer};
use tokenizer_common::*;

fn check(tok: &Tokenizer, fixture_file: &str) {
    let f = read_json(&fixture(&format!("tokenize/{fixture_file}")));
    let strings = f["strings"].as_array().unwrap();
    assert!(!strings.is_empty());
    let mut n = 0;
    for s in strings {
        let text = s["text"].as_str().unwrap();
        for (variant, add_special, parse_special) in [
            ("default", true, true),
            ("no_bos", false, true),
            ("no_parse_special", true, false),
            ("no_bos_no_parse_special", false, false),
        ] {
            let want: Vec<TokenId> = serde_json::from_value(s[variant].clone()).unwrap();
            let got = tok.encode(text, add_special, parse_special);
            assert_eq!(got, want, "{fixture_file} {variant} {text:?}");
            n += 1;
        }
        // Without BOS, the ids decode back to the text.
        assert_eq!(tok.decode(&tok.encode(text, false, true)), text);
    }
    assert_eq!(n, strings.len() * 4);
}

#[test]
fn qwen_matches_llama_cpp() {
    check(qwen(), "qwen2.5-coder-0.5b-instruct.json");
}

#[test]
fn gemma_matches_llama_cpp() {
    check(gemma(), "gemma3-270m.json");
}

#[test]
fn special_ids_and_end_of_generation() {
    let q = qwen();
    assert_eq!(q.vocab_size(), 151936);
    assert_eq!(q.bos_id(), Some(151643));
    assert!(!q.adds_bos());
    assert_eq!(q.eos_id(), Some(151645));
    assert_eq!(q.eot_id(), q.token_to_id("<|im_end|>"));
    for t in [
        "<|im_end|>",
        "<|endoftext|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ] {
        assert!(q.is_eog(q.token_to_id(t).unwrap()), "{t}");
    }
    assert!(!q.is_eog(q.token_to_id("<|im_start|>").unwrap()));
    assert!(q.chat_template().unwrap().contains("<|im_start|>"));

    let g = gemma();
    assert_eq!(g.vocab_size(), 262144);
    assert_eq!(g.bos_id(), Some(2));
    assert!(g.adds_bos());
    assert_eq!(g.eos_id(), Some(1));
    let eot = g.token_to_id("<end_of_turn>").unwrap();
    assert_eq!(g.eot_id(), Some(eot));
    assert!(g.is_eog(1) && g.is_eog(eot));
    assert!(g.chat_template().is_none());
}

#[test]
fn pieces_match_llama_cpp_bytes() {
    // llama.cpp's generated_token_pieces_hex for qwen: " Paris", "." and a byte-level newline.
    let q = qwen();
    assert_eq!(q.token_to_piece(12095), b" Paris");
    assert_eq!(q.token_to_piece(13), b".");
    assert_eq!(q.token_to_piece(198), b"\n");
    assert_eq!(q.token_to_piece(151645), b"<|im_end|>");
    let g = gemma();
    assert_eq!(g.token_to_piece(1902), b" world");
    let b = g.token_to_id("<0xE6>").unwrap();
    assert_eq!(g.token_to_piece(b), [0xE6]);
}
