//! Speculative decoding on the real qwen2.5-coder:0.5b-instruct: greedy speculation is token
//! for token plain greedy for 256 new tokens on every code-edit workload prompt (the issue's
//! acceptance test), and `Session` keeps the stop rules, streaming and warm-cache chat turns
//! identical with speculation on.

mod common;
use common::fixture;
use ferrox_models::decoder::Decoder;
use ferrox_models::generate::{GenerateParams, Session, StopReason};
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{AdaptiveDraft, LongestMatchDrafter, Speculation};
use ferrox_tokenizer::template::{render_prompt, Message};
use ferrox_tokenizer::{TokenId, Tokenizer};
use std::time::Instant;

fn load() -> (Decoder, Tokenizer) {
    let path = ferrox_hub::ensure_model("qwen2.5-coder:0.5b-instruct")
        .unwrap_or_else(|e| panic!("model: {e}"));
    let dec = Decoder::load(&path).unwrap();
    let tok = Tokenizer::from_gguf(dec.gguf.as_ref().unwrap()).unwrap();
    (dec, tok)
}

fn chat_ids(tok: &Tokenizer, messages: &[Message]) -> Vec<TokenId> {
    let text = render_prompt(tok, messages, true).unwrap();
    tok.encode(&text, false, true)
}

fn spec() -> Option<Speculation> {
    Some(Speculation::new(Box::new(LongestMatchDrafter::new(2)), 16))
}

#[test]
fn greedy_speculation_equals_plain_greedy_on_every_workload_prompt() {
    let (dec, tok) = load();
    let workload = std::fs::read_to_string(fixture("bench/code-edit.jsonl")).unwrap();
    let params = GenerateParams {
        max_tokens: 256,
        ignore_eog: true,
        ..GenerateParams::default()
    };
    // One session: the second run of a prompt reuses its cached prefill.
    let mut s = Session::new(&dec, &tok, 4096);
    let t0 = Instant::now();
    let (mut plain_secs, mut spec_secs) = (0.0, 0.0);
    let mut prompts = 0;
    for line in workload.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let body = format!(
            "{}\n\n```python\n{}```",
            v["instruction"].as_str().unwrap(),
            v["code"].as_str().unwrap()
        );
        let ids = chat_ids(&tok, &[Message::user(body)]);
        s.set_speculation(None);
        let plain = s.generate(
            &ids,
            &params,
            &mut Sampler::new(SamplerConfig::greedy()),
            |_| true,
        );
        s.set_speculation(spec());
        let sp = s.generate(
            &ids,
            &params,
            &mut Sampler::new(SamplerConfig::greedy()),
            |_| true,
        );
        plain_secs += plain.gen_time.as_secs_f64();
        spec_secs += sp.gen_time.as_secs_f64();
        eprintln!(
            "{}: {} tokens, plain {:.1} s, speculative {:.1} s ({} calls, {} of {} drafted accepted)",
            v["id"],
            sp.gen_tokens,
            plain.gen_time.as_secs_f64(),
            sp.gen_time.as_secs_f64(),
            sp.spec.calls,
            sp.spec.accepted,
            sp.spec.drafted
        );
        assert_eq!(plain.tokens.len(), 256);
        assert_eq!(sp.tokens, plain.tokens, "{}", v["id"]);
        assert_eq!(sp.text, plain.text);
        prompts += 1;
    }
    assert_eq!(prompts, 10);
    eprintln!(
        "{prompts} prompts in {:.0} s: plain decode {plain_secs:.0} s, speculative {spec_secs:.0} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Stop strings, EOG, the token budget and cancellation stop speculative generation at the
/// same token as plain generation, only committed text is streamed, and the next chat turn
/// continues from the same cache state.
#[test]
fn session_stop_rules_and_chat_turns_match_plain() {
    let (dec, tok) = load();
    let run = |speculate: bool| {
        let mut s = Session::new(&dec, &tok, 4096);
        if speculate {
            s.set_speculation(spec());
        }
        let mut results = Vec::new();
        let mut messages = vec![Message::user(
            "Repeat this line exactly three times, one per line: the quick brown fox jumps over the lazy dog",
        )];
        let cases = [
            // Stop string inside a copied (drafted) stretch.
            GenerateParams {
                max_tokens: 80,
                stop: vec!["over the lazy".into()],
                ignore_eog: false,
                constraint: None,
                keep_special: false,
            },
            // Token budget in the middle of a draft.
            GenerateParams {
                max_tokens: 7,
                stop: vec![],
                ignore_eog: false,
                constraint: None,
                keep_special: false,
            },
            // Natural end of generation.
            GenerateParams {
                max_tokens: 120,
                stop: vec![],
                ignore_eog: false,
                constraint: None,
                keep_special: false,
            },
        ];
        for params in &cases {
            let ids = chat_ids(&tok, &messages);
            let mut streamed = String::new();
            let out = s.generate(
                &ids,
                params,
                &mut Sampler::new(SamplerConfig::greedy()),
                |t| {
                    streamed.push_str(t);
                    true
                },
            );
            assert_eq!(streamed, out.text, "only committed text is streamed");
            results.push((
                out.tokens.clone(),
                out.text.clone(),
                out.stop,
                out.prompt_tokens,
            ));
            results.push((s.history().to_vec(), String::new(), out.stop, 0));
            messages.push(Message::assistant(out.text));
            messages.push(Message::user("Once more, please."));
        }
        // Cancellation after the first streamed piece.
        let ids = chat_ids(&tok, &messages);
        let mut pieces = 0;
        let out = s.generate(
            &ids,
            &cases[2],
            &mut Sampler::new(SamplerConfig::greedy()),
            |_| {
                pieces += 1;
                pieces < 3
            },
        );
        results.push((out.tokens, out.text, out.stop, out.prompt_tokens));
        results
    };
    let plain = run(false);
    let spec = run(true);
    let stops: Vec<StopReason> = plain.iter().step_by(2).map(|r| r.2).collect();
    eprintln!(
        "stops: {stops:?}, texts: {:?}",
        plain.iter().step_by(2).map(|r| &r.1).collect::<Vec<_>>()
    );
    assert_eq!(stops[0], StopReason::StopString);
    assert_eq!(
        stops[1..],
        [
            StopReason::MaxTokens,
            StopReason::Eog,
            StopReason::Cancelled
        ]
    );
    assert_eq!(plain, spec);
}

/// Sampling with speculation on gives, for a seed, exactly the plain sampled tokens (one draw
/// of the random stream per committed token), and its text is the decode of its tokens.
#[test]
fn sampled_speculation_equals_plain_sampling_for_a_seed() {
    let (dec, tok) = load();
    let ids = chat_ids(
        &tok,
        &[Message::user(
            "Add type hints: def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b",
        )],
    );
    let params = GenerateParams {
        max_tokens: 60,
        ..GenerateParams::default()
    };
    let cfg = SamplerConfig {
        temperature: 0.7,
        seed: 11,
        ..SamplerConfig::default()
    };
    let gen = |speculate: bool| {
        let mut s = Session::new(&dec, &tok, 4096);
        if speculate {
            // A fixed draft length: the adaptive controller times forwards, and on a loaded
            // machine may rightly decide not to draft at all in 60 tokens.
            let mut sp = Speculation::new(Box::new(LongestMatchDrafter::new(2)), 4);
            sp.adaptive = AdaptiveDraft::fixed(4);
            s.set_speculation(Some(sp));
        }
        s.generate(&ids, &params, &mut Sampler::new(cfg.clone()), |_| true)
    };
    let (a, b) = (gen(true), gen(false));
    assert_eq!(a.tokens, b.tokens);
    assert!(a.spec.accepted > 0, "{:?}", a.spec);
    assert!(!a.tokens.is_empty() && a.tokens.len() <= 60);
    assert_eq!(a.text, tok.decode_skip_special(&a.tokens));
    eprintln!("{:?} {:?}", a.spec, a.text);
}
