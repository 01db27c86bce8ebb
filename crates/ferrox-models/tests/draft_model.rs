//! A separate draft model (`--draft-model`): qwen2.5-coder:0.5b-instruct drafting for the
//! 1.5B, the real pair sharing a tokenizer. Greedy and seeded sampling give plain decoding's
//! tokens bit for bit, the draft model really drafts (and is sometimes wrong, so rejection and
//! the truncation of its caches are exercised), a follow-up turn re-syncs its caches, and a
//! model with another vocabulary is refused naming the difference.

mod common;
use common::{fixed_speculation, load_with_tokenizer, tokens_of};
use ferrox_models::decoder::Decoder;
use ferrox_models::generate::Session;
use ferrox_models::sampling::SamplerConfig;
use ferrox_models::speculative::{DraftModel, DraftModelError, LongestMatchDrafter, Speculation};
use ferrox_tokenizer::template::{render_prompt, Message};
use ferrox_tokenizer::{TokenId, Tokenizer};
use std::sync::Arc;

fn model(name: &str) -> (Decoder, Tokenizer) {
    let path = ferrox_hub::ensure_model(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    load_with_tokenizer(&path)
}

fn chat_ids(tok: &Tokenizer, text: &str) -> Vec<TokenId> {
    let text = render_prompt(tok, &[Message::user(text.to_string())], true).unwrap();
    tok.encode(&text, false, true)
}

/// The draft model beside longest match, drafting 4 tokens every step (no cost model: the
/// draft is always made and verified, whatever the machine's load).
fn speculation(draft: &DraftModel) -> Option<Speculation> {
    let lookup = Box::new(LongestMatchDrafter::new(2));
    fixed_speculation(Box::new(draft.drafter(lookup)), 4)
}

fn run(s: &mut Session<'_>, ids: &[TokenId], config: SamplerConfig) -> Vec<TokenId> {
    tokens_of(s, ids, config, 40)
}

#[test]
fn draft_model_speculation_equals_plain_decoding() {
    let (target, tok) = model("qwen2.5-coder:1.5b-instruct");
    let (small, small_tok) = model("qwen2.5-coder:0.5b-instruct");
    let draft = DraftModel::new(&target, &tok, Arc::new(small), &small_tok).unwrap();
    let sampled = SamplerConfig {
        temperature: 0.8,
        top_p: 0.95,
        seed: 7,
        ..SamplerConfig::default()
    };
    let first = chat_ids(&tok, "Explain in plain words why the sky is blue.");
    for config in [SamplerConfig::greedy(), sampled] {
        let mut plain = Session::new(&target, &tok, 1024);
        let want = run(&mut plain, &first, config.clone());
        let mut spec = Session::new(&target, &tok, 1024);
        spec.set_speculation(speculation(&draft));
        assert_eq!(run(&mut spec, &first, config.clone()), want);

        // A follow-up turn in the same session: the draft model's caches keep the shared
        // prefix and take in the rest.
        let mut next = first.clone();
        next.extend(&want);
        next.extend(chat_ids(&tok, "Now in one sentence."));
        let want_next = run(&mut plain, &next, config.clone());
        assert_eq!(run(&mut spec, &next, config.clone()), want_next);

        let c = spec.drafter_counts();
        let by_model = c.iter().find(|c| c.drafter == "draft-model");
        let by_model = by_model.unwrap_or_else(|| panic!("the draft model never drafted: {c:?}"));
        assert!(
            by_model.accepted > 0 && by_model.accepted < by_model.drafted,
            "drafts kept and rejected both: {c:?}"
        );
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let (target, tok) = model("qwen2.5-coder:0.5b-instruct");
    let (other, other_tok) = model("gemma3:270m");
    let e = DraftModel::new(&target, &tok, Arc::new(other), &other_tok).unwrap_err();
    // gemma3's vocabulary is 262k tokens against Qwen's 151k.
    assert!(
        matches!(
            e,
            DraftModelError::Special { .. } | DraftModelError::VocabSize { .. }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("draft model"), "{e}");
}
