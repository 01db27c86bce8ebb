//! A recurrent state (Qwen3-Next's Gated DeltaNet layers) cannot be truncated like a KV cache;
//! every way the engine cuts a cache back must still give output bit-identical to plain
//! decoding: a rollback inside a verify (rejected drafts), a reused prefix shorter than the
//! cached history, and sequences batched together (continuous batching, chunked prefill);
//! with every row kept (the decoder's own caches) and with the engine's bounded window.
//! On the hf-tiny checkpoint and its GGUF (whose synthetic vocabulary gives the engine a
//! tokenizer).

mod common;
use common::tiny::{tiny_gguf, tiny_reference};
use common::{batch_params, ids, read_json};
use ferrox_core::cache::KvCache;
use ferrox_models::decoder::Decoder;
use ferrox_models::engine::{BatchEngine, BatchEvent, BatchParams, StopReason};
use ferrox_models::generate::Session;
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{AdaptiveDraft, Drafter, Speculation};
use ferrox_tokenizer::Tokenizer;
use std::collections::HashMap;

fn hf() -> Decoder {
    Decoder::load(tiny_reference("qwen3_next")).unwrap()
}

/// The fixture's 24 input ids.
fn tokens() -> Vec<usize> {
    ids(&read_json(
        &tiny_reference("qwen3_next").join("input_ids.json"),
    ))
}

/// `n` token ids spread over the fixture's 512-token vocabulary (longer than `tokens()`).
fn spread(n: usize) -> Vec<usize> {
    (0..n).map(|i| (i * 37 + 11) % 512).collect()
}

/// Logits of `tokens` in one forward on fresh caches.
fn fresh(dec: &Decoder, tokens: &[usize]) -> Vec<Vec<f32>> {
    let mut caches = dec.new_caches();
    dec.forward_batch(tokens, 0, &mut caches)
}

/// Logits of `t` through `caches`: its first `prefill` tokens in one forward, then one token
/// a forward.
fn stepped(dec: &Decoder, t: &[usize], prefill: usize, caches: &mut [KvCache]) -> Vec<Vec<f32>> {
    let mut rows = if prefill > 0 {
        dec.forward_batch(&t[..prefill], 0, caches)
    } else {
        Vec::new()
    };
    for (p, &tok) in t.iter().enumerate().skip(prefill) {
        rows.push(dec.forward_token(tok, p, caches));
    }
    rows
}

/// Fresh caches after forwards of `t` in chunks ending at each of `ends` (each forward starts
/// where the last ended).
fn forwarded(dec: &Decoder, t: &[usize], ends: &[usize]) -> Vec<KvCache> {
    let mut caches = dec.new_caches();
    let mut start = 0;
    for &end in ends {
        dec.forward_batch(&t[start..end], start, &mut caches);
        start = end;
    }
    caches
}

#[test]
fn rollback_inside_a_forward_replays_from_the_checkpoint() {
    let dec = hf();
    let t = tokens();
    // A verify of 8 rows at 12, of which only 3 are kept: the next forward starts at 15.
    let mut caches = forwarded(&dec, &t, &[12, 20]);
    for c in &mut caches {
        c.truncate(15);
    }
    let mut other: Vec<usize> = t[15..].to_vec();
    other.reverse();
    let got = dec.forward_batch(&other, 15, &mut caches);
    let mut whole = t[..15].to_vec();
    whole.extend_from_slice(&other);
    let want = fresh(&dec, &whole);
    assert_eq!(got, want[15..], "rows after a rollback");
}

#[test]
fn every_cut_point_equals_a_fresh_run() {
    // Cuts before, at and after the checkpoint (the start of the last forward), and at 0:
    // the state is rebuilt from the checkpoint or from zero by replay.
    let dec = hf();
    let t = tokens();
    let want = fresh(&dec, &t);
    for cut in [0, 1, 3, 9, 10, 13, 17, 19] {
        let mut caches = forwarded(&dec, &t, &[10, 18]);
        let row = dec.forward_token(t[18], 18, &mut caches);
        assert_eq!(row, want[18]);
        // The decoder drops positions at or after `cut` itself.
        let got = dec.forward_batch(&t[cut..], cut, &mut caches);
        assert_eq!(got, want[cut..], "cut at {cut}");
    }
}

#[test]
fn recurrent_cache_keeps_rows_and_a_valid_state() {
    let dec = hf();
    let t = tokens();
    let caches = forwarded(&dec, &t, &[7, 9]);
    let c: &KvCache = &caches[0];
    assert_eq!(c.len(), 9);
    assert_eq!((c.state_at(), c.checkpoint_at()), (Some(9), Some(7)));
    // Full attention keeps a plain KV cache.
    assert_eq!(caches[3].state_at(), None);
}

/// The GGUF model with its tokenizer.
fn gguf() -> (Decoder, Tokenizer) {
    common::load_with_tokenizer(&tiny_gguf("qwen3_next"))
}

/// Plain decoding of `prompt` in a fresh session (no speculation, no reuse).
fn alone(dec: &Decoder, tok: &Tokenizer, prompt: &[usize], p: &BatchParams) -> Vec<usize> {
    common::alone(dec, tok, 256, prompt, p).tokens
}

/// Drafts the plain decoding's own continuation with every third token wrong, so each verify
/// keeps a prefix of its draft and rolls back inside the forward.
struct Oracle {
    prompt: usize,
    plain: Vec<usize>,
}

impl Drafter for Oracle {
    fn propose_into(&mut self, history: &[usize], max: usize, out: &mut Vec<usize>) {
        let from = history.len() - self.prompt;
        for (i, &t) in self.plain.iter().enumerate().skip(from).take(max) {
            out.push(if i % 3 == 2 { (t + 1) % 512 } else { t });
        }
    }
    fn name(&self) -> &'static str {
        "oracle"
    }
}

#[test]
fn speculative_session_equals_plain_decoding() {
    let (dec, tok) = gguf();
    let prompt = tokens();
    for (temp, seed) in [(0.0, 0), (0.9, 7)] {
        let p = batch_params(temp, seed, 32);
        let want = alone(&dec, &tok, &prompt, &p);
        let mut s = Session::new(&dec, &tok, 256);
        let oracle = Oracle {
            prompt: prompt.len(),
            plain: want.clone(),
        };
        let mut spec = Speculation::new(Box::new(oracle), 5);
        spec.adaptive = AdaptiveDraft::fixed(5);
        s.set_speculation(Some(spec));
        let out = s.generate(
            &prompt,
            &p.limits,
            &mut Sampler::new(p.sampler.clone()),
            |_| true,
        );
        assert_eq!(out.tokens, want, "temperature {temp}");
        let st = out.spec;
        assert!(
            st.accepted > 0 && st.drafted > st.accepted,
            "verifies should keep part of their drafts: {st:?}"
        );
    }
}

/// A prompt whose second half restates its first (prompt-lookup drafts in the engine).
fn repetitive() -> Vec<usize> {
    let t = tokens();
    let mut p = t.clone();
    p.extend_from_slice(&t[..14]);
    p
}

#[test]
fn prefix_reuse_equals_a_fresh_session() {
    // A session's caches are bounded: its recurrent layers keep rows only from the last
    // forward's start (minus the convolution window), so a reuse cut there or later replays,
    // an earlier one prefills again from 0. Either way the output is plain decoding's.
    let (dec, tok) = gguf();
    let t = tokens();
    let p = batch_params(0.0, 0, 12);
    let mut s = Session::new(&dec, &tok, 256);
    let mut greedy = Sampler::new(SamplerConfig::greedy());
    let run = |s: &mut Session<'_>, prompt: &[usize], greedy: &mut Sampler| {
        let got = s.generate(prompt, &p.limits, greedy, |_| true);
        assert_eq!(got.tokens, alone(&dec, &tok, prompt, &p));
        got.prompt_tokens
    };
    assert_eq!(run(&mut s, &t, &mut greedy), t.len());
    // A chat's next turn: the whole history and more (reuse at the end of the history).
    let h = s.history().to_vec();
    let mut next = h.clone();
    next.extend_from_slice(&t[3..9]);
    assert_eq!(run(&mut s, &next, &mut greedy), 6);
    // Diverging at the last forward's start, where the checkpoint is: reused, no replay.
    let h = s.history().to_vec();
    let mut at = h[..h.len() - 1].to_vec();
    at.push((h[h.len() - 1] + 1) % 512);
    assert_eq!(run(&mut s, &at, &mut greedy), 1);
    // Diverging before it: the rows are gone, the prompt is prefilled again.
    let mut late = s.history()[..at.len() - 3].to_vec();
    late.push(5);
    assert_eq!(run(&mut s, &late, &mut greedy), late.len());
    let mut branch = t[..6].to_vec();
    branch.extend_from_slice(&t[15..20]);
    assert_eq!(run(&mut s, &branch, &mut greedy), branch.len());
}

#[test]
fn bounded_caches_keep_a_window_of_rows() {
    let dec = hf();
    let t = spread(60);
    let want = fresh(&dec, &t);
    let mut caches = dec.new_caches();
    caches.iter_mut().for_each(|c| c.set_bounded(true));
    assert_eq!(stepped(&dec, &t, 40, &mut caches), want);
    // The recurrent layers hold the last row plus the 3-row convolution window; the
    // full-attention layer every row.
    assert_eq!(
        (caches[0].first_row(), caches[0].keys().len() / 128),
        (56, 4)
    );
    assert_eq!(caches[3].first_row(), 0);
    assert!(caches[0].restorable(59) && !caches[0].restorable(58));
    // A verify rolled back inside its forward still replays exactly.
    let extra: Vec<usize> = (0..8).map(|i| (i * 53 + 7) % 512).collect();
    dec.forward_batch(&extra[..6], 60, &mut caches);
    let got = dec.forward_batch(&extra[6..], 62, &mut caches);
    let mut whole = t.clone();
    whole.extend_from_slice(&extra[..2]);
    whole.extend_from_slice(&extra[6..]);
    assert_eq!(got, fresh(&dec, &whole)[62..]);
    assert!(!caches[0].restorable(61));
}

/// `prompts` through a 2-slot engine, joining one per step, with drafts of up to `draft`
/// tokens and prefill in chunks of 5: each request's text and stop.
fn batched(
    dec: &Decoder,
    tok: &Tokenizer,
    prompts: &[Vec<usize>],
    p: &BatchParams,
    draft: usize,
) -> Vec<(String, StopReason)> {
    let mut eng = BatchEngine::new(dec, tok, 2, 256);
    eng.fix_draft_len(draft);
    eng.prefill_chunk = 5;
    let mut text: HashMap<u64, String> = HashMap::new();
    let mut done: HashMap<u64, StopReason> = HashMap::new();
    let mut next = 0;
    let mut steps = 0;
    while done.len() < prompts.len() {
        if next < prompts.len() && eng.admit(next as u64, &prompts[next], p).is_ok() {
            next += 1;
        }
        eng.step(|id, ev| match ev {
            BatchEvent::Text(t) => text.entry(id).or_default().push_str(&t),
            BatchEvent::Done { stop, .. } => {
                done.insert(id, stop);
            }
            BatchEvent::Logprob(_) | BatchEvent::Error(_) => {}
        });
        steps += 1;
        assert!(steps < 1000, "engine does not finish");
    }
    (0..prompts.len() as u64)
        .map(|id| (text.remove(&id).unwrap_or_default(), done[&id]))
        .collect()
}

#[test]
fn continuous_batching_equals_lone_sessions() {
    let (dec, tok) = gguf();
    let t = tokens();
    let prompts = vec![repetitive(), t[4..17].to_vec(), t[..9].to_vec()];
    for (temp, seed) in [(0.0, 0), (0.9, 42)] {
        let p = batch_params(temp, seed, 20);
        let want: Vec<(String, StopReason)> = prompts
            .iter()
            .map(|q| {
                let out = common::alone(&dec, &tok, 256, q, &p);
                (out.text, out.stop)
            })
            .collect();
        for draft in [0, 4] {
            let got = batched(&dec, &tok, &prompts, &p, draft);
            assert_eq!(got, want, "temperature {temp}, draft {draft}");
        }
    }
}

#[test]
fn long_prefill_and_replay_on_parallel_heads_equal_single_tokens() {
    // 80 rows: the first block of 64 positions runs its heads in parallel, single tokens on
    // one thread; the rows must not care.
    let dec = hf();
    let t = spread(80);
    let batch = fresh(&dec, &t);
    assert_eq!(stepped(&dec, &t, 0, &mut dec.new_caches()), batch);
    // A cut at 70 after one 80-row forward replays 70 positions (two blocks) from zero.
    let mut caches = dec.new_caches();
    dec.forward_batch(&t, 0, &mut caches);
    assert_eq!(dec.forward_batch(&t[70..], 70, &mut caches), batch[70..]);
}

#[test]
fn caches_built_the_seed_way_take_the_recurrent_shape() {
    // The seed's API builds `KvCache::new(n_kv_heads, head_dim)` for every layer; empty caches
    // take each layer's own shape on first use.
    let dec = hf();
    let t = tokens();
    let c = &dec.config;
    let mut caches: Vec<KvCache> = (0..c.n_layers)
        .map(|_| KvCache::new(c.n_kv_heads, c.head_dim))
        .collect();
    assert_eq!(dec.forward_batch(&t, 0, &mut caches), fresh(&dec, &t));
}

/// Two requests of one long prompt admitted together: the second copies the first's prefix
/// (recurrent state included) or prefills itself; either way both equal a lone session.
#[test]
fn same_prompt_requests_equal_lone_sessions() {
    let (dec, tok) = gguf();
    let t = tokens();
    let prompt: Vec<usize> = t.iter().chain(&t).copied().collect();
    for (temp, seed) in [(0.0, 0), (0.9, 3)] {
        let mut p = batch_params(temp, seed, 12);
        let want = alone(&dec, &tok, &prompt, &p);
        // Each committed token's id comes with its log-probability.
        p.logprobs = Some(0);
        for chunk in [5, 256] {
            let mut eng = BatchEngine::new(&dec, &tok, 2, 256);
            eng.prefill_chunk = chunk;
            eng.admit(0, &prompt, &p).unwrap();
            eng.admit(1, &prompt, &p).unwrap();
            let mut got: HashMap<u64, Vec<usize>> = HashMap::new();
            let mut steps = 0;
            while eng.active() > 0 {
                eng.step(|id, ev| {
                    if let BatchEvent::Logprob(l) = ev {
                        got.entry(id).or_default().push(l.token);
                    }
                });
                steps += 1;
                assert!(steps < 1000, "engine does not finish");
            }
            for id in 0..2 {
                assert_eq!(
                    got[&id], want,
                    "request {id}, temperature {temp}, chunk {chunk}"
                );
            }
        }
    }
}
