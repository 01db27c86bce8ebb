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
    pub fn new_random_small(cfg: ModelConfig, n_layers: usize, vocab: usize) -> Decoder {
        let (arch, cfg, src) = random_source(cfg, n_layers, vocab);
        build(arch, cfg, &src).unwrap_or_else(|e| panic!("new_random_small: {e}"))
    }
}

/// The architecture, the adjusted config and the in-memory tensors of
/// [`Decoder::new_random_small`].
fn random_source(
    mut cfg: ModelConfig,
    n_layers: usize,
    vocab: usize,
) -> (&'static super::Architecture, ModelConfig, MemSource) {
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
    (arch, cfg, MemSource(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build_experts, build_share};
    use crate::distributed::{ExpertSplit, Share};

    /// A place of an expert-parallel job repacks (copies to the heap) only the routed experts
    /// it owns; the others stay views of the file, never read, so never resident.
    #[test]
    fn a_place_repacks_only_its_experts() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hf-tiny/glm4_moe");
        let cfg = crate::load::load_hf_config(&dir).unwrap();
        let (arch, cfg, mut src) = random_source(cfg, 3, 64);
        // Experts in Q8_0 (zero blocks), a type with an interleaved layout.
        for t in src.0.values_mut().filter(|t| t.name.contains(".experts.")) {
            let rows = t.shape[0];
            let bytes = GgmlType::Q8_0.row_bytes(t.shape[1]).unwrap() * rows;
            t.ty = GgmlType::Q8_0;
            t.data = Bytes::from_vec(vec![0; bytes]);
        }
        let whole = build(arch, cfg.clone(), &src).unwrap();
        let split = ExpertSplit {
            place: 1,
            places: 2,
            load: None,
        };
        let share = Share {
            experts: Some(split.clone()),
            layers: None,
            driver: true,
        };
        let part = build_share(arch, cfg.clone(), &src, &share).unwrap();
        let routed = build_experts(arch, &cfg, &src, &split).unwrap();
        let mut moe_layers = 0;
        for (l, (w, p)) in whole.layers.iter().zip(&part.layers).enumerate() {
            let (Some(w), Some(p)) = (w.ffn.as_moe(), p.ffn.as_moe()) else {
                assert!(routed[l].is_none());
                continue;
            };
            moe_layers += 1;
            let r = routed[l].as_ref().unwrap();
            assert!(p.shared.is_some() && r.shared.is_none(), "layer {l}");
            let n = w.experts.len();
            let own = split.placement(l, n).unwrap().range(1);
            assert_eq!(own, n / 2..n);
            for e in 0..n {
                let whole_packed = w.experts[e].gate.is_interleaved();
                let want = whole_packed && own.contains(&e);
                assert_eq!(p.experts[e].gate.is_interleaved(), want, "{l}/{e}");
                assert_eq!(p.experts[e].down.is_interleaved(), want, "{l}/{e}");
                assert_eq!(r.experts[e].up.is_interleaved(), want, "{l}/{e}");
            }
        }
        assert!(moe_layers > 0);
        let isa = ferrox_core::kernels::isa();
        if ferrox_core::kernels::interleaves(isa, GgmlType::Q8_0) {
            let w = whole.layers.iter().find_map(|l| l.ffn.as_moe()).unwrap();
            assert!(w.experts.iter().all(|e| e.gate.is_interleaved()));
        }
    }
}

/// Pipeline parallelism without a transport: the driver's layers here, the rest in decoders
/// built with other layer ranges, run as the places after the driver would.
#[cfg(test)]
mod pipeline_tests {
    use super::*;
    use crate::build::build_share;
    use crate::decoder::{SeqBatch, StageRows};
    use crate::distributed::{layer_ranges, ExchangeError, Share, StageExchange, StageSeq};
    use ferrox_core::cache::{CacheFormat, KvCache};
    use std::sync::{Arc, Mutex};

    /// The places after the driver, in process; each keeps its caches per sequence key.
    struct Local {
        places: Vec<Decoder>,
        caches: Mutex<HashMap<(usize, u64), Vec<KvCache>>>,
        groups: Mutex<Vec<Vec<StageSeq>>>,
        done: Mutex<Vec<Vec<f32>>>,
    }

    impl StageExchange for Local {
        fn places(&self) -> usize {
            self.places.len() + 1
        }
        fn begin(&self, g: &[Vec<StageSeq>], _: CacheFormat) -> Result<(), ExchangeError> {
            *self.groups.lock().unwrap() = g.to_vec();
            self.done.lock().unwrap().clear();
            Ok(())
        }
        fn send(&self, g: usize, mut x: Vec<f32>) -> Result<(), ExchangeError> {
            let group = self.groups.lock().unwrap()[g].clone();
            let mut all = self.caches.lock().unwrap();
            for (p, d) in self.places.iter().enumerate() {
                let mut taken: Vec<Vec<KvCache>> = group
                    .iter()
                    .map(|s| all.remove(&(p, s.key)).unwrap_or_else(|| d.new_caches()))
                    .collect();
                let mut rows: Vec<StageRows<'_>> = group
                    .iter()
                    .zip(taken.iter_mut())
                    .map(|(s, c)| StageRows {
                        n: s.n,
                        pos: s.pos,
                        caches: c,
                    })
                    .collect();
                let r = d.forward_stage(&mut x, &mut rows);
                drop(rows);
                for (s, c) in group.iter().zip(taken) {
                    all.insert((p, s.key), c);
                }
                r.map_err(|e| ExchangeError::Malformed(e.to_string()))?;
            }
            self.done.lock().unwrap().push(x);
            Ok(())
        }
        fn finish(&self) -> Result<Vec<Vec<f32>>, ExchangeError> {
            Ok(std::mem::take(&mut *self.done.lock().unwrap()))
        }
    }

    /// The whole model, and the same split over `places` (the driver first).
    fn split(family: &str, places: usize) -> (Decoder, Decoder) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hf-tiny")
            .join(family);
        let cfg = crate::load::load_hf_config(&dir).unwrap();
        let (arch, cfg, src) = random_source(cfg, 5, 96);
        let whole = build(arch, cfg.clone(), &src).unwrap();
        let ranges = layer_ranges(&cfg, places);
        let part = |p: usize| {
            let share = Share {
                experts: None,
                layers: Some(ranges[p].clone()),
                driver: p == 0,
            };
            build_share(arch, cfg.clone(), &src, &share).unwrap()
        };
        let mut driver = part(0);
        assert_eq!(driver.layers.len(), ranges[0].len());
        driver.set_stages(Arc::new(Local {
            places: (1..places).map(part).collect(),
            caches: Mutex::default(),
            groups: Mutex::default(),
            done: Mutex::default(),
        }));
        assert!(!driver.caches_local());
        (whole, driver)
    }

    /// Several sequences in one forward (micro-batches), each after a history of its own fed
    /// under its key, then one cut back (a rejected draft): the logits are the whole model's.
    #[test]
    fn pipelined_forwards_give_the_same_bits() {
        for (family, places) in [("qwen3_moe", 3), ("llama", 2), ("qwen3_next", 4)] {
            let (whole, driver) = split(family, places);
            let hist: [&[usize]; 3] = [&[5, 9, 2, 7], &[1], &[3, 3, 8, 8, 4, 11]];
            let new: [&[usize]; 3] = [&[6, 1], &[40, 41, 42], &[9]];
            let run = |d: &Decoder, cut: usize| {
                let mut caches: Vec<Vec<KvCache>> = (0..3).map(|_| d.new_caches()).collect();
                let mut out = Vec::new();
                for (k, c) in caches.iter_mut().enumerate() {
                    let mut seq = [SeqBatch {
                        tokens: hist[k],
                        pos: 0,
                        caches: c,
                        first_logit_row: 0,
                        key: k as u64,
                        tree: None,
                    }];
                    d.forward_multi(&mut seq, &mut out);
                }
                let mut seqs: Vec<SeqBatch<'_>> = caches
                    .iter_mut()
                    .enumerate()
                    .map(|(k, c)| SeqBatch {
                        tokens: new[k],
                        pos: hist[k].len() - if k == 2 { cut } else { 0 },
                        caches: c,
                        first_logit_row: 0,
                        key: k as u64,
                        tree: None,
                    })
                    .collect();
                d.forward_multi(&mut seqs, &mut out);
                out
            };
            for cut in [0, 2] {
                let want = run(&whole, cut);
                assert!(
                    run(&driver, cut) == want,
                    "{family} over {places}, cut {cut}"
                );
            }
        }
    }

    /// Speculative greedy decoding (every round drafts; rejected drafts cut the caches,
    /// which the other places follow) gives the whole model's tokens.
    #[test]
    fn pipelined_speculative_decoding_gives_the_same_tokens() {
        use crate::speculative::{speculative_decode, PromptLookupSpeculator};
        let (whole, driver) = split("glm4_moe", 3);
        let prompt = [7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 9, 10, 7, 8];
        let spec = PromptLookupSpeculator::new(2, 4);
        let go = |d: &Decoder| {
            let mut caches = d.new_caches();
            speculative_decode(d, &prompt, 24, &mut caches, &spec)
        };
        let (want, got) = (go(&whole), go(&driver));
        assert_eq!(got.generated_tokens, want.generated_tokens);
        assert!(want.forward_calls < 25, "some draft was verified");
    }
}
