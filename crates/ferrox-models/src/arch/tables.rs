//! Tensor tables shared by several architectures: llama.cpp GGUF names (`llama-arch.cpp`)
//! beside the Hugging Face Hub names. A table only maps names and checks shapes; which tensors a
//! layer needs is the builder's business (`crate::build`), from the layer's plan.

use crate::config::{MlaConfig, ModelConfig};
use crate::weights::{opt, req, table, Dim, Dim::*, TensorSpec};

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
pub fn rope_pairs(c: &ModelConfig) -> usize {
    c.rope.rotary_dim / 2
}
pub fn ffn2(c: &ModelConfig) -> usize {
    2 * c.ffn_dim
}
fn mla(c: &ModelConfig) -> MlaConfig {
    c.mla.unwrap_or(MlaConfig {
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

const fn o(gguf: &'static str, hf: &'static str, shape: &'static [Dim]) -> TensorSpec {
    opt(gguf, hf, shape)
}

pub fn hidden2(c: &ModelConfig) -> usize {
    2 * c.hidden_dim
}

/// An MTP (NextN) block's own tensors, beside its decoder layer's at index `n_layers`
/// (llama.cpp `LLM_TENSOR_NEXTN_*`; the Hub's DeepSeek-V3 / GLM-4.5 names). The embedding and
/// head copies are optional: the decoder's serve when they are absent.
pub const MTP: &[TensorSpec] = &[
    req(
        "blk.{}.nextn.eh_proj.weight",
        "model.layers.{}.eh_proj.weight",
        &[Hidden, Of(hidden2)],
    ),
    req(
        "blk.{}.nextn.enorm.weight",
        "model.layers.{}.enorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.nextn.hnorm.weight",
        "model.layers.{}.hnorm.weight",
        &[Hidden],
    ),
    req(
        "blk.{}.nextn.shared_head_norm.weight",
        "model.layers.{}.shared_head.norm.weight",
        &[Hidden],
    ),
    o(
        "blk.{}.nextn.shared_head_head.weight",
        "model.layers.{}.shared_head.head.weight",
        &[Vocab, Hidden],
    ),
    o(
        "blk.{}.nextn.embed_tokens.weight",
        "model.layers.{}.embed_tokens.weight",
        &[Vocab, Hidden],
    ),
];

/// Tensors of every model outside the layers.
pub const GLOBAL: &[TensorSpec] = &[
    req(
        "token_embd.weight",
        "model.embed_tokens.weight",
        &[Vocab, Hidden],
    ),
    req("output_norm.weight", "model.norm.weight", &[Hidden]),
    o("output.weight", "lm_head.weight", &[Vocab, Hidden]),
    // llama.cpp's Llama 3.x frequency factors, one per rotated pair.
    o("rope_freqs.weight", "-", &[Of(rope_pairs)]),
    // LongRoPE's two sets (llama.cpp's Phi-3): short within the original context, long past it.
    o("rope_factors_short.weight", "-", &[Of(rope_pairs)]),
    o("rope_factors_long.weight", "-", &[Of(rope_pairs)]),
];

/// The norms before attention and before the FFN (Llama's names).
pub const NORMS: &[TensorSpec] = &[ATTN_NORM, FFN_NORM];

pub const ATTN_NORM: TensorSpec = o(
    "blk.{}.attn_norm.weight",
    "model.layers.{}.input_layernorm.weight",
    &[Hidden],
);

pub const FFN_NORM: TensorSpec = o(
    "blk.{}.ffn_norm.weight",
    "model.layers.{}.post_attention_layernorm.weight",
    &[Hidden],
);

/// GQA attention with optional q/k/v bias and per-head QK norm.
pub const STD_ATTN: &[TensorSpec] = table![
    "blk.{}.attn_q.weight" => "model.layers.{}.self_attn.q_proj.weight", [QDim, Hidden];
    "blk.{}.attn_k.weight" => "model.layers.{}.self_attn.k_proj.weight", [KvDim, Hidden];
    "blk.{}.attn_v.weight" => "model.layers.{}.self_attn.v_proj.weight", [KvDim, Hidden];
    "blk.{}.attn_q.bias" => "model.layers.{}.self_attn.q_proj.bias", [QDim];
    "blk.{}.attn_k.bias" => "model.layers.{}.self_attn.k_proj.bias", [KvDim];
    "blk.{}.attn_v.bias" => "model.layers.{}.self_attn.v_proj.bias", [KvDim];
    "blk.{}.attn_q_norm.weight" => "model.layers.{}.self_attn.q_norm.weight", [HeadDim];
    "blk.{}.attn_k_norm.weight" => "model.layers.{}.self_attn.k_norm.weight", [HeadDim];
    "blk.{}.attn_output.weight" => "model.layers.{}.self_attn.o_proj.weight", [Hidden, QDim];
];

/// Multi-head latent attention (DeepSeek-V3 / GLM-5 names).
pub const MLA_ATTN: &[TensorSpec] = table![
    "blk.{}.attn_q_a.weight" => "model.layers.{}.self_attn.q_a_proj.weight", [Of(q_lora), Hidden];
    "blk.{}.attn_q_a_norm.weight" => "model.layers.{}.self_attn.q_a_layernorm.weight", [Of(q_lora)];
    "blk.{}.attn_q_b.weight" => "model.layers.{}.self_attn.q_b_proj.weight", [Of(mla_q_rows), Of(q_lora)];
    "blk.{}.attn_q.weight" => "model.layers.{}.self_attn.q_proj.weight", [Of(mla_q_rows), Hidden];
    "blk.{}.attn_kv_a_mqa.weight" => "model.layers.{}.self_attn.kv_a_proj_with_mqa.weight", [Of(kv_a_rows), Hidden];
    "blk.{}.attn_kv_a_norm.weight" => "model.layers.{}.self_attn.kv_a_layernorm.weight", [Of(kv_lora)];
    "blk.{}.attn_kv_b.weight" => "model.layers.{}.self_attn.kv_b_proj.weight", [Of(kv_b_rows), Of(kv_lora)];
    // llama.cpp's converter splits `kv_b_proj` per head (`attn_k_b` transposed); only legacy
    // GGUFs carry `attn_kv_b`.
    "blk.{}.attn_k_b.weight" => "-", [Of(heads), Of(kv_lora), Of(qk_nope)];
    "blk.{}.attn_v_b.weight" => "-", [Of(heads), Of(v_head), Of(kv_lora)];
    "blk.{}.attn_output.weight" => "model.layers.{}.self_attn.o_proj.weight", [Hidden, Of(mla_o_cols)];
    "blk.{}.attn_q_a.bias" => "model.layers.{}.self_attn.q_a_proj.bias", [Of(q_lora)];
    "blk.{}.attn_kv_a_mqa.bias" => "model.layers.{}.self_attn.kv_a_proj_with_mqa.bias", [Of(kv_a_rows)];
    "blk.{}.attn_output.bias" => "model.layers.{}.self_attn.o_proj.bias", [Hidden];
];

/// DSA lightning indexer (absent on shared-indexer layers).
pub const DSA_INDEXER: &[TensorSpec] = table![
    "blk.{}.indexer.attn_q_b.weight" => "model.layers.{}.self_attn.indexer.wq_b.weight", [Of(idx_q_rows), Of(q_lora)];
    "blk.{}.indexer.attn_k.weight" => "model.layers.{}.self_attn.indexer.wk.weight", [Of(idx_dim), Hidden];
    "blk.{}.indexer.k_norm.weight" => "model.layers.{}.self_attn.indexer.k_norm.weight", [Of(idx_dim)];
    "blk.{}.indexer.k_norm.bias" => "model.layers.{}.self_attn.indexer.k_norm.bias", [Of(idx_dim)];
    "blk.{}.indexer.proj.weight" => "model.layers.{}.self_attn.indexer.weights_proj.weight", [Of(idx_heads), Hidden];
];

pub const DENSE_FFN: &[TensorSpec] = table![
    "blk.{}.ffn_gate.weight" => "model.layers.{}.mlp.gate_proj.weight", [Ffn, Hidden];
    "blk.{}.ffn_up.weight" => "model.layers.{}.mlp.up_proj.weight", [Ffn, Hidden];
    "blk.{}.ffn_down.weight" => "model.layers.{}.mlp.down_proj.weight", [Hidden, Ffn];
];

/// Router, selection bias, GGUF stacked experts and shared experts (DeepSeek / GLM names).
pub const ROUTED_FFN: &[TensorSpec] = table![
    "blk.{}.ffn_gate_inp.weight" => "model.layers.{}.mlp.gate.weight", [Of(experts), Hidden];
    "blk.{}.exp_probs_b.bias" => "model.layers.{}.mlp.gate.e_score_correction_bias", [Of(experts)];
    "blk.{}.ffn_gate_exps.weight" => "-", [Of(experts), Of(expert_ffn), Hidden];
    "blk.{}.ffn_up_exps.weight" => "-", [Of(experts), Of(expert_ffn), Hidden];
    "blk.{}.ffn_down_exps.weight" => "-", [Of(experts), Hidden, Of(expert_ffn)];
    "blk.{}.ffn_gate_up_exps.weight" => "-", [Of(experts), Of(expert_ffn2), Hidden];
];

/// DeepSeek-style shared experts (plural Hub name `shared_experts`).
pub const SHARED_FFN: &[TensorSpec] = table![
    "blk.{}.ffn_gate_shexp.weight" => "model.layers.{}.mlp.shared_experts.gate_proj.weight", [Of(shared_ffn), Hidden];
    "blk.{}.ffn_up_shexp.weight" => "model.layers.{}.mlp.shared_experts.up_proj.weight", [Of(shared_ffn), Hidden];
    "blk.{}.ffn_down_shexp.weight" => "model.layers.{}.mlp.shared_experts.down_proj.weight", [Hidden, Of(shared_ffn)];
];

/// Qwen-MoE's one gated shared expert, under its singular Hub name, and its gate
/// (`qwen2_moe`, `qwen3_next`).
pub const GATED_SHARED_EXPERT: &[TensorSpec] = table![
    "blk.{}.ffn_gate_shexp.weight" => "model.layers.{}.mlp.shared_expert.gate_proj.weight", [Of(shared_ffn), Hidden];
    "blk.{}.ffn_up_shexp.weight" => "model.layers.{}.mlp.shared_expert.up_proj.weight", [Of(shared_ffn), Hidden];
    "blk.{}.ffn_down_shexp.weight" => "model.layers.{}.mlp.shared_expert.down_proj.weight", [Hidden, Of(shared_ffn)];
    "blk.{}.ffn_gate_inp_shexp.weight" => "model.layers.{}.mlp.shared_expert_gate.weight", [Fixed(1), Hidden];
];

/// Gemma's norms after attention, before and after the FFN (the one before attention is the
/// shared `attn_norm`; `gemma2`, `gemma3`).
pub const GEMMA_NORMS: &[TensorSpec] = table![
    "blk.{}.post_attention_norm.weight" => "model.layers.{}.post_attention_layernorm.weight", [Hidden];
    "blk.{}.ffn_norm.weight" => "model.layers.{}.pre_feedforward_layernorm.weight", [Hidden];
    "blk.{}.post_ffw_norm.weight" => "model.layers.{}.post_feedforward_layernorm.weight", [Hidden];
];

/// Llama's layer: norms, GQA attention, gated MLP.
pub fn llama_layers(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN].concat()
}

/// GQA attention with dense or MoE FFN layers (DeepSeek-style MoE names).
pub fn gqa_moe_layers(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, STD_ATTN, DENSE_FFN, ROUTED_FFN, SHARED_FFN].concat()
}

/// MLA attention with dense or MoE FFN layers.
pub fn mla_moe_layers(_: &ModelConfig) -> Vec<TensorSpec> {
    [NORMS, MLA_ATTN, DENSE_FFN, ROUTED_FFN, SHARED_FFN].concat()
}

/// MLA attention with the DSA indexer and dense or MoE FFN layers (GLM-5, DeepSeek-V3.2).
pub fn mla_dsa_layers(_: &ModelConfig) -> Vec<TensorSpec> {
    [
        NORMS,
        MLA_ATTN,
        DSA_INDEXER,
        DENSE_FFN,
        ROUTED_FFN,
        SHARED_FFN,
    ]
    .concat()
}

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
