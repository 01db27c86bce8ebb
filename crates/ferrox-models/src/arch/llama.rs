//! Llama (Llama 2/3.x): pre-norm GQA + SwiGLU, optional Llama-3 RoPE frequency scaling.
//! Reference: transformers `modeling_llama.py`; llama.cpp `LLM_ARCH_LLAMA` (its converter
//! permutes q/k rows, so GGUF Llama rotates adjacent pairs).

use super::gguf::base_only;
use super::hf::llama_like;
use super::tables::llama_layers;
use super::{keys, Architecture, Claim::Lacks};

pub static ARCH: Architecture = Architecture::new("llama", llama_layers)
    .hf(&["llama"], llama_like)
    // Llama 3.x frequency scaling arrives as the `rope_freqs.weight` factors, which the builder
    // applies wherever a file has them.
    .gguf(&["llama"], base_only::<true>)
    // llama.cpp also stores Mixtral (experts) and Mistral (a window) as `llama`.
    .claims(&[Lacks(&keys::EXPERTS), Lacks(&keys::SLIDING_WINDOW)]);
