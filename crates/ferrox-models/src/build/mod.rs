//! The one builder: a [`LayerPlan`] per layer, derived from the `ModelConfig`, says which blocks
//! the layer runs; [`build`] binds the architecture's tensor table and assembles the decoder
//! from the plans. Every family goes through here; a family's differences are config values
//! and table rows, not code paths (compare llama.cpp's `llm_build_*` graphs over one
//! `llama_layer` struct).

use crate::arch::tables::{ExpertNames, GLOBAL};
use crate::arch::Architecture;
use crate::blocks::attention::{QkNorm, QkvBias};
use crate::blocks::deltanet::{DeltaNetWeights, GatedDeltaNet, QkvzProj};
use crate::blocks::dsa::Indexer;
use crate::blocks::mla::{KvB, Mla, MlaWeights};
use crate::blocks::mlp::MlpBiases;
use crate::blocks::moe::{MoeBlock, Routing};
use crate::blocks::{AttentionBlock, FfnBlock, GatedMlp, RmsNorm, Rope, StandardAttention};
use crate::config::{IndexerKind, ModelConfig, NormKind, RopeConfig, RopeScaling};
use crate::decoder::{Decoder, Layer};
use crate::distributed::Share;
pub use crate::weights::{resolver, split_rows, split_rows_at};
mod experts;
mod mtp;
mod plan;
pub use experts::build_experts;
pub use mtp::DraftHead;
pub use plan::{AttnPlan, FfnPlan, GqaPlan, LayerPlan};

use crate::weights::{Bound, LoadError, Naming, WeightSource};
use ferrox_core::matmul::WeightMatrix;

/// Builds `arch`'s decoder for `cfg` from `src`.
pub fn build(
    arch: &Architecture,
    cfg: ModelConfig,
    src: &dyn WeightSource,
) -> Result<Decoder, LoadError> {
    build_share(arch, cfg, src, &Share::whole())
}

/// [`build`] keeping only `share` resident: only the layers it names are built (the decoder's
/// `layers` are then that range); routed experts this place does not own, and the embedding
/// and LM head off the driver, stay unread views of the file instead of repacked copies.
pub fn build_share(
    arch: &Architecture,
    cfg: ModelConfig,
    src: &dyn WeightSource,
    share: &Share,
) -> Result<Decoder, LoadError> {
    build_with_head(arch, cfg, src, share, None)
}

/// [`build_share`]; a model that carries no MTP block of its own takes `draft_head` (one
/// trained for it) as its block, when the whole model is here.
pub fn build_with_head(
    arch: &Architecture,
    cfg: ModelConfig,
    src: &dyn WeightSource,
    share: &Share,
    draft_head: Option<DraftHead<'_>>,
) -> Result<Decoder, LoadError> {
    let table = (arch.tensors)(&cfg);
    let b = Bound::bind(src, &resolver(&cfg), cfg.n_layers, GLOBAL, &table)?;
    // The config's factors (Hub LongRoPE), else the file's: llama.cpp's `rope_freqs` (Llama
    // 3.x) or LongRoPE's `rope_factors_short` / `rope_factors_long` (Phi-3).
    let factors = |own: &Option<Vec<f32>>, stored: &[&str]| {
        if own.is_some() {
            return Ok(own.clone());
        }
        for name in stored {
            if let Some(f) = b.opt_vector(name)? {
                return Ok(Some(f));
            }
        }
        Ok::<_, LoadError>(None)
    };
    let parts = Parts {
        cfg: &cfg,
        b: &b,
        src,
        experts: &arch.hf_experts,
        rope_factors: factors(
            &cfg.rope_freq_factors,
            &["rope_freqs.weight", "rope_factors_short.weight"],
        )?,
        rope_long: factors(&cfg.rope_long_factors, &["rope_factors_long.weight"])?,
        share,
    };
    // A tied table serves both lookups and the lm_head product, so it takes the product's
    // layout; a separate one stays zero-copy (only the looked-up rows are ever read).
    let head = |name: &str| match share.driver {
        true => b.matrix(name),
        false => b.plain_matrix(name),
    };
    let (embed, lm_head) = match b.get("output.weight") {
        Some(_) => (b.plain_matrix("token_embd.weight")?, head("output.weight")?),
        None if cfg.tie_embeddings => {
            let m = head("token_embd.weight")?;
            (m.clone(), m)
        }
        None => return Err(LoadError::MissingTensor("output.weight".into())),
    };
    b.release_pages();
    let range = share.layers.clone().unwrap_or(0..cfg.n_layers);
    if range.end > cfg.n_layers {
        return Err(LoadError::Config(format!(
            "layers {range:?} of a {}-layer model",
            cfg.n_layers
        )));
    }
    let mut layers = Vec::with_capacity(range.len());
    for l in range {
        b.release_pages();
        layers.push(parts.layer(l, &LayerPlan::of(&cfg, l))?);
    }
    let output_norm = parts.norm("output_norm.weight")?;
    // The MTP block drafts for the whole model: only a process that runs all of it keeps one.
    let whole = share.layers.is_none() && share.experts.is_none() && share.driver;
    let mtp = match whole {
        true => match parts.mtp(&table, &arch.mtp)? {
            Some(own) => Some(own),
            None => draft_head
                .map(|h| parts.draft_head(&table, &arch.mtp, h))
                .transpose()?,
        },
        false => None,
    };
    let mut decoder = Decoder::from_parts(cfg, embed, layers, output_norm, lm_head);
    decoder.mtp = mtp;
    Ok(decoder)
}

/// What building one layer reads from.
struct Parts<'a> {
    cfg: &'a ModelConfig,
    b: &'a Bound,
    src: &'a dyn WeightSource,
    experts: &'a ExpertNames,
    /// Per-pair RoPE frequency divisors: the config's (LongRoPE short) or the file's.
    rope_factors: Option<Vec<f32>>,
    /// LongRoPE's long factors, from `RopeScaling::Factors::original_max_position` on.
    rope_long: Option<Vec<f32>>,
    /// What this place keeps resident.
    share: &'a Share,
}

impl Parts<'_> {
    fn norm(&self, name: &str) -> Result<RmsNorm, LoadError> {
        let offset = self.cfg.norm == NormKind::RmsOffsetOne;
        Ok(RmsNorm::new(
            self.b.vector(name)?,
            self.cfg.norm_eps,
            offset,
        ))
    }

    /// The layer's RoPE, with llama.cpp's per-pair frequency factors when the file has them
    /// and LongRoPE's two sets when the scaling says so.
    fn rope(&self, cfg: &RopeConfig) -> Result<Rope, LoadError> {
        let mut rope = Rope::new(cfg);
        if cfg.rotary_dim == 0 {
            return Ok(rope);
        }
        let mismatch = |name: &str, n: usize| LoadError::Tensor {
            name: name.into(),
            msg: format!("{n} factors for {} rotated pairs", cfg.rotary_dim / 2),
        };
        if let RopeScaling::Factors {
            original_max_position,
            ..
        } = cfg.scaling
        {
            let (Some(_), Some(long)) = (&self.rope_factors, self.rope_long.as_deref()) else {
                // Only a GGUF can lack one (the Hub reader requires both sets).
                let name = match self.rope_factors {
                    None => "rope_factors_short.weight",
                    Some(_) => "rope_factors_long.weight",
                };
                return Err(LoadError::MissingTensor(name.into()));
            };
            // Both sets divide the unscaled frequencies: the long one is taken first.
            rope = rope
                .with_long_factors(long, original_max_position)
                .ok_or_else(|| mismatch("rope_factors_long.weight", long.len()))?;
        }
        match self.rope_factors.as_deref() {
            Some(f) => rope
                .with_freq_factors(f)
                .ok_or_else(|| mismatch("rope_freqs.weight", f.len())),
            None => Ok(rope),
        }
    }

    fn layer(&self, l: usize, plan: &LayerPlan) -> Result<Layer, LoadError> {
        let n = |s: &str| format!("blk.{l}.{s}");
        let attn: Box<dyn AttentionBlock> = match plan.attn {
            AttnPlan::Gqa(p) => Box::new(self.gqa(l, &p)?),
            AttnPlan::Linear => Box::new(self.deltanet(l)?),
            AttnPlan::Mla { indexer } => Box::new(self.mla(l, indexer)?),
        };
        let ffn: Box<dyn FfnBlock> = match plan.ffn {
            FfnPlan::Dense => Box::new(self.dense_mlp(l)?),
            FfnPlan::Moe => Box::new(self.moe(l)?),
        };
        let (post_attn_norm, post_ffn_norm) = if plan.post_norms {
            (
                Some(self.norm(&n("post_attention_norm.weight"))?),
                Some(self.norm(&n("post_ffw_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        Ok(Layer {
            attn_norm: self.norm(&n("attn_norm.weight"))?,
            attn,
            post_attn_norm,
            ffn_norm: self.norm(&n("ffn_norm.weight"))?,
            ffn,
            post_ffn_norm,
        })
    }

    fn gqa(&self, l: usize, p: &GqaPlan) -> Result<StandardAttention, LoadError> {
        let (cfg, b) = (self.cfg, self.b);
        let n = |s: &str| format!("blk.{l}.{s}");
        let [wq, wk, wv] = self.qkv(l)?;
        let mut a = StandardAttention::new(
            wq,
            wk,
            wv,
            b.matrix(&n("attn_output.weight"))?,
            cfg.n_heads,
            cfg.n_kv_heads,
            cfg.head_dim,
            self.rope(&p.rope)?,
        );
        if p.qkv_bias {
            a.qkv_bias = Some(QkvBias {
                q: b.vector(&n("attn_q.bias"))?,
                k: b.vector(&n("attn_k.bias"))?,
                v: b.vector(&n("attn_v.bias"))?,
            });
        }
        if p.qk_norm {
            a.qk_norm = Some(QkNorm {
                q: self.norm(&n("attn_q_norm.weight"))?,
                k: self.norm(&n("attn_k_norm.weight"))?,
            });
        }
        if p.o_bias {
            a.bo = Some(b.vector(&n("attn_output.bias"))?);
        }
        if p.sinks {
            a.logits.sinks = Some(b.vector(&n("attn_sinks.weight"))?);
        }
        if let Some(s) = cfg.attn_scale {
            a.logits.scale = s;
        }
        a.logits.softcap = cfg.attn_logit_softcap;
        a.window = p.window;
        a.output_gate = p.output_gate;
        Ok(a)
    }

    /// Gated DeltaNet: the Hub's grouped `in_proj_qkvz` (llama.cpp's legacy `ssm_in`) or
    /// llama.cpp's `attn_qkv` + `attn_gate`; `ssm_a` is `A_log` on the Hub and `-exp(A_log)` in
    /// GGUF files.
    fn deltanet(&self, l: usize) -> Result<GatedDeltaNet, LoadError> {
        let (cfg, b) = (self.cfg, self.b);
        let n = |s: &str| format!("blk.{l}.{s}");
        let dims = cfg.linear.ok_or_else(|| {
            LoadError::Config(format!(
                "layer {l} is linear attention but the config gives no linear-attention sizes"
            ))
        })?;
        let proj = match (b.get(&n("attn_qkv.weight")), b.get(&n("attn_gate.weight"))) {
            (Some(qkv), Some(z)) => QkvzProj::Split {
                qkv: qkv.matrix()?,
                z: z.matrix()?,
            },
            (Some(_), None) => return Err(b.missing(&n("attn_gate.weight"))),
            _ => QkvzProj::Grouped(b.matrix(&n("ssm_in.weight"))?),
        };
        let mut a = b.vector(&n("ssm_a"))?;
        if self.src.naming() == Naming::HuggingFace {
            a.iter_mut().for_each(|v| *v = -v.exp());
        }
        let w = DeltaNetWeights {
            proj,
            ba: b.matrix(&n("ssm_ba.weight"))?,
            conv: b.vector(&n("ssm_conv1d.weight"))?,
            dt_bias: b.vector(&n("ssm_dt.bias"))?,
            a,
            norm: b.vector(&n("ssm_norm.weight"))?,
            out: b.matrix(&n("ssm_out.weight"))?,
        };
        Ok(GatedDeltaNet::new(dims, cfg.norm_eps, w))
    }

    /// Q, K and V projections: separate, or one fused `[q; k; v]` matrix (Phi-3).
    fn qkv(&self, l: usize) -> Result<[WeightMatrix; 3], LoadError> {
        let (cfg, b) = (self.cfg, self.b);
        let n = |s: &str| format!("blk.{l}.{s}");
        if let Some(fused) = b.get(&n("attn_qkv.weight")) {
            let (q, kv) = (cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim);
            let mut parts = split_rows_at(fused, &[q, kv, kv])?.into_iter();
            if let (Some(q), Some(k), Some(v)) = (parts.next(), parts.next(), parts.next()) {
                return Ok([q, k, v]);
            }
        }
        Ok([
            b.matrix(&n("attn_q.weight"))?,
            b.matrix(&n("attn_k.weight"))?,
            b.matrix(&n("attn_v.weight"))?,
        ])
    }

    /// Gated MLP: separate gate/up, or one fused `[2·ffn, hidden]` up (gate rows first).
    fn dense_mlp(&self, l: usize) -> Result<GatedMlp, LoadError> {
        let b = self.b;
        let n = |s: &str| format!("blk.{l}.{s}");
        let down = b.matrix(&n("ffn_down.weight"))?;
        let (gate, up) = if b.has(&n("ffn_gate.weight")) {
            (
                b.matrix(&n("ffn_gate.weight"))?,
                b.matrix(&n("ffn_up.weight"))?,
            )
        } else if let Some(fused) = b.get(&n("ffn_up.weight")) {
            let mut parts = split_rows(fused, 2)?.into_iter();
            (parts.next().unwrap(), parts.next().unwrap())
        } else {
            return Err(b.missing(&n("ffn_gate.weight")));
        };
        // The projections must chain (a lone `ffn_up` read as fused gate/up has half the
        // height `ffn_down` takes): otherwise the first token would fail, not the load.
        let (h, f) = (self.cfg.hidden_dim, gate.rows());
        let fits = (gate.cols(), up.cols(), up.rows()) == (h, h, f)
            && (down.rows(), down.cols()) == (h, f);
        if !fits {
            return Err(LoadError::Tensor {
                name: n("ffn_up.weight"),
                msg: format!(
                    "gate {}x{}, up {}x{} and down {}x{} do not make a feed-forward of width {h}",
                    gate.rows(),
                    gate.cols(),
                    up.rows(),
                    up.cols(),
                    down.rows(),
                    down.cols()
                ),
            });
        }
        Ok(GatedMlp::new(gate, up, down, self.cfg.activation))
    }

    fn mla(&self, l: usize, indexer: Option<IndexerKind>) -> Result<Mla, LoadError> {
        let (cfg, b) = (self.cfg, self.b);
        let n = |s: &str| format!("blk.{l}.{s}");
        let m = cfg
            .mla
            .ok_or_else(|| LoadError::Config("MLA layer without an MLA config".into()))?;
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
        let indexer = match (indexer, &cfg.dsa) {
            (Some(IndexerKind::Full), Some(dsa)) => Some(Indexer {
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
}
