//! Safetensors files (<https://github.com/huggingface/safetensors>: an 8-byte little-endian
//! header length, a JSON header naming each tensor's dtype, shape and byte range, then the
//! data) and Hugging Face model directories that shard them through
//! `model.safetensors.index.json` (`weight_map`: tensor name → file). Files are memory-mapped;
//! tensors are views into the map.

use crate::FileError;
use ferrox_core::quant::GgmlType;
use ferrox_core::storage::Bytes;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One stored tensor: `shape` row-major, outermost first; `data` viewed in the map.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub ty: GgmlType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

/// Every tensor of a model directory: the files listed by `model.safetensors.index.json`
/// (in name order), else the single `model.safetensors`. A name stored twice keeps the copy of
/// the later file.
pub fn read_dir(dir: &Path) -> Result<HashMap<String, Tensor>, FileError> {
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| FileError::io(&index, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| FileError::format(&index, e.to_string()))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| FileError::format(&index, "no weight_map"))?;
        let mut fs: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        fs.sort();
        fs.dedup();
        fs.into_iter().map(|f| dir.join(f)).collect()
    } else {
        let single = dir.join("model.safetensors");
        if !single.exists() {
            return Err(FileError::format(
                dir,
                "no model.safetensors or model.safetensors.index.json",
            ));
        }
        vec![single]
    };
    let mut tensors = HashMap::new();
    for f in files {
        read_file_into(&f, &mut tensors)?;
    }
    Ok(tensors)
}

/// Every tensor of one `.safetensors` file.
pub fn read_file(path: &Path) -> Result<HashMap<String, Tensor>, FileError> {
    let mut tensors = HashMap::new();
    read_file_into(path, &mut tensors)?;
    Ok(tensors)
}

fn read_file_into(path: &Path, out: &mut HashMap<String, Tensor>) -> Result<(), FileError> {
    let file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
    // SAFETY: the file is opened read-only and model files are not modified while mapped.
    let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| FileError::io(path, e))?;
    let fmt_err = |msg: String| FileError::format(path, msg);
    let (header_len, meta) =
        ::safetensors::SafeTensors::read_metadata(&mmap).map_err(|e| fmt_err(e.to_string()))?;
    let base = 8 + header_len;
    let bytes = Bytes::new(Arc::new(mmap));
    for (name, info) in meta.tensors() {
        let ty = match info.dtype {
            ::safetensors::Dtype::F32 => GgmlType::F32,
            ::safetensors::Dtype::F16 => GgmlType::F16,
            ::safetensors::Dtype::BF16 => GgmlType::BF16,
            // transformers' `position_ids` buffer (older BERT checkpoints save it): the
            // indices 0..n, not a weight.
            ::safetensors::Dtype::I64 if name.ends_with(".position_ids") => continue,
            other => return Err(fmt_err(format!("tensor `{name}`: dtype {other:?}"))),
        };
        let (s, e) = info.data_offsets;
        let data = bytes
            .slice(base + s, e - s)
            .ok_or_else(|| fmt_err(format!("tensor `{name}` out of bounds")))?;
        out.insert(
            name.clone(),
            Tensor {
                ty,
                shape: info.shape.clone(),
                data,
            },
        );
    }
    Ok(())
}
