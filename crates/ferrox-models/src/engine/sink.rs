//! Where a step's results go: the engine hands each committed token to a [`Sink`], and a
//! finished generation's summary ([`JobEnd`]) with it.

use super::stop::StopReason;
use super::BatchEvent;
use crate::sampling::{Sampler, TokenLogprob};
use crate::structured::Constraint;

/// How a generation ended, with what it hands back.
pub(crate) struct JobEnd {
    pub stop: StopReason,
    /// Tokens committed.
    pub tokens: usize,
    /// The last text, held back until the end (empty after a stop string).
    pub text: String,
    pub sampler: Sampler,
    /// The grammar's state at the end, when the generation had one.
    pub constraint: Option<Constraint>,
    /// Why the generation failed (`StopReason::Grammar`).
    pub error: Option<String>,
    /// Prompt tokens evaluated (after prefix reuse) and their forward time.
    pub prompt_tokens: usize,
    pub prompt_secs: f64,
    /// The stop string that ended it (index in the request's list).
    pub stop_string: Option<usize>,
    /// Prompt tokens reused from a cache.
    pub cached_tokens: usize,
}

/// Where a step's results go.
pub(crate) trait Sink {
    /// A committed token (with its log-probability when asked for) and the text it releases;
    /// false cancels the generation after it.
    fn token(&mut self, id: u64, token: usize, lp: Option<TokenLogprob>, text: String) -> bool;
    fn done(&mut self, id: u64, end: JobEnd);
}

/// The public step's sink: text and completions as [`BatchEvent`]s.
pub(super) struct Events<F>(pub F);

impl<F: FnMut(u64, BatchEvent)> Sink for Events<F> {
    fn token(&mut self, id: u64, _: usize, lp: Option<TokenLogprob>, text: String) -> bool {
        if let Some(lp) = lp {
            (self.0)(id, BatchEvent::Logprob(lp));
        }
        if !text.is_empty() {
            (self.0)(id, BatchEvent::Text(text));
        }
        true
    }

    fn done(&mut self, id: u64, end: JobEnd) {
        if !end.text.is_empty() {
            (self.0)(id, BatchEvent::Text(end.text));
        }
        if let Some(e) = end.error {
            (self.0)(id, BatchEvent::Error(e));
        }
        (self.0)(
            id,
            BatchEvent::Done {
                stop: end.stop,
                tokens: end.tokens,
                stop_string: end.stop_string,
                cached_tokens: end.cached_tokens,
            },
        );
    }
}
