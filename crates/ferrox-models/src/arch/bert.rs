//! BERT-family encoders (Devlin et al. 2018; Hugging Face `modeling_bert.py`, llama.cpp's `bert`
//! GGUF architecture): absolute position and token-type embeddings, bidirectional attention,
//! post-LayerNorm blocks, GELU (erf) feed-forward. The config from `config.json`
//! (`model_type` `bert`) or GGUF `bert.*` keys, and the tensor names of both forms. The
//! forward pass lives in `crate::encoder`.

use ferrox_format::gguf::GgufFile;

use super::hf::HfConfig;
use super::keys;
use crate::weights::{LoadError, Naming};

/// Hugging Face `model_type`s loaded as BERT encoders.
pub const HF_MODEL_TYPES: &[&str] = &["bert"];
/// llama.cpp's BERT architecture (its keys are `bert.*`).
pub const GGUF_ARCH: &str = "bert";
/// GGUF `general.architecture` values loaded as BERT encoders.
pub const GGUF_ARCHS: &[&str] = &[GGUF_ARCH];

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
        use keys::*;
        if let Some(act) = c.str(&ACTIVATION)? {
            if act != "gelu" {
                return Err(c.bad(&ACTIVATION, format!("`{act}` is not supported (gelu)")));
            }
        }
        if let Some(p) = c.str(&POSITION_EMBEDDING_TYPE)? {
            if p != "absolute" {
                return Err(c.bad(
                    &POSITION_EMBEDDING_TYPE,
                    format!("`{p}` is not supported (absolute)"),
                ));
            }
        }
        BertConfig {
            vocab: c.req(&VOCAB)?,
            hidden: c.req(&HIDDEN)?,
            heads: c.req(&HEADS)?,
            layers: c.req(&LAYERS)?,
            ffn: c.req(&FFN)?,
            max_positions: c.req(&CONTEXT)?,
            eps: c.f32(&LAYER_NORM_EPS)?.unwrap_or(1e-12),
        }
        .checked(&c.path(&HIDDEN))
    }

    /// From llama.cpp's `bert.*` keys (the vocabulary size from the token table).
    pub fn from_gguf(f: &GgufFile) -> Result<BertConfig, LoadError> {
        use keys::*;
        let key = |k: &Key| k.gguf_key(GGUF_ARCH);
        let req = |k: &Key| -> Result<usize, LoadError> {
            f.get_u64(&key(k))
                .map(|v| v as usize)
                .ok_or_else(|| LoadError::Value {
                    key: key(k),
                    problem: "is missing".into(),
                })
        };
        if f.get_bool(&key(&CAUSAL)) == Some(true) {
            return Err(LoadError::Value {
                key: key(&CAUSAL),
                problem: "is true; a BERT encoder attends both ways".into(),
            });
        }
        let vocab = f
            .get_array("tokenizer.ggml.tokens")
            .map(|a| a.len())
            .unwrap_or(0);
        BertConfig {
            vocab,
            hidden: req(&HIDDEN)?,
            heads: req(&HEADS)?,
            layers: req(&LAYERS)?,
            ffn: req(&FFN)?,
            max_positions: req(&CONTEXT)?,
            eps: f.get_f32(&key(&LAYER_NORM_EPS)).unwrap_or(1e-12),
        }
        .checked(&key(&HIDDEN))
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
