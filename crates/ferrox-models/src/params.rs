//! Parameter counts from a `ModelConfig` alone: total, and active per token (every weight a
//! token touches: all attention and dense weights, the router, the shared experts and
//! `n_experts_active` routed experts). Norm weights and biases are included; multi-token
//! prediction layers are not part of `ModelConfig` and not counted.

use crate::config::{AttnKind, IndexerKind, ModelConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamCounts {
    pub total: u64,
    /// Per token, including the embedding row table and the LM head.
    pub active: u64,
}

/// Counts parameters layer by layer.
pub fn param_counts(c: &ModelConfig) -> ParamCounts {
    let d = c.hidden_dim as u64;
    let v = c.vocab_size as u64;
    let embed = v * d + if c.tie_embeddings { 0 } else { v * d } + d;
    let mut total = embed;
    let mut active = embed;
    let gated = |f: u64| 3 * d * f;
    for l in 0..c.n_layers {
        let mut layer = 2 * d + if c.post_norms { 2 * d } else { 0 };
        layer += match c.mla {
            Some(m) => {
                let h = c.n_heads as u64;
                let (dn, dr, dv) = (
                    m.qk_nope_head_dim as u64,
                    m.qk_rope_head_dim as u64,
                    m.v_head_dim as u64,
                );
                let rkv = m.kv_lora_rank as u64;
                let q = match m.q_lora_rank {
                    Some(rq) => d * rq as u64 + rq as u64 + rq as u64 * h * (dn + dr),
                    None => d * h * (dn + dr),
                };
                let mut a = q + d * (rkv + dr) + rkv + rkv * h * (dn + dv) + h * dv * d;
                if let Some(dsa) = &c.dsa {
                    if dsa.indexer_types.get(l) != Some(&IndexerKind::Shared) {
                        let (hi, di) = (dsa.index_n_heads as u64, dsa.index_head_dim as u64);
                        let rq = m.q_lora_rank.unwrap_or(c.hidden_dim) as u64;
                        a += rq * hi * di + d * di + 2 * di + d * hi;
                    }
                }
                a
            }
            None => match c.linear.filter(|_| c.attn_kind(l) == AttnKind::Linear) {
                Some(lin) => {
                    let (cd, vd, nv) = (
                        lin.conv_dim() as u64,
                        lin.value_dim() as u64,
                        lin.n_v_heads as u64,
                    );
                    // qkvz and ba projections, conv taps, dt_bias and A_log, gated norm, output.
                    d * (cd + vd)
                        + d * 2 * nv
                        + cd * lin.conv_kernel as u64
                        + 2 * nv
                        + lin.v_head_dim as u64
                        + vd * d
                }
                None => {
                    let (q, kv) = (
                        (c.n_heads * c.head_dim) as u64,
                        (c.n_kv_heads * c.head_dim) as u64,
                    );
                    let bias = if c.qkv_bias { q + 2 * kv } else { 0 };
                    let qk_norm = if c.qk_norm { 2 * c.head_dim as u64 } else { 0 };
                    let gate = if c.attn_output_gate { d * q } else { 0 };
                    d * q + 2 * d * kv + q * d + bias + qk_norm + gate
                }
            },
        };
        let mut layer_active = layer;
        if c.is_moe_layer(l) {
            let m = &c.moe;
            let e = m.n_experts as u64;
            let router = e * d + if m.has_correction_bias { e } else { 0 };
            let shared = if m.n_shared_experts > 0 {
                gated(m.shared_ffn_dim as u64) + if m.shared_expert_gate { d } else { 0 }
            } else {
                0
            };
            let expert = gated(m.expert_ffn_dim as u64);
            layer += router + shared + e * expert;
            layer_active += router + shared + m.n_experts_active as u64 * expert;
        } else {
            layer += gated(c.ffn_dim as u64);
            layer_active += gated(c.ffn_dim as u64);
        }
        total += layer;
        active += layer_active;
    }
    ParamCounts { total, active }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::glm_moe_dsa::glm_5_2;
    use crate::load::load_hf_config;
    use std::path::Path;

    #[test]
    fn glm_5_2_matches_the_model_card() {
        // GLM-5 technical report / model card: 744B total, 40B activated (3 dense + 75 MoE
        // layers; its MTP layer is not in ModelConfig). GLM-5.2's shared indexers remove
        // ~0.35B of indexer weights relative to GLM-5.
        let p = param_counts(&glm_5_2());
        eprintln!("glm_5_2: total {} active {}", p.total, p.active);
        assert!((740e9..748e9).contains(&(p.total as f64)), "{}", p.total);
        assert!((39e9..43e9).contains(&(p.active as f64)), "{}", p.active);
        let mut all_full = glm_5_2();
        all_full.dsa.as_mut().unwrap().indexer_types = vec![IndexerKind::Full; 78];
        let full = param_counts(&all_full);
        assert!(full.total > p.total && full.total - p.total < 400_000_000);
    }

    #[test]
    fn tiny_checkpoints_match_their_readme_counts() {
        // n_params from the fixtures' README (transformers' count, buffers excluded).
        for (name, want) in [
            ("glm4", 164_928u64),
            ("glm4_moe", 376_192),
            ("glm4_moe_lite", 355_408),
            ("glm_moe_dsa", 520_064),
            ("glm_moe_dsa_shared_indexer", 509_792),
            ("deepseek_v3", 352_336),
            ("deepseek_v32", 520_064),
            ("qwen3_moe", 263_808),
            ("mixtral", 287_552),
            ("qwen3_next", 374_728),
        ] {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/hf-tiny")
                .join(name);
            let cfg = load_hf_config(&dir).unwrap();
            let p = param_counts(&cfg);
            // The correction bias is a buffer, not a parameter, in transformers.
            let bias: u64 = (0..cfg.n_layers)
                .filter(|&l| cfg.is_moe_layer(l) && cfg.moe.has_correction_bias)
                .map(|_| cfg.moe.n_experts as u64)
                .sum();
            assert_eq!(p.total - bias, want, "{name}");
        }
    }
}
