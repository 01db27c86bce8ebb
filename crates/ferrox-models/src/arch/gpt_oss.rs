//! gpt-oss (`gpt_oss`; GGUF `gpt-oss`): GQA with q/k/v/o biases and a learned per-head sink
//! logit in every softmax, sliding-window (128) and full layers alternating (even layers
//! slide), NeoX RoPE with YaRN (bounds not rounded: `truncate: false`), and a softmax-over-top-k
//! MoE whose router and experts carry biases, with the clamped SwiGLU
//! `min(g, 7) · sigmoid(1.702 · min(g, 7)) · (clamp(u, ±7) + 1)`.
//! Reference: transformers `modeling_gpt_oss.py` (`GptOssExperts`, `eager_attention_forward`);
//! llama.cpp `src/models/openai-moe.cpp` and `conversion/gpt_oss.py` (`GptOssModel`).
//!
//! Storage: the Hub keeps the experts as `x @ W` stacks — `gate_up_proj` `[E, H, 2F]` with gate
//! and up columns interleaved (`[..., ::2]` gate, `[..., 1::2]` up), `down_proj` `[E, F, H]` —
//! rearranged here at load to llama.cpp's `[E, 2F, H]` (per expert the gate rows, then the up
//! rows) and `[E, H, F]`. GGUF files hold separate `ffn_{gate,up,down}_exps` stacks, as MXFP4
//! in the released conversions (the converter's `repack_mxfp4`), or F32/F16 from an unquantized
//! checkpoint. llama.cpp rounds YaRN's ramp bounds for every model; for a GGUF ferrox follows the
//! released configs (`truncate: false`) instead, since the GGUF has no key for it.

use super::gguf::{MoeDefaults, GATING_SOFTMAX};
use super::tables::{expert_ffn, expert_ffn2, experts, heads, NORMS, STD_ATTN};
use super::{keys, Architecture, GgufMeta, HfConfig};
use crate::config::{Activation, ModelConfig, RopeScaling};
use crate::weights::{opt, table, Dim::*, LoadError, TensorRef, TensorSpec};

pub static ARCH: Architecture = Architecture::new("gpt_oss", tensors)
    .hf(&["gpt_oss"], config_from_hf)
    .gguf(&["gpt-oss"], config_from_gguf);

const ATTN: &[TensorSpec] = table![
    "blk.{}.attn_output.bias" => "model.layers.{}.self_attn.o_proj.bias", [Hidden];
    "blk.{}.attn_sinks.weight" => "model.layers.{}.self_attn.sinks", [Of(heads)];
];

const MOE: &[TensorSpec] = &[
    opt(
        "blk.{}.ffn_gate_inp.weight",
        "model.layers.{}.mlp.router.weight",
        &[Of(experts), Hidden],
    ),
    opt(
        "blk.{}.ffn_gate_inp.bias",
        "model.layers.{}.mlp.router.bias",
        &[Of(experts)],
    ),
    opt(
        "blk.{}.ffn_gate_up_exps.weight",
        "model.layers.{}.mlp.experts.gate_up_proj",
        &[Of(experts), Of(expert_ffn2), Hidden],
    )
    .hf_layout(gate_up_rows),
    opt(
        "blk.{}.ffn_gate_up_exps.bias",
        "model.layers.{}.mlp.experts.gate_up_proj_bias",
        &[Of(experts), Of(expert_ffn2)],
    )
    .hf_layout(gate_up_bias),
    opt(
        "blk.{}.ffn_down_exps.weight",
        "model.layers.{}.mlp.experts.down_proj",
        &[Of(experts), Hidden, Of(expert_ffn)],
    )
    .hf_layout(down_rows),
    opt(
        "blk.{}.ffn_down_exps.bias",
        "model.layers.{}.mlp.experts.down_proj_bias",
        &[Of(experts), Hidden],
    ),
    // llama.cpp's converter splits the fused stack.
    opt(
        "blk.{}.ffn_gate_exps.weight",
        "-",
        &[Of(experts), Of(expert_ffn), Hidden],
    ),
    opt(
        "blk.{}.ffn_up_exps.weight",
        "-",
        &[Of(experts), Of(expert_ffn), Hidden],
    ),
    opt(
        "blk.{}.ffn_gate_exps.bias",
        "-",
        &[Of(experts), Of(expert_ffn)],
    ),
    opt(
        "blk.{}.ffn_up_exps.bias",
        "-",
        &[Of(experts), Of(expert_ffn)],
    ),
];

fn tensors(_: &ModelConfig) -> Vec<TensorSpec> {
    // The FFN's pre-norm is `post_attention_norm` in llama.cpp's gpt-oss files.
    let norms = [
        NORMS[0],
        NORMS[1].gguf_as("blk.{}.post_attention_norm.weight"),
    ];
    [&norms[..], STD_ATTN, ATTN, MOE].concat()
}

/// `[E, H, 2F]` with interleaved gate/up columns → `[E, 2F, H]`: per expert the gate rows
/// (columns `0, 2, 4, …`), then the up rows (columns `1, 3, 5, …`).
fn gate_up_rows(t: &TensorRef) -> Result<TensorRef, LoadError> {
    let [e, h, f2] = dims3(t)?;
    if f2 % 2 == 1 {
        return Err(shape_err(t, "[experts, hidden, 2 × expert width]"));
    }
    let f = f2 / 2;
    t.remap(vec![e, f2, h], |i| {
        let (x, r, c) = (i / (f2 * h), i / h % f2, i % h);
        let col = if r < f { 2 * r } else { 2 * (r - f) + 1 };
        (x * h + c) * f2 + col
    })
}

/// `[E, F, H]` (`x @ W`) → `[E, H, F]` (rows are outputs).
fn down_rows(t: &TensorRef) -> Result<TensorRef, LoadError> {
    let [e, f, h] = dims3(t)?;
    t.remap(vec![e, h, f], |i| {
        let (x, r, c) = (i / (h * f), i / f % h, i % f);
        (x * f + c) * h + r
    })
}

/// `[E, 2F]` interleaved → per expert the gate biases, then the up biases.
fn gate_up_bias(t: &TensorRef) -> Result<TensorRef, LoadError> {
    let [e, f2] = match t.shape[..] {
        [e, f2] if f2 % 2 == 0 => [e, f2],
        _ => return Err(shape_err(t, "[experts, 2 × expert width]")),
    };
    let f = f2 / 2;
    t.remap(vec![e, f2], |i| {
        let (x, r) = (i / f2, i % f2);
        x * f2 + if r < f { 2 * r } else { 2 * (r - f) + 1 }
    })
}

fn dims3(t: &TensorRef) -> Result<[usize; 3], LoadError> {
    match t.shape[..] {
        [e, a, b] => Ok([e, a, b]),
        _ => Err(shape_err(t, "[experts, rows, columns]")),
    }
}

fn shape_err(t: &TensorRef, want: &str) -> LoadError {
    LoadError::Tensor {
        name: t.name.clone(),
        msg: format!("shape {:?} is not {want}", t.shape),
    }
}

/// The settings both formats share once the dimensions and RoPE are read.
fn gpt_oss_common(cfg: &mut ModelConfig, alpha: f32, limit: f32) {
    cfg.qkv_bias = true;
    cfg.o_bias = true;
    cfg.attn_sinks = true;
    cfg.activation = Activation::SwigluOai { alpha, limit };
    cfg.moe.biases = true;
    cfg.moe.norm_topk_prob = true;
}

fn config_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, false)?;
    c.sliding_from_layer_types(&mut cfg)?;
    c.softmax_moe(&mut cfg, None, true)?;
    c.moe_everywhere(&mut cfg)?;
    let alpha = c.f32(&keys::SWIGLU_ALPHA)?.unwrap_or(1.702);
    let limit = c.f32(&keys::SWIGLU_LIMIT)?.unwrap_or(7.0);
    gpt_oss_common(&mut cfg, alpha, limit);
    Ok(cfg)
}

/// llama.cpp's `gpt-oss`: NeoX RoPE, SWA pattern 2 (even layers slide), softmax over the
/// selected logits (`LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT`), the reference's SwiGLU
/// constants (`swiglu_oai` in ggml has alpha 1.702 and limit 7 built in).
fn config_from_gguf(g: &GgufMeta, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.gqa_moe(
        arch,
        false,
        MoeDefaults::gating(GATING_SOFTMAX).renormalised(),
    )?;
    swa_pattern(g, &mut cfg, 2)?;
    gpt_oss_common(&mut cfg, 1.702, 7.0);
    // The released checkpoints' `rope_scaling` says `truncate: false`; GGUF has no key for it.
    if let RopeScaling::Yarn { truncate, .. } = &mut cfg.rope.scaling {
        *truncate = false;
    }
    Ok(cfg)
}

/// llama.cpp's `load_swa_pattern`: the window from `attention.sliding_window`, the sliding
/// layers from `attention.sliding_window_pattern` — a per-layer bool array, or a period `n`
/// (default `default_period`) in which all but the last layer slide (`l % n < n - 1`).
fn swa_pattern(
    g: &GgufMeta,
    cfg: &mut ModelConfig,
    default_period: usize,
) -> Result<(), LoadError> {
    cfg.sliding_window = g.opt_usize(&keys::SLIDING_WINDOW)?.filter(|&w| w > 0);
    if cfg.sliding_window.is_none() {
        cfg.set_sliding_layers(|_| false);
        return Ok(());
    }
    let pattern = &keys::SLIDING_PATTERN;
    if let Some(sliding) = g.layer_flags(pattern, cfg.n_layers)? {
        cfg.set_sliding_layers(|l| sliding[l]);
        return Ok(());
    }
    let n = g.opt_usize(pattern)?.unwrap_or(default_period).max(1);
    cfg.set_sliding_layers(|l| l % n < n - 1);
    Ok(())
}
