//! Dense architectures against transformers fp32 on the tiny reference checkpoints: logits at
//! every position within 1e-4, greedy continuation exact, batch rows equal token-by-token rows.

mod common;
use common::tiny::{
    check_gguf_config, check_gguf_greedy, check_gguf_logits, check_gguf_speculative,
    check_hf_greedy as check_greedy, check_hf_logits as check_logits, check_hf_speculative,
};
use common::*;
use ferrox_format::gguf::GgufFile;
use ferrox_models::decoder::Decoder;
use std::path::Path;

#[test]
fn llama_logits() {
    check_logits("llama");
}
#[test]
fn llama_greedy() {
    check_greedy("llama");
}
#[test]
fn qwen2_logits() {
    check_logits("qwen2");
}
#[test]
fn qwen2_greedy() {
    check_greedy("qwen2");
}
#[test]
fn qwen3_logits() {
    check_logits("qwen3");
}
#[test]
fn qwen3_greedy() {
    check_greedy("qwen3");
}
#[test]
fn gemma3_logits() {
    check_logits("gemma3_text");
}
#[test]
fn gemma3_greedy() {
    check_greedy("gemma3_text");
}

#[test]
fn gemma2_logits() {
    check_logits("gemma2");
}
#[test]
fn gemma2_greedy() {
    check_greedy("gemma2");
}

#[test]
fn smollm3_logits() {
    check_logits("smollm3");
}
#[test]
fn smollm3_greedy() {
    check_greedy("smollm3");
}

#[test]
fn granite_logits() {
    check_logits("granite");
}
#[test]
fn granite_greedy() {
    check_greedy("granite");
}

#[test]
fn phi3_logits() {
    check_logits("phi3");
}
#[test]
fn phi3_greedy() {
    check_greedy("phi3");
}

#[test]
fn mistral_logits() {
    check_logits("mistral");
}
#[test]
fn mistral_greedy() {
    check_greedy("mistral");
}
/// Llama 3.x scaling in GGUF: the converter's `rope_freqs.weight` factors.
#[test]
fn llama_gguf() {
    check_gguf_logits("llama");
    check_gguf_greedy("llama");
}

/// The GGUF llama.cpp's converter writes for Mistral (`llama` with a sliding window; written by
/// `scripts/hf_tiny_to_gguf.py`) against the same transformers reference.
#[test]
fn mistral_gguf() {
    check_gguf_logits("mistral");
    check_gguf_greedy("mistral");
}

/// Gemma 2 as llama.cpp's converter writes it (norms stored as `1 + w`, soft-cap keys, SWA
/// pattern 2).
#[test]
fn gemma2_gguf() {
    check_gguf_logits("gemma2");
    check_gguf_greedy("gemma2");
}

/// Phi-3 as llama.cpp's converter writes it (`Phi3MiniModel`: fused `attn_qkv` / `ffn_up`,
/// LongRoPE as `rope_factors_{short,long}` tensors and `rope.scaling.*` keys).
#[test]
fn phi3_gguf() {
    check_gguf_logits("phi3");
    check_gguf_greedy("phi3");
}

/// SmolLM3 as llama.cpp's converter writes it (`SmolLM3Model` = LlamaModel; NoPE every 4th
/// layer implied by the architecture).
#[test]
fn smollm3_gguf() {
    check_gguf_logits("smollm3");
    check_gguf_greedy("smollm3");
}

/// Granite as llama.cpp's converter writes it (`GraniteModel` = LlamaModel plus the four
/// multipliers as `*_scale` keys).
#[test]
fn granite_gguf() {
    check_gguf_logits("granite");
    check_gguf_greedy("granite");
}

common::tiny::arch_tests!([gguf_config: check_gguf_config, gguf_speculative: check_gguf_speculative] {
    phi3 => "phi3",
    smollm3 => "smollm3",
    granite => "granite",
});

/// Every row of a forward over `ids` from position 0.
fn rows(model: &Path, ids: &[usize]) -> Vec<Vec<f32>> {
    let dec = Decoder::load(model).unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let mut caches = dec.new_caches();
    dec.forward_batch(ids, 0, &mut caches)
}

/// Loads `bytes` as a scratch GGUF file.
fn load_bytes(bytes: &[u8], tag: &str) -> Result<Decoder, String> {
    let path = std::env::temp_dir().join(format!("ferrox-dense-{}-{tag}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let res = Decoder::load(&path).map_err(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    res
}

fn find(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap_or_else(|| panic!("{needle} not in file"))
}

/// LongRoPE's long factors are read and bound in both forms. Past the original context (32 of
/// 64 positions) the Hub and GGUF loads still agree, and the long set alone decides those
/// positions: a GGUF whose long factors are all 1 gives the same rows below 32 and different
/// ones from 32 on.
#[test]
fn phi3_long_factors_past_the_original_context() {
    let ids: Vec<usize> = (0..40).map(|i| (i * 37 + 11) % 512).collect();
    let path = fixture("gguf-tiny/phi3.gguf");
    let hf = rows(&fixture("hf-tiny/phi3"), &ids);
    let gguf = rows(&path, &ids);
    for (p, (h, g)) in hf.iter().zip(&gguf).enumerate() {
        let d = max_abs_diff(h, g);
        assert!(d < 1e-4, "position {p}: Hub and GGUF differ by {d}");
    }

    let t = GgufFile::open(&path)
        .unwrap()
        .tensor("rope_factors_long.weight")
        .unwrap()
        .clone();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = t.file_offset as usize;
    for i in 0..t.n_elements as usize {
        bytes[at + 4 * i..at + 4 * i + 4].copy_from_slice(&1f32.to_le_bytes());
    }
    let dec = load_bytes(&bytes, "long1").unwrap();
    let mut caches = dec.new_caches();
    let edited = dec.forward_batch(&ids, 0, &mut caches);
    assert_eq!(edited[..32], gguf[..32], "short-factor positions changed");
    for p in 32..ids.len() {
        assert_ne!(edited[p], gguf[p], "position {p} ignores the long factors");
    }
}

/// What the GGUF readers cannot do without is named when missing: the key or tensor, never a
/// panic.
#[test]
fn missing_gguf_keys_are_named() {
    for (arch, name) in [
        ("phi3", "phi3.rope.scaling.original_context_length"),
        ("phi3", "rope_factors_long.weight"),
        ("granitemoe", "granitemoe.logit_scale"),
        ("granite", "granite.logit_scale"),
    ] {
        let mut bytes = std::fs::read(fixture(&format!("gguf-tiny/{arch}.gguf"))).unwrap();
        // Rename it (same length): its last letter in upper case.
        let at = find(&bytes, name) + name.len() - 1;
        bytes[at] = bytes[at].to_ascii_uppercase();
        let msg = load_bytes(&bytes, arch)
            .err()
            .expect("a file without it loaded");
        assert!(msg.contains(name), "{arch} without {name}: {msg}");
    }
}

/// llama.cpp's Granite reads `rope.scaling.finetuned = false` as "no RoPE": every layer NoPE,
/// which leaves position 0 (rotated by angle 0) as it was and changes every later one.
#[test]
fn granite_rope_switch_off_is_nope() {
    use ferrox_format::gguf::{to_bytes, MetaValue};
    let ids = ids(&read_json(&fixture("hf-tiny/granite/input_ids.json")));
    let path = fixture("gguf-tiny/granite.gguf");
    let f = GgufFile::open(&path).unwrap();
    let mut meta = f.metadata().to_vec();
    meta.push((
        "granite.rope.scaling.finetuned".into(),
        MetaValue::Bool(false),
    ));
    let dec = load_bytes(&to_bytes(&meta, &f.tensors_out()), "nope").unwrap();
    assert_eq!(dec.config.no_rope, vec![true; dec.config.n_layers]);
    let mut caches = dec.new_caches();
    let nope = dec.forward_batch(&ids, 0, &mut caches);
    let roped = rows(&path, &ids);
    let d = max_abs_diff(&nope[0], &roped[0]);
    assert!(d < 1e-6, "position 0 differs by {d}");
    for p in 1..ids.len() {
        assert_ne!(nope[p], roped[p], "position {p} still rotated");
    }
}

/// The error loading the scratch model directory `tmp`, which is then removed.
fn load_error(tmp: &std::path::Path) -> String {
    let err = Decoder::load(tmp)
        .err()
        .expect("load must fail")
        .to_string();
    std::fs::remove_dir_all(tmp).ok();
    err
}

common::tiny::arch_tests!([speculative: check_hf_speculative] {
    llama => "llama",
    qwen2 => "qwen2",
    qwen3 => "qwen3",
    gemma3 => "gemma3_text",
    gemma2 => "gemma2",
    mistral => "mistral",
    phi3 => "phi3",
    smollm3 => "smollm3",
    granite => "granite",
});

#[test]
fn missing_tensor_is_named() {
    let src = fixture("hf-tiny/llama");
    let tmp = std::env::temp_dir().join(format!("ferrox-missing-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(src.join("config.json"), tmp.join("config.json")).unwrap();
    // Rewrite the safetensors file without one tensor.
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != "model.layers.1.mlp.up_proj.weight")
        .collect();
    safetensors::serialize_to_file(kept, None, &tmp.join("model.safetensors")).unwrap();
    let err = load_error(&tmp);
    assert!(err.contains("model.layers.1.mlp.up_proj.weight"), "{err}");
}

#[test]
fn unknown_architecture_is_refused_by_name() {
    let tmp = std::env::temp_dir().join(format!("ferrox-unknown-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("config.json"), r#"{"model_type": "frobnicator"}"#).unwrap();
    std::fs::copy(
        fixture("hf-tiny/llama/model.safetensors"),
        tmp.join("model.safetensors"),
    )
    .unwrap();
    let err = load_error(&tmp);
    assert!(err.contains("frobnicator"), "{err}");
}

#[test]
fn pre_quantized_checkpoint_is_refused_by_method() {
    let src = fixture("hf-tiny/gpt_oss");
    let tmp = std::env::temp_dir().join(format!("ferrox-mxfp4-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    std::fs::write(tmp.join("config.json"), cfg.to_string()).unwrap();
    std::fs::copy(src.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
    let err = load_error(&tmp);
    assert!(
        err.contains("mxfp4") && err.contains("quantization_config"),
        "{err}"
    );
}
