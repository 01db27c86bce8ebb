//! Typed reading of Hugging Face `config.json`: the fields every family shares and the sections
//! several share (RoPE, sliding layers, DeepSeek-style MoE, MLA, DSA). Each architecture file
//! starts from [`HfConfig::base`] and sets what its transformers configuration class says.
//!
//! Field meanings and defaults follow transformers 5.x configuration classes; both the 5.x
//! `rope_parameters` dict and the older `rope_theta` + `rope_scaling` pair are read.

use crate::config::{
    Activation, AttnKind, Dims, DsaConfig, IndexerKind, MlaConfig, ModelConfig, MoeConfig,
    RopeConfig, RopeScaling, RouterScoring,
};
use crate::weights::LoadError;
use serde_json::{Map, Value};

/// The language-model part of a `config.json`.
pub struct HfConfig<'a>(pub &'a Map<String, Value>);

fn invalid(msg: String) -> LoadError {
    LoadError::Config(format!("config.json: {msg}"))
}

fn missing(key: &str) -> LoadError {
    invalid(format!("missing or invalid \"{key}\""))
}

impl<'a> HfConfig<'a> {
    /// The object holding `model_type` (multimodal wrappers keep the language model under
    /// `text_config`).
    pub fn of(obj: &'a Map<String, Value>) -> Self {
        match obj.get("text_config").and_then(Value::as_object) {
            Some(t) if t.contains_key("model_type") => HfConfig(t),
            _ => HfConfig(obj),
        }
    }

    pub fn get(&self, k: &str) -> Option<&'a Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }
    pub fn str(&self, k: &str) -> Option<&'a str> {
        self.get(k).and_then(Value::as_str)
    }
    pub fn usize(&self, k: &str) -> Option<usize> {
        self.get(k).and_then(Value::as_u64).map(|v| v as usize)
    }
    pub fn f32(&self, k: &str) -> Option<f32> {
        self.get(k).and_then(Value::as_f64).map(|v| v as f32)
    }
    pub fn bool(&self, k: &str) -> Option<bool> {
        self.get(k).and_then(Value::as_bool)
    }
    pub fn req(&self, k: &str) -> Result<usize, LoadError> {
        self.usize(k).ok_or_else(|| missing(k))
    }
    pub fn str_list(&self, k: &str) -> Option<Vec<String>> {
        let a = self.get(k)?.as_array()?;
        a.iter().map(|s| s.as_str().map(str::to_string)).collect()
    }

    /// Dimensions, norm epsilon, activation, embedding tying, soft-caps, q/k/v bias
    /// (`attention_bias`) and full-attention RoPE (`interleaved` pairs or halves).
    pub fn base(&self, arch: &'static str, interleaved: bool) -> Result<ModelConfig, LoadError> {
        if let Some(q) = self.get("quantization_config") {
            // Pre-quantized Hub checkpoints (MXFP4 gpt-oss, GPTQ, AWQ, FP8) store their own
            // block formats under other tensor names; refuse by name instead of a missing tensor.
            let method = q
                .get("quant_method")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            return Err(invalid(format!(
                "quantization_config \"{method}\": pre-quantized Hub checkpoints are not loaded; \
                 use the unquantized checkpoint or a GGUF conversion"
            )));
        }
        let hidden = self.req("hidden_size")?;
        let n_layers = self.req("num_hidden_layers")?;
        let n_heads = self.req("num_attention_heads")?;
        let n_kv_heads = self.usize("num_key_value_heads").unwrap_or(n_heads);
        if n_heads == 0
            || hidden == 0
            || n_layers == 0
            || n_kv_heads == 0
            || n_heads % n_kv_heads != 0
        {
            return Err(invalid(format!(
                "bad attention shape: hidden {hidden}, {n_heads} heads, {n_kv_heads} kv heads, {n_layers} layers"
            )));
        }
        let dims = Dims {
            vocab: self.req("vocab_size")?,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim: self.usize("head_dim").unwrap_or(hidden / n_heads),
            ffn_dim: self.req("intermediate_size")?,
        };
        let max_pos = self.usize("max_position_embeddings").unwrap_or(4096);
        let rope = self.rope(None, dims.head_dim, interleaved, max_pos)?;
        let mut cfg = ModelConfig::new(arch, dims, rope);
        if matches!(rope.scaling, RopeScaling::Factors { .. }) {
            let pairs = rope.rotary_dim / 2;
            cfg.rope_freq_factors = Some(self.longrope_factors("short_factor", pairs)?);
            cfg.rope_long_factors = Some(self.longrope_factors("long_factor", pairs)?);
        }
        cfg.max_seq_len = max_pos;
        cfg.norm_eps = self.f32("rms_norm_eps").unwrap_or(1e-6);
        cfg.activation = self.activation()?;
        cfg.qkv_bias = self.bool("attention_bias").unwrap_or(false);
        cfg.tie_embeddings = self.bool("tie_word_embeddings").unwrap_or(false);
        cfg.final_logit_softcap = self.f32("final_logit_softcapping");
        cfg.attn_logit_softcap = self.f32("attn_logit_softcapping");
        Ok(cfg)
    }

    fn activation(&self) -> Result<Activation, LoadError> {
        let name = self
            .str("hidden_activation")
            .or(self.str("hidden_act"))
            .unwrap_or("silu");
        match name {
            "silu" | "swish" => Ok(Activation::Silu),
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu" => Ok(Activation::GeluTanh),
            other => Err(invalid(format!("unsupported activation \"{other}\""))),
        }
    }

    /// RoPE parameters: the transformers 5 `rope_parameters` dict (possibly keyed by layer
    /// type, as Gemma 3 does) or the legacy `rope_theta` / `rope_scaling` fields.
    fn rope_params(&self, layer_type: Option<&str>) -> (Option<&'a Map<String, Value>>, f32) {
        let legacy_theta = self.f32("rope_theta");
        if let Some(p) = self.get("rope_parameters").and_then(Value::as_object) {
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
        let scaling = self.get("rope_scaling").and_then(Value::as_object);
        (scaling, legacy_theta.unwrap_or(10_000.0))
    }

    /// The RoPE of layers of `layer_type` (`None`: the model's only one).
    pub fn rope(
        &self,
        layer_type: Option<&str>,
        head_dim: usize,
        interleaved: bool,
        max_pos: usize,
    ) -> Result<RopeConfig, LoadError> {
        let (p, theta) = self.rope_params(layer_type);
        let partial = p
            .and_then(|p| p.get("partial_rotary_factor"))
            .and_then(Value::as_f64)
            .map(|v| v as f32)
            .or(self.f32("partial_rotary_factor"))
            .unwrap_or(1.0);
        Ok(RopeConfig {
            theta,
            scaling: rope_scaling(
                p,
                max_pos,
                self.f32("original_max_position_embeddings").map(f64::from),
            )?,
            rotary_dim: (head_dim as f32 * partial) as usize,
            interleaved,
        })
    }

    /// One of LongRoPE's per-pair divisor sets (`short_factor`, `long_factor`); which one a
    /// position uses is `Rope`'s business (crate::blocks::rope).
    fn longrope_factors(&self, key: &str, pairs: usize) -> Result<Vec<f32>, LoadError> {
        let (p, _) = self.rope_params(None);
        let factors: Option<Vec<f32>> = p
            .and_then(|p| p.get(key))
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|v| v.as_f64().map(|f| f as f32)).collect());
        factors
            .filter(|f| f.len() == pairs)
            .ok_or_else(|| invalid(format!("LongRoPE {key} must list {pairs} numbers")))
    }

    /// Per-layer sliding flags from a `layer_types`-style list (`*sliding*` or `sparse`).
    pub fn layer_kinds(&self, key: &str, n_layers: usize) -> Result<Option<Vec<bool>>, LoadError> {
        let Some(list) = self.str_list(key) else {
            return Ok(None);
        };
        if list.len() != n_layers {
            return Err(invalid(format!(
                "{key} has {} entries for {n_layers} layers",
                list.len()
            )));
        }
        Ok(Some(
            list.iter()
                .map(|s| s.contains("sliding") || s == "sparse")
                .collect(),
        ))
    }

    /// Marks the layers of `sliding` as sliding-window layers of width `sliding_window`.
    pub fn set_sliding(&self, cfg: &mut ModelConfig, sliding: &[bool]) {
        cfg.layer_attn = sliding
            .iter()
            .map(|&s| if s { AttnKind::Sliding } else { AttnKind::Full })
            .collect();
        cfg.sliding_window = if sliding.iter().any(|&s| s) {
            self.usize("sliding_window")
        } else {
            None
        };
    }

    /// Sliding layers as `layer_types` lists them when `sliding_window` is set (transformers'
    /// generic rule); none otherwise.
    pub fn sliding_from_layer_types(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        if self.usize("sliding_window").is_none() {
            return Ok(());
        }
        if let Some(kinds) = self.layer_kinds("layer_types", cfg.n_layers)? {
            self.set_sliding(cfg, &kinds);
        }
        Ok(())
    }

    /// When `sliding_window` is set: the layers `layer_types` marks, else those `default`
    /// says (the family's fixed pattern).
    pub fn sliding_by_types_or(
        &self,
        cfg: &mut ModelConfig,
        default: impl Fn(usize) -> bool,
    ) -> Result<(), LoadError> {
        if self.usize("sliding_window").is_none() {
            return Ok(());
        }
        let n = cfg.n_layers;
        let kinds = match self.layer_kinds("layer_types", n)? {
            Some(k) => k,
            None => (0..n).map(default).collect(),
        };
        self.set_sliding(cfg, &kinds);
        Ok(())
    }

    /// Qwen2/Qwen3: with `use_sliding_window`, the layers `layer_types` marks, else those from
    /// `max_window_layers` on.
    pub fn qwen_sliding(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        if !self.bool("use_sliding_window").unwrap_or(false) {
            return Ok(());
        }
        let first = self.usize("max_window_layers").unwrap_or(cfg.n_layers);
        self.sliding_by_types_or(cfg, |l| l >= first)
    }

    /// Every layer sliding when `sliding_window` is set and `enabled`.
    pub fn sliding_all(&self, cfg: &mut ModelConfig, enabled: bool) {
        if self.usize("sliding_window").is_some() {
            self.set_sliding(cfg, &vec![enabled; cfg.n_layers]);
        }
    }

    /// DeepSeek-style MoE (GLM-4.5, DeepSeek-V3, GLM-5): sigmoid router with correction bias,
    /// grouped top-k, routed scaling, shared experts; dense FFN on the first
    /// `first_k_dense_replace` layers (or as `mlp_layer_types` says).
    pub fn deepseek_moe(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let expert_ffn = self.req("moe_intermediate_size")?;
        let n_shared = self.usize("n_shared_experts").unwrap_or(0);
        cfg.moe = MoeConfig {
            n_experts: self.req("n_routed_experts")?,
            n_experts_active: self.req("num_experts_per_tok")?,
            expert_ffn_dim: expert_ffn,
            n_shared_experts: n_shared,
            shared_ffn_dim: expert_ffn * n_shared,
            scoring: RouterScoring::Sigmoid,
            has_correction_bias: true,
            n_group: self.usize("n_group").unwrap_or(1).max(1),
            topk_group: self.usize("topk_group").unwrap_or(1).max(1),
            norm_topk_prob: self.bool("norm_topk_prob").unwrap_or(true),
            routed_scaling_factor: self.f32("routed_scaling_factor").unwrap_or(1.0),
            ..MoeConfig::none(cfg.hidden_dim)
        };
        let k = self.usize("first_k_dense_replace").unwrap_or(0);
        let default: Vec<bool> = (0..cfg.n_layers).map(|l| l >= k).collect();
        self.moe_layers(cfg, default)
    }

    /// Checks the expert counts and sets which layers are MoE: `mlp_layer_types` when given,
    /// else `default`.
    pub fn moe_layers(&self, cfg: &mut ModelConfig, default: Vec<bool>) -> Result<(), LoadError> {
        check_moe(&cfg.moe)?;
        cfg.layer_moe = self
            .layer_kinds("mlp_layer_types", cfg.n_layers)?
            .unwrap_or(default);
        Ok(())
    }

    /// Softmax top-`num_experts_per_tok` experts of `n_experts`, each `expert_ffn` wide,
    /// weights renormalised when `renormalise` (Mixtral, Granite, OLMoE, Qwen-MoE).
    pub fn softmax_moe(
        &self,
        cfg: &mut ModelConfig,
        n_experts: usize,
        expert_ffn: usize,
        renormalise: bool,
    ) -> Result<(), LoadError> {
        cfg.moe = MoeConfig {
            n_experts,
            n_experts_active: self.req("num_experts_per_tok")?,
            expert_ffn_dim: expert_ffn,
            norm_topk_prob: renormalise,
            ..MoeConfig::none(cfg.hidden_dim)
        };
        Ok(())
    }

    /// Qwen2-MoE / Qwen3-Next experts: softmax routing, one shared expert behind a sigmoid
    /// gate when `shared_expert_intermediate_size` is set, `norm_topk_prob` defaulting to
    /// `renormalise`, and Qwen's dense/MoE layer rule.
    pub fn qwen_gated_shared_moe(
        &self,
        cfg: &mut ModelConfig,
        renormalise: bool,
    ) -> Result<(), LoadError> {
        let shared_ffn = self.usize("shared_expert_intermediate_size").unwrap_or(0);
        cfg.moe = MoeConfig {
            n_experts: self.req("num_experts")?,
            n_experts_active: self.req("num_experts_per_tok")?,
            expert_ffn_dim: self.req("moe_intermediate_size")?,
            n_shared_experts: usize::from(shared_ffn > 0),
            shared_ffn_dim: shared_ffn,
            shared_expert_gate: shared_ffn > 0,
            norm_topk_prob: self.bool("norm_topk_prob").unwrap_or(renormalise),
            ..MoeConfig::none(cfg.hidden_dim)
        };
        self.qwen_moe_layers(cfg)
    }

    /// Every layer's FFN is the MoE block (or as `mlp_layer_types` says).
    pub fn moe_everywhere(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let all = vec![true; cfg.n_layers];
        self.moe_layers(cfg, all)
    }

    /// Qwen-MoE layer rule: dense FFN on the layers of `mlp_only_layers` and all but every
    /// `decoder_sparse_step`-th (or as `mlp_layer_types` says).
    pub fn qwen_moe_layers(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let only: Vec<usize> = self
            .get("mlp_only_layers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_u64().map(|v| v as usize))
                    .collect()
            })
            .unwrap_or_default();
        let step = self.usize("decoder_sparse_step").unwrap_or(1).max(1);
        let default = (0..cfg.n_layers)
            .map(|l| !only.contains(&l) && (l + 1) % step == 0)
            .collect();
        self.moe_layers(cfg, default)
    }

    /// Multi-head latent attention; `head_dim` becomes the rope dim (transformers'
    /// `__post_init__`), and the RoPE is re-read for that width.
    pub fn mla(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let m = MlaConfig {
            q_lora_rank: self.usize("q_lora_rank"),
            kv_lora_rank: self.req("kv_lora_rank")?,
            qk_nope_head_dim: self.req("qk_nope_head_dim")?,
            qk_rope_head_dim: self.req("qk_rope_head_dim")?,
            v_head_dim: self.req("v_head_dim")?,
        };
        cfg.head_dim = m.qk_rope_head_dim;
        let interleaved = self.bool("rope_interleave").unwrap_or(true);
        cfg.rope = self.rope(None, cfg.head_dim, interleaved, cfg.max_seq_len)?;
        cfg.mla = Some(m);
        Ok(())
    }

    /// The DSA lightning indexer (`rope_interleaved`: GLM-5 rotates pairs, DeepSeek-V3.2
    /// halves). Which layers run their own indexer: `indexer_types`, `index_topk_pattern`, or
    /// transformers' frequency rule.
    pub fn dsa(&self, cfg: &mut ModelConfig, rope_interleaved: bool) -> Result<(), LoadError> {
        let n_layers = cfg.n_layers;
        let kinds: Vec<IndexerKind> = if let Some(l) = self.str_list("indexer_types") {
            check_len("indexer_types", l.len(), n_layers)?;
            l.iter()
                .map(|s| match s.as_str() {
                    "full" => Ok(IndexerKind::Full),
                    "shared" => Ok(IndexerKind::Shared),
                    o => Err(invalid(format!("indexer type \"{o}\""))),
                })
                .collect::<Result<_, _>>()?
        } else if let Some(p) = self.str("index_topk_pattern") {
            check_len("index_topk_pattern", p.len(), n_layers)?;
            p.chars()
                .map(|ch| match ch {
                    'F' | 'f' => Ok(IndexerKind::Full),
                    'S' | 's' => Ok(IndexerKind::Shared),
                    o => Err(invalid(format!("index_topk_pattern '{o}'"))),
                })
                .collect::<Result<_, _>>()?
        } else {
            indexer_types_from_freq(
                n_layers,
                self.usize("index_topk_freq").unwrap_or(1),
                self.usize("index_skip_topk_offset").unwrap_or(2),
            )
        };
        if kinds.first() == Some(&IndexerKind::Shared) {
            return Err(invalid(
                "layer 0 cannot share a previous layer's indexer".into(),
            ));
        }
        cfg.dsa = Some(DsaConfig {
            index_n_heads: self.req("index_n_heads")?,
            index_head_dim: self.req("index_head_dim")?,
            index_topk: self.req("index_topk")?,
            indexer_types: kinds,
            rope_interleaved,
        });
        Ok(())
    }
}

fn check_len(key: &str, got: usize, n_layers: usize) -> Result<(), LoadError> {
    if got != n_layers {
        return Err(invalid(format!(
            "{key} has {got} entries for {n_layers} layers"
        )));
    }
    Ok(())
}

/// Expert counts that a router can work with.
pub fn check_moe(m: &MoeConfig) -> Result<(), LoadError> {
    if m.n_experts_active == 0 || m.n_experts_active > m.n_experts {
        return Err(invalid(format!(
            "{} active experts of {}",
            m.n_experts_active, m.n_experts
        )));
    }
    if !m.n_experts.is_multiple_of(m.n_group) || m.topk_group > m.n_group {
        return Err(invalid(format!(
            "{} experts in {} groups, {} kept",
            m.n_experts, m.n_group, m.topk_group
        )));
    }
    Ok(())
}

/// `original_max`: the top-level `original_max_position_embeddings` (older LongRoPE configs).
fn rope_scaling(
    p: Option<&Map<String, Value>>,
    max_pos: usize,
    original_max: Option<f64>,
) -> Result<RopeScaling, LoadError> {
    let Some(p) = p else {
        return Ok(RopeScaling::None);
    };
    let f = |k: &str| p.get(k).and_then(Value::as_f64).map(|v| v as f32);
    let factor = || f("factor").ok_or_else(|| missing("rope factor"));
    let ty = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    Ok(match ty {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "llama3" => RopeScaling::Llama3 {
            factor: factor()?,
            low_freq_factor: f("low_freq_factor").unwrap_or(1.0),
            high_freq_factor: f("high_freq_factor").unwrap_or(4.0),
            original_max_position: f("original_max_position_embeddings").unwrap_or(8192.0) as usize,
        },
        "yarn" => RopeScaling::Yarn {
            factor: factor()?,
            original_max_position: f("original_max_position_embeddings")
                .map(|v| v as usize)
                .unwrap_or(max_pos),
            beta_fast: f("beta_fast").unwrap_or(32.0),
            beta_slow: f("beta_slow").unwrap_or(1.0),
            mscale: f("mscale").unwrap_or(0.0),
            mscale_all_dim: f("mscale_all_dim").unwrap_or(0.0),
            truncate: p.get("truncate").and_then(Value::as_bool).unwrap_or(true),
        },
        "longrope" | "su" => {
            let original = f("original_max_position_embeddings")
                .map(|v| v as f64)
                .or(original_max)
                .unwrap_or(max_pos as f64);
            let scale = f("factor").map_or(max_pos as f64 / original, |v| v as f64);
            let attn_factor = match f("attention_factor") {
                Some(a) => a as f64,
                None if scale <= 1.0 => 1.0,
                None => (1.0 + scale.ln() / original.ln()).sqrt(),
            };
            RopeScaling::Factors {
                attn_factor: attn_factor as f32,
                original_max_position: original as usize,
            }
        }
        other => return Err(invalid(format!("unsupported rope_type \"{other}\""))),
    })
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
