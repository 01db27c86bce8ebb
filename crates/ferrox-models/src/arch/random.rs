//! `Decoder::new_random_small`: deterministic random weights for any `ModelConfig`, built
//! through the same tensor tables and builder as a real checkpoint (an in-memory Hugging Face
//! style source), so every layer kind — standard or latent attention, DSA indexer, dense or MoE
//! FFN — is exercised exactly as loaded models run it.
//!
//! Each tensor's values come from a SplitMix64 stream seeded by its name, so a weight does not
//! depend on which other tensors exist.

use super::sparse::{
    build_sparse, DENSE_FFN, DSA_INDEXER, HF_EXPERTS, MLA_ATTN, MOE_FFN, NORMS, STD_ATTN,
};
use crate::config::{IndexerKind, ModelConfig};
use crate::decoder::Decoder;
use crate::weights::{opt, Dim::*, Naming, TensorRef, TensorSpec, WeightSource};
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use std::collections::HashMap;

const POST_NORMS: &[TensorSpec] = &[
    opt(
        "blk.{}.post_attention_norm.weight",
        "model.layers.{}.post_self_attn_layernorm.weight",
        &[Hidden],
    ),
    opt(
        "blk.{}.post_ffw_norm.weight",
        "model.layers.{}.post_mlp_layernorm.weight",
        &[Hidden],
    ),
];

struct MemSource(HashMap<String, TensorRef>);

impl WeightSource for MemSource {
    fn naming(&self) -> Naming {
        Naming::HuggingFace
    }
    fn tensor(&self, name: &str) -> Option<TensorRef> {
        self.0.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `numel` values: `center + spread * u`, u uniform in [-1, 1), seeded by `name`.
fn values(name: &str, numel: usize, center: f32, spread: f32) -> Vec<f32> {
    let mut s = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..numel)
        .map(|_| {
            let u = (splitmix(&mut s) >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            center + spread * u
        })
        .collect()
}

fn tensor(name: String, shape: Vec<usize>) -> TensorRef {
    let numel: usize = shape.iter().product();
    let cols = *shape.last().unwrap_or(&1);
    let is_norm = name.contains("norm");
    let (center, spread) = if shape.len() == 1 {
        if is_norm {
            (1.0, 0.1)
        } else {
            (0.0, 0.1)
        }
    } else {
        // Uniform with std ≈ 1.2/sqrt(fan_in): peaked enough that greedy output repeats.
        (0.0, 2.0 / (cols as f32).sqrt())
    };
    let v = values(&name, numel, center, spread);
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    TensorRef {
        name,
        ty: GgmlType::F32,
        shape,
        data: Bytes::from_vec(bytes),
    }
}

/// Whether a layer tensor (by GGUF logical name) exists for this config.
fn wanted(cfg: &ModelConfig, l: usize, logical: &str) -> bool {
    let mla = cfg.mla.is_some();
    let q_lora = cfg.mla.and_then(|m| m.q_lora_rank).is_some();
    let moe = cfg.is_moe_layer(l);
    let suffix = logical.split_once('.').map_or(logical, |(_, s)| s);
    let suffix = suffix.split_once('.').map_or(suffix, |(_, s)| s);
    match suffix {
        "attn_norm.weight" | "ffn_norm.weight" | "attn_output.weight" => true,
        "post_attention_norm.weight" | "post_ffw_norm.weight" => cfg.post_norms,
        "attn_q.weight" => !mla || !q_lora,
        "attn_k.weight" | "attn_v.weight" => !mla,
        "attn_q.bias" | "attn_k.bias" | "attn_v.bias" => !mla && cfg.qkv_bias,
        "attn_q_norm.weight" | "attn_k_norm.weight" => !mla && cfg.qk_norm,
        "attn_q_a.weight" | "attn_q_a_norm.weight" | "attn_q_b.weight" => q_lora,
        "attn_kv_a_mqa.weight" | "attn_kv_a_norm.weight" | "attn_kv_b.weight" => mla,
        s if s.starts_with("indexer.") => cfg
            .dsa
            .as_ref()
            .is_some_and(|d| d.indexer_types.get(l) != Some(&IndexerKind::Shared)),
        "ffn_gate.weight" | "ffn_up.weight" | "ffn_down.weight" => !moe,
        "ffn_gate_inp.weight" => moe,
        "exp_probs_b.bias" => moe && cfg.moe.has_correction_bias,
        s if s.ends_with("_shexp.weight") => moe && cfg.moe.n_shared_experts > 0,
        _ => false,
    }
}

impl Decoder {
    /// A decoder with `n_layers` layers and a `vocab`-word vocabulary whose weights are small
    /// deterministic random numbers: same config, same weights, bit for bit. Works for every
    /// layer kind the config describes (MLA + DSA + MoE for `glm_5_2()`).
    pub fn new_random_small(mut cfg: ModelConfig, n_layers: usize, vocab: usize) -> Decoder {
        cfg.n_layers = n_layers;
        cfg.vocab_size = vocab;
        cfg.moe.hidden_dim = cfg.hidden_dim;
        cfg.tie_embeddings = false;
        let resolve = super::resolver(&cfg);
        let attn = if cfg.mla.is_some() {
            [MLA_ATTN, DSA_INDEXER].concat()
        } else {
            STD_ATTN.to_vec()
        };
        let specs = [NORMS, &attn, POST_NORMS, DENSE_FFN, MOE_FFN].concat();
        let mut map = HashMap::new();
        let mut add = |name: String, shape: Vec<usize>| {
            map.insert(name.clone(), tensor(name, shape));
        };
        for spec in super::sparse::GLOBAL {
            add(
                spec.hf.to_string(),
                spec.shape.iter().map(|&d| resolve(d)).collect(),
            );
        }
        for l in 0..n_layers {
            for spec in &specs {
                let logical = spec.gguf.replace("{}", &l.to_string());
                if spec.hf != "-" && wanted(&cfg, l, &logical) {
                    let shape = spec.shape.iter().map(|&d| resolve(d)).collect();
                    add(spec.hf.replace("{}", &l.to_string()), shape);
                }
            }
            if cfg.is_moe_layer(l) {
                let (d, f) = (cfg.hidden_dim, cfg.moe.expert_ffn_dim);
                for e in 0..cfg.moe.n_experts {
                    let name = |p: &str| {
                        p.replace("{}", &l.to_string())
                            .replace("{e}", &e.to_string())
                    };
                    add(name(HF_EXPERTS.gate), vec![f, d]);
                    add(name(HF_EXPERTS.up), vec![f, d]);
                    add(name(HF_EXPERTS.down), vec![d, f]);
                }
            }
        }
        drop(resolve);
        build_sparse(cfg, &MemSource(map), &specs, &HF_EXPERTS)
            .unwrap_or_else(|e| panic!("new_random_small: {e}"))
    }
}
