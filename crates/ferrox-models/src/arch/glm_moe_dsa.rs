//! GLM-5 / 5.1 / 5.2 (`glm_moe_dsa`): MLA + the DSA lightning indexer (top-`index_topk` keys
//! per query; GLM-5.2 layers may share the previous layer's selection and carry no indexer
//! weights) + DeepSeek-style MoE. The GLM indexer rotates adjacent pairs.
//! Reference: transformers `modeling_glm_moe_dsa.py` (fixtures/hf-tiny/FORWARD.md §5);
//! llama.cpp `glm-dsa`, indexer tensors `blk.N.indexer.{attn_q_b,attn_k,k_norm,proj}`.

use super::common_deepseek::{dsa_from_gguf, dsa_from_hf};
use super::gguf::GATING_SIGMOID;
use super::tables::mla_dsa_layers;
use super::Architecture;
use crate::config::{
    Dims, DsaConfig, IndexerKind, MlaConfig, ModelConfig, MoeConfig, RopeConfig, RopeScaling,
    RouterScoring,
};

pub static ARCH: Architecture = Architecture::new("glm_moe_dsa", mla_dsa_layers)
    .hf(&["glm_moe_dsa"], dsa_from_hf::<true>)
    .gguf(&["glm-dsa"], dsa_from_gguf::<GATING_SIGMOID, true>);

/// GLM-5.2 (`glm_moe_dsa`): MLA + DSA indexer + MoE, the shape the engine was designed around.
/// Dimensions are transformers' `GlmMoeDsaConfig` defaults (GLM-5); GLM-5.2 adds indexer
/// sharing across layers (`index_topk_freq = 2`: every other layer after the first reuses the
/// previous layer's top-k).
pub fn glm_5_2() -> ModelConfig {
    let n_layers = 78;
    let first_k_dense = 3;
    let qk_rope = 64;
    let dims = Dims {
        vocab: 154_880,
        hidden: 6144,
        n_layers,
        n_heads: 64,
        n_kv_heads: 64,
        head_dim: qk_rope,
        ffn_dim: 12_288,
    };
    let rope = RopeConfig {
        theta: 1_000_000.0,
        scaling: RopeScaling::None,
        rotary_dim: qk_rope,
        interleaved: true,
    };
    let mut cfg = ModelConfig::new("glm_moe_dsa", dims, rope);
    cfg.max_seq_len = 202_752;
    cfg.norm_eps = 1e-5;
    cfg.layer_moe = (0..n_layers).map(|l| l >= first_k_dense).collect();
    cfg.moe = MoeConfig {
        n_experts: 256,
        n_experts_active: 8,
        n_shared_experts: 1,
        expert_ffn_dim: 2048,
        shared_ffn_dim: 2048,
        scoring: RouterScoring::Sigmoid,
        has_correction_bias: true,
        norm_topk_prob: true,
        routed_scaling_factor: 2.5,
        ..MoeConfig::none(6144)
    };
    cfg.mla = Some(MlaConfig {
        q_lora_rank: Some(2048),
        kv_lora_rank: 512,
        qk_nope_head_dim: 192,
        qk_rope_head_dim: qk_rope,
        v_head_dim: 256,
    });
    cfg.dsa = Some(DsaConfig {
        index_n_heads: 32,
        index_head_dim: 128,
        index_topk: 2048,
        indexer_types: (0..n_layers)
            .map(|l| {
                if l < 2 || l % 2 == 1 {
                    IndexerKind::Full
                } else {
                    IndexerKind::Shared
                }
            })
            .collect(),
        rope_interleaved: true,
    });
    cfg
}

/// [`glm_5_2`] shrunk for tests (the speculation tests' model): tiny width and MoE, GLM-5's
/// MLA, DSA and layer kinds kept.
pub fn glm_5_2_tiny() -> ModelConfig {
    let mut c = glm_5_2();
    c.hidden_dim = 16;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 4;
    c.moe.hidden_dim = 16;
    c.moe.n_experts = 6;
    c.moe.n_experts_active = 2;
    c.moe.n_shared_experts = 1;
    c.moe.expert_ffn_dim = 8;
    c
}

#[cfg(test)]
mod tests {
    use super::glm_5_2;
    use crate::distributed::layer_ranges;

    #[test]
    fn layer_ranges_are_contiguous_and_keep_shared_indexers_with_their_source() {
        let mut cfg = glm_5_2();
        cfg.n_layers = 7;
        let r = layer_ranges(&cfg, 2);
        assert_eq!(r.first().unwrap().start, 0);
        assert_eq!(r.last().unwrap().end, 7);
        assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        let dsa = cfg.dsa.as_ref().unwrap();
        for range in layer_ranges(&cfg, 3).iter().chain(&r) {
            let first = dsa.indexer_types.get(range.start);
            assert!(
                range.is_empty() || first != Some(&crate::config::IndexerKind::Shared),
                "{range:?}"
            );
        }
        cfg.dsa = None;
        cfg.n_layers = 3;
        assert_eq!(layer_ranges(&cfg, 4), vec![0..0, 0..1, 1..2, 2..3]);
        assert_eq!(layer_ranges(&cfg, 1), vec![0..3]);
    }
}
