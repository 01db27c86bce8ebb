//! Opening a model: a Hugging Face directory (`config.json` + safetensors) or a GGUF file is
//! matched to its family in the registry (`crate::arch`), its config validated, and its
//! weights bound by the one builder (`crate::build`). This sits above the registry, the
//! builder and the decoder, so none of them reaches back up to load.

use crate::arch::{gguf_config, parse_hf_config, Architecture, GgufMeta};
use crate::blocks::moe::MoeBlock;
use crate::build::DraftHead;
use crate::config::ModelConfig;
use crate::decoder::{Decoder, ModelSource};
use crate::distributed::{ExpertSplit, Share};
use crate::weights::{read_to_string, GgufSource, LoadError, SafetensorsDir, WeightSource};
use ferrox_format::gguf::GgufFile;
use ferrox_format::FileError;
use std::path::Path;
use std::sync::Arc;

impl Decoder {
    /// Loads a GGUF file or a Hugging Face directory (`config.json` + safetensors).
    pub fn load(path: impl AsRef<Path>) -> Result<Decoder, LoadError> {
        load(path.as_ref())
    }

    /// [`load`](Self::load) keeping only `share` resident (one place of a model spread over
    /// processes, issue 22).
    pub fn load_share(path: impl AsRef<Path>, share: &Share) -> Result<Decoder, LoadError> {
        load_share(path.as_ref(), share)
    }

    /// A GGUF model with all weights dequantized to F32: the exact-arithmetic reference.
    pub fn load_dequantized(path: impl AsRef<Path>) -> Result<Decoder, LoadError> {
        load_dequantized(path.as_ref())
    }
}

/// Loads a Hugging Face directory or a GGUF file.
pub fn load(path: &Path) -> Result<Decoder, LoadError> {
    load_share(path, &Share::whole())
}

/// [`load`] keeping only `share` resident (one place of a model spread over processes). A
/// whole model without an MTP block takes the draft head beside it, if there is one
/// ([`draft_head_path`]).
pub fn load_share(path: &Path, share: &Share) -> Result<Decoder, LoadError> {
    let opened = open(path, false)?;
    let head_path = draft_head_path(path);
    let head_src = match head_path.is_file() {
        true => Some(GgufSource {
            file: Arc::new(open_gguf(&head_path)?),
            dequantize: false,
        }),
        false => None,
    };
    let head = match &head_src {
        Some(src) => Some(DraftHead {
            src,
            path: &head_path,
            chain_normed: chain_normed(&src.file, &head_path)?,
        }),
        None => None,
    };
    let (arch, cfg, src) = (opened.arch, opened.cfg.clone(), &*opened.src);
    let mut dec = crate::build::build_with_head(arch, cfg, src, share, head)?;
    opened.finish(&mut dec);
    Ok(dec)
}

/// A draft head's metadata: trained to chain from its own state through its `head_norm`
/// (`train_draft_head.py --steps`); heads without it chain the state as is.
const CHAIN_NORMED: &str = "ferrox.draft_head.chain_normed";

/// A head's [`CHAIN_NORMED`]: absent is false; any value but a bool is refused by name.
fn chain_normed(file: &GgufFile, path: &Path) -> Result<bool, LoadError> {
    match file.get(CHAIN_NORMED) {
        None => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| {
            FileError::format(path, format!("draft head: {CHAIN_NORMED} is not a bool")).into()
        }),
    }
}

/// Where a model's trained draft head lives: `NAME.draft-head.gguf` beside `NAME.gguf`, or
/// `draft-head.gguf` inside a Hugging Face directory.
pub fn draft_head_path(model: &Path) -> std::path::PathBuf {
    match model.is_dir() {
        true => model.join("draft-head.gguf"),
        false => model.with_extension("draft-head.gguf"),
    }
}

/// A GGUF model with every weight dequantized to F32 at load: the exact-arithmetic reference
/// (as transformers runs the GGUF) for judging near-ties; several times the memory.
pub fn load_dequantized(path: &Path) -> Result<Decoder, LoadError> {
    let opened = open(path, true)?;
    let mut dec = crate::build::build(opened.arch, opened.cfg.clone(), &*opened.src)?;
    opened.finish(&mut dec);
    Ok(dec)
}

/// The config of a Hugging Face directory or a GGUF file, no weights bound.
pub fn load_config(path: &Path) -> Result<ModelConfig, LoadError> {
    Ok(open(path, false)?.cfg)
}

/// Only this place's routed experts of every MoE layer (`build::build_experts`), with the
/// model's config.
pub fn load_experts(
    path: &Path,
    split: &ExpertSplit,
) -> Result<(ModelConfig, Vec<Option<MoeBlock>>), LoadError> {
    let opened = open(path, false)?;
    let blocks = crate::build::build_experts(opened.arch, &opened.cfg, &*opened.src, split)?;
    if let Some(g) = &opened.gguf {
        g.release_pages();
    }
    Ok((opened.cfg, blocks))
}

/// A model's weights, bound to nothing yet.
struct Opened {
    arch: &'static Architecture,
    cfg: ModelConfig,
    src: Box<dyn WeightSource>,
    gguf: Option<Arc<GgufFile>>,
    path: std::path::PathBuf,
}

impl Opened {
    /// Records where `dec` came from and drops the file's pages that loading read.
    fn finish(self, dec: &mut Decoder) {
        dec.source = ModelSource {
            path: self.path,
            is_gguf: self.gguf.is_some(),
        };
        if let Some(g) = &self.gguf {
            g.release_pages();
        }
        dec.gguf = self.gguf;
    }
}

/// Opens a Hugging Face directory or a GGUF file (`dequantize`: every GGUF weight as F32).
fn open(path: &Path, dequantize: bool) -> Result<Opened, LoadError> {
    if path.is_dir() {
        let (arch, cfg) = parse_hf_config(&read_to_string(&path.join("config.json"))?)?;
        return Ok(Opened {
            arch,
            cfg,
            src: Box::new(SafetensorsDir::open(path)?),
            gguf: None,
            path: path.to_path_buf(),
        });
    }
    let file = open_gguf(path)?;
    let g = GgufMeta {
        file: Arc::new(file),
    };
    let (arch, cfg) = gguf_config(&g)?;
    Ok(Opened {
        arch,
        cfg,
        src: Box::new(GgufSource {
            file: g.file.clone(),
            dequantize,
        }),
        gguf: Some(g.file),
        path: path.to_path_buf(),
    })
}

/// Reads `dir/config.json`.
pub fn load_hf_config(dir: &Path) -> Result<ModelConfig, LoadError> {
    Ok(parse_hf_config(&read_to_string(&dir.join("config.json"))?)?.1)
}

/// A GGUF file, its refusal naming the path.
fn open_gguf(path: &Path) -> Result<GgufFile, LoadError> {
    GgufFile::open(path).map_err(|e| FileError::format(path, e.to_string()).into())
}
