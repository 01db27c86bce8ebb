//! GGUF reader, versions 2 and 3 (ggml `docs/gguf.md`; layout as written by gguf-py and
//! llama.cpp's `gguf.cpp`). The file is memory-mapped and tensors are zero-copy views into it.
//!
//! Untrusted input: every count, length and offset is bounded by the bytes left in the file
//! before it is used, so a truncated or crafted file gives a [`GgufError`] naming the section,
//! key or tensor and the offset — never a panic or an allocation larger than the file.
//!
//! Strings that are not valid UTF-8 (rare, some converted vocabularies) are decoded lossily with
//! U+FFFD and a `tracing` warning naming the key, instead of refusing the model.
//!
//! Split sets (`NAME-00001-of-00003.gguf`, keys `split.no` / `split.count`) open as one file:
//! metadata comes from the first shard, tensors from all of them.

mod error;
mod meta;
mod parse;
mod write;

pub use error::{GgufError, Problem, TensorProblem};
pub use meta::{MetaArray, MetaType, MetaValue, StrArray};
pub use write::{to_bytes, TensorOut};

use ferrox_core::matmul::WeightMatrix;
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One tensor's description; its bytes are [`GgufFile::tensor_data`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension.
    pub dims: Vec<u64>,
    pub n_elements: u64,
    pub n_bytes: u64,
    /// Index of the split shard holding the data (0 for single files).
    pub shard: usize,
    /// Offset relative to the shard's data section, as stored in the file.
    pub offset: u64,
    /// Absolute offset of the data in the shard file.
    pub file_offset: u64,
}

struct Shard {
    bytes: Bytes,
    data_start: u64,
}

/// A parsed GGUF file or split set.
pub struct GgufFile {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorInfo>,
    /// Indices into `tensors`, sorted by name.
    by_name: Vec<usize>,
    shards: Vec<Shard>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("shards", &self.shards.len())
            .finish()
    }
}

fn map_file(path: &Path) -> Result<Bytes, GgufError> {
    let io = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and model files are not modified while loaded; a concurrent
    // truncation by another process is outside the contract (as for every mmap-based loader).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    Ok(Bytes::new(Arc::new(map)))
}

/// `(prefix, n)` for a split shard name `prefix-0000i-of-0000n.gguf`.
fn split_name(path: &Path) -> Option<(String, u32)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    let (head, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = head.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 {
        return None;
    }
    no.parse::<u32>().ok()?;
    Some((prefix.to_string(), count.parse().ok()?))
}

/// Every file of the split set `path` names (`NAME-0000i-of-0000n.gguf` → all n, in order);
/// `[path]` for a name that is not a shard's.
pub fn shard_paths(path: &Path) -> Vec<PathBuf> {
    let Some((prefix, count)) = split_name(path) else {
        return vec![path.to_path_buf()];
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    (1..=count)
        .map(|i| dir.join(format!("{prefix}-{i:05}-of-{count:05}.gguf")))
        .collect()
}

impl GgufFile {
    /// Maps and parses `path`; a shard of a split set opens the whole set.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let first = Self::from_bytes(map_file(path)?)?;
        let count = first.get_u64("split.count").unwrap_or(1);
        if count <= 1 {
            return Ok(first);
        }
        let split_err = |problem: String| GgufError::Split {
            path: path.to_path_buf(),
            problem,
        };
        let (_, named) = split_name(path).ok_or_else(|| {
            split_err(format!(
                "split.count is {count} but the name is not NAME-0000i-of-{count:05}.gguf"
            ))
        })?;
        if u64::from(named) != count {
            return Err(split_err(format!(
                "name says {named} shards, split.count says {count}"
            )));
        }
        let mut whole: Option<GgufFile> = None;
        for (i, p) in (0..count).zip(shard_paths(path)) {
            let shard = Self::from_bytes(map_file(&p)?)?;
            let no = shard.get_u64("split.no");
            let c = shard.get_u64("split.count");
            if no != Some(i) || c != Some(count) {
                return Err(GgufError::Split {
                    path: p,
                    problem: format!("expected split.no {i} of {count}, found {no:?} of {c:?}"),
                });
            }
            match whole.as_mut() {
                None => whole = Some(shard),
                Some(w) => {
                    let idx = w.shards.len();
                    w.shards.extend(shard.shards);
                    w.tensors.extend(
                        shard
                            .tensors
                            .into_iter()
                            .map(|t| TensorInfo { shard: idx, ..t }),
                    );
                }
            }
        }
        let mut whole = whole.expect("count > 1");
        if let Some(n) = whole.get_u64("split.tensors.count") {
            if n != whole.tensors.len() as u64 {
                return Err(split_err(format!(
                    "split.tensors.count is {n} but the shards hold {} tensors",
                    whole.tensors.len()
                )));
            }
        }
        whole.index()?;
        Ok(whole)
    }

    /// Parses a whole file held in memory (tests, fuzzing); tensors view into `b`.
    pub fn from_bytes(b: Bytes) -> Result<GgufFile, GgufError> {
        let p = parse::parse(&b, 0)?;
        let mut f = GgufFile {
            version: p.version,
            alignment: p.alignment,
            metadata: p.metadata,
            tensors: p.tensors,
            by_name: Vec::new(),
            shards: vec![Shard {
                bytes: b,
                data_start: p.data_start,
            }],
        };
        let mut keys: Vec<&str> = f.metadata.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(GgufError::DuplicateKey(w[0].to_string()));
        }
        drop(keys);
        f.index()?;
        Ok(f)
    }

    fn index(&mut self) -> Result<(), GgufError> {
        let mut idx: Vec<usize> = (0..self.tensors.len()).collect();
        idx.sort_unstable_by(|&a, &b| self.tensors[a].name.cmp(&self.tensors[b].name));
        if let Some(w) = idx
            .windows(2)
            .find(|w| self.tensors[w[0]].name == self.tensors[w[1]].name)
        {
            return Err(GgufError::DuplicateTensor(self.tensors[w[0]].name.clone()));
        }
        self.by_name = idx;
        Ok(())
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// `general.alignment` (default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Drops the mapped files' pages from this process's resident memory. Tensors that were
    /// copied at load (repacked, dequantized, converted) no longer need them; what is still read
    /// from the map (say a plain embedding table) faults back in, page by page, on use.
    pub fn release_pages(&self) {
        for s in &self.shards {
            s.bytes.release();
        }
    }

    /// Number of files in the set (1 unless split).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Absolute offset of shard `i`'s data section.
    pub fn data_start(&self, shard: usize) -> Option<u64> {
        self.shards.get(shard).map(|s| s.data_start)
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// Any integer type holding a non-negative value.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// Any integer type whose value fits an i64.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// F32 or F64.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    pub fn get_array(&self, key: &str) -> Option<&MetaArray> {
        self.get(key)?.as_array()
    }

    /// A string array as borrowed slices (for the vocabulary, prefer [`get_array`] +
    /// [`MetaArray::as_strs`], which does not build a Vec).
    ///
    /// [`get_array`]: GgufFile::get_array
    pub fn get_str_array(&self, key: &str) -> Option<Vec<&str>> {
        Some(self.get_array(key)?.as_strs()?.iter().collect())
    }

    /// F32 or F64 arrays.
    pub fn get_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        self.get_array(key)?.to_f32_vec()
    }

    /// Integer arrays of any width.
    pub fn get_i64_array(&self, key: &str) -> Option<Vec<i64>> {
        self.get_array(key)?.to_i64_vec()
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// Tensors in file order (shard by shard).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        let i = self
            .by_name
            .binary_search_by(|&i| self.tensors[i].name.as_str().cmp(name))
            .ok()?;
        Some(&self.tensors[self.by_name[i]])
    }

    /// The tensor's bytes, viewed in place.
    ///
    /// # Panics
    /// If `t` is not a tensor of this file (every range of this file's tensors was validated).
    pub fn tensor_data(&self, t: &TensorInfo) -> Bytes {
        self.shards
            .get(t.shard)
            .and_then(|s| {
                let start = usize::try_from(t.file_offset).ok()?;
                let len = usize::try_from(t.n_bytes).ok()?;
                s.bytes.slice(start, len)
            })
            .unwrap_or_else(|| panic!("tensor {:?} is not from this GGUF file", t.name))
    }

    /// The named tensor as a matrix of `rows = dims[1]` by `cols = dims[0]` (a 1-D tensor is one
    /// row; trailing dimensions of 1 are ignored).
    pub fn weight_matrix(&self, name: &str) -> Result<WeightMatrix, GgufError> {
        let t = self
            .tensor(name)
            .ok_or_else(|| GgufError::MissingTensor(name.to_string()))?;
        let bad = |problem| GgufError::BadTensor {
            name: name.to_string(),
            problem,
        };
        let (cols, rows) = match t.dims.as_slice() {
            [c] => (*c, 1),
            [c, r, rest @ ..] if rest.iter().all(|&d| d == 1) => (*c, *r),
            _ => return Err(bad(TensorProblem::NotMatrix(t.dims.clone()))),
        };
        // Both fit: their product is the validated, in-file element count.
        let (rows, cols) = (rows as usize, cols as usize);
        WeightMatrix::new(t.ty, rows, cols, self.tensor_data(t))
            .map_err(|e| bad(TensorProblem::Quant(e)))
    }
}
