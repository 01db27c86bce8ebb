//! DeepSeek-V3's design as the families that reuse it read it, in both formats: multi-head
//! latent attention (MLA), the sigmoid-routed MoE with grouped top-k and shared experts, and the
//! DSA lightning indexer (DeepSeek-V3.2, GLM-5). Used by `deepseek_v3`, `deepseek_v32`,
//! `glm4_moe` (the MoE alone), `glm4_moe_lite` and `glm_moe_dsa`, none of which imports
//! another.
//! Reference: transformers `configuration_deepseek_v3.py` / `configuration_glm_moe_dsa.py`;
//! llama.cpp `LLM_ARCH_DEEPSEEK2` / `glm-dsa` hparams. GGUF stores MLA as MQA over the latent:
//! `attention.key_length` = `kv_lora_rank + rope`, the real head sizes are
//! `attention.key_length_mla` (`qk_nope + qk_rope`) and `attention.value_length_mla`;
//! `rope.dimension_count` is `qk_rope_head_dim`.

use super::gguf::MoeDefaults;
use super::keys;
use super::{GgufMeta, HfConfig};
use crate::config::{DsaConfig, IndexerKind, MlaConfig, ModelConfig, MoeConfig, RouterScoring};
use crate::weights::LoadError;

/// MLA attention and DeepSeek-style MoE from `config.json`.
pub fn mla_moe_from_hf(c: &HfConfig, arch: &'static str) -> Result<ModelConfig, LoadError> {
    let mut cfg = c.base(arch, true)?;
    cfg.qkv_bias = false;
    hf_mla(c, &mut cfg)?;
    c.sliding_from_layer_types(&mut cfg)?;
    hf_moe(c, &mut cfg)?;
    Ok(cfg)
}

/// MLA + MoE + indexer from `config.json` (`ROPE_INTERLEAVED`: the indexer's RoPE pairing; a
/// const parameter so that a family names its reader as data: `dsa_from_hf::<true>`).
pub fn dsa_from_hf<const ROPE_INTERLEAVED: bool>(
    c: &HfConfig,
    arch: &'static str,
) -> Result<ModelConfig, LoadError> {
    let mut cfg = mla_moe_from_hf(c, arch)?;
    hf_dsa(c, &mut cfg, ROPE_INTERLEAVED)?;
    Ok(cfg)
}

/// MLA, experts (`gating(config)` when the file does not say), layers without an indexer, from
/// GGUF metadata.
pub fn mla_moe_from_gguf(
    g: &GgufMeta,
    arch: &'static str,
    gating: impl Fn(&ModelConfig) -> usize,
) -> Result<ModelConfig, LoadError> {
    let mut cfg = g.base(arch, true)?;
    gguf_mla(g, &mut cfg)?;
    g.sliding_all(&mut cfg)?;
    let defaults = MoeDefaults::gating(gating(&cfg));
    g.moe(&mut cfg, defaults)?;
    Ok(cfg)
}

/// MLA + MoE + indexer from GGUF metadata (`GATING` when the file does not say; parameters
/// as [`dsa_from_hf`]'s).
pub fn dsa_from_gguf<const GATING: usize, const ROPE_INTERLEAVED: bool>(
    g: &GgufMeta,
    arch: &'static str,
) -> Result<ModelConfig, LoadError> {
    let mut cfg = mla_moe_from_gguf(g, arch, |_| GATING)?;
    gguf_dsa(g, &mut cfg, ROPE_INTERLEAVED)?;
    Ok(cfg)
}

/// The MoE of `config.json`: sigmoid router with correction bias, grouped top-k, routed
/// scaling, shared experts as wide as the routed ones; dense FFN on the first
/// `first_k_dense_replace` layers (or as `mlp_layer_types` says).
pub fn hf_moe(c: &HfConfig, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    use keys::*;
    let expert_ffn = c.req(&EXPERT_FFN)?;
    let n_shared = c.usize(&SHARED_EXPERTS)?.unwrap_or(0);
    cfg.moe = MoeConfig {
        n_experts: c.req(&EXPERTS)?,
        n_experts_active: c.req(&EXPERTS_USED)?,
        expert_ffn_dim: expert_ffn,
        n_shared_experts: n_shared,
        shared_ffn_dim: expert_ffn.saturating_mul(n_shared),
        scoring: RouterScoring::Sigmoid,
        has_correction_bias: true,
        n_group: c.usize(&EXPERT_GROUPS)?.unwrap_or(1).max(1),
        topk_group: c.usize(&EXPERT_GROUPS_USED)?.unwrap_or(1).max(1),
        norm_topk_prob: c.bool(&EXPERT_WEIGHTS_NORM)?.unwrap_or(true),
        routed_scaling_factor: c.f32(&ROUTED_SCALE)?.unwrap_or(1.0),
        ..MoeConfig::none(cfg.hidden_dim)
    };
    let k = c.usize(&LEADING_DENSE)?.unwrap_or(0);
    let default: Vec<bool> = (0..cfg.n_layers).map(|l| l >= k).collect();
    c.moe_layers(cfg, default)
}

/// MLA from `config.json`; `head_dim` becomes the rope dim (transformers' `__post_init__`), and
/// the RoPE is re-read for that width.
fn hf_mla(c: &HfConfig, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    use keys::*;
    let m = MlaConfig {
        q_lora_rank: c.usize(&Q_LORA_RANK)?,
        kv_lora_rank: c.req(&KV_LORA_RANK)?,
        qk_nope_head_dim: c.req(&QK_NOPE_DIM)?,
        qk_rope_head_dim: c.req(&QK_ROPE_DIM)?,
        v_head_dim: c.req(&V_HEAD_DIM)?,
    };
    cfg.head_dim = m.qk_rope_head_dim;
    let interleaved = c.bool(&ROPE_INTERLEAVE)?.unwrap_or(true);
    cfg.rope = c.rope(None, cfg.head_dim, interleaved, cfg.max_seq_len)?;
    cfg.mla = Some(m);
    Ok(())
}

/// The indexer from `config.json` (`rope_interleaved`: GLM-5 rotates pairs, DeepSeek-V3.2
/// halves). Which layers run their own indexer: `indexer_types`, `index_topk_pattern`, or
/// transformers' frequency rule.
fn hf_dsa(c: &HfConfig, cfg: &mut ModelConfig, rope_interleaved: bool) -> Result<(), LoadError> {
    use keys::*;
    let n_layers = cfg.n_layers;
    let kinds: Vec<IndexerKind> = if let Some(l) = c.str_list(&INDEXER_TYPES)? {
        c.check_len(&INDEXER_TYPES, l.len(), n_layers)?;
        l.iter()
            .map(|s| match s.as_str() {
                "full" => Ok(IndexerKind::Full),
                "shared" => Ok(IndexerKind::Shared),
                o => Err(c.bad(&INDEXER_TYPES, format!("has \"{o}\""))),
            })
            .collect::<Result<_, _>>()?
    } else if let Some(p) = c.str(&INDEX_TOPK_PATTERN)? {
        c.check_len(&INDEX_TOPK_PATTERN, p.len(), n_layers)?;
        p.chars()
            .map(|ch| match ch {
                'F' | 'f' => Ok(IndexerKind::Full),
                'S' | 's' => Ok(IndexerKind::Shared),
                o => Err(c.bad(&INDEX_TOPK_PATTERN, format!("has '{o}'"))),
            })
            .collect::<Result<_, _>>()?
    } else {
        indexer_types_from_freq(
            n_layers,
            c.usize(&INDEX_TOPK_FREQ)?.unwrap_or(1),
            c.usize(&INDEX_SKIP_OFFSET)?.unwrap_or(2),
        )
    };
    if kinds.first() == Some(&IndexerKind::Shared) {
        return Err(c.bad(&INDEXER_TYPES, FIRST_SHARED));
    }
    cfg.dsa = Some(DsaConfig {
        index_n_heads: c.req(&INDEX_HEADS)?,
        index_head_dim: c.req(&INDEX_HEAD_DIM)?,
        index_topk: c.req(&INDEX_TOPK)?,
        indexer_types: kinds,
        rope_interleaved,
    });
    Ok(())
}

const FIRST_SHARED: &str = "makes layer 0 share a previous layer's indexer";

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

/// MLA from GGUF: real head sizes from the `*_mla` keys, `head_dim` the rope dim, one
/// decompressed key/value head per query head.
fn gguf_mla(g: &GgufMeta, cfg: &mut ModelConfig) -> Result<(), LoadError> {
    use keys::*;
    let rope = g.usize(&ROTARY_DIM)?;
    // Older files keep the MLA key length in the MQA key.
    let k_key: &Key = match g.value(&QK_NOPE_DIM) {
        Some(_) => &QK_NOPE_DIM,
        None => &HEAD_DIM,
    };
    let k_len = g.usize(k_key)?;
    let v_len = g
        .opt_usize(&V_HEAD_DIM)?
        .map_or_else(|| g.usize(&VALUE_LENGTH), Ok)?;
    if k_len <= rope {
        return Err(g.bad(
            k_key,
            format!("= {k_len} leaves no room beside the rope part {rope}"),
        ));
    }
    cfg.mla = Some(MlaConfig {
        q_lora_rank: g.opt_usize(&Q_LORA_RANK)?.filter(|&r| r > 0),
        kv_lora_rank: g.usize(&KV_LORA_RANK)?,
        qk_nope_head_dim: k_len - rope,
        qk_rope_head_dim: rope,
        v_head_dim: v_len,
    });
    cfg.head_dim = rope;
    cfg.n_kv_heads = cfg.n_heads;
    cfg.rope.rotary_dim = rope;
    Ok(())
}

/// The indexer from GGUF; `attention.indexer.types` (true / nonzero = the layer runs its own
/// indexer) says which layers share the previous selection.
fn gguf_dsa(g: &GgufMeta, cfg: &mut ModelConfig, rope_interleaved: bool) -> Result<(), LoadError> {
    use keys::*;
    cfg.dsa = Some(DsaConfig {
        index_n_heads: g.usize(&INDEX_HEADS)?,
        index_head_dim: g.usize(&INDEX_HEAD_DIM)?,
        index_topk: g.usize(&INDEX_TOPK)?,
        indexer_types: gguf_indexer_types(g, cfg.n_layers)?,
        rope_interleaved,
    });
    Ok(())
}

fn gguf_indexer_types(g: &GgufMeta, n_layers: usize) -> Result<Vec<IndexerKind>, LoadError> {
    let k = &keys::INDEXER_TYPES;
    let Some(full) = g.layer_flags(k, n_layers)? else {
        return Ok(vec![IndexerKind::Full; n_layers]);
    };
    let kinds: Vec<IndexerKind> = full
        .into_iter()
        .map(|f| {
            if f {
                IndexerKind::Full
            } else {
                IndexerKind::Shared
            }
        })
        .collect();
    if kinds.first() == Some(&IndexerKind::Shared) {
        return Err(g.bad(k, FIRST_SHARED));
    }
    Ok(kinds)
}
