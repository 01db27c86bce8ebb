//! The engine's counters since it started: steps, rows, drafts (in all and per drafter),
//! grammar masks.

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

impl DrafterCount {
    /// Adds `drafted` / `accepted` tokens to `drafter`'s entry of `counts` (made if missing).
    pub fn book(
        counts: &mut Vec<DrafterCount>,
        drafter: &'static str,
        drafted: u64,
        accepted: u64,
    ) {
        let i = match counts.iter().position(|d| d.drafter == drafter) {
            Some(i) => i,
            None => {
                counts.push(DrafterCount {
                    drafter,
                    drafted: 0,
                    accepted: 0,
                });
                counts.len() - 1
            }
        };
        counts[i].drafted += drafted;
        counts[i].accepted += accepted;
    }
}
