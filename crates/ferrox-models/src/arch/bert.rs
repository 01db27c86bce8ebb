//! BERT-family encoders (Devlin et al. 2018; Hugging Face `modeling_bert.py`, llama.cpp's `bert`
//! GGUF architecture): absolute position and token-type embeddings, bidirectional attention,
//! post-LayerNorm blocks, GELU (erf) feed-forward. The config from `config.json`
//! (`model_type` `bert`) or GGUF `bert.*` keys, and the tensor names of both forms. The
//! forward pass lives in `crate::encoder`.

use ferrox_format::gguf::GgufFile;

use super::hf::HfConfig;
use crate::weights::{LoadError, Naming};

/// Hugging Face `model_type`s loaded as BERT encoders.
pub const HF_MODEL_TYPES: &[&str] = &["bert"];
/// GGUF `general.architecture` values loaded as BERT encoders.
pub const GGUF_ARCHS: &[&str] = &["bert"];

/// Shape of a BERT encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    pub vocab: usize,
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub ffn: usize,
    /// Rows of the position table: the longest input.
    pub max_positions: usize,
    pub eps: f32,
}

impl BertConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    fn checked(self, key: &str) -> Result<BertConfig, LoadError> {
        let bad = |problem: &str| LoadError::Value {
            key: key.to_string(),
            problem: problem.to_string(),
        };
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            return Err(bad("the hidden size must be a multiple of the head count"));
        }
        if [
            self.vocab,
            self.hidden,
            self.layers,
            self.ffn,
            self.max_positions,
        ]
        .contains(&0)
        {
            return Err(bad("sizes must be positive"));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(bad("layer_norm_eps must be positive"));
        }
        Ok(self)
    }

    /// From `config.json`. Only the erf GELU and absolute positions are BERT as ferrox
    /// computes it; anything else is refused by name.
    pub fn from_hf(c: &HfConfig) -> Result<BertConfig, LoadError> {
        if let Some(act) = c.str("hidden_act")? {
            if act != "gelu" {
                return Err(c.bad("hidden_act", format!("`{act}` is not supported (gelu)")));
            }
        }
        if let Some(p) = c.str("position_embedding_type")? {
            if p != "absolute" {
                return Err(c.bad(
                    "position_embedding_type",
                    format!("`{p}` is not supported (absolute)"),
                ));
            }
        }
        BertConfig {
            vocab: c.req("vocab_size")?,
            hidden: c.req("hidden_size")?,
            heads: c.req("num_attention_heads")?,
            layers: c.req("num_hidden_layers")?,
            ffn: c.req("intermediate_size")?,
            max_positions: c.req("max_position_embeddings")?,
            eps: c.f32("layer_norm_eps")?.unwrap_or(1e-12),
        }
        .checked("hidden_size")
    }

    /// From llama.cpp's `bert.*` keys (the vocabulary size from the token table).
    pub fn from_gguf(f: &GgufFile) -> Result<BertConfig, LoadError> {
        let req = |k: &str| -> Result<usize, LoadError> {
            f.get_u64(&format!("bert.{k}"))
                .map(|v| v as usize)
                .ok_or_else(|| LoadError::Value {
                    key: format!("bert.{k}"),
                    problem: "is missing".into(),
                })
        };
        if f.get_bool("bert.attention.causal") == Some(true) {
            return Err(LoadError::Value {
                key: "bert.attention.causal".into(),
                problem: "is true; a BERT encoder attends both ways".into(),
            });
        }
        let vocab = f
            .get_array("tokenizer.ggml.tokens")
            .map(|a| a.len())
            .unwrap_or(0);
        BertConfig {
            vocab,
            hidden: req("embedding_length")?,
            heads: req("attention.head_count")?,
            layers: req("block_count")?,
            ffn: req("feed_forward_length")?,
            max_positions: req("context_length")?,
            eps: f
                .get_f32("bert.attention.layer_norm_epsilon")
                .unwrap_or(1e-12),
        }
        .checked("bert.embedding_length")
    }
}

/// A tensor of the encoder, named per source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tensor {
    TokenEmbd,
    PosEmbd,
    TypeEmbd,
    EmbdNorm,
    /// Per layer: the `(weight, bias)` pairs below.
    Q,
    K,
    V,
    AttnOut,
    AttnNorm,
    Up,
    Down,
    OutNorm,
    /// The pooler's dense layer (tanh) under a classification head.
    Pooler,
    /// The classification head (`classifier`, llama.cpp `cls.output`).
    Classifier,
}

/// The name of `t` (layer `l` where per layer; `.weight` / `.bias` appended by the caller)
/// in `naming`; `prefix` is the Hugging Face model prefix (`bert.` under a task head).
pub fn name(naming: Naming, prefix: &str, t: Tensor, l: usize) -> String {
    use Tensor::*;
    match naming {
        Naming::Gguf => match t {
            TokenEmbd => "token_embd".into(),
            PosEmbd => "position_embd".into(),
            TypeEmbd => "token_types".into(),
            EmbdNorm => "token_embd_norm".into(),
            Q => format!("blk.{l}.attn_q"),
            K => format!("blk.{l}.attn_k"),
            V => format!("blk.{l}.attn_v"),
            AttnOut => format!("blk.{l}.attn_output"),
            AttnNorm => format!("blk.{l}.attn_output_norm"),
            Up => format!("blk.{l}.ffn_up"),
            Down => format!("blk.{l}.ffn_down"),
            OutNorm => format!("blk.{l}.layer_output_norm"),
            Pooler => "cls".into(),
            Classifier => "cls.output".into(),
        },
        Naming::HuggingFace => {
            let layer = format!("{prefix}encoder.layer.{l}.");
            match t {
                TokenEmbd => format!("{prefix}embeddings.word_embeddings"),
                PosEmbd => format!("{prefix}embeddings.position_embeddings"),
                TypeEmbd => format!("{prefix}embeddings.token_type_embeddings"),
                EmbdNorm => format!("{prefix}embeddings.LayerNorm"),
                Q => layer + "attention.self.query",
                K => layer + "attention.self.key",
                V => layer + "attention.self.value",
                AttnOut => layer + "attention.output.dense",
                AttnNorm => layer + "attention.output.LayerNorm",
                Up => layer + "intermediate.dense",
                Down => layer + "output.dense",
                OutNorm => layer + "output.LayerNorm",
                Pooler => format!("{prefix}pooler.dense"),
                Classifier => "classifier".into(),
            }
        }
    }
}
