//! Speculative decoding, by default without a draft model: draft the next tokens from the
//! sequence's own history (or the model's own MTP block), check the whole draft in one
//! forward, keep what the target model agrees with.
//!
//! The seed's API (`shared/seed/ferrox_models/speculative.rs`) is kept: prompt lookup (the
//! same idea as "prompt lookup decoding" in vLLM / transformers) through
//! [`PromptLookupSpeculator`] and greedy [`speculative_decode`]. It runs over the engine's one
//! decode loop (`engine::BatchEngine`, here through a one-slot `generate::Session`), as do
//! `Session` itself and the server.
//!
//! Beyond the seed: a [`Drafter`] trait (n-gram lookup and a suffix-automaton
//! [`LongestMatchDrafter`], [`RecallDrafter`] over earlier requests' outputs, [`MtpDrafter`],
//! a mixture-of-experts model drafting for itself with fewer experts ([`ReducedExperts`])
//! and, when asked for, a separate [`DraftModel`]), an [`AdaptiveDraft`] length controller,
//! and [`verify_tree`], the one verification rule, lossless under any sampler (speculative
//! sampling with a deterministic draft) — over a chain ([`verify_rows`]) or a draft tree
//! (`crate::tree`: branches a drafter offers beside its draft, [`Drafter::branches`]).
//! [`Speculation`] bundles them per sequence.
//!
//! Layers: the drafters and the verification rule sit below the engine, which uses them; the
//! seed's `speculative_decode` (decode.rs) sits above `generate::Session`, which it drives.

mod adaptive;
mod beside;
mod decode;
mod draft_model;
mod kept;
mod longest;
mod lookup;
mod mtp;
mod recall;
mod speculation;
mod verify;

pub use adaptive::AdaptiveDraft;
pub use beside::{Beside, ModelDraft, ReducedExperts};
pub use decode::{speculative_decode, SpeculativeDecodeResult};
pub use draft_model::{
    DraftModel, DraftModelDrafter, DraftModelError, DraftModelRun, MAX_VOCAB_DIFFERENCE,
};
pub use longest::LongestMatchDrafter;
pub use lookup::PromptLookupSpeculator;
pub use mtp::{MtpBlock, MtpDrafter};
pub use recall::{RecallDrafter, RecallIndex, SharedRecall, PROMPT_TAIL};
pub use speculation::{DraftIn, Drafter, Observation, SpecStats, Speculation};
pub use verify::{verify, verify_rows, verify_tree, Rows, Verdict};

#[cfg(test)]
use crate::sampling::{Sampler, SamplerConfig};

/// The greedy choice every decode path makes (the sampler's: first index of the largest
/// logit); the seed's tests compare against plain greedy decoding through it.
#[cfg(test)]
fn argmax(logits: &[f32]) -> usize {
    Sampler::new(SamplerConfig::greedy()).sample(logits, &[])
}

#[cfg(test)]
mod seed_conformance;
#[cfg(test)]
mod tests;
