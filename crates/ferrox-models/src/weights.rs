//! Weight sources: one view over a GGUF file or a Hugging Face safetensors directory
//! (safetensors format: <https://github.com/huggingface/safetensors>; sharding through
//! `model.safetensors.index.json`). Tensors stay in their stored type (quantized, f16, bf16, f32)
//! and are borrowed from the memory map.
//!
//! Architectures bind tensors through a declarative table of [`TensorSpec`]s: a logical tensor
//! has a GGUF name (llama.cpp's `blk.N.attn_q.weight`), a Hugging Face name and a shape; a
//! missing required tensor or a misshapen one is an error naming it.

use ferrox_core::matmul::WeightMatrix;
use ferrox_core::quant::{self, GgmlType};
use ferrox_core::storage::Bytes;
use ferrox_format::safetensors;
use ferrox_format::FileError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("tensor `{name}`: {msg}")]
    Tensor { name: String, msg: String },
    #[error("unsupported architecture `{name}` (ferrox loads {supported})")]
    UnsupportedArch { name: String, supported: String },
    #[error("model config: {0}")]
    Config(String),
    /// A metadata or `config.json` value that is missing, of the wrong type, out of range or
    /// inconsistent with another: `key` is its name in the file (a GGUF key, a `config.json`
    /// field, or a tensor whose shape stands for it).
    #[error("model config: `{key}` {problem}")]
    Value { key: String, problem: String },
}

impl LoadError {
    /// The key a [`LoadError::Value`] names.
    pub fn key(&self) -> Option<&str> {
        match self {
            LoadError::Value { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// Which naming scheme a source uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Gguf,
    HuggingFace,
}

/// One stored tensor. `shape` is row-major, outermost first (a linear weight is
/// `[out_features, in_features]` in both formats once GGUF's reversed dims are flipped).
#[derive(Debug, Clone)]
pub struct TensorRef {
    pub name: String,
    pub ty: GgmlType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

impl TensorRef {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// A 2-D tensor as a weight matrix (`rows = shape[0]`) for products: interleaved where
    /// the kernels have a layout for it (`WeightMatrix::interleave`), else zero-copy.
    pub fn matrix(&self) -> Result<WeightMatrix, LoadError> {
        Ok(self.plain_matrix()?.interleave())
    }

    /// A 2-D tensor as a zero-copy weight matrix in ggml layout (embedding tables, read a row
    /// at a time).
    pub fn plain_matrix(&self) -> Result<WeightMatrix, LoadError> {
        let (rows, cols) = match self.shape[..] {
            [r, c] => (r, c),
            _ => return Err(self.err(format!("expected 2-D, got {:?}", self.shape))),
        };
        WeightMatrix::new(self.ty, rows, cols, self.data.clone()).map_err(|e| self.err(e))
    }

    /// The tensor as `[rows, cols]` where `rows` = product of all but the last dim.
    pub fn matrix_flat(&self) -> Result<WeightMatrix, LoadError> {
        let cols = *self.shape.last().unwrap_or(&1);
        let rows = self.numel() / cols.max(1);
        WeightMatrix::new(self.ty, rows, cols, self.data.clone()).map_err(|e| self.err(e))
    }

    /// A float tensor with its elements rearranged into `shape`: element `i` of the result
    /// (row-major) is element `src(i)` of this one. For Hub layouts that differ from llama.cpp's
    /// by more than names (gpt-oss's transposed, interleaved expert stacks).
    pub fn remap(
        &self,
        shape: Vec<usize>,
        src: impl Fn(usize) -> usize,
    ) -> Result<TensorRef, LoadError> {
        let size = match self.ty {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            ty => {
                return Err(self.err(format!(
                    "stored as {ty:?}; only float tensors can be rearranged"
                )))
            }
        };
        let n: usize = shape.iter().product();
        let bytes = self.data.as_ref();
        if n != self.numel() || bytes.len() != n * size {
            return Err(self.err(format!(
                "{:?} does not rearrange into {shape:?}",
                self.shape
            )));
        }
        let mut out = Vec::with_capacity(n * size);
        for i in 0..n {
            let j = src(i);
            out.extend_from_slice(&bytes[j * size..(j + 1) * size]);
        }
        Ok(TensorRef {
            name: self.name.clone(),
            ty: self.ty,
            shape,
            data: Bytes::from_vec(out),
        })
    }

    /// Refuses a tensor of a type ferrox has no kernels for (most i-quants, the ternary types,
    /// integer tensors): every bound tensor is multiplied or dequantized, and both need one.
    pub fn check_kernel(&self) -> Result<(), LoadError> {
        match self.ty.act_type() {
            Some(_) => Ok(()),
            None => Err(self.err(format!(
                "stored as {:?}, a type ferrox has no kernels for",
                self.ty
            ))),
        }
    }

    /// Dequantized to f32 (norm weights, biases).
    pub fn to_f32(&self) -> Result<Vec<f32>, LoadError> {
        let n = self.numel();
        let mut out = vec![0f32; n];
        quant::dequantize_row(self.ty, &self.data, &mut out).map_err(|e| self.err(e))?;
        Ok(out)
    }

    fn err(&self, e: impl std::fmt::Display) -> LoadError {
        LoadError::Tensor {
            name: self.name.clone(),
            msg: e.to_string(),
        }
    }
}

/// Anything tensors can be read from.
pub trait WeightSource: Send + Sync {
    fn naming(&self) -> Naming;
    /// The tensor stored under `name` (in this source's naming), if any.
    fn tensor(&self, name: &str) -> Option<TensorRef>;
    /// Every stored tensor name.
    fn names(&self) -> Vec<String>;
}

/// Safetensors files of a Hugging Face model directory, memory-mapped (read by
/// `ferrox_format::safetensors`).
pub struct SafetensorsDir {
    pub dir: PathBuf,
    tensors: HashMap<String, TensorRef>,
}

impl SafetensorsDir {
    pub fn open(dir: &Path) -> Result<Self, LoadError> {
        let tensors = safetensors::read_dir(dir)?
            .into_iter()
            .map(|(name, t)| {
                let r = TensorRef {
                    name: name.clone(),
                    ty: t.ty,
                    shape: t.shape,
                    data: t.data,
                };
                (name, r)
            })
            .collect();
        Ok(SafetensorsDir {
            dir: dir.to_path_buf(),
            tensors,
        })
    }
}

impl WeightSource for SafetensorsDir {
    fn naming(&self) -> Naming {
        Naming::HuggingFace
    }
    fn tensor(&self, name: &str) -> Option<TensorRef> {
        self.tensors.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }
}

pub(crate) fn read_to_string(path: &Path) -> Result<String, LoadError> {
    Ok(std::fs::read_to_string(path).map_err(|e| FileError::io(path, e))?)
}

/// Symbolic dimension in a tensor table, resolved against the config.
#[derive(Debug, Clone, Copy)]
pub enum Dim {
    Hidden,
    Vocab,
    /// `n_heads * head_dim`
    QDim,
    /// `n_kv_heads * head_dim`
    KvDim,
    HeadDim,
    Ffn,
    Fixed(usize),
    /// Any other size derived from the config (MoE, MLA and DSA dimensions).
    Of(fn(&crate::config::ModelConfig) -> usize),
}

/// One row of an architecture's tensor table. `{}` in a name stands for the layer index.
/// `gguf` is the logical name the builder asks for (llama.cpp's); a family whose GGUF files
/// store the tensor under another name says so with [`TensorSpec::gguf_as`].
#[derive(Debug, Clone, Copy)]
pub struct TensorSpec {
    pub gguf: &'static str,
    pub hf: &'static str,
    pub shape: &'static [Dim],
    pub required: bool,
    /// Name in GGUF files when it differs from the logical one.
    pub gguf_stored: Option<&'static str>,
    /// Brings the Hub tensor into the logical (llama.cpp) layout before its shape is checked.
    pub hf_layout: Option<HubLayout>,
}

/// A rearrangement from a Hub tensor's layout to llama.cpp's.
pub type HubLayout = fn(&TensorRef) -> Result<TensorRef, LoadError>;

pub const fn req(gguf: &'static str, hf: &'static str, shape: &'static [Dim]) -> TensorSpec {
    TensorSpec {
        gguf,
        hf,
        shape,
        required: true,
        gguf_stored: None,
        hf_layout: None,
    }
}

pub const fn opt(gguf: &'static str, hf: &'static str, shape: &'static [Dim]) -> TensorSpec {
    TensorSpec {
        gguf,
        hf,
        shape,
        required: false,
        gguf_stored: None,
        hf_layout: None,
    }
}

/// A tensor table, one row per tensor: `"gguf name" => "hub name", [dims];`. Every row is
/// optional: the layer plan says what the builder demands (`-`: no name in that scheme).
macro_rules! table {
    ($($gguf:literal => $hf:literal, [$($d:expr),* $(,)?];)*) => {
        &[$($crate::weights::opt($gguf, $hf, &[$($d),*])),*]
    };
}
pub(crate) use table;

impl TensorSpec {
    /// The same tensor, stored under `name` in GGUF files.
    pub const fn gguf_as(mut self, name: &'static str) -> TensorSpec {
        self.gguf_stored = Some(name);
        self
    }

    /// The same tensor, rearranged by `f` when read from a Hub checkpoint.
    pub const fn hf_layout(mut self, f: HubLayout) -> TensorSpec {
        self.hf_layout = Some(f);
        self
    }
}

/// Tensors bound from a table, looked up by GGUF-style logical name (`blk.3.attn_q.weight`).
pub struct Bound {
    map: HashMap<String, TensorRef>,
    /// Logical name → the name the source stores it under (errors name the stored one).
    stored: HashMap<String, String>,
}

impl Bound {
    /// Binds `global` once and `per_layer` for every layer, checking presence and shape.
    pub fn bind(
        src: &dyn WeightSource,
        resolve: &dyn Fn(Dim) -> usize,
        n_layers: usize,
        global: &[TensorSpec],
        per_layer: &[TensorSpec],
    ) -> Result<Bound, LoadError> {
        Self::bind_layers(src, resolve, 0..n_layers, global, per_layer)
    }

    /// [`bind`](Self::bind) for the layers of `layers` only (`global`'s `{}`, if any, stays).
    pub fn bind_layers(
        src: &dyn WeightSource,
        resolve: &dyn Fn(Dim) -> usize,
        layers: std::ops::Range<usize>,
        global: &[TensorSpec],
        per_layer: &[TensorSpec],
    ) -> Result<Bound, LoadError> {
        let mut map = HashMap::new();
        let mut names = HashMap::new();
        let mut one = |spec: &TensorSpec, layer: Option<usize>| -> Result<(), LoadError> {
            let fill = |s: &str| match layer {
                Some(l) => s.replace("{}", &l.to_string()),
                None => s.to_string(),
            };
            let logical = fill(spec.gguf);
            let stored = match src.naming() {
                Naming::Gguf => fill(spec.gguf_stored.unwrap_or(spec.gguf)),
                Naming::HuggingFace => fill(spec.hf),
            };
            if stored != "-" {
                names.entry(logical.clone()).or_insert(stored.clone());
            }
            // `-`: the tensor has no name in this naming scheme.
            let found = if stored == "-" {
                None
            } else {
                src.tensor(&stored)
            };
            let Some(t) = found else {
                if spec.required {
                    return Err(LoadError::MissingTensor(stored));
                }
                return Ok(());
            };
            // Before the shape: a tensor of a type without kernels is refused whatever its shape.
            t.check_kernel()?;
            let t = match (src.naming(), spec.hf_layout) {
                (Naming::HuggingFace, Some(f)) => f(&t)?,
                _ => t,
            };
            let expected: Vec<usize> = spec.shape.iter().map(|&d| resolve(d)).collect();
            // Unit dims do not count: GGUF drops leading ones (`[1, n]` is stored as `[n]`)
            // and converters squeeze inner ones (a conv1d's `[c, 1, k]` as `[c, k]`).
            let real = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
            if real(&t.shape) != real(&expected) {
                return Err(LoadError::Shape {
                    name: stored,
                    got: t.shape.clone(),
                    expected,
                });
            }
            map.insert(logical, t);
            Ok(())
        };
        for spec in global {
            one(spec, None)?;
        }
        for l in layers {
            for spec in per_layer {
                one(spec, Some(l))?;
            }
        }
        Ok(Bound { map, stored: names })
    }

    /// Drops the source files' pages from resident memory (see `Bytes::release_owner`). Loaders
    /// call it after each layer: what was copied (repacked, dequantized) no longer needs them,
    /// and the peak of a load stays near the model's size instead of file plus copies.
    pub fn release_pages(&self) {
        let mut owners: Vec<&Bytes> = Vec::new();
        for t in self.map.values() {
            if !owners.iter().any(|o| o.same_owner(&t.data)) {
                owners.push(&t.data);
            }
        }
        for o in owners {
            o.release_owner();
        }
    }

    pub fn get(&self, name: &str) -> Option<&TensorRef> {
        self.map.get(name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// The tensor under logical `name`; a missing one is named as the source stores it.
    pub fn must(&self, name: &str) -> Result<&TensorRef, LoadError> {
        self.map.get(name).ok_or_else(|| self.missing(name))
    }

    /// The error for a missing tensor of logical `name`, named as the source stores it.
    pub fn missing(&self, name: &str) -> LoadError {
        let stored = self.stored.get(name).map_or(name, String::as_str);
        LoadError::MissingTensor(stored.to_string())
    }

    pub fn matrix(&self, name: &str) -> Result<WeightMatrix, LoadError> {
        self.must(name)?.matrix()
    }

    pub fn plain_matrix(&self, name: &str) -> Result<WeightMatrix, LoadError> {
        self.must(name)?.plain_matrix()
    }

    /// Any tensor as `[rows, last dim]` (a `[1, n]` gate stored by GGUF as `[n]`).
    pub fn flat_matrix(&self, name: &str) -> Result<WeightMatrix, LoadError> {
        self.must(name)?.matrix_flat()
    }

    pub fn vector(&self, name: &str) -> Result<Vec<f32>, LoadError> {
        self.must(name)?.to_f32()
    }

    pub fn opt_matrix(&self, name: &str) -> Result<Option<WeightMatrix>, LoadError> {
        self.map.get(name).map(|t| t.matrix()).transpose()
    }

    pub fn opt_vector(&self, name: &str) -> Result<Option<Vec<f32>>, LoadError> {
        self.map.get(name).map(|t| t.to_f32()).transpose()
    }
}

/// A GGUF file (llama.cpp tensor names; dims reversed to row-major order).
pub struct GgufSource {
    pub file: Arc<ferrox_format::gguf::GgufFile>,
    /// Hand out every quantized tensor dequantized to F32 (the exact-arithmetic reference:
    /// what transformers computes on the GGUF's weights, with no activation quantization).
    pub dequantize: bool,
}

impl WeightSource for GgufSource {
    fn naming(&self) -> Naming {
        Naming::Gguf
    }
    fn tensor(&self, name: &str) -> Option<TensorRef> {
        let t = self.file.tensor(name)?;
        let mut shape: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        // ggml pads unused outer dims with 1; a matrix or vector has none.
        while shape.len() > 1 && shape[0] == 1 {
            shape.remove(0);
        }
        let data = self.file.tensor_data(t);
        if self.dequantize && t.ty != GgmlType::F32 {
            let n: usize = shape.iter().product();
            let mut out = vec![0f32; n];
            quant::dequantize_row(t.ty, &data, &mut out).ok()?;
            let bytes = out.iter().flat_map(|v| v.to_le_bytes()).collect();
            return Some(TensorRef {
                name: name.to_string(),
                ty: GgmlType::F32,
                shape,
                data: Bytes::from_vec(bytes),
            });
        }
        Some(TensorRef {
            name: name.to_string(),
            ty: t.ty,
            shape,
            data,
        })
    }
    fn names(&self) -> Vec<String> {
        self.file.tensors().iter().map(|t| t.name.clone()).collect()
    }
}

/// Splits a tensor's rows (flattened over all but the last dim) into `parts` equal matrices.
pub fn split_rows(t: &TensorRef, parts: usize) -> Result<Vec<WeightMatrix>, LoadError> {
    let cols = *t.shape.last().unwrap_or(&1);
    let rows = t.numel() / cols.max(1);
    if parts == 0 || !rows.is_multiple_of(parts) {
        return Err(LoadError::Tensor {
            name: t.name.clone(),
            msg: format!("{rows} rows do not split into {parts} parts"),
        });
    }
    split_rows_at(t, &vec![rows / parts; parts])
}

/// Splits a tensor's rows (flattened over all but the last dim) into matrices of `sizes` rows,
/// zero-copy in the stored layout.
pub fn split_rows_at(t: &TensorRef, sizes: &[usize]) -> Result<Vec<WeightMatrix>, LoadError> {
    let err = |msg: String| LoadError::Tensor {
        name: t.name.clone(),
        msg,
    };
    let cols = *t.shape.last().unwrap_or(&1);
    let rows = t.numel() / cols.max(1);
    if sizes.iter().sum::<usize>() != rows {
        return Err(err(format!("{rows} rows do not split into {sizes:?}")));
    }
    let rb =
        t.ty.row_bytes(cols)
            .ok_or_else(|| err(format!("{cols} columns do not fit {:?} blocks", t.ty)))?;
    let mut start = 0;
    sizes
        .iter()
        .map(|&per| {
            let bytes = t
                .data
                .slice(start * rb, per * rb)
                .ok_or_else(|| err("data shorter than its shape".into()))?;
            start += per;
            WeightMatrix::new(t.ty, per, cols, bytes).map_err(|e| err(e.to_string()))
        })
        .collect()
}

/// Resolves table dimensions against a config.
pub fn resolver(cfg: &crate::config::ModelConfig) -> impl Fn(Dim) -> usize + '_ {
    move |d| match d {
        Dim::Hidden => cfg.hidden_dim,
        Dim::Vocab => cfg.vocab_size,
        Dim::QDim => cfg.n_heads * cfg.head_dim,
        Dim::KvDim => cfg.n_kv_heads * cfg.head_dim,
        Dim::HeadDim => cfg.head_dim,
        Dim::Ffn => cfg.ffn_dim,
        Dim::Fixed(n) => n,
        Dim::Of(f) => f(cfg),
    }
}
