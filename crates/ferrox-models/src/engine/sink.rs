//! Where a step's results go: the engine hands each committed token to a [`Sink`], and a
//! finished generation's summary ([`JobEnd`]) with it.

use super::stop::StopReason;
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
