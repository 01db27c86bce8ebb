//! One slot of the engine: its KV caches and the tokens they hold, the generation running in
//! it, and the three phases of a step for it: plan the rows to feed, lend them to the batched
//! forward, commit what the logits say.

use super::sink::{JobEnd, Sink};
use super::stop::{StopReason, StopRules};
use crate::decoder::{Decoder, SeqBatch};
use crate::sampling::{logprob, Sampler, TokenLogprob};
use crate::speculative::{verify_tree, Observation, Rows, Speculation, Verdict};
use crate::structured::Constraint;
use crate::tree::{place_branch, Tree};
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
    /// This step's input rows: a prompt chunk, or `[next, draft...]` (then branches beside
    /// the draft, when `parents` says how the rows follow one another).
    pub input: Vec<usize>,
    /// Each input row's parent in a draft tree (`crate::tree`); empty: a chain.
    pub parents: Vec<usize>,
    /// The draft rows verification kept, in order (reused step to step).
    pub kept: Vec<usize>,
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
    /// A draft tree's kept rows' hidden states, in order, for the drafter (reused).
    pub kept_rows: Vec<f32>,
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
            kept_rows: Vec::new(),
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
        job.parents.clear();
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
            } else if dec.takes_trees() && self.caches.iter().all(KvCache::rows_portable) {
                let left = room - (job.input.len() - 1);
                spec.branch_into(left, &mut job.input, &mut job.parents);
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
            tree: (!job.parents.is_empty()).then(|| tree_of(&job.parents, job.input.len())),
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
        // A draft tree's kept rows come first, as a chain's would.
        let hidden = match job.filter(|j| !j.parents.is_empty()) {
            Some(j) => {
                let d = hidden.len() / j.input.len();
                self.kept_rows.clear();
                for r in std::iter::once(0).chain(j.kept.iter().copied()) {
                    self.kept_rows
                        .extend_from_slice(&hidden[r * d..(r + 1) * d]);
                }
                &self.kept_rows[..]
            }
            None => hidden,
        };
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
        let decoding = job.next.is_some();
        // Every input row after the fed token is a draft token (or a branch beside one).
        let n_draft = if decoding { job.input.len() - 1 } else { 0 };
        let fed = job.input.len() - n_draft;
        self.history.extend_from_slice(&job.input[..fed]);
        if !decoding {
            job.fed = self.history.len();
            job.prompt_secs += secs;
        }
        if logits.is_empty() {
            // A prompt chunk short of the prompt's end: nothing to sample yet.
            return done;
        }
        // The root (the last fed token) is at `root`; the draft's rows follow in the cache.
        let root = self.history.len() - 1;
        let tree = tree_of(&job.parents, n_draft + 1);
        let rows = Rows {
            row: |i: usize| &logits[i * vocab..(i + 1) * vocab],
            tree,
            tokens: &job.input[fed - 1..],
        };
        let (id, rules, top) = (job.id, &mut job.rules, job.logprobs);
        let before = job.constraint.as_ref().map(|c| c.stats);
        let mut stop = None;
        // Kept draft tokens join the history as they are verified.
        let verdict = verify_tree(
            rows,
            &mut job.sampler,
            job.constraint.as_mut(),
            &mut self.history,
            &mut job.kept,
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
        if !job.parents.is_empty() {
            // The kept branch moves to where its positions belong; the rest is cut.
            for c in &mut self.caches {
                place_branch(root, &job.kept, |a, b| c.swap_positions(a, b));
            }
        }
        let (drafted, accepted, branch) = chain_verdict(tree, &job.kept, verdict);
        let keep = self.history.len();
        self.truncate(keep);
        if decoding {
            if let Some(spec) = self.spec.as_mut() {
                spec.record(drafted, accepted, branch);
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

/// `rows` rows as a draft tree: a chain unless `parents` says otherwise.
fn tree_of(parents: &[usize], rows: usize) -> Tree<'_> {
    match parents.is_empty() {
        true => Tree::chain(rows),
        // `Speculation::branch_into` puts every parent before its row.
        false => Tree::new(parents).expect("a branch follows an earlier row"),
    }
}

/// A verified draft tree as its chain's controller sees it: the chain's draft tokens (the
/// spine after the root), those kept, and whether a branch beside a rejected chain token was
/// kept (`None`: no rejection had one beside it).
fn chain_verdict(tree: Tree<'_>, kept: &[usize], verdict: Verdict) -> (usize, usize, Option<bool>) {
    let spine = tree.spine();
    let on_spine = kept.iter().take_while(|&&r| r < spine).count();
    let branch = match kept.get(on_spine) {
        Some(_) => Some(true),
        None => {
            let at = kept.last().copied().unwrap_or(0);
            let beside = (spine..tree.rows()).any(|r| tree.parent(r) == at);
            (verdict.next.is_some() && beside).then_some(false)
        }
    };
    (spine - 1, on_spine, branch)
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
