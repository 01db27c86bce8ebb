//! Loading a BERT encoder from a Hugging Face directory (`config.json`, `model.safetensors`,
//! `tokenizer.json`, and sentence-transformers' `modules.json`, `1_Pooling/config.json`,
//! `sentence_bert_config.json`) or from a llama.cpp `bert` GGUF (`bert.pooling_type`).

use std::path::Path;
use std::sync::Arc;

use ferrox_core::matmul::WeightMatrix;
use ferrox_format::gguf::GgufFile;
use ferrox_format::FileError;
use ferrox_tokenizer::wordpiece::WordPiece;
use serde_json::Value;

use super::forward::{Body, Layer, Linear};
use super::{Encoder, RankHead, Task};
use crate::arch::bert::{self, BertConfig, Tensor};
use crate::arch::hf::HfConfig;
use crate::arch::keys;
use crate::blocks::norm::LayerNorm;
use crate::embedding::Pooling;
use crate::weights::{read_to_string, GgufSource, LoadError, SafetensorsDir, WeightSource};

/// Whether `path` holds a BERT-family encoder (a directory whose `config.json` names a BERT
/// `model_type`, or a GGUF of a BERT architecture) rather than a decoder.
pub fn is_encoder(path: &Path) -> bool {
    if path.is_dir() {
        let Ok(text) = std::fs::read_to_string(path.join("config.json")) else {
            return false;
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let c = v.as_object().map(HfConfig::of);
        let mt = c.and_then(|c| c.str(&keys::MODEL_TYPE).ok().flatten());
        let mt = mt.unwrap_or_default();
        return bert::HF_MODEL_TYPES.contains(&mt);
    }
    GgufFile::open(path)
        .ok()
        .and_then(|f| f.architecture().map(|a| bert::GGUF_ARCHS.contains(&a)))
        .unwrap_or(false)
}

fn json(path: &Path) -> Result<Option<Value>, LoadError> {
    if !path.exists() {
        return Ok(None);
    }
    serde_json::from_str(&read_to_string(path)?)
        .map(Some)
        .map_err(|e| FileError::format(path, format!("not valid JSON: {e}")).into())
}

fn tok_err(path: &Path) -> impl FnOnce(ferrox_tokenizer::TokenizerError) -> LoadError + '_ {
    move |e| FileError::format(path, e.to_string()).into()
}

/// Tensors of one source under one naming.
struct Names<'a> {
    src: &'a dyn WeightSource,
    prefix: String,
}

impl Names<'_> {
    fn name(&self, t: Tensor, l: usize) -> String {
        bert::name(self.src.naming(), &self.prefix, t, l)
    }

    fn get(&self, t: Tensor, l: usize, part: &str) -> Result<crate::weights::TensorRef, LoadError> {
        let n = format!("{}.{part}", self.name(t, l));
        let r = self.src.tensor(&n).ok_or(LoadError::MissingTensor(n))?;
        r.check_kernel()?;
        Ok(r)
    }

    fn has(&self, t: Tensor) -> bool {
        self.src
            .tensor(&format!("{}.weight", self.name(t, 0)))
            .is_some()
    }

    fn vector(&self, t: Tensor, l: usize, part: &str, len: usize) -> Result<Vec<f32>, LoadError> {
        let r = self.get(t, l, part)?;
        if r.numel() != len {
            return Err(shape(&r.name, &r.shape, vec![len]));
        }
        r.to_f32()
    }

    fn matrix(
        &self,
        t: Tensor,
        l: usize,
        rows: usize,
        cols: usize,
    ) -> Result<WeightMatrix, LoadError> {
        let mut r = self.get(t, l, "weight")?;
        // GGUF drops a leading dim of 1 (a one-label classifier is stored as a vector).
        if rows == 1 && r.shape.len() == 1 {
            r.shape.insert(0, 1);
        }
        // A rows-sized dim may be absent from the config (the token-type count): 0 = any.
        if r.shape.len() != 2 || (rows != 0 && r.shape[0] != rows) || r.shape[1] != cols {
            return Err(shape(&r.name, &r.shape, vec![rows, cols]));
        }
        r.plain_matrix()
    }

    fn linear(&self, t: Tensor, l: usize, out: usize, inp: usize) -> Result<Linear, LoadError> {
        let w = self.matrix(t, l, out, inp)?.interleave();
        Ok(Linear {
            w,
            b: self.vector(t, l, "bias", out)?,
        })
    }

    fn norm(&self, t: Tensor, l: usize, d: usize, eps: f32) -> Result<LayerNorm, LoadError> {
        Ok(LayerNorm {
            weight: self.vector(t, l, "weight", d)?,
            bias: self.vector(t, l, "bias", d)?,
            eps,
        })
    }
}

fn shape(name: &str, got: &[usize], expected: Vec<usize>) -> LoadError {
    LoadError::Shape {
        name: name.to_string(),
        got: got.to_vec(),
        expected,
    }
}

fn body(n: &Names, c: &BertConfig) -> Result<Body, LoadError> {
    let (d, f) = (c.hidden, c.ffn);
    let layers = (0..c.layers)
        .map(|l| {
            Ok(Layer {
                q: n.linear(Tensor::Q, l, d, d)?,
                k: n.linear(Tensor::K, l, d, d)?,
                v: n.linear(Tensor::V, l, d, d)?,
                out: n.linear(Tensor::AttnOut, l, d, d)?,
                attn_norm: n.norm(Tensor::AttnNorm, l, d, c.eps)?,
                up: n.linear(Tensor::Up, l, f, d)?,
                down: n.linear(Tensor::Down, l, d, f)?,
                out_norm: n.norm(Tensor::OutNorm, l, d, c.eps)?,
            })
        })
        .collect::<Result<Vec<_>, LoadError>>()?;
    let types = n.matrix(Tensor::TypeEmbd, 0, 0, d)?;
    if types.rows() == 0 {
        return Err(shape(&n.name(Tensor::TypeEmbd, 0), &[0, d], vec![1, d]));
    }
    Ok(Body {
        tokens: n.matrix(Tensor::TokenEmbd, 0, c.vocab, d)?,
        positions: n.matrix(Tensor::PosEmbd, 0, c.max_positions, d)?,
        types,
        embd_norm: n.norm(Tensor::EmbdNorm, 0, d, c.eps)?,
        layers,
    })
}

/// The pooler (tanh) and classifier of a cross-encoder; one label only (a relevance logit).
fn rank_head(n: &Names, c: &BertConfig) -> Result<RankHead, LoadError> {
    let classifier = n.get(Tensor::Classifier, 0, "weight")?;
    if classifier.shape.len() == 2 && classifier.shape[0] != 1 {
        return Err(LoadError::Value {
            key: classifier.name.clone(),
            problem: format!(
                "has {:?}: a reranker has one output label",
                classifier.shape
            ),
        });
    }
    Ok(RankHead {
        pooler: n.linear(Tensor::Pooler, 0, c.hidden, c.hidden)?,
        classifier: n.linear(Tensor::Classifier, 0, 1, c.hidden)?,
    })
}

/// sentence-transformers' pooling and normalization of a model directory.
fn st_task(dir: &Path) -> Result<Option<Task>, LoadError> {
    let Some(modules) = json(&dir.join("modules.json"))? else {
        return Ok(None);
    };
    let types: Vec<(&str, &str)> = modules
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
            (s("type"), s("path"))
        })
        .collect();
    let is = |t: &str| types.iter().find(|(ty, _)| ty.ends_with(t));
    let Some((_, pool_dir)) = is("models.Pooling") else {
        return Ok(None);
    };
    let path = dir.join(pool_dir).join("config.json");
    let cfg = json(&path)?.unwrap_or(Value::Null);
    let on = |k: &str| cfg.get(k).and_then(Value::as_bool).unwrap_or(false);
    let pooling = match (on("pooling_mode_cls_token"), on("pooling_mode_mean_tokens")) {
        (true, false) => Pooling::Cls,
        (false, true) => Pooling::Mean,
        _ => {
            return Err(FileError::format(
                &path,
                "ferrox pools by exactly one of pooling_mode_cls_token or \
                 pooling_mode_mean_tokens",
            )
            .into())
        }
    };
    for k in [
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
    ] {
        if on(k) {
            return Err(FileError::format(&path, format!("{k} is not supported")).into());
        }
    }
    Ok(Some(Task::Embed {
        pooling,
        normalize: is("models.Normalize").is_some(),
    }))
}

impl Encoder {
    /// Loads a BERT encoder from a model directory or a `bert` GGUF.
    pub fn load(path: &Path) -> Result<Encoder, LoadError> {
        if path.is_dir() {
            return Encoder::load_dir(path);
        }
        let file = GgufFile::open(path).map_err(|e| FileError::format(path, e.to_string()))?;
        let config = BertConfig::from_gguf(&file)?;
        let tokenizer = WordPiece::from_gguf(&file, config.max_positions).map_err(tok_err(path))?;
        let pooling_key = keys::POOLING.gguf_key(bert::GGUF_ARCH);
        let pooling_type = file.get_u64(&pooling_key).unwrap_or(0);
        let src = GgufSource {
            file: Arc::new(file),
            dequantize: false,
        };
        let names = Names {
            src: &src,
            prefix: String::new(),
        };
        // llama.cpp's enum: 1 mean, 2 CLS, 4 rank; its embeddings are always L2-normalised.
        let task = match pooling_type {
            1 => Task::Embed {
                pooling: Pooling::Mean,
                normalize: true,
            },
            2 => Task::Embed {
                pooling: Pooling::Cls,
                normalize: true,
            },
            4 => Task::Rank(rank_head(&names, &config)?),
            t => {
                return Err(LoadError::Value {
                    key: pooling_key,
                    problem: format!("= {t}: ferrox pools BERT by mean (1), CLS (2) or rank (4)"),
                })
            }
        };
        Ok(Encoder {
            body: body(&names, &config)?,
            config,
            tokenizer,
            task,
        })
    }

    fn load_dir(dir: &Path) -> Result<Encoder, LoadError> {
        let v: Value = json(&dir.join("config.json"))?.ok_or_else(|| {
            FileError::io(
                &dir.join("config.json"),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
        let obj = v
            .as_object()
            .ok_or_else(|| LoadError::Config("config.json: top level is not an object".into()))?;
        let config = BertConfig::from_hf(&HfConfig::of(obj))?;
        let st = json(&dir.join("sentence_bert_config.json"))?;
        let max_len = st
            .as_ref()
            .and_then(|s| s.get("max_seq_length")?.as_u64())
            .map_or(config.max_positions, |m| {
                (m as usize).min(config.max_positions)
            });
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = WordPiece::from_file(&tok_path, max_len).map_err(tok_err(&tok_path))?;
        let src = SafetensorsDir::open(dir)?;
        let prefix = match src.tensor("bert.embeddings.word_embeddings.weight") {
            Some(_) => "bert.",
            None => "",
        };
        let names = Names {
            src: &src,
            prefix: prefix.into(),
        };
        let task = match st_task(dir)? {
            Some(t) => t,
            None if names.has(Tensor::Classifier) => Task::Rank(rank_head(&names, &config)?),
            None => {
                return Err(LoadError::Config(format!(
                    "{}: neither a sentence-transformers pooling (modules.json) nor a \
                     classification head (classifier.weight): ferrox does not know what to \
                     compute with this encoder",
                    dir.display()
                )))
            }
        };
        Ok(Encoder {
            body: body(&names, &config)?,
            config,
            tokenizer,
            task,
        })
    }
}
