//! BERT-family encoders: sentence embeddings (sentence-transformers' pooling and
//! normalization) and cross-encoder relevance scores (`BertForSequenceClassification`: the
//! pooler's tanh over `[CLS]`, then a one-label classifier), on the shared kernels
//! (`WeightMatrix` products, the attention kernel over each input's own rows).
//!
//! Inputs are batched: many inputs go through one packed forward pass (no padding), in
//! groups of at most [`BATCH_TOKENS`] tokens.

mod forward;
mod load;

pub use load::is_encoder;

use ferrox_tokenizer::wordpiece::{Encoded, WordPiece};

use crate::arch::bert::BertConfig;
use crate::embedding::{self, pool, Pooling};
use forward::{Body, Linear};

/// Tokens of one packed forward pass (bounds the activations: ≈ tokens × ffn floats).
pub const BATCH_TOKENS: usize = 8192;

/// What the model computes.
#[derive(Debug, Clone)]
pub enum Task {
    /// A sentence embedding.
    Embed { pooling: Pooling, normalize: bool },
    /// A relevance score of a (query, document) pair.
    Rank(RankHead),
}

/// A cross-encoder's head.
#[derive(Debug, Clone)]
pub struct RankHead {
    pooler: Linear,
    classifier: Linear,
}

/// Bad input or a request the model cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("this model is a reranker (a classification head); it computes relevance scores, not embeddings")]
    NotEmbedding,
    #[error("this model has no rerank head (BertForSequenceClassification, GGUF pooling_type rank); it computes embeddings only")]
    NotRanker,
    #[error("input {index}: {problem}")]
    Input { index: usize, problem: String },
}

/// A loaded BERT encoder with its tokenizer.
#[derive(Debug)]
pub struct Encoder {
    pub config: BertConfig,
    pub tokenizer: WordPiece,
    pub task: Task,
    body: Body,
}

impl Encoder {
    /// Whether it computes relevance scores (else embeddings).
    pub fn is_ranker(&self) -> bool {
        matches!(self.task, Task::Rank(_))
    }

    /// Width of an embedding.
    pub fn dim(&self) -> usize {
        self.config.hidden
    }

    /// The framed, truncated ids of `text` (`[CLS] … [SEP]`).
    pub fn tokenize(&self, text: &str) -> Result<Encoded, EncodeError> {
        self.tokenizer.encode(text).map_err(|e| EncodeError::Input {
            index: 0,
            problem: e.to_string(),
        })
    }

    /// One embedding per input (token ids as [`Encoder::tokenize`] makes them).
    pub fn embed(&self, inputs: &[Encoded]) -> Result<Vec<Vec<f32>>, EncodeError> {
        let Task::Embed { pooling, normalize } = self.task else {
            return Err(EncodeError::NotEmbedding);
        };
        let d = self.config.hidden;
        self.batched(inputs, |_, states| {
            let mut v = pool(states, d, pooling);
            if normalize {
                embedding::normalize(&mut v);
            }
            v
        })
    }

    /// Relevance logits of `query` against each document (a cross-encoder).
    pub fn rank(&self, query: &str, documents: &[&str]) -> Result<Vec<f32>, EncodeError> {
        let Task::Rank(head) = &self.task else {
            return Err(EncodeError::NotRanker);
        };
        let pairs = documents
            .iter()
            .enumerate()
            .map(|(index, doc)| {
                self.tokenizer
                    .encode_pair(query, doc)
                    .map_err(|e| EncodeError::Input {
                        index,
                        problem: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let d = self.config.hidden;
        let scores = self.batched(&pairs, |_, states| {
            let mut pooled = head.pooler.forward(&states[..d], 1);
            pooled.iter_mut().for_each(|v| *v = v.tanh());
            head.classifier.forward(&pooled, 1)
        })?;
        Ok(scores.into_iter().map(|s| s[0]).collect())
    }

    /// Runs the inputs in packed groups; `each(input, its states)` per input, in order.
    fn batched(
        &self,
        inputs: &[Encoded],
        each: impl Fn(&Encoded, &[f32]) -> Vec<f32>,
    ) -> Result<Vec<Vec<f32>>, EncodeError> {
        for (index, e) in inputs.iter().enumerate() {
            self.check(e)
                .map_err(|problem| EncodeError::Input { index, problem })?;
        }
        let d = self.config.hidden;
        let mut out = Vec::with_capacity(inputs.len());
        let mut rest = inputs;
        while !rest.is_empty() {
            let mut take = 0;
            let mut tokens = 0;
            while take < rest.len() && (take == 0 || tokens + rest[take].ids.len() <= BATCH_TOKENS)
            {
                tokens += rest[take].ids.len();
                take += 1;
            }
            let (group, tail) = rest.split_at(take);
            let states = self.body.forward(&self.config, group);
            for (e, (s, len)) in group.iter().zip(forward::spans(group)) {
                out.push(each(e, &states[s * d..(s + len) * d]));
            }
            rest = tail;
        }
        Ok(out)
    }

    fn check(&self, e: &Encoded) -> Result<(), String> {
        if e.ids.is_empty() {
            return Err("is empty".into());
        }
        if e.ids.len() != e.types.len() {
            return Err("token types do not match the tokens".into());
        }
        if e.ids.len() > self.config.max_positions {
            return Err(format!(
                "has {} tokens; the model reads at most {}",
                e.ids.len(),
                self.config.max_positions
            ));
        }
        if let Some(t) = e.ids.iter().find(|&&t| t >= self.config.vocab) {
            return Err(format!(
                "token id {t} is outside the vocabulary (size {})",
                self.config.vocab
            ));
        }
        if let Some(t) = e
            .types
            .iter()
            .find(|&&t| t as usize >= self.body.types.rows())
        {
            return Err(format!("token type {t} is outside the model's token types"));
        }
        Ok(())
    }
}
