//! What the HTTP layer needs from a model, and the scheduler that runs requests on it:
//! continuous batching over `parallel` slots (the backend's `Stepper` advances every running
//! generation by one batched step; requests join and leave between steps), a bounded queue in
//! front, cancellation when the client goes away.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use crate::api::ChatPrompt;
use ferrox_tokenizer::chat_output::ToolFormat;

/// A rendered chat: its tokens, the tool-call format the template teaches, and whether the
/// prompt left the model inside a `<think>` block.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedChat {
    pub tokens: Vec<TokenId>,
    pub tool_format: ToolFormat,
    pub in_reasoning: bool,
}
use ferrox_tokenizer::fim::FimInput;
use ferrox_tokenizer::TokenId;
use serde_json::Value;

pub use crate::slots::{SlotAction, SlotDone, SlotError, SlotTask};
pub use ferrox_params::SamplerConfig;

/// Sampling and length settings of one request, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GenParams {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// How tokens are drawn; what the request leaves out is `SamplerConfig::default()`.
    pub sampler: SamplerConfig,
    /// Report each token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// Name log-probability tokens `token_id:N` (vLLM's `return_tokens_as_token_ids`).
    pub tokens_as_ids: bool,
    /// Keep special tokens in the text (the answer's format needs them: gpt-oss's harmony).
    pub keep_special: bool,
    /// The grammar the output must follow (structured output, or a tool-call shape).
    pub grammar: Option<GrammarSpec>,
    /// `grammar` compiled by [`Backend::compile_grammar`] (the HTTP layer does it off the
    /// async workers before the request is queued).
    pub compiled: Option<CompiledGrammar>,
}

/// A grammar as a request states it; the backend compiles it for its tokenizer.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object.
    JsonObject,
    /// JSON valid under `schema`; `strict` refuses schema features that cannot be enforced.
    JsonSchema { schema: Value, strict: bool },
    /// llama.cpp's GBNF.
    Gbnf(String),
    /// llguidance's Lark dialect (may embed `%json {schema}` and special tokens): what a tool
    /// call shape such as `<tool_call>{json}</tool_call>` is written in.
    Lark(String),
}

/// A backend's compiled grammar, opaque to the HTTP layer; the backend's engine takes it back
/// (by downcasting) when the request is admitted.
#[derive(Clone)]
pub struct CompiledGrammar(pub Arc<dyn Any + Send + Sync>);

impl std::fmt::Debug for CompiledGrammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompiledGrammar")
    }
}

impl PartialEq for CompiledGrammar {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    /// The engine failed (the request gets a 5xx, or an SSE error event mid-stream).
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Error => "error",
        }
    }
}

/// One token's log-probability as the API reports it: its text and bytes, with alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(String, Vec<u8>, f32)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenSummary {
    pub finish: FinishReason,
    pub completion_tokens: usize,
    /// Cancelled because the client went away.
    pub cancelled: bool,
    /// The stop string that ended the text (its index in `GenParams::stop`).
    pub stop_string: Option<usize>,
    /// Prompt tokens whose keys and values came from a cache instead of being evaluated.
    pub cached_tokens: usize,
}

/// The generations running on a model, as the scheduler steps them: up to `capacity()` at
/// once, each in a slot with its own KV cache, all advanced together by `step`. (The engine
/// itself, the one step/verify/commit loop, is `ferrox_models::engine::BatchEngine`; a
/// backend's stepper drives it.)
pub trait Stepper: Send {
    fn capacity(&self) -> usize;
    fn active(&self) -> usize;
    /// Starts generation `id` in a free slot (the scheduler only calls it when one is free).
    fn admit(&mut self, id: u64, prompt: &[TokenId], params: &GenParams) -> Result<(), String>;
    /// One batched step of every running generation; reports their text and completions
    /// (`Event::Done` ends a generation and frees its slot).
    fn step(&mut self, events: &mut dyn FnMut(u64, Event));
    /// Ends generation `id` now and frees its slot.
    fn cancel(&mut self, id: u64);
    /// Draft tokens proposed and accepted so far per drafter (speculative decoding), written
    /// over `out` (reused step to step).
    fn drafter_counts(&self, out: &mut Vec<DraftCount>) {
        out.clear();
    }
    /// Grammar masks computed so far and the nanoseconds they took (structured output).
    fn grammar_counts(&self) -> (u64, u64) {
        (0, 0)
    }
    /// What the KV caches hold now.
    fn cache_usage(&self) -> CacheUsage {
        CacheUsage::default()
    }
    /// llama-server's slot save / restore / erase on idle slot `slot`.
    fn slot_action(&mut self, slot: usize, action: SlotAction) -> Result<SlotDone, SlotError> {
        let _ = (slot, action);
        Err(SlotError::Unsupported(
            "this backend cannot save or restore slots".into(),
        ))
    }
}

/// One drafter's draft tokens so far (speculative decoding), for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftCount {
    /// The drafter's name (`mtp`, `recall`, `longest`, ...).
    pub drafter: &'static str,
    pub drafted: u64,
    pub accepted: u64,
}

/// KV-cache occupancy, for the load signals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Positions the slots hold, of `capacity` (slots × context).
    pub positions: usize,
    pub capacity: usize,
    /// Bytes the prefix cache across requests holds.
    pub prefix_bytes: usize,
    /// Bytes the slots' caches hold.
    pub slot_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Template(String),
    #[error("{0}")]
    BadTokens(String),
    /// The backend cannot do what was asked (e.g. embeddings).
    #[error("{0}")]
    Unsupported(String),
}

/// A loaded model as the server sees it.
pub trait Backend: Send + Sync + 'static {
    /// The id served in `/v1/models` and accepted in `model`.
    fn model_id(&self) -> &str;
    /// Other names accepted in `model` (catalog name, file name).
    fn aliases(&self) -> Vec<String> {
        Vec::new()
    }
    fn ctx_size(&self) -> usize;
    /// Token ids run from 0 to this (exclusive).
    fn vocab_size(&self) -> usize;
    /// Prompt tokens of a chat (rendered through the model's chat template), with how the
    /// model will write back.
    fn chat_prompt(&self, chat: &ChatPrompt<'_>) -> Result<RenderedChat, BackendError>;
    /// Prompt tokens of a plain completion.
    fn text_prompt(&self, text: &str) -> Vec<TokenId>;
    /// Prompt tokens of a fill-in-the-middle request (llama-server's `/infill` layout) that
    /// will generate up to `max_tokens`; `Unsupported` names what the model lacks.
    fn fim_prompt(
        &self,
        input: &FimInput<'_>,
        max_tokens: Option<usize>,
    ) -> Result<Vec<TokenId>, BackendError> {
        let _ = (input, max_tokens);
        Err(BackendError::Unsupported(
            "this backend does not do fill-in-the-middle".into(),
        ))
    }
    fn tokenize(&self, text: &str, add_special: bool) -> Vec<TokenId>;
    fn detokenize(&self, ids: &[TokenId]) -> Result<String, BackendError>;
    /// Waits (up to `timeout`) until what the backend keeps on disk (a prompt cache) is
    /// written, at unload and at exit; false when the time ran out.
    fn flush(&self, timeout: std::time::Duration) -> bool {
        let _ = timeout;
        true
    }
    /// A fresh engine with `slots` slots. It may borrow the backend (its weights): the
    /// engine thread holds the backend for as long as the engine runs, and an unloaded model's
    /// memory goes back when both are gone.
    fn new_stepper(&self, slots: usize) -> Box<dyn Stepper + '_>;
    /// Compiles `grammar` for this model (may take a while: called on a blocking thread). The
    /// error is the message a 400 answer carries.
    fn compile_grammar(&self, grammar: &GrammarSpec) -> Result<CompiledGrammar, String> {
        let _ = grammar;
        Err("this backend does not support grammars or structured output".into())
    }
    /// One L2-normalised embedding per input (token ids, each within the context). May take
    /// a while: called on a blocking thread.
    fn embed(&self, inputs: &[Vec<TokenId>]) -> Result<Vec<Vec<f32>>, BackendError> {
        let _ = inputs;
        Err(BackendError::Unsupported(
            "this backend does not compute embeddings".into(),
        ))
    }
    /// Whether the model generates text. An encoder (embeddings, rerank) does not: its
    /// generation routes answer 400.
    fn generates(&self) -> bool {
        true
    }
    /// Relevance scores of `query` against each document (a cross-encoder), in document
    /// order. May take a while: called on a blocking thread.
    fn rerank(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, BackendError> {
        let _ = (query, documents);
        Err(BackendError::Unsupported(
            "this model has no rerank head (a cross-encoder such as BertForSequenceClassification, or a GGUF with pooling_type rank)".into(),
        ))
    }
}

/// What a running generation reports to its HTTP handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A committed token's log-probability (before the text it releases).
    Logprob(TokenLogprob),
    Text(String),
    Done(GenSummary),
    /// The generation could not run or continue (the engine failed, its grammar could not go
    /// on); nothing follows.
    Failed(String),
}

pub struct Job {
    pub prompt: Vec<TokenId>,
    pub params: GenParams,
    pub events: tokio::sync::mpsc::UnboundedSender<Event>,
    /// Where the request log reads what this generation did (when it is on).
    pub stats: Option<Arc<RequestStats>>,
}

/// What one request's generations did, for the request log: filled in by the engine thread.
#[derive(Debug, Default)]
pub struct RequestStats {
    pub prompt_tokens: AtomicUsize,
    pub cached_tokens: AtomicUsize,
    pub generated_tokens: AtomicUsize,
    /// When the first text arrived.
    pub first_text: std::sync::OnceLock<Instant>,
}

/// Counters for `/metrics`.
#[derive(Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub queue_depth: AtomicUsize,
    pub busy_slots: AtomicUsize,
    pub cancelled: AtomicU64,
    pub rejected: AtomicU64,
    /// Generated tokens and the nanoseconds the engine spent stepping (aggregate tokens/s).
    pub decode_tokens: AtomicU64,
    pub decode_nanos: AtomicU64,
    /// Draft tokens proposed and accepted per drafter (after the last step).
    pub drafters: std::sync::Mutex<Vec<DraftCount>>,
    pub grammar_masks: AtomicU64,
    pub grammar_mask_nanos: AtomicU64,
    /// Prompt tokens admitted, and those of them served from a cache (prefix reuse).
    pub prefix_queries: AtomicU64,
    pub prefix_hits: AtomicU64,
    /// Slot positions held, their capacity, the bytes of the slots' caches and of the prefix
    /// cache (after the last step).
    pub kv_positions: AtomicUsize,
    pub kv_capacity: AtomicUsize,
    pub kv_bytes: AtomicUsize,
    pub prefix_bytes: AtomicUsize,
}

impl Metrics {
    /// Draft tokens proposed and accepted so far, all drafters together.
    pub fn draft_totals(&self) -> (u64, u64) {
        let drafters = self.drafters.lock().unwrap_or_else(|e| e.into_inner());
        drafters
            .iter()
            .fold((0, 0), |(d, a), c| (d + c.drafted, a + c.accepted))
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    QueueFull,
}

/// The slots and their queue.
pub struct Scheduler {
    tx: SyncSender<Work>,
    pub metrics: Arc<Metrics>,
    pub parallel: usize,
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// The engine thread: it ends (dropping the engine and its hold on the backend) once
    /// the scheduler is gone.
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts the engine thread with `parallel` slots and room for `queue` waiting requests.
    pub fn start(backend: Arc<dyn Backend>, parallel: usize, queue: usize) -> Scheduler {
        let parallel = parallel.max(1);
        let (tx, rx) = sync_channel::<Work>(queue);
        let metrics = Arc::new(Metrics::default());
        let m = metrics.clone();
        let thread = std::thread::Builder::new()
            .name("ferrox-engine".into())
            .spawn(move || engine_loop(backend, parallel, rx, m))
            .expect("spawn engine thread");
        Scheduler {
            tx,
            metrics,
            parallel,
            queue,
            thread: std::sync::Mutex::new(Some(thread)),
        }
    }

    /// The engine thread's handle (once): joining it, after the scheduler is dropped, waits
    /// until the engine and its backend are gone.
    pub fn take_thread(&self) -> Option<std::thread::JoinHandle<()>> {
        self.thread.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Queues a slot action (run between steps, once a slot is free to take work).
    pub fn slot_action(&self, task: SlotTask) -> Result<(), SubmitError> {
        self.tx
            .try_send(Work::Slot(task))
            .map_err(|_| SubmitError::QueueFull)
    }

    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        self.metrics.queue_depth.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(Work::Gen(job)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
                self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                Err(SubmitError::QueueFull)
            }
        }
    }
}

/// What the engine thread is sent: a generation, or a slot action. Generations are nearly
/// all of it, so they go unboxed (the queue holds at most `queue` of them).
#[allow(clippy::large_enum_variant)]
enum Work {
    Gen(Job),
    Slot(SlotTask),
}

type Running = HashMap<
    u64,
    (
        tokio::sync::mpsc::UnboundedSender<Event>,
        Option<Arc<RequestStats>>,
    ),
>;

fn engine_loop(backend: Arc<dyn Backend>, parallel: usize, rx: Receiver<Work>, m: Arc<Metrics>) {
    let mut engine = backend.new_stepper(parallel);
    let mut running: Running = HashMap::new();
    let mut next_id = 0u64;
    let mut gone: Vec<u64> = Vec::new();
    loop {
        if !admit_waiting(engine.as_mut(), &mut running, &mut next_id, &rx, &m) {
            return;
        }
        // Clients that went away give their slots back before the next step.
        gone.extend(
            running
                .iter()
                .filter(|(_, (tx, _))| tx.is_closed())
                .map(|(&id, _)| id),
        );
        for id in gone.drain(..) {
            if running.remove(&id).is_some() {
                engine.cancel(id);
                m.cancelled.fetch_add(1, Ordering::Relaxed);
                m.busy_slots.fetch_sub(1, Ordering::SeqCst);
            }
        }
        if running.is_empty() {
            continue;
        }
        let t = Instant::now();
        let mut done = Vec::new();
        // The engine fails a request it cannot run, or whose step panics, on its own (as
        // `Event::Failed`; the others go on). A panic that still escapes `step` means the
        // engine itself is broken: its requests end, a new engine takes over, the server
        // stays up.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.step(&mut |id, ev| {
                let Some((tx, stats)) = running.get(&id) else {
                    return;
                };
                match ev {
                    Event::Text(_) | Event::Logprob(_) => {
                        if let Some(st) = stats {
                            st.first_text.get_or_init(Instant::now);
                        }
                        if tx.send(ev).is_err() {
                            gone.push(id);
                        }
                    }
                    Event::Failed(msg) => {
                        m.errors.fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(Event::Failed(msg));
                        running.remove(&id);
                        m.busy_slots.fetch_sub(1, Ordering::SeqCst);
                    }
                    Event::Done(summary) => {
                        count_done(&m, stats.as_deref(), &summary);
                        // Sent once the step has returned: the engine files a finished
                        // request's positions (in the prefix cache, and so on disk) at the end
                        // of its step, and a client that has its answer may stop the server.
                        done.push((tx.clone(), summary));
                        running.remove(&id);
                        m.busy_slots.fetch_sub(1, Ordering::SeqCst);
                    }
                }
            })
        }));
        for (tx, summary) in done {
            let _ = tx.send(Event::Done(summary));
        }
        m.decode_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        engine.drafter_counts(&mut m.drafters.lock().unwrap_or_else(|e| e.into_inner()));
        let (masks, mask_nanos) = engine.grammar_counts();
        m.grammar_masks.store(masks, Ordering::Relaxed);
        m.grammar_mask_nanos.store(mask_nanos, Ordering::Relaxed);
        let usage = engine.cache_usage();
        m.kv_positions.store(usage.positions, Ordering::Relaxed);
        m.kv_capacity.store(usage.capacity, Ordering::Relaxed);
        m.kv_bytes.store(usage.slot_bytes, Ordering::Relaxed);
        m.prefix_bytes.store(usage.prefix_bytes, Ordering::Relaxed);
        if r.is_err() {
            tracing::error!(
                "engine step panicked; ending its {} requests",
                running.len()
            );
            for (_, (tx, _)) in running.drain() {
                m.errors.fetch_add(1, Ordering::Relaxed);
                m.busy_slots.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send(Event::Failed(
                    "the engine failed while generating; the request was ended".into(),
                ));
            }
            gone.clear();
            engine = backend.new_stepper(parallel);
        }
    }
}

/// A finished request's counters: its stats and the server's metrics.
fn count_done(m: &Metrics, stats: Option<&RequestStats>, summary: &GenSummary) {
    if let Some(st) = stats {
        st.cached_tokens
            .fetch_add(summary.cached_tokens, Ordering::Relaxed);
        st.generated_tokens
            .fetch_add(summary.completion_tokens, Ordering::Relaxed);
    }
    m.prefix_hits
        .fetch_add(summary.cached_tokens as u64, Ordering::Relaxed);
    m.completion_tokens
        .fetch_add(summary.completion_tokens as u64, Ordering::Relaxed);
    m.decode_tokens
        .fetch_add(summary.completion_tokens as u64, Ordering::Relaxed);
}

/// Joins waiting requests between steps (blocks only when nothing is running). False when the
/// channel is closed and nothing is running: the server is gone.
fn admit_waiting(
    engine: &mut dyn Stepper,
    running: &mut Running,
    next_id: &mut u64,
    rx: &Receiver<Work>,
    m: &Metrics,
) -> bool {
    while running.len() < engine.capacity() {
        let work = if running.is_empty() {
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return false,
            }
        } else {
            match rx.try_recv() {
                Ok(j) => j,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        };
        let job = match work {
            Work::Gen(job) => job,
            Work::Slot(t) => {
                let _ = t.reply.send(engine.slot_action(t.slot, t.action));
                continue;
            }
        };
        m.queue_depth.fetch_sub(1, Ordering::SeqCst);
        if job.events.is_closed() {
            m.cancelled.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let id = *next_id;
        *next_id += 1;
        match engine.admit(id, &job.prompt, &job.params) {
            Ok(()) => {
                m.prefix_queries
                    .fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
                running.insert(id, (job.events, job.stats));
                m.busy_slots.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::warn!("request refused by the engine: {e}");
                m.errors.fetch_add(1, Ordering::Relaxed);
                let _ = job.events.send(Event::Failed(format!(
                    "the engine refused the request: {e}"
                )));
            }
        }
    }
    true
}
