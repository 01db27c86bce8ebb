//! One slot of the engine: its KV caches and the tokens they hold, the generation running in
//! it, and the three phases of a step for it: plan the rows to feed, lend them to the batched
//! forward, commit what the logits say.

use super::sink::{JobEnd, Sink};
use super::stop::{StopReason, StopRules};
use crate::decoder::{Decoder, SeqBatch};
use crate::sampling::{logprob, Sampler, TokenLogprob};
use crate::speculative::{verify_rows_constrained, Observation, Speculation};
use crate::structured::Constraint;
use crate::TokenId;
use ferrox_core::cache::KvCache;
use std::time::Duration;

pub(super) struct Job<'t> {
    pub id: u64,
    pub prompt: Vec<usize>,
    /// Prompt tokens in the cache.
    pub fed: usize,
    pub sampler: Sampler,
    /// The grammar the output must follow (structured output).
    pub constraint: Option<Constraint>,
    pub rules: StopRules<'t>,
    /// Chosen (sampled, counted, streamed) but not yet in the cache.
    pub next: Option<usize>,
    /// This step's input rows: a prompt chunk, or `[next, draft...]`.
    pub input: Vec<usize>,
    /// Rows of `input` before the first one that needs logits.
    pub first_logit_row: usize,
    /// Prompt tokens evaluated and the forward time they took.
    pub prompt_tokens: usize,
    pub prompt_secs: f64,
    /// Alternatives to report with each committed token's log-probability; `None`: none.
    pub logprobs: Option<usize>,
    /// Waiting to copy this many prompt tokens' keys and values from another slot instead of
    /// evaluating them (see `BatchEngine::resolve_forks`).
    pub fork: Option<Fork>,
}

/// A prompt prefix another slot holds (or is prefilling): `len` tokens from slot `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fork {
    pub from: usize,
    pub len: usize,
}

pub(super) struct Slot<'t> {
    pub caches: Vec<KvCache>,
    /// Tokens in `caches`, in order.
    pub history: Vec<TokenId>,
    pub job: Option<Job<'t>>,
    /// Drafter and draft-length controller; kept across requests (costs are the model's).
    pub spec: Option<Speculation>,
    /// `history` is already in the engine's prefix cache.
    pub stashed: bool,
    /// The slot's index: the name of its caches where other processes hold some of them.
    pub key: u64,
}

/// What one slot's rows of a step decided, for the engine's counters.
pub(super) struct Committed {
    /// The drafter whose draft was verified (`Drafter::source`; empty with no draft).
    pub drafter: &'static str,
    pub drafted: usize,
    pub accepted: usize,
    /// Grammar masks this step computed and their time.
    pub masks: u64,
    pub mask_time: Duration,
}

impl Committed {
    /// Nothing: no draft, no masks (also what a failed commit counted).
    pub fn none() -> Committed {
        Committed {
            drafter: "",
            drafted: 0,
            accepted: 0,
            masks: 0,
            mask_time: Duration::ZERO,
        }
    }
}

impl<'t> Slot<'t> {
    /// A slot over `caches`, made bounded: a recurrent layer keeps only the rows a cut inside
    /// its last forward needs (`KvCache::forget_before`), not the whole context's.
    pub fn new(mut caches: Vec<KvCache>, spec: Option<Speculation>) -> Self {
        caches.iter_mut().for_each(|c| c.set_bounded(true));
        Slot {
            caches,
            history: Vec::new(),
            job: None,
            spec,
            stashed: false,
            key: 0,
        }
    }

    /// Tokens of the cached history that `prompt` starts with, 0 when the caches cannot be cut
    /// back to where the reuse would cut them (before a bounded recurrent layer's window).
    pub fn common_prefix(&self, prompt: &[TokenId]) -> usize {
        let n = self
            .history
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // `BatchEngine::start` always evaluates the prompt's last token.
        let cut = n.min(prompt.len().saturating_sub(1));
        if self.caches.iter().all(|c| c.restorable(cut)) {
            n
        } else {
            0
        }
    }

    /// Takes `len` positions of keys and values (and their tokens) from `src` instead of
    /// evaluating them: a fork of another slot's prompt prefix.
    pub fn copy_prefix(&mut self, src_caches: &[KvCache], src_history: &[TokenId], len: usize) {
        self.caches = src_caches.to_vec();
        self.history = src_history.to_vec();
        self.truncate(len);
    }

    /// The one place the cache loses positions: prefix reuse, rejected drafts and stops all
    /// cut history and caches together, so they always agree.
    pub fn truncate(&mut self, len: usize) {
        // A cut a bounded cache cannot serve is a cut to 0 for all of them.
        let len = if self.caches.iter().all(|c| c.restorable(len)) {
            len
        } else {
            0
        };
        self.history.truncate(len);
        self.caches.iter_mut().for_each(|c| c.truncate(len));
    }

    /// Chooses this step's input rows; returns how many. A prefill takes the next prompt chunk
    /// of at most `chunk` tokens; a decode step the next token plus a draft of at most
    /// `max_draft` tokens (fewer when the budget or the context has less room). A full context
    /// ends the generation here.
    pub fn plan(
        &mut self,
        dec: &Decoder,
        ctx: usize,
        chunk: usize,
        max_draft: usize,
        sink: &mut impl Sink,
    ) -> usize {
        let Some(job) = self.job.as_mut() else {
            return 0;
        };
        job.input.clear();
        if job.fork.is_some() {
            // Its prefix is still being prefilled elsewhere.
            return 0;
        }
        let Some(next) = job.next else {
            let end = job.fed.saturating_add(chunk.max(1)).min(job.prompt.len());
            job.input.extend_from_slice(&job.prompt[job.fed..end]);
            // Only the prompt's last row is sampled from: the LM head skips the others.
            job.first_logit_row = job.input.len() - usize::from(end == job.prompt.len());
            return job.input.len();
        };
        if self.history.len() + 1 > ctx {
            self.finish(StopReason::Context, sink);
            return 0;
        }
        job.input.push(next);
        job.first_logit_row = 0;
        if let Some(spec) = self.spec.as_mut() {
            let room = max_draft
                .min(job.rules.remaining())
                .min(ctx - self.history.len() - 1);
            // The drafter continues the history through the token being fed.
            self.history.push(next);
            spec.draft_into(dec, &mut self.caches, &self.history, room, &mut job.input);
            self.history.pop();
            // A draft token the grammar forbids cannot be accepted: no row for it or after it.
            // (The fed token is already in the grammar's state.)
            if let Some(c) = job.constraint.as_mut() {
                let valid = c.valid_prefix(&job.input[1..]);
                job.input.truncate(1 + valid);
            }
        }
        job.input.len()
    }

    /// Whether this slot has rows in the step's forward.
    pub fn feeds(&self) -> bool {
        self.job.as_ref().is_some_and(|j| !j.input.is_empty())
    }

    /// This slot's part of the batched forward.
    pub fn seq(&mut self) -> Option<SeqBatch<'_>> {
        let job = self.job.as_ref().filter(|j| !j.input.is_empty())?;
        Some(SeqBatch {
            tokens: &job.input,
            pos: self.history.len(),
            caches: &mut self.caches,
            first_logit_row: job.first_logit_row,
            key: self.key,
            tree: None,
        })
    }

    /// Rows this slot feeds to the step's forward.
    pub fn input_rows(&self) -> usize {
        self.job.as_ref().map_or(0, |j| j.input.len())
    }

    /// Whether this slot's drafter reads the model's final hidden states.
    pub fn wants_hidden(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| s.drafter.wants_hidden())
    }

    /// After [`commit`](Self::commit): hands the drafter the forward's hidden states of this
    /// slot's rows (fed from `pos`).
    pub fn observe(&mut self, dec: &Decoder, pos: usize, hidden: &[f32]) {
        let Some(spec) = self.spec.as_mut().filter(|s| s.drafter.wants_hidden()) else {
            return;
        };
        // A generation that just ended still hands over its rows: the drafter then lags the
        // cache by one position only, and a next turn in this slot resumes it.
        let job = self.job.as_ref();
        let next = job.and_then(|j| j.next);
        let following =
            next.or_else(|| job.and_then(|j| j.prompt.get(self.history.len()).copied()));
        spec.observe(
            dec,
            Observation {
                pos,
                hidden,
                history: &self.history,
                following,
                decoding: next.is_some(),
            },
        );
    }

    /// Rows of logits this slot gets from the forward.
    pub fn logit_rows(&self) -> usize {
        self.job
            .as_ref()
            .map_or(0, |j| j.input.len() - j.first_logit_row)
    }

    /// Takes in the forward's result: the fed rows join the history, then `logits` (this
    /// slot's rows, `vocab` wide) are verified and committed token by token through the stop
    /// rules, rejected positions are cut, and a stop ends the generation. `secs` is the
    /// forward's time, a measure of this slot's verify cost when it ran `alone`.
    pub fn commit(
        &mut self,
        logits: &[f32],
        vocab: usize,
        secs: f64,
        alone: bool,
        sink: &mut impl Sink,
    ) -> Committed {
        let mut done = Committed::none();
        let Some(job) = self.job.as_mut() else {
            return done;
        };
        self.history.extend_from_slice(&job.input);
        let decoding = job.next.is_some();
        if !decoding {
            job.fed = self.history.len();
            job.prompt_secs += secs;
        }
        if logits.is_empty() {
            // A prompt chunk short of the prompt's end: nothing to sample yet.
            return done;
        }
        // Every input row after the fed token is a draft token.
        let n_draft = if decoding { job.input.len() - 1 } else { 0 };
        let draft = &job.input[job.input.len() - n_draft..];
        let (id, rules, top) = (job.id, &mut job.rules, job.logprobs);
        let before = job.constraint.as_ref().map(|c| c.stats);
        let mut stop = None;
        let verdict = verify_rows_constrained(
            logits.chunks_exact(vocab),
            draft,
            &mut job.sampler,
            job.constraint.as_mut(),
            &self.history,
            |tok, row| {
                let lp = top.map(|n| logprob(row, tok, n));
                stop = push_token(rules, id, tok, lp, sink);
                stop.is_none()
            },
        );
        job.next = verdict.next;
        if let (Some(c), Some(b)) = (job.constraint.as_ref(), before) {
            done.masks = c.stats.masks - b.masks;
            done.mask_time = c.stats.mask_time.saturating_sub(b.mask_time);
        }
        let keep = self.history.len() - n_draft + verdict.accepted;
        self.truncate(keep);
        if decoding {
            if let Some(spec) = self.spec.as_mut() {
                spec.record(n_draft, verdict.accepted);
                // A verify's cost is only this slot's when it ran alone.
                if alone {
                    spec.record_cost(n_draft + 1, secs);
                } else {
                    spec.drop_draft_time();
                }
            }
        }
        done.drafted = n_draft;
        done.accepted = verdict.accepted;
        if n_draft > 0 {
            done.drafter = self.spec.as_ref().map_or("", |s| s.drafter.source());
        }
        if let Some(stop) = stop {
            self.finish(stop, sink);
        } else if verdict.next.is_none() {
            // Nothing stopped it and no token came: the grammar could not go on.
            self.finish(StopReason::Grammar, sink);
        }
        done
    }

    /// Ends the running generation: reports its end (with the text still held back) and
    /// frees the slot. The history stays for the next request's prefix reuse.
    pub fn finish(&mut self, stop: StopReason, sink: &mut impl Sink) {
        let error = match stop {
            StopReason::Grammar => Some(
                self.job
                    .as_ref()
                    .and_then(|j| j.constraint.as_ref())
                    .and_then(|c| c.error())
                    .unwrap_or_else(|| "the grammar could not continue".into()),
            ),
            _ => None,
        };
        if let (Some(spec), Some(job)) = (self.spec.as_mut(), self.job.as_ref()) {
            spec.finished(&self.history, job.prompt.len());
        }
        self.end(stop, error, sink);
    }

    /// Ends the running generation as failed with `error`, and empties the slot's cache (it
    /// may be in any state after a failure).
    pub fn fail(&mut self, error: String, sink: &mut impl Sink) {
        self.end(StopReason::Failed, Some(error), sink);
        self.history.clear();
        self.caches.iter_mut().for_each(|c| c.truncate(0));
    }

    fn end(&mut self, stop: StopReason, error: Option<String>, sink: &mut impl Sink) {
        let Some(mut job) = self.job.take() else {
            return;
        };
        let text = match stop {
            // What a failed generation held back may be cut mid-way; it is not sent.
            StopReason::Failed => String::new(),
            _ => job.rules.finish(stop),
        };
        sink.done(
            job.id,
            JobEnd {
                stop,
                tokens: job.rules.tokens,
                text,
                sampler: job.sampler,
                constraint: job.constraint,
                error,
                prompt_tokens: job.prompt_tokens,
                prompt_secs: job.prompt_secs,
                stop_string: job.rules.matched,
                cached_tokens: job.prompt.len() - job.prompt_tokens,
            },
        );
    }
}

/// One sampled token through the stop rules and out to the sink; the stop it causes. The
/// budget and end-of-generation tokens stop before the token (it is not committed); a stop
/// string or the sink's cancel after it.
fn push_token(
    rules: &mut StopRules<'_>,
    id: u64,
    tok: usize,
    lp: Option<TokenLogprob>,
    sink: &mut impl Sink,
) -> Option<StopReason> {
    let (text, stop) = rules.push(tok);
    if matches!(stop, Some(StopReason::MaxTokens | StopReason::Eog)) {
        return stop;
    }
    let keep_going = sink.token(id, tok, lp, text);
    stop.or((!keep_going).then_some(StopReason::Cancelled))
}
