//! Checks of a whole [`ModelConfig`] before anything is built from it: every size positive
//! and bounded, every float finite and in its domain, and the values consistent with each other
//! (KV heads dividing the heads, the rotated part fitting the head, experts used among those
//! there are). The readers (`arch::gguf`, `arch::hf`) already refuse values of the wrong type;
//! what passes here cannot divide by zero, overflow, index out of bounds or ask for an absurd
//! allocation when the decoder is built and run. Errors name the key of the file the value
//! came from ([`LoadError::Value`]).

use crate::arch::hf::HfConfig;
use crate::config::{Activation, AttnKind, ModelConfig, MoeConfig, RopeConfig, RopeScaling};
use crate::decoder::Decoder;
use crate::weights::LoadError;
use ferrox_tokenizer::Tokenizer;

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

/// Where the config came from, to name a value's key.
pub enum Keys<'a> {
    /// GGUF metadata of this `general.architecture` (keys are `{arch}.{key}`).
    Gguf(&'a str),
    /// A `config.json`.
    Hf(&'a HfConfig<'a>),
}

impl Keys<'_> {
    /// The key of a value: `gguf` (a tensor name when it ends in `.weight`) or `hf`, which may
    /// list the alternative field names a family uses (`"num_experts|n_routed_experts"`): the
    /// one present in the file, else the first.
    fn name(&self, gguf: &str, hf: &str) -> String {
        match self {
            Keys::Gguf(_) if gguf.ends_with(".weight") => gguf.to_string(),
            Keys::Gguf(arch) => format!("{arch}.{gguf}"),
            Keys::Hf(c) => {
                let mut alts = hf.split('|');
                let first = alts.next().unwrap_or(hf);
                let key = std::iter::once(first)
                    .chain(alts)
                    .find(|k| c.get(k).is_some())
                    .unwrap_or(first);
                c.path(key)
            }
        }
    }

    fn bad(&self, gguf: &str, hf: &str, problem: impl std::fmt::Display) -> LoadError {
        LoadError::Value {
            key: self.name(gguf, hf),
            problem: problem.to_string(),
        }
    }

    /// `v` within `lo..=hi`.
    fn range(&self, gguf: &str, hf: &str, v: usize, lo: usize, hi: usize) -> Result<(), LoadError> {
        if (lo..=hi).contains(&v) {
            return Ok(());
        }
        Err(self.bad(gguf, hf, format!("= {v} is outside {lo}..={hi}")))
    }

    /// `v` finite and, with `positive`, above 0.
    fn float(&self, gguf: &str, hf: &str, v: f32, positive: bool) -> Result<(), LoadError> {
        if v.is_finite() && (!positive || v > 0.0) {
            return Ok(());
        }
        let want = if positive { "positive" } else { "finite" };
        Err(self.bad(gguf, hf, format!("= {v} is not {want}")))
    }
}

/// Refuses a tokenizer that can produce ids the model has no embedding row for (one with
/// fewer tokens than rows is fine: the extra rows are padding).
pub fn check_tokenizer(dec: &Decoder, tok: &Tokenizer) -> Result<(), LoadError> {
    let (tokens, rows) = (tok.vocab_size(), dec.embed.rows());
    if tokens <= rows {
        return Ok(());
    }
    let key = match dec.source.is_gguf {
        true => "tokenizer.ggml.tokens",
        false => "tokenizer.json",
    };
    Err(LoadError::Value {
        key: key.into(),
        problem: format!("lists {tokens} tokens but the model's embedding has {rows} rows"),
    })
}

/// Checks `cfg`, read from the file `keys` describes.
pub fn validate(cfg: &ModelConfig, keys: &Keys<'_>) -> Result<(), LoadError> {
    dims(cfg, keys)?;
    floats(cfg, keys)?;
    rope(&cfg.rope, cfg.head_dim, keys)?;
    if let Some(local) = &cfg.rope_local {
        rope(local, cfg.head_dim, keys)?;
    }
    if cfg.moe.n_experts > 0 {
        moe(&cfg.moe, keys)?;
    }
    latent(cfg, keys)?;
    linear(cfg, keys)
}

fn dims(cfg: &ModelConfig, k: &Keys<'_>) -> Result<(), LoadError> {
    k.range(
        "token_embd.weight",
        "vocab_size",
        cfg.vocab_size,
        1,
        MAX_VOCAB,
    )?;
    k.range(
        "embedding_length",
        "hidden_size",
        cfg.hidden_dim,
        1,
        MAX_DIM,
    )?;
    let layers = ("block_count", "num_hidden_layers");
    k.range(
        layers.0,
        layers.1,
        cfg.n_layers,
        1,
        crate::arch::gguf::MAX_LAYERS,
    )?;
    let heads = ("attention.head_count", "num_attention_heads");
    k.range(heads.0, heads.1, cfg.n_heads, 1, MAX_HEADS)?;
    let kv = ("attention.head_count_kv", "num_key_value_heads");
    k.range(kv.0, kv.1, cfg.n_kv_heads, 1, cfg.n_heads)?;
    if !cfg.n_heads.is_multiple_of(cfg.n_kv_heads) {
        return Err(k.bad(
            kv.0,
            kv.1,
            format!(
                "= {} does not divide the {} heads",
                cfg.n_kv_heads, cfg.n_heads
            ),
        ));
    }
    let head = ("attention.key_length", "head_dim");
    k.range(head.0, head.1, cfg.head_dim, 1, MAX_HEAD_DIM)?;
    // A model whose every layer is MoE may leave the dense width at 0.
    let any_dense = (0..cfg.n_layers).any(|l| !cfg.is_moe_layer(l));
    let ffn = ("feed_forward_length", "intermediate_size");
    k.range(ffn.0, ffn.1, cfg.ffn_dim, usize::from(any_dense), MAX_DIM)?;
    let ctx = ("context_length", "max_position_embeddings");
    k.range(ctx.0, ctx.1, cfg.max_seq_len, 1, MAX_CONTEXT)?;
    let window = ("attention.sliding_window", "sliding_window");
    if cfg.layer_attn.contains(&AttnKind::Sliding) || cfg.sliding_window.is_some() {
        let w = cfg.sliding_window.unwrap_or(0);
        k.range(window.0, window.1, w, 1, MAX_CONTEXT)?;
    }
    // Per-layer lists the readers build: one entry per layer (lists read from the file were
    // checked against the layer count by name).
    if cfg.layer_attn.len() != cfg.n_layers || cfg.layer_moe.len() != cfg.n_layers {
        return Err(LoadError::Config(format!(
            "{} attention kinds and {} FFN kinds for {} layers",
            cfg.layer_attn.len(),
            cfg.layer_moe.len(),
            cfg.n_layers
        )));
    }
    Ok(())
}

fn floats(cfg: &ModelConfig, k: &Keys<'_>) -> Result<(), LoadError> {
    let eps = ("attention.layer_norm_rms_epsilon", "rms_norm_eps");
    k.float(eps.0, eps.1, cfg.norm_eps, true)?;
    if cfg.norm_eps >= 1.0 {
        return Err(k.bad(eps.0, eps.1, format!("= {} is not below 1", cfg.norm_eps)));
    }
    if let Some(s) = cfg.attn_scale {
        let scale = (
            "attention.scale",
            "attention_multiplier|query_pre_attn_scalar",
        );
        k.float(scale.0, scale.1, s, true)?;
    }
    if let Some(c) = cfg.final_logit_softcap {
        let key = "final_logit_softcapping";
        k.float(key, key, c, true)?;
    }
    if let Some(c) = cfg.attn_logit_softcap {
        let key = "attn_logit_softcapping";
        k.float(key, key, c, true)?;
    }
    k.float(
        "embedding_scale",
        "embedding_multiplier",
        cfg.embedding_multiplier,
        false,
    )?;
    k.float(
        "residual_scale",
        "residual_multiplier",
        cfg.residual_multiplier,
        false,
    )?;
    k.float("logit_scale", "logits_scaling", cfg.logit_divisor, false)?;
    if cfg.logit_divisor == 0.0 {
        return Err(k.bad("logit_scale", "logits_scaling", "is 0"));
    }
    if let Activation::SwigluOai { alpha, limit } = cfg.activation {
        k.float("swiglu_alpha", "swiglu_alpha", alpha, false)?;
        k.float("swiglu_limit", "swiglu_limit", limit, true)?;
    }
    Ok(())
}

fn rope(r: &RopeConfig, head_dim: usize, k: &Keys<'_>) -> Result<(), LoadError> {
    k.float("rope.freq_base", "rope_theta", r.theta, true)?;
    let dim = (
        "rope.dimension_count",
        "partial_rotary_factor|qk_rope_head_dim",
    );
    k.range(dim.0, dim.1, r.rotary_dim, 0, head_dim)?;
    if r.rotary_dim % 2 == 1 {
        return Err(k.bad(
            dim.0,
            dim.1,
            format!("gives an odd {} rotated dims", r.rotary_dim),
        ));
    }
    let factor = ("rope.scaling.factor", "rope_scaling");
    let original = ("rope.scaling.original_context_length", "rope_scaling");
    match r.scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor: f } => k.float(factor.0, factor.1, f, true)?,
        RopeScaling::Llama3 {
            factor: f,
            low_freq_factor: lo,
            high_freq_factor: hi,
            original_max_position: o,
        } => {
            k.float(factor.0, factor.1, f, true)?;
            k.range(original.0, original.1, o, 1, MAX_CONTEXT)?;
            if !(lo.is_finite() && hi.is_finite() && 0.0 < lo && lo < hi) {
                return Err(k.bad(
                    "rope.scaling",
                    "rope_scaling",
                    format!("has frequency factors low {lo}, high {hi}"),
                ));
            }
        }
        RopeScaling::Factors {
            attn_factor,
            original_max_position: o,
        } => {
            k.float(
                "rope.scaling.attn_factor",
                "rope_scaling",
                attn_factor,
                true,
            )?;
            k.range(original.0, original.1, o, 1, MAX_CONTEXT)?;
        }
        RopeScaling::Yarn {
            factor: f,
            original_max_position: o,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            ..
        } => {
            k.float(factor.0, factor.1, f, true)?;
            k.range(original.0, original.1, o, 1, MAX_CONTEXT)?;
            for v in [beta_fast, beta_slow, mscale, mscale_all_dim] {
                k.float("rope.scaling.yarn_beta_fast", "rope_scaling", v, false)?;
            }
        }
    }
    Ok(())
}

fn moe(m: &MoeConfig, k: &Keys<'_>) -> Result<(), LoadError> {
    let experts = (
        "expert_count",
        "num_experts|n_routed_experts|num_local_experts",
    );
    k.range(experts.0, experts.1, m.n_experts, 1, MAX_EXPERTS)?;
    let used = ("expert_used_count", "num_experts_per_tok");
    k.range(used.0, used.1, m.n_experts_active, 1, m.n_experts)?;
    let ffn = (
        "expert_feed_forward_length",
        "moe_intermediate_size|intermediate_size",
    );
    k.range(ffn.0, ffn.1, m.expert_ffn_dim, 1, MAX_DIM)?;
    let groups = ("expert_group_count", "n_group");
    k.range(groups.0, groups.1, m.n_group, 1, m.n_experts)?;
    if !m.n_experts.is_multiple_of(m.n_group) {
        return Err(k.bad(
            groups.0,
            groups.1,
            format!(
                "= {} does not divide the {} experts",
                m.n_group, m.n_experts
            ),
        ));
    }
    let kept = ("expert_group_used_count", "topk_group");
    k.range(kept.0, kept.1, m.topk_group, 1, m.n_group)?;
    if m.n_shared_experts > 0 {
        let shared = ("expert_shared_count", "n_shared_experts");
        k.range(shared.0, shared.1, m.n_shared_experts, 1, MAX_EXPERTS)?;
        let ffn = (
            "expert_shared_feed_forward_length",
            "shared_expert_intermediate_size|moe_intermediate_size",
        );
        k.range(ffn.0, ffn.1, m.shared_ffn_dim, 1, MAX_DIM)?;
    }
    k.float(
        "expert_weights_scale",
        "routed_scaling_factor",
        m.routed_scaling_factor,
        false,
    )
}

/// Multi-head latent attention and the DSA indexer.
fn latent(cfg: &ModelConfig, k: &Keys<'_>) -> Result<(), LoadError> {
    let Some(m) = cfg.mla else {
        return Ok(());
    };
    if let Some(r) = m.q_lora_rank {
        k.range("attention.q_lora_rank", "q_lora_rank", r, 1, MAX_DIM)?;
    }
    k.range(
        "attention.kv_lora_rank",
        "kv_lora_rank",
        m.kv_lora_rank,
        1,
        MAX_DIM,
    )?;
    let nope = ("attention.key_length_mla", "qk_nope_head_dim");
    k.range(nope.0, nope.1, m.qk_nope_head_dim, 1, MAX_HEAD_DIM)?;
    let rope = ("rope.dimension_count", "qk_rope_head_dim");
    k.range(rope.0, rope.1, m.qk_rope_head_dim, 2, MAX_HEAD_DIM)?;
    let v = ("attention.value_length_mla", "v_head_dim");
    k.range(v.0, v.1, m.v_head_dim, 1, MAX_HEAD_DIM)?;
    let Some(d) = &cfg.dsa else {
        return Ok(());
    };
    let heads = ("attention.indexer.head_count", "index_n_heads");
    k.range(heads.0, heads.1, d.index_n_heads, 1, MAX_HEADS)?;
    // The indexer rotates the first `qk_rope_head_dim` dims of its keys.
    let dim = ("attention.indexer.key_length", "index_head_dim");
    k.range(
        dim.0,
        dim.1,
        d.index_head_dim,
        m.qk_rope_head_dim,
        MAX_HEAD_DIM,
    )?;
    let topk = ("attention.indexer.top_k", "index_topk");
    k.range(topk.0, topk.1, d.index_topk, 1, MAX_CONTEXT)?;
    if d.indexer_types.len() != cfg.n_layers {
        let types = ("attention.indexer.types", "indexer_types");
        return Err(k.bad(types.0, types.1, "does not list every layer"));
    }
    Ok(())
}

/// Gated DeltaNet sizes, when a layer is linear attention.
fn linear(cfg: &ModelConfig, k: &Keys<'_>) -> Result<(), LoadError> {
    if !cfg.layer_attn.contains(&AttnKind::Linear) {
        return Ok(());
    }
    let Some(d) = cfg.linear else {
        return Err(LoadError::Config(
            "linear-attention layers without linear-attention sizes".into(),
        ));
    };
    k.range(
        "ssm.conv_kernel",
        "linear_conv_kernel_dim",
        d.conv_kernel,
        1,
        64,
    )?;
    let kh = ("ssm.group_count", "linear_num_key_heads");
    k.range(kh.0, kh.1, d.n_k_heads, 1, MAX_HEADS)?;
    let vh = ("ssm.time_step_rank", "linear_num_value_heads");
    k.range(vh.0, vh.1, d.n_v_heads, 1, MAX_HEADS)?;
    if !d.n_v_heads.is_multiple_of(d.n_k_heads) {
        return Err(k.bad(
            vh.0,
            vh.1,
            format!(
                "= {} is not a multiple of {} key heads",
                d.n_v_heads, d.n_k_heads
            ),
        ));
    }
    let kd = ("ssm.state_size", "linear_key_head_dim");
    k.range(kd.0, kd.1, d.k_head_dim, 1, MAX_HEAD_DIM)?;
    let vd = ("ssm.inner_size", "linear_value_head_dim");
    k.range(vd.0, vd.1, d.v_head_dim, 1, MAX_HEAD_DIM)
}
