//! Shared builder for the mixture-of-experts and latent-attention families (GLM-4, GLM-4.5 MoE,
//! GLM-4.7-Flash, GLM-5, DeepSeek-V3/V3.2, Qwen3-MoE, Mixtral): per layer, standard attention
//! or MLA (+ DSA indexer), and a dense FFN or the MoE block. The architecture files only list
//! their tensor tables (llama.cpp GGUF names from `llama-arch.cpp`, Hugging Face names from the
//! Hub checkpoints) and config switches.
//!
//! Tables use GGUF-style logical names; tensors that only some layers or configs have are
//! optional in the table and demanded by the builder when the config needs them.

use super::resolver;
use crate::blocks::dsa::Indexer;
use crate::blocks::mla::{KvB, Mla, MlaWeights};
use crate::blocks::moe::{MoeBlock, Routing};
use crate::blocks::{AttentionBlock, FfnBlock, GatedMlp, RmsNorm, Rope, StandardAttention};
use crate::config::{AttnKind, IndexerKind, ModelConfig, NormKind, RopeConfig};
use crate::decoder::{Decoder, Layer};
use crate::weights::{
    opt, req, Bound, Dim, Dim::*, LoadError, Naming, TensorRef, TensorSpec, WeightSource,
};
use ferrox_core::matmul::WeightMatrix;

// Config-derived table dimensions.
pub fn experts(c: &ModelConfig) -> usize {
    c.moe.n_experts
}
pub fn expert_ffn(c: &ModelConfig) -> usize {
    c.moe.expert_ffn_dim
}
pub fn expert_ffn2(c: &ModelConfig) -> usize {
    2 * c.moe.expert_ffn_dim
}
pub fn shared_ffn(c: &ModelConfig) -> usize {
    c.moe.shared_ffn_dim
}
pub fn ffn2(c: &ModelConfig) -> usize {
    2 * c.ffn_dim
}
fn mla(c: &ModelConfig) -> crate::config::MlaConfig {
    c.mla.unwrap_or(crate::config::MlaConfig {
        q_lora_rank: None,
        kv_lora_rank: 0,
        qk_nope_head_dim: 0,
        qk_rope_head_dim: 0,
        v_head_dim: 0,
    })
}
pub fn q_lora(c: &ModelConfig) -> usize {
    mla(c).q_lora_rank.unwrap_or(0)
}
pub fn kv_lora(c: &ModelConfig) -> usize {
    mla(c).kv_lora_rank
}
pub fn kv_a_rows(c: &ModelConfig) -> usize {
    mla(c).kv_lora_rank + mla(c).qk_rope_head_dim
}
pub fn mla_q_rows(c: &ModelConfig) -> usize {
    c.n_heads * (mla(c).qk_nope_head_dim + mla(c).qk_rope_head_dim)
}
pub fn kv_b_rows(c: &ModelConfig) -> usize {
    c.n_heads * (mla(c).qk_nope_head_dim + mla(c).v_head_dim)
}
pub fn heads(c: &ModelConfig) -> usize {
    c.n_heads
}
pub fn qk_nope(c: &ModelConfig) -> usize {
    mla(c).qk_nope_head_dim
}
pub fn v_head(c: &ModelConfig) -> usize {
    mla(c).v_head_dim
}
pub fn mla_o_cols(c: &ModelConfig) -> usize {
    c.n_heads * mla(c).v_head_dim
}
pub fn idx_heads(c: &ModelConfig) -> usize {
    c.dsa.as_ref().map_or(0, |d| d.index_n_heads)
}
pub fn idx_dim(c: &ModelConfig) -> usize {
    c.dsa.as_ref().map_or(0, |d| d.index_head_dim)
}
pub fn idx_q_rows(c: &ModelConfig) -> usize {
    idx_heads(c) * idx_dim(c)
}

pub const GLOBAL: &[TensorSpec] = super::DENSE_GLOBAL;

const fn o(gguf: &'static str, hf: &'static str, shape: &'static [Dim]) -> TensorSpec {
    opt(gguf, hf, shape)
}

pub const NORMS: &[TensorSpec] = &[
    req(
        "blk.{}.attn_norm.weight",
        "model.layers.{}.input_layernorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.ffn_norm.weight",
        "model.layers.{}.post_attention_layernorm.weight",
        &[Hidden],
    ),
];

/// GQA attention with optional q/k/v bias and per-head QK norm.
pub const STD_ATTN: &[TensorSpec] = &[
    o(
        "blk.{}.attn_q.weight",
        "model.layers.{}.self_attn.q_proj.weight",
        &[QDim, Hidden],
    ),
    o(
        "blk.{}.attn_k.weight",
        "model.layers.{}.self_attn.k_proj.weight",
        &[KvDim, Hidden],
    ),
    o(
        "blk.{}.attn_v.weight",
        "model.layers.{}.self_attn.v_proj.weight",
        &[KvDim, Hidden],
    ),
    o(
        "blk.{}.attn_q.bias",
        "model.layers.{}.self_attn.q_proj.bias",
        &[QDim],
    ),
    o(
        "blk.{}.attn_k.bias",
        "model.layers.{}.self_attn.k_proj.bias",
        &[KvDim],
    ),
    o(
        "blk.{}.attn_v.bias",
        "model.layers.{}.self_attn.v_proj.bias",
        &[KvDim],
    ),
    o(
        "blk.{}.attn_q_norm.weight",
        "model.layers.{}.self_attn.q_norm.weight",
        &[HeadDim],
    ),
    o(
        "blk.{}.attn_k_norm.weight",
        "model.layers.{}.self_attn.k_norm.weight",
        &[HeadDim],
    ),
    o(
        "blk.{}.attn_output.weight",
        "model.layers.{}.self_attn.o_proj.weight",
        &[Hidden, QDim],
    ),
];

/// Multi-head latent attention (DeepSeek-V3 / GLM-5 names).
pub const MLA_ATTN: &[TensorSpec] = &[
    o(
        "blk.{}.attn_q_a.weight",
        "model.layers.{}.self_attn.q_a_proj.weight",
        &[Of(q_lora), Hidden],
    ),
    o(
        "blk.{}.attn_q_a_norm.weight",
        "model.layers.{}.self_attn.q_a_layernorm.weight",
        &[Of(q_lora)],
    ),
    o(
        "blk.{}.attn_q_b.weight",
        "model.layers.{}.self_attn.q_b_proj.weight",
        &[Of(mla_q_rows), Of(q_lora)],
    ),
    o(
        "blk.{}.attn_q.weight",
        "model.layers.{}.self_attn.q_proj.weight",
        &[Of(mla_q_rows), Hidden],
    ),
    o(
        "blk.{}.attn_kv_a_mqa.weight",
        "model.layers.{}.self_attn.kv_a_proj_with_mqa.weight",
        &[Of(kv_a_rows), Hidden],
    ),
    o(
        "blk.{}.attn_kv_a_norm.weight",
        "model.layers.{}.self_attn.kv_a_layernorm.weight",
        &[Of(kv_lora)],
    ),
    o(
        "blk.{}.attn_kv_b.weight",
        "model.layers.{}.self_attn.kv_b_proj.weight",
        &[Of(kv_b_rows), Of(kv_lora)],
    ),
    // llama.cpp's converter splits `kv_b_proj` per head (`attn_k_b` transposed); only legacy
    // GGUFs carry `attn_kv_b`.
    o(
        "blk.{}.attn_k_b.weight",
        "-",
        &[Of(heads), Of(kv_lora), Of(qk_nope)],
    ),
    o(
        "blk.{}.attn_v_b.weight",
        "-",
        &[Of(heads), Of(v_head), Of(kv_lora)],
    ),
    o(
        "blk.{}.attn_output.weight",
        "model.layers.{}.self_attn.o_proj.weight",
        &[Hidden, Of(mla_o_cols)],
    ),
    o(
        "blk.{}.attn_q_a.bias",
        "model.layers.{}.self_attn.q_a_proj.bias",
        &[Of(q_lora)],
    ),
    o(
        "blk.{}.attn_kv_a_mqa.bias",
        "model.layers.{}.self_attn.kv_a_proj_with_mqa.bias",
        &[Of(kv_a_rows)],
    ),
    o(
        "blk.{}.attn_output.bias",
        "model.layers.{}.self_attn.o_proj.bias",
        &[Hidden],
    ),
];

/// DSA lightning indexer (absent on shared-indexer layers).
pub const DSA_INDEXER: &[TensorSpec] = &[
    o(
        "blk.{}.indexer.attn_q_b.weight",
        "model.layers.{}.self_attn.indexer.wq_b.weight",
        &[Of(idx_q_rows), Of(q_lora)],
    ),
    o(
        "blk.{}.indexer.attn_k.weight",
        "model.layers.{}.self_attn.indexer.wk.weight",
        &[Of(idx_dim), Hidden],
    ),
    o(
        "blk.{}.indexer.k_norm.weight",
        "model.layers.{}.self_attn.indexer.k_norm.weight",
        &[Of(idx_dim)],
    ),
    o(
        "blk.{}.indexer.k_norm.bias",
        "model.layers.{}.self_attn.indexer.k_norm.bias",
        &[Of(idx_dim)],
    ),
    o(
        "blk.{}.indexer.proj.weight",
        "model.layers.{}.self_attn.indexer.weights_proj.weight",
        &[Of(idx_heads), Hidden],
    ),
];

pub const DENSE_FFN: &[TensorSpec] = &[
    o(
        "blk.{}.ffn_gate.weight",
        "model.layers.{}.mlp.gate_proj.weight",
        &[Ffn, Hidden],
    ),
    o(
        "blk.{}.ffn_up.weight",
        "model.layers.{}.mlp.up_proj.weight",
        &[Ffn, Hidden],
    ),
    o(
        "blk.{}.ffn_down.weight",
        "model.layers.{}.mlp.down_proj.weight",
        &[Hidden, Ffn],
    ),
];

/// Router, selection bias, GGUF stacked experts and shared experts (DeepSeek / GLM names).
pub const MOE_FFN: &[TensorSpec] = &[
    o(
        "blk.{}.ffn_gate_inp.weight",
        "model.layers.{}.mlp.gate.weight",
        &[Of(experts), Hidden],
    ),
    o(
        "blk.{}.exp_probs_b.bias",
        "model.layers.{}.mlp.gate.e_score_correction_bias",
        &[Of(experts)],
    ),
    o(
        "blk.{}.ffn_gate_exps.weight",
        "-",
        &[Of(experts), Of(expert_ffn), Hidden],
    ),
    o(
        "blk.{}.ffn_up_exps.weight",
        "-",
        &[Of(experts), Of(expert_ffn), Hidden],
    ),
    o(
        "blk.{}.ffn_down_exps.weight",
        "-",
        &[Of(experts), Hidden, Of(expert_ffn)],
    ),
    GATE_UP_EXPS,
    o(
        "blk.{}.ffn_gate_shexp.weight",
        "model.layers.{}.mlp.shared_experts.gate_proj.weight",
        &[Of(shared_ffn), Hidden],
    ),
    o(
        "blk.{}.ffn_up_shexp.weight",
        "model.layers.{}.mlp.shared_experts.up_proj.weight",
        &[Of(shared_ffn), Hidden],
    ),
    o(
        "blk.{}.ffn_down_shexp.weight",
        "model.layers.{}.mlp.shared_experts.down_proj.weight",
        &[Hidden, Of(shared_ffn)],
    ),
];

/// llama.cpp's optional fused expert gate/up (`--fuse-gate-up-exps`): per expert, the gate rows
/// then the up rows.
pub const GATE_UP_EXPS: TensorSpec = o(
    "blk.{}.ffn_gate_up_exps.weight",
    "-",
    &[Of(experts), Of(expert_ffn2), Hidden],
);

/// Hugging Face per-expert tensor names (`{}` layer, `{e}` expert): gate, up, down.
#[derive(Debug, Clone, Copy)]
pub struct ExpertNames {
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
}

pub const HF_EXPERTS: ExpertNames = ExpertNames {
    gate: "model.layers.{}.mlp.experts.{e}.gate_proj.weight",
    up: "model.layers.{}.mlp.experts.{e}.up_proj.weight",
    down: "model.layers.{}.mlp.experts.{e}.down_proj.weight",
};

/// Splits a tensor's rows (flattened over all but the last dim) into `parts` equal matrices.
pub fn split_rows(t: &TensorRef, parts: usize) -> Result<Vec<WeightMatrix>, LoadError> {
    let err = |msg: String| LoadError::Tensor {
        name: t.name.clone(),
        msg,
    };
    let cols = *t.shape.last().unwrap_or(&1);
    let rows = t.numel() / cols.max(1);
    if parts == 0 || !rows.is_multiple_of(parts) {
        return Err(err(format!("{rows} rows do not split into {parts} parts")));
    }
    let per = rows / parts;
    let rb =
        t.ty.row_bytes(cols)
            .ok_or_else(|| err(format!("{cols} columns do not fit {:?} blocks", t.ty)))?;
    (0..parts)
        .map(|i| {
            let bytes = t
                .data
                .slice(i * per * rb, per * rb)
                .ok_or_else(|| err("data shorter than its shape".into()))?;
            WeightMatrix::new(t.ty, per, cols, bytes).map_err(|e| err(e.to_string()))
        })
        .collect()
}

fn hf_expert(
    src: &dyn WeightSource,
    pattern: &str,
    l: usize,
    e: usize,
    shape: [usize; 2],
) -> Result<WeightMatrix, LoadError> {
    let name = pattern
        .replace("{}", &l.to_string())
        .replace("{e}", &e.to_string());
    let t = src
        .tensor(&name)
        .ok_or(LoadError::MissingTensor(name.clone()))?;
    if t.shape != shape {
        return Err(LoadError::Shape {
            name,
            got: t.shape.clone(),
            expected: shape.to_vec(),
        });
    }
    t.matrix()
}

/// Builds a decoder whose layers mix standard/latent attention and dense/MoE FFNs.
pub fn build_sparse(
    cfg: ModelConfig,
    src: &dyn WeightSource,
    layer_specs: &[TensorSpec],
    hf_experts: &ExpertNames,
) -> Result<Decoder, LoadError> {
    let b = Bound::bind(src, &resolver(&cfg), cfg.n_layers, GLOBAL, layer_specs)?;
    let offset = cfg.norm == NormKind::RmsOffsetOne;
    let norm = |name: &str| Ok::<_, LoadError>(RmsNorm::new(b.vector(name)?, cfg.norm_eps, offset));
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
        let attn: Box<dyn AttentionBlock> = if cfg.mla.is_some() {
            Box::new(build_mla(&cfg, &b, l)?)
        } else {
            let sliding = cfg.attn_kind(l) == AttnKind::Sliding;
            let rope_cfg = match (sliding, &cfg.rope_local) {
                (true, Some(r)) => r,
                _ => &cfg.rope,
            };
            let mut a = StandardAttention::new(
                b.matrix(&n("attn_q.weight"))?,
                b.matrix(&n("attn_k.weight"))?,
                b.matrix(&n("attn_v.weight"))?,
                b.matrix(&n("attn_output.weight"))?,
                cfg.n_heads,
                cfg.n_kv_heads,
                cfg.head_dim,
                Rope::new(rope_cfg),
            );
            a.bq = b.opt_vector(&n("attn_q.bias"))?;
            a.bk = b.opt_vector(&n("attn_k.bias"))?;
            a.bv = b.opt_vector(&n("attn_v.bias"))?;
            if cfg.qk_norm {
                a.q_norm = Some(norm(&n("attn_q_norm.weight"))?);
                a.k_norm = Some(norm(&n("attn_k_norm.weight"))?);
            }
            if let Some(s) = cfg.attn_scale {
                a.scale = s;
            }
            a.softcap = cfg.attn_logit_softcap;
            a.window = if sliding { cfg.sliding_window } else { None };
            Box::new(a)
        };
        let ffn: Box<dyn FfnBlock> = if cfg.is_moe_layer(l) {
            Box::new(build_moe(&cfg, &b, src, l, hf_experts)?)
        } else {
            Box::new(MoeBlock::dense(dense_mlp(&cfg, &b, l)?))
        };
        let (post_attn_norm, post_ffn_norm) = if cfg.post_norms {
            (
                Some(norm(&n("post_attention_norm.weight"))?),
                Some(norm(&n("post_ffw_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        layers.push(Layer {
            attn_norm: norm(&n("attn_norm.weight"))?,
            attn,
            post_attn_norm,
            ffn_norm: norm(&n(pre_ffn_norm(&cfg, &b, l)))?,
            ffn,
            post_ffn_norm,
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

/// Name of the norm before the FFN: `ffn_norm`, except in llama.cpp's GLM-4.5 GGUFs, which store
/// it (HF `post_attention_layernorm`) as `post_attention_norm` — a name that means the sandwich
/// norm on the attention output when the config has post-norms (GLM-4, Gemma 3).
fn pre_ffn_norm(cfg: &ModelConfig, b: &Bound, l: usize) -> &'static str {
    let ffn = "ffn_norm.weight";
    let glm = "post_attention_norm.weight";
    if !cfg.post_norms && !b.has(&format!("blk.{l}.{ffn}")) && b.has(&format!("blk.{l}.{glm}")) {
        glm
    } else {
        ffn
    }
}

/// Dense SwiGLU: separate gate/up, or one fused `[2·ffn, hidden]` up (GLM-4: gate rows first).
fn dense_mlp(cfg: &ModelConfig, b: &Bound, l: usize) -> Result<GatedMlp, LoadError> {
    let n = |s: &str| format!("blk.{l}.{s}");
    let down = b.matrix(&n("ffn_down.weight"))?;
    let (gate, up) = if b.has(&n("ffn_gate.weight")) {
        (
            b.matrix(&n("ffn_gate.weight"))?,
            b.matrix(&n("ffn_up.weight"))?,
        )
    } else {
        let fused = b
            .get(&n("ffn_up.weight"))
            .ok_or_else(|| LoadError::MissingTensor(n("ffn_gate.weight")))?;
        let mut parts = split_rows(fused, 2)?.into_iter();
        (parts.next().unwrap(), parts.next().unwrap())
    };
    Ok(GatedMlp::new(gate, up, down, cfg.activation))
}

fn build_moe(
    cfg: &ModelConfig,
    b: &Bound,
    src: &dyn WeightSource,
    l: usize,
    hf: &ExpertNames,
) -> Result<MoeBlock, LoadError> {
    let n = |s: &str| format!("blk.{l}.{s}");
    let m = &cfg.moe;
    let (d, f, e) = (cfg.hidden_dim, m.expert_ffn_dim, m.n_experts);
    let experts = match src.naming() {
        Naming::Gguf => {
            let get = |s: &str| b.get(&n(s)).ok_or_else(|| LoadError::MissingTensor(n(s)));
            let (g, u) = match b.get(&n("ffn_gate_up_exps.weight")) {
                Some(fused) => {
                    let parts = split_rows(fused, 2 * e)?;
                    let (g, u): (Vec<_>, Vec<_>) =
                        parts.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
                    (
                        g.into_iter().map(|p| p.1).collect(),
                        u.into_iter().map(|p| p.1).collect(),
                    )
                }
                None => (
                    split_rows(get("ffn_gate_exps.weight")?, e)?,
                    split_rows(get("ffn_up_exps.weight")?, e)?,
                ),
            };
            let dn = split_rows(get("ffn_down_exps.weight")?, e)?;
            g.into_iter()
                .zip(u)
                .zip(dn)
                .map(|((g, u), dn)| GatedMlp::new(g, u, dn, cfg.activation))
                .collect()
        }
        Naming::HuggingFace => (0..e)
            .map(|i| {
                Ok(GatedMlp::new(
                    hf_expert(src, hf.gate, l, i, [f, d])?,
                    hf_expert(src, hf.up, l, i, [f, d])?,
                    hf_expert(src, hf.down, l, i, [d, f])?,
                    cfg.activation,
                ))
            })
            .collect::<Result<Vec<_>, LoadError>>()?,
    };
    let shared = if m.n_shared_experts > 0 {
        Some(GatedMlp::new(
            b.matrix(&n("ffn_gate_shexp.weight"))?,
            b.matrix(&n("ffn_up_shexp.weight"))?,
            b.matrix(&n("ffn_down_shexp.weight"))?,
            cfg.activation,
        ))
    } else {
        None
    };
    Ok(MoeBlock {
        router: Some(b.matrix(&n("ffn_gate_inp.weight"))?),
        correction_bias: if m.has_correction_bias {
            Some(b.vector(&n("exp_probs_b.bias"))?)
        } else {
            None
        },
        experts,
        shared,
        shared_gate: if m.shared_expert_gate {
            Some(b.matrix(&n("ffn_gate_inp_shexp.weight"))?)
        } else {
            None
        },
        routing: Routing::from_config(m),
        scratch: Default::default(),
    })
}

fn build_mla(cfg: &ModelConfig, b: &Bound, l: usize) -> Result<Mla, LoadError> {
    let n = |s: &str| format!("blk.{l}.{s}");
    let m = cfg.mla.expect("MLA config");
    let (q_a, q_b) = match m.q_lora_rank {
        Some(_) => (
            Some((
                b.matrix(&n("attn_q_a.weight"))?,
                b.vector(&n("attn_q_a_norm.weight"))?,
            )),
            b.matrix(&n("attn_q_b.weight"))?,
        ),
        None => (None, b.matrix(&n("attn_q.weight"))?),
    };
    let w = MlaWeights {
        q_a,
        q_a_bias: b.opt_vector(&n("attn_q_a.bias"))?,
        q_b,
        kv_a: b.matrix(&n("attn_kv_a_mqa.weight"))?,
        kv_a_bias: b.opt_vector(&n("attn_kv_a_mqa.bias"))?,
        kv_a_norm: b.vector(&n("attn_kv_a_norm.weight"))?,
        kv_b: match (b.get(&n("attn_k_b.weight")), b.get(&n("attn_v_b.weight"))) {
            (Some(k_b), Some(v_b)) => KvB::Split {
                k_b: split_rows(k_b, cfg.n_heads)?,
                v_b: split_rows(v_b, cfg.n_heads)?,
            },
            (Some(_), None) => return Err(LoadError::MissingTensor(n("attn_v_b.weight"))),
            (None, Some(_)) => return Err(LoadError::MissingTensor(n("attn_k_b.weight"))),
            (None, None) => KvB::Fused(b.matrix(&n("attn_kv_b.weight"))?),
        },
        o: b.matrix(&n("attn_output.weight"))?,
        o_bias: b.opt_vector(&n("attn_output.bias"))?,
    };
    let indexer = match &cfg.dsa {
        Some(dsa) if dsa.indexer_types.get(l) != Some(&IndexerKind::Shared) => Some(Indexer {
            wq_b: b.matrix(&n("indexer.attn_q_b.weight"))?,
            wk: b.matrix(&n("indexer.attn_k.weight"))?,
            k_norm_w: b.vector(&n("indexer.k_norm.weight"))?,
            k_norm_b: b.vector(&n("indexer.k_norm.bias"))?,
            weights_proj: b.matrix(&n("indexer.proj.weight"))?,
            n_heads: dsa.index_n_heads,
            topk: dsa.index_topk,
            rope: Rope::new(&RopeConfig {
                rotary_dim: m.qk_rope_head_dim,
                interleaved: dsa.rope_interleaved,
                ..cfg.rope
            }),
        }),
        _ => None,
    };
    Ok(Mla::new(cfg, l, w, indexer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrox_core::quant::{self, GgmlType};
    use ferrox_core::storage::Bytes;

    /// Q8_0 blocks (f16 scale + 32 i8) with a different scale and pattern in every block.
    fn q8_0_bytes(n_blocks: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n_blocks * 34);
        for b in 0..n_blocks {
            v.extend_from_slice(&(0x2000u16 + b as u16 * 7).to_le_bytes());
            v.extend((0..32).map(|i| ((i * 5 + b * 3) % 61) as u8 ^ 0x20));
        }
        v
    }

    /// Stacked quantized experts (and MLA's per-head `attn_k_b`) split zero-copy into the same
    /// rows a whole-tensor dequantization gives.
    #[test]
    fn split_rows_of_quantized_stack() {
        let (parts, rows, cols) = (3, 4, 64);
        let bytes = q8_0_bytes(parts * rows * cols / 32);
        let mut whole = vec![0f32; parts * rows * cols];
        quant::dequantize_row(GgmlType::Q8_0, &bytes, &mut whole).unwrap();
        let t = TensorRef {
            name: "blk.1.ffn_up_exps.weight".into(),
            ty: GgmlType::Q8_0,
            shape: vec![parts, rows, cols],
            data: Bytes::from_vec(bytes),
        };
        let mats = split_rows(&t, parts).unwrap();
        assert_eq!(mats.len(), parts);
        let mut row = vec![0f32; cols];
        for (p, m) in mats.iter().enumerate() {
            assert_eq!((m.rows(), m.cols()), (rows, cols));
            for r in 0..rows {
                m.dequantize_row(r, &mut row).unwrap();
                let at = (p * rows + r) * cols;
                assert_eq!(row, whole[at..at + cols], "part {p} row {r}");
            }
        }
        let e = split_rows(&t, 5).unwrap_err().to_string();
        assert!(e.contains("blk.1.ffn_up_exps.weight"), "{e}");
    }
}
