//! Qwen3-Next (`qwen3_next`): hybrid layers — Gated DeltaNet linear attention
//! (`blocks::deltanet`) on three of every four, gated full attention on the rest (the query
//! projection emits a per-head output gate; per-head QK norm; partial RoPE, 25 % of the head by
//! default, NeoX halves) — zero-centred `(1 + w)` RMSNorms, and on every layer (bar
//! `mlp_only_layers`) a softmax top-k MoE with renormalised weights plus one shared expert
//! scaled by `sigmoid(shared_expert_gate · x)`.
//! Reference: transformers `modeling_qwen3_next.py`; llama.cpp `LLM_ARCH_QWEN3NEXT`
//! (`src/models/qwen3next.cpp`, converter `Qwen3NextModel` in `conversion/qwen.py`).
//!
//! GGUF form (llama.cpp's converter): norms stored as `1 + w` except the DeltaNet's gated norm,
//! `A_log` as `ssm_a = -exp(A_log)`, `in_proj_qkvz` regrouped into `attn_qkv` (all q, all k,
//! all v) and `attn_gate` (z), `in_proj_ba` as `ssm_ba` unchanged, conv1d squeezed to
//! `[channels, kernel]`, the pre-FFN norm as `post_attention_norm`; DeltaNet sizes in `ssm.*`
//! (`state_size` = key head dim, `group_count` = key heads, `time_step_rank` = value heads,
//! `inner_size` = value heads × value head dim), linear layers in `attention.recurrent_layers`
//! (else every layer but each `full_attention_interval`-th).

use super::common_qwen;
use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{hidden2, ATTN_NORM, DENSE_FFN, FFN_NORM, GATED_SHARED_EXPERT, ROUTED_FFN};
use super::{keys, Architecture, GgufMeta, HfConfig, MtpFormat};
use crate::config::{AttnKind, LinearAttnConfig, ModelConfig, NormKind};
use crate::weights::{req, table, Dim::*, LoadError, TensorSpec};

pub static ARCH: Architecture = Architecture::new("qwen3_next", tensors)
    .hf(&["qwen3_next"], config_from_hf)
    .gguf(&["qwen3next"], config_from_gguf)
    .mtp(MtpFormat {
        tensors: MTP,
        hf_layer: Some("mtp.layers.0."),
        chain_normed: true,
    });

/// Its MTP block's own tensors (vLLM `qwen3_next_mtp.py`): the embedding and head are the
/// model's.
const MTP: &[TensorSpec] = &[
    req(
        "blk.{}.nextn.eh_proj.weight",
        "mtp.fc.weight",
        &[Hidden, Of(hidden2)],
    ),
    req(
        "blk.{}.nextn.enorm.weight",
        "mtp.pre_fc_norm_embedding.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.nextn.hnorm.weight",
        "mtp.pre_fc_norm_hidden.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.nextn.shared_head_norm.weight",
        "mtp.norm.weight",
        &[Hidden],
    ),
];

fn lin(c: &ModelConfig) -> LinearAttnConfig {
    c.linear.unwrap_or(LinearAttnConfig {
        conv_kernel: 0,
        n_k_heads: 0,
        n_v_heads: 0,
        k_head_dim: 0,
        v_head_dim: 0,
    })
}
fn conv_dim(c: &ModelConfig) -> usize {
    lin(c).conv_dim()
}
fn conv_kernel(c: &ModelConfig) -> usize {
    lin(c).conv_kernel
}
fn qkvz_rows(c: &ModelConfig) -> usize {
    lin(c).conv_dim() + lin(c).value_dim()
}
fn value_dim(c: &ModelConfig) -> usize {
    lin(c).value_dim()
}
fn v_heads(c: &ModelConfig) -> usize {
    lin(c).n_v_heads
}
fn ba_rows(c: &ModelConfig) -> usize {
    2 * lin(c).n_v_heads
}
fn v_head_dim(c: &ModelConfig) -> usize {
    lin(c).v_head_dim
}
/// Query and output-gate rows of the full-attention layers.
fn q_gate_rows(c: &ModelConfig) -> usize {
    (1 + usize::from(c.attn_output_gate)) * c.n_heads * c.head_dim
}

const NORMS: &[TensorSpec] = &[
    ATTN_NORM,
    FFN_NORM.gguf_as("blk.{}.post_attention_norm.weight"),
];

const GATED_ATTN: &[TensorSpec] = table![
    "blk.{}.attn_q.weight" => "model.layers.{}.self_attn.q_proj.weight", [Of(q_gate_rows), Hidden];
    "blk.{}.attn_k.weight" => "model.layers.{}.self_attn.k_proj.weight", [KvDim, Hidden];
    "blk.{}.attn_v.weight" => "model.layers.{}.self_attn.v_proj.weight", [KvDim, Hidden];
    "blk.{}.attn_q_norm.weight" => "model.layers.{}.self_attn.q_norm.weight", [HeadDim];
    "blk.{}.attn_k_norm.weight" => "model.layers.{}.self_attn.k_norm.weight", [HeadDim];
    "blk.{}.attn_output.weight" => "model.layers.{}.self_attn.o_proj.weight", [Hidden, QDim];
];

const DELTANET: &[TensorSpec] = table![
    "blk.{}.ssm_in.weight" => "model.layers.{}.linear_attn.in_proj_qkvz.weight", [Of(qkvz_rows), Hidden];
    "blk.{}.attn_qkv.weight" => "-", [Of(conv_dim), Hidden];
    "blk.{}.attn_gate.weight" => "-", [Of(value_dim), Hidden];
    "blk.{}.ssm_ba.weight" => "model.layers.{}.linear_attn.in_proj_ba.weight", [Of(ba_rows), Hidden];
    "blk.{}.ssm_conv1d.weight" => "model.layers.{}.linear_attn.conv1d.weight", [Of(conv_dim), Fixed(1), Of(conv_kernel)];
    "blk.{}.ssm_dt.bias" => "model.layers.{}.linear_attn.dt_bias", [Of(v_heads)];
    "blk.{}.ssm_a" => "model.layers.{}.linear_attn.A_log", [Of(v_heads)];
    "blk.{}.ssm_norm.weight" => "model.layers.{}.linear_attn.norm.weight", [Of(v_head_dim)];
    "blk.{}.ssm_out.weight" => "model.layers.{}.linear_attn.out_proj.weight", [Hidden, Of(value_dim)];
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    [
        NORMS,
        GATED_ATTN,
        DELTANET,
        DENSE_FFN,
        ROUTED_FFN,
        GATED_SHARED_EXPERT,
    ]
    .concat()
}

/// Marks the `linear` layers, listed by `key` (`crate::validate` checks the DeltaNet sizes).
fn set_linear(
    cfg: &mut ModelConfig,
    dims: LinearAttnConfig,
    linear: Vec<bool>,
    key: String,
) -> Result<(), LoadError> {
    if linear.len() != cfg.n_layers {
        return Err(LoadError::Value {
            key,
            problem: format!("has {} entries for {} layers", linear.len(), cfg.n_layers),
        });
    }
    cfg.layer_attn = linear
        .iter()
        .map(|&l| if l { AttnKind::Linear } else { AttnKind::Full })
        .collect();
    cfg.linear = Some(dims);
    Ok(())
}

/// Every layer linear except each `interval`-th (transformers' and llama.cpp's default).
fn by_interval(n_layers: usize, interval: usize) -> Vec<bool> {
    let k = interval.max(1);
    (0..n_layers).map(|l| (l + 1) % k != 0).collect()
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    // The Hub configs do not count the block its checkpoints carry (vLLM assumes one); the
    // loader keeps it only when its tensors are there.
    cfg.mtp_layers = c.usize(&keys::NEXTN_LAYERS)?.unwrap_or(1);
    cfg.norm = NormKind::RmsOffsetOne;
    cfg.qk_norm = true;
    cfg.attn_output_gate = true;
    let partial_given = c.get(&keys::ROTARY_DIM).is_some()
        || c.sub(&keys::ROPE_PARAMETERS)
            .is_some_and(|p| p.get(&keys::ROTARY_DIM).is_some());
    if !partial_given {
        // Qwen3NextConfig's default partial_rotary_factor is 0.25.
        cfg.rope.rotary_dim = cfg.head_dim / 4;
    }
    let linear = match c.str_list(&keys::LAYER_TYPES)? {
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "linear_attention" => Ok(true),
                "full_attention" => Ok(false),
                o => Err(c.bad(&keys::LAYER_TYPES, format!("has \"{o}\""))),
            })
            .collect::<Result<_, _>>()?,
        None => by_interval(
            cfg.n_layers,
            c.usize(&keys::FULL_ATTENTION_INTERVAL)?.unwrap_or(4),
        ),
    };
    let dims = LinearAttnConfig {
        conv_kernel: c.req(&keys::CONV_KERNEL)?,
        n_k_heads: c.req(&keys::LINEAR_K_HEADS)?,
        n_v_heads: c.req(&keys::LINEAR_V_HEADS)?,
        k_head_dim: c.req(&keys::LINEAR_K_DIM)?,
        v_head_dim: c.req(&keys::LINEAR_V_DIM)?,
    };
    set_linear(&mut cfg, dims, linear, c.path(&keys::LAYER_TYPES))?;
    common_qwen::hf_gated_shared_moe(c, &mut cfg, true)?;
    Ok(cfg)
}

/// llama.cpp's `llama_model_qwen3next::load_arch_hparams`: softmax routing with the selected
/// weights always renormalised, one gated shared expert.
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, false)?;
    cfg.qk_norm = true;
    cfg.attn_output_gate = true;
    let n = cfg.n_layers;
    let recurrent = &keys::RECURRENT_LAYERS;
    let linear = match g.layer_flags(recurrent, n)? {
        Some(flags) => flags,
        None => by_interval(n, g.opt_usize(&keys::FULL_ATTENTION_INTERVAL)?.unwrap_or(4)),
    };
    let n_v = g.usize(&keys::LINEAR_V_HEADS)?;
    let inner = g.usize(&keys::LINEAR_V_DIM)?;
    if n_v == 0 {
        return Err(g.bad(&keys::LINEAR_V_HEADS, "is 0"));
    }
    if !inner.is_multiple_of(n_v) {
        return Err(g.bad(
            &keys::LINEAR_V_DIM,
            format!("= {inner} is not a multiple of {n_v} value heads"),
        ));
    }
    let dims = LinearAttnConfig {
        conv_kernel: g.usize(&keys::CONV_KERNEL)?,
        n_k_heads: g.usize(&keys::LINEAR_K_HEADS)?,
        n_v_heads: n_v,
        k_head_dim: g.usize(&keys::LINEAR_K_DIM)?,
        v_head_dim: inner / n_v,
    };
    set_linear(&mut cfg, dims, linear, g.key(recurrent))?;
    g.moe(&mut cfg, MoeDefaults::gating(GATING_SOFTMAX).renormalised())?;
    common_qwen::gguf_gated_shared_expert(g, &mut cfg)?;
    Ok(cfg)
}
