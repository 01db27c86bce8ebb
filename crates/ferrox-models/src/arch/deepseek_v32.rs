//! DeepSeek-V3.2 (`deepseek_v32`): GLM-5's layout (MLA + DSA indexer + MoE) whose indexer
//! rotates halves. Reference: transformers `modeling_deepseek_v32.py`; llama.cpp `deepseek32`.

use super::common_deepseek::{dsa_from_gguf, dsa_from_hf};
use super::gguf::GATING_SOFTMAX;
use super::tables::mla_dsa_layers;
use super::Architecture;

pub static ARCH: Architecture = Architecture::new("deepseek_v32", mla_dsa_layers)
    .hf(&["deepseek_v32"], dsa_from_hf::<false>)
    .gguf(&["deepseek32"], dsa_from_gguf::<GATING_SOFTMAX, false>);
