//! The sampling settings of one generation: the one type the HTTP layer (ferrox-server)
//! validates a request into and the sampler (ferrox-models) runs on, and the one place its
//! defaults are written. No dependencies, so both crates (and everything above them) share it.

/// How the next token is drawn. `Default` is llama.cpp's sampler (as llama-server applies it
/// to OpenAI requests): what `ferrox run`'s flags default to and what a server request gets for
/// the fields it leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// 1 = off. Positive logits are divided by it, negative ones multiplied.
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// How many of the most recent tokens the penalties look at (llama-server's
    /// `repeat_last_n`).
    pub penalty_last_n: usize,
    pub seed: u64,
    /// Added to these tokens' logits (token ids, ferrox-tokenizer's `TokenId`) before anything
    /// else (OpenAI's `logit_bias`; -100 bans a token, +100 all but forces it). Ids outside the
    /// vocabulary are ignored.
    pub logit_bias: Vec<(usize, f32)>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}
