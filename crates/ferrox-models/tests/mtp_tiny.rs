//! MTP (NextN) blocks on tiny DeepSeek-V3, GLM-4.5-MoE and Qwen3-Next checkpoints that carry
//! one (`fixtures/hf-tiny-mtp`, made by its `make.py`: the block trained on the model's own
//! greedy runs, the reference logits from the DeepSeek-V3 report's equations around
//! transformers' own decoder layer): the main model is unchanged by the block; fed the
//! reference's input, the block's logits and chained states at every position match the
//! reference within 1e-4; fed ferrox's own hidden states, within 1e-3 (the model's own error,
//! ~4e-5 on its logits, passes through the block, whose trained logits reach ~18); its rows fed
//! one by one equal the batch bit for bit; speculation drafting with it equals plain decoding.

mod common;
use common::{fixture, ids, max_abs_diff, read_json, read_npy_f32, tiny::check_tiny_logits};
use ferrox_models::decoder::Decoder;
use ferrox_models::generate::{GenerateParams, Session};
use ferrox_models::mtp::MtpOut;
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{AdaptiveDraft, Drafter, MtpDrafter, Speculation};

fn check_mtp(arch: &str) {
    let dir = fixture(&format!("hf-tiny-mtp/{arch}"));
    check_mtp_of(&dir, &dir, arch);
}

/// The block of `model` (a checkpoint directory or a GGUF file) against `dir`'s reference.
fn check_mtp_of(model: &std::path::Path, dir: &std::path::Path, arch: &str) {
    check_tiny_logits(model, dir);
    let dec = Decoder::load(model).unwrap();
    assert!(dec.mtp.is_some(), "{arch}: the MTP block was not loaded");
    let input = ids(&read_json(&dir.join("input_ids.json")));
    let (d, t) = (dec.config.hidden_dim, input.len());
    let mut caches = dec.new_caches();
    let h = dec.hidden_states(&input, 0, &mut caches, 0);
    assert_eq!(h.len(), t * d);

    // Row i: h_i with t_{i+1}, for every position that has a next token.
    let (shape, want) = read_npy_f32(&dir.join("mtp_logits.npy"));
    assert_eq!(shape, vec![t - 1, dec.vocab_size()]);
    let (_, want_h) = read_npy_f32(&dir.join("mtp_hidden.npy"));
    let (_, reference_h) = read_npy_f32(&dir.join("mtp_input.npy"));
    let mut out = MtpOut::default();
    for (input_h, bound, what) in [
        (&reference_h[..], 1e-4, "the reference's input"),
        (&h[..(t - 1) * d], 1e-3, "ferrox's hidden states"),
    ] {
        let mut cache = dec.new_mtp_cache().unwrap();
        dec.mtp_forward(input_h, &input[1..], 0, &mut cache, 0, &mut out)
            .unwrap();
        let worst = max_abs_diff(&out.logits, &want);
        let worst_h = max_abs_diff(&out.hidden, &want_h);
        eprintln!("{arch}: on {what}: MTP max abs diff: logits {worst:e}, states {worst_h:e}");
        assert!(
            worst < bound,
            "{arch}: on {what}: MTP logits differ by {worst}"
        );
        assert!(
            worst_h < bound,
            "{arch}: on {what}: MTP states differ by {worst_h}"
        );
    }

    // One row at a time through the block's cache: the batch's rows bit for bit.
    let v = dec.vocab_size();
    let mut cache = dec.new_mtp_cache().unwrap();
    let mut one = MtpOut::default();
    for i in 0..t - 1 {
        let row = &h[i * d..(i + 1) * d];
        dec.mtp_forward(row, &input[i + 1..i + 2], i, &mut cache, 0, &mut one)
            .unwrap();
        assert_eq!(
            one.logits,
            out.logits[i * v..(i + 1) * v],
            "{arch}: row {i}"
        );
    }
    // Cut back and refed: the cache drops what follows `pos`.
    let i = t / 2;
    dec.mtp_forward(
        &h[i * d..(i + 1) * d],
        &input[i + 1..i + 2],
        i,
        &mut cache,
        0,
        &mut one,
    )
    .unwrap();
    assert_eq!(
        one.logits,
        out.logits[i * v..(i + 1) * v],
        "{arch}: refed row {i}"
    );
}

#[test]
fn deepseek_v3_mtp_matches_the_reference() {
    check_mtp("deepseek_v3");
}

#[test]
fn glm4_moe_mtp_matches_the_reference() {
    check_mtp("glm4_moe");
}

/// llama.cpp's GLM-4.5 conversion keeps the block (`blk.3.nextn.*` beside `blk.3`'s own
/// tensors, `block_count` 4, `nextn_predict_layers` 1: `scripts/hf_tiny_to_gguf.py`); its
/// DeepSeek-V3 conversion drops it, and the file loads without one.
#[test]
fn gguf_conversions_carry_the_block_as_llama_cpp_writes_them() {
    let dir = fixture("hf-tiny-mtp/glm4_moe");
    check_mtp_of(
        &fixture("gguf-tiny/glm4_moe_mtp.gguf"),
        &dir,
        "glm4_moe (GGUF)",
    );
    let file = fixture("gguf-tiny/deepseek_v3_mtp.gguf");
    check_tiny_logits(&file, &fixture("hf-tiny-mtp/deepseek_v3"));
    assert!(Decoder::load(&file).unwrap().mtp.is_none());
}

/// A checkpoint whose config counts no MTP block loads none, and one whose file lacks the
/// block's tensors (a converter dropped them) loads without it.
#[test]
fn models_without_the_block_have_none() {
    let src = fixture("hf-tiny/deepseek_v3");
    let dec = Decoder::load(&src).unwrap();
    assert!(dec.mtp.is_none());
    assert!(dec.new_mtp_cache().is_none());

    let dir = tempfile::tempdir().unwrap();
    let weights = "model.safetensors";
    std::fs::copy(src.join(weights), dir.path().join(weights)).unwrap();
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    let counted = config.replace(
        "\"num_nextn_predict_layers\": 0",
        "\"num_nextn_predict_layers\": 1",
    );
    assert_ne!(config, counted);
    std::fs::write(dir.path().join("config.json"), counted).unwrap();
    let dec = Decoder::load(dir.path()).unwrap();
    assert_eq!(dec.config.mtp_layers, 1);
    assert!(dec.mtp.is_none());
}

/// Proposes nothing: every draft of the drafter under test is then the MTP block's.
struct Nothing;

impl Drafter for Nothing {
    fn propose_into(&mut self, _: &[usize], _: usize, _: &mut Vec<usize>) {}
    fn name(&self) -> &'static str {
        "nothing"
    }
}

fn plain(dec: &Decoder, prompt: &[usize], cfg: &SamplerConfig, n: usize) -> Vec<usize> {
    let mut s = Sampler::new(cfg.clone());
    let mut hist = prompt.to_vec();
    let mut caches = dec.new_caches();
    let mut logits = dec
        .forward_from(prompt, 0, &mut caches, prompt.len() - 1)
        .pop()
        .unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = s.sample(&logits, &hist);
        out.push(t);
        logits = dec.forward_token(t, hist.len(), &mut caches);
        hist.push(t);
    }
    out
}

/// Speculation drafting with the block gives plain decoding's tokens, greedy and seeded, on a
/// first request and on a follow-up turn in the same session (its cache reused, the block's
/// kept in step); the block's drafts are accepted (it was trained on these runs).
fn check_mtp_speculation(arch: &str) {
    let dir = fixture(&format!("hf-tiny-mtp/{arch}"));
    let dec = Decoder::load(&dir).unwrap();
    let input = ids(&read_json(&dir.join("input_ids.json")));
    // Cool enough that the sampled run mostly follows the greedy one the block learned.
    let sampled = SamplerConfig {
        temperature: 0.05,
        top_k: 40,
        seed: 7,
        ..SamplerConfig::default()
    };
    for cfg in [SamplerConfig::greedy(), sampled] {
        let mut spec = Speculation::new(Box::new(MtpDrafter::new(Box::new(Nothing))), 3);
        spec.adaptive = AdaptiveDraft::fixed(3);
        let mut session = Session::without_tokenizer(&dec, 256);
        session.set_speculation(Some(spec));
        let params = GenerateParams {
            max_tokens: 24,
            ignore_eog: true,
            ..GenerateParams::default()
        };
        let mut prompt = input[..12].to_vec();
        for turn in 0..2 {
            let out = session.generate(&prompt, &params, &mut Sampler::new(cfg.clone()), |_| true);
            let want = plain(&dec, &prompt, &cfg, 24);
            assert_eq!(out.tokens, want, "{arch} turn {turn}: {cfg:?}");
            // The block learned the greedy runs (make.py): some drafts must be accepted, so
            // the paths after a partial acceptance are exercised. (A sampled first turn
            // mostly follows the greedy one; its second turn's prompt is then another.)
            if turn == 0 || cfg.temperature == 0.0 {
                assert!(out.spec.accepted > 0, "{arch} turn {turn}: {:?}", out.spec);
            } else {
                assert!(out.spec.drafted > 0, "{arch} turn {turn}: {:?}", out.spec);
            }
            eprintln!("{arch} turn {turn} {:?}: {:?}", cfg.temperature, out.spec);
            // The next turn: this conversation so far plus more input.
            prompt.extend_from_slice(&out.tokens);
            prompt.extend_from_slice(&input[12..]);
        }
        assert_eq!(session.speculation().unwrap().drafter.name(), "mtp");
    }
}

#[test]
fn deepseek_v3_mtp_speculation_equals_plain() {
    check_mtp_speculation("deepseek_v3");
}

#[test]
fn glm4_moe_mtp_speculation_equals_plain() {
    check_mtp_speculation("glm4_moe");
}

/// Qwen3-Next's block: other names (`mtp.fc`, `mtp.layers.0`, `mtp.norm`), zero-centred norms,
/// chained on its normed state; the model's other layers are mostly linear attention.
#[test]
fn qwen3_next_mtp_matches_the_reference() {
    check_mtp("qwen3_next");
}

#[test]
fn qwen3_next_mtp_speculation_equals_plain() {
    check_mtp_speculation("qwen3_next");
}

/// A block joining a history it has no pairs for — the session's cache already holds the
/// first turn, decoded without it, as after a prompt-cache restore or a fork in the server —
/// starts over where it joins and drafts, and the output stays plain decoding's.
#[test]
fn a_block_joining_a_cached_prefix_drafts_from_there() {
    for arch in ["deepseek_v3", "glm4_moe"] {
        let dir = fixture(&format!("hf-tiny-mtp/{arch}"));
        let dec = Decoder::load(&dir).unwrap();
        let input = ids(&read_json(&dir.join("input_ids.json")));
        let params = GenerateParams {
            max_tokens: 24,
            ignore_eog: true,
            ..GenerateParams::default()
        };
        let greedy = SamplerConfig::greedy();
        let mut session = Session::without_tokenizer(&dec, 256);
        let first = session.generate(
            &input[..12],
            &params,
            &mut Sampler::new(greedy.clone()),
            |_| true,
        );
        let mut prompt = input[..12].to_vec();
        prompt.extend_from_slice(&first.tokens);
        prompt.extend_from_slice(&input[12..]);
        let mut spec = Speculation::new(Box::new(MtpDrafter::new(Box::new(Nothing))), 3);
        spec.adaptive = AdaptiveDraft::fixed(3);
        session.set_speculation(Some(spec));
        let out = session.generate(&prompt, &params, &mut Sampler::new(greedy.clone()), |_| {
            true
        });
        assert_eq!(out.tokens, plain(&dec, &prompt, &greedy, 24), "{arch}");
        assert!(
            out.prompt_tokens < prompt.len(),
            "{arch}: the first turn's cache was not reused"
        );
        assert!(out.spec.drafted > 0, "{arch}: the block never drafted");
    }
}
