//! `ModelConfig` for the mixture-of-experts and latent-attention families from llama.cpp GGUF
//! metadata: `deepseek2` (DeepSeek-V2/V3, GLM-4.7-Flash), `deepseek32`, `glm-dsa` (GLM-5.x),
//! `glm4moe`, `glm4`, `qwen3moe`, and `llama` files with experts (Mixtral).
//!
//! Keys and defaults follow llama.cpp's `src/models/*.cpp` `load_arch_hparams` and what
//! `convert_hf_to_gguf.py` (`conversion/{deepseek,glm,qwen,llama}.py`) writes:
//! - MLA is stored as MQA over the latent: `attention.key_length` = `kv_lora_rank + rope`, the
//!   real head sizes are `attention.key_length_mla` (`qk_nope + qk_rope`) and
//!   `attention.value_length_mla`; `rope.dimension_count` is `qk_rope_head_dim`.
//! - `rope.scaling.yarn_log_multiplier` is `0.1 · mscale_all_dim` for DeepSeek (the converter's
//!   factor is divided back out, as llama.cpp does). GGUF does not keep `mscale` itself; llama.cpp
//!   computes as if `mscale == mscale_all_dim` (true of DeepSeek-V3), and so do we.
//! - RoPE pairing per arch (llama.cpp `llama_model_rope_type`): adjacent pairs for `deepseek2`,
//!   `deepseek32`, `glm-dsa`, `glm4` and `llama` (whose converter permutes q/k rows), halves for
//!   `glm4moe` and `qwen3moe`. The DSA indexer rotates pairs in `glm-dsa`, halves in `deepseek32`.
//! - Gating: `expert_gating_func` (1 softmax, 2 sigmoid); when absent, `deepseek2` means softmax
//!   (except GLM-4.7-Flash-shaped files), `glm4moe`/`glm-dsa` sigmoid, `qwen3moe`/`llama`
//!   softmax. `qwen3moe` and `llama` always renormalise the selected weights.
//! - `block_count` counts appended NextN/MTP blocks (`nextn_predict_layers`); they are skipped.
//! - Which layers are MoE: `leading_dense_block_count` when written, otherwise the layers that
//!   carry a router (`ffn_gate_inp`). Features switched by tensors (q/k norm, q/k/v bias,
//!   selection bias) are read from their presence, as llama.cpp's optional tensors are.

use super::GgufMeta;
use crate::config::{
    Activation, Arch, AttnKind, DsaConfig, IndexerKind, MlaConfig, ModelConfig, MoeConfig,
    NormKind, RopeConfig, RopeScaling, RouterScoring,
};
use crate::weights::LoadError;
use ferrox_format::gguf::MetaValue;

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*`.
const GATING_SOFTMAX: usize = 1;
const GATING_SIGMOID: usize = 2;

fn cfg_err(msg: String) -> LoadError {
    LoadError::Config(format!("GGUF: {msg}"))
}

/// Whether `name` is stored in any layer (`{}` = layer index).
fn any_layer(g: &GgufMeta, n_layers: usize, name: &str) -> bool {
    (0..n_layers).any(|l| g.file.tensor(&name.replace("{}", &l.to_string())).is_some())
}

fn rope_scaling(g: &GgufMeta) -> Result<RopeScaling, LoadError> {
    let factor = g.opt_f32("rope.scaling.factor");
    Ok(match (g.opt_str("rope.scaling.type"), factor) {
        (None | Some("none"), _) => RopeScaling::None,
        (Some("linear"), Some(f)) if f != 1.0 => RopeScaling::Linear { factor: f },
        (Some("linear"), _) => RopeScaling::None,
        (Some("yarn"), Some(f)) => {
            let all_dim = g.opt_f32("rope.scaling.yarn_log_multiplier").unwrap_or(0.0) / 0.1;
            RopeScaling::Yarn {
                factor: f,
                original_max_position: g.usize("rope.scaling.original_context_length")?,
                beta_fast: g.opt_f32("rope.scaling.yarn_beta_fast").unwrap_or(32.0),
                beta_slow: g.opt_f32("rope.scaling.yarn_beta_slow").unwrap_or(1.0),
                mscale: all_dim,
                mscale_all_dim: all_dim,
            }
        }
        (Some(other), _) => return Err(cfg_err(format!("unsupported rope scaling `{other}`"))),
    })
}

/// `attention.indexer.types` (true / nonzero = the layer runs its own indexer).
fn indexer_types(g: &GgufMeta, n_layers: usize) -> Result<Vec<IndexerKind>, LoadError> {
    let key = format!("{}.attention.indexer.types", g.arch());
    let Some(arr) = g.file.get_array(&key) else {
        return Ok(vec![IndexerKind::Full; n_layers]);
    };
    if arr.len() != n_layers {
        return Err(cfg_err(format!(
            "`{key}` has {} entries for {n_layers} layers",
            arr.len()
        )));
    }
    let kinds = arr
        .iter()
        .map(|v| {
            let full = match v {
                MetaValue::Bool(b) => Some(b),
                other => other.as_u64().map(|x| x != 0),
            };
            match full {
                Some(true) => Ok(IndexerKind::Full),
                Some(false) => Ok(IndexerKind::Shared),
                None => Err(cfg_err(format!("`{key}` is not a bool or integer array"))),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if kinds.first() == Some(&IndexerKind::Shared) {
        return Err(cfg_err(
            "layer 0 cannot share a previous layer's indexer".into(),
        ));
    }
    Ok(kinds)
}

/// The config of a GGUF file of one of the sparse families (see the module header).
pub fn config_from_gguf(g: &GgufMeta) -> Result<ModelConfig, LoadError> {
    let ga = g.arch().to_string();
    let arch = match ga.as_str() {
        "deepseek2" => Arch::DeepseekV3,
        "deepseek32" => Arch::DeepseekV32,
        "glm-dsa" => Arch::GlmMoeDsa,
        "glm4moe" => Arch::Glm4Moe,
        "glm4" => Arch::Glm4,
        "qwen3moe" => Arch::Qwen3Moe,
        "llama" => Arch::Mixtral,
        other => return Err(LoadError::UnsupportedArch(other.to_string())),
    };
    let is_mla = matches!(ga.as_str(), "deepseek2" | "deepseek32" | "glm-dsa");
    let hidden = g.usize("embedding_length")?;
    // `block_count` includes appended NextN/MTP blocks, which are not part of the forward.
    let blocks = g.usize("block_count")?;
    let nextn = g.opt_usize("nextn_predict_layers").unwrap_or(0);
    if nextn >= blocks {
        return Err(cfg_err(format!(
            "{nextn} MTP layers leave none of {blocks} blocks for the decoder"
        )));
    }
    let n_layers = blocks - nextn;
    let n_heads = g.usize("attention.head_count")?;
    let vocab = g
        .tensor_rows("token_embd.weight")
        .ok_or_else(|| LoadError::MissingTensor("token_embd.weight".into()))?;

    let mla = if is_mla {
        let rope = g.usize("rope.dimension_count")?;
        let k_len = g
            .opt_usize("attention.key_length_mla")
            .map_or_else(|| g.usize("attention.key_length"), Ok)?;
        let v_len = g
            .opt_usize("attention.value_length_mla")
            .map_or_else(|| g.usize("attention.value_length"), Ok)?;
        if k_len <= rope {
            return Err(cfg_err(format!(
                "MLA key length {k_len} leaves no room beside the rope part {rope}"
            )));
        }
        Some(MlaConfig {
            q_lora_rank: g.opt_usize("attention.q_lora_rank").filter(|&r| r > 0),
            kv_lora_rank: g.usize("attention.kv_lora_rank")?,
            qk_nope_head_dim: k_len - rope,
            qk_rope_head_dim: rope,
            v_head_dim: v_len,
        })
    } else {
        None
    };
    // MLA configs carry the rope dim as head_dim (transformers does the same), and decompress to
    // one key/value head per query head.
    let (head_dim, n_kv_heads) = match &mla {
        Some(m) => (m.qk_rope_head_dim, n_heads),
        None => (
            g.opt_usize("attention.key_length")
                .unwrap_or(hidden / n_heads),
            g.opt_usize("attention.head_count_kv").unwrap_or(n_heads),
        ),
    };
    let interleaved = !matches!(ga.as_str(), "glm4moe" | "qwen3moe");
    let rope = RopeConfig {
        theta: g.opt_f32("rope.freq_base").unwrap_or(10_000.0),
        scaling: rope_scaling(g)?,
        rotary_dim: g.opt_usize("rope.dimension_count").unwrap_or(head_dim),
        interleaved,
    };
    if rope.rotary_dim > head_dim || rope.rotary_dim % 2 == 1 {
        return Err(cfg_err(format!(
            "rope dimension {} does not fit head size {head_dim}",
            rope.rotary_dim
        )));
    }

    let n_experts = g.opt_usize("expert_count").unwrap_or(0);
    let moe = if n_experts == 0 {
        super::dense_moe(hidden)
    } else {
        let expert_ffn = match g.opt_usize("expert_feed_forward_length") {
            Some(f) => f,
            // Mixtral's experts are as wide as the dense FFN field says.
            None if ga == "llama" => g.usize("feed_forward_length")?,
            None => g.usize("expert_feed_forward_length")?,
        };
        let n_shared = g.opt_usize("expert_shared_count").unwrap_or(0);
        let gating = g
            .opt_usize("expert_gating_func")
            .unwrap_or(match ga.as_str() {
                "glm4moe" | "glm-dsa" => GATING_SIGMOID,
                // llama.cpp: DeepSeek-V2-era files have no key; GLM-4.7-Flash (47/48 layers, GLM
                // vocabulary) is the sigmoid exception.
                "deepseek2" if matches!(n_layers, 47 | 48) && vocab == 154_880 => GATING_SIGMOID,
                _ => GATING_SOFTMAX,
            });
        let scoring = match gating {
            GATING_SOFTMAX => RouterScoring::Softmax,
            GATING_SIGMOID => RouterScoring::Sigmoid,
            other => return Err(cfg_err(format!("unsupported expert_gating_func {other}"))),
        };
        let always_norm = matches!(ga.as_str(), "qwen3moe" | "llama");
        let m = MoeConfig {
            hidden_dim: hidden,
            n_experts,
            n_experts_active: g.usize("expert_used_count")?,
            n_shared_experts: n_shared,
            expert_ffn_dim: expert_ffn,
            shared_ffn_dim: g
                .opt_usize("expert_shared_feed_forward_length")
                .unwrap_or(expert_ffn * n_shared),
            scoring,
            has_correction_bias: any_layer(g, n_layers, "blk.{}.exp_probs_b.bias"),
            n_group: g.opt_usize("expert_group_count").unwrap_or(1).max(1),
            topk_group: g.opt_usize("expert_group_used_count").unwrap_or(1).max(1),
            norm_topk_prob: always_norm
                || g.file
                    .get_bool(&format!("{ga}.expert_weights_norm"))
                    .unwrap_or(false),
            routed_scaling_factor: g.opt_f32("expert_weights_scale").unwrap_or(1.0),
            shared_expert_gate: false,
        };
        if m.n_experts_active == 0
            || m.n_experts_active > m.n_experts
            || !m.n_experts.is_multiple_of(m.n_group)
            || m.topk_group > m.n_group
        {
            return Err(cfg_err(format!(
                "{} of {} experts active, {} of {} groups kept",
                m.n_experts_active, m.n_experts, m.topk_group, m.n_group
            )));
        }
        m
    };
    let layer_moe: Vec<bool> = if n_experts == 0 {
        vec![false; n_layers]
    } else if let Some(k) = g.opt_usize("leading_dense_block_count") {
        (0..n_layers).map(|l| l >= k).collect()
    } else {
        (0..n_layers)
            .map(|l| {
                g.file
                    .tensor(&format!("blk.{l}.ffn_gate_inp.weight"))
                    .is_some()
            })
            .collect()
    };

    let dsa = if matches!(ga.as_str(), "deepseek32" | "glm-dsa") {
        Some(DsaConfig {
            index_n_heads: g.usize("attention.indexer.head_count")?,
            index_head_dim: g.usize("attention.indexer.key_length")?,
            index_topk: g.usize("attention.indexer.top_k")?,
            indexer_types: indexer_types(g, n_layers)?,
            rope_interleaved: ga == "glm-dsa",
        })
    } else {
        None
    };

    let sliding_window = g.opt_usize("attention.sliding_window").filter(|&w| w > 0);
    let layer_attn = match sliding_window {
        Some(_) => vec![AttnKind::Sliding; n_layers],
        None => vec![AttnKind::Full; n_layers],
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
        sliding_window,
        layer_attn,
        layer_moe,
        qkv_bias: any_layer(g, n_layers, "blk.{}.attn_q.bias"),
        qk_norm: !is_mla && any_layer(g, n_layers, "blk.{}.attn_q_norm.weight"),
        post_norms: ga == "glm4",
        attn_scale: None,
        embed_scale: false,
        tie_embeddings: g.file.tensor("output.weight").is_none(),
        final_logit_softcap: None,
        attn_logit_softcap: None,
        moe,
        mla,
        dsa,
    })
}
