//! Typed reading of Hugging Face `config.json` (fields named by the rows of [`super::keys`]):
//! the fields every family shares and the sections several share (RoPE, sliding layers,
//! softmax-routed experts). Each architecture file starts from [`HfConfig::base`] and sets what
//! its transformers configuration class says.
//!
//! Field meanings and defaults follow transformers 5.x configuration classes; both the 5.x
//! `rope_parameters` dict and the older `rope_theta` + `rope_scaling` pair are read.

use super::early;
use super::keys::{self, Key, MAX_VALUE};
use crate::config::{Activation, AttnKind, Dims, ModelConfig, MoeConfig, RopeConfig, RopeScaling};
use crate::weights::LoadError;
use serde_json::{Map, Value};

/// The language-model part of a `config.json` (or one of its nested objects).
pub struct HfConfig<'a> {
    map: &'a Map<String, Value>,
    /// Where `map` sits in the file (`"rope_scaling."`), for naming fields in errors.
    prefix: String,
}

impl<'a> HfConfig<'a> {
    /// The object holding `model_type` (multimodal wrappers keep the language model under
    /// `text_config`).
    pub fn of(obj: &'a Map<String, Value>) -> Self {
        let top = HfConfig {
            map: obj,
            prefix: String::new(),
        };
        match top.sub(&keys::TEXT_CONFIG) {
            Some(t) if t.get(&keys::MODEL_TYPE).is_some() => t,
            _ => top,
        }
    }

    /// The first of `k`'s names present in this object, else its first: the name a value of
    /// `k` is read under and an error names.
    pub fn name(&self, k: &Key) -> &'static str {
        let present = k.hf.iter().find(|n| self.value(n).is_some());
        present.or(k.hf.first()).copied().unwrap_or(k.field)
    }

    /// Whether this object holds one of `k`'s names (null counts as absent).
    pub fn has(&self, k: &Key) -> bool {
        k.hf.iter().any(|n| self.value(n).is_some())
    }

    fn value(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// The object at `k` (the first of its names that holds one).
    pub fn sub(&self, k: &Key) -> Option<HfConfig<'a>> {
        k.hf.iter().find_map(|n| self.sub_named(n))
    }

    /// The object at field `name` (a nested dict keyed by a value, as Gemma 3's per-layer-type
    /// RoPE).
    pub fn sub_named(&self, name: &str) -> Option<HfConfig<'a>> {
        Some(HfConfig {
            map: self.value(name)?.as_object()?,
            prefix: format!("{}{name}.", self.prefix),
        })
    }

    /// Field `k`'s name in the file (`rope_scaling.factor`).
    pub fn path(&self, k: &Key) -> String {
        format!("{}{}", self.prefix, self.name(k))
    }

    /// The error for field `k` of this object.
    pub fn bad(&self, k: &Key, problem: impl std::fmt::Display) -> LoadError {
        LoadError::Value {
            key: self.path(k),
            problem: problem.to_string(),
        }
    }

    pub fn get(&self, k: &Key) -> Option<&'a Value> {
        self.value(self.name(k))
    }
    pub fn str(&self, k: &Key) -> Result<Option<&'a str>, LoadError> {
        self.typed(k, "a string", Value::as_str)
    }
    /// A count or size; another type, a negative or fractional number, or one beyond
    /// [`MAX_VALUE`] is an error naming the field (never a silent default).
    pub fn usize(&self, k: &Key) -> Result<Option<usize>, LoadError> {
        match self.typed(k, "a non-negative integer", Value::as_u64)? {
            Some(x) if x <= MAX_VALUE => Ok(Some(x as usize)),
            Some(x) => Err(self.bad(k, format!("= {x} is out of range (at most {MAX_VALUE})"))),
            None => Ok(None),
        }
    }
    /// A number (JSON integers are numbers too); non-finite values are refused.
    pub fn f32(&self, k: &Key) -> Result<Option<f32>, LoadError> {
        match self.typed(k, "a number", Value::as_f64)? {
            Some(x) if (x as f32).is_finite() => Ok(Some(x as f32)),
            Some(x) => Err(self.bad(k, format!("= {x} is not a finite 32-bit number"))),
            None => Ok(None),
        }
    }
    pub fn bool(&self, k: &Key) -> Result<Option<bool>, LoadError> {
        self.typed(k, "a bool", Value::as_bool)
    }
    pub fn req(&self, k: &Key) -> Result<usize, LoadError> {
        self.usize(k)?.ok_or_else(|| match k.hf {
            [_, aliases @ ..] if !aliases.is_empty() => {
                let aliases = aliases.join("`, `");
                self.bad(k, format!("is missing (so are its aliases `{aliases}`)"))
            }
            _ => self.bad(k, "is missing"),
        })
    }
    pub fn str_list(&self, k: &Key) -> Result<Option<Vec<String>>, LoadError> {
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
        k: &Key,
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
        if self.get(&keys::QUANTIZATION).is_some() {
            // Pre-quantized Hub checkpoints (MXFP4 gpt-oss, GPTQ, AWQ, FP8) store their own
            // block formats under other tensor names; refuse by name instead of a missing tensor.
            let q = self.sub(&keys::QUANTIZATION);
            let method = q.and_then(|q| q.str(&keys::QUANT_METHOD).ok().flatten());
            return Err(self.bad(
                &keys::QUANTIZATION,
                format!(
                    "\"{}\": pre-quantized Hub checkpoints are not loaded; use the \
                     unquantized checkpoint or a GGUF conversion",
                    method.unwrap_or("unknown")
                ),
            ));
        }
        let hidden = self.req(&keys::HIDDEN)?;
        let n_layers =
            early::layer_count(self.req(&keys::LAYERS)?).map_err(|e| self.bad(&keys::LAYERS, e))?;
        let n_heads =
            early::head_count(self.req(&keys::HEADS)?).map_err(|e| self.bad(&keys::HEADS, e))?;
        let dims = Dims {
            vocab: self.req(&keys::VOCAB)?,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads: self.usize(&keys::KV_HEADS)?.unwrap_or(n_heads),
            head_dim: self.usize(&keys::HEAD_DIM)?.unwrap_or(hidden / n_heads),
            ffn_dim: self.req(&keys::FFN)?,
        };
        let max_pos = self.usize(&keys::CONTEXT)?.unwrap_or(4096);
        let rope = self.rope(None, dims.head_dim, interleaved, max_pos)?;
        let mut cfg = ModelConfig::new(arch, dims, rope);
        if matches!(rope.scaling, RopeScaling::Factors { .. }) {
            let pairs = rope.rotary_dim / 2;
            cfg.rope_freq_factors = Some(self.longrope_factors(&keys::ROPE_SHORT_FACTORS, pairs)?);
            cfg.rope_long_factors = Some(self.longrope_factors(&keys::ROPE_LONG_FACTORS, pairs)?);
        }
        cfg.max_seq_len = max_pos;
        cfg.norm_eps = self.f32(&keys::NORM_EPS)?.unwrap_or(1e-6);
        cfg.mtp_layers = self.usize(&keys::NEXTN_LAYERS)?.unwrap_or(0);
        cfg.activation = self.activation()?;
        cfg.qkv_bias = self.bool(&keys::ATTENTION_BIAS)?.unwrap_or(false);
        cfg.tie_embeddings = self.bool(&keys::TIE_EMBEDDINGS)?.unwrap_or(false);
        cfg.final_logit_softcap = self.f32(&keys::FINAL_SOFTCAP)?;
        cfg.attn_logit_softcap = self.f32(&keys::ATTN_SOFTCAP)?;
        Ok(cfg)
    }

    fn activation(&self) -> Result<Activation, LoadError> {
        let key = &keys::ACTIVATION;
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
        let legacy_theta = self.f32(&keys::ROPE_THETA)?;
        if let Some(p) = self.sub(&keys::ROPE_PARAMETERS) {
            let p = layer_type.and_then(|t| p.sub_named(t)).unwrap_or(p);
            let theta = p
                .f32(&keys::ROPE_THETA)?
                .or(legacy_theta)
                .unwrap_or(10_000.0);
            return Ok((Some(p), theta));
        }
        Ok((
            self.sub(&keys::ROPE_SCALING),
            legacy_theta.unwrap_or(10_000.0),
        ))
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
        let partial = match p.as_ref().map(|p| p.f32(&keys::ROTARY_DIM)) {
            Some(Ok(Some(f))) => f,
            Some(Err(e)) => return Err(e),
            _ => self.f32(&keys::ROTARY_DIM)?.unwrap_or(1.0),
        };
        if !(0.0..=1.0).contains(&partial) {
            return Err(self.bad(&keys::ROTARY_DIM, format!("= {partial} is outside 0..=1")));
        }
        Ok(RopeConfig {
            theta,
            scaling: rope_scaling(
                p.as_ref(),
                max_pos,
                self.usize(&keys::ROPE_ORIGINAL_CONTEXT)?,
            )?,
            rotary_dim: (head_dim as f32 * partial) as usize,
            interleaved,
        })
    }

    /// One of LongRoPE's per-pair divisor sets (`short_factor`, `long_factor`); which one a
    /// position uses is `Rope`'s business (crate::blocks::rope).
    fn longrope_factors(&self, key: &Key, pairs: usize) -> Result<Vec<f32>, LoadError> {
        let (p, _) = self.rope_params(None)?;
        let p = p.ok_or_else(|| self.bad(&keys::ROPE_SCALING, "is missing"))?;
        let factors: Option<Vec<f32>> = p
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(|v| v.as_f64().map(|f| f as f32)).collect());
        factors
            .filter(|f| f.len() == pairs && f.iter().all(|x| x.is_finite() && *x > 0.0))
            .ok_or_else(|| p.bad(key, format!("must list {pairs} positive numbers")))
    }

    /// Per-layer sliding flags from a `layer_types`-style list (`*sliding*` or `sparse`).
    pub fn layer_kinds(&self, key: &Key, n_layers: usize) -> Result<Option<Vec<bool>>, LoadError> {
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

    pub fn check_len(&self, key: &Key, got: usize, n_layers: usize) -> Result<(), LoadError> {
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
            self.usize(&keys::SLIDING_WINDOW)?
        } else {
            None
        };
        Ok(())
    }

    /// Sliding layers as `layer_types` lists them when `sliding_window` is set (transformers'
    /// generic rule); none otherwise.
    pub fn sliding_from_layer_types(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        if self.usize(&keys::SLIDING_WINDOW)?.is_none() {
            return Ok(());
        }
        if let Some(kinds) = self.layer_kinds(&keys::LAYER_TYPES, cfg.n_layers)? {
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
        if self.usize(&keys::SLIDING_WINDOW)?.is_none() {
            return Ok(());
        }
        let n = cfg.n_layers;
        let kinds = match self.layer_kinds(&keys::LAYER_TYPES, n)? {
            Some(k) => k,
            None => (0..n).map(default).collect(),
        };
        self.set_sliding(cfg, &kinds)
    }

    /// Every layer sliding when `sliding_window` is set and `enabled`.
    pub fn sliding_all(&self, cfg: &mut ModelConfig, enabled: bool) -> Result<(), LoadError> {
        if self.usize(&keys::SLIDING_WINDOW)?.is_some() {
            self.set_sliding(cfg, &vec![enabled; cfg.n_layers])?;
        }
        Ok(())
    }

    /// Sets which layers are MoE: `mlp_layer_types` when given, else `default` (the expert
    /// counts are checked with the rest of the config, `crate::validate`).
    pub fn moe_layers(&self, cfg: &mut ModelConfig, default: Vec<bool>) -> Result<(), LoadError> {
        cfg.layer_moe = self
            .layer_kinds(&keys::MLP_LAYER_TYPES, cfg.n_layers)?
            .unwrap_or(default);
        Ok(())
    }

    /// Softmax top-`num_experts_per_tok` of `num_experts` experts, each as wide as
    /// `expert_ffn` says (none: as the dense FFN), weights renormalised always when
    /// `renormalise` (Mixtral, Granite, gpt-oss), else as `norm_topk_prob` says, default not
    /// (OLMoE, Qwen-MoE).
    pub fn softmax_moe(
        &self,
        cfg: &mut ModelConfig,
        expert_ffn: Option<&Key>,
        renormalise: bool,
    ) -> Result<(), LoadError> {
        let n_experts = self.req(&keys::EXPERTS)?;
        let expert_ffn_dim = match expert_ffn {
            Some(k) => self.req(k)?,
            None => cfg.ffn_dim,
        };
        let renormalise = renormalise || self.bool(&keys::EXPERT_WEIGHTS_NORM)?.unwrap_or(false);
        cfg.moe = MoeConfig {
            n_experts,
            n_experts_active: self.req(&keys::EXPERTS_USED)?,
            expert_ffn_dim,
            norm_topk_prob: renormalise,
            ..MoeConfig::none(cfg.hidden_dim)
        };
        Ok(())
    }

    /// Every layer's FFN is the MoE block (or as `mlp_layer_types` says).
    pub fn moe_everywhere(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        let all = vec![true; cfg.n_layers];
        self.moe_layers(cfg, all)
    }
}

/// The whole `config.json` reader of a family that is Llama's config alone (Llama, Phi-3):
/// the base config with NeoX RoPE, sliding layers as `layer_types` lists them.
pub fn llama_like(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    c.sliding_from_layer_types(&mut cfg)?;
    Ok(cfg)
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
    use keys::*;
    let f = |k: &Key| p.f32(k);
    let factor = || match f(&ROPE_FACTOR)? {
        Some(x) if x > 0.0 => Ok(x),
        Some(x) => Err(p.bad(&ROPE_FACTOR, format!("= {x} is not positive"))),
        None => Err(p.bad(&ROPE_FACTOR, "is missing")),
    };
    let original = p.usize(&ROPE_ORIGINAL_CONTEXT)?;
    Ok(match p.str(&ROPE_TYPE)?.unwrap_or("default") {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "llama3" => RopeScaling::Llama3 {
            factor: factor()?,
            low_freq_factor: f(&ROPE_LOW_FREQ)?.unwrap_or(1.0),
            high_freq_factor: f(&ROPE_HIGH_FREQ)?.unwrap_or(4.0),
            original_max_position: original.unwrap_or(8192),
        },
        "yarn" => RopeScaling::Yarn {
            factor: factor()?,
            original_max_position: original.unwrap_or(max_pos),
            beta_fast: f(&YARN_BETA_FAST)?.unwrap_or(32.0),
            beta_slow: f(&YARN_BETA_SLOW)?.unwrap_or(1.0),
            mscale: f(&YARN_MSCALE)?.unwrap_or(0.0),
            mscale_all_dim: f(&YARN_MSCALE_ALL_DIM)?.unwrap_or(0.0),
            truncate: p.bool(&YARN_TRUNCATE)?.unwrap_or(true),
        },
        "longrope" | "su" => {
            let original = original.or(original_max).unwrap_or(max_pos).max(1) as f64;
            let scale = f(&ROPE_FACTOR)?.map_or(max_pos as f64 / original, f64::from);
            let attn_factor = match f(&ROPE_ATTN_FACTOR)? {
                Some(a) => f64::from(a),
                None if scale <= 1.0 => 1.0,
                None => (1.0 + scale.ln() / original.ln()).sqrt(),
            };
            RopeScaling::Factors {
                attn_factor: attn_factor as f32,
                original_max_position: original as usize,
            }
        }
        other => return Err(p.bad(&ROPE_TYPE, format!("\"{other}\" is not supported"))),
    })
}
