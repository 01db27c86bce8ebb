//! Typed reading of llama.cpp GGUF metadata (`{arch}.*` keys, named by the rows of
//! [`super::keys`]): the fields every family shares and the expert section several share. Each
//! architecture file starts from [`GgufMeta::base`] and applies what llama.cpp's
//! `src/models/*.cpp` `load_arch_hparams` and `convert_hf_to_gguf.py` say of it:
//! - `rope.scaling.yarn_log_multiplier` is `0.1 · mscale_all_dim` for DeepSeek (the converter's
//!   factor is divided back out, as llama.cpp does). GGUF does not keep `mscale` itself;
//!   llama.cpp computes as if `mscale == mscale_all_dim` (true of DeepSeek-V3), and so do we.
//! - `block_count` counts appended NextN/MTP blocks (`nextn_predict_layers`); they are skipped.
//! - Which layers are MoE: `leading_dense_block_count` when written, otherwise the layers that
//!   carry a router (`ffn_gate_inp`).
//! - LongRoPE (Phi-3's `Phi3MiniModel.generate_extra_tensors`) is written without a scaling
//!   type: the `rope_factors_short` / `rope_factors_long` tensors, `rope.scaling.attn_factor`
//!   (the cos/sin scale, 1 when absent as in llama.cpp) and
//!   `rope.scaling.original_context_length` (where the long factors take over; required).
//!
//! MLA and the DSA indexer are read by `common_deepseek`.

use super::early;
use super::keys::{self, Key, MAX_VALUE};
use crate::config::{Dims, ModelConfig, MoeConfig, RopeConfig, RopeScaling, RouterScoring};
use crate::weights::LoadError;
use ferrox_format::gguf::{GgufFile, MetaArray, MetaValue};
use std::sync::Arc;

/// A metadata value in an error message: its type, and the value when it is short.
fn describe(v: &MetaValue) -> String {
    match v {
        MetaValue::Array(a) => format!("an array of {}", a.elem_type().name()),
        MetaValue::String(s) if s.len() > 40 => "a string".into(),
        MetaValue::String(s) => format!("the string {s:?}"),
        other => {
            let val = match other {
                MetaValue::Bool(b) => b.to_string(),
                o => o
                    .as_i64()
                    .map(|i| i.to_string())
                    .or_else(|| o.as_u64().map(|u| u.to_string()))
                    .or_else(|| o.as_f32().map(|f| f.to_string()))
                    .unwrap_or_default(),
            };
            format!("{} {val}", other.meta_type().name())
        }
    }
}

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*`.
pub const GATING_SOFTMAX: usize = 1;
pub const GATING_SIGMOID: usize = 2;

/// GGUF metadata with the `{arch}.` prefix handled.
pub struct GgufMeta {
    pub file: Arc<GgufFile>,
}

/// What an MoE family's GGUF means when a key is absent.
#[derive(Debug, Clone, Copy)]
pub struct MoeDefaults {
    /// `expert_gating_func` when not written.
    pub gating: usize,
    /// Selected weights always renormalised (the family ignores `expert_weights_norm`).
    pub always_norm: bool,
    /// Experts as wide as `feed_forward_length` when `expert_feed_forward_length` is absent.
    pub ffn_is_expert_ffn: bool,
}

impl MoeDefaults {
    /// `gating` when `expert_gating_func` is not written; weights renormalised only as
    /// `expert_weights_norm` says; expert width from `expert_feed_forward_length`.
    pub const fn gating(gating: usize) -> Self {
        MoeDefaults {
            gating,
            always_norm: false,
            ffn_is_expert_ffn: false,
        }
    }
    /// The family always renormalises the selected weights.
    pub const fn renormalised(mut self) -> Self {
        self.always_norm = true;
        self
    }
    /// Experts as wide as `feed_forward_length` says when their own key is absent.
    pub const fn expert_ffn_from_ffn(mut self) -> Self {
        self.ffn_is_expert_ffn = true;
        self
    }
}

/// The whole GGUF reader of a family that is the base config alone (`INTERLEAVED`: as
/// [`GgufMeta::base`]'s `interleaved`, a const parameter so that a family names its reader as
/// data: `base_only::<true>`).
pub fn base_only<const INTERLEAVED: bool>(
    g: &GgufMeta,
    arch: &'static str,
) -> Result<ModelConfig, LoadError> {
    g.base(arch, INTERLEAVED)
}

impl GgufMeta {
    /// A GQA family that may have experts: the base config, `sliding_all`, the optional
    /// attention tensors and the expert section.
    pub fn gqa_moe(
        &self,
        arch: &'static str,
        interleaved: bool,
        d: MoeDefaults,
    ) -> Result<ModelConfig, LoadError> {
        let mut cfg = self.base(arch, interleaved)?;
        self.sliding_all(&mut cfg)?;
        self.optional_attention_tensors(&mut cfg);
        self.moe(&mut cfg, d)?;
        Ok(cfg)
    }

    pub fn arch(&self) -> &str {
        self.file.architecture().unwrap_or_default()
    }
    /// The full name of key `k`: `{arch}.{k}`.
    pub fn key(&self, k: &Key) -> String {
        k.gguf_key(self.arch())
    }
    /// The error for key `k` (`{arch}.{k}`) holding a value that cannot be used.
    pub fn bad(&self, k: &Key, problem: impl std::fmt::Display) -> LoadError {
        LoadError::Value {
            key: self.key(k),
            problem: problem.to_string(),
        }
    }
    pub fn value(&self, k: &Key) -> Option<&MetaValue> {
        self.file.get(&self.key(k))
    }
    /// The array at key `k`, when it holds one.
    fn array(&self, k: &Key) -> Option<&MetaArray> {
        self.file.get_array(&self.key(k))
    }
    /// A per-layer flag array at key `k` (llama.cpp writes bools or integers, nonzero = set):
    /// None when absent; an error naming `k` when an entry is neither or the array does not
    /// hold one entry per layer.
    pub fn layer_flags(&self, k: &Key, n_layers: usize) -> Result<Option<Vec<bool>>, LoadError> {
        let Some(arr) = self.array(k) else {
            return Ok(None);
        };
        if arr.len() != n_layers {
            return Err(self.bad(
                k,
                format!("has {} entries for {n_layers} layers", arr.len()),
            ));
        }
        let flags = arr.iter().map(|v| match v {
            MetaValue::Bool(b) => Some(b),
            other => other.as_u64().map(|x| x != 0),
        });
        let flags = flags.collect::<Option<Vec<bool>>>();
        flags
            .map(Some)
            .ok_or_else(|| self.bad(k, "is not a bool or integer array"))
    }
    /// Whether key `k` holds a positive count: what a registry claim tests (a malformed value
    /// counts as absent; the config reader then names it).
    pub fn has(&self, k: &Key) -> bool {
        self.opt_usize(k).ok().flatten().unwrap_or(0) > 0
    }
    pub fn usize(&self, k: &Key) -> Result<usize, LoadError> {
        self.opt_usize(k)?.ok_or_else(|| self.bad(k, "is missing"))
    }
    /// An integer key; any other type, a negative value or one beyond [`MAX_VALUE`] is an
    /// error naming it (never a silent default).
    pub fn opt_usize(&self, k: &Key) -> Result<Option<usize>, LoadError> {
        let Some(v) = self.value(k) else {
            return Ok(None);
        };
        match v.as_u64() {
            Some(x) if x <= MAX_VALUE => Ok(Some(x as usize)),
            Some(x) => Err(self.bad(k, format!("= {x} is out of range (at most {MAX_VALUE})"))),
            None => Err(self.bad(k, format!("is {}, not a count", describe(v)))),
        }
    }
    pub fn f32(&self, k: &Key) -> Result<f32, LoadError> {
        self.opt_f32(k)?.ok_or_else(|| self.bad(k, "is missing"))
    }
    /// A float key. A whole number stored as an integer means that number (hand-written and
    /// some converted files do this); other types and non-finite values are errors.
    pub fn opt_f32(&self, k: &Key) -> Result<Option<f32>, LoadError> {
        let Some(v) = self.value(k) else {
            return Ok(None);
        };
        let x = v
            .as_f32()
            .or_else(|| v.as_i64().map(|i| i as f32))
            .or_else(|| v.as_u64().map(|u| u as f32))
            .ok_or_else(|| self.bad(k, format!("is {}, not a number", describe(v))))?;
        if !x.is_finite() {
            return Err(self.bad(k, format!("= {x} is not finite")));
        }
        Ok(Some(x))
    }
    pub fn opt_str(&self, k: &Key) -> Result<Option<&str>, LoadError> {
        self.value(k)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| self.bad(k, format!("is {}, not a string", describe(v))))
            })
            .transpose()
    }
    pub fn opt_bool(&self, k: &Key) -> Result<Option<bool>, LoadError> {
        self.value(k)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| self.bad(k, format!("is {}, not a bool", describe(v))))
            })
            .transpose()
    }
    /// Rows of a stored tensor (vocabulary size from `token_embd`).
    pub fn tensor_rows(&self, name: &str) -> Option<usize> {
        self.file
            .tensor(name)
            .and_then(|t| t.dims.get(1))
            .map(|&d| d as usize)
    }
    /// Whether `name` is stored in any layer (`{}` = layer index).
    pub fn any_layer(&self, n_layers: usize, name: &str) -> bool {
        (0..n_layers).any(|l| {
            self.file
                .tensor(&name.replace("{}", &l.to_string()))
                .is_some()
        })
    }

    /// Dimensions (without appended MTP blocks), norm epsilon, context, embedding tying,
    /// soft-caps and RoPE (`interleaved`: adjacent pairs, llama.cpp's `LLAMA_ROPE_TYPE_NORM`).
    /// Only what is needed to build the config is checked here (the layer count, before the
    /// per-layer lists are allocated; a head count that divides); `crate::validate` checks
    /// the whole config.
    pub fn base(&self, arch: &'static str, interleaved: bool) -> Result<ModelConfig, LoadError> {
        let hidden = self.usize(&keys::HIDDEN)?;
        let blocks = early::layer_count(self.usize(&keys::LAYERS)?)
            .map_err(|e| self.bad(&keys::LAYERS, e))?;
        let nextn = self.opt_usize(&keys::NEXTN_LAYERS)?.unwrap_or(0);
        if nextn >= blocks {
            return Err(self.bad(
                &keys::NEXTN_LAYERS,
                format!("= {nextn} leaves none of {blocks} blocks for the decoder"),
            ));
        }
        let n_heads =
            early::head_count(self.usize(&keys::HEADS)?).map_err(|e| self.bad(&keys::HEADS, e))?;
        let head_dim = self.opt_usize(&keys::HEAD_DIM)?.unwrap_or(hidden / n_heads);
        let dims = Dims {
            vocab: self
                .tensor_rows(keys::VOCAB.gguf)
                .ok_or_else(|| LoadError::MissingTensor(keys::VOCAB.gguf.into()))?,
            hidden,
            n_layers: blocks - nextn,
            n_heads,
            n_kv_heads: self.opt_usize(&keys::KV_HEADS)?.unwrap_or(n_heads),
            head_dim,
            ffn_dim: self.usize(&keys::FFN)?,
        };
        let rope = RopeConfig {
            theta: self.opt_f32(&keys::ROPE_THETA)?.unwrap_or(10_000.0),
            scaling: self.rope_scaling()?,
            rotary_dim: self.opt_usize(&keys::ROTARY_DIM)?.unwrap_or(head_dim),
            interleaved,
        };
        let mut cfg = ModelConfig::new(arch, dims, rope);
        cfg.mtp_layers = nextn;
        cfg.max_seq_len = self.opt_usize(&keys::CONTEXT)?.unwrap_or(4096);
        cfg.norm_eps = self.opt_f32(&keys::NORM_EPS)?.unwrap_or(1e-6);
        cfg.tie_embeddings = self.file.tensor("output.weight").is_none();
        cfg.final_logit_softcap = self.opt_f32(&keys::FINAL_SOFTCAP)?;
        cfg.attn_logit_softcap = self.opt_f32(&keys::ATTN_SOFTCAP)?;
        Ok(cfg)
    }

    fn rope_scaling(&self) -> Result<RopeScaling, LoadError> {
        let factor = self.opt_f32(&keys::ROPE_FACTOR)?;
        let longrope = ["rope_factors_short.weight", "rope_factors_long.weight"]
            .iter()
            .any(|t| self.file.tensor(t).is_some());
        Ok(match (self.opt_str(&keys::ROPE_TYPE)?, factor) {
            (None | Some("none" | "longrope"), _) if longrope => RopeScaling::Factors {
                attn_factor: self.opt_f32(&keys::ROPE_ATTN_FACTOR)?.unwrap_or(1.0),
                original_max_position: self.usize(&keys::ROPE_ORIGINAL_CONTEXT)?,
            },
            (Some("longrope"), _) => {
                return Err(LoadError::MissingTensor("rope_factors_short.weight".into()))
            }
            (None | Some("none"), _) => RopeScaling::None,
            (Some("linear"), Some(f)) if f != 1.0 => RopeScaling::Linear { factor: f },
            (Some("linear"), _) => RopeScaling::None,
            (Some("yarn"), Some(f)) => {
                let all_dim = self.opt_f32(&keys::YARN_MSCALE_ALL_DIM)?.unwrap_or(0.0) / 0.1;
                RopeScaling::Yarn {
                    factor: f,
                    original_max_position: self.usize(&keys::ROPE_ORIGINAL_CONTEXT)?,
                    beta_fast: self.opt_f32(&keys::YARN_BETA_FAST)?.unwrap_or(32.0),
                    beta_slow: self.opt_f32(&keys::YARN_BETA_SLOW)?.unwrap_or(1.0),
                    mscale: all_dim,
                    mscale_all_dim: all_dim,
                    // llama.cpp always rounds the ramp bounds (`ggml_rope_yarn_corr_dims`).
                    truncate: true,
                }
            }
            (Some("yarn"), None) => return Err(self.bad(&keys::ROPE_FACTOR, "is missing")),
            (Some(other), _) => {
                return Err(self.bad(
                    &keys::ROPE_TYPE,
                    format!("`{other}` is not a supported scaling"),
                ))
            }
        })
    }

    /// `attention.sliding_window`, when written, on every layer (Mistral-style).
    pub fn sliding_all(&self, cfg: &mut ModelConfig) -> Result<(), LoadError> {
        cfg.sliding_window = self.opt_usize(&keys::SLIDING_WINDOW)?.filter(|&w| w > 0);
        if cfg.sliding_window.is_some() {
            cfg.layer_attn = vec![crate::config::AttnKind::Sliding; cfg.n_layers];
        }
        Ok(())
    }

    /// Features llama.cpp switches on by an optional tensor's presence: q/k/v bias, per-head
    /// q/k norm.
    pub fn optional_attention_tensors(&self, cfg: &mut ModelConfig) {
        cfg.qkv_bias = self.any_layer(cfg.n_layers, "blk.{}.attn_q.bias");
        cfg.qk_norm = self.any_layer(cfg.n_layers, "blk.{}.attn_q_norm.weight");
    }

    /// The expert section, when `expert_count` is written, and which layers are MoE.
    pub fn moe(&self, cfg: &mut ModelConfig, d: MoeDefaults) -> Result<(), LoadError> {
        let n_experts = self.opt_usize(&keys::EXPERTS)?.unwrap_or(0);
        if n_experts == 0 {
            return Ok(());
        }
        let expert_ffn = match self.opt_usize(&keys::EXPERT_FFN)? {
            Some(f) => f,
            None if d.ffn_is_expert_ffn => cfg.ffn_dim,
            None => self.usize(&keys::EXPERT_FFN)?,
        };
        let n_shared = self.opt_usize(&keys::SHARED_EXPERTS)?.unwrap_or(0);
        let scoring = match self.opt_usize(&keys::EXPERT_GATING)?.unwrap_or(d.gating) {
            GATING_SOFTMAX => RouterScoring::Softmax,
            GATING_SIGMOID => RouterScoring::Sigmoid,
            other => {
                return Err(self.bad(
                    &keys::EXPERT_GATING,
                    format!("= {other} is not a supported gating function"),
                ))
            }
        };
        let m = MoeConfig {
            n_experts,
            n_experts_active: self.usize(&keys::EXPERTS_USED)?,
            n_shared_experts: n_shared,
            expert_ffn_dim: expert_ffn,
            shared_ffn_dim: self
                .opt_usize(&keys::SHARED_EXPERT_FFN)?
                .unwrap_or(expert_ffn.saturating_mul(n_shared)),
            scoring,
            has_correction_bias: self.any_layer(cfg.n_layers, "blk.{}.exp_probs_b.bias"),
            // llama.cpp writes 0 for "no groups": one group holding every expert.
            n_group: self.opt_usize(&keys::EXPERT_GROUPS)?.unwrap_or(1).max(1),
            topk_group: self
                .opt_usize(&keys::EXPERT_GROUPS_USED)?
                .unwrap_or(1)
                .max(1),
            norm_topk_prob: d.always_norm
                || self.opt_bool(&keys::EXPERT_WEIGHTS_NORM)?.unwrap_or(false),
            routed_scaling_factor: self.opt_f32(&keys::ROUTED_SCALE)?.unwrap_or(1.0),
            ..MoeConfig::none(cfg.hidden_dim)
        };
        cfg.moe = m;
        let n = cfg.n_layers;
        cfg.layer_moe = match self.opt_usize(&keys::LEADING_DENSE)? {
            Some(k) => (0..n).map(|l| l >= k).collect(),
            None => (0..n)
                .map(|l| {
                    let router = format!("blk.{l}.ffn_gate_inp.weight");
                    self.file.tensor(&router).is_some()
                })
                .collect(),
        };
        Ok(())
    }
}
