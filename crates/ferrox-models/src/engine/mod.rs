//! The engine: the one decode loop. Continuous batching (Orca, Yu et al. OSDI 2022): a fixed
//! set of slots, each with its own KV caches, advanced together one `Decoder::forward_multi`
//! per step. A step carries a prompt chunk for slots still prefilling and `[next token,
//! draft...]` for decoding slots; requests join and leave between steps. A one-slot engine is
//! `generate::Session` (the CLI) and, through it, the seed's `speculative::speculative_decode`;
//! the server runs many slots.
//!
//! Each step has three phases: plan (per slot: the prompt chunk, or the next token with a draft
//! sized by the slot's `Speculation`), one forward for all slots, commit (per slot:
//! `speculative::verify_tree` samples every row exactly as plain decoding would and keeps draft
//! tokens that equal the sample, each committed token goes through the stop rules, rejected
//! positions are cut). Output is therefore identical to plain decoding, greedy or seeded.
//! Prefix reuse (a request lands in the free slot whose cache shares the longest prefix with
//! its prompt; a longer prefix another slot holds is copied, and so is one the prefix cache
//! kept from any finished request), chunked prefill, the context limit and cache truncation
//! each live in one place.

mod guard;
#[cfg(test)]
mod mtp_tests;
mod prefix;
mod prefix_block;
pub mod prefix_disk;
pub(crate) mod sink;
mod slot;
pub mod slot_file;
mod stats;
mod stop;

pub use guard::Fault;
pub use prefix::PrefixCache;
pub use stop::{GenerateParams, StopReason};

use crate::decoder::{Decoder, SeqBatch};
use crate::sampling::{Sampler, SamplerConfig, TokenLogprob};
use crate::speculative::{
    AdaptiveDraft, DraftModel, LongestMatchDrafter, MtpDrafter, RecallDrafter, RecallIndex,
    SharedRecall, Speculation,
};
use crate::TokenId;
use ferrox_core::cache::KvCache;
use ferrox_tokenizer::Tokenizer;
use sink::{Events, Sink};
use slot::{Committed, Fork, Job, Slot};
pub use stats::{BatchStats, DrafterCount};
use std::time::Instant;
use stop::StopRules;

/// One generation of the batch: how its tokens are drawn and reported, and the limits it
/// shares with a single-slot [`crate::generate::Session`] (length, stop strings, grammar,
/// special tokens).
#[derive(Debug, Clone, Default)]
pub struct BatchParams {
    pub sampler: SamplerConfig,
    /// Report each committed token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    pub limits: GenerateParams,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BatchEvent {
    /// A committed token's log-probability (before the text it releases, which stop strings
    /// may hold back).
    Logprob(TokenLogprob),
    Text(String),
    /// Why the generation failed (its grammar could not continue); `Done` follows.
    Error(String),
    Done {
        stop: StopReason,
        tokens: usize,
        /// With `StopReason::StopString`: which of the request's stop strings (its index).
        stop_string: Option<usize>,
        /// Prompt tokens whose keys and values were reused rather than evaluated.
        cached_tokens: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("no free slot")]
    Busy,
    #[error("empty prompt")]
    EmptyPrompt,
    #[error("prompt of {len} tokens does not fit the context of {ctx}")]
    TooLong { len: usize, ctx: usize },
    #[error("token id {id} is outside the vocabulary ({vocab} tokens)")]
    BadToken { id: TokenId, vocab: usize },
}

/// Longest draft a server slot may verify in one step.
const MAX_DRAFT: usize = 12;

/// Tokens of earlier generations (prompt tails and outputs) a server engine's drafters recall
/// by default: ~4 MB with the index, a few hundred agent turns.
pub const DEFAULT_RECALL_TOKENS: usize = 1 << 18;

/// Most cached positions re-evaluated on a slot's reuse to keep its drafter in step.
const RESUME_LAG: usize = 1;

/// Fewest prompt tokens worth copying from another slot rather than evaluating.
const FORK_MIN: usize = 16;

pub struct BatchEngine<'m> {
    decoder: &'m Decoder,
    tokenizer: Option<&'m Tokenizer>,
    ctx_size: usize,
    slots: Vec<Slot<'m>>,
    /// Every step's logits, reused.
    logits: Vec<f32>,
    /// Every step's final hidden states, all rows, when a slot's drafter reads them.
    hidden: Vec<f32>,
    /// Prompt tokens one slot evaluates per step (bounds the latency others see).
    pub prefill_chunk: usize,
    /// Most draft tokens per slot and step; 0 disables speculation.
    pub max_draft: usize,
    /// Speculation stops once a step would carry this many rows (batching already
    /// amortizes the weight reads then).
    pub max_rows: usize,
    pub stats: BatchStats,
    /// Draft tokens proposed and accepted, per drafter.
    pub drafters: Vec<DrafterCount>,
    /// Test hook (`inject_fault`): sequences on which the forward panics.
    fault: Option<guard::Fault>,
    /// Finished requests' keys and values, for any later request that shares their prefix.
    prefix: PrefixCache,
}

impl<'m> BatchEngine<'m> {
    /// A server engine: `slots` slots of `ctx` tokens each, each drafting by longest match in
    /// its context or from earlier generations (`set_recall`), whichever matches longer.
    pub fn new(decoder: &'m Decoder, tokenizer: &'m Tokenizer, slots: usize, ctx: usize) -> Self {
        let ctx_size = ctx.min(decoder.config.max_seq_len.max(1)).max(2);
        let recall = Self::recall_store(DEFAULT_RECALL_TOKENS);
        let slots = (0..slots.max(1))
            .map(|_| {
                let drafter = Box::new(MtpDrafter::new(Box::new(RecallDrafter::new(
                    recall.clone(),
                ))));
                Slot::new(
                    decoder.new_caches(),
                    Some(Speculation::new(drafter, MAX_DRAFT)),
                )
            })
            .collect();
        BatchEngine {
            prefill_chunk: 256,
            max_draft: MAX_DRAFT,
            max_rows: 16,
            ..Self::with_slots(decoder, Some(tokenizer), ctx_size, slots)
        }
    }

    /// One slot of exactly `ctx_size` tokens, the whole prompt in one forward and drafts as
    /// long as the slot's `Speculation` asks (none until one is set): a lone sequence.
    pub(crate) fn single(
        decoder: &'m Decoder,
        tokenizer: Option<&'m Tokenizer>,
        ctx_size: usize,
    ) -> Self {
        let slot = Slot::new(decoder.new_caches(), None);
        Self::with_slots(decoder, tokenizer, ctx_size, vec![slot])
    }

    /// An engine without limits on prefill chunks, drafts or rows per step.
    fn with_slots(
        decoder: &'m Decoder,
        tokenizer: Option<&'m Tokenizer>,
        ctx_size: usize,
        mut slots: Vec<Slot<'m>>,
    ) -> Self {
        for (i, s) in slots.iter_mut().enumerate() {
            s.key = i as u64;
        }
        BatchEngine {
            decoder,
            tokenizer,
            ctx_size,
            slots,
            logits: Vec::new(),
            hidden: Vec::new(),
            prefill_chunk: usize::MAX,
            max_draft: usize::MAX,
            max_rows: usize::MAX,
            stats: BatchStats::default(),
            drafters: Vec::new(),
            fault: None,
            prefix: PrefixCache::new(0),
        }
    }

    /// Drafts exactly `len` tokens per slot and step (room allowing) instead of letting each
    /// slot's cost model choose: reproducible acceptance counts, whatever the machine's load.
    pub fn fix_draft_len(&mut self, len: usize) {
        self.max_draft = len;
        for spec in self.slots.iter_mut().filter_map(|s| s.spec.as_mut()) {
            spec.adaptive = AdaptiveDraft::fixed(len);
        }
    }

    fn recall_store(tokens: usize) -> SharedRecall {
        SharedRecall::new(RecallIndex::new(tokens).into())
    }

    /// Keeps up to `tokens` of finished generations (their prompts' tails and outputs) for
    /// every slot's drafter to recall (0: each drafts from its own context only); the store
    /// starts empty.
    pub fn set_recall(&mut self, tokens: usize) {
        let recall = Self::recall_store(tokens);
        for spec in self.slots.iter_mut().filter_map(|s| s.spec.as_mut()) {
            spec.drafter = Box::new(MtpDrafter::new(Box::new(RecallDrafter::new(
                recall.clone(),
            ))));
        }
    }

    /// Lets `model` draft for every slot, beside the drafter the slot has (after
    /// [`set_recall`](Self::set_recall), which replaces drafters).
    pub fn set_draft_model(&mut self, model: &DraftModel) {
        for spec in self.slots.iter_mut().filter_map(|s| s.spec.as_mut()) {
            let placeholder = Box::new(LongestMatchDrafter::new(2));
            let lookup = std::mem::replace(&mut spec.drafter, placeholder);
            spec.drafter = Box::new(model.drafter(lookup));
        }
    }

    pub fn ctx_size(&self) -> usize {
        self.ctx_size
    }

    /// Keeps up to `bytes` of finished requests' keys and values for later prompts that share
    /// their prefix (0: off, the default).
    /// Stays off when other processes hold some layers' caches (pipeline parallelism): they
    /// could not follow a restore.
    pub fn set_prefix_cache(&mut self, bytes: usize) {
        let bytes = if self.decoder.caches_local() {
            bytes
        } else {
            0
        };
        self.prefix = PrefixCache::new(bytes);
    }

    /// Fills the prefix cache from `disk` (within its budget) and writes every prefix it takes
    /// from now on there too; the blocks loaded. Nothing when the cache is off.
    pub fn set_prefix_disk(&mut self, disk: &prefix_disk::PrefixDisk) -> usize {
        if !self.prefix.enabled() {
            return 0;
        }
        let loaded = disk
            .load(self.prefix.budget())
            .into_iter()
            .filter(|b| self.prefix.insert_block(&b.tokens, b.rows.clone()))
            .count();
        self.prefix.set_disk(disk.sink());
        loaded
    }

    /// Bytes the prefix cache holds.
    pub fn prefix_cache_bytes(&self) -> usize {
        self.prefix.bytes()
    }

    /// Bytes the slots' caches hold now.
    pub fn slot_cache_bytes(&self) -> usize {
        let caches = self.slots.iter().flat_map(|s| &s.caches);
        caches.map(|c| c.stored_bytes()).sum()
    }

    /// Positions the slots' caches hold now (for the KV-cache utilisation).
    pub fn cached_positions(&self) -> usize {
        self.slots.iter().map(|s| s.history.len()).sum()
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.job.is_some()).count()
    }

    /// Starts generation `id` in the free slot whose cache shares the longest prefix with
    /// `prompt` (a chat's next turn lands where its previous turn left its keys and values).
    pub fn admit(
        &mut self,
        id: u64,
        prompt: &[TokenId],
        p: &BatchParams,
    ) -> Result<(), AdmitError> {
        let slot = self.pick_slot(prompt)?;
        self.start(slot, id, prompt, Sampler::new(p.sampler.clone()), &p.limits);
        let fork = self.fork_source(slot, prompt);
        if let Some(job) = self.slots[slot].job.as_mut() {
            job.logprobs = p.logprobs;
            job.fork = fork;
        }
        Ok(())
    }

    /// The free slot `prompt` should run in.
    pub(crate) fn pick_slot(&self, prompt: &[TokenId]) -> Result<usize, AdmitError> {
        if prompt.is_empty() {
            return Err(AdmitError::EmptyPrompt);
        }
        if prompt.len() >= self.ctx_size {
            return Err(AdmitError::TooLong {
                len: prompt.len(),
                ctx: self.ctx_size,
            });
        }
        let vocab = self.decoder.embed.rows();
        if let Some(&id) = prompt.iter().find(|&&t| t >= vocab) {
            return Err(AdmitError::BadToken { id, vocab });
        }
        (0..self.slots.len())
            .filter(|&i| self.slots[i].job.is_none())
            .max_by_key(|&i| self.slots[i].common_prefix(prompt))
            .ok_or(AdmitError::Busy)
    }

    /// Starts generation `id` in free slot `slot` (from [`pick_slot`](Self::pick_slot)),
    /// keeping the cached prefix it shares with `prompt`.
    pub(crate) fn start(
        &mut self,
        slot: usize,
        id: u64,
        prompt: &[TokenId],
        sampler: Sampler,
        limits: &GenerateParams,
    ) {
        let s = &mut self.slots[slot];
        // What the slot held goes to the prefix cache before the new prompt cuts it.
        if !s.stashed && s.job.is_none() {
            self.prefix.insert(&s.history, &s.caches);
        }
        s.stashed = false;
        // The last prompt token is always evaluated: its logits are the first sample's.
        let own = s.common_prefix(prompt).min(prompt.len() - 1);
        let mut fed = own;
        // A drafter with per-position state of its own (an MTP block's pairs lag the model's
        // cache by a position) stays in step for the price of a position re-evaluated.
        let limit = s
            .spec
            .as_ref()
            .map_or(usize::MAX, |p| p.drafter.resume_limit());
        if own.saturating_sub(limit) <= RESUME_LAG {
            fed = own.min(limit);
        }
        if self.prefix.enabled() {
            let path = self.prefix.lookup(&prompt[..prompt.len() - 1]);
            let len = path.len() * prefix_block::BLOCK;
            if len > own {
                // Keep the slot's own whole blocks, append the rest from the tree.
                let keep = fed / prefix_block::BLOCK;
                s.truncate(keep * prefix_block::BLOCK);
                if self.prefix.restore(&path, keep, &mut s.caches) {
                    s.history = self.prefix.tokens(&path).collect();
                    fed = len;
                }
            }
        }
        s.truncate(fed);
        s.job = Some(Job {
            id,
            prompt: prompt.to_vec(),
            fed,
            sampler,
            constraint: limits.constraint.clone(),
            rules: StopRules::new(self.tokenizer, limits),
            next: None,
            input: Vec::new(),
            parents: Vec::new(),
            kept: Vec::new(),
            first_logit_row: 0,
            prompt_tokens: prompt.len() - fed,
            prompt_secs: 0.0,
            logprobs: None,
            fork: None,
        });
    }

    /// Another slot whose prompt shares a longer prefix with `prompt` than slot `slot`'s cache
    /// does (by at least [`FORK_MIN`] tokens): `n` choices of one request, or concurrent
    /// requests with one long system prompt, evaluate that prefix once.
    fn fork_source(&self, slot: usize, prompt: &[TokenId]) -> Option<Fork> {
        // Another process's caches of the layers it runs could not follow the copy.
        if !self.decoder.caches_local() {
            return None;
        }
        let own = self.slots[slot].history.len();
        let common = |a: &[TokenId]| a.iter().zip(prompt).take_while(|(x, y)| x == y).count();
        (0..self.slots.len())
            .filter(|&i| i != slot)
            .filter_map(|i| {
                let s = &self.slots[i];
                let held = common(&s.history);
                let coming = s.job.as_ref().map_or(0, |j| common(&j.prompt));
                // The last prompt token is always evaluated (its logits are the first sample's).
                let len = held.max(coming).min(prompt.len() - 1);
                (len >= own + FORK_MIN).then_some(Fork { from: i, len })
            })
            .max_by_key(|f| f.len)
    }

    /// Forks whose prefix is now in its source slot copy it; a source that will not hold it
    /// (cancelled, or reused for another prompt) lets the fork prefill by itself.
    fn resolve_forks(&mut self) {
        for i in 0..self.slots.len() {
            let Some(f) = self.slots[i].job.as_ref().and_then(|j| j.fork) else {
                continue;
            };
            let prompt = &self.slots[i]
                .job
                .as_ref()
                .map_or(&[][..], |j| &j.prompt[..f.len]);
            let src = &self.slots[f.from];
            let held = src.common_prefix(prompt);
            let coming = src.job.as_ref().is_some_and(|j| {
                j.next.is_none() && j.prompt.len() >= f.len && j.prompt[..f.len] == prompt[..]
            });
            let ready = held >= f.len;
            if !ready && coming {
                continue;
            }
            let copied = ready.then(|| (src.caches.clone(), src.history.clone()));
            let dst = &mut self.slots[i];
            if let Some((caches, history)) = copied {
                dst.copy_prefix(&caches, &history, f.len);
            }
            let fed = dst.history.len();
            if let Some(job) = dst.job.as_mut() {
                job.fork = None;
                job.fed = fed;
                job.prompt_tokens = job.prompt.len() - fed;
            }
        }
    }

    /// Drops generation `id` (the client went away); its slot is free after this.
    pub fn cancel(&mut self, id: u64) -> bool {
        match self
            .slots
            .iter_mut()
            .find(|s| s.job.as_ref().is_some_and(|j| j.id == id))
        {
            Some(s) => {
                s.job = None;
                true
            }
            None => false,
        }
    }

    /// One batched forward for every active generation; reports text and completions.
    pub fn step(&mut self, on: impl FnMut(u64, BatchEvent)) {
        self.step_with(&mut Events(on));
    }

    /// The step: plan every slot's rows, one forward, commit every slot's rows.
    pub(crate) fn step_with(&mut self, sink: &mut impl Sink) {
        self.resolve_forks();
        let decoding = self
            .slots
            .iter()
            .filter(|s| s.job.as_ref().is_some_and(|j| j.next.is_some()))
            .count();
        let share = self.max_rows.saturating_sub(decoding) / decoding.max(1);
        let max_draft = self.max_draft.min(share);
        let mut rows = 0;
        let (ctx, chunk, dec) = (self.ctx_size, self.prefill_chunk, self.decoder);
        for slot in &mut self.slots {
            rows += guard::per_slot(slot, sink, 0, |s, sink| {
                s.plan(dec, ctx, chunk, max_draft, sink)
            });
        }
        // A request's bad input or a panic on it fails that request only (`guard`).
        if rows == 0 || !self.refuse_bad_input(sink) {
            return;
        }
        let (secs, alone) = self.forward_isolated(sink);
        self.stats.steps += 1;
        self.stats.rows += rows as u64;
        let vocab = self.decoder.vocab_size();
        let d = self.decoder.config.hidden_dim;
        let (mut at, mut row) = (0, 0);
        for slot in &mut self.slots {
            let n = slot.logit_rows();
            let logits = &self.logits[at * vocab..(at + n) * vocab];
            at += n;
            let (pos, rows) = (slot.history.len(), slot.input_rows());
            let hidden = self.hidden.get(row * d..(row + rows) * d).unwrap_or(&[]);
            row += rows;
            let c = guard::per_slot(slot, sink, Committed::none(), |s, sink| {
                let c = s.commit(logits, vocab, secs, alone, sink);
                if !hidden.is_empty() {
                    s.observe(dec, pos, hidden);
                }
                c
            });
            self.stats.drafted += c.drafted as u64;
            self.stats.accepted += c.accepted as u64;
            if c.drafted > 0 {
                let (d, a) = (c.drafted as u64, c.accepted as u64);
                DrafterCount::book(&mut self.drafters, c.drafter, d, a);
            }
            self.stats.masks += c.masks;
            self.stats.mask_nanos += c.mask_time.as_nanos() as u64;
        }
        self.stash_finished();
    }

    /// With the prefix cache on disk, a finished request's positions go to the tree (and so
    /// to disk) now rather than when its slot is next used: a restart then finds them.
    fn stash_finished(&mut self) {
        if !self.prefix.persisting() {
            return;
        }
        for s in self
            .slots
            .iter_mut()
            .filter(|s| s.job.is_none() && !s.stashed)
        {
            self.prefix.insert(&s.history, &s.caches);
            s.stashed = true;
        }
    }

    /// The batched forward of every planned slot into `self.logits`; its time and whether one
    /// slot had it to itself.
    fn forward(&mut self) -> (f64, bool) {
        let t = Instant::now();
        let alone = self.slots.iter().filter(|s| s.feeds()).count() == 1;
        let fault = self.fault;
        let want_hidden =
            self.decoder.mtp.is_some() && self.slots.iter().any(|s| s.feeds() && s.wants_hidden());
        self.hidden.clear();
        let dec = self.decoder;
        let (logits, hidden) = (&mut self.logits, &mut self.hidden);
        let mut run = |seqs: &mut [SeqBatch<'_>]| match want_hidden {
            true => dec.forward_multi_hidden(seqs, logits, hidden),
            false => dec.forward_multi(seqs, logits),
        };
        if alone {
            // The common lone-sequence step: no list to allocate.
            let seq = self.slots.iter_mut().find_map(Slot::seq);
            let mut one: [SeqBatch<'_>; 1] = [seq.expect("one active slot")];
            run(&mut one);
            guard::injected(fault, &one);
        } else {
            let mut seqs: Vec<SeqBatch<'_>> = self.slots.iter_mut().filter_map(Slot::seq).collect();
            run(&mut seqs);
            guard::injected(fault, &seqs);
        }
        (t.elapsed().as_secs_f64(), alone)
    }

    /// Slot `slot`'s speculation (a one-slot view sets and reads it).
    pub(crate) fn speculation_mut(&mut self, slot: usize) -> &mut Option<Speculation> {
        &mut self.slots[slot].spec
    }

    pub(crate) fn speculation(&self, slot: usize) -> Option<&Speculation> {
        self.slots[slot].spec.as_ref()
    }

    /// Tokens in slot `slot`'s cache.
    pub(crate) fn history(&self, slot: usize) -> &[usize] {
        &self.slots[slot].history
    }

    /// Empties slot `slot`'s cache.
    pub(crate) fn reset(&mut self, slot: usize) {
        self.slots[slot].truncate(0);
    }

    /// Exchanges slot `slot`'s caches with `caches` (a caller's caches run in the slot, then a
    /// second exchange hands them back) and forgets what the slot's history said they held.
    pub(crate) fn swap_caches(&mut self, slot: usize, caches: &mut [KvCache]) {
        let s = &mut self.slots[slot];
        // As many as the caller's, so a wrong count still trips the decoder's check.
        s.caches.resize_with(caches.len(), || KvCache::new(0, 0));
        s.caches
            .iter_mut()
            .zip(caches)
            .for_each(|(a, b)| std::mem::swap(a, b));
        s.history.clear();
    }
}
