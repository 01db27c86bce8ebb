//! MTP (NextN) blocks on tiny DeepSeek-V3 and GLM-4.5-MoE checkpoints that carry one
//! (`fixtures/hf-tiny-mtp`, made by its `make.py`: random block weights, the reference logits
//! from the DeepSeek-V3 report's equations around transformers' own decoder layer): the main
//! model is unchanged by the block, the block's logits and hidden states at every position
//! match the reference within 1e-4, and its rows fed one by one equal the batch bit for bit.

mod common;
use common::{fixture, ids, max_abs_diff, read_json, read_npy_f32, tiny::check_tiny_logits};
use ferrox_models::decoder::Decoder;
use ferrox_models::mtp::MtpOut;

fn check_mtp(arch: &str) {
    let dir = fixture(&format!("hf-tiny-mtp/{arch}"));
    check_tiny_logits(&dir, &dir);
    let dec = Decoder::load(&dir).unwrap();
    assert!(dec.mtp.is_some(), "{arch}: the MTP block was not loaded");
    let input = ids(&read_json(&dir.join("input_ids.json")));
    let (d, t) = (dec.config.hidden_dim, input.len());
    let mut caches = dec.new_caches();
    let h = dec.hidden_states(&input, 0, &mut caches, 0);
    assert_eq!(h.len(), t * d);

    // Row i: h_i with t_{i+1}, for every position that has a next token.
    let mut cache = dec.new_mtp_cache().unwrap();
    let mut out = MtpOut::default();
    dec.mtp_forward(&h[..(t - 1) * d], &input[1..], 0, &mut cache, 0, &mut out)
        .unwrap();
    let (shape, want) = read_npy_f32(&dir.join("mtp_logits.npy"));
    assert_eq!(shape, vec![t - 1, dec.vocab_size()]);
    let worst = max_abs_diff(&out.logits, &want);
    eprintln!("{arch}: MTP max abs logit diff {worst:e}");
    assert!(worst < 1e-4, "{arch}: MTP logits differ by {worst}");
    let (_, want_h) = read_npy_f32(&dir.join("mtp_hidden.npy"));
    let worst_h = max_abs_diff(&out.hidden, &want_h);
    assert!(
        worst_h < 1e-4,
        "{arch}: MTP hidden states differ by {worst_h}"
    );

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

/// A checkpoint whose config counts no MTP block loads none, and one whose file lacks the
/// block's tensors (a converter dropped them) loads without it.
#[test]
fn models_without_the_block_have_none() {
    let dec = Decoder::load(&fixture("hf-tiny/deepseek_v3")).unwrap();
    assert!(dec.mtp.is_none());
    assert!(dec.new_mtp_cache().is_none());
}
