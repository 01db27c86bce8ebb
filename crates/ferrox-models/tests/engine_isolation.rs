//! Failure isolation in the engine (tiny GGUF models with tokenizers, KV and recurrent
//! layers): a request whose step panics mid-generation fails alone, with an error; the other
//! requests in the same steps produce exactly the text of an undisturbed run, drafts and all;
//! the engine keeps serving; input the model cannot take is refused at admission.

mod common;
use ferrox_models::decoder::Decoder;
use ferrox_models::engine::{AdmitError, BatchEngine, BatchEvent, BatchParams};
use ferrox_models::generate::{GenerateParams, Session, StopReason};
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_tokenizer::{TokenId, Tokenizer};
use std::collections::HashMap;

fn model(name: &str) -> (Decoder, Tokenizer) {
    common::load_with_tokenizer(&common::tiny::tiny_gguf(name))
}

fn params(max: usize) -> BatchParams {
    common::batch_params(0.7, 11, max)
}

/// The long prompt reaches this position, the short ones never do: the injected fault hits
/// the long one a few tokens into its answer.
const FAULT_AT: usize = 44;

fn prompts() -> Vec<(Vec<TokenId>, usize)> {
    let ramp = |from: usize, n: usize| (0..n).map(|i| 3 + (from + 7 * i) % 500).collect();
    vec![
        (ramp(1, 10), 20),
        // Repeats itself, so drafts are proposed and accepted.
        ([ramp(5, 20), ramp(5, 20)].concat(), 12),
        (ramp(9, 8), 20),
    ]
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Outcome {
    text: String,
    error: Option<String>,
    stop: Option<StopReason>,
    /// Generations running in the step that failed this one.
    running_at_error: usize,
}

/// Every prompt in a three-slot engine, all admitted at once, stepped to the end.
fn run(
    eng: &mut BatchEngine<'_>,
    prompts: &[(Vec<TokenId>, usize)],
    first_id: u64,
) -> Vec<Outcome> {
    for (i, (p, max)) in prompts.iter().enumerate() {
        eng.admit(first_id + i as u64, p, &params(*max)).unwrap();
    }
    let mut out: HashMap<u64, Outcome> = HashMap::new();
    while eng.active() > 0 {
        let running = eng.active();
        eng.step(|id, ev| {
            let o = out.entry(id).or_default();
            match ev {
                BatchEvent::Text(t) => o.text.push_str(&t),
                BatchEvent::Error(e) => {
                    o.error = Some(e);
                    o.running_at_error = running;
                }
                BatchEvent::Done { stop, .. } => o.stop = Some(stop),
                BatchEvent::Logprob(_) => {}
            }
        });
    }
    (0..prompts.len() as u64)
        .map(|i| out.remove(&(first_id + i)).unwrap_or_default())
        .collect()
}

fn check_isolation(name: &str) {
    let (dec, tok) = model(name);
    let new_engine = || {
        let mut e = BatchEngine::new(&dec, &tok, 3, 128);
        e.fix_draft_len(4);
        e
    };
    let prompts = prompts();
    let clean = run(&mut new_engine(), &prompts, 0);
    assert!(
        clean
            .iter()
            .all(|o| o.error.is_none() && !o.text.is_empty()),
        "{clean:?}"
    );

    let mut eng = new_engine();
    eng.inject_fault(|_, pos| pos >= FAULT_AT);
    let faulty = run(&mut eng, &prompts, 0);
    let culprit = &faulty[1];
    assert_eq!(
        culprit.stop,
        Some(StopReason::Failed),
        "{name}: {culprit:?}"
    );
    assert!(
        culprit.error.as_deref().unwrap().contains("engine failed"),
        "{culprit:?}"
    );
    // It failed in a step it shared with the others.
    assert_eq!(culprit.running_at_error, 3, "{name}");
    // It had streamed part of its answer before the fault (mid-stream).
    assert!(!culprit.text.is_empty() && clean[1].text.starts_with(&culprit.text));
    assert_eq!(
        [&faulty[0], &faulty[2]],
        [&clean[0], &clean[2]],
        "{name}: others changed"
    );
    assert!(eng.stats.steps > 0);

    // The engine keeps serving: the same requests again (the faulty one fails again).
    let again = run(&mut eng, &prompts, 10);
    assert_eq!(
        [&again[0], &again[2]],
        [&clean[0], &clean[2]],
        "{name}: after the fault"
    );
    assert_eq!(again[1].stop, Some(StopReason::Failed));
}

#[test]
fn a_panicking_request_fails_alone_kv_layers() {
    check_isolation("llama");
}

#[test]
fn a_panicking_request_fails_alone_recurrent_layers() {
    check_isolation("qwen3_next");
}

#[test]
fn bad_input_is_refused_at_admission() {
    let (dec, tok) = model("llama");
    let mut eng = BatchEngine::new(&dec, &tok, 2, 64);
    let vocab = dec.embed.rows();
    let e = eng.admit(0, &[1, vocab, 2], &params(4)).unwrap_err();
    assert_eq!(e, AdmitError::BadToken { id: vocab, vocab });
    let e = eng.admit(1, &[1; 64], &params(4)).unwrap_err();
    assert!(matches!(e, AdmitError::TooLong { .. }), "{e:?}");
    assert_eq!(eng.active(), 0);
}

/// A one-slot session (the CLI) reports the failure as an error, not a panic.
#[test]
fn a_session_reports_the_failure() {
    let (dec, tok) = model("llama");
    let mut s = Session::new(&dec, &tok, 64);
    let gp = GenerateParams {
        max_tokens: 4,
        ..GenerateParams::default()
    };
    let vocab = dec.embed.rows();
    let mut sampler = Sampler::new(SamplerConfig::greedy());
    let out = s.generate(&[1, vocab + 5], &gp, &mut sampler, |_| true);
    assert_eq!(out.stop, StopReason::Failed);
    assert!(out.error.unwrap().contains("outside the vocabulary"));
    // The session goes on.
    let out = s.generate(&[1, 5, 9], &gp, &mut sampler, |_| true);
    assert_eq!((out.stop, out.tokens.len()), (StopReason::MaxTokens, 4));
}
