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
use crate::gguf::GgufFile;
use crate::weights::{
    read_to_string, Bound, Dim, GgufSource, LoadError, SafetensorsDir, TensorSpec, WeightSource,
};
use serde_json::Value;
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
    let json: Value = serde_json::from_str(&text).map_err(|e| LoadError::Format {
        path: cfg_path.clone(),
        msg: e.to_string(),
    })?;
    let hf = HfConfig(json);
    let model_type = hf.str("model_type").unwrap_or_default();
    let src = SafetensorsDir::open(dir)?;
    let mut dec = match model_type.as_str() {
        "llama" => llama::build(llama::config_from_hf(&hf)?, &src)?,
        "qwen2" => qwen2::build(qwen2::config_from_hf(&hf)?, &src)?,
        "qwen3" => qwen3::build(qwen3::config_from_hf(&hf)?, &src)?,
        "gemma3_text" | "gemma3" => gemma3::build(gemma3::config_from_hf(&hf)?, &src)?,
        "glm4" => glm4::build(glm4::config_from_hf(&text)?, &src)?,
        "glm4_moe" | "glm4_moe_lite" => glm4_moe::build(glm4_moe::config_from_hf(&text)?, &src)?,
        "glm_moe_dsa" | "deepseek_v32" => {
            glm_moe_dsa::build(glm_moe_dsa::config_from_hf(&text)?, &src)?
        }
        "deepseek_v3" => deepseek_v3::build(deepseek_v3::config_from_hf(&text)?, &src)?,
        "qwen3_moe" => qwen3_moe::build(qwen3_moe::config_from_hf(&text)?, &src)?,
        "mixtral" => mixtral::build(mixtral::config_from_hf(&text)?, &src)?,
        other => return Err(LoadError::UnsupportedArch(other.to_string())),
    };
    dec.source = ModelSource {
        path: dir.to_path_buf(),
        is_gguf: false,
    };
    Ok(dec)
}

/// A parsed `config.json` with typed accessors.
pub struct HfConfig(pub Value);

impl HfConfig {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    pub fn str(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|v| v.as_str()).map(String::from)
    }
    pub fn usize(&self, key: &str) -> Result<usize, LoadError> {
        self.opt_usize(key)
            .ok_or_else(|| LoadError::Config(format!("config.json: missing integer `{key}`")))
    }
    pub fn opt_usize(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(|v| v.as_u64()).map(|v| v as usize)
    }
    pub fn opt_f32(&self, key: &str) -> Option<f32> {
        self.get(key).and_then(|v| v.as_f64()).map(|v| v as f32)
    }
    pub fn bool(&self, key: &str, default: bool) -> bool {
        self.get(key).and_then(|v| v.as_bool()).unwrap_or(default)
    }

    /// Per-layer attention kinds from `layer_types`, else from the Qwen2-style
    /// `use_sliding_window` / `max_window_layers` switches.
    pub fn layer_attn(&self, n_layers: usize) -> Vec<AttnKind> {
        if let Some(list) = self.get("layer_types").and_then(|v| v.as_array()) {
            return list
                .iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => AttnKind::Sliding,
                    _ => AttnKind::Full,
                })
                .collect();
        }
        if self.bool("use_sliding_window", false) && self.get("sliding_window").is_some() {
            let m = self.opt_usize("max_window_layers").unwrap_or(0);
            return (0..n_layers)
                .map(|l| {
                    if l >= m {
                        AttnKind::Sliding
                    } else {
                        AttnKind::Full
                    }
                })
                .collect();
        }
        vec![AttnKind::Full; n_layers]
    }

    /// RoPE parameters: transformers 5 `rope_parameters` (optionally keyed by layer type), or
    /// the older `rope_theta` + `rope_scaling`.
    pub fn rope(
        &self,
        layer_type: Option<&str>,
        rotary_dim: usize,
        interleaved: bool,
    ) -> Result<RopeConfig, LoadError> {
        let mut params = self
            .get("rope_parameters")
            .or_else(|| self.get("rope_scaling"))
            .cloned()
            .unwrap_or(Value::Null);
        if let Some(lt) = layer_type {
            if let Some(p) = params.get(lt) {
                params = p.clone();
            }
        }
        let f = |k: &str| params.get(k).and_then(|v| v.as_f64()).map(|v| v as f32);
        let theta = f("rope_theta")
            .or_else(|| self.opt_f32("rope_theta"))
            .unwrap_or(10_000.0);
        let kind = params
            .get("rope_type")
            .or_else(|| params.get("type"))
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let need =
            |k: &str| f(k).ok_or_else(|| LoadError::Config(format!("rope `{kind}` needs `{k}`")));
        let scaling = match kind {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear {
                factor: need("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_max_position: need("original_max_position_embeddings")? as usize,
            },
            "yarn" => RopeScaling::Yarn {
                factor: need("factor")?,
                original_max_position: need("original_max_position_embeddings")? as usize,
                beta_fast: f("beta_fast").unwrap_or(32.0),
                beta_slow: f("beta_slow").unwrap_or(1.0),
                mscale: f("mscale").unwrap_or(0.0),
                mscale_all_dim: f("mscale_all_dim").unwrap_or(0.0),
            },
            other => {
                return Err(LoadError::Config(format!(
                    "unsupported rope_type `{other}`"
                )))
            }
        };
        Ok(RopeConfig {
            theta,
            scaling,
            rotary_dim,
            interleaved,
        })
    }
}

/// The dense-model `ModelConfig` skeleton from the fields every HF config shares.
pub fn dense_config_from_hf(hf: &HfConfig, arch: Arch) -> Result<ModelConfig, LoadError> {
    let hidden = hf.usize("hidden_size")?;
    let n_layers = hf.usize("num_hidden_layers")?;
    let n_heads = hf.usize("num_attention_heads")?;
    let n_kv_heads = hf.opt_usize("num_key_value_heads").unwrap_or(n_heads);
    let head_dim = hf.opt_usize("head_dim").unwrap_or(hidden / n_heads);
    let rope = hf.rope(None, head_dim, false)?;
    Ok(ModelConfig {
        arch,
        vocab_size: hf.usize("vocab_size")?,
        hidden_dim: hidden,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: hf.usize("intermediate_size")?,
        max_seq_len: hf.opt_usize("max_position_embeddings").unwrap_or(4096),
        norm_eps: hf.opt_f32("rms_norm_eps").unwrap_or(1e-6),
        norm: NormKind::Rms,
        activation: Activation::Silu,
        rope,
        rope_local: None,
        sliding_window: hf.opt_usize("sliding_window"),
        layer_attn: hf.layer_attn(n_layers),
        layer_moe: vec![false; n_layers],
        qkv_bias: false,
        qk_norm: false,
        post_norms: false,
        attn_scale: None,
        embed_scale: false,
        tie_embeddings: hf.bool("tie_word_embeddings", false),
        final_logit_softcap: hf.opt_f32("final_logit_softcapping"),
        attn_logit_softcap: hf.opt_f32("attn_logit_softcapping"),
        moe: dense_moe(hidden),
        mla: None,
        dsa: None,
    })
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

/// Builds a dense decoder (standard attention + gated MLP in every layer) from a table.
/// Logical names follow llama.cpp; optional tensors switch features on when present.
pub fn build_dense(
    cfg: ModelConfig,
    src: &dyn WeightSource,
    global: &[TensorSpec],
    per_layer: &[TensorSpec],
) -> Result<Decoder, LoadError> {
    let b = Bound::bind(src, &resolver(&cfg), cfg.n_layers, global, per_layer)?;
    let offset = cfg.norm == NormKind::RmsOffsetOne;
    let eps = cfg.norm_eps;
    let norm = |name: &str| -> Result<RmsNorm, LoadError> {
        Ok(RmsNorm::new(b.vector(name)?, eps, offset))
    };
    let opt_norm = |name: &str| -> Result<Option<RmsNorm>, LoadError> {
        Ok(b.opt_vector(name)?.map(|w| RmsNorm::new(w, eps, offset)))
    };
    let embed = b.matrix("token_embd.weight")?;
    let lm_head = match b.opt_matrix("output.weight")? {
        Some(m) => m,
        None if cfg.tie_embeddings => embed.clone(),
        None => return Err(LoadError::MissingTensor("output.weight".into())),
    };
    let mut layers = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
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
