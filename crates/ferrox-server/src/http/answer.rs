//! One generation's events read back as the parts of an answer — reasoning, content, tool
//! calls — for the routes that are not OpenAI's (Ollama, Anthropic): they shape these parts
//! into their own messages and stream events.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ferrox_tokenizer::chat_output::{OutputParser, OutputPart, ToolCall};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::UNFINISHED;
use super::tools::OutputSetup;
use super::ApiError;
use crate::backend::{Event, GenSummary, TokenLogprob};

/// A piece of an answer as it is produced.
#[derive(Debug)]
pub(super) enum Piece {
    Reasoning(String),
    Content(String),
    Call(ToolCall),
    Done(GenSummary),
    Failed(String),
}

/// Reads one generation's events as pieces. Log-probabilities are dropped unless
/// [`Pieces::keep_logprobs`] asked for them (llama-server's `n_probs`).
pub(super) struct Pieces {
    rx: UnboundedReceiver<Event>,
    parser: Option<OutputParser>,
    parallel: bool,
    calls: usize,
    queue: VecDeque<Piece>,
    ended: bool,
    /// `Some` when log-probabilities are kept: those not yet taken.
    logprobs: Option<Vec<TokenLogprob>>,
    started: Instant,
    /// When the first piece of text arrived (the prompt's evaluation ended about then).
    pub first_at: Option<Instant>,
}

impl Pieces {
    pub(super) fn new(rx: UnboundedReceiver<Event>, setup: Option<&OutputSetup>) -> Pieces {
        Pieces {
            rx,
            parser: setup.map(OutputSetup::parser),
            parallel: setup.is_none_or(|o| o.parallel),
            calls: 0,
            queue: VecDeque::new(),
            ended: false,
            logprobs: None,
            started: Instant::now(),
            first_at: None,
        }
    }

    /// Keep the generation's log-probabilities for [`Pieces::take_logprobs`].
    pub(super) fn keep_logprobs(mut self) -> Pieces {
        self.logprobs = Some(Vec::new());
        self
    }

    /// The log-probabilities kept since the last call (empty unless kept).
    pub(super) fn take_logprobs(&mut self) -> Vec<TokenLogprob> {
        self.logprobs
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The next piece; `None` after `Done` or `Failed`.
    pub(super) async fn next(&mut self) -> Option<Piece> {
        loop {
            if let Some(p) = self.queue.pop_front() {
                return Some(p);
            }
            if self.ended {
                return None;
            }
            let ev = self.rx.recv().await;
            self.first_at.get_or_insert_with(Instant::now);
            let mut parts = Vec::new();
            match ev {
                Some(Event::Logprob(l)) => {
                    if let Some(kept) = self.logprobs.as_mut() {
                        kept.push(l);
                    }
                    continue;
                }
                Some(Event::Text(t)) => match self.parser.as_mut() {
                    Some(p) => p.push(&t, &mut parts),
                    None => parts.push(OutputPart::Content(t)),
                },
                Some(Event::Done(summary)) => {
                    if let Some(p) = self.parser.as_mut() {
                        p.finish(&mut parts);
                    }
                    self.push_parts(parts);
                    self.queue.push_back(Piece::Done(summary));
                    self.ended = true;
                    continue;
                }
                Some(Event::Failed(msg)) => {
                    self.queue.push_back(Piece::Failed(msg));
                    self.ended = true;
                    continue;
                }
                None => {
                    self.queue.push_back(Piece::Failed(UNFINISHED.into()));
                    self.ended = true;
                    continue;
                }
            }
            self.push_parts(parts);
        }
    }

    fn push_parts(&mut self, parts: Vec<OutputPart>) {
        for part in parts {
            let piece = match part {
                OutputPart::Reasoning(t) if !t.is_empty() => Piece::Reasoning(t),
                OutputPart::Content(t) if !t.is_empty() => Piece::Content(t),
                OutputPart::Reasoning(_) | OutputPart::Content(_) => continue,
                // Without parallel calls only the first is the answer.
                OutputPart::ToolCall(_) if !self.parallel && self.calls > 0 => continue,
                OutputPart::ToolCall(c) => {
                    self.calls += 1;
                    Piece::Call(c)
                }
            };
            self.queue.push_back(piece);
        }
    }

    /// Time from the start to the first output, and from then on (Ollama's prompt and eval
    /// durations, measured at the HTTP side).
    pub(super) fn durations(&self) -> (Duration, Duration) {
        let first = self.first_at.unwrap_or_else(Instant::now);
        (first - self.started, first.elapsed())
    }
}

/// A whole answer.
#[derive(Debug)]
pub(super) struct Answer {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ToolCall>,
    pub summary: GenSummary,
}

/// Reads `pieces` to the end; an engine failure is a 500.
pub(super) async fn collect(pieces: &mut Pieces) -> Result<Answer, ApiError> {
    let (mut reasoning, mut content, mut calls) = (String::new(), String::new(), Vec::new());
    while let Some(p) = pieces.next().await {
        match p {
            Piece::Reasoning(t) => reasoning.push_str(&t),
            Piece::Content(t) => content.push_str(&t),
            Piece::Call(c) => calls.push(c),
            Piece::Done(summary) => {
                return Ok(Answer {
                    reasoning,
                    content,
                    calls,
                    summary,
                })
            }
            Piece::Failed(msg) => return Err(ApiError::failed(msg)),
        }
    }
    Err(ApiError::unfinished())
}
