//! Continuous batching (Orca, Yu et al. OSDI 2022): a fixed set of slots, each with its own
//! KV caches, advanced together one `Decoder::forward_multi` per step. A step carries a prompt
//! chunk for slots still prefilling and `[next token, draft...]` for decoding slots; requests
//! join and leave between steps.
//!
//! Speculation per slot drafts the continuation of the longest earlier match of the history
//! (`speculative::LongestMatchDrafter`), sized by `AdaptiveDraft` from the slot's acceptance
//! and measured verify costs, and checks it by sample-and-match (`speculative::verify`'s rule):
//! row `i` of a slot's logits is sampled exactly as plain decoding would sample it (same
//! sampler, same history, same RNG draws) and the draft token is kept only when it equals that
//! sample. Output is therefore identical to plain decoding, greedy or seeded.

use crate::decoder::{Decoder, SeqBatch};
use crate::generate::{GenerateParams, StopReason, StopRules};
use crate::sampling::{Sampler, SamplerConfig};
use crate::speculative::{AdaptiveDraft, LongestMatchDrafter, Speculation};
use ferrox_core::cache::KvCache;
use ferrox_tokenizer::{TokenId, Tokenizer};

#[derive(Debug, Clone)]
pub struct BatchParams {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
    pub stop: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BatchEvent {
    Text(String),
    Done { stop: StopReason, tokens: usize },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("no free slot")]
    Busy,
    #[error("empty prompt")]
    EmptyPrompt,
    #[error("prompt of {len} tokens does not fit the context of {ctx}")]
    TooLong { len: usize, ctx: usize },
}

/// Counters since the engine started.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchStats {
    pub steps: u64,
    /// Rows evaluated (all slots, all steps).
    pub rows: u64,
    pub drafted: u64,
    pub accepted: u64,
}

struct Job<'t> {
    id: u64,
    prompt: Vec<usize>,
    /// Prompt tokens in the cache.
    fed: usize,
    sampler: Sampler,
    rules: StopRules<'t>,
    /// Chosen but not yet in the cache.
    next: Option<usize>,
    /// This step's input rows and how many of them are draft tokens.
    input: Vec<usize>,
    n_draft: usize,
}

struct Slot<'t> {
    caches: Vec<KvCache>,
    /// Tokens in `caches`, in order.
    history: Vec<usize>,
    job: Option<Job<'t>>,
    /// Drafter and draft-length controller; kept across requests (costs are the model's).
    spec: Speculation,
}

/// Longest draft a slot may verify in one step.
const MAX_DRAFT: usize = 12;

pub struct BatchEngine<'m> {
    decoder: &'m Decoder,
    tokenizer: &'m Tokenizer,
    ctx_size: usize,
    slots: Vec<Slot<'m>>,
    logits: Vec<f32>,
    /// Prompt tokens one slot evaluates per step (bounds the latency others see).
    pub prefill_chunk: usize,
    /// Most draft tokens per slot and step; 0 disables speculation.
    pub max_draft: usize,
    /// Speculation stops once a step would carry this many rows (batching already
    /// amortizes the weight reads then).
    pub max_rows: usize,
    pub stats: BatchStats,
}

impl<'m> BatchEngine<'m> {
    pub fn new(decoder: &'m Decoder, tokenizer: &'m Tokenizer, slots: usize, ctx: usize) -> Self {
        let ctx_size = ctx.min(decoder.config.max_seq_len.max(1)).max(2);
        BatchEngine {
            decoder,
            tokenizer,
            ctx_size,
            slots: (0..slots.max(1))
                .map(|_| Slot {
                    caches: decoder.new_caches(),
                    history: Vec::new(),
                    job: None,
                    spec: Speculation::new(Box::new(LongestMatchDrafter::default()), MAX_DRAFT),
                })
                .collect(),
            logits: Vec::new(),
            prefill_chunk: 256,
            max_draft: MAX_DRAFT,
            max_rows: 16,
            stats: BatchStats::default(),
        }
    }

    /// Drafts exactly `len` tokens per slot and step (room allowing) instead of letting each
    /// slot's cost model choose: reproducible acceptance counts, whatever the machine's load.
    pub fn fix_draft_len(&mut self, len: usize) {
        self.max_draft = len;
        for s in &mut self.slots {
            s.spec.adaptive = AdaptiveDraft::fixed(len);
        }
    }

    pub fn ctx_size(&self) -> usize {
        self.ctx_size
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
        if prompt.is_empty() {
            return Err(AdmitError::EmptyPrompt);
        }
        if prompt.len() >= self.ctx_size {
            return Err(AdmitError::TooLong {
                len: prompt.len(),
                ctx: self.ctx_size,
            });
        }
        let common = |s: &Slot| {
            s.history
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let slot = self
            .slots
            .iter_mut()
            .filter(|s| s.job.is_none())
            .max_by_key(|s| common(s))
            .ok_or(AdmitError::Busy)?;
        // The last prompt token is always evaluated: its logits are the first sample's.
        let fed = common(slot).min(prompt.len() - 1);
        slot.history.truncate(fed);
        slot.job = Some(Job {
            id,
            prompt: prompt.to_vec(),
            fed,
            sampler: Sampler::new(p.sampler.clone()),
            rules: StopRules::new(
                self.tokenizer,
                &GenerateParams {
                    max_tokens: p.max_tokens,
                    stop: p.stop.clone(),
                    ignore_eog: false,
                },
            ),
            next: None,
            input: Vec::new(),
            n_draft: 0,
        });
        Ok(())
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
    pub fn step(&mut self, mut on: impl FnMut(u64, BatchEvent)) {
        let ctx = self.ctx_size;
        let decoding = self
            .slots
            .iter()
            .filter(|s| s.job.as_ref().is_some_and(|j| j.next.is_some()))
            .count();
        let mut rows = 0;
        for slot in &mut self.slots {
            let Some(job) = slot.job.as_mut() else {
                continue;
            };
            job.input.clear();
            job.n_draft = 0;
            match job.next {
                None => {
                    let end = (job.fed + self.prefill_chunk.max(1)).min(job.prompt.len());
                    job.input.extend_from_slice(&job.prompt[job.fed..end]);
                }
                Some(next) => {
                    if slot.history.len() + 1 > ctx {
                        let text = job.rules.finish();
                        finish(&mut slot.job, StopReason::Context, text, &mut on);
                        continue;
                    }
                    job.input.push(next);
                    let budget = job.rules.remaining();
                    let room = ctx - slot.history.len() - 1;
                    let share = self.max_rows.saturating_sub(decoding) / decoding.max(1);
                    let k = self.max_draft.min(budget).min(room).min(share);
                    if k > 0 {
                        slot.history.push(next);
                        let d = slot.spec.draft(&slot.history, k);
                        slot.history.pop();
                        job.n_draft = d.len();
                        job.input.extend_from_slice(&d);
                    }
                }
            }
            rows += job.input.len();
        }
        if rows == 0 {
            return;
        }
        let mut seqs: Vec<SeqBatch<'_>> = self
            .slots
            .iter_mut()
            .filter_map(|s| {
                let job = s.job.as_ref()?;
                let pos = s.history.len();
                let first = match job.next {
                    // Prefill: only the prompt's last row needs logits.
                    None if pos + job.input.len() == job.prompt.len() => job.input.len() - 1,
                    None => job.input.len(),
                    Some(_) => 0,
                };
                Some(SeqBatch {
                    tokens: &job.input,
                    pos,
                    caches: &mut s.caches,
                    first_logit_row: first,
                })
            })
            .collect();
        let alone = seqs.len() == 1;
        let t = std::time::Instant::now();
        self.decoder.forward_multi(&mut seqs, &mut self.logits);
        let secs = t.elapsed().as_secs_f64();
        drop(seqs);
        self.stats.steps += 1;
        self.stats.rows += rows as u64;

        let vocab = self.decoder.vocab_size();
        let mut at = 0;
        for slot in &mut self.slots {
            let Some(job) = slot.job.as_mut() else {
                continue;
            };
            slot.history.extend_from_slice(&job.input);
            let n_rows = match job.next {
                None => {
                    job.fed = slot.history.len();
                    usize::from(job.fed == job.prompt.len())
                }
                Some(_) => job.input.len(),
            };
            let logits = &self.logits[at * vocab..(at + n_rows) * vocab];
            at += n_rows;
            if n_rows == 0 {
                continue;
            }
            // Row i is sampled after `history[..base + i]`: the whole prompt for a finished
            // prefill; `[.., next, d1..di]` for a decode step (history holds every input
            // token until the drafts are checked).
            let base = match job.next {
                None => slot.history.len(),
                Some(_) => slot.history.len() - job.input.len() + 1,
            };
            self.stats.drafted += job.n_draft as u64;
            let decoding = job.next.is_some();
            let mut outcome = None;
            let mut accepted = 0;
            for (i, row) in logits.chunks_exact(vocab).enumerate() {
                let tok = job.sampler.sample(row, &slot.history[..base + i]);
                let (text, stop) = job.rules.push(tok);
                if !text.is_empty() {
                    on(job.id, BatchEvent::Text(text));
                }
                if stop.is_some() {
                    outcome = stop;
                    slot.history.truncate(base + i);
                    break;
                }
                let drafted = job.input.get(i + 1).filter(|_| i < job.n_draft);
                if drafted == Some(&tok) {
                    accepted += 1;
                    continue;
                }
                job.next = Some(tok);
                slot.history.truncate(base + i);
                break;
            }
            self.stats.accepted += accepted as u64;
            if decoding {
                slot.spec.adaptive.record(job.n_draft, accepted);
                // A verify's cost is only this slot's when it ran alone.
                if alone {
                    slot.spec.record_cost(job.input.len(), secs);
                }
            }
            if let Some(stop) = outcome {
                let text = if stop == StopReason::StopString {
                    String::new()
                } else {
                    job.rules.finish()
                };
                finish(&mut slot.job, stop, text, &mut on);
            }
            let keep = slot.history.len();
            slot.caches.iter_mut().for_each(|c| c.truncate(keep));
        }
    }
}

fn finish(
    job: &mut Option<Job<'_>>,
    stop: StopReason,
    text: String,
    on: &mut impl FnMut(u64, BatchEvent),
) {
    if let Some(j) = job.take() {
        if !text.is_empty() {
            on(j.id, BatchEvent::Text(text));
        }
        on(
            j.id,
            BatchEvent::Done {
                stop,
                tokens: j.rules.tokens,
            },
        );
    }
}
