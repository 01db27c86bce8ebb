//! A draft tree in one forward (`SeqBatch::tree`): every row's logits are, bit for bit, those
//! of its own branch fed as a chain after the same history, and a branch moved into place
//! leaves the caches as feeding it would — on the tiny checkpoints whose layers take trees
//! (bias, q/k norms, sliding windows, soft caps, sinks, experts) and on a real quantized model
//! with every cache format. Models whose layers cannot are refused. Through the engine, a
//! drafter offering branches verifies as a tree, and the output is plain decoding's, greedy
//! and seeded.

mod common;

use ferrox_core::cache::{CacheFormat, KvCache, KvType};
use ferrox_models::decoder::{Decoder, ForwardError, SeqBatch, OWN_CACHES};
use ferrox_models::generate::Session;
use ferrox_models::sampling::Sampler;
use ferrox_models::speculative::{AdaptiveDraft, Drafter};
use ferrox_models::tree::{place_branch, Tree};
use ferrox_tokenizer::template::{render_prompt, Message};
use std::path::Path;

fn tiny(arch: &str) -> Decoder {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf-tiny")
        .join(arch);
    Decoder::load(&dir).unwrap_or_else(|e| panic!("{arch}: {e}"))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Rows of a tree: 0 → 1 → 2 → 3 (the spine), 0 → 4 → 5, 1 → 6, 2 → 7, 4 → 8.
const PARENTS: [usize; 9] = [0, 0, 1, 2, 0, 4, 1, 2, 4];

fn check(d: &Decoder, name: &str) {
    let v = d.vocab_size();
    let history: Vec<usize> = (0..37).map(|i| (i * 71 + i * i * 7 + 3) % v).collect();
    let rows: Vec<usize> = (0..PARENTS.len()).map(|i| (i * 131 + 11) % v).collect();
    let tree = Tree::new(&PARENTS).unwrap();
    let warm = || {
        let mut c = d.new_caches();
        d.forward_from(&history, 0, &mut c, history.len());
        c
    };
    let mut caches = warm();
    let mut seq = [SeqBatch {
        tokens: &rows,
        pos: history.len(),
        caches: &mut caches,
        first_logit_row: 0,
        key: OWN_CACHES,
        tree: Some(tree),
    }];
    let mut logits = Vec::new();
    d.forward_multi(&mut seq, &mut logits);
    // Beside another sequence's rows in one forward (continuous batching): the same rows.
    let (mut mine, mut other) = (warm(), d.new_caches());
    let other_rows = [5, 6, 7];
    let mut both = [
        SeqBatch {
            tokens: &other_rows,
            pos: 0,
            caches: &mut other,
            first_logit_row: 0,
            key: 1,
            tree: None,
        },
        SeqBatch {
            tokens: &rows,
            pos: history.len(),
            caches: &mut mine,
            first_logit_row: 0,
            key: 2,
            tree: Some(tree),
        },
    ];
    let mut together = Vec::new();
    d.forward_multi(&mut both, &mut together);
    assert_eq!(
        bits(&together[3 * v..]),
        bits(&logits),
        "{name}: beside another sequence"
    );
    let mut path = Vec::new();
    for (i, got) in logits.chunks_exact(v).enumerate() {
        tree.path(i, &mut path);
        let chain: Vec<usize> = std::iter::once(0)
            .chain(path.iter().copied())
            .map(|r| rows[r])
            .collect();
        let mut c = warm();
        let want = d.forward_from(&chain, history.len(), &mut c, chain.len() - 1);
        assert_eq!(
            bits(got),
            bits(&want[0]),
            "{name}: row {i} against its branch"
        );
        // The branch moved into place and the rest cut: the next token sees what it sees
        // after the branch fed as a chain.
        let mut placed = caches.clone();
        for cache in &mut placed {
            place_branch(history.len(), &path, |a, b| cache.swap_positions(a, b));
            cache.truncate(history.len() + chain.len());
        }
        let next = (i * 17 + 5) % v;
        let a = d.forward_token(next, history.len() + chain.len(), &mut placed);
        let b = d.forward_token(next, history.len() + chain.len(), &mut c);
        assert_eq!(bits(&a), bits(&b), "{name}: after branch {i} in place");
    }
}

#[test]
fn tree_rows_equal_their_branches_on_tiny_checkpoints() {
    for arch in [
        "llama",
        "qwen2",
        "qwen3",
        "gemma2",
        "gemma3_text",
        "gpt_oss",
        "mixtral",
        "qwen3_moe",
    ] {
        let d = tiny(arch);
        assert!(d.takes_trees(), "{arch}");
        check(&d, arch);
    }
}

#[test]
fn tree_rows_equal_their_branches_on_qwen_in_every_cache_format() {
    let path = ferrox_hub::ensure_model("qwen2.5-coder:0.5b-instruct").unwrap();
    let mut d = Decoder::load(path).unwrap();
    let formats = [
        CacheFormat::default(),
        CacheFormat::uniform(KvType::F32),
        CacheFormat::uniform(KvType::F16),
        CacheFormat::uniform(KvType::Bf16),
        CacheFormat::uniform(KvType::Q8_0),
        CacheFormat {
            bf16_products: true,
            ..CacheFormat::uniform(KvType::F16)
        },
    ];
    for f in formats {
        d.set_cache_format(f).unwrap();
        check(&d, &format!("qwen2.5-coder:0.5b {f:?}"));
    }
}

/// Why `d` refuses tokens `[1, 2, 3]` from position 0 as the tree of `parents`.
fn refusal(d: &Decoder, parents: &[usize]) -> ForwardError {
    let mut caches: Vec<KvCache> = d.new_caches();
    let mut seq = SeqBatch {
        tokens: &[1, 2, 3],
        pos: 0,
        caches: &mut caches,
        first_logit_row: 0,
        key: OWN_CACHES,
        tree: Some(Tree::new(parents).unwrap()),
    };
    d.prepare_seq(&mut seq).unwrap_err()
}

/// Latent attention, linear attention: their layers cannot take a tree, and a forward
/// given one is refused before it runs; so is a tree that does not fit its rows.
#[test]
fn a_tree_the_model_cannot_take_is_refused() {
    for arch in ["deepseek_v3", "qwen3_next"] {
        let d = tiny(arch);
        assert!(!d.takes_trees(), "{arch}");
        assert_eq!(refusal(&d, &[0, 0, 0]), ForwardError::NoTrees, "{arch}");
    }
    let e = refusal(&tiny("llama"), &[0, 0]);
    assert_eq!(e.to_string(), "a draft tree of 2 parents for 3 rows");
}

/// Drafts plain decoding's own continuation with every third token wrong, and beside each
/// draft token the right one when the chain's is wrong (else a wrong one): verification
/// leaves the chain at a branch every few tokens.
struct Branching {
    prompt: usize,
    plain: Vec<usize>,
    vocab: usize,
    /// Plain decoding's tokens where the last draft stands.
    right: Vec<usize>,
}

impl Drafter for Branching {
    fn propose_into(&mut self, history: &[usize], max: usize, out: &mut Vec<usize>) {
        let from = (history.len() - self.prompt).min(self.plain.len());
        let end = (from + max).min(self.plain.len());
        self.right = self.plain[from..end].to_vec();
        for (i, &t) in self.plain[from..end].iter().enumerate() {
            out.push(if (from + i) % 3 == 2 {
                (t + 1) % self.vocab
            } else {
                t
            });
        }
    }

    fn branches(&mut self, _: &AdaptiveDraft, draft: &[usize], out: &mut Vec<(usize, usize)>) {
        for (i, (&d, &r)) in draft.iter().zip(&self.right).enumerate() {
            out.push((i, if r != d { r } else { (d + 2) % self.vocab }));
        }
    }

    fn name(&self) -> &'static str {
        "branching"
    }
}

#[test]
fn a_session_verifying_draft_trees_equals_plain_decoding() {
    let path = ferrox_hub::ensure_model("qwen2.5-coder:0.5b-instruct").unwrap();
    let (dec, tok) = common::load_with_tokenizer(&path);
    let text = render_prompt(
        &tok,
        &[Message::user(
            "Name three rivers of Europe and one fact about each.",
        )],
        true,
    )
    .unwrap();
    let prompt = tok.encode(&text, false, true);
    for (temp, seed) in [(0.0, 0), (0.9, 7)] {
        let p = common::batch_params(temp, seed, 40);
        let want = common::alone(&dec, &tok, 512, &prompt, &p).tokens;
        let mut s = Session::new(&dec, &tok, 512);
        let drafter = Branching {
            prompt: prompt.len(),
            plain: want.clone(),
            vocab: dec.vocab_size(),
            right: Vec::new(),
        };
        s.set_speculation(common::fixed_speculation(Box::new(drafter), 4));
        let mut sampler = Sampler::new(p.sampler.clone());
        let out = s.generate(&prompt, &p.limits, &mut sampler, |_| true);
        assert_eq!(out.tokens, want, "temperature {temp}");
        // Branches were verified and kept: every third chain token is wrong and its branch
        // right, so most rounds leave the chain there.
        let st = out.spec;
        assert!(
            st.branches_kept > 5 && st.branches_kept == st.branches,
            "temperature {temp}: {st:?}"
        );
        assert!(st.accepted > st.verify_calls, "{st:?}");
        // The session's cache holds the kept branches where they belong: a next turn that
        // reuses it decodes as a fresh session does.
        let mut more = s.history().to_vec();
        more.extend(tok.encode("\nOne more?", false, true));
        s.set_speculation(None);
        let p2 = common::batch_params(0.0, 0, 8);
        let again = s.generate(
            &more,
            &p2.limits,
            &mut Sampler::new(p2.sampler.clone()),
            |_| true,
        );
        assert!(again.prompt_tokens < more.len(), "the prefix was reused");
        assert_eq!(
            again.tokens,
            common::alone(&dec, &tok, 512, &more, &p2).tokens
        );
    }
}
