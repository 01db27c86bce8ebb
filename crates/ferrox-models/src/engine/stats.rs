//! The engine's counters since it started: steps, rows, drafts (in all and per drafter),
//! grammar masks.

use super::slot::Committed;

/// Counters since the engine started.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchStats {
    /// Forward calls.
    pub steps: u64,
    /// Rows evaluated (all slots, all steps).
    pub rows: u64,
    pub drafted: u64,
    pub accepted: u64,
    /// Grammar masks computed (structured output) and the nanoseconds they took.
    pub masks: u64,
    pub mask_nanos: u64,
}

/// One drafter's draft tokens since the engine started
/// ([`crate::speculative::Drafter::source`] names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrafterCount {
    pub drafter: &'static str,
    pub drafted: u64,
    pub accepted: u64,
}

/// Books one slot's verified draft under the drafter that made it.
pub(super) fn book_draft(drafters: &mut Vec<DrafterCount>, c: &Committed) {
    let i = match drafters.iter().position(|d| d.drafter == c.drafter) {
        Some(i) => i,
        None => {
            drafters.push(DrafterCount {
                drafter: c.drafter,
                drafted: 0,
                accepted: 0,
            });
            drafters.len() - 1
        }
    };
    drafters[i].drafted += c.drafted as u64;
    drafters[i].accepted += c.accepted as u64;
}
