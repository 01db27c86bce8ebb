//! Architectures: each file turns a checkpoint's metadata into a `ModelConfig` and declares its
//! tensor table; the dense ones share `build_dense`. Unknown architectures are refused by name.

pub mod deepseek_v3;
pub mod gemma3;
pub mod glm4;
pub mod glm4_moe;
pub mod glm_moe_dsa;
pub mod llama;
pub mod mixtral;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_moe;
pub mod random;
pub mod sparse;
pub mod sparse_gguf;

use crate::blocks::{GatedMlp, RmsNorm, Rope, StandardAttention};
use crate::config::{
    Activation, Arch, AttnKind, ModelConfig, MoeConfig, NormKind, RopeConfig, RopeScaling,
    RouterScoring,
};
use crate::decoder::{Decoder, Layer, ModelSource};
use crate::weights::{
    opt, read_to_string, req, Bound, Dim, Dim::*, GgufSource, LoadError, SafetensorsDir,
    TensorSpec, WeightSource,
};
use ferrox_format::gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

/// Loads a Hugging Face directory or a GGUF file.
pub fn load(path: &Path) -> Result<Decoder, LoadError> {
    if path.is_dir() {
        load_hf_dir(path)
    } else {
        load_gguf(path, false)
    }
}

/// A GGUF model with every weight dequantized to F32 at load: the exact-arithmetic reference
/// (as transformers runs the GGUF) for judging near-ties; several times the memory.
pub fn load_dequantized(path: &Path) -> Result<Decoder, LoadError> {
    load_gguf(path, true)
}

fn load_gguf(path: &Path, dequantize: bool) -> Result<Decoder, LoadError> {
    let file = GgufFile::open(path).map_err(|e| LoadError::Format {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    let g = GgufMeta {
        file: Arc::new(file),
    };
    let arch = g.file.architecture().unwrap_or_default().to_string();
    let src = GgufSource {
        file: g.file.clone(),
        dequantize,
    };
    // Mixtral is stored as `llama` with experts.
    let has_experts = g.opt_usize("expert_count").unwrap_or(0) > 0;
    let sparse = || sparse_gguf::config_from_gguf(&g);
    let mut dec = match arch.as_str() {
        "llama" if has_experts => mixtral::build(sparse()?, &src)?,
        "llama" => llama::build(llama::config_from_gguf(&g)?, &src)?,
        "qwen2" => qwen2::build(qwen2::config_from_gguf(&g)?, &src)?,
        "qwen3" => qwen3::build(qwen3::config_from_gguf(&g)?, &src)?,
        "gemma3" => gemma3::build(gemma3::config_from_gguf(&g)?, &src)?,
        "deepseek2" => deepseek_v3::build(sparse()?, &src)?,
        "deepseek32" | "glm-dsa" => glm_moe_dsa::build(sparse()?, &src)?,
        "glm4moe" => glm4_moe::build(sparse()?, &src)?,
        "glm4" => glm4::build(sparse()?, &src)?,
        "qwen3moe" => qwen3_moe::build(sparse()?, &src)?,
        other => return Err(LoadError::UnsupportedArch(other.to_string())),
    };
    dec.source = ModelSource {
        path: path.to_path_buf(),
        is_gguf: true,
    };
    g.file.release_pages();
    dec.gguf = Some(g.file);
    Ok(dec)
}

/// GGUF metadata with the `{arch}.` prefix handled.
pub struct GgufMeta {
    pub file: Arc<GgufFile>,
}

impl GgufMeta {
    pub fn arch(&self) -> &str {
        self.file.architecture().unwrap_or_default()
    }
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch())
    }
    pub fn usize(&self, k: &str) -> Result<usize, LoadError> {
        self.opt_usize(k)
            .ok_or_else(|| LoadError::Config(format!("GGUF: missing `{}`", self.key(k))))
    }
    pub fn opt_usize(&self, k: &str) -> Option<usize> {
        self.file.get_u64(&self.key(k)).map(|v| v as usize)
    }
    pub fn opt_f32(&self, k: &str) -> Option<f32> {
        self.file.get_f32(&self.key(k))
    }
    pub fn opt_str(&self, k: &str) -> Option<&str> {
        self.file.get_str(&self.key(k))
    }
    /// Rows of a stored tensor (vocabulary size from `token_embd`).
    pub fn tensor_rows(&self, name: &str) -> Option<usize> {
        self.file
            .tensor(name)
            .and_then(|t| t.dims.get(1))
            .map(|&d| d as usize)
    }
}

/// The dense-model `ModelConfig` skeleton from llama.cpp's `{arch}.*` metadata keys.
pub fn dense_config_from_gguf(g: &GgufMeta, arch: Arch) -> Result<ModelConfig, LoadError> {
    let hidden = g.usize("embedding_length")?;
    let n_layers = g.usize("block_count")?;
    let n_heads = g.usize("attention.head_count")?;
    let n_kv_heads = g.opt_usize("attention.head_count_kv").unwrap_or(n_heads);
    let head_dim = g
        .opt_usize("attention.key_length")
        .unwrap_or(hidden / n_heads);
    let vocab = g
        .tensor_rows("token_embd.weight")
        .ok_or_else(|| LoadError::MissingTensor("token_embd.weight".into()))?;
    let scaling = match (
        g.opt_str("rope.scaling.type"),
        g.opt_f32("rope.scaling.factor"),
    ) {
        (Some("linear"), Some(f)) if f != 1.0 => RopeScaling::Linear { factor: f },
        (None | Some("none") | Some("linear"), _) => RopeScaling::None,
        (Some(other), _) => {
            return Err(LoadError::Config(format!(
                "unsupported GGUF rope scaling `{other}`"
            )))
        }
    };
    let rope = RopeConfig {
        theta: g.opt_f32("rope.freq_base").unwrap_or(10_000.0),
        scaling,
        rotary_dim: g.opt_usize("rope.dimension_count").unwrap_or(head_dim),
        interleaved: false,
    };
    Ok(ModelConfig {
        arch,
        vocab_size: vocab,
        hidden_dim: hidden,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: g.usize("feed_forward_length")?,
        max_seq_len: g.opt_usize("context_length").unwrap_or(4096),
        norm_eps: g
            .opt_f32("attention.layer_norm_rms_epsilon")
            .unwrap_or(1e-6),
        norm: NormKind::Rms,
        activation: Activation::Silu,
        rope,
        rope_local: None,
        sliding_window: None,
        layer_attn: vec![AttnKind::Full; n_layers],
        layer_moe: vec![false; n_layers],
        qkv_bias: false,
        qk_norm: false,
        post_norms: false,
        attn_scale: None,
        embed_scale: false,
        tie_embeddings: g.file.tensor("output.weight").is_none(),
        final_logit_softcap: g.opt_f32("final_logit_softcapping"),
        attn_logit_softcap: g.opt_f32("attn_logit_softcapping"),
        moe: dense_moe(hidden),
        mla: None,
        dsa: None,
    })
}

fn load_hf_dir(dir: &Path) -> Result<Decoder, LoadError> {
    let cfg_path = dir.join("config.json");
    let text = read_to_string(&cfg_path)?;
    let cfg = crate::hf_config::parse_hf_config(&text).map_err(|e| match e {
        crate::hf_config::HfConfigError::UnknownModelType(t) => LoadError::UnsupportedArch(t),
        e => LoadError::Format {
            path: cfg_path.clone(),
            msg: e.to_string(),
        },
    })?;
    let src = SafetensorsDir::open(dir)?;
    let mut dec = match cfg.arch {
        Arch::Llama => llama::build(cfg, &src)?,
        Arch::Qwen2 => qwen2::build(cfg, &src)?,
        Arch::Qwen3 => qwen3::build(cfg, &src)?,
        Arch::Gemma3 => gemma3::build(cfg, &src)?,
        Arch::Glm4 => glm4::build(cfg, &src)?,
        Arch::Glm4Moe | Arch::Glm4MoeLite => glm4_moe::build(cfg, &src)?,
        Arch::GlmMoeDsa | Arch::DeepseekV32 => glm_moe_dsa::build(cfg, &src)?,
        Arch::DeepseekV3 => deepseek_v3::build(cfg, &src)?,
        Arch::Qwen3Moe => qwen3_moe::build(cfg, &src)?,
        Arch::Mixtral => mixtral::build(cfg, &src)?,
    };
    dec.source = ModelSource {
        path: dir.to_path_buf(),
        is_gguf: false,
    };
    Ok(dec)
}

/// The MoE section of a dense model: no experts.
pub fn dense_moe(hidden: usize) -> MoeConfig {
    MoeConfig {
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
    }
}

/// Resolves table dimensions against a config.
pub fn resolver(cfg: &ModelConfig) -> impl Fn(Dim) -> usize + '_ {
    move |d| match d {
        Dim::Hidden => cfg.hidden_dim,
        Dim::Vocab => cfg.vocab_size,
        Dim::QDim => cfg.n_heads * cfg.head_dim,
        Dim::KvDim => cfg.n_kv_heads * cfg.head_dim,
        Dim::HeadDim => cfg.head_dim,
        Dim::Ffn => cfg.ffn_dim,
        Dim::Fixed(n) => n,
        Dim::Of(f) => f(cfg),
    }
}

/// Tensors of every model outside the layers.
pub const DENSE_GLOBAL: &[TensorSpec] = &[
    req(
        "token_embd.weight",
        "model.embed_tokens.weight",
        &[Vocab, Hidden],
    ),
    req("output_norm.weight", "model.norm.weight", &[Hidden]),
    opt("output.weight", "lm_head.weight", &[Vocab, Hidden]),
];

/// The attention half of a dense layer: its input norm and the four projections.
pub const ATTN: &[TensorSpec] = &[
    req(
        "blk.{}.attn_norm.weight",
        "model.layers.{}.input_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.attn_q.weight",
        "model.layers.{}.self_attn.q_proj.weight",
        &[QDim, Hidden],
    ),
    req(
        "blk.{}.attn_k.weight",
        "model.layers.{}.self_attn.k_proj.weight",
        &[KvDim, Hidden],
    ),
    req(
        "blk.{}.attn_v.weight",
        "model.layers.{}.self_attn.v_proj.weight",
        &[KvDim, Hidden],
    ),
    req(
        "blk.{}.attn_output.weight",
        "model.layers.{}.self_attn.o_proj.weight",
        &[Hidden, QDim],
    ),
];

/// Q/K/V projection biases (Qwen2).
pub const QKV_BIAS: &[TensorSpec] = &[
    req(
        "blk.{}.attn_q.bias",
        "model.layers.{}.self_attn.q_proj.bias",
        &[QDim],
    ),
    req(
        "blk.{}.attn_k.bias",
        "model.layers.{}.self_attn.k_proj.bias",
        &[KvDim],
    ),
    req(
        "blk.{}.attn_v.bias",
        "model.layers.{}.self_attn.v_proj.bias",
        &[KvDim],
    ),
];

/// Per-head QK RMSNorm weights (Qwen3, Gemma 3).
pub const QK_NORM: &[TensorSpec] = &[
    req(
        "blk.{}.attn_q_norm.weight",
        "model.layers.{}.self_attn.q_norm.weight",
        &[HeadDim],
    ),
    req(
        "blk.{}.attn_k_norm.weight",
        "model.layers.{}.self_attn.k_norm.weight",
        &[HeadDim],
    ),
];

/// The pre-FFN norm under Llama's name for it.
pub const FFN_NORM: &[TensorSpec] = &[req(
    "blk.{}.ffn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight",
    &[Hidden],
)];

/// The gated FFN.
pub const MLP: &[TensorSpec] = &[
    req(
        "blk.{}.ffn_gate.weight",
        "model.layers.{}.mlp.gate_proj.weight",
        &[Ffn, Hidden],
    ),
    req(
        "blk.{}.ffn_up.weight",
        "model.layers.{}.mlp.up_proj.weight",
        &[Ffn, Hidden],
    ),
    req(
        "blk.{}.ffn_down.weight",
        "model.layers.{}.mlp.down_proj.weight",
        &[Hidden, Ffn],
    ),
];

/// Builds a dense decoder (standard attention + gated MLP in every layer) whose layer table is
/// the concatenation of `layer_tables`. Logical names follow llama.cpp; optional tensors switch
/// features on when present.
pub fn build_dense(
    cfg: ModelConfig,
    src: &dyn WeightSource,
    layer_tables: &[&[TensorSpec]],
) -> Result<Decoder, LoadError> {
    let per_layer: Vec<TensorSpec> = layer_tables.concat();
    let b = Bound::bind(src, &resolver(&cfg), cfg.n_layers, DENSE_GLOBAL, &per_layer)?;
    let offset = cfg.norm == NormKind::RmsOffsetOne;
    let eps = cfg.norm_eps;
    let norm = |name: &str| -> Result<RmsNorm, LoadError> {
        Ok(RmsNorm::new(b.vector(name)?, eps, offset))
    };
    let opt_norm = |name: &str| -> Result<Option<RmsNorm>, LoadError> {
        Ok(b.opt_vector(name)?.map(|w| RmsNorm::new(w, eps, offset)))
    };
    // A tied table serves both lookups and the lm_head product, so it takes the product's
    // layout; a separate one stays zero-copy (only the looked-up rows are ever read).
    let (embed, lm_head) = match b.opt_matrix("output.weight")? {
        Some(m) => (b.plain_matrix("token_embd.weight")?, m),
        None if cfg.tie_embeddings => {
            let m = b.matrix("token_embd.weight")?;
            (m.clone(), m)
        }
        None => return Err(LoadError::MissingTensor("output.weight".into())),
    };
    b.release_pages();
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        b.release_pages();
        let n = |s: &str| format!("blk.{l}.{s}");
        let sliding = cfg.attn_kind(l) == AttnKind::Sliding;
        let rope_cfg = match (sliding, &cfg.rope_local) {
            (true, Some(r)) => r,
            _ => &cfg.rope,
        };
        let mut attn = StandardAttention::new(
            b.matrix(&n("attn_q.weight"))?,
            b.matrix(&n("attn_k.weight"))?,
            b.matrix(&n("attn_v.weight"))?,
            b.matrix(&n("attn_output.weight"))?,
            cfg.n_heads,
            cfg.n_kv_heads,
            cfg.head_dim,
            Rope::new(rope_cfg),
        );
        attn.bq = b.opt_vector(&n("attn_q.bias"))?;
        attn.bk = b.opt_vector(&n("attn_k.bias"))?;
        attn.bv = b.opt_vector(&n("attn_v.bias"))?;
        attn.q_norm = opt_norm(&n("attn_q_norm.weight"))?;
        attn.k_norm = opt_norm(&n("attn_k_norm.weight"))?;
        if let Some(s) = cfg.attn_scale {
            attn.scale = s;
        }
        attn.softcap = cfg.attn_logit_softcap;
        attn.window = if sliding { cfg.sliding_window } else { None };
        let mlp = GatedMlp::new(
            b.matrix(&n("ffn_gate.weight"))?,
            b.matrix(&n("ffn_up.weight"))?,
            b.matrix(&n("ffn_down.weight"))?,
            cfg.activation,
        );
        layers.push(Layer {
            attn_norm: norm(&n("attn_norm.weight"))?,
            attn: Box::new(attn),
            post_attn_norm: opt_norm(&n("post_attention_norm.weight"))?,
            ffn_norm: norm(&n("ffn_norm.weight"))?,
            ffn: Box::new(mlp),
            post_ffn_norm: opt_norm(&n("post_ffw_norm.weight"))?,
        });
    }
    let output_norm = norm("output_norm.weight")?;
    Ok(Decoder::from_parts(
        cfg,
        embed,
        layers,
        output_norm,
        lm_head,
    ))
}
