//! MTP (NextN) blocks: the one a checkpoint carries after its layers, in its family's names
//! (`arch::MtpFormat`), and a draft head trained here (`scripts/train_draft_head.py`) from a
//! file beside the model. Both are built as layer `n_layers` of the model's own plan.

use super::{resolver, LayerPlan, Parts};
use crate::arch::MtpFormat;
use crate::mtp::Mtp;
use crate::weights::{Bound, LoadError, Naming, TensorRef, TensorSpec, WeightSource};
use ferrox_format::FileError;
use std::path::Path;

/// A draft head trained for a model that ships no MTP block (`scripts/train_draft_head.py`):
/// an MTP block in `src`'s tensors as layer `n_layers` of the model, with its sub-vocabulary
/// head (`blk.N.nextn.draft_head` rows for the token ids in `blk.N.nextn.draft_vocab`).
#[derive(Clone, Copy)]
pub struct DraftHead<'a> {
    pub src: &'a dyn WeightSource,
    /// Where it came from, for errors.
    pub path: &'a Path,
    /// Whether a chained draft reads the head's state through its `head_norm` (the form its
    /// first step reads the model's normed state in), as it was trained to.
    pub chain_normed: bool,
}

impl Parts<'_> {
    /// The first MTP block the file carries (as layer `n_layers`, in `format`'s names), if
    /// any: a config that counts one whose tensors the file lacks (a converter dropped them)
    /// has none.
    pub(super) fn mtp(
        &self,
        table: &[TensorSpec],
        format: &MtpFormat,
    ) -> Result<Option<Mtp>, LoadError> {
        let l = self.cfg.n_layers;
        let probe = match self.src.naming() {
            Naming::Gguf => format.tensors[0].gguf,
            Naming::HuggingFace => format.tensors[0].hf,
        };
        let present = |name: &str| self.src.tensor(&name.replace("{}", &l.to_string()));
        if self.cfg.mtp_layers == 0 || format.tensors.is_empty() || present(probe).is_none() {
            return Ok(None);
        }
        self.block(table, format).map(Some)
    }

    /// `head` as the model's MTP block: built as a carried block is, in the head file's GGUF
    /// names, the RoPE factors the model's; its sub-vocabulary checked against the model.
    pub(super) fn draft_head(
        &self,
        table: &[TensorSpec],
        format: &MtpFormat,
        head: DraftHead<'_>,
    ) -> Result<Mtp, LoadError> {
        let refused = |e: LoadError| {
            LoadError::from(FileError::format(head.path, format!("draft head: {e}")))
        };
        let parts = Parts {
            src: head.src,
            rope_factors: self.rope_factors.clone(),
            rope_long: self.rope_long.clone(),
            ..*self
        };
        let format = MtpFormat {
            chain_normed: head.chain_normed,
            ..*format
        };
        let mut mtp = parts.block(table, &format).map_err(refused)?;
        self.sub_vocabulary(head.src, &mut mtp).map_err(refused)?;
        Ok(mtp)
    }

    /// A draft head's `draft_head` rows and `draft_vocab` ids as `mtp`'s head, when it has them.
    fn sub_vocabulary(&self, src: &dyn WeightSource, mtp: &mut Mtp) -> Result<(), LoadError> {
        let (l, cfg) = (self.cfg.n_layers, self.cfg);
        let name = |s: &str| format!("blk.{l}.nextn.{s}");
        let Some(rows) = src.tensor(&name("draft_head.weight")) else {
            return Ok(());
        };
        let vocab = src
            .tensor(&name("draft_vocab"))
            .ok_or_else(|| LoadError::MissingTensor(name("draft_vocab")))?;
        let bad = |msg: String| LoadError::Tensor {
            name: name("draft_vocab"),
            msg,
        };
        let ids: Vec<usize> = vocab
            .to_f32()?
            .into_iter()
            .map(|v| {
                let ok = v >= 0.0 && v.fract() == 0.0 && (v as usize) < cfg.vocab_size;
                ok.then_some(v as usize)
                    .ok_or_else(|| bad(format!("{v} is not a token id below {}", cfg.vocab_size)))
            })
            .collect::<Result<_, _>>()?;
        let rows = rows.matrix()?;
        if rows.rows() != ids.len() || rows.cols() != cfg.hidden_dim {
            return Err(bad(format!(
                "{} ids for a {}x{} head (width {})",
                ids.len(),
                rows.rows(),
                rows.cols(),
                cfg.hidden_dim
            )));
        }
        mtp.head = Some(rows);
        mtp.vocab = Some(ids);
        Ok(())
    }

    /// The block at layer `n_layers` in `format`'s names, from `self.src`.
    fn block(&self, table: &[TensorSpec], format: &MtpFormat) -> Result<Mtp, LoadError> {
        let l = self.cfg.n_layers;
        let relayered = Relayered {
            inner: self.src,
            from: format!("model.layers.{l}."),
            to: match self.src.naming() {
                Naming::HuggingFace => format.hf_layer,
                Naming::Gguf => None,
            },
        };
        let per_layer = [table, format.tensors].concat();
        let b = Bound::bind_layers(&relayered, &resolver(self.cfg), l..l + 1, &[], &per_layer)?;
        let parts = Parts {
            b: &b,
            src: &relayered,
            rope_factors: self.rope_factors.clone(),
            rope_long: self.rope_long.clone(),
            ..*self
        };
        let n = |s: &str| format!("blk.{l}.nextn.{s}");
        let mut mtp = Mtp::new(
            parts.norm(&n("enorm.weight"))?,
            parts.norm(&n("hnorm.weight"))?,
            b.matrix(&n("eh_proj.weight"))?,
            parts.layer(l, &LayerPlan::of(self.cfg, l))?,
            parts.norm(&n("shared_head_norm.weight"))?,
        );
        mtp.chain_normed = format.chain_normed;
        mtp.embed = match b.get(&n("embed_tokens.weight")) {
            Some(_) => Some(b.plain_matrix(&n("embed_tokens.weight"))?),
            None => None,
        };
        mtp.head = match b.get(&n("shared_head_head.weight")) {
            Some(_) => Some(b.matrix(&n("shared_head_head.weight"))?),
            None => None,
        };
        Ok(mtp)
    }
}

/// A source whose layer `from` (`model.layers.{n}.`) is stored under the prefix `to`, when
/// given (the Hub's Qwen3-Next keeps its MTP layer as `mtp.layers.0.`).
struct Relayered<'a> {
    inner: &'a dyn WeightSource,
    from: String,
    to: Option<&'static str>,
}

impl WeightSource for Relayered<'_> {
    fn naming(&self) -> Naming {
        self.inner.naming()
    }
    fn tensor(&self, name: &str) -> Option<TensorRef> {
        match (self.to, name.strip_prefix(self.from.as_str())) {
            (Some(to), Some(rest)) => self.inner.tensor(&format!("{to}{rest}")),
            _ => self.inner.tensor(name),
        }
    }
    fn names(&self) -> Vec<String> {
        self.inner.names()
    }
}
