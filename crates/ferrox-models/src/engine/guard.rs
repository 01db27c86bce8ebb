//! Failure isolation: a request whose input the model cannot take, or on which a step panics,
//! fails alone; the other generations in the step go on exactly as they would have.
//!
//! - Before the batched forward each slot's input is checked (`Decoder::prepare_seq`: token
//!   ids, cache count, shape and length); a slot it refuses fails.
//! - A forward that panics anyway is run again one slot at a time, after cutting every cache
//!   back to its committed length (the failed pass may have written rows past it). A row of a
//!   multi-sequence step equals that sequence alone (batch invariance), so the slots that pass
//!   get the very logits the batch would have given them; the slots that panic fail.
//! - Planning and committing run per slot; a panic there fails that slot.
//!
//! A failed generation ends with `StopReason::Failed` and its error, and its slot's cache is
//! emptied.

use super::slot::Slot;
use super::{BatchEngine, Sink};
use crate::decoder::SeqBatch;
use crate::TokenId;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// What a generation reports when a step panicked on it.
const FAILED: &str = "the engine failed while generating this request";

/// `f(slot, sink)`, or `fallback` when it panics, after failing the slot's generation.
pub(super) fn per_slot<S: Sink, R>(
    slot: &mut Slot<'_>,
    sink: &mut S,
    fallback: R,
    f: impl FnOnce(&mut Slot<'_>, &mut S) -> R,
) -> R {
    match catch_unwind(AssertUnwindSafe(|| f(&mut *slot, &mut *sink))) {
        Ok(r) => r,
        Err(_) => {
            slot.fail(FAILED.into(), sink);
            fallback
        }
    }
}

impl BatchEngine<'_> {
    /// Fails the slots whose input the decoder would refuse; whether any slot still feeds.
    pub(super) fn refuse_bad_input(&mut self, sink: &mut impl Sink) -> bool {
        let decoder = self.decoder;
        let mut feeding = false;
        for slot in &mut self.slots {
            let refused = slot
                .seq()
                .and_then(|mut s| decoder.prepare_seq(&mut s).err());
            match refused {
                Some(e) => slot.fail(format!("the request's input was refused: {e}"), sink),
                None => feeding |= slot.feeds(),
            }
        }
        feeding
    }

    /// The step's forward (time, and whether one slot had it to itself); when it panics,
    /// each slot alone.
    pub(super) fn forward_isolated(&mut self, sink: &mut impl Sink) -> (f64, bool) {
        match catch_unwind(AssertUnwindSafe(|| self.forward())) {
            Ok(r) => r,
            Err(_) => self.forward_each(sink),
        }
    }

    /// Every feeding slot's forward on its own, its logit rows appended in slot order; the
    /// slots it panics on fail.
    fn forward_each(&mut self, sink: &mut impl Sink) -> (f64, bool) {
        let t = Instant::now();
        let (decoder, fault) = (self.decoder, self.fault);
        let feeding = self.slots.iter().filter(|s| s.feeds()).count();
        let mut logits = std::mem::take(&mut self.logits);
        logits.clear();
        let mut one = Vec::new();
        for slot in &mut self.slots {
            let committed = slot.history.len();
            slot.caches.iter_mut().for_each(|c| c.truncate(committed));
            let Some(seq) = slot.seq() else {
                continue;
            };
            // A lone sequence would panic again: it is the one.
            let ran = feeding > 1
                && catch_unwind(AssertUnwindSafe(|| {
                    let mut seqs = [seq];
                    decoder.forward_multi(&mut seqs, &mut one);
                    injected(fault, &seqs);
                }))
                .is_ok();
            if ran {
                logits.extend_from_slice(&one);
            } else {
                slot.fail(FAILED.into(), sink);
            }
        }
        self.logits = logits;
        (t.elapsed().as_secs_f64(), false)
    }

    /// Test hook: the forward panics, after running, when `fault(input, position)` picks one
    /// of its sequences (a kernel bug on some request's data, for the isolation tests).
    #[doc(hidden)]
    pub fn inject_fault(&mut self, fault: Fault) {
        self.fault = Some(fault);
    }
}

/// A fault the test hook injects (see [`BatchEngine::inject_fault`]).
pub type Fault = fn(&[TokenId], usize) -> bool;

/// Panics when the test hook picks one of `seqs`.
pub(super) fn injected(fault: Option<Fault>, seqs: &[SeqBatch<'_>]) {
    if let Some(f) = fault {
        if seqs.iter().any(|s| f(s.tokens, s.pos)) {
            panic!("injected engine fault");
        }
    }
}
