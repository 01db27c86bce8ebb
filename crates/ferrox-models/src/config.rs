//! Model hyper-parameters: one `ModelConfig` for every supported family, with small
//! architectural differences expressed as flags (compare llama.cpp's hparams and calm's
//! `Config`). Field names follow the seed's API (`hidden_dim`, `n_heads`, `n_kv_heads`,
//! `head_dim`, `moe.*`); MLA and DSA dimensions live in their own optional sections.
//!
//! MLA and the KV cache: MLA layers cache one compressed latent row per position
//! (`kv_lora_rank + qk_rope_head_dim` wide, no values) instead of per-head keys and values. Callers
//! may build caches as `KvCache::new(config.n_kv_heads, config.head_dim)` (as the seed's tests
//! do); the decoder reshapes an *empty* cache to the geometry its layer needs
//! (`KvCache::ensure_shape`) and refuses a non-empty cache of the wrong shape. So `n_kv_heads` and
//! `head_dim` keep their plain meaning for standard attention and are only a declared default for
//! MLA layers.

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// SwiGLU: silu(gate) * up.
    Silu,
    /// GeGLU with the tanh approximation (Gemma).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `min(g, limit) · sigmoid(alpha · min(g, limit)) ·
    /// (clamp(u, ±limit) + 1)`.
    SwigluOai { alpha: f32, limit: f32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// x / rms(x) * w
    Rms,
    /// x / rms(x) * (1 + w): Gemma's zero-centred weights, as stored by HF checkpoints. (GGUF
    /// files already store 1 + w, so a GGUF-loaded Gemma uses `Rms`.)
    RmsOffsetOne,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor`.
    Linear {
        factor: f32,
    },
    /// Llama 3.1 frequency-dependent scaling.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: usize,
    },
    /// Frequencies divided by per-pair factors and cos/sin scaled by `attn_factor` (Phi-3's
    /// LongRoPE): the short factors (`ModelConfig::rope_freq_factors`, a GGUF's
    /// `rope_factors_short`) at positions below `original_max_position`, the long ones
    /// (`rope_long_factors`, `rope_factors_long`) from there on.
    Factors {
        attn_factor: f32,
        original_max_position: usize,
    },
    /// YaRN (DeepSeek-V3, gpt-oss): frequency ramp plus attention-scale correction (`mscale`).
    Yarn {
        factor: f32,
        original_max_position: usize,
        beta_fast: f32,
        beta_slow: f32,
        mscale: f32,
        mscale_all_dim: f32,
        /// Ramp bounds rounded to whole dimensions (floor / ceil), as the YaRN paper's code and
        /// llama.cpp do; gpt-oss's reference keeps them fractional (`truncate: false`).
        truncate: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    pub theta: f32,
    pub scaling: RopeScaling,
    /// Rotated dimensions per head (partial rotary: fewer than the head dim).
    pub rotary_dim: usize,
    /// Rotate adjacent pairs (x0,x1),(x2,x3)… (GPT-J / GLM / DeepSeek `rope_interleave`) instead
    /// of the two halves (NeoX / `rotate_half`).
    pub interleaved: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    Full,
    /// Attends to the last `sliding_window` positions only.
    Sliding,
    /// Gated DeltaNet linear attention (Qwen3-Next): a causal convolution and a delta-rule
    /// state matrix instead of attention over cached keys (`ModelConfig::linear`).
    Linear,
}

/// Gated DeltaNet dimensions (transformers' `linear_*` config fields; llama.cpp's `ssm.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearAttnConfig {
    /// Causal depthwise convolution width over the q/k/v channels.
    pub conv_kernel: usize,
    pub n_k_heads: usize,
    /// Value heads; each key head serves `n_v_heads / n_k_heads` consecutive ones.
    pub n_v_heads: usize,
    pub k_head_dim: usize,
    pub v_head_dim: usize,
}

impl LinearAttnConfig {
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.k_head_dim
    }
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.v_head_dim
    }
    /// Channels of the convolution: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// Floats of the delta-rule state: one `k_head_dim × v_head_dim` matrix per value head.
    pub fn state_len(&self) -> usize {
        self.n_v_heads * self.k_head_dim * self.v_head_dim
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterScoring {
    Softmax,
    Sigmoid,
}

/// Mixture-of-experts block. A dense FFN is the one-expert case.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Model width seen by the router (equals `ModelConfig::hidden_dim`).
    pub hidden_dim: usize,
    /// Routed experts; 0 for a dense model.
    pub n_experts: usize,
    pub n_experts_active: usize,
    pub n_shared_experts: usize,
    /// Intermediate width of one routed expert.
    pub expert_ffn_dim: usize,
    /// Intermediate width of the shared expert MLP (DeepSeek: `expert_ffn_dim * n_shared_experts`).
    pub shared_ffn_dim: usize,
    pub scoring: RouterScoring,
    /// `e_score_correction_bias`: added to scores to choose experts, not to weight them.
    pub has_correction_bias: bool,
    /// Grouped top-k: experts split in `n_group` groups, the best `topk_group` groups kept.
    pub n_group: usize,
    pub topk_group: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
    /// Qwen2-MoE style sigmoid gate on the shared expert output.
    pub shared_expert_gate: bool,
    /// Biases on the router logits and on every expert's gate, up and down projections
    /// (gpt-oss).
    pub biases: bool,
}

/// Multi-head latent attention (DeepSeek-V2/V3, GLM-5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlaConfig {
    /// `None`: queries projected directly from the hidden state.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexerKind {
    /// The layer runs its own indexer.
    Full,
    /// The layer reuses the previous indexer layer's top-k (GLM-5.2 index sharing).
    Shared,
}

/// DeepSeek sparse attention indexer (DeepSeek-V3.2, GLM-5).
#[derive(Debug, Clone, PartialEq)]
pub struct DsaConfig {
    pub index_n_heads: usize,
    pub index_head_dim: usize,
    pub index_topk: usize,
    /// Per layer.
    pub indexer_types: Vec<IndexerKind>,
    /// Interleaved RoPE in the indexer (GLM-5) or half-split (DeepSeek-V3.2).
    pub rope_interleaved: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Canonical architecture name (its registry entry, `crate::arch::ARCHITECTURES`).
    pub arch: &'static str,
    pub vocab_size: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    /// MTP (NextN) blocks the checkpoint carries after `n_layers` (DeepSeek-V3, GLM-4.5+):
    /// loaded as the [`crate::mtp::Mtp`] drafter when present.
    pub mtp_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Dense FFN intermediate width.
    pub ffn_dim: usize,
    pub max_seq_len: usize,
    pub norm_eps: f32,
    pub norm: NormKind,
    pub activation: Activation,
    pub rope: RopeConfig,
    /// RoPE of sliding-window layers when it differs (Gemma 3: base 10000 locally, 1e6 globally).
    pub rope_local: Option<RopeConfig>,
    pub sliding_window: Option<usize>,
    /// Per layer.
    pub layer_attn: Vec<AttnKind>,
    /// Per layer: true where the FFN is the MoE block, false where dense.
    pub layer_moe: Vec<bool>,
    /// Per rotated pair, the divisor of its RoPE frequency (LongRoPE's short factors).
    pub rope_freq_factors: Option<Vec<f32>>,
    /// LongRoPE's long factors, used from `RopeScaling::Factors::original_max_position` on.
    pub rope_long_factors: Option<Vec<f32>>,
    /// Per layer: true where attention uses no position encoding (SmolLM3's NoPE layers);
    /// layers past the end of the list use RoPE.
    pub no_rope: Vec<bool>,
    /// Bias on q/k/v projections (Qwen2, GLM-4).
    pub qkv_bias: bool,
    /// Bias on the attention output projection (gpt-oss).
    pub o_bias: bool,
    /// A learned per-head logit in every attention softmax's denominator (gpt-oss's sinks).
    pub attn_sinks: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3, GLM-4.5).
    pub qk_norm: bool,
    /// Norms on the attention and FFN outputs before the residual add (Gemma 3, GLM-4).
    pub post_norms: bool,
    /// Softmax scale override (Gemma 3: `query_pre_attn_scalar^-0.5`); default head_dim^-0.5.
    pub attn_scale: Option<f32>,
    /// Multiply embeddings by sqrt(hidden_dim) (Gemma).
    pub embed_scale: bool,
    pub tie_embeddings: bool,
    pub final_logit_softcap: Option<f32>,
    /// Embeddings multiplied by this when `embed_scale` is off (Granite's
    /// `embedding_multiplier`; 1 otherwise).
    pub embedding_multiplier: f32,
    /// Sublayer outputs multiplied by this before each residual add (Granite; 1 otherwise).
    pub residual_multiplier: f32,
    /// Logits divided by this (Granite's `logits_scaling`; 1 otherwise).
    pub logit_divisor: f32,
    pub attn_logit_softcap: Option<f32>,
    pub moe: MoeConfig,
    pub mla: Option<MlaConfig>,
    pub dsa: Option<DsaConfig>,
    /// Gated DeltaNet dimensions of the `AttnKind::Linear` layers.
    pub linear: Option<LinearAttnConfig>,
    /// The query projection also emits a per-head output gate: attention output multiplied by
    /// `sigmoid(gate)` before `o_proj` (Qwen3-Next).
    pub attn_output_gate: bool,
}

/// The dimensions every checkpoint states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub vocab: usize,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
}

impl MoeConfig {
    /// No experts: the FFN of every layer is dense.
    pub fn none(hidden_dim: usize) -> Self {
        MoeConfig {
            hidden_dim,
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
            biases: false,
        }
    }
}

impl ModelConfig {
    /// The family's last transforms of raw head logits (Granite's divisor, Gemma 2's
    /// soft-cap), in place: the decoder's head and an MTP block's.
    pub fn finish_logits(&self, logits: &mut [f32]) {
        if self.logit_divisor != 1.0 {
            let div = self.logit_divisor;
            logits.iter_mut().for_each(|l| *l /= div);
        }
        if let Some(cap) = self.final_logit_softcap {
            logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
        }
    }

    /// A plain pre-norm GQA + SwiGLU decoder (Llama's recipe) of these dimensions: the one
    /// literal every reader starts from and then changes what its format says.
    pub fn new(arch: &'static str, d: Dims, rope: RopeConfig) -> Self {
        ModelConfig {
            arch,
            vocab_size: d.vocab,
            hidden_dim: d.hidden,
            n_layers: d.n_layers,
            mtp_layers: 0,
            n_heads: d.n_heads,
            n_kv_heads: d.n_kv_heads,
            head_dim: d.head_dim,
            ffn_dim: d.ffn_dim,
            max_seq_len: 4096,
            norm_eps: 1e-6,
            norm: NormKind::Rms,
            activation: Activation::Silu,
            rope,
            rope_local: None,
            sliding_window: None,
            layer_attn: vec![AttnKind::Full; d.n_layers],
            layer_moe: vec![false; d.n_layers],
            no_rope: Vec::new(),
            rope_freq_factors: None,
            rope_long_factors: None,
            qkv_bias: false,
            o_bias: false,
            attn_sinks: false,
            qk_norm: false,
            post_norms: false,
            attn_scale: None,
            embed_scale: false,
            tie_embeddings: false,
            final_logit_softcap: None,
            embedding_multiplier: 1.0,
            residual_multiplier: 1.0,
            logit_divisor: 1.0,
            attn_logit_softcap: None,
            moe: MoeConfig::none(d.hidden),
            mla: None,
            dsa: None,
            linear: None,
            attn_output_gate: false,
        }
    }

    /// Makes the layers `sliding` says sliding-window layers, the others full.
    pub fn set_sliding_layers(&mut self, sliding: impl Fn(usize) -> bool) {
        self.layer_attn = (0..self.n_layers)
            .map(|l| {
                if sliding(l) {
                    AttnKind::Sliding
                } else {
                    AttnKind::Full
                }
            })
            .collect();
    }

    /// Attention kind of layer `l` (full when the per-layer list is shorter).
    pub fn attn_kind(&self, l: usize) -> AttnKind {
        self.layer_attn.get(l).copied().unwrap_or(AttnKind::Full)
    }

    /// Whether layer `l` uses the MoE block.
    pub fn is_moe_layer(&self, l: usize) -> bool {
        self.moe.n_experts > 0 && self.layer_moe.get(l).copied().unwrap_or(true)
    }
}
