//! Typed reading of Hugging Face `config.json`: the fields every family shares and the sections
//! several share (RoPE, sliding layers, DeepSeek-style MoE, MLA, DSA). Each architecture file
//! starts from [`HfConfig::base`] and sets what its transformers configuration class says.
//!
//! Field meanings and defaults follow transformers 5.x configuration classes; both the 5.x
//! `rope_parameters` dict and the older `rope_theta` + `rope_scaling` pair are read.

use super::gguf::{MAX_LAYERS, MAX_VALUE};
use crate::config::{
    Activation, AttnKind, Dims, DsaConfig, IndexerKind, MlaConfig, ModelConfig, MoeConfig,
    RopeConfig, RopeScaling, RouterScoring,
};
use crate::weights::LoadError;
use serde_json::{Map, Value};

/// The language-model part of a `config.json` (or one of its nested objects).
pub struct HfConfig<'a> {
    map: &'a Map<String, Value>,
    /// Where `map` sits in the file (`"rope_scaling."`), for naming fields in errors.
    prefix: String,
}

/// The error for field `key` of `config.json`.
fn bad(key: &str, problem: impl std::fmt::Display) -> LoadError {
    LoadError::Value {
        key: key.to_string(),
        problem: problem.to_string(),
    }
}

impl<'a> HfConfig<'a> {
    /// The object holding `model_type` (multimodal wrappers keep the language model under
    /// `text_config`).
    pub fn of(obj: &'a Map<String, Value>) -> Self {
        match obj.get("text_config").and_then(Value::as_object) {
            Some(t) if t.contains_key("model_type") => HfConfig {
                map: t,
                prefix: "text_config.".into(),
            },
            _ => HfConfig {
                map: obj,
                prefix: String::new(),
            },
        }
    }

    /// The object at `k`, when there is one.
    pub fn sub(&self, k: &str) -> Option<HfConfig<'a>> {
        Some(HfConfig {
            map: self.get(k)?.as_object()?,
            prefix: format!("{}{k}.", self.prefix),
        })
    }

    /// Field `k`'s name in the file (`rope_scaling.factor`).
    pub fn path(&self, k: &str) -> String {
        format!("{}{k}", self.prefix)
    }

    /// The error for field `k` of this object.
    pub fn bad(&self, k: &str, problem: impl std::fmt::Display) -> LoadError {
        bad(&self.path(k), problem)
    }

    pub fn get(&self, k: &str) -> Option<&'a Value> {
        self.map.get(k).filter(|v| !v.is_null())
    }
    pub fn str(&self, k: &str) -> Result<Option<&'a str>, LoadError> {
        self.typed(k, "a string", Value::as_str)
    }
    /// A count or size; another type, a negative or fractional number, or one beyond
    /// [`MAX_VALUE`] is an error naming the field (never a silent default).
    pub fn usize(&self, k: &str) -> Result<Option<usize>, LoadError> {
        match self.typed(k, "a non-negative integer", Value::as_u64)? {
            Some(x) if x <= MAX_VALUE => Ok(Some(x as usize)),
            Some(x) => Err(self.bad(k, format!("= {x} is out of range (at most {MAX_VALUE})"))),
            None => Ok(None),
        }
    }
    /// A number (JSON integers are numbers too); non-finite values are refused.
    pub fn f32(&self, k: &str) -> Result<Option<f32>, LoadError> {
        match self.typed(k, "a number", Value::as_f64)? {
            Some(x) if (x as f32).is_finite() => Ok(Some(x as f32)),
            Some(x) => Err(self.bad(k, format!("= {x} is not a finite 32-bit number"))),
            None => Ok(None),
        }
    }
    pub fn bool(&self, k: &str) -> Result<Option<bool>, LoadError> {
        self.typed(k, "a bool", Value::as_bool)
    }
    pub fn req(&self, k: &str) -> Result<usize, LoadError> {
        self.usize(k)?.ok_or_else(|| self.bad(k, "is missing"))
    }
    pub fn str_list(&self, k: &str) -> Result<Option<Vec<String>>, LoadError> {
        let list = |v: &Value| -> Option<Vec<String>> {
            let a = v.as_array()?;
            a.iter().map(|s| s.as_str().map(str::to_string)).collect()
        };
        self.typed(k, "a list of strings", list)
    }
    /// The value at `k` through `conv`: `None` when absent or null, an error naming `k` and
    /// `want` when `conv` finds no value of its type there.
    fn typed<T>(
        &self,
        k: &str,
        want: &str,
        conv: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, LoadError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        conv(v).map(Some).ok_or_else(|| {
            let mut shown = v.to_string();
            if shown.len() > 40 {
                shown = format!("{}…", shown.chars().take(40).collect::<String>());
            }
            self.bad(k, format!("is {shown}, not {want}"))
        })
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
            return Err(self.bad(
                "quantization_config",
                format!(
                    "\"{method}\": pre-quantized Hub checkpoints are not loaded; use the \
                     unquantized checkpoint or a GGUF conversion"
                ),
            ));
        }
        let hidden = self.req("hidden_size")?;
        let n_layers = self.req("num_hidden_layers")?;
        // The per-layer lists are allocated from this count before anything else is checked.
        if !(1..=MAX_LAYERS).contains(&n_layers) {
            return Err(self.bad(
                "num_hidden_layers",
                format!("= {n_layers} is outside 1..={MAX_LAYERS}"),
            ));
        }
        let n_heads = self.req("num_attention_heads")?;
        if n_heads == 0 {
            return Err(self.bad("num_attention_heads", "is 0"));
        }
        let dims = Dims {
            vocab: self.req("vocab_size")?,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads: self.usize("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim: self.usize("head_dim")?.unwrap_or(hidden / n_heads),
            ffn_dim: self.req("intermediate_size")?,
        };
        let max_pos = self.usize("max_position_embeddings")?.unwrap_or(4096);
        let rope = self.rope(None, dims.head_dim, interleaved, max_pos)?;
        let mut cfg = ModelConfig::new(arch, dims, rope);
        if matches!(rope.scaling, RopeScaling::Factors { .. }) {
            let pairs = rope.rotary_dim / 2;
            cfg.rope_freq_factors = Some(self.longrope_factors("short_factor", pairs)?);
            cfg.rope_long_factors = Some(self.longrope_factors("long_factor", pairs)?);
        }
        cfg.max_seq_len = max_pos;
        cfg.norm_eps = self.f32("rms_norm_eps")?.unwrap_or(1e-6);
        cfg.activation = self.activation()?;
        cfg.qkv_bias = self.bool("attention_bias")?.unwrap_or(false);
        cfg.tie_embeddings = self.bool("tie_word_embeddings")?.unwrap_or(false);
        cfg.final_logit_softcap = self.f32("final_logit_softcapping")?;
        cfg.attn_logit_softcap = self.f32("attn_logit_softcapping")?;
        Ok(cfg)
    }

    fn activation(&self) -> Result<Activation, LoadError> {
        let key = match self.get("hidden_activation") {
            Some(_) => "hidden_activation",
            None => "hidden_act",
        };
        match self.str(key)?.unwrap_or("silu") {
            "silu" | "swish" => Ok(Activation::Silu),
            "gelu_pytorch_tanh" | "gelu_tanh" | "gelu" => Ok(Activation::GeluTanh),
            other => Err(self.bad(key, format!("\"{other}\" is not a supported activation"))),
        }
    }

    /// RoPE parameters: the transformers 5 `rope_parameters` dict (possibly keyed by layer
    /// type, as Gemma 3 does) or the legacy `rope_theta` / `rope_scaling` fields.
    fn rope_params(
        &self,
        layer_type: Option<&str>,
    ) -> Result<(Option<HfConfig<'a>>, f32), LoadError> {
        let legacy_theta = self.f32("rope_theta")?;
        if let Some(p) = self.sub("rope_parameters") {
            let p = layer_type.and_then(|t| p.sub(t)).unwrap_or(p);
            let theta = p.f32("rope_theta")?.or(legacy_theta).unwrap_or(10_000.0);
            return Ok((Some(p), theta));
        }
        Ok((self.sub("rope_scaling"), legacy_theta.unwrap_or(10_000.0)))
    }

    /// The RoPE of layers of `layer_type` (`None`: the model's only one).
    pub fn rope(
        &self,
        layer_type: Option<&str>,
        head_dim: usize,
        interleaved: bool,
        max_pos: usize,
    ) -> Result<RopeConfig, LoadError> {
        let (p, theta) = self.rope_params(layer_type)?;
        let partial = match p.as_ref().map(|p| p.f32("partial_rotary_factor")) {
            Some(Ok(Some(f))) => f,
            Some(Err(e)) => return Err(e),
            _ => self.f32("partial_rotary_factor")?.unwrap_or(1.0),
        };
        if !(0.0..=1.0).contains(&partial) {
            return Err(self.bad(
                "partial_rotary_factor",
                format!("= {partial} is outside 0..=1"),
            ));
        }
        Ok(RopeConfig {
            theta,
            scaling: rope_scaling(
                p.as_ref(),
                max_pos,
                self.usize("original_max_position_embeddings")?,
            )?,
            rotary_dim: (head_dim as f32 * partial) as usize,
            interleaved,
        })
    }

    /// One of LongRoPE's per-pair divisor sets (`short_factor`, `long_factor`); which one a
    /// position uses is `Rope`'s business (crate::blocks::rope).
    fn longrope_factors(&self, key: &str, pairs: usize) -> Result<Vec<f32>, LoadError> {
        let (p, _) = self.rope_params(None)?;
        let p = p.ok_or_else(|| self.bad("rope_scaling", "is missing"))?;
        let factors: Option<Vec<f32>> = p
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|v| v.as_f64().map(|f| f as f32)).collect());
        factors
            .filter(|f| f.len() == pairs && f.iter().all(|x| x.is_finite() && *x > 0.0))
            .ok_or_else(|| p.bad(key, format!("must list {pairs} positive numbers")))
    }

    /// Per-layer sliding flags from a `layer_types`-style list (`*sliding*` or `sparse`).
    pub fn layer_kinds(&self, key: &str, n_layers: usize) -> Result<Option<Vec<bool>>, LoadError> {
        let Some(list) = self.str_list(key)? else {
            return Ok(None);
        };
        self.check_len(key, list.len(), n_layers)?;
        Ok(Some(
            list.iter()
                .map(|s| s.contains("sliding") || s == "sparse")
                .collect(),
        ))
    }

    fn check_len(&self, key: &str, got: usize, n_layers: usize) -> Result<(), LoadError> {
        if got != n_layers {
            return Err(self.bad(key, format!("has {got} entries for {n_layers} layers")));
        }
        Ok(())
    }

    /// Marks the layers of `sliding` as sliding-window layers of width `sliding_window`.
    pub fn set_sliding(&self, cfg: &mut ModelConfig, sliding: &[bool]) -> Result<(), LoadError> {
        cfg.layer_attn = sliding
            .iter()
            .map(|&s| if s { AttnKind::Sliding } else { AttnKind::Full })
            .collect();
        cfg.sliding_window = if sliding.iter().any(|&s| s) {
            self.usize("sliding_window")?
        } else {
            None
        };
        Ok(())
    }

    /// Sliding layers as `layer_types` lists them when `sliding_window` is set (transformers'
    /// generic rule); none otherwise.
    pub fn sliding_from_layer_types(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        if self.usize("sliding_window")?.is_none() {
            return Ok(());
        }
        if let Some(kinds) = self.layer_kinds("layer_types", cfg.n_layers)? {
            self.set_sliding(cfg, &kinds)?;
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
        if self.usize("sliding_window")?.is_none() {
            return Ok(());
        }
        let n = cfg.n_layers;
        let kinds = match self.layer_kinds("layer_types", n)? {
            Some(k) => k,
            None => (0..n).map(default).collect(),
        };
        self.set_sliding(cfg, &kinds)
    }

    /// Qwen2/Qwen3: with `use_sliding_window`, the layers `layer_types` marks, else those from
    /// `max_window_layers` on.
    pub fn qwen_sliding(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        if !self.bool("use_sliding_window")?.unwrap_or(false) {
            return Ok(());
        }
        let first = self.usize("max_window_layers")?.unwrap_or(cfg.n_layers);
        self.sliding_by_types_or(cfg, |l| l >= first)
    }

    /// Every layer sliding when `sliding_window` is set and `enabled`.
    pub fn sliding_all(&self, cfg: &mut ModelConfig, enabled: bool) -> Result<(), LoadError> {
        if self.usize("sliding_window")?.is_some() {
            self.set_sliding(cfg, &vec![enabled; cfg.n_layers])?;
        }
        Ok(())
    }

    /// DeepSeek-style MoE (GLM-4.5, DeepSeek-V3, GLM-5): sigmoid router with correction bias,
    /// grouped top-k, routed scaling, shared experts; dense FFN on the first
    /// `first_k_dense_replace` layers (or as `mlp_layer_types` says).
    pub fn deepseek_moe(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let expert_ffn = self.req("moe_intermediate_size")?;
        let n_shared = self.usize("n_shared_experts")?.unwrap_or(0);
        cfg.moe = MoeConfig {
            n_experts: self.req("n_routed_experts")?,
            n_experts_active: self.req("num_experts_per_tok")?,
            expert_ffn_dim: expert_ffn,
            n_shared_experts: n_shared,
            shared_ffn_dim: expert_ffn.saturating_mul(n_shared),
            scoring: RouterScoring::Sigmoid,
            has_correction_bias: true,
            n_group: self.usize("n_group")?.unwrap_or(1).max(1),
            topk_group: self.usize("topk_group")?.unwrap_or(1).max(1),
            norm_topk_prob: self.bool("norm_topk_prob")?.unwrap_or(true),
            routed_scaling_factor: self.f32("routed_scaling_factor")?.unwrap_or(1.0),
            ..MoeConfig::none(cfg.hidden_dim)
        };
        let k = self.usize("first_k_dense_replace")?.unwrap_or(0);
        let default: Vec<bool> = (0..cfg.n_layers).map(|l| l >= k).collect();
        self.moe_layers(cfg, default)
    }

    /// Sets which layers are MoE: `mlp_layer_types` when given, else `default` (the expert
    /// counts are checked with the rest of the config, `crate::validate`).
    pub fn moe_layers(&self, cfg: &mut ModelConfig, default: Vec<bool>) -> Result<(), LoadError> {
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
        let shared_ffn = self.usize("shared_expert_intermediate_size")?.unwrap_or(0);
        cfg.moe = MoeConfig {
            n_experts: self.req("num_experts")?,
            n_experts_active: self.req("num_experts_per_tok")?,
            expert_ffn_dim: self.req("moe_intermediate_size")?,
            n_shared_experts: usize::from(shared_ffn > 0),
            shared_ffn_dim: shared_ffn,
            shared_expert_gate: shared_ffn > 0,
            norm_topk_prob: self.bool("norm_topk_prob")?.unwrap_or(renormalise),
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
        let step = self.usize("decoder_sparse_step")?.unwrap_or(1).max(1);
        let default = (0..cfg.n_layers)
            .map(|l| !only.contains(&l) && (l + 1) % step == 0)
            .collect();
        self.moe_layers(cfg, default)
    }

    /// Multi-head latent attention; `head_dim` becomes the rope dim (transformers'
    /// `__post_init__`), and the RoPE is re-read for that width.
    pub fn mla(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let m = MlaConfig {
            q_lora_rank: self.usize("q_lora_rank")?,
            kv_lora_rank: self.req("kv_lora_rank")?,
            qk_nope_head_dim: self.req("qk_nope_head_dim")?,
            qk_rope_head_dim: self.req("qk_rope_head_dim")?,
            v_head_dim: self.req("v_head_dim")?,
        };
        cfg.head_dim = m.qk_rope_head_dim;
        let interleaved = self.bool("rope_interleave")?.unwrap_or(true);
        cfg.rope = self.rope(None, cfg.head_dim, interleaved, cfg.max_seq_len)?;
        cfg.mla = Some(m);
        Ok(())
    }

    /// The DSA lightning indexer (`rope_interleaved`: GLM-5 rotates pairs, DeepSeek-V3.2
    /// halves). Which layers run their own indexer: `indexer_types`, `index_topk_pattern`, or
    /// transformers' frequency rule.
    pub fn dsa(&self, cfg: &mut ModelConfig, rope_interleaved: bool) -> Result<(), LoadError> {
        let n_layers = cfg.n_layers;
        let kinds: Vec<IndexerKind> = if let Some(l) = self.str_list("indexer_types")? {
            self.check_len("indexer_types", l.len(), n_layers)?;
            l.iter()
                .map(|s| match s.as_str() {
                    "full" => Ok(IndexerKind::Full),
                    "shared" => Ok(IndexerKind::Shared),
                    o => Err(self.bad("indexer_types", format!("has \"{o}\""))),
                })
                .collect::<Result<_, _>>()?
        } else if let Some(p) = self.str("index_topk_pattern")? {
            self.check_len("index_topk_pattern", p.len(), n_layers)?;
            p.chars()
                .map(|ch| match ch {
                    'F' | 'f' => Ok(IndexerKind::Full),
                    'S' | 's' => Ok(IndexerKind::Shared),
                    o => Err(self.bad("index_topk_pattern", format!("has '{o}'"))),
                })
                .collect::<Result<_, _>>()?
        } else {
            indexer_types_from_freq(
                n_layers,
                self.usize("index_topk_freq")?.unwrap_or(1),
                self.usize("index_skip_topk_offset")?.unwrap_or(2),
            )
        };
        if kinds.first() == Some(&IndexerKind::Shared) {
            return Err(self.bad(
                "indexer_types",
                "makes layer 0 share a previous layer's indexer",
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

/// `p`: the RoPE dict (`rope_parameters` or `rope_scaling`); `original_max`: the top-level
/// `original_max_position_embeddings` (older LongRoPE configs).
fn rope_scaling(
    p: Option<&HfConfig<'_>>,
    max_pos: usize,
    original_max: Option<usize>,
) -> Result<RopeScaling, LoadError> {
    let Some(p) = p else {
        return Ok(RopeScaling::None);
    };
    let f = |k: &str| p.f32(k);
    let factor = || match f("factor")? {
        Some(x) if x > 0.0 => Ok(x),
        Some(x) => Err(p.bad("factor", format!("= {x} is not positive"))),
        None => Err(p.bad("factor", "is missing")),
    };
    let ty_key = match p.get("rope_type") {
        Some(_) => "rope_type",
        None => "type",
    };
    let original = p.usize("original_max_position_embeddings")?;
    Ok(match p.str(ty_key)?.unwrap_or("default") {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "llama3" => RopeScaling::Llama3 {
            factor: factor()?,
            low_freq_factor: f("low_freq_factor")?.unwrap_or(1.0),
            high_freq_factor: f("high_freq_factor")?.unwrap_or(4.0),
            original_max_position: original.unwrap_or(8192),
        },
        "yarn" => RopeScaling::Yarn {
            factor: factor()?,
            original_max_position: original.unwrap_or(max_pos),
            beta_fast: f("beta_fast")?.unwrap_or(32.0),
            beta_slow: f("beta_slow")?.unwrap_or(1.0),
            mscale: f("mscale")?.unwrap_or(0.0),
            mscale_all_dim: f("mscale_all_dim")?.unwrap_or(0.0),
            truncate: p.bool("truncate")?.unwrap_or(true),
        },
        "longrope" | "su" => {
            let original = original.or(original_max).unwrap_or(max_pos).max(1) as f64;
            let scale = f("factor")?.map_or(max_pos as f64 / original, f64::from);
            let attn_factor = match f("attention_factor")? {
                Some(a) => f64::from(a),
                None if scale <= 1.0 => 1.0,
                None => (1.0 + scale.ln() / original.ln()).sqrt(),
            };
            RopeScaling::Factors {
                attn_factor: attn_factor as f32,
                original_max_position: original as usize,
            }
        }
        other => return Err(p.bad(ty_key, format!("\"{other}\" is not supported"))),
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
