//! Registry and config-reader tests on the hf-tiny fixtures.

use super::common_deepseek::indexer_types_from_freq;
use super::*;
use crate::config::{Activation, AttnKind, IndexerKind, NormKind, RopeScaling, RouterScoring};
use crate::load::load_hf_config;
use std::path::Path;

fn fixture(name: &str) -> ModelConfig {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/hf-tiny")
        .join(name);
    let local = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf-tiny")
        .join(name);
    load_hf_config(if local.exists() { &local } else { &dir }).unwrap()
}

#[test]
fn unknown_model_type_is_named() {
    let e = parse_hf_config(r#"{"model_type": "falcon_h9", "hidden_size": 8}"#).unwrap_err();
    assert!(matches!(e, LoadError::UnsupportedArch { ref name, .. } if name == "falcon_h9"));
    let msg = e.to_string();
    assert!(msg.contains("falcon_h9") && msg.contains("qwen2"), "{msg}");
    let e = parse_hf_config("{}").unwrap_err().to_string();
    assert!(e.contains("model_type"), "{e}");
}

#[test]
fn missing_field_is_named() {
    let e = parse_hf_config(r#"{"model_type": "llama", "hidden_size": 8}"#).unwrap_err();
    assert!(e.to_string().contains("num_hidden_layers"), "{e}");
}

#[test]
fn freq_rule_matches_transformers() {
    use IndexerKind::*;
    // The shared-indexer fixture: freq 2, offset 2 -> [full, full, shared, full].
    assert_eq!(
        indexer_types_from_freq(4, 2, 2),
        vec![Full, Full, Shared, Full]
    );
    assert_eq!(indexer_types_from_freq(3, 1, 2), vec![Full; 3]);
}

#[test]
fn dense_families() {
    let l = fixture("llama");
    assert_eq!((l.arch, l.head_dim, l.n_kv_heads), ("llama", 16, 2));
    assert!(
        matches!(l.rope.scaling, RopeScaling::Llama3 { factor, original_max_position: 32, .. } if factor == 8.0)
    );
    assert!(!l.tie_embeddings && !l.is_moe_layer(0));

    let q2 = fixture("qwen2");
    assert!(q2.qkv_bias && q2.tie_embeddings);
    assert_eq!(q2.sliding_window, Some(8));
    assert_eq!(
        q2.layer_attn,
        vec![AttnKind::Full, AttnKind::Sliding, AttnKind::Sliding]
    );

    let q3 = fixture("qwen3");
    assert!(q3.qk_norm && !q3.qkv_bias);
    assert_eq!(q3.head_dim, 32);

    let g = fixture("gemma3_text");
    assert_eq!(g.norm, NormKind::RmsOffsetOne);
    assert_eq!(g.activation, Activation::GeluTanh);
    assert!(g.post_norms && g.embed_scale && g.tie_embeddings && g.qk_norm);
    assert_eq!(g.attn_scale, Some(24f32.powf(-0.5)));
    assert_eq!(g.rope.theta, 1e6);
    assert_eq!(g.rope.scaling, RopeScaling::Linear { factor: 8.0 });
    assert_eq!(g.rope_local.unwrap().theta, 1e4);
    assert_eq!(g.attn_kind(2), AttnKind::Full);
    assert_eq!(g.attn_kind(3), AttnKind::Sliding);

    let g4 = fixture("glm4");
    assert!(g4.qkv_bias && g4.post_norms);
    assert_eq!((g4.rope.rotary_dim, g4.rope.interleaved), (16, true));

    let gr = fixture("granite");
    assert_eq!(
        (
            gr.embedding_multiplier,
            gr.residual_multiplier,
            gr.logit_divisor
        ),
        (12.0, 0.22, 8.0)
    );
    assert_eq!(gr.attn_scale, Some(0.0625));
    assert!(!gr.tie_embeddings && !gr.is_moe_layer(0) && gr.no_rope.is_empty());
}

#[test]
fn moe_families() {
    let m = fixture("glm4_moe");
    assert!(m.qk_norm && m.qkv_bias && !m.post_norms);
    assert_eq!((m.rope.rotary_dim, m.rope.interleaved), (16, false));
    assert_eq!(m.layer_moe, vec![false, true, true]);
    assert_eq!(m.moe.scoring, RouterScoring::Sigmoid);
    assert_eq!((m.moe.n_group, m.moe.topk_group), (4, 2));
    assert_eq!((m.moe.n_experts, m.moe.n_experts_active), (16, 4));
    assert_eq!(
        (m.moe.shared_ffn_dim, m.moe.routed_scaling_factor),
        (32, 2.5)
    );

    let q = fixture("qwen3_moe");
    assert_eq!(q.moe.scoring, RouterScoring::Softmax);
    assert_eq!(
        (
            q.moe.n_experts,
            q.moe.n_experts_active,
            q.moe.n_shared_experts
        ),
        (8, 2, 0)
    );
    assert!(q.moe.norm_topk_prob && !q.moe.has_correction_bias);
    assert_eq!(q.layer_moe, vec![false, true, true]);
    assert_eq!(q.layer_attn, vec![AttnKind::Sliding; 3]);

    let x = fixture("mixtral");
    assert_eq!(
        (x.head_dim, x.moe.n_experts, x.moe.expert_ffn_dim),
        (16, 4, 128)
    );
    assert!(x.moe.norm_topk_prob && x.layer_moe.iter().all(|&b| b));
    assert_eq!(x.layer_attn, vec![AttnKind::Sliding; 2]);
}

#[test]
fn mla_families() {
    let d = fixture("deepseek_v3");
    let mla = d.mla.unwrap();
    assert_eq!(mla.q_lora_rank, Some(32));
    assert_eq!(
        (
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim
        ),
        (16, 16, 8, 16)
    );
    assert_eq!((d.head_dim, d.rope.rotary_dim), (8, 8));
    assert!(d.rope.interleaved && d.dsa.is_none());
    assert!(
        matches!(d.rope.scaling, RopeScaling::Yarn { factor, original_max_position: 64, mscale_all_dim, .. } if factor == 4.0 && mscale_all_dim == 1.0)
    );
    assert_eq!(d.moe.shared_ffn_dim, 64);

    let lite = fixture("glm4_moe_lite");
    assert!(lite.mla.is_some() && lite.dsa.is_none());
    assert_eq!(lite.moe.routed_scaling_factor, 1.8);

    let g = fixture("glm_moe_dsa");
    let dsa = g.dsa.clone().unwrap();
    assert_eq!(
        (dsa.index_n_heads, dsa.index_head_dim, dsa.index_topk),
        (16, 16, 8)
    );
    assert!(dsa.rope_interleaved);
    assert_eq!(dsa.indexer_types, vec![IndexerKind::Full; 4]);
    assert_eq!(g.layer_moe, vec![false, true, true, true]);

    let s = fixture("glm_moe_dsa_shared_indexer");
    assert_eq!(s.dsa.unwrap().indexer_types[2], IndexerKind::Shared);

    let v = fixture("deepseek_v32");
    assert!(!v.dsa.unwrap().rope_interleaved);
    assert!(v.rope.interleaved);
}

#[test]
fn registry_names_are_unique() {
    let mut hf: Vec<&str> = ARCHITECTURES
        .iter()
        .flat_map(|a| a.hf_model_types.iter().copied())
        .collect();
    let n = hf.len();
    hf.sort();
    hf.dedup();
    assert_eq!(hf.len(), n, "a model_type listed twice");
    for a in ARCHITECTURES {
        assert_eq!(by_name(a.name).map(|b| b.name), Some(a.name));
    }
}

/// The key table spells each GGUF key and each `config.json` name once, and every row names
/// a key of at least one format.
#[test]
fn key_table_spells_each_key_once() {
    let mut gguf: Vec<&str> = keys::ALL
        .iter()
        .map(|k| k.gguf)
        .filter(|g| !g.is_empty())
        .collect();
    let mut hf: Vec<&str> = keys::ALL
        .iter()
        .flat_map(|k| k.hf.iter().copied())
        .collect();
    for (what, names) in [("GGUF key", &mut gguf), ("config.json name", &mut hf)] {
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a {what} in two rows");
    }
    for k in keys::ALL {
        assert!(
            !k.gguf.is_empty() || !k.hf.is_empty(),
            "{} names no key",
            k.field
        );
    }
}

/// GGUF metadata of architecture `arch` holding `present` (each = 4), nothing else.
fn gguf_meta(arch: &str, present: &[&Key]) -> GgufMeta {
    use ferrox_format::gguf::{to_bytes, GgufFile, MetaValue};
    let mut meta = vec![(
        "general.architecture".to_string(),
        MetaValue::String(arch.into()),
    )];
    meta.extend(
        present
            .iter()
            .map(|k| (k.gguf_key(arch), MetaValue::U32(4))),
    );
    let bytes = ferrox_core::storage::Bytes::from_vec(to_bytes(&meta, &[]));
    GgufMeta {
        file: std::sync::Arc::new(GgufFile::from_bytes(bytes).unwrap()),
    }
}

/// Every entry that claims `g`, by name.
fn gguf_claimants(g: &GgufMeta) -> Vec<&'static str> {
    ARCHITECTURES
        .iter()
        .filter(|a| a.claims_gguf(g))
        .map(|a| a.name)
        .collect()
}

/// Every GGUF architecture string, under every combination of the keys any claim on it tests,
/// is claimed by exactly one entry: the order of `ARCHITECTURES` decides nothing.
#[test]
fn every_gguf_name_has_one_claimant() {
    let reversed: Vec<&Architecture> = ARCHITECTURES.iter().rev().copied().collect();
    for name in ARCHITECTURES.iter().flat_map(|a| a.gguf_archs.iter()) {
        let mut keys: Vec<&Key> = ARCHITECTURES
            .iter()
            .filter(|a| a.gguf_archs.contains(name))
            .flat_map(|a| a.gguf_claims.iter().map(Claim::key))
            .collect();
        keys.sort_by_key(|k| k.gguf);
        keys.dedup_by_key(|k| k.gguf);
        for mask in 0..1u32 << keys.len() {
            let present: Vec<&Key> = (0..keys.len())
                .filter(|i| mask >> i & 1 == 1)
                .map(|i| keys[i])
                .collect();
            let g = gguf_meta(name, &present);
            let claimants = gguf_claimants(&g);
            let with: Vec<&str> = present.iter().map(|k| k.gguf).collect();
            assert_eq!(claimants.len(), 1, "{name} with {with:?}: {claimants:?}");
            let forward = gguf_claimant(ARCHITECTURES, &g).unwrap().name;
            assert_eq!(gguf_claimant(&reversed, &g).unwrap().name, forward);
        }
    }
}

/// Every Hugging Face `model_type`, every hf-tiny checkpoint and every gguf-tiny file has
/// exactly one family, whichever way the registry is ordered.
#[test]
fn every_fixture_has_one_claimant() {
    let reversed: Vec<&Architecture> = ARCHITECTURES.iter().rev().copied().collect();
    for mt in ARCHITECTURES.iter().flat_map(|a| a.hf_model_types.iter()) {
        let n = ARCHITECTURES
            .iter()
            .filter(|a| a.hf_model_types.contains(mt))
            .count();
        assert_eq!(n, 1, "model_type {mt}");
        let forward = hf_claimant(ARCHITECTURES, mt).unwrap().name;
        assert_eq!(hf_claimant(&reversed, mt).unwrap().name, forward);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hf_dirs = [
        root.join("tests/fixtures/hf-tiny"),
        root.join("../../../shared/fixtures/hf-tiny"),
    ];
    let mut seen = 0;
    for dir in hf_dirs.iter().filter_map(|d| std::fs::read_dir(d).ok()) {
        for entry in dir.map(Result::unwrap) {
            let Ok(text) = std::fs::read_to_string(entry.path().join("config.json")) else {
                continue;
            };
            let (arch, _) = parse_hf_config(&text).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let c = HfConfig::of(v.as_object().unwrap());
            let mt = c.str(&keys::MODEL_TYPE).unwrap().unwrap();
            assert_eq!(hf_claimant(&reversed, mt).unwrap().name, arch.name);
            seen += 1;
        }
    }
    assert!(seen >= 23, "{seen} hf-tiny checkpoints");
    let gguf_dir = root.join("tests/fixtures/gguf-tiny");
    let mut seen = 0;
    for entry in std::fs::read_dir(gguf_dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        let file = ferrox_format::gguf::GgufFile::open(&path).unwrap();
        let g = GgufMeta {
            file: std::sync::Arc::new(file),
        };
        let claimants = gguf_claimants(&g);
        assert_eq!(claimants.len(), 1, "{}: {claimants:?}", path.display());
        assert_eq!(gguf_claimant(&reversed, &g).unwrap().name, claimants[0]);
        seen += 1;
    }
    assert!(seen >= 24, "{seen} gguf-tiny files");
}

/// Two entries claiming one name is refused, not settled by order.
#[test]
fn an_overlapping_claim_is_refused() {
    let e = hf_claimant(&[&llama::ARCH, &llama::ARCH], "llama").unwrap_err();
    assert!(e.to_string().contains("claimed by both"), "{e}");
}

#[test]
fn hybrid_linear_attention_family() {
    use crate::config::LinearAttnConfig;
    use AttnKind::{Full, Linear};
    let q = fixture("qwen3_next");
    assert_eq!(q.layer_attn, vec![Linear, Linear, Linear, Full]);
    let lin = LinearAttnConfig {
        conv_kernel: 4,
        n_k_heads: 2,
        n_v_heads: 4,
        k_head_dim: 16,
        v_head_dim: 16,
    };
    assert_eq!(q.linear, Some(lin));
    assert_eq!((lin.conv_dim(), lin.state_len()), (128, 1024));
    assert_eq!((q.rope.rotary_dim, q.rope.interleaved), (8, false));
    assert_eq!(q.norm, NormKind::RmsOffsetOne);
    assert!(q.qk_norm && q.attn_output_gate && !q.qkv_bias);
    let m = &q.moe;
    assert_eq!(
        (m.n_experts, m.n_experts_active, m.shared_ffn_dim),
        (8, 2, 32)
    );
    assert!(m.shared_expert_gate && m.norm_topk_prob && m.scoring == RouterScoring::Softmax);
    assert_eq!(q.layer_moe, vec![true; 4]);
}

/// The qwen3_next fixture's config.json with `edit` applied, parsed: the key its refusal
/// names, and the message.
fn edited_qwen3_next(
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
) -> (String, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny/qwen3_next");
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(v.as_object_mut().unwrap());
    match parse_hf_config(&v.to_string()) {
        Ok(_) => panic!("an invalid config was accepted"),
        Err(e) => (e.key().expect("a named key").to_string(), e.to_string()),
    }
}

#[test]
fn bad_linear_attention_configs_are_refused() {
    let (k, e) = edited_qwen3_next(|c| {
        c.insert("linear_num_value_heads".into(), 3.into());
    });
    assert_eq!(k, "linear_num_value_heads", "{e}");
    assert!(e.contains("not a multiple of 2 key heads"), "{e}");
    let (k, e) = edited_qwen3_next(|c| {
        c.remove("linear_conv_kernel_dim");
    });
    assert_eq!(k, "linear_conv_kernel_dim", "{e}");
    let (k, e) = edited_qwen3_next(|c| {
        let kinds = [
            "linear_attention",
            "mamba",
            "linear_attention",
            "full_attention",
        ];
        c.insert("layer_types".into(), kinds.into());
    });
    assert!(k == "layer_types" && e.contains("mamba"), "{e}");
    let (k, e) = edited_qwen3_next(|c| {
        c.insert("layer_types".into(), ["full_attention"].into());
    });
    assert!(
        k == "layer_types" && e.contains("1 entries for 4 layers"),
        "{e}"
    );
}

#[test]
fn default_layer_kinds_and_partial_rotary() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny/qwen3_next");
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = v.as_object_mut().unwrap();
    c.remove("layer_types");
    c.insert("num_hidden_layers".into(), 8.into());
    c.insert(
        "rope_parameters".into(),
        serde_json::json!({"rope_theta": 1e7}),
    );
    let (_, cfg) = parse_hf_config(&v.to_string()).unwrap();
    let full: Vec<usize> = (0..8)
        .filter(|&l| cfg.attn_kind(l) == AttnKind::Full)
        .collect();
    assert_eq!(full, vec![3, 7]);
    assert_eq!(
        cfg.rope.rotary_dim, 8,
        "transformers' default partial_rotary_factor 0.25"
    );
}

#[test]
fn random_hybrid_model_batches_like_single_tokens() {
    let cfg = fixture("qwen3_next");
    let d = crate::decoder::Decoder::new_random_small(cfg, 4, 64);
    let toks = [3, 17, 5, 40, 22, 9, 61, 0];
    let mut caches = d.new_caches();
    let batch = d.forward_batch(&toks, 0, &mut caches);
    let mut caches = d.new_caches();
    for (p, &t) in toks.iter().enumerate() {
        assert_eq!(d.forward_token(t, p, &mut caches), batch[p], "row {p}");
    }
}

/// The key named by the refusal of the `arch` fixture's config.json with `field` = `value`.
fn refused_key(arch: &str, field: &str, value: &serde_json::Value) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf-tiny")
        .join(arch);
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[field] = value.clone();
    match parse_hf_config(&v.to_string()) {
        Ok(_) => panic!("{arch} {field} = {value}: accepted"),
        Err(e) => e.key().unwrap_or_else(|| panic!("{e}: no key")).to_string(),
    }
}

/// A value derived from another row's key (Mixtral's expert width is its `intermediate_size`,
/// DeepSeek's rotated dims its `qk_rope_head_dim`) is named by that key.
#[test]
fn derived_values_are_named_by_their_source_key() {
    use serde_json::json;
    let mixtral = refused_key("mixtral", "intermediate_size", &json!(0));
    assert_eq!(mixtral, "intermediate_size");
    let rope = refused_key("deepseek_v3", "qk_rope_head_dim", &json!(7));
    assert_eq!(rope, "qk_rope_head_dim");
    // Six routed experts in the fixture's four groups.
    let groups = refused_key("deepseek_v3", "n_routed_experts", &json!(6));
    assert_eq!(groups, "n_group");
}

/// Hostile `config.json` values: each refused with an error naming the field.
#[test]
fn bad_config_json_values_are_refused_by_name() {
    use serde_json::json;
    let cases: &[(&str, &str, serde_json::Value, &str)] = &[
        (
            "llama",
            "num_attention_heads",
            json!(0),
            "num_attention_heads",
        ),
        (
            "llama",
            "num_hidden_layers",
            json!(1u64 << 40),
            "num_hidden_layers",
        ),
        (
            "llama",
            "num_hidden_layers",
            json!(100_000),
            "num_hidden_layers",
        ),
        (
            "llama",
            "num_key_value_heads",
            json!(3),
            "num_key_value_heads",
        ),
        (
            "llama",
            "num_key_value_heads",
            json!(-2),
            "num_key_value_heads",
        ),
        ("llama", "head_dim", json!(0), "head_dim"),
        ("llama", "vocab_size", json!(0), "vocab_size"),
        (
            "llama",
            "max_position_embeddings",
            json!(0),
            "max_position_embeddings",
        ),
        (
            "llama",
            "max_position_embeddings",
            json!(4096.5),
            "max_position_embeddings",
        ),
        ("llama", "rms_norm_eps", json!("1e-5"), "rms_norm_eps"),
        ("llama", "rms_norm_eps", json!(0), "rms_norm_eps"),
        (
            "llama",
            "partial_rotary_factor",
            json!(2.0),
            "partial_rotary_factor",
        ),
        ("llama", "hidden_act", json!("relu"), "hidden_act"),
        (
            "llama",
            "tie_word_embeddings",
            json!("yes"),
            "tie_word_embeddings",
        ),
        (
            "mixtral",
            "num_experts_per_tok",
            json!(0),
            "num_experts_per_tok",
        ),
        (
            "mixtral",
            "num_experts_per_tok",
            json!(5),
            "num_experts_per_tok",
        ),
        ("mixtral", "sliding_window", json!(0), "sliding_window"),
    ];
    for (arch, field, value, key) in cases {
        assert_eq!(refused_key(arch, field, value), *key);
    }
    // The rope dict's fields are named by their path.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny/mixtral");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    v["rope_parameters"]["rope_theta"] = json!(-1.0);
    let e = parse_hf_config(&v.to_string()).unwrap_err();
    assert_eq!(e.key(), Some("rope_theta"), "{e}");
    v["rope_parameters"]["rope_theta"] = json!("big");
    let e = parse_hf_config(&v.to_string()).unwrap_err();
    assert_eq!(e.key(), Some("rope_parameters.rope_theta"), "{e}");
}
