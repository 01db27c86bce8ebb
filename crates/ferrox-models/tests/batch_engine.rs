//! The continuous-batching engine on a real model: several requests joining at different
//! steps, with and without prompt-lookup drafts, produce exactly the text and stop reason a
//! lone `Session` produces (greedy and seeded sampling), and slots are freed and reused.

mod common;
use ferrox_models::decoder::Decoder;
use ferrox_models::engine::{AdmitError, BatchEngine, BatchEvent, BatchParams};
use ferrox_models::generate::StopReason;
use ferrox_models::sampling::TokenLogprob;
use ferrox_tokenizer::{TokenId, Tokenizer};
use std::collections::HashMap;

fn model() -> (Decoder, Tokenizer) {
    common::load_with_tokenizer(&ferrox_hub::ensure_model("qwen2.5-coder:0.5b-instruct").unwrap())
}

fn ids(tok: &Tokenizer, text: &str) -> Vec<TokenId> {
    tok.encode(text, true, true)
}

const PROMPTS: [&str; 4] = [
    "def is_prime(n):\n    \"\"\"Return True if n is prime.\"\"\"\n",
    "The three primary colors are",
    "import os\nimport sys\n\ndef main():\n    for path in sys.argv[1:]:\n        if os.path.isdir(path):\n            print(path)\n\n# The same function, with comments:\ndef main():\n",
    "List of planets: Mercury, Venus,",
];

/// Stops at three newlines, with two log-probabilities a token.
fn params(temp: f32, seed: u64, max: usize) -> BatchParams {
    let mut p = common::batch_params(temp, seed, max);
    p.limits.stop = vec!["\n\n\n".into()];
    p.logprobs = Some(2);
    p
}

fn alone(
    dec: &Decoder,
    tok: &Tokenizer,
    prompt: &[usize],
    p: &BatchParams,
) -> (String, StopReason) {
    let out = common::alone(dec, tok, 512, prompt, p);
    (out.text, out.stop)
}

/// Each prompt's text and stop, and the log-probabilities of its tokens.
type Outcome = (Vec<(String, StopReason)>, Vec<Vec<TokenLogprob>>);

fn batched(
    dec: &Decoder,
    tok: &Tokenizer,
    prompts: &[Vec<usize>],
    p: &BatchParams,
    max_draft: usize,
) -> Outcome {
    let mut eng = BatchEngine::new(dec, tok, 3, 512);
    eng.max_draft = max_draft;
    eng.prefill_chunk = 16;
    let mut text: HashMap<u64, String> = HashMap::new();
    let mut done: HashMap<u64, StopReason> = HashMap::new();
    let mut lps: HashMap<u64, Vec<TokenLogprob>> = HashMap::new();
    let mut waiting: Vec<u64> = (0..prompts.len() as u64).collect();
    let mut step = 0;
    while done.len() < prompts.len() {
        // Requests join one per step while slots are free.
        if let Some(&id) = waiting.first() {
            match eng.admit(id, &prompts[id as usize], p) {
                Ok(()) => {
                    waiting.remove(0);
                }
                Err(AdmitError::Busy) => {}
                Err(e) => panic!("{e}"),
            }
        }
        eng.step(|id, ev| match ev {
            BatchEvent::Logprob(l) => lps.entry(id).or_default().push(l),
            BatchEvent::Text(t) => text.entry(id).or_default().push_str(&t),
            BatchEvent::Error(e) => panic!("{e}"),
            BatchEvent::Done { stop, .. } => {
                done.insert(id, stop);
            }
        });
        step += 1;
        assert!(step < 10_000, "engine does not finish");
    }
    let ids = 0..prompts.len() as u64;
    (
        ids.clone()
            .map(|id| (text.remove(&id).unwrap_or_default(), done[&id]))
            .collect(),
        ids.map(|id| lps.remove(&id).unwrap_or_default()).collect(),
    )
}

#[test]
fn batched_generation_equals_a_lone_session() {
    let (dec, tok) = model();
    let prompts: Vec<Vec<usize>> = PROMPTS.iter().map(|t| ids(&tok, t)).collect();
    for (temp, seed) in [(0.0, 0), (0.9, 42)] {
        let p = params(temp, seed, 40);
        let want: Vec<_> = prompts.iter().map(|q| alone(&dec, &tok, q, &p)).collect();
        let mut plain_lps = None;
        for draft in [0, 8] {
            let (got, lps) = batched(&dec, &tok, &prompts, &p, draft);
            assert_eq!(got, want, "temperature {temp}, max draft {draft}");
            // One log-probability per committed token, the same bits with drafts as without.
            for (l, (text, _)) in lps.iter().zip(&got) {
                assert!(!l.is_empty() || text.is_empty());
                assert!(l.iter().all(|t| t.top.len() == 2 && t.logprob <= 0.0));
            }
            match &plain_lps {
                None => plain_lps = Some(lps),
                Some(p) => assert_eq!(p, &lps, "temperature {temp}: log-probabilities"),
            }
        }
    }
}

#[test]
fn drafts_are_accepted_on_repetitive_text_and_slots_free_up() {
    let (dec, tok) = model();
    let prompt = ids(&tok, PROMPTS[2]);
    let mut eng = BatchEngine::new(&dec, &tok, 1, 256);
    eng.fix_draft_len(8);
    let p = params(0.0, 0, 48);
    eng.admit(7, &prompt, &p).unwrap();
    assert_eq!(eng.admit(8, &prompt, &p), Err(AdmitError::Busy));
    let mut events = 0;
    while eng.active() > 0 {
        eng.step(|_, _| events += 1);
    }
    let s = eng.stats;
    assert!(
        s.accepted > 0,
        "prompt lookup should hit on a restated function: {s:?}"
    );
    assert!(s.steps < 48, "speculation should save forwards: {s:?}");
    // Cancelling frees the slot at once.
    eng.admit(9, &prompt, &p).unwrap();
    eng.step(|_, _| {});
    assert!(eng.cancel(9));
    assert_eq!(eng.active(), 0);
    let long = vec![prompt[0]; 300];
    assert!(matches!(
        eng.admit(10, &long, &p),
        Err(AdmitError::TooLong { .. })
    ));
}

/// Three requests of one prompt admitted together (`n` = 3): the prompt is evaluated once and
/// copied into the other slots, and every text equals a lone session's (greedy and seeded).
#[test]
fn same_prompt_requests_share_the_prefill() {
    let (dec, tok) = model();
    let prompt = ids(&tok, PROMPTS[2]);
    for (temp, seed) in [(0.0, 0), (0.9, 5)] {
        let p = params(temp, seed, 12);
        let want = alone(&dec, &tok, &prompt, &p);
        let mut eng = BatchEngine::new(&dec, &tok, 3, 512);
        eng.max_draft = 0;
        for id in 0..3 {
            eng.admit(id, &prompt, &p).unwrap();
        }
        let mut text: HashMap<u64, String> = HashMap::new();
        let mut stops = HashMap::new();
        while eng.active() > 0 {
            eng.step(|id, ev| match ev {
                BatchEvent::Text(t) => text.entry(id).or_default().push_str(&t),
                BatchEvent::Done { stop, .. } => {
                    stops.insert(id, stop);
                }
                BatchEvent::Logprob(_) | BatchEvent::Error(_) => {}
            });
        }
        for id in 0..3 {
            let got = (text.remove(&id).unwrap_or_default(), stops[&id]);
            assert_eq!(got, want, "request {id}, temperature {temp}");
        }
        // One full prefill plus each fork's last prompt token, then at most 12 decode rows each.
        let rows = eng.stats.rows as usize;
        assert!(
            rows <= prompt.len() + 2 + 3 * 12,
            "{rows} rows for a {}-token prompt",
            prompt.len()
        );
    }
}

/// Runs `prompts` one after another in a one-slot engine (each evicts the previous from the
/// slot); each one's text and how many prompt tokens it reused.
fn one_slot_in_turn(
    dec: &Decoder,
    tok: &Tokenizer,
    prompts: &[Vec<usize>],
    cache_bytes: usize,
) -> Vec<(String, usize)> {
    let mut eng = BatchEngine::new(dec, tok, 1, 512);
    eng.set_prefix_cache(cache_bytes);
    let p = params(0.0, 1, 24);
    let mut out = Vec::new();
    for (id, prompt) in prompts.iter().enumerate() {
        eng.admit(id as u64, prompt, &p).unwrap();
        let (mut text, mut cached) = (String::new(), None);
        while cached.is_none() {
            eng.step(|_, ev| match ev {
                BatchEvent::Text(t) => text.push_str(&t),
                BatchEvent::Done { cached_tokens, .. } => cached = Some(cached_tokens),
                _ => {}
            });
        }
        out.push((text, cached.unwrap_or(0)));
    }
    out
}

/// The prefix cache across requests: a prompt sharing a long prefix with an earlier request
/// whose slot was since taken by another prompt copies the prefix's keys and values from the
/// tree (whole 16-token blocks) and generates exactly what it generates without the cache.
#[test]
fn prefix_cache_restores_an_evicted_prefix_exactly() {
    let (dec, tok) = model();
    let shared = PROMPTS[2].repeat(3);
    let prompts = vec![
        ids(&tok, &format!("{shared}    # first variant\n")),
        ids(&tok, PROMPTS[3]),
        ids(&tok, &format!("{shared}    # second variant\n")),
    ];
    let with = one_slot_in_turn(&dec, &tok, &prompts, 64 << 20);
    let without = one_slot_in_turn(&dec, &tok, &prompts, 0);
    for (a, b) in with.iter().zip(&without) {
        assert_eq!(a.0, b.0, "same text with and without the prefix cache");
    }
    let common = prompts[0]
        .iter()
        .zip(&prompts[2])
        .take_while(|(a, b)| a == b)
        .count();
    assert_eq!(without[2].1, 0, "no cache: the slot held another prompt");
    assert_eq!(
        with[2].1,
        common / 16 * 16,
        "whole blocks of the shared prefix"
    );
    assert!(with[2].1 >= 100, "{}", with[2].1);
}

/// Runs request `id` alone in `eng` to its end; its text.
fn run_alone(eng: &mut BatchEngine, id: u64, prompt: &[usize], p: &BatchParams) -> String {
    eng.admit(id, prompt, p).unwrap();
    let mut text = String::new();
    while eng.active() > 0 {
        eng.step(|_, ev| match ev {
            BatchEvent::Text(t) => text.push_str(&t),
            BatchEvent::Error(e) => panic!("{e}"),
            _ => {}
        });
    }
    text
}

/// A repeated request (agents repeat their turns) has its earlier output drafted from the
/// engine's recall store: nearly every token accepted, the same text; with the store off,
/// the same request drafts only from its own context.
#[test]
fn finished_generations_are_recalled_by_a_repeated_request() {
    let (dec, tok) = model();
    let prompt = ids(&tok, PROMPTS[1]);
    let p = params(0.0, 0, 40);
    let mut accepted = Vec::new();
    for recall in [true, false] {
        let mut eng = BatchEngine::new(&dec, &tok, 1, 512);
        eng.fix_draft_len(8);
        if !recall {
            eng.set_recall(0);
        }
        let first = run_alone(&mut eng, 1, &prompt, &p);
        let before = eng.stats;
        // Another prompt in between: the slot's own history no longer holds the answer.
        run_alone(&mut eng, 2, &ids(&tok, PROMPTS[3]), &p);
        let mid = eng.stats;
        let again = run_alone(&mut eng, 3, &prompt, &p);
        assert_eq!(
            again, first,
            "recall {recall}: a repeat gives the same text"
        );
        let (s, m) = (eng.stats, mid);
        eprintln!(
            "recall {recall}: first {before:?}, repeat accepted {} in {} steps",
            s.accepted - m.accepted,
            s.steps - m.steps
        );
        accepted.push((s.accepted - m.accepted, s.steps - m.steps));
        // Per drafter: all of it the slot's recall drafter's (the model has no MTP block).
        let by: (u64, u64) = eng.drafters.iter().fold((0, 0), |(d, a), c| {
            assert_eq!(c.drafter, "recall", "{:?}", eng.drafters);
            (d + c.drafted, a + c.accepted)
        });
        assert_eq!(by, (s.drafted, s.accepted), "{:?}", eng.drafters);
    }
    let ((acc_on, steps_on), (acc_off, _)) = (accepted[0], accepted[1]);
    let first = run_alone(&mut BatchEngine::new(&dec, &tok, 1, 512), 9, &prompt, &p);
    let n = tok.encode(&first, false, false).len() as u64;
    assert!(
        acc_on + 4 >= n.saturating_sub(1),
        "recalled {acc_on} of ~{n} tokens"
    );
    assert!(
        acc_on > acc_off,
        "the store must add accepted drafts: {acc_on} vs {acc_off}"
    );
    assert!(
        steps_on * 3 <= n + 3,
        "a repeat of ~{n} tokens took {steps_on} steps"
    );
}
