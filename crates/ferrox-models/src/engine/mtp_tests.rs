//! Several slots drafting with an MTP block in one batched forward: each slot's hidden rows
//! reach its own drafter (the rows of a step are laid out slot after slot), and every request
//! gets plain decoding's tokens. The model: `tests/fixtures/hf-tiny-mtp` (its block was trained
//! on greedy runs after the first 12 input ids, so drafts get accepted there).

use super::sink::{JobEnd, Sink};
use super::slot::Slot;
use super::{BatchEngine, BatchParams, DrafterCount, GenerateParams};
use crate::decoder::Decoder;
use crate::sampling::{Sampler, SamplerConfig, TokenLogprob};
use crate::speculative::{AdaptiveDraft, Drafter, MtpDrafter, Speculation};
use std::collections::HashMap;

struct Nothing;

impl Drafter for Nothing {
    fn propose_into(&mut self, _: &[usize], _: usize, _: &mut Vec<usize>) {}
    fn name(&self) -> &'static str {
        "nothing"
    }
}

#[derive(Default)]
struct Tokens {
    got: HashMap<u64, Vec<usize>>,
    done: usize,
}

impl Sink for Tokens {
    fn token(&mut self, id: u64, token: usize, _: Option<TokenLogprob>, _: String) -> bool {
        self.got.entry(id).or_default().push(token);
        true
    }
    fn done(&mut self, _: u64, _: JobEnd) {
        self.done += 1;
    }
}

fn plain(dec: &Decoder, prompt: &[usize], n: usize) -> Vec<usize> {
    let mut s = Sampler::new(SamplerConfig::greedy());
    let mut caches = dec.new_caches();
    let mut logits = dec.forward_from(prompt, 0, &mut caches, prompt.len() - 1);
    let mut out = Vec::new();
    for p in prompt.len()..prompt.len() + n {
        let t = s.sample(logits.last().unwrap(), &[]);
        out.push(t);
        logits = vec![dec.forward_token(t, p, &mut caches)];
    }
    out
}

#[test]
fn slots_drafting_with_the_block_in_one_batch_equal_plain_decoding() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-mtp");
    for arch in ["deepseek_v3", "glm4_moe"] {
        let dec = Decoder::load(dir.join(arch)).unwrap();
        let text = std::fs::read_to_string(dir.join(arch).join("input_ids.json")).unwrap();
        let input: Vec<usize> = serde_json::from_str(&text).unwrap();
        // The learned prompt, a shorter and a longer one: rows of other lengths around it.
        let prompts = [input[..12].to_vec(), input[3..9].to_vec(), input.clone()];
        let (got, accepted) = run(&dec, &prompts, 3);
        for (id, p) in prompts.iter().enumerate() {
            assert_eq!(
                got[&(id as u64)],
                plain(&dec, p, 20),
                "{arch}: request {id}"
            );
        }
        // Each slot drafted from its own rows: as many drafts accepted as when each request
        // runs alone (a slot reading another's rows would draft otherwise).
        let alone: u64 = prompts
            .iter()
            .map(|p| run(&dec, std::slice::from_ref(p), 1).1)
            .sum();
        assert!(accepted > 0, "{arch}: nothing accepted");
        assert_eq!(
            accepted, alone,
            "{arch}: batched and lone acceptance differ"
        );
    }
}

/// `prompts` through an engine of `slots` slots drafting with the block (joining one step
/// apart), 20 greedy tokens each: the tokens per request and the drafts accepted.
fn run(dec: &Decoder, prompts: &[Vec<usize>], slots: usize) -> (HashMap<u64, Vec<usize>>, u64) {
    let slots = (0..slots)
        .map(|_| {
            let mut spec = Speculation::new(Box::new(MtpDrafter::new(Box::new(Nothing))), 3);
            spec.adaptive = AdaptiveDraft::fixed(3);
            Slot::new(dec.new_caches(), Some(spec))
        })
        .collect();
    let mut eng = BatchEngine::with_slots(dec, None, 256, slots);
    eng.prefill_chunk = 5;
    let params = BatchParams {
        sampler: SamplerConfig::greedy(),
        logprobs: None,
        limits: GenerateParams {
            max_tokens: 20,
            ..GenerateParams::default()
        },
    };
    let mut sink = Tokens::default();
    for (id, p) in prompts.iter().enumerate() {
        eng.admit(id as u64, p, &params).unwrap();
        eng.step_with(&mut sink);
    }
    while sink.done < prompts.len() {
        eng.step_with(&mut sink);
    }
    // Every draft was the block's (its fallback drafts nothing), booked under its name.
    if eng.stats.drafted > 0 {
        let mtp = DrafterCount {
            drafter: "mtp",
            drafted: eng.stats.drafted,
            accepted: eng.stats.accepted,
        };
        assert_eq!(eng.drafters, [mtp]);
    }
    (sink.got, eng.stats.accepted)
}
