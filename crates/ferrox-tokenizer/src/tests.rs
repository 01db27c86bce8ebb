use super::*;

// Also the FIM tests' vocabulary (`fim::tests`).
#[path = "../tests/tokenizer_common/spm.rs"]
pub(crate) mod spm;

/// A tiny SentencePiece vocabulary: control tokens, byte tokens, a few pieces with scores.
fn tiny_spm(add_space_prefix: bool) -> Tokenizer {
    let pieces = [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("he", -3.0),
        ("ll", -3.0),
        ("llo", -4.0),
        ("▁he", -5.0),
        ("▁hello", -6.0),
        ("hello", -7.0),
        ("<ctrl>", 0.0),
        ("\n\n", 0.0),
    ]
    .map(|(t, s)| {
        let ty = match t {
            "<ctrl>" => 3,
            "\n\n" => 4,
            _ => 1,
        };
        (t.to_string(), s, ty)
    });
    spm::spm_vocab(
        pieces,
        TokenizerSpec {
            add_space_prefix: Some(add_space_prefix),
            ..Default::default()
        },
    )
}

fn id(t: &Tokenizer, s: &str) -> TokenId {
    t.token_to_id(s).unwrap()
}

#[test]
fn spm_merges_by_score_and_falls_back_to_bytes() {
    let t = tiny_spm(true);
    let ids = t.encode("hello", true, true);
    assert_eq!(ids, vec![1, id(&t, "▁hello")]);
    // 'x' is not in the vocabulary: byte token 0x78.
    let ids = t.encode("hex", false, true);
    assert_eq!(ids, vec![id(&t, "▁he"), id(&t, "<0x78>")]);
    assert_eq!(t.decode(&ids), "hex");
}

#[test]
fn spm_special_tokens_and_space_prefix() {
    let t = tiny_spm(true);
    let c = id(&t, "<ctrl>");
    // After a special token the next fragment gets the space prefix again.
    let ids = t.encode("hello<ctrl>hello", false, true);
    assert_eq!(ids, vec![id(&t, "▁hello"), c, id(&t, "▁hello")]);
    // Without parse_special the control text is plain text.
    let ids = t.encode("<ctrl>", false, false);
    assert!(!ids.contains(&c));
    assert_eq!(t.decode(&ids), "<ctrl>");
    // User-defined tokens are matched even without parse_special.
    let nn = id(&t, "\n\n");
    let ids = t.encode("he\n\nhe", false, false);
    assert_eq!(ids, vec![id(&t, "▁he"), nn, id(&t, "▁he")]);
}

#[test]
fn spm_without_space_prefix() {
    let t = tiny_spm(false);
    assert_eq!(t.encode("hello", false, true), vec![id(&t, "hello")]);
    assert_eq!(t.decode(&[id(&t, "▁hello")]), " hello");
}

#[test]
fn eog_and_specials() {
    let t = tiny_spm(true);
    assert_eq!(t.bos_id(), Some(1));
    assert_eq!(t.eos_id(), Some(2));
    assert!(t.is_eog(2));
    assert!(t.eog_ids().contains(&id(&t, "</s>")));
}

#[test]
fn unknown_model_and_pre_are_named() {
    let spec = TokenizerSpec {
        model: "wordpiece-x".into(),
        tokens: vec!["a".into()],
        ..Default::default()
    };
    let e = Tokenizer::from_spec(spec).unwrap_err().to_string();
    assert!(e.contains("wordpiece-x"), "{e}");
    let spec = TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("mystery-pre".into()),
        tokens: vec!["a".into()],
        merges: Some(vec![]),
        ..Default::default()
    };
    let e = Tokenizer::from_spec(spec).unwrap_err().to_string();
    assert!(e.contains("mystery-pre"), "{e}");
}

#[test]
fn duplicate_tokens_are_an_error() {
    let spec = TokenizerSpec {
        model: "llama".into(),
        tokens: vec!["a".into(), "a".into()],
        add_bos: Some(false),
        ..Default::default()
    };
    let e = Tokenizer::from_spec(spec).unwrap_err().to_string();
    assert!(e.contains("duplicate"), "{e}");
}

#[test]
fn stream_holds_back_partial_utf8() {
    let t = tiny_spm(false);
    // "é" = C3 A9 as two byte tokens.
    let a = id(&t, "<0xC3>");
    let b = id(&t, "<0xA9>");
    let mut d = t.stream_decoder();
    assert_eq!(d.push(a), "");
    assert_eq!(d.push(b), "é");
    // A lone continuation byte is invalid: replaced immediately.
    assert_eq!(d.push(b), "\u{FFFD}");
    assert_eq!(d.push(a), "");
    assert_eq!(d.finish(), "\u{FFFD}");
}
