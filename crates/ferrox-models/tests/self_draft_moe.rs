//! Self-drafting with fewer experts (`speculative::ReducedExperts`): a mixture-of-experts
//! model drafts for itself with one routed expert per token, in its own caches. On the tiny
//! MoE checkpoints (as llama.cpp writes them) greedy and seeded sampling give plain decoding's
//! tokens, the reduced forward really drafts and is sometimes kept and sometimes not, a
//! budget of every expert is the full forward bit for bit, and models it cannot help (dense,
//! recurrent) are not drafted for.

mod common;
use common::tiny::{tiny_gguf, tiny_reference};
use common::{fixed_speculation, ids, read_json, tokens_of};
use ferrox_models::blocks::Experts;
use ferrox_models::decoder::{Decoder, SeqBatch, OWN_CACHES};
use ferrox_models::generate::Session;
use ferrox_models::sampling::SamplerConfig;
use ferrox_models::speculative::{Beside, LongestMatchDrafter, ReducedExperts, Speculation};

fn speculation() -> Option<Speculation> {
    let lookup = Box::new(LongestMatchDrafter::new(2));
    fixed_speculation(Box::new(Beside::with(ReducedExperts::new(1), lookup)), 3)
}

fn run(s: &mut Session<'_>, prompt: &[usize], config: SamplerConfig) -> Vec<usize> {
    tokens_of(s, prompt, config, 24)
}

#[test]
fn fewer_experts_draft_and_the_output_stays_plain() {
    let sampled = SamplerConfig {
        temperature: 0.9,
        seed: 11,
        ..SamplerConfig::default()
    };
    for arch in ["qwen3_moe", "glm4_moe", "deepseek_v3", "olmoe", "mixtral"] {
        let dec = Decoder::load(tiny_gguf(arch)).unwrap();
        assert!(ReducedExperts::fits(&dec), "{arch}");
        let prompt = ids(&read_json(&tiny_reference(arch).join("input_ids.json")));
        let (mut drafted, mut accepted) = (0, 0);
        for config in [SamplerConfig::greedy(), sampled.clone()] {
            let want = run(
                &mut Session::without_tokenizer(&dec, 256),
                &prompt,
                config.clone(),
            );
            let mut spec = Session::without_tokenizer(&dec, 256);
            spec.set_speculation(speculation());
            assert_eq!(run(&mut spec, &prompt, config), want, "{arch}");
            for c in spec
                .drafter_counts()
                .iter()
                .filter(|c| c.drafter == "experts")
            {
                drafted += c.drafted;
                accepted += c.accepted;
            }
        }
        eprintln!("{arch}: one expert drafted {drafted} tokens, {accepted} kept");
        assert!(drafted > 0, "{arch}: the reduced forward never drafted");
        assert!(accepted < drafted, "{arch}: no draft rejected");
    }
}

#[test]
fn a_budget_of_every_expert_is_the_full_forward() {
    let dec = Decoder::load(tiny_gguf("qwen3_moe")).unwrap();
    let prompt = ids(&read_json(
        &tiny_reference("qwen3_moe").join("input_ids.json"),
    ));
    let n_used = dec.config.moe.n_experts_active;
    let full = dec.forward_from(&prompt, 0, &mut dec.new_caches(), prompt.len() - 1);
    let reduced = |experts: usize| {
        let (mut caches, mut got) = (dec.new_caches(), Vec::new());
        let seq = SeqBatch {
            tokens: &prompt,
            pos: 0,
            caches: &mut caches,
            first_logit_row: prompt.len() - 1,
            key: OWN_CACHES,
            tree: None,
        };
        dec.forward_experts(seq, &mut got, Experts::AtMost(experts));
        got
    };
    assert_eq!(reduced(n_used), full[0]);
    assert_ne!(
        reduced(1),
        full[0],
        "one expert computes the same as {n_used}"
    );
}

#[test]
fn models_without_routed_experts_are_not_drafted_for() {
    for arch in ["llama", "qwen3_next"] {
        let dec = Decoder::load(tiny_gguf(arch)).unwrap();
        assert!(!ReducedExperts::fits(&dec), "{arch}");
    }
}
