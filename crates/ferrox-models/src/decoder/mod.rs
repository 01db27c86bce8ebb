//! The decoder: token embedding, a stack of pre-norm layers (attention + FFN, each optionally
//! post-normed), final norm and LM head. Layers hold their attention and FFN as trait objects
//! (`blocks::AttentionBlock`, `blocks::FfnBlock`), so standard GQA, MLA, Gated DeltaNet, dense
//! MLP and MoE mix freely per layer.
//!
//! Every forward processes a batch of consecutive positions; a single token is the batch of
//! one, through the same code, so `forward_batch` rows equal `forward_token` bit for bit.

use crate::blocks::{embed_tokens, Experts, PassState, RmsNorm, Segment};
use crate::config::ModelConfig;
use crate::distributed::StageExchange;
use crate::layer::grow;
pub use crate::layer::Layer;
use crate::mtp::{Main, Mtp, MtpOut, Rows};
use crate::state::LayerState;
use crate::tree::{Tree, TreeError};
use ferrox_core::cache::{CacheFormat, CacheFormatError, KvCache};
use ferrox_core::matmul::WeightMatrix;
use ferrox_tokenizer::TokenId;
use std::sync::{Arc, Mutex};

/// Facts about where the model came from, for tokenizer and template lookup.
#[derive(Debug, Clone, Default)]
pub struct ModelSource {
    pub path: std::path::PathBuf,
    pub is_gguf: bool,
}

pub struct Decoder {
    pub config: ModelConfig,
    /// `[vocab, hidden]`, looked up row by row.
    pub embed: WeightMatrix,
    /// Multiplies embeddings (Gemma: `sqrt(hidden)`; 1 otherwise).
    pub embed_scale: f32,
    pub layers: Vec<Layer>,
    pub output_norm: RmsNorm,
    /// `[vocab, hidden]`; shares the embedding's bytes when tied.
    pub lm_head: WeightMatrix,
    pub source: ModelSource,
    /// The GGUF file the weights live in (tokenizer and template metadata), if any.
    pub gguf: Option<std::sync::Arc<ferrox_format::gguf::GgufFile>>,
    /// The checkpoint's MTP (NextN) block, a drafter for speculation, when it ships one.
    pub mtp: Option<Mtp>,
    /// How per-head attention layers store keys and values and multiply them
    /// (`--cache-type-k/-v`, `--attn-bf16`); f32 unless set.
    cache_format: CacheFormat,
    /// The layers after `layers` run elsewhere (pipeline parallelism, the driver's side).
    stages: Option<Arc<dyn StageExchange>>,
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    t: Vec<f32>,
    /// One per sequence of a multi-sequence forward.
    states: Vec<PassState>,
}

/// One sequence's part of [`Decoder::forward_multi`]: `tokens` placed at `pos..` in `caches`
/// (one per layer; positions at or after `pos` are dropped first), logits wanted for rows
/// `first_logit_row..`. `key` names the sequence's caches to places that keep layers of their
/// own (pipeline parallelism): the engine's slot index, [`OWN_CACHES`] for a caller's.
pub struct SeqBatch<'a> {
    pub tokens: &'a [TokenId],
    pub pos: usize,
    pub caches: &'a mut [KvCache],
    pub first_logit_row: usize,
    pub key: u64,
    /// The rows as a draft tree ([`crate::tree`]; `None`: consecutive positions). Only a
    /// decoder whose layers all attend over portable rows in this process takes one
    /// ([`Decoder::takes_trees`]).
    pub tree: Option<Tree<'a>>,
}

/// The [`SeqBatch::key`] of the caches a caller of `forward_into` or `hidden_states` holds.
pub const OWN_CACHES: u64 = u64::MAX;

/// Why a sequence cannot go through a forward pass ([`Decoder::prepare_seq`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("{got} KV caches for {layers} layers")]
    CacheCount { got: usize, layers: usize },
    #[error("{0}")]
    CacheShape(String),
    #[error(transparent)]
    CacheFormat(#[from] CacheFormatError),
    #[error("position {pos} is past the cached length {len}")]
    PastCache { pos: usize, len: usize },
    #[error("position {pos} is before the rows a bounded recurrent cache kept; feed from 0")]
    Unrestorable { pos: usize },
    #[error("token id {id} is outside the vocabulary ({vocab} embedding rows)")]
    Token { id: TokenId, vocab: usize },
    #[error(transparent)]
    Tree(#[from] TreeError),
    #[error("this model's layers cannot verify a draft tree")]
    NoTrees,
}

/// What a forward produces for its wanted rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    Logits,
    Hidden,
}

/// A sequence's rows as the layers see them, with its pass state reset.
fn segment<'a>(seq: &'a mut SeqBatch<'_>, state: &'a mut PassState) -> Segment<'a> {
    state.topk.clear();
    state.topk_width = 0;
    Segment {
        n: seq.tokens.len(),
        pos: seq.pos,
        caches: &mut *seq.caches,
        state,
        tree: seq.tree,
    }
}

/// The key layout the attention kernel reads fastest for `format`'s keys in heads `head_dim`
/// wide.
fn key_layout(format: CacheFormat, head_dim: usize) -> ferrox_core::cache::RowLayout {
    ferrox_core::kernels::key_layout(format.k, head_dim)
}

impl Decoder {
    /// Assembles a decoder from built parts (architectures and random test models use this).
    pub fn from_parts(
        config: ModelConfig,
        embed: WeightMatrix,
        layers: Vec<Layer>,
        output_norm: RmsNorm,
        lm_head: WeightMatrix,
    ) -> Self {
        let embed_scale = if config.embed_scale {
            (config.hidden_dim as f32).sqrt()
        } else {
            config.embedding_multiplier
        };
        Decoder {
            config,
            embed,
            embed_scale,
            layers,
            output_norm,
            lm_head,
            source: ModelSource::default(),
            gguf: None,
            mtp: None,
            cache_format: CacheFormat::default(),
            stages: None,
            scratch: Mutex::new(Scratch::default()),
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.lm_head.rows()
    }

    /// Whether some layer keeps a recurrent state (its cache is not a function of single
    /// positions, so no prefix of it can be stored).
    pub fn has_recurrent_layers(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l.attn.state(), LayerState::Recurrent { .. }))
    }

    /// One empty cache per layer, shaped as each layer stores positions, per-head ones in the
    /// decoder's cache format.
    pub fn new_caches(&self) -> Vec<KvCache> {
        self.layers
            .iter()
            .map(|l| {
                let mut c = l.attn.state().new_cache();
                self.format_cache(l, &mut c)
                    .expect("set_cache_format checked the format against every layer");
                c
            })
            .collect()
    }

    /// Stores the keys and values of per-head attention layers and multiplies them as
    /// `format` says (llama.cpp's `--cache-type-k/-v`, `--attn-bf16`) in caches created or
    /// emptied from now on; layers that keep other rows (MLA latents, recurrent inputs) stay
    /// f32. Refused, naming the type, when a layer's head width does not split into its
    /// blocks. bf16 products round queries, keys, weights and values to bf16: twice the
    /// multiply-adds per instruction where the CPU has AVX-512 BF16 — faster long prompts,
    /// slower deep decoding (see the README).
    pub fn set_cache_format(&mut self, format: CacheFormat) -> Result<(), CacheFormatError> {
        for l in &self.layers {
            if let LayerState::Kv { head_dim, .. } = l.attn.state() {
                format.check(head_dim, key_layout(format, head_dim))?;
            }
        }
        self.cache_format = format;
        Ok(())
    }

    /// How per-head attention layers store and multiply keys and values.
    pub fn cache_format(&self) -> CacheFormat {
        self.cache_format
    }

    /// Gives an empty per-head cache of `layer` the decoder's cache format; any other cache is
    /// left as it is.
    pub(crate) fn format_cache(
        &self,
        layer: &Layer,
        cache: &mut KvCache,
    ) -> Result<(), CacheFormatError> {
        match layer.attn.state() {
            LayerState::Kv { head_dim, .. } => {
                let f = self.cache_format;
                cache.set_format(f, key_layout(f, head_dim))
            }
            LayerState::Latent { .. } | LayerState::Recurrent { .. } => Ok(()),
        }
    }

    /// An empty cache for the MTP block's layer (`None`: the model has no block).
    pub fn new_mtp_cache(&self) -> Option<KvCache> {
        let mtp = self.mtp.as_ref()?;
        let mut c = mtp.layer.attn.state().new_cache();
        self.format_cache(&mtp.layer, &mut c)
            .expect("set_cache_format checked the format against every layer");
        Some(c)
    }

    /// The MTP block (`crate::mtp`) over rows `i = pos..pos + n`: `hidden` holds `h_i`
    /// (`[n, hidden]`, this model's normed final states, or the block's own `g` when
    /// chaining), `tokens` holds `t_{i+1}`. `cache` (from
    /// [`new_mtp_cache`](Self::new_mtp_cache)) drops positions at or after `pos` first.
    /// Logits for rows `first_logit_row..` go to `out.logits`.
    ///
    /// # Panics
    /// When the model has no MTP block (see [`Decoder::mtp`]).
    pub fn mtp_forward(
        &self,
        hidden: &[f32],
        tokens: &[TokenId],
        pos: usize,
        cache: &mut KvCache,
        first_logit_row: usize,
        out: &mut MtpOut,
    ) -> Result<(), ForwardError> {
        let mtp = self
            .mtp
            .as_ref()
            .expect("mtp_forward on a model without an MTP block");
        let embed = mtp.embed.as_ref().unwrap_or(&self.embed);
        if let Some(&id) = tokens.iter().find(|&&t| t >= embed.rows()) {
            let vocab = embed.rows();
            return Err(ForwardError::Token { id, vocab });
        }
        self.check_cache(&mtp.layer, pos, cache)?;
        cache.truncate(pos);
        let main = Main {
            config: &self.config,
            embed: &self.embed,
            embed_scale: self.embed_scale,
            lm_head: &self.lm_head,
        };
        let rows = Rows {
            hidden,
            tokens,
            pos,
            first_logit_row,
        };
        mtp.forward(&main, rows, cache, out);
        Ok(())
    }

    /// Logits for one token at position `pos`.
    pub fn forward_token(&self, token: TokenId, pos: usize, caches: &mut [KvCache]) -> Vec<f32> {
        let mut out = Vec::new();
        self.forward_into(&[token], pos, caches, 0, &mut out);
        out
    }

    /// Whether a reduced-expert forward ([`forward_experts`](Self::forward_experts)) is
    /// cheaper than a full one: some layer routes each token among several experts.
    pub fn routes_experts(&self) -> bool {
        self.layers.iter().any(|l| l.ffn.routes())
    }

    /// Logits for every position of `tokens` (placed at `pos..pos + len`).
    pub fn forward_batch(
        &self,
        tokens: &[TokenId],
        pos: usize,
        caches: &mut [KvCache],
    ) -> Vec<Vec<f32>> {
        self.forward_from(tokens, pos, caches, 0)
    }

    /// Prefill: logits only for rows `first_logit_row..tokens.len()` (the LM head over a
    /// 150k-word vocabulary is wasted on rows nobody samples from). Returns those rows.
    pub fn forward_from(
        &self,
        tokens: &[TokenId],
        pos: usize,
        caches: &mut [KvCache],
        first_logit_row: usize,
    ) -> Vec<Vec<f32>> {
        let mut flat = Vec::new();
        self.forward_into(tokens, pos, caches, first_logit_row, &mut flat);
        let v = self.vocab_size();
        flat.chunks_exact(v).map(|r| r.to_vec()).collect()
    }

    /// Core forward. Appends `tokens` to the caches at `pos` (dropping any cached positions at
    /// or after `pos`) and writes logits of rows `first_logit_row..` into `logits`
    /// (`[rows, vocab]`, resized; no allocation once warm).
    pub fn forward_into(
        &self,
        tokens: &[TokenId],
        pos: usize,
        caches: &mut [KvCache],
        first_logit_row: usize,
        logits: &mut Vec<f32>,
    ) {
        let seq = SeqBatch {
            tokens,
            pos,
            caches,
            first_logit_row,
            key: OWN_CACHES,
            tree: None,
        };
        self.forward_experts(seq, logits, Experts::All);
    }

    /// One sequence's forward with each mixture-of-experts layer at the `experts` budget:
    /// [`Experts::AtMost`] is a cheaper forward whose logits only draft
    /// (`speculative::ReducedExperts`); its keys and values are written as any forward's, and
    /// the drafter cuts them before the exact forward of the same positions.
    pub fn forward_experts(&self, seq: SeqBatch<'_>, logits: &mut Vec<f32>, experts: Experts) {
        self.forward_head(&mut [seq], logits, Head::Logits, None, experts);
    }

    /// Every layer over the `n` rows of `x` (`h`, `t`: scratch of the same size).
    fn layer_stack(
        &self,
        x: &mut [f32],
        h: &mut [f32],
        t: &mut [f32],
        n: usize,
        segs: &mut [Segment<'_>],
        experts: Experts,
    ) {
        let m = self.config.residual_multiplier;
        for (l, layer) in self.layers.iter().enumerate() {
            layer.forward(x, h, t, n, l, segs, m, experts);
        }
    }

    /// Checks what a forward pass would otherwise trip on (the token ids, the caches' count,
    /// shape and length against `pos`) and readies the caches: an empty one takes its layer's
    /// shape, positions at or after `pos` are dropped. Callers holding request data (the
    /// engine) call it first and refuse the sequence on an error.
    pub fn prepare_seq(&self, seq: &mut SeqBatch<'_>) -> Result<(), ForwardError> {
        let vocab = self.embed.rows();
        if let Some(&id) = seq.tokens.iter().find(|&&t| t >= vocab) {
            return Err(ForwardError::Token { id, vocab });
        }
        if let Some(tree) = seq.tree {
            tree.fits(seq.tokens.len())?;
            if !self.takes_trees() {
                return Err(ForwardError::NoTrees);
            }
        }
        self.prepare_caches(seq.pos, seq.caches)?;
        if seq.tree.is_some() && !seq.caches.iter().all(KvCache::rows_portable) {
            return Err(ForwardError::NoTrees);
        }
        Ok(())
    }

    /// Whether a forward may take its rows as a draft tree ([`SeqBatch::tree`]): every
    /// layer's attention places a row's branch for it, and the layers run in this process.
    pub fn takes_trees(&self) -> bool {
        self.stages.is_none() && self.layers.iter().all(|l| l.attn.takes_trees())
    }

    /// The cache half of [`prepare_seq`](Self::prepare_seq): `caches` (one per layer of this
    /// decoder) checked against `pos` and cut there.
    pub fn prepare_caches(&self, pos: usize, caches: &mut [KvCache]) -> Result<(), ForwardError> {
        if caches.len() != self.layers.len() {
            return Err(ForwardError::CacheCount {
                got: caches.len(),
                layers: self.layers.len(),
            });
        }
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            self.check_cache(layer, pos, cache)?;
        }
        caches.iter_mut().for_each(|c| c.truncate(pos));
        Ok(())
    }

    /// `cache` checked against `layer` and `pos` (shape, length, a bounded cache's window),
    /// emptied and given the decoder's format when `pos` is 0; not yet cut at `pos`.
    fn check_cache(
        &self,
        layer: &Layer,
        pos: usize,
        cache: &mut KvCache,
    ) -> Result<(), ForwardError> {
        layer
            .attn
            .state()
            .shape(cache)
            .map_err(|e| ForwardError::CacheShape(e.to_string()))?;
        if pos == 0 {
            cache.truncate(0);
            self.format_cache(layer, cache)?;
        }
        if cache.len() < pos {
            let len = cache.len();
            return Err(ForwardError::PastCache { pos, len });
        }
        if !cache.restorable(pos) {
            return Err(ForwardError::Unrestorable { pos });
        }
        Ok(())
    }

    /// One forward over several independent sequences (continuous batching): every matmul
    /// reads its weights once for all the sequences' rows; attention runs per sequence on its
    /// own caches. `logits` receives, sequence after sequence, the rows from each one's
    /// `first_logit_row` on. Each row equals what `forward_into` gives for its sequence alone.
    ///
    /// # Panics
    /// On a sequence [`prepare_seq`](Self::prepare_seq) refuses.
    pub fn forward_multi(&self, seqs: &mut [SeqBatch<'_>], logits: &mut Vec<f32>) {
        self.forward_head(seqs, logits, Head::Logits, None, Experts::All);
    }

    /// [`forward_multi`](Self::forward_multi) that also writes to `hidden` the final hidden
    /// states (after the output norm) of every row of every sequence, `[rows, hidden]` in
    /// order: what a drafter reading the model's states ([`crate::mtp`]) takes in.
    pub fn forward_multi_hidden(
        &self,
        seqs: &mut [SeqBatch<'_>],
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) {
        self.forward_head(seqs, logits, Head::Logits, Some(hidden), Experts::All);
    }

    /// The final hidden states — after the output norm, before the LM head (what llama.cpp
    /// pools into embeddings) — of rows `first_row..` of `tokens` placed at `pos`:
    /// `[rows, hidden]`.
    pub fn hidden_states(
        &self,
        tokens: &[TokenId],
        pos: usize,
        caches: &mut [KvCache],
        first_row: usize,
    ) -> Vec<f32> {
        let mut seq = [SeqBatch {
            tokens,
            pos,
            caches,
            first_logit_row: first_row,
            key: OWN_CACHES,
            tree: None,
        }];
        let mut out = Vec::new();
        self.forward_head(&mut seq, &mut out, Head::Hidden, None, Experts::All);
        out
    }

    /// The forward of `forward_multi`, ending in logits or in the normed hidden states.
    fn forward_head(
        &self,
        seqs: &mut [SeqBatch<'_>],
        out: &mut Vec<f32>,
        head: Head,
        all_hidden: Option<&mut Vec<f32>>,
        experts: Experts,
    ) {
        for seq in seqs.iter_mut() {
            if let Err(e) = self.prepare_seq(seq) {
                panic!("{e}");
            }
        }
        out.clear();
        if let Some(stages) = &self.stages {
            // The final states stay with the last stage: nothing for a drafter here.
            if let Some(all) = all_hidden {
                all.clear();
            }
            return self.forward_pipelined(&**stages, seqs, out, head);
        }
        let d = self.config.hidden_dim;
        let n: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Scratch { x, h, t, states } = &mut *guard;
        let (x, h, t) = (grow(x, n * d), grow(h, n * d), grow(t, n * d));
        self.embed_rows(seqs, x);
        self.run_layers(seqs, states, x, h, t, experts);
        if let Some(all) = all_hidden {
            all.clear();
            all.resize(n * d, 0.0);
            self.output_norm.forward(x, all);
        }
        self.head_rows(seqs, x, h, out, head);
    }

    /// The embeddings of `seqs`' tokens, back to back, into `x`.
    fn embed_rows(&self, seqs: &[SeqBatch<'_>], x: &mut [f32]) {
        let toks = seqs.iter().flat_map(|q| q.tokens.iter().copied());
        embed_tokens(&self.embed, self.embed_scale, toks, x);
    }

    /// This decoder's layers over `seqs`' rows in `x` (`h`, `t`: scratch of its size).
    fn run_layers(
        &self,
        seqs: &mut [SeqBatch<'_>],
        states: &mut Vec<PassState>,
        x: &mut [f32],
        h: &mut [f32],
        t: &mut [f32],
        experts: Experts,
    ) {
        let n = seqs.iter().map(|s| s.tokens.len()).sum();
        if states.len() < seqs.len() {
            states.resize_with(seqs.len(), PassState::default);
        }
        if let [seq] = seqs {
            // The common single-sequence step: its segment lives on the stack.
            let mut one = [segment(seq, &mut states[0])];
            self.layer_stack(x, h, t, n, &mut one, experts);
        } else {
            let mut segs: Vec<Segment<'_>> = seqs
                .iter_mut()
                .zip(states.iter_mut())
                .map(|(seq, state)| segment(seq, state))
                .collect();
            self.layer_stack(x, h, t, n, &mut segs, experts);
        }
    }

    /// Appends to `out` the head's output (logits or normed hidden states) of the rows of
    /// `seqs` from each one's `first_logit_row` on; `x`: the final hidden states of all their
    /// rows, `h`: scratch at least as large.
    fn head_rows(
        &self,
        seqs: &[SeqBatch<'_>],
        x: &[f32],
        h: &mut [f32],
        out: &mut Vec<f32>,
        head: Head,
    ) {
        let d = self.config.hidden_dim;
        let out_rows: usize = seqs
            .iter()
            .map(|q| q.tokens.len() - q.first_logit_row.min(q.tokens.len()))
            .sum();
        if out_rows == 0 {
            return;
        }
        // Gather the rows that need logits, normed, into the front of `h`.
        let (mut r0, mut w) = (0, 0);
        for seq in seqs.iter() {
            let len = seq.tokens.len();
            let first = seq.first_logit_row.min(len);
            let m = len - first;
            self.output_norm.forward(
                &x[(r0 + first) * d..(r0 + len) * d],
                &mut h[w * d..(w + m) * d],
            );
            r0 += len;
            w += m;
        }
        let start = out.len();
        if head == Head::Hidden {
            out.extend_from_slice(&h[..out_rows * d]);
            return;
        }
        out.resize(start + out_rows * self.vocab_size(), 0.0);
        let logits = &mut out[start..];
        self.lm_head.gemm(&h[..out_rows * d], out_rows, logits);
        self.config.finish_logits(logits);
    }
}

mod pipeline;
pub use pipeline::StageRows;
