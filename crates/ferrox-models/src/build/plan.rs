//! A layer's plan: which attention and feed-forward blocks it runs and with which switches,
//! derived from the `ModelConfig` alone. The builder (`super`) binds tensors to it; test
//! models create exactly the tensors it [`uses`](LayerPlan::uses).

use crate::config::{AttnKind, IndexerKind, ModelConfig, RopeConfig};

/// A grouped-query attention layer's switches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GqaPlan {
    pub rope: RopeConfig,
    /// Attends to the last `window` positions only.
    pub window: Option<usize>,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// Output-projection bias and per-head softmax sinks (gpt-oss).
    pub o_bias: bool,
    pub sinks: bool,
    /// `attn_q` also emits a per-head sigmoid gate on the output (Qwen3-Next).
    pub output_gate: bool,
}

/// Which attention a layer runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttnPlan {
    /// Grouped-query attention over per-head keys and values.
    Gqa(GqaPlan),
    /// Gated DeltaNet linear attention (Qwen3-Next): a recurrent state instead of a KV cache.
    Linear,
    /// Multi-head latent attention; `indexer`: the DSA indexer this layer runs (`Full`) or
    /// borrows from the previous indexer layer (`Shared`), `None` without DSA.
    Mla { indexer: Option<IndexerKind> },
}

/// Which feed-forward block a layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnPlan {
    /// One gated MLP (separate or fused gate/up projections, as stored).
    Dense,
    /// Routed experts, with shared experts when the config has them.
    Moe,
}

/// Everything the builder needs to know about one layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerPlan {
    pub attn: AttnPlan,
    pub ffn: FfnPlan,
    /// Norms on the attention and FFN outputs before the residual adds (Gemma, GLM-4).
    pub post_norms: bool,
}

impl LayerPlan {
    /// The plan of layer `l` of `cfg`.
    pub fn of(cfg: &ModelConfig, l: usize) -> LayerPlan {
        let attn = match cfg.mla {
            Some(_) => AttnPlan::Mla {
                indexer: cfg
                    .dsa
                    .as_ref()
                    .map(|d| d.indexer_types.get(l).copied().unwrap_or(IndexerKind::Full)),
            },
            None if cfg.attn_kind(l) == AttnKind::Linear => AttnPlan::Linear,
            None => {
                let sliding = cfg.attn_kind(l) == AttnKind::Sliding;
                let mut rope = match (sliding, &cfg.rope_local) {
                    (true, Some(r)) => *r,
                    _ => cfg.rope,
                };
                if cfg.no_rope.get(l) == Some(&true) {
                    // No rotated pairs: the rotation is the identity.
                    rope.rotary_dim = 0;
                }
                AttnPlan::Gqa(GqaPlan {
                    rope,
                    window: if sliding { cfg.sliding_window } else { None },
                    qkv_bias: cfg.qkv_bias,
                    qk_norm: cfg.qk_norm,
                    o_bias: cfg.o_bias,
                    sinks: cfg.attn_sinks,
                    output_gate: cfg.attn_output_gate,
                })
            }
        };
        LayerPlan {
            attn,
            ffn: if cfg.is_moe_layer(l) {
                FfnPlan::Moe
            } else {
                FfnPlan::Dense
            },
            post_norms: cfg.post_norms,
        }
    }

    /// Whether the layer reads the tensor of this logical name (`blk.N.` stripped). Test
    /// models (`Decoder::new_random_small`) create exactly these; MoE experts and alternative
    /// storage forms (fused gate/up) are not listed.
    pub fn uses(&self, cfg: &ModelConfig, suffix: &str) -> bool {
        let moe = self.ffn == FfnPlan::Moe;
        let (gqa, qkv_bias, qk_norm, o_bias, sinks) = match self.attn {
            AttnPlan::Gqa(p) => (true, p.qkv_bias, p.qk_norm, p.o_bias, p.sinks),
            AttnPlan::Mla { .. } | AttnPlan::Linear => (false, false, false, false, false),
        };
        let (mla, linear) = (
            matches!(self.attn, AttnPlan::Mla { .. }),
            self.attn == AttnPlan::Linear,
        );
        let q_lora = cfg.mla.and_then(|m| m.q_lora_rank).is_some();
        let own_indexer = matches!(
            self.attn,
            AttnPlan::Mla {
                indexer: Some(IndexerKind::Full)
            }
        );
        match suffix {
            "attn_norm.weight" | "ffn_norm.weight" => true,
            "attn_output.weight" => !linear,
            "post_attention_norm.weight" | "post_ffw_norm.weight" => self.post_norms,
            "attn_q.weight" => gqa || (mla && !q_lora),
            "attn_k.weight" | "attn_v.weight" => gqa,
            "attn_q.bias" | "attn_k.bias" | "attn_v.bias" => qkv_bias,
            "attn_q_norm.weight" | "attn_k_norm.weight" => qk_norm,
            "attn_output.bias" => o_bias,
            "attn_sinks.weight" => sinks,
            "attn_q_a.weight" | "attn_q_a_norm.weight" | "attn_q_b.weight" => mla && q_lora,
            "attn_kv_a_mqa.weight" | "attn_kv_a_norm.weight" | "attn_kv_b.weight" => mla,
            "ssm_in.weight" | "ssm_ba.weight" | "ssm_conv1d.weight" | "ssm_dt.bias" | "ssm_a"
            | "ssm_norm.weight" | "ssm_out.weight" => linear,
            s if s.starts_with("indexer.") => own_indexer,
            "ffn_gate.weight" | "ffn_up.weight" | "ffn_down.weight" => !moe,
            "ffn_gate_inp.weight" => moe,
            "ffn_gate_inp.bias" => moe && cfg.moe.biases,
            "exp_probs_b.bias" => moe && cfg.moe.has_correction_bias,
            s if s.ends_with("_shexp.weight") => moe && cfg.moe.n_shared_experts > 0,
            _ => false,
        }
    }
}
