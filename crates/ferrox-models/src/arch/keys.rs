//! The config keys of the decoder families, one row each: the [`ModelConfig`] field the value
//! lands in, its GGUF key (the part after `{arch}.`; llama.cpp `llama-arch.cpp` `LLM_KV_*`), its
//! `config.json` names (transformers configuration classes) and the rule `crate::validate`
//! checks the value by. The readers (`arch::gguf`, `arch::hf`) and the validator take a row,
//! never a string, so each key is spelled once in the crate and an error names the key the file
//! holds.
//!
//! Rows with [`Check::Read`] are switches, lists and names that their reader interprets (and
//! refuses by name) itself; the other rows are what validation bounds before anything is built.

use crate::config::{Activation, AttnKind, ModelConfig, MoeConfig, RopeConfig, RopeScaling};

/// Largest integer any key may hold: every count and size in a model fits in 32 bits, and
/// bounding them keeps the arithmetic on them (products of a few) from overflowing.
pub const MAX_VALUE: u64 = u32::MAX as u64;
/// Most layers a model may declare: the per-layer lists are allocated from the count before
/// any tensor is seen.
pub const MAX_LAYERS: usize = 4096;
/// Largest model width, FFN width or latent rank (the largest real ones are ~2^15).
pub const MAX_DIM: usize = 1 << 20;
/// Largest vocabulary (the largest real ones are ~2^18).
pub const MAX_VOCAB: usize = 1 << 22;
/// Most attention heads, and the widest head.
pub const MAX_HEADS: usize = 1 << 12;
pub const MAX_HEAD_DIM: usize = 1 << 12;
/// Longest context a model may declare (the longest real ones are ~2^23).
pub const MAX_CONTEXT: usize = 1 << 26;
/// Most routed experts.
pub const MAX_EXPERTS: usize = 1 << 14;

/// One config key.
pub struct Key {
    /// Where the value lands in [`ModelConfig`] (documentation; the getter is in `check`).
    pub field: &'static str,
    /// The GGUF key after `{arch}.`; a tensor name (`*.weight`) when GGUF keeps the value as a
    /// shape; empty when GGUF has no key for it.
    pub gguf: &'static str,
    /// `config.json` names, tried in order (transformers' aliases for one field); empty when
    /// only GGUF has the key.
    pub hf: &'static [&'static str],
    /// The `config.json` names sit in the RoPE dict (`rope_parameters` / `rope_scaling`).
    pub in_rope_dict: bool,
    /// When the file has none of this row's keys, the value was derived from this row's
    /// (Mixtral's expert width is its `intermediate_size`): errors name that key instead.
    pub or_from: Option<&'static Key>,
    pub check: Check,
}

/// Rows refer to each other (`or_from`, bounds), some both ways: print the names only.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} / {:?} / {:?})", self.field, self.gguf, self.hf)
    }
}

/// What validation checks of a row's value.
#[derive(Debug)]
pub enum Check {
    /// Nothing beyond what the reader checks as it reads.
    Read,
    /// A count within `min..=max`, in relation `rel` to another row.
    Count {
        get: Get<usize>,
        min: Bound,
        max: Bound,
        rel: Rel,
    },
    /// A float in `domain` (and below `below`, when given).
    Float {
        get: Get<f32>,
        domain: Domain,
        below: Option<Below>,
    },
}

/// Reads a row's value from a config; `None` when the row does not apply to it (no experts, no
/// scaling of that kind).
#[derive(Debug, Clone, Copy)]
pub enum Get<T> {
    Config(fn(&ModelConfig) -> Option<T>),
    /// Of every RoPE of the config (global and, when there is one, local).
    Rope(fn(&RopeConfig) -> Option<T>),
}

impl<T> Get<T> {
    /// The value in `cfg`, or in `rope` (one of `cfg`'s RoPEs) for a per-RoPE row.
    pub fn of(&self, cfg: &ModelConfig, rope: &RopeConfig) -> Option<T> {
        match self {
            Get::Config(f) => f(cfg),
            Get::Rope(f) => f(rope),
        }
    }
}

/// A count bound: a constant or another row's value in the same config.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    At(usize),
    Of(&'static Key),
}

/// A float's strict upper bound: a constant or another row's value.
#[derive(Debug, Clone, Copy)]
pub enum Below {
    At(f32),
    Of(&'static Key),
}

/// A count's relation to another row (the noun names that row's value in messages).
#[derive(Debug, Clone, Copy)]
pub enum Rel {
    None,
    /// The value divides the other (KV heads divide the heads).
    Divides(&'static Key, &'static str),
    /// The value is a multiple of the other.
    MultipleOf(&'static Key, &'static str),
    /// The value is even (rotated dims come in pairs).
    Even,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    Finite,
    Positive,
    /// Finite and not 0 (a divisor).
    NonZero,
}

impl Key {
    const fn new(field: &'static str, gguf: &'static str, hf: &'static [&'static str]) -> Key {
        Key {
            field,
            gguf,
            hf,
            in_rope_dict: false,
            or_from: None,
            check: Check::Read,
        }
    }
    const fn rope_dict(mut self) -> Key {
        self.in_rope_dict = true;
        self
    }
    const fn or_from(mut self, k: &'static Key) -> Key {
        self.or_from = Some(k);
        self
    }
    const fn count(
        mut self,
        get: fn(&ModelConfig) -> Option<usize>,
        min: Bound,
        max: Bound,
    ) -> Key {
        self.check = Check::Count {
            get: Get::Config(get),
            min,
            max,
            rel: Rel::None,
        };
        self
    }
    const fn rope_count(
        mut self,
        get: fn(&RopeConfig) -> Option<usize>,
        min: Bound,
        max: Bound,
    ) -> Key {
        self.check = Check::Count {
            get: Get::Rope(get),
            min,
            max,
            rel: Rel::None,
        };
        self
    }
    /// Adds `rel` to a count row.
    const fn rel(mut self, rel: Rel) -> Key {
        if let Check::Count { get, min, max, .. } = self.check {
            self.check = Check::Count { get, min, max, rel };
        }
        self
    }
    const fn float(mut self, get: fn(&ModelConfig) -> Option<f32>, domain: Domain) -> Key {
        self.check = Check::Float {
            get: Get::Config(get),
            domain,
            below: None,
        };
        self
    }
    const fn rope_float(mut self, get: fn(&RopeConfig) -> Option<f32>, domain: Domain) -> Key {
        self.check = Check::Float {
            get: Get::Rope(get),
            domain,
            below: None,
        };
        self
    }
    /// Adds a strict upper bound to a float row.
    const fn below(mut self, b: Below) -> Key {
        if let Check::Float { get, domain, .. } = self.check {
            self.check = Check::Float {
                get,
                domain,
                below: Some(b),
            };
        }
        self
    }

    /// The full GGUF key for architecture `arch`.
    pub fn gguf_key(&self, arch: &str) -> String {
        format!("{arch}.{}", self.gguf)
    }
}

/// The expert section, when the config has experts.
fn moe(c: &ModelConfig) -> Option<&MoeConfig> {
    (c.moe.n_experts > 0).then_some(&c.moe)
}
/// The shared-expert part of the expert section.
fn shared(c: &ModelConfig) -> Option<&MoeConfig> {
    moe(c).filter(|m| m.n_shared_experts > 0)
}
/// The DeltaNet sizes, when a layer is linear attention.
fn linear(c: &ModelConfig) -> Option<crate::config::LinearAttnConfig> {
    c.layer_attn
        .contains(&AttnKind::Linear)
        .then_some(c.linear?)
}
/// The DSA indexer (only beside MLA).
fn dsa(c: &ModelConfig) -> Option<&crate::config::DsaConfig> {
    c.mla.and(c.dsa.as_ref())
}
fn swiglu(c: &ModelConfig) -> Option<(f32, f32)> {
    match c.activation {
        Activation::SwigluOai { alpha, limit } => Some((alpha, limit)),
        _ => None,
    }
}
/// The scaling factor of the scalings that have one.
fn rope_factor(r: &RopeConfig) -> Option<f32> {
    match r.scaling {
        RopeScaling::Linear { factor }
        | RopeScaling::Llama3 { factor, .. }
        | RopeScaling::Yarn { factor, .. } => Some(factor),
        RopeScaling::None | RopeScaling::Factors { .. } => None,
    }
}
fn rope_original(r: &RopeConfig) -> Option<usize> {
    match r.scaling {
        RopeScaling::Llama3 {
            original_max_position,
            ..
        }
        | RopeScaling::Factors {
            original_max_position,
            ..
        }
        | RopeScaling::Yarn {
            original_max_position,
            ..
        } => Some(original_max_position),
        RopeScaling::None | RopeScaling::Linear { .. } => None,
    }
}
/// Llama 3's (low, high) frequency factors.
fn llama3(r: &RopeConfig) -> Option<(f32, f32)> {
    match r.scaling {
        RopeScaling::Llama3 {
            low_freq_factor,
            high_freq_factor,
            ..
        } => Some((low_freq_factor, high_freq_factor)),
        _ => None,
    }
}
/// YaRN's (beta_fast, beta_slow, mscale, mscale_all_dim).
fn yarn(r: &RopeConfig) -> Option<[f32; 4]> {
    match r.scaling {
        RopeScaling::Yarn {
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            ..
        } => Some([beta_fast, beta_slow, mscale, mscale_all_dim]),
        _ => None,
    }
}

/// Defines each row as a `pub static` (statics, so rows may refer to each other) and [`ALL`]
/// in the order validation checks them.
macro_rules! keys {
    ($($(#[$doc:meta])* $name:ident = $row:expr;)*) => {
        $($(#[$doc])* pub static $name: Key = $row;)*
        /// Every row, in the order validation checks them.
        pub static ALL: &[&Key] = &[$(&$name),*];
    };
}

use Bound::{At, Of};
use Domain::{Finite, NonZero, Positive};

keys! {
    // ---- Which file this is.
    MODEL_TYPE = Key::new("arch", "", &["model_type"]);
    /// Multimodal wrappers keep the language model here.
    TEXT_CONFIG = Key::new("arch", "", &["text_config"]);
    /// Pre-quantized Hub checkpoints, refused by name.
    QUANTIZATION = Key::new("(refused)", "", &["quantization_config"]);
    QUANT_METHOD = Key::new("(refused)", "", &["quant_method"]);

    // ---- Dimensions.
    /// GGUF keeps the vocabulary as the embedding's rows.
    VOCAB = Key::new("vocab_size", "token_embd.weight", &["vocab_size"])
        .count(|c| Some(c.vocab_size), At(1), At(MAX_VOCAB));
    HIDDEN = Key::new("hidden_dim", "embedding_length", &["hidden_size"])
        .count(|c| Some(c.hidden_dim), At(1), At(MAX_DIM));
    LAYERS = Key::new("n_layers", "block_count", &["num_hidden_layers"])
        .count(|c| Some(c.n_layers), At(1), At(MAX_LAYERS));
    /// MTP (NextN) blocks after the decoder's layers: GGUF's `block_count` includes them,
    /// the Hub's `num_hidden_layers` does not.
    NEXTN_LAYERS = Key::new("mtp_layers", "nextn_predict_layers", &["num_nextn_predict_layers"]);
    HEADS = Key::new("n_heads", "attention.head_count", &["num_attention_heads"])
        .count(|c| Some(c.n_heads), At(1), At(MAX_HEADS));
    KV_HEADS = Key::new("n_kv_heads", "attention.head_count_kv", &["num_key_value_heads"])
        .count(|c| Some(c.n_kv_heads), At(1), Of(&HEADS))
        .rel(Rel::Divides(&HEADS, "heads"));
    HEAD_DIM = Key::new("head_dim", "attention.key_length", &["head_dim"])
        .count(|c| Some(c.head_dim), At(1), At(MAX_HEAD_DIM));
    /// A model whose every layer is MoE may leave the dense width at 0.
    FFN = Key::new("ffn_dim", "feed_forward_length", &["intermediate_size"]).count(
        |c| {
            let any_dense = (0..c.n_layers).any(|l| !c.is_moe_layer(l));
            (any_dense || c.ffn_dim > 0).then_some(c.ffn_dim)
        },
        At(1),
        At(MAX_DIM),
    );
    CONTEXT = Key::new("max_seq_len", "context_length", &["max_position_embeddings"])
        .count(|c| Some(c.max_seq_len), At(1), At(MAX_CONTEXT));
    SLIDING_WINDOW = Key::new("sliding_window", "attention.sliding_window", &["sliding_window"])
        .count(
            |c| {
                let sliding = c.layer_attn.contains(&AttnKind::Sliding);
                (sliding || c.sliding_window.is_some()).then(|| c.sliding_window.unwrap_or(0))
            },
            At(1),
            At(MAX_CONTEXT),
        );

    // ---- Which layers slide, skip RoPE, run linear attention.
    /// A period (all but the last layer of each slide) or one bool per layer.
    SLIDING_PATTERN = Key::new(
        "layer_attn",
        "attention.sliding_window_pattern",
        &["sliding_window_pattern"],
    );
    USE_SLIDING_WINDOW = Key::new("layer_attn", "", &["use_sliding_window"]);
    MAX_WINDOW_LAYERS = Key::new("layer_attn", "", &["max_window_layers"]);
    LAYER_TYPES = Key::new("layer_attn", "", &["layer_types"]);
    RECURRENT_LAYERS = Key::new("layer_attn", "attention.recurrent_layers", &[]);
    FULL_ATTENTION_INTERVAL = Key::new(
        "layer_attn",
        "full_attention_interval",
        &["full_attention_interval"],
    );
    NO_ROPE_LAYERS = Key::new("no_rope", "", &["no_rope_layers"]);
    NO_ROPE_INTERVAL = Key::new("no_rope", "", &["no_rope_layer_interval"]);
    /// llama.cpp's Granite: false switches RoPE off on every layer.
    ROPE_FINETUNED = Key::new("no_rope", "rope.scaling.finetuned", &[]);

    // ---- Norms, activation, attention switches, scales.
    NORM_EPS = Key::new("norm_eps", "attention.layer_norm_rms_epsilon", &["rms_norm_eps"])
        .float(|c| Some(c.norm_eps), Positive)
        .below(Below::At(1.0));
    /// BERT's LayerNorm epsilon.
    LAYER_NORM_EPS = Key::new("(bert) eps", "attention.layer_norm_epsilon", &["layer_norm_eps"]);
    ACTIVATION = Key::new("activation", "", &["hidden_activation", "hidden_act"]);
    ATTENTION_BIAS = Key::new("qkv_bias", "", &["attention_bias"]);
    USE_QK_NORM = Key::new("qk_norm", "", &["use_qk_norm"]);
    TIE_EMBEDDINGS = Key::new("tie_embeddings", "", &["tie_word_embeddings"]);
    /// Gemma: the softmax scale is `query_pre_attn_scalar^-0.5`.
    QUERY_SCALAR = Key::new("attn_scale", "", &["query_pre_attn_scalar"]);
    ATTN_SCALE = Key::new("attn_scale", "attention.scale", &["attention_multiplier"])
        .or_from(&QUERY_SCALAR)
        .float(|c| c.attn_scale, Positive);
    FINAL_SOFTCAP = Key::new(
        "final_logit_softcap",
        "final_logit_softcapping",
        &["final_logit_softcapping"],
    )
    .float(|c| c.final_logit_softcap, Positive);
    ATTN_SOFTCAP = Key::new(
        "attn_logit_softcap",
        "attn_logit_softcapping",
        &["attn_logit_softcapping"],
    )
    .float(|c| c.attn_logit_softcap, Positive);
    EMBEDDING_SCALE = Key::new("embedding_multiplier", "embedding_scale", &["embedding_multiplier"])
        .float(|c| Some(c.embedding_multiplier), Finite);
    RESIDUAL_SCALE = Key::new("residual_multiplier", "residual_scale", &["residual_multiplier"])
        .float(|c| Some(c.residual_multiplier), Finite);
    LOGIT_SCALE = Key::new("logit_divisor", "logit_scale", &["logits_scaling"])
        .float(|c| Some(c.logit_divisor), NonZero);
    SWIGLU_ALPHA = Key::new("activation.alpha", "", &["swiglu_alpha"])
        .float(|c| swiglu(c).map(|s| s.0), Finite);
    SWIGLU_LIMIT = Key::new("activation.limit", "", &["swiglu_limit"])
        .float(|c| swiglu(c).map(|s| s.1), Positive);
    /// Encoders: how token vectors become one embedding.
    POOLING = Key::new("(encoder) pooling", "pooling_type", &[]);
    /// BERT: absolute positions only.
    POSITION_EMBEDDING_TYPE = Key::new("(bert) positions", "", &["position_embedding_type"]);
    /// BERT: an encoder attends both ways.
    CAUSAL = Key::new("(bert) attention", "attention.causal", &[]);

    // ---- RoPE.
    /// transformers 5's RoPE dict (possibly keyed by layer type)...
    ROPE_PARAMETERS = Key::new("rope", "", &["rope_parameters"]);
    /// ... else the legacy one beside `rope_theta`.
    ROPE_SCALING = Key::new("rope.scaling", "", &["rope_scaling"]);
    ROPE_THETA = Key::new("rope.theta", "rope.freq_base", &["rope_theta"])
        .rope_float(|r| Some(r.theta), Positive);
    /// Gemma 3's legacy local-layer base.
    ROPE_LOCAL_THETA = Key::new("rope_local.theta", "", &["rope_local_base_freq"]);
    ROPE_INTERLEAVE = Key::new("rope.interleaved", "", &["rope_interleave"]);
    /// A count in GGUF; the rotated fraction of the head in `config.json`.
    ROTARY_DIM = Key::new("rope.rotary_dim", "rope.dimension_count", &["partial_rotary_factor"])
        .or_from(&QK_ROPE_DIM)
        .rope_count(|r| Some(r.rotary_dim), At(0), Of(&HEAD_DIM))
        .rel(Rel::Even);
    ROPE_TYPE = Key::new("rope.scaling", "rope.scaling.type", &["rope_type", "type"]).rope_dict();
    ROPE_FACTOR = Key::new("rope.scaling.factor", "rope.scaling.factor", &["factor"])
        .rope_dict()
        .rope_float(rope_factor, Positive);
    /// Also read at the top level of older LongRoPE configs.
    ROPE_ORIGINAL_CONTEXT = Key::new(
        "rope.scaling.original_max_position",
        "rope.scaling.original_context_length",
        &["original_max_position_embeddings"],
    )
    .rope_dict()
    .rope_count(rope_original, At(1), At(MAX_CONTEXT));
    ROPE_HIGH_FREQ = Key::new("rope.scaling.high_freq_factor", "", &["high_freq_factor"])
        .rope_dict()
        .rope_float(|r| llama3(r).map(|f| f.1), Finite);
    ROPE_LOW_FREQ = Key::new("rope.scaling.low_freq_factor", "", &["low_freq_factor"])
        .rope_dict()
        .rope_float(|r| llama3(r).map(|f| f.0), Positive)
        .below(Below::Of(&ROPE_HIGH_FREQ));
    /// LongRoPE's cos/sin scale.
    ROPE_ATTN_FACTOR = Key::new(
        "rope.scaling.attn_factor",
        "rope.scaling.attn_factor",
        &["attention_factor"],
    )
    .rope_dict()
    .rope_float(
        |r| match r.scaling {
            RopeScaling::Factors { attn_factor, .. } => Some(attn_factor),
            _ => None,
        },
        Positive,
    );
    ROPE_SHORT_FACTORS = Key::new("rope_freq_factors", "", &["short_factor"]).rope_dict();
    ROPE_LONG_FACTORS = Key::new("rope_long_factors", "", &["long_factor"]).rope_dict();
    YARN_BETA_FAST = Key::new(
        "rope.scaling.beta_fast",
        "rope.scaling.yarn_beta_fast",
        &["beta_fast"],
    )
    .rope_dict()
    .rope_float(|r| yarn(r).map(|y| y[0]), Finite);
    YARN_BETA_SLOW = Key::new(
        "rope.scaling.beta_slow",
        "rope.scaling.yarn_beta_slow",
        &["beta_slow"],
    )
    .rope_dict()
    .rope_float(|r| yarn(r).map(|y| y[1]), Finite);
    /// GGUF keeps one YaRN multiplier: `0.1 · mscale_all_dim`.
    YARN_MSCALE_ALL_DIM = Key::new(
        "rope.scaling.mscale_all_dim",
        "rope.scaling.yarn_log_multiplier",
        &["mscale_all_dim"],
    )
    .rope_dict()
    .rope_float(|r| yarn(r).map(|y| y[3]), Finite);
    YARN_MSCALE = Key::new("rope.scaling.mscale", "", &["mscale"])
        .rope_dict()
        .or_from(&YARN_MSCALE_ALL_DIM)
        .rope_float(|r| yarn(r).map(|y| y[2]), Finite);
    YARN_TRUNCATE = Key::new("rope.scaling.truncate", "", &["truncate"]).rope_dict();

    // ---- Experts.
    EXPERTS = Key::new(
        "moe.n_experts",
        "expert_count",
        &["num_experts", "n_routed_experts", "num_local_experts"],
    )
    .count(|c| moe(c).map(|m| m.n_experts), At(1), At(MAX_EXPERTS));
    EXPERTS_USED = Key::new("moe.n_experts_active", "expert_used_count", &["num_experts_per_tok"])
        .count(|c| moe(c).map(|m| m.n_experts_active), At(1), Of(&EXPERTS));
    EXPERT_FFN = Key::new(
        "moe.expert_ffn_dim",
        "expert_feed_forward_length",
        &["moe_intermediate_size"],
    )
    .or_from(&FFN)
    .count(|c| moe(c).map(|m| m.expert_ffn_dim), At(1), At(MAX_DIM));
    EXPERT_GROUPS = Key::new("moe.n_group", "expert_group_count", &["n_group"])
        .count(|c| moe(c).map(|m| m.n_group), At(1), Of(&EXPERTS))
        .rel(Rel::Divides(&EXPERTS, "experts"));
    EXPERT_GROUPS_USED = Key::new("moe.topk_group", "expert_group_used_count", &["topk_group"])
        .count(|c| moe(c).map(|m| m.topk_group), At(1), Of(&EXPERT_GROUPS));
    SHARED_EXPERTS = Key::new("moe.n_shared_experts", "expert_shared_count", &["n_shared_experts"])
        .count(|c| shared(c).map(|m| m.n_shared_experts), At(1), At(MAX_EXPERTS));
    SHARED_EXPERT_FFN = Key::new(
        "moe.shared_ffn_dim",
        "expert_shared_feed_forward_length",
        &["shared_expert_intermediate_size"],
    )
    .or_from(&EXPERT_FFN)
    .count(|c| shared(c).map(|m| m.shared_ffn_dim), At(1), At(MAX_DIM));
    ROUTED_SCALE = Key::new(
        "moe.routed_scaling_factor",
        "expert_weights_scale",
        &["routed_scaling_factor"],
    )
    .float(|c| moe(c).map(|m| m.routed_scaling_factor), Finite);
    /// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*`.
    EXPERT_GATING = Key::new("moe.scoring", "expert_gating_func", &[]);
    EXPERT_WEIGHTS_NORM = Key::new(
        "moe.norm_topk_prob",
        "expert_weights_norm",
        &["norm_topk_prob"],
    );
    /// Dense FFN on the first this many layers.
    LEADING_DENSE = Key::new("layer_moe", "leading_dense_block_count", &["first_k_dense_replace"]);
    MLP_LAYER_TYPES = Key::new("layer_moe", "", &["mlp_layer_types"]);
    MLP_ONLY_LAYERS = Key::new("layer_moe", "", &["mlp_only_layers"]);
    DECODER_SPARSE_STEP = Key::new("layer_moe", "", &["decoder_sparse_step"]);

    // ---- Multi-head latent attention and the DSA indexer.
    Q_LORA_RANK = Key::new("mla.q_lora_rank", "attention.q_lora_rank", &["q_lora_rank"])
        .count(|c| c.mla?.q_lora_rank, At(1), At(MAX_DIM));
    KV_LORA_RANK = Key::new("mla.kv_lora_rank", "attention.kv_lora_rank", &["kv_lora_rank"])
        .count(|c| c.mla.map(|m| m.kv_lora_rank), At(1), At(MAX_DIM));
    /// GGUF's key holds the nope and rope parts together.
    QK_NOPE_DIM = Key::new(
        "mla.qk_nope_head_dim",
        "attention.key_length_mla",
        &["qk_nope_head_dim"],
    )
    .count(|c| c.mla.map(|m| m.qk_nope_head_dim), At(1), At(MAX_HEAD_DIM));
    /// GGUF's is `rope.dimension_count`.
    QK_ROPE_DIM = Key::new("mla.qk_rope_head_dim", "", &["qk_rope_head_dim"])
        .or_from(&ROTARY_DIM)
        .count(|c| c.mla.map(|m| m.qk_rope_head_dim), At(2), At(MAX_HEAD_DIM));
    V_HEAD_DIM = Key::new("mla.v_head_dim", "attention.value_length_mla", &["v_head_dim"])
        .count(|c| c.mla.map(|m| m.v_head_dim), At(1), At(MAX_HEAD_DIM));
    /// Older MLA files' value head size.
    VALUE_LENGTH = Key::new("mla.v_head_dim", "attention.value_length", &[]);
    INDEX_HEADS = Key::new("dsa.index_n_heads", "attention.indexer.head_count", &["index_n_heads"])
        .count(|c| dsa(c).map(|d| d.index_n_heads), At(1), At(MAX_HEADS));
    /// The indexer rotates the first `qk_rope_head_dim` dims of its keys.
    INDEX_HEAD_DIM = Key::new(
        "dsa.index_head_dim",
        "attention.indexer.key_length",
        &["index_head_dim"],
    )
    .count(|c| dsa(c).map(|d| d.index_head_dim), Of(&QK_ROPE_DIM), At(MAX_HEAD_DIM));
    INDEX_TOPK = Key::new("dsa.index_topk", "attention.indexer.top_k", &["index_topk"])
        .count(|c| dsa(c).map(|d| d.index_topk), At(1), At(MAX_CONTEXT));
    INDEXER_TYPES = Key::new("dsa.indexer_types", "attention.indexer.types", &["indexer_types"]);
    INDEX_TOPK_PATTERN = Key::new("dsa.indexer_types", "", &["index_topk_pattern"]);
    INDEX_TOPK_FREQ = Key::new("dsa.indexer_types", "", &["index_topk_freq"]);
    INDEX_SKIP_OFFSET = Key::new("dsa.indexer_types", "", &["index_skip_topk_offset"]);

    // ---- Gated DeltaNet linear attention.
    CONV_KERNEL = Key::new("linear.conv_kernel", "ssm.conv_kernel", &["linear_conv_kernel_dim"])
        .count(|c| linear(c).map(|d| d.conv_kernel), At(1), At(64));
    LINEAR_K_HEADS = Key::new("linear.n_k_heads", "ssm.group_count", &["linear_num_key_heads"])
        .count(|c| linear(c).map(|d| d.n_k_heads), At(1), At(MAX_HEADS));
    LINEAR_V_HEADS = Key::new("linear.n_v_heads", "ssm.time_step_rank", &["linear_num_value_heads"])
        .count(|c| linear(c).map(|d| d.n_v_heads), At(1), At(MAX_HEADS))
        .rel(Rel::MultipleOf(&LINEAR_K_HEADS, "key heads"));
    LINEAR_K_DIM = Key::new("linear.k_head_dim", "ssm.state_size", &["linear_key_head_dim"])
        .count(|c| linear(c).map(|d| d.k_head_dim), At(1), At(MAX_HEAD_DIM));
    /// GGUF's is value heads × value head dim.
    LINEAR_V_DIM = Key::new("linear.v_head_dim", "ssm.inner_size", &["linear_value_head_dim"])
        .count(|c| linear(c).map(|d| d.v_head_dim), At(1), At(MAX_HEAD_DIM));
}
