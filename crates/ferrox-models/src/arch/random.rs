//! `Decoder::new_random_small`: deterministic random weights for any `ModelConfig`, built
//! through the same tensor tables and builder as a real checkpoint (an in-memory Hugging Face
//! style source), so every layer kind — standard or latent attention, DSA indexer, dense or MoE
//! FFN — is exercised exactly as loaded models run it.
//!
//! Each tensor's values come from a SplitMix64 stream seeded by its name, so a weight does not
//! depend on which other tensors exist.

use super::tables::GLOBAL;
use crate::build::{build, resolver, FfnPlan, LayerPlan};
use crate::config::ModelConfig;
use crate::decoder::Decoder;
use crate::weights::{Naming, TensorRef, WeightSource};
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use std::collections::HashMap;

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

impl Decoder {
    /// A decoder with `n_layers` layers and a `vocab`-word vocabulary whose weights are small
    /// deterministic random numbers: same config, same weights, bit for bit. Works for every
    /// layer kind the config describes (MLA + DSA + MoE for `glm_5_2()`): the tensors are the
    /// ones the layer plans read, under the names of the config's registry entry.
    pub fn new_random_small(mut cfg: ModelConfig, n_layers: usize, vocab: usize) -> Decoder {
        cfg.n_layers = n_layers;
        cfg.vocab_size = vocab;
        cfg.moe.hidden_dim = cfg.hidden_dim;
        cfg.tie_embeddings = false;
        let arch = super::by_name(cfg.arch)
            .unwrap_or_else(|| panic!("new_random_small: unknown architecture {}", cfg.arch));
        let table = (arch.tensors)(&cfg);
        let resolve = resolver(&cfg);
        let mut map = HashMap::new();
        let mut add = |name: String, shape: Vec<usize>| {
            map.insert(name.clone(), tensor(name, shape));
        };
        for spec in GLOBAL.iter().filter(|s| s.hf != "-") {
            add(
                spec.hf.to_string(),
                spec.shape.iter().map(|&d| resolve(d)).collect(),
            );
        }
        for l in 0..n_layers {
            let plan = LayerPlan::of(&cfg, l);
            for spec in &table {
                let suffix = spec.gguf.strip_prefix("blk.{}.").unwrap_or(spec.gguf);
                if spec.hf != "-" && plan.uses(&cfg, suffix) {
                    let shape = spec.shape.iter().map(|&d| resolve(d)).collect();
                    add(spec.hf.replace("{}", &l.to_string()), shape);
                }
            }
            if plan.ffn == FfnPlan::Moe {
                let (d, f) = (cfg.hidden_dim, cfg.moe.expert_ffn_dim);
                for e in 0..cfg.moe.n_experts {
                    let name = |p: &str| {
                        p.replace("{}", &l.to_string())
                            .replace("{e}", &e.to_string())
                    };
                    add(name(arch.hf_experts.gate), vec![f, d]);
                    add(name(arch.hf_experts.up), vec![f, d]);
                    add(name(arch.hf_experts.down), vec![d, f]);
                }
            }
        }
        drop(resolve);
        build(arch, cfg, &MemSource(map)).unwrap_or_else(|e| panic!("new_random_small: {e}"))
    }
}
