//! Hugging Face `config.json` → [`ModelConfig`].
//!
//! Field meanings and defaults follow transformers 5.x configuration classes (`LlamaConfig`,
//! `Qwen2Config`, `Qwen3Config`, `Gemma3TextConfig`, `Glm4Config`, `Glm4MoeConfig`,
//! `Glm4MoeLiteConfig`, `GlmMoeDsaConfig`, `DeepseekV3Config`, `DeepseekV32Config`,
//! `Qwen3MoeConfig`, `MixtralConfig`). Both the 5.x `rope_parameters` dict and the older
//! `rope_theta` + `rope_scaling` pair are read.

use crate::config::{
    Activation, Arch, AttnKind, DsaConfig, IndexerKind, MlaConfig, ModelConfig, MoeConfig,
    NormKind, RopeConfig, RopeScaling, RouterScoring,
};
use serde_json::{Map, Value};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum HfConfigError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("config.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config.json has no \"model_type\"")]
    NoModelType,
    #[error("unsupported model_type \"{0}\"")]
    UnknownModelType(String),
    #[error("config.json: missing or invalid \"{0}\"")]
    Missing(&'static str),
    #[error("config.json: {0}")]
    Invalid(String),
}

type Result<T> = std::result::Result<T, HfConfigError>;

/// Reads `dir/config.json`.
pub fn load_hf_config(dir: &Path) -> Result<ModelConfig> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| HfConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_hf_config(&text)
}

/// Parses the text of a `config.json`.
pub fn parse_hf_config(text: &str) -> Result<ModelConfig> {
    let v: Value = serde_json::from_str(text)?;
    let obj = v
        .as_object()
        .ok_or(HfConfigError::Invalid("top level is not an object".into()))?;
    // Multimodal wrappers keep the language model under `text_config`.
    let c = match obj.get("text_config").and_then(Value::as_object) {
        Some(t) if t.contains_key("model_type") => t,
        _ => obj,
    };
    let c = Cfg(c);
    let mt = c.str("model_type").ok_or(HfConfigError::NoModelType)?;
    let arch = match mt {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        "gemma3_text" | "gemma3" => Arch::Gemma3,
        "glm4" => Arch::Glm4,
        "glm4_moe" => Arch::Glm4Moe,
        "glm4_moe_lite" => Arch::Glm4MoeLite,
        "glm_moe_dsa" => Arch::GlmMoeDsa,
        "deepseek_v3" => Arch::DeepseekV3,
        "deepseek_v32" => Arch::DeepseekV32,
        "qwen3_moe" => Arch::Qwen3Moe,
        "mixtral" => Arch::Mixtral,
        other => return Err(HfConfigError::UnknownModelType(other.to_string())),
    };
    build(arch, &c)
}

struct Cfg<'a>(&'a Map<String, Value>);

impl Cfg<'_> {
    fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }
    fn str(&self, k: &str) -> Option<&str> {
        self.get(k).and_then(Value::as_str)
    }
    fn usize(&self, k: &str) -> Option<usize> {
        self.get(k).and_then(Value::as_u64).map(|v| v as usize)
    }
    fn f32(&self, k: &str) -> Option<f32> {
        self.get(k).and_then(Value::as_f64).map(|v| v as f32)
    }
    fn bool(&self, k: &str) -> Option<bool> {
        self.get(k).and_then(Value::as_bool)
    }
    fn req(&self, k: &'static str) -> Result<usize> {
        self.usize(k).ok_or(HfConfigError::Missing(k))
    }
    fn str_list(&self, k: &str) -> Option<Vec<String>> {
        let a = self.get(k)?.as_array()?;
        a.iter().map(|s| s.as_str().map(str::to_string)).collect()
    }
}

/// RoPE parameters: the transformers 5 `rope_parameters` dict (possibly keyed by layer type, as
/// Gemma 3 does) or the legacy `rope_theta` / `rope_scaling` fields.
fn rope_params<'a>(
    c: &'a Cfg<'a>,
    layer_type: Option<&str>,
) -> (Option<&'a Map<String, Value>>, f32) {
    let legacy_theta = c.f32("rope_theta");
    if let Some(p) = c.get("rope_parameters").and_then(Value::as_object) {
        let p = match layer_type.and_then(|t| p.get(t)).and_then(Value::as_object) {
            Some(inner) => inner,
            None => p,
        };
        let theta = p
            .get("rope_theta")
            .and_then(Value::as_f64)
            .map(|v| v as f32)
            .or(legacy_theta)
            .unwrap_or(10_000.0);
        return (Some(p), theta);
    }
    let scaling = c.get("rope_scaling").and_then(Value::as_object);
    (scaling, legacy_theta.unwrap_or(10_000.0))
}

fn rope_scaling(p: Option<&Map<String, Value>>, max_pos: usize) -> Result<RopeScaling> {
    let Some(p) = p else {
        return Ok(RopeScaling::None);
    };
    let f = |k: &str| p.get(k).and_then(Value::as_f64).map(|v| v as f32);
    let ty = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    Ok(match ty {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: f("factor").ok_or(HfConfigError::Missing("rope factor"))?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: f("factor").ok_or(HfConfigError::Missing("rope factor"))?,
            low_freq_factor: f("low_freq_factor").unwrap_or(1.0),
            high_freq_factor: f("high_freq_factor").unwrap_or(4.0),
            original_max_position: f("original_max_position_embeddings").unwrap_or(8192.0) as usize,
        },
        "yarn" => RopeScaling::Yarn {
            factor: f("factor").ok_or(HfConfigError::Missing("rope factor"))?,
            original_max_position: f("original_max_position_embeddings")
                .map(|v| v as usize)
                .unwrap_or(max_pos),
            beta_fast: f("beta_fast").unwrap_or(32.0),
            beta_slow: f("beta_slow").unwrap_or(1.0),
            mscale: f("mscale").unwrap_or(0.0),
            mscale_all_dim: f("mscale_all_dim").unwrap_or(0.0),
        },
        other => {
            return Err(HfConfigError::Invalid(format!(
                "unsupported rope_type \"{other}\""
            )))
        }
    })
}

fn rope_config(
    c: &Cfg,
    layer_type: Option<&str>,
    head_dim: usize,
    interleaved: bool,
    max_pos: usize,
) -> Result<RopeConfig> {
    let (p, theta) = rope_params(c, layer_type);
    let partial = p
        .and_then(|p| p.get("partial_rotary_factor"))
        .and_then(Value::as_f64)
        .map(|v| v as f32)
        .or(c.f32("partial_rotary_factor"))
        .unwrap_or(1.0);
    Ok(RopeConfig {
        theta,
        scaling: rope_scaling(p, max_pos)?,
        rotary_dim: (head_dim as f32 * partial) as usize,
        interleaved,
    })
}

fn layer_kinds(list: &[String], n_layers: usize, key: &'static str) -> Result<Vec<bool>> {
    if list.len() != n_layers {
        return Err(HfConfigError::Invalid(format!(
            "{key} has {} entries for {n_layers} layers",
            list.len()
        )));
    }
    Ok(list
        .iter()
        .map(|s| s.contains("sliding") || s == "sparse")
        .collect())
}

fn build(arch: Arch, c: &Cfg) -> Result<ModelConfig> {
    use Arch::*;
    let hidden = c.req("hidden_size")?;
    let n_layers = c.req("num_hidden_layers")?;
    let n_heads = c.req("num_attention_heads")?;
    let n_kv_heads = c.usize("num_key_value_heads").unwrap_or(n_heads);
    let vocab = c.req("vocab_size")?;
    if n_heads == 0 || hidden == 0 || n_layers == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0
    {
        return Err(HfConfigError::Invalid(format!(
            "bad attention shape: hidden {hidden}, {n_heads} heads, {n_kv_heads} kv heads, {n_layers} layers"
        )));
    }
    let is_mla = matches!(arch, Glm4MoeLite | GlmMoeDsa | DeepseekV3 | DeepseekV32);
    let max_pos = c.usize("max_position_embeddings").unwrap_or(4096);

    let mla = if is_mla {
        Some(MlaConfig {
            q_lora_rank: c.usize("q_lora_rank"),
            kv_lora_rank: c.req("kv_lora_rank")?,
            qk_nope_head_dim: c.req("qk_nope_head_dim")?,
            qk_rope_head_dim: c.req("qk_rope_head_dim")?,
            v_head_dim: c.req("v_head_dim")?,
        })
    } else {
        None
    };
    // MLA configs overwrite head_dim with the rope dim (transformers `__post_init__`).
    let head_dim = match mla {
        Some(m) => m.qk_rope_head_dim,
        None => c.usize("head_dim").unwrap_or(hidden / n_heads),
    };

    let interleaved = match arch {
        Glm4 => true,
        Glm4MoeLite | DeepseekV3 => c.bool("rope_interleave").unwrap_or(true),
        GlmMoeDsa | DeepseekV32 => c.bool("rope_interleave").unwrap_or(true),
        _ => false,
    };
    let gemma = arch == Gemma3;
    let rope = rope_config(
        c,
        gemma.then_some("full_attention"),
        head_dim,
        interleaved,
        max_pos,
    )?;
    let rope_local = if gemma {
        let mut local = rope_config(c, Some("sliding_attention"), head_dim, false, max_pos)?;
        if c.get("rope_parameters").is_none() {
            // Legacy Gemma 3 configs: local layers use `rope_local_base_freq`, no scaling.
            local.theta = c.f32("rope_local_base_freq").unwrap_or(10_000.0);
            local.scaling = RopeScaling::None;
        }
        Some(local)
    } else {
        None
    };

    // Sliding-window layers.
    let window = c.usize("sliding_window");
    let sliding: Vec<bool> = match (arch, window) {
        (_, None) => vec![false; n_layers],
        (Mixtral, Some(_)) => vec![true; n_layers],
        (Qwen3Moe, Some(_)) => vec![c.bool("use_sliding_window").unwrap_or(false); n_layers],
        (Qwen2 | Qwen3, Some(_)) if !c.bool("use_sliding_window").unwrap_or(false) => {
            vec![false; n_layers]
        }
        (_, Some(_)) => match c.str_list("layer_types") {
            Some(l) => layer_kinds(&l, n_layers, "layer_types")?,
            None if matches!(arch, Qwen2 | Qwen3) => {
                let mwl = c.usize("max_window_layers").unwrap_or(n_layers);
                (0..n_layers).map(|l| l >= mwl).collect()
            }
            None if gemma => {
                let pat = c.usize("sliding_window_pattern").unwrap_or(6).max(1);
                (0..n_layers).map(|l| (l + 1) % pat != 0).collect()
            }
            None => vec![false; n_layers],
        },
    };
    let layer_attn: Vec<AttnKind> = sliding
        .iter()
        .map(|&s| if s { AttnKind::Sliding } else { AttnKind::Full })
        .collect();
    let sliding_window = if sliding.iter().any(|&s| s) {
        window
    } else {
        None
    };

    let moe = moe_config(arch, c, hidden)?;
    let layer_moe = moe_layers(arch, c, n_layers, moe.n_experts)?;
    let dsa = dsa_config(arch, c, n_layers)?;

    let ffn_dim = c.req("intermediate_size")?;
    let qkv_bias = match arch {
        Qwen2 => true,
        Glm4 | Glm4Moe | Llama | Qwen3 | Qwen3Moe | Gemma3 => {
            c.bool("attention_bias").unwrap_or(false)
        }
        _ => false,
    };
    let eps = c.f32("rms_norm_eps").unwrap_or(1e-6);
    Ok(ModelConfig {
        arch,
        vocab_size: vocab,
        hidden_dim: hidden,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim,
        max_seq_len: max_pos,
        norm_eps: eps,
        norm: if gemma {
            NormKind::RmsOffsetOne
        } else {
            NormKind::Rms
        },
        activation: match c
            .str("hidden_activation")
            .or(c.str("hidden_act"))
            .unwrap_or("silu")
        {
            "silu" | "swish" => Activation::Silu,
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu" => Activation::GeluTanh,
            other => {
                return Err(HfConfigError::Invalid(format!(
                    "unsupported activation \"{other}\""
                )))
            }
        },
        rope,
        rope_local,
        sliding_window,
        layer_attn,
        layer_moe,
        qkv_bias,
        qk_norm: match arch {
            Qwen3 | Qwen3Moe | Gemma3 => true,
            Glm4Moe => c.bool("use_qk_norm").unwrap_or(false),
            _ => false,
        },
        post_norms: matches!(arch, Gemma3 | Glm4),
        attn_scale: if gemma {
            Some((c.f32("query_pre_attn_scalar").unwrap_or(head_dim as f32)).powf(-0.5))
        } else {
            None
        },
        embed_scale: gemma,
        tie_embeddings: c.bool("tie_word_embeddings").unwrap_or(gemma),
        final_logit_softcap: c.f32("final_logit_softcapping"),
        attn_logit_softcap: c.f32("attn_logit_softcapping"),
        moe,
        mla,
        dsa,
    })
}

fn moe_config(arch: Arch, c: &Cfg, hidden: usize) -> Result<MoeConfig> {
    use Arch::*;
    let mut m = MoeConfig {
        hidden_dim: hidden,
        n_experts: 0,
        n_experts_active: 0,
        n_shared_experts: 0,
        expert_ffn_dim: 0,
        shared_ffn_dim: 0,
        scoring: RouterScoring::Softmax,
        has_correction_bias: false,
        n_group: 1,
        topk_group: 1,
        norm_topk_prob: false,
        routed_scaling_factor: 1.0,
        shared_expert_gate: false,
    };
    match arch {
        Llama | Qwen2 | Qwen3 | Gemma3 | Glm4 => return Ok(m),
        Mixtral => {
            m.n_experts = c.req("num_local_experts")?;
            m.n_experts_active = c.req("num_experts_per_tok")?;
            m.expert_ffn_dim = c.req("intermediate_size")?;
            m.norm_topk_prob = true;
        }
        Qwen3Moe => {
            m.n_experts = c
                .usize("num_experts")
                .or(c.usize("num_local_experts"))
                .ok_or(HfConfigError::Missing("num_experts"))?;
            m.n_experts_active = c.req("num_experts_per_tok")?;
            m.expert_ffn_dim = c.req("moe_intermediate_size")?;
            m.norm_topk_prob = c.bool("norm_topk_prob").unwrap_or(false);
        }
        Glm4Moe | Glm4MoeLite | GlmMoeDsa | DeepseekV3 | DeepseekV32 => {
            m.n_experts = c.req("n_routed_experts")?;
            m.n_experts_active = c.req("num_experts_per_tok")?;
            m.expert_ffn_dim = c.req("moe_intermediate_size")?;
            m.n_shared_experts = c.usize("n_shared_experts").unwrap_or(0);
            m.shared_ffn_dim = m.expert_ffn_dim * m.n_shared_experts;
            m.scoring = RouterScoring::Sigmoid;
            m.has_correction_bias = true;
            m.n_group = c.usize("n_group").unwrap_or(1).max(1);
            m.topk_group = c.usize("topk_group").unwrap_or(1).max(1);
            m.norm_topk_prob = c.bool("norm_topk_prob").unwrap_or(true);
            m.routed_scaling_factor = c.f32("routed_scaling_factor").unwrap_or(1.0);
        }
    }
    if m.n_experts_active == 0 || m.n_experts_active > m.n_experts {
        return Err(HfConfigError::Invalid(format!(
            "{} active experts of {}",
            m.n_experts_active, m.n_experts
        )));
    }
    if !m.n_experts.is_multiple_of(m.n_group) || m.topk_group > m.n_group {
        return Err(HfConfigError::Invalid(format!(
            "{} experts in {} groups, {} kept",
            m.n_experts, m.n_group, m.topk_group
        )));
    }
    Ok(m)
}

fn moe_layers(arch: Arch, c: &Cfg, n_layers: usize, n_experts: usize) -> Result<Vec<bool>> {
    use Arch::*;
    if n_experts == 0 {
        return Ok(vec![false; n_layers]);
    }
    if let Some(l) = c.str_list("mlp_layer_types") {
        return layer_kinds(&l, n_layers, "mlp_layer_types");
    }
    Ok(match arch {
        Qwen3Moe => {
            let only: Vec<usize> = c
                .get("mlp_only_layers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_u64().map(|v| v as usize))
                        .collect()
                })
                .unwrap_or_default();
            let step = c.usize("decoder_sparse_step").unwrap_or(1).max(1);
            (0..n_layers)
                .map(|l| !only.contains(&l) && (l + 1) % step == 0)
                .collect()
        }
        Mixtral => vec![true; n_layers],
        _ => {
            let k = c.usize("first_k_dense_replace").unwrap_or(0);
            (0..n_layers).map(|l| l >= k).collect()
        }
    })
}

fn dsa_config(arch: Arch, c: &Cfg, n_layers: usize) -> Result<Option<DsaConfig>> {
    if !matches!(arch, Arch::GlmMoeDsa | Arch::DeepseekV32) {
        return Ok(None);
    }
    let indexer_types = if let Some(l) = c.str_list("indexer_types") {
        if l.len() != n_layers {
            return Err(HfConfigError::Invalid(format!(
                "indexer_types has {} entries for {n_layers} layers",
                l.len()
            )));
        }
        l.iter()
            .map(|s| match s.as_str() {
                "full" => Ok(IndexerKind::Full),
                "shared" => Ok(IndexerKind::Shared),
                o => Err(HfConfigError::Invalid(format!("indexer type \"{o}\""))),
            })
            .collect::<Result<Vec<_>>>()?
    } else if let Some(p) = c.str("index_topk_pattern") {
        if p.len() != n_layers {
            return Err(HfConfigError::Invalid(format!(
                "index_topk_pattern has {} entries for {n_layers} layers",
                p.len()
            )));
        }
        p.chars()
            .map(|ch| match ch {
                'F' | 'f' => Ok(IndexerKind::Full),
                'S' | 's' => Ok(IndexerKind::Shared),
                o => Err(HfConfigError::Invalid(format!("index_topk_pattern '{o}'"))),
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        indexer_types_from_freq(
            n_layers,
            c.usize("index_topk_freq").unwrap_or(1),
            c.usize("index_skip_topk_offset").unwrap_or(2),
        )
    };
    if indexer_types.first() == Some(&IndexerKind::Shared) {
        return Err(HfConfigError::Invalid(
            "layer 0 cannot share a previous layer's indexer".into(),
        ));
    }
    Ok(Some(DsaConfig {
        index_n_heads: c.req("index_n_heads")?,
        index_head_dim: c.req("index_head_dim")?,
        index_topk: c.req("index_topk")?,
        indexer_types,
        // DeepSeek-V3.2's indexer rotates halves; GLM-5's rotates adjacent pairs.
        rope_interleaved: arch == Arch::GlmMoeDsa,
    }))
}

/// transformers' rule: layer i runs its own indexer iff `max(i - offset + 1, 0) % freq == 0`.
pub fn indexer_types_from_freq(n_layers: usize, freq: usize, offset: usize) -> Vec<IndexerKind> {
    let freq = freq.max(1);
    (0..n_layers)
        .map(|i| {
            if (i + 1).saturating_sub(offset) % freq == 0 {
                IndexerKind::Full
            } else {
                IndexerKind::Shared
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(matches!(e, HfConfigError::UnknownModelType(ref t) if t == "falcon_h9"));
        assert!(e.to_string().contains("falcon_h9"));
        assert!(matches!(
            parse_hf_config("{}").unwrap_err(),
            HfConfigError::NoModelType
        ));
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
        assert_eq!((l.arch, l.head_dim, l.n_kv_heads), (Arch::Llama, 16, 2));
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
}
