//! A draft head trained for a model that ships no MTP block (`scripts/train_draft_head.py`)
//! loads from `NAME.draft-head.gguf` beside `NAME.gguf` as the model's MTP block, with its
//! sub-vocabulary head; speculation drafting with it gives plain decoding's tokens; a head
//! file that does not fit the model is refused, naming what is wrong.
//!
//! The head here is built from the tiny Llama's own tensors (its last layer again, `eh_proj`
//! the identity on the hidden half, the output rows of the even token ids): what the trainer
//! starts from, in the file layout it writes.

mod common;
use common::{fixture, ids, read_json};
use ferrox_core::quant::GgmlType;
use ferrox_format::gguf::{to_bytes, GgufFile, MetaValue, TensorOut};
use ferrox_models::decoder::Decoder;
use ferrox_models::decoder::{SeqBatch, OWN_CACHES};
use ferrox_models::generate::{GenerateParams, Session};
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{
    AdaptiveDraft, DraftIn, Drafter, MtpDrafter, Observation, Speculation,
};
use std::path::Path;

fn f32_tensor(name: &str, dims: &[u64], v: &[f32]) -> TensorOut {
    TensorOut {
        name: name.into(),
        ty: GgmlType::F32,
        dims: dims.to_vec(),
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// The head's tensors for the tiny Llama (2 layers, width 64, vocabulary 512), sub-vocabulary
/// `ids`, with `edit` applied before writing.
fn head_file(
    dir: &Path,
    ids: &[f32],
    meta: Vec<(String, MetaValue)>,
    edit: impl FnOnce(&mut Vec<TensorOut>),
) {
    let model = GgufFile::open(&fixture("gguf-tiny/llama.gguf")).unwrap();
    let all = model.tensors_out();
    let (h, n) = (64usize, 2);
    let f32s = |t: &TensorOut| -> Vec<f32> {
        assert_eq!(t.ty, GgmlType::F32, "{}", t.name);
        t.data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let last = format!("blk.{}.", n - 1);
    let mut out: Vec<TensorOut> = all
        .iter()
        .filter(|t| t.name.starts_with(&last))
        .map(|t| TensorOut {
            name: t.name.replacen(&last, &format!("blk.{n}."), 1),
            ..t.clone()
        })
        .collect();
    let nx = |s: &str| format!("blk.{n}.nextn.{s}");
    let mut eh = vec![0f32; h * 2 * h];
    for r in 0..h {
        eh[r * 2 * h + h + r] = 1.0;
    }
    let find = |name: &str| all.iter().find(|t| t.name == name).unwrap();
    let output = f32s(find("output.weight"));
    // (An id past the vocabulary, for the refusal test, takes some row: the id is the fault.)
    let rows: Vec<f32> = ids
        .iter()
        .map(|&id| id as usize % 512)
        .flat_map(|id| output[id * h..(id + 1) * h].to_vec())
        .collect();
    out.extend([
        f32_tensor(&nx("enorm.weight"), &[h as u64], &vec![1.0; h]),
        f32_tensor(&nx("hnorm.weight"), &[h as u64], &vec![1.0; h]),
        f32_tensor(&nx("eh_proj.weight"), &[2 * h as u64, h as u64], &eh),
        f32_tensor(
            &nx("shared_head_norm.weight"),
            &[h as u64],
            &f32s(find("output_norm.weight")),
        ),
        f32_tensor(
            &nx("draft_head.weight"),
            &[h as u64, ids.len() as u64],
            &rows,
        ),
        f32_tensor(&nx("draft_vocab"), &[ids.len() as u64], ids),
    ]);
    edit(&mut out);
    let arch = (
        "general.architecture".to_string(),
        MetaValue::String("llama".into()),
    );
    let meta = [vec![arch], meta].concat();
    std::fs::write(dir.join("model.draft-head.gguf"), to_bytes(&meta, &out)).unwrap();
}

fn with_head(ids: &[f32], edit: impl FnOnce(&mut Vec<TensorOut>)) -> tempfile::TempDir {
    with_head_meta(ids, Vec::new(), edit)
}

fn with_head_meta(
    ids: &[f32],
    meta: Vec<(String, MetaValue)>,
    edit: impl FnOnce(&mut Vec<TensorOut>),
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("gguf-tiny/llama.gguf"),
        dir.path().join("model.gguf"),
    )
    .unwrap();
    head_file(dir.path(), ids, meta, edit);
    dir
}

struct Nothing;

impl Drafter for Nothing {
    fn propose_into(&mut self, _: &[usize], _: usize, _: &mut Vec<usize>) {}
    fn name(&self) -> &'static str {
        "nothing"
    }
}

fn even_ids() -> Vec<f32> {
    (0..256).map(|i| (2 * i) as f32).collect()
}

#[test]
fn a_draft_head_beside_the_model_drafts_and_speculation_equals_plain() {
    let dir = with_head(&even_ids(), |_| {});
    let dec = Decoder::load(dir.path().join("model.gguf")).unwrap();
    let mtp = dec.mtp.as_ref().expect("the draft head was not loaded");
    assert_eq!(mtp.vocab.as_ref().map(Vec::len), Some(256));
    assert_eq!(mtp.token(3), 6);
    assert!(
        !mtp.chain_normed,
        "a head that does not say so chains its state as is"
    );
    speculation_equals_plain(&dec);
}

/// A head trained to chain through its `head_norm` (`train_draft_head.py --steps`) says so in
/// its metadata and is chained that way; its drafts change, decoding's tokens do not.
#[test]
fn a_head_trained_to_chain_through_its_norm_is_chained_so() {
    let key = "ferrox.draft_head.chain_normed".to_string();
    let dir = with_head_meta(&even_ids(), vec![(key, MetaValue::Bool(true))], |_| {});
    let dec = Decoder::load(dir.path().join("model.gguf")).unwrap();
    assert!(dec.mtp.as_ref().expect("no head").chain_normed);
    speculation_equals_plain(&dec);
}

/// A head whose `chain_normed` is not a bool is refused by name rather than read as absent.
#[test]
fn a_head_whose_chain_key_is_not_a_bool_is_refused() {
    let key = "ferrox.draft_head.chain_normed".to_string();
    let dir = with_head_meta(
        &even_ids(),
        vec![(key, MetaValue::String("yes".into()))],
        |_| {},
    );
    let err = Decoder::load(dir.path().join("model.gguf"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("chain_normed is not a bool"), "{err}");
}

fn speculation_equals_plain(dec: &Decoder) {
    let prompt = ids(&read_json(&fixture("hf-tiny/llama/input_ids.json")));
    let sampled = SamplerConfig {
        temperature: 0.8,
        seed: 11,
        ..SamplerConfig::default()
    };
    for cfg in [SamplerConfig::greedy(), sampled] {
        let params = GenerateParams {
            max_tokens: 32,
            ignore_eog: true,
            ..GenerateParams::default()
        };
        let mut plain = Session::without_tokenizer(dec, 256);
        let want = plain.generate(&prompt, &params, &mut Sampler::new(cfg.clone()), |_| true);
        let mut spec = Speculation::new(Box::new(MtpDrafter::new(Box::new(Nothing))), 3);
        spec.adaptive = AdaptiveDraft::fixed(3);
        let mut s = Session::without_tokenizer(dec, 256);
        s.set_speculation(Some(spec));
        let got = s.generate(&prompt, &params, &mut Sampler::new(cfg.clone()), |_| true);
        assert_eq!(got.tokens, want.tokens, "{cfg:?}");
        assert!(got.spec.drafted > 0, "{:?}", got.spec);
        eprintln!("{cfg:?}: {:?}", got.spec);
    }
}

/// While the lookup copies (its long drafts kept whole) the head's rows wait and are taken in
/// with the next feed in one batch: its cache, first token and chain are then what feeding
/// every row as it came gives.
#[test]
fn rows_that_waited_while_the_lookup_copied_feed_the_head_as_if_fed_all_along() {
    let dir = with_head(&even_ids(), |_| {});
    let dec = Decoder::load(dir.path().join("model.gguf")).unwrap();
    let prompt = ids(&read_json(&fixture("hf-tiny/llama/input_ids.json")));
    let (n, d) = (prompt.len(), dec.config.hidden_dim);
    let (k, m) = (n / 3, 2 * n / 3);
    assert!(0 < k && k < m && m < n, "prompt of {n} tokens");
    let mut caches = dec.new_caches();
    let (mut logits, mut hidden) = (Vec::new(), Vec::new());
    let mut seq = [SeqBatch {
        tokens: &prompt,
        pos: 0,
        caches: &mut caches,
        first_logit_row: n - 1,
        key: OWN_CACHES,
        tree: None,
    }];
    dec.forward_multi_hidden(&mut seq, &mut logits, &mut hidden);
    let sampled = 7;
    let obs = |from: usize, to: usize, following: usize, decoding: bool| Observation {
        pos: from,
        hidden: &hidden[from * d..to * d],
        history: &prompt[..to],
        following: Some(following),
        decoding,
    };
    let draft = |drafter: &mut MtpDrafter| {
        let history = [&prompt[..], &[sampled]].concat();
        let mut out = Vec::new();
        let cx = DraftIn {
            dec: &dec,
            caches: &mut [],
            history: &history,
            max: 3,
            room: 3,
            lengths: &AdaptiveDraft::fixed(3),
        };
        drafter.propose_with(cx, &mut out);
        out
    };
    let mut all_along = MtpDrafter::new(Box::new(Nothing));
    all_along.observe(&dec, obs(0, k, prompt[k], false));
    all_along.observe(&dec, obs(k, m, prompt[m], true));
    all_along.observe(&dec, obs(m, n, sampled, true));
    let mut waited = MtpDrafter::new(Box::new(Nothing));
    waited.observe(&dec, obs(0, k, prompt[k], false));
    // The lookup's draft of 8 kept whole: copying, the next rows wait.
    waited.verified(8, 8);
    waited.observe(&dec, obs(k, m, prompt[m], true));
    assert_eq!(
        draft(&mut waited),
        Vec::<usize>::new(),
        "no first token while rows wait"
    );
    waited.verified(1, 0);
    waited.observe(&dec, obs(m, n, sampled, true));
    let want = draft(&mut all_along);
    // Two tokens: nothing kept or missed yet, one each way (`Kept::chain_len`).
    assert_eq!(want.len(), 2, "the head drafts a chain");
    assert_eq!(draft(&mut waited), want);
}

#[test]
fn a_head_that_does_not_fit_the_model_is_refused_by_name() {
    let load = |dir: &tempfile::TempDir| {
        Decoder::load(dir.path().join("model.gguf"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let mut ids = even_ids();
    ids[7] = 512.0;
    let e = load(&with_head(&ids, |_| {}));
    assert!(e.contains("draft_vocab") && e.contains("512"), "{e}");

    let e = load(&with_head(&even_ids(), |t| {
        t.retain(|t| !t.name.ends_with("draft_vocab"));
    }));
    assert!(e.contains("draft_vocab"), "{e}");

    let e = load(&with_head(&even_ids(), |t| {
        t.retain(|t| !t.name.ends_with("nextn.eh_proj.weight"));
    }));
    assert!(e.contains("eh_proj"), "{e}");

    let e = load(&with_head(&even_ids()[..100], |t| {
        let v = t
            .iter_mut()
            .find(|t| t.name.ends_with("draft_vocab"))
            .unwrap();
        v.dims = vec![50];
        v.data.truncate(200);
    }));
    assert!(e.contains("draft_vocab") && e.contains("50 ids"), "{e}");

    let dir = with_head(&even_ids(), |_| {});
    std::fs::write(dir.path().join("model.draft-head.gguf"), b"not a gguf").unwrap();
    let e = load(&dir);
    assert!(e.contains("draft-head.gguf"), "{e}");
}
