//! The architecture registry. Each family is one file that says everything about it: the names
//! it answers to (Hugging Face `model_type`s, GGUF `general.architecture` strings, and which
//! files of a shared GGUF string it claims), how its `ModelConfig` is read from `config.json`
//! and from GGUF metadata, and its tensor table. The shared pieces: the config keys ([`keys`],
//! one row per key), the typed readers of each format ([`hf`], [`gguf`]), the conventions
//! several families copy (`common_*`) and the shared tensor tables ([`tables`]).
//! [`ARCHITECTURES`] lists the families; at most one claims any name or file, so their order
//! does not matter. One builder (`crate::build`) turns any of them into a decoder, and
//! `crate::load` opens a file or directory through them. An unlisted name is refused by name,
//! never guessed (compare mistral.rs's one-row architecture registry).

pub mod bert;
pub mod common_deepseek;
pub mod common_gemma;
pub mod common_granite;
pub mod common_qwen;
pub mod deepseek_v3;
pub mod deepseek_v32;
mod early;
pub mod gemma2;
pub mod gemma3;
pub mod gguf;
pub mod glm4;
pub mod glm4_moe;
pub mod glm4_moe_lite;
pub mod glm_moe_dsa;
pub mod gpt_oss;
pub mod granite;
pub mod granitemoe;
pub mod hf;
pub mod keys;
pub mod llama;
pub mod mistral;
pub mod mixtral;
pub mod olmoe;
pub mod phi3;
pub mod qwen2;
pub mod qwen2_moe;
pub mod qwen3;
pub mod qwen3_moe;
pub mod qwen3_next;
pub mod random;
pub mod smollm3;
pub mod tables;

pub use gguf::GgufMeta;
pub use hf::HfConfig;

use crate::config::ModelConfig;
use crate::validate::{validate, Keys};
use crate::weights::{LoadError, TensorSpec};
use keys::Key;
use tables::ExpertNames;

/// One architecture family.
#[derive(Debug)]
pub struct Architecture {
    /// Canonical name (`ModelConfig::arch`): the Hugging Face `model_type` of the family.
    pub name: &'static str,
    /// Hugging Face `model_type` values it loads.
    pub hf_model_types: &'static [&'static str],
    /// GGUF `general.architecture` values it loads (empty: no GGUF form).
    pub gguf_archs: &'static [&'static str],
    /// What a GGUF of one of `gguf_archs` must meet to be this family (llama.cpp stores
    /// Mixtral and Mistral as `llama`); none: every such file.
    pub gguf_claims: &'static [Claim],
    pub config_from_hf: HfReader,
    pub config_from_gguf: GgufReader,
    /// The per-layer tensor table (`{}` = layer index) for this config.
    pub tensors: fn(&ModelConfig) -> Vec<TensorSpec>,
    /// Hub names of per-expert tensors (MoE families).
    pub hf_experts: ExpertNames,
    /// How its checkpoints store an MTP block, when they carry one.
    pub mtp: MtpFormat,
}

/// How a family's checkpoints store their MTP (NextN) block (`crate::mtp`).
#[derive(Debug, Clone, Copy)]
pub struct MtpFormat {
    /// The block's own tensors (logical names `blk.{}.nextn.*`, `{}` = `n_layers`).
    pub tensors: &'static [TensorSpec],
    /// Where the Hub keeps the block's decoder layer when not as layer `n_layers`
    /// (`model.layers.{n}.`): Qwen3-Next's `mtp.layers.0.`.
    pub hf_layer: Option<&'static str>,
    /// Chained drafts read the block's state after its head norm (Qwen3-Next, as vLLM's
    /// `qwen3_next_mtp.py` returns it) instead of before (DeepSeek-V3's `shared_head`).
    pub chain_normed: bool,
}

/// A family's config reader for `config.json`, given the family's name (`ModelConfig::arch`).
type HfReader = fn(&HfConfig, &'static str) -> Result<ModelConfig, LoadError>;
/// A family's config reader for GGUF metadata, given the family's name.
type GgufReader = fn(&GgufMeta, &'static str) -> Result<ModelConfig, LoadError>;

impl Architecture {
    /// A family named `name` with its tensor table; it answers to no `model_type` or GGUF
    /// architecture until [`hf`](Self::hf) / [`gguf`](Self::gguf) say so and how to read them.
    pub const fn new(name: &'static str, tensors: fn(&ModelConfig) -> Vec<TensorSpec>) -> Self {
        Architecture {
            name,
            hf_model_types: &[],
            gguf_archs: &[],
            gguf_claims: &[],
            config_from_hf: no_hf,
            config_from_gguf: no_gguf,
            tensors,
            hf_experts: tables::HF_EXPERTS,
            mtp: MtpFormat {
                tensors: tables::MTP,
                hf_layer: None,
                chain_normed: false,
            },
        }
    }
    /// Loads the Hugging Face `model_types`, their config read by `reader`.
    pub const fn hf(mut self, model_types: &'static [&'static str], reader: HfReader) -> Self {
        self.hf_model_types = model_types;
        self.config_from_hf = reader;
        self
    }
    /// Loads the GGUF architectures `archs`, their config read by `reader`.
    pub const fn gguf(mut self, archs: &'static [&'static str], reader: GgufReader) -> Self {
        self.gguf_archs = archs;
        self.config_from_gguf = reader;
        self
    }
    pub const fn experts(mut self, names: ExpertNames) -> Self {
        self.hf_experts = names;
        self
    }
    pub const fn mtp(mut self, format: MtpFormat) -> Self {
        self.mtp = format;
        self
    }
    /// Claims only the GGUFs of its strings that meet every one of `conditions`.
    pub const fn claims(mut self, conditions: &'static [Claim]) -> Self {
        self.gguf_claims = conditions;
        self
    }
    /// Whether this family claims GGUF `g`.
    pub fn claims_gguf(&self, g: &GgufMeta) -> bool {
        self.gguf_archs.contains(&g.arch()) && self.gguf_claims.iter().all(|c| c.holds(g))
    }
}

/// A condition on a GGUF key, for families that share a `general.architecture` string: stated
/// as data so the registry test can try every combination.
#[derive(Debug, Clone, Copy)]
pub enum Claim {
    /// The key holds a positive count.
    Has(&'static Key),
    /// The key is absent or 0.
    Lacks(&'static Key),
}

impl Claim {
    pub fn holds(&self, g: &GgufMeta) -> bool {
        match self {
            Claim::Has(k) => g.has(k),
            Claim::Lacks(k) => !g.has(k),
        }
    }
    pub fn key(&self) -> &'static Key {
        match self {
            Claim::Has(k) | Claim::Lacks(k) => k,
        }
    }
}

/// Every supported architecture (in no particular order: claims do not overlap).
pub static ARCHITECTURES: &[&Architecture] = &[
    &llama::ARCH,
    &mistral::ARCH,
    &qwen2::ARCH,
    &qwen3::ARCH,
    &gemma3::ARCH,
    &gemma2::ARCH,
    &gpt_oss::ARCH,
    &glm4::ARCH,
    &glm4_moe::ARCH,
    &glm4_moe_lite::ARCH,
    &glm_moe_dsa::ARCH,
    &deepseek_v3::ARCH,
    &deepseek_v32::ARCH,
    &qwen3_moe::ARCH,
    &qwen2_moe::ARCH,
    &qwen3_next::ARCH,
    &olmoe::ARCH,
    &smollm3::ARCH,
    &granite::ARCH,
    &granitemoe::ARCH,
    &phi3::ARCH,
    &mixtral::ARCH,
];

/// The reader of a family without a GGUF form (never claims a file: it names no GGUF
/// architecture).
fn no_gguf(g: &GgufMeta, _: &'static str) -> Result<ModelConfig, LoadError> {
    Err(unsupported(g.arch()))
}

/// The reader of a family without a Hub form (likewise never claims one).
fn no_hf(_: &HfConfig, name: &'static str) -> Result<ModelConfig, LoadError> {
    Err(unsupported(name))
}

/// The registry entry named `name` (canonical name).
pub fn by_name(name: &str) -> Option<&'static Architecture> {
    ARCHITECTURES.iter().copied().find(|a| a.name == name)
}

/// The Hugging Face `model_type`s and GGUF architectures ferrox loads, for errors and help.
pub fn supported_names() -> String {
    let hf: Vec<&str> = ARCHITECTURES
        .iter()
        .flat_map(|a| a.hf_model_types.iter().copied())
        .collect();
    // Several families share a GGUF string (`llama`): each listed once.
    let mut gguf: Vec<&str> = Vec::new();
    for name in ARCHITECTURES.iter().flat_map(|a| a.gguf_archs.iter()) {
        if !gguf.contains(name) {
            gguf.push(name);
        }
    }
    format!(
        "Hugging Face model_type: {}; GGUF architecture: {}",
        hf.join(", "),
        gguf.join(", ")
    )
}

fn unsupported(name: &str) -> LoadError {
    LoadError::UnsupportedArch {
        name: name.to_string(),
        supported: supported_names(),
    }
}

/// The one entry of `registry` for which `claims` holds: none is an unsupported `name`, and
/// two would be a registry bug, refused rather than settled by order.
pub fn claimant<'r>(
    registry: &[&'r Architecture],
    name: &str,
    claims: impl Fn(&Architecture) -> bool,
) -> Result<&'r Architecture, LoadError> {
    let mut found = registry.iter().copied().filter(|a| claims(a));
    match (found.next(), found.next()) {
        (Some(a), None) => Ok(a),
        (None, _) => Err(unsupported(name)),
        (Some(a), Some(b)) => Err(LoadError::Config(format!(
            "`{name}` is claimed by both {} and {}",
            a.name, b.name
        ))),
    }
}

/// The family of GGUF `g`.
pub fn gguf_claimant<'r>(
    registry: &[&'r Architecture],
    g: &GgufMeta,
) -> Result<&'r Architecture, LoadError> {
    claimant(registry, g.arch(), |a| a.claims_gguf(g))
}

/// The family of Hugging Face `model_type` `mt`.
pub fn hf_claimant<'r>(
    registry: &[&'r Architecture],
    mt: &str,
) -> Result<&'r Architecture, LoadError> {
    claimant(registry, mt, |a| a.hf_model_types.contains(&mt))
}

/// A GGUF file's architecture and config, read from its metadata alone (no weights bound):
/// what `ferrox show` prints.
pub fn gguf_config(g: &GgufMeta) -> Result<(&'static Architecture, ModelConfig), LoadError> {
    let name = g.arch().to_string();
    let arch = gguf_claimant(ARCHITECTURES, g)?;
    let cfg = (arch.config_from_gguf)(g, arch.name)?;
    validate(&cfg, &Keys::Gguf(&name))?;
    Ok((arch, cfg))
}

/// Parses the text of a `config.json` into its architecture and config.
pub fn parse_hf_config(text: &str) -> Result<(&'static Architecture, ModelConfig), LoadError> {
    let bad = |msg: String| LoadError::Config(format!("config.json: {msg}"));
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("top level is not an object".into()))?;
    let c = HfConfig::of(obj);
    let mt = c
        .str(&keys::MODEL_TYPE)?
        .ok_or_else(|| c.bad(&keys::MODEL_TYPE, "is missing"))?;
    let arch = hf_claimant(ARCHITECTURES, mt)?;
    let cfg = (arch.config_from_hf)(&c, arch.name)?;
    validate(&cfg, &Keys::Hf(&c))?;
    Ok((arch, cfg))
}

#[cfg(test)]
mod tests;
