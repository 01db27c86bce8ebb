//! An in-memory SentencePiece vocabulary with byte fallback, for tests that need a tokenizer
//! without a model file. Included by `#[path]` in the unit tests (`src/tests.rs`, used by
//! `src/fim.rs` too) and in `tests/special_runs.rs`; the including module provides
//! `Tokenizer` and `TokenizerSpec`.

use super::{SpecialTokens, Tokenizer, TokenizerSpec};

/// A `llama` (SentencePiece) vocabulary: `<unk>` (0, the unknown token), `<s>` (1, bos),
/// `</s>` (2, eos), the 256 byte tokens `<0x00>`..`<0xFF>` (ids 3..259), then `pieces` as
/// (text, score, token type). The spec's other fields (flags) come from `rest`.
pub fn spm_vocab(
    pieces: impl IntoIterator<Item = (String, f32, i32)>,
    rest: TokenizerSpec,
) -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..256 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s, ty) in pieces {
        tokens.push(t);
        scores.push(s);
        types.push(ty);
    }
    Tokenizer::from_spec(TokenizerSpec {
        model: "llama".into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        special: SpecialTokens {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            ..Default::default()
        },
        ..rest
    })
    .unwrap()
}
