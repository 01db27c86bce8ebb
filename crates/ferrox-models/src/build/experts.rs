//! The feed-forward blocks with experts: routed experts stacked in one tensor per projection
//! (every GGUF, some Hub checkpoints) or one tensor per expert (most Hub checkpoints), their
//! biases (gpt-oss), shared experts and the router.

use super::*;
use crate::distributed::ExpertSplit;

/// The MoE layers' routed experts alone, for a place that only serves its share of them
/// (expert parallelism, off the driver): per layer its block without the shared expert (the
/// router is left an unread view), `None` for other layers. Only the owned experts are
/// repacked; the rest stay unread views of the file.
pub fn build_experts(
    arch: &Architecture,
    cfg: &ModelConfig,
    src: &dyn WeightSource,
    split: &ExpertSplit,
) -> Result<Vec<Option<MoeBlock>>, LoadError> {
    let table = (arch.tensors)(cfg);
    let b = Bound::bind(src, &resolver(cfg), cfg.n_layers, GLOBAL, &table)?;
    let share = Share {
        experts: Some(split.clone()),
        layers: None,
        driver: false,
    };
    let parts = Parts {
        cfg,
        b: &b,
        src,
        experts: &arch.hf_experts,
        rope_factors: None,
        rope_long: None,
        share: &share,
    };
    (0..cfg.n_layers)
        .map(|l| {
            b.release_pages();
            match LayerPlan::of(cfg, l).ffn {
                FfnPlan::Moe => parts.moe_block(l, true).map(Some),
                FfnPlan::Dense => Ok(None),
            }
        })
        .collect()
}

impl Parts<'_> {
    pub(super) fn moe(&self, l: usize) -> Result<MoeBlock, LoadError> {
        self.moe_block(l, false)
    }

    /// The layer's MoE block; `routed_only`: without the shared expert, the router an unread
    /// view (a place that runs routed experts for the driver).
    fn moe_block(&self, l: usize, routed_only: bool) -> Result<MoeBlock, LoadError> {
        let (cfg, b) = (self.cfg, self.b);
        let n = |s: &str| format!("blk.{l}.{s}");
        let m = &cfg.moe;
        // Experts stacked in one tensor per projection (every GGUF, some Hub checkpoints) or
        // one tensor per expert (most Hub checkpoints).
        let stacked = ["ffn_gate_up_exps.weight", "ffn_gate_exps.weight"]
            .iter()
            .any(|s| b.has(&n(s)));
        let experts = if stacked || self.src.naming() == Naming::Gguf {
            self.stacked_experts(l)?
        } else {
            self.hf_experts(l)?
        };
        let shared = if m.n_shared_experts > 0 && !routed_only {
            Some(GatedMlp::new(
                b.matrix(&n("ffn_gate_shexp.weight"))?,
                b.matrix(&n("ffn_up_shexp.weight"))?,
                b.matrix(&n("ffn_down_shexp.weight"))?,
                cfg.activation,
            ))
        } else {
            None
        };
        let router = match routed_only {
            true => b.plain_matrix(&n("ffn_gate_inp.weight"))?,
            false => b.matrix(&n("ffn_gate_inp.weight"))?,
        };
        Ok(MoeBlock {
            router: Some(router),
            router_bias: if m.biases {
                Some(b.vector(&n("ffn_gate_inp.bias"))?)
            } else {
                None
            },
            correction_bias: if m.has_correction_bias {
                Some(b.vector(&n("exp_probs_b.bias"))?)
            } else {
                None
            },
            experts,
            shared,
            shared_gate: if m.shared_expert_gate && !routed_only {
                Some(b.flat_matrix(&n("ffn_gate_inp_shexp.weight"))?)
            } else {
                None
            },
            routing: Routing::from_config(m),
            remote: None,
            scratch: Default::default(),
        })
    }

    /// Experts stacked in one tensor per projection (or llama.cpp's fused gate/up stack:
    /// per expert, the gate rows then the up rows).
    fn stacked_experts(&self, l: usize) -> Result<Vec<GatedMlp>, LoadError> {
        let b = self.b;
        let n = |s: &str| format!("blk.{l}.{s}");
        let e = self.cfg.moe.n_experts;
        let get = |s: &str| b.must(&n(s));
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
        let mut biases = self.expert_biases(l)?.into_iter();
        Ok(g.into_iter()
            .zip(u)
            .zip(dn)
            .enumerate()
            .map(|(i, ((g, u), dn))| {
                // Each expert is repacked on its own (where the kernels have an interleaved
                // layout), so a token still reads only its experts' bytes; an expert another
                // place runs stays an unread view of the file, so it never becomes resident.
                let (g, u, dn) = match self.share.keeps_expert(l, e, i) {
                    true => (g.interleave(), u.interleave(), dn.interleave()),
                    false => (g, u, dn),
                };
                let mut mlp = GatedMlp::new(g, u, dn, self.cfg.activation);
                mlp.biases = biases.next();
                mlp
            })
            .collect())
    }

    /// Per expert, the biases of its gate, up and down projections (gpt-oss), from separate
    /// stacks or one fused gate/up stack (per expert the gate biases, then the up biases);
    /// empty when the config has none.
    fn expert_biases(&self, l: usize) -> Result<Vec<MlpBiases>, LoadError> {
        let (cfg, b) = (self.cfg, self.b);
        if !cfg.moe.biases {
            return Ok(Vec::new());
        }
        let n = |s: &str| format!("blk.{l}.{s}");
        let (e, f) = (cfg.moe.n_experts, cfg.moe.expert_ffn_dim);
        let (gate, up) = match b.opt_vector(&n("ffn_gate_up_exps.bias"))? {
            Some(gu) => {
                let (g, u): (Vec<_>, Vec<_>) =
                    gu.chunks(f).enumerate().partition(|(i, _)| i % 2 == 0);
                let flat =
                    |v: Vec<(usize, &[f32])>| v.into_iter().flat_map(|(_, r)| r.to_vec()).collect();
                (flat(g), flat(u))
            }
            None => (
                b.vector(&n("ffn_gate_exps.bias"))?,
                b.vector(&n("ffn_up_exps.bias"))?,
            ),
        };
        let down = b.vector(&n("ffn_down_exps.bias"))?;
        let d = cfg.hidden_dim;
        Ok((0..e)
            .map(|i| MlpBiases {
                gate: gate[i * f..(i + 1) * f].to_vec(),
                up: up[i * f..(i + 1) * f].to_vec(),
                down: down[i * d..(i + 1) * d].to_vec(),
            })
            .collect())
    }

    /// One tensor per expert and projection, under the family's Hub names.
    fn hf_experts(&self, l: usize) -> Result<Vec<GatedMlp>, LoadError> {
        let cfg = self.cfg;
        let (d, f) = (cfg.hidden_dim, cfg.moe.expert_ffn_dim);
        let hf = self.experts;
        let mut biases = self.expert_biases(l)?.into_iter();
        let e = cfg.moe.n_experts;
        (0..e)
            .map(|i| {
                let keep = self.share.keeps_expert(l, e, i);
                let mut mlp = GatedMlp::new(
                    hf_expert(self.src, hf.gate, l, i, [f, d], keep)?,
                    hf_expert(self.src, hf.up, l, i, [f, d], keep)?,
                    hf_expert(self.src, hf.down, l, i, [d, f], keep)?,
                    cfg.activation,
                );
                mlp.biases = biases.next();
                Ok(mlp)
            })
            .collect()
    }
}

fn hf_expert(
    src: &dyn WeightSource,
    pattern: &str,
    l: usize,
    e: usize,
    shape: [usize; 2],
    keep: bool,
) -> Result<WeightMatrix, LoadError> {
    let name = pattern
        .replace("{}", &l.to_string())
        .replace("{e}", &e.to_string());
    let t = src
        .tensor(&name)
        .ok_or(LoadError::MissingTensor(name.clone()))?;
    t.check_kernel()?;
    if t.shape != shape {
        return Err(LoadError::Shape {
            name,
            got: t.shape.clone(),
            expected: shape.to_vec(),
        });
    }
    match keep {
        true => t.matrix(),
        false => t.plain_matrix(),
    }
}
