//! What the HTTP layer needs from a model, and the slot scheduler that runs requests on it:
//! `parallel` slots (each with its own KV cache inside the backend's `Slot`), a bounded queue
//! in front of them, cancellation when the client goes away.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::api::ChatMessage;

/// Sampling and length settings of one request, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GenParams {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenSummary {
    pub finish: FinishReason,
    pub completion_tokens: usize,
    /// Cancelled because the client went away.
    pub cancelled: bool,
}

/// One generation context (KV caches and history); a backend hands out one per slot.
pub trait Slot: Send {
    /// Generates from `prompt`, calling `on_text` with each new piece of text; stops early
    /// when `on_text` returns false.
    fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenParams,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> GenSummary;
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Template(String),
    #[error("{0}")]
    BadTokens(String),
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
    /// Prompt tokens of a chat (rendered through the model's chat template).
    fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, BackendError>;
    /// Prompt tokens of a plain completion.
    fn text_prompt(&self, text: &str) -> Vec<u32>;
    fn tokenize(&self, text: &str, add_special: bool) -> Vec<u32>;
    fn detokenize(&self, ids: &[u32]) -> Result<String, BackendError>;
    fn new_slot(&self) -> Box<dyn Slot>;
}

/// What a running generation reports to its HTTP handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Text(String),
    Done(GenSummary),
}

pub struct Job {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    pub events: tokio::sync::mpsc::UnboundedSender<Event>,
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
    /// Decode tokens and the nanoseconds slots spent generating them (for tokens/s).
    pub decode_tokens: AtomicU64,
    pub decode_nanos: AtomicU64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    QueueFull,
}

/// The slots and their queue.
pub struct Scheduler {
    tx: SyncSender<Job>,
    pub metrics: Arc<Metrics>,
    pub parallel: usize,
}

impl Scheduler {
    /// Starts `parallel` slot threads with room for `queue` waiting requests.
    pub fn start(backend: Arc<dyn Backend>, parallel: usize, queue: usize) -> Scheduler {
        let parallel = parallel.max(1);
        let (tx, rx) = sync_channel::<Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        let metrics = Arc::new(Metrics::default());
        for i in 0..parallel {
            let slot = backend.new_slot();
            let rx = rx.clone();
            let m = metrics.clone();
            std::thread::Builder::new()
                .name(format!("ferrox-slot-{i}"))
                .spawn(move || slot_loop(slot, rx, m))
                .expect("spawn slot thread");
        }
        Scheduler {
            tx,
            metrics,
            parallel,
        }
    }

    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        self.metrics.queue_depth.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
                self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                Err(SubmitError::QueueFull)
            }
        }
    }
}

fn slot_loop(mut slot: Box<dyn Slot>, rx: Arc<Mutex<Receiver<Job>>>, m: Arc<Metrics>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        m.queue_depth.fetch_sub(1, Ordering::SeqCst);
        if job.events.is_closed() {
            m.cancelled.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        m.busy_slots.fetch_add(1, Ordering::SeqCst);
        let t = Instant::now();
        let events = job.events.clone();
        let mut on_text = |s: &str| events.send(Event::Text(s.to_string())).is_ok();
        // A panicking backend must not take the slot (or the server) down with it.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            slot.generate(&job.prompt, &job.params, &mut on_text)
        }));
        let mut summary = r.unwrap_or(GenSummary {
            finish: FinishReason::Stop,
            completion_tokens: 0,
            cancelled: true,
        });
        if job.events.is_closed() {
            summary.cancelled = true;
        }
        m.decode_tokens
            .fetch_add(summary.completion_tokens as u64, Ordering::Relaxed);
        m.decode_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        m.completion_tokens
            .fetch_add(summary.completion_tokens as u64, Ordering::Relaxed);
        if summary.cancelled {
            m.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        let _ = job.events.send(Event::Done(summary));
        m.busy_slots.fetch_sub(1, Ordering::SeqCst);
    }
}
