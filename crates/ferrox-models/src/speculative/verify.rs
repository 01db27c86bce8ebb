//! Verification of a deterministic draft by sample-and-match: speculative sampling (Leviathan
//! et al. 2023; Chen et al. 2023) with a point-mass draft, realised by the coupling that makes
//! it exact and reproducible.

use crate::sampling::Sampler;
use crate::structured::Constraint;
use crate::TokenId;

/// How a verification ended: `accepted` draft tokens were kept, and either `next` (the token
/// drawn at the first row whose draft token was rejected, or the bonus row after a fully
/// accepted draft) or nothing when the caller's `commit` stopped the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub accepted: usize,
    pub next: Option<usize>,
}

/// The one verification loop. `rows[i]` are the logits after `context[..base + i]`, where
/// `context` ends with the fed token followed by `draft` and `base = context.len() -
/// draft.len()`. Row by row the sampler draws its own token `x`, exactly as plain decoding
/// would (same history, same random draw), hands it with its row to `commit` (stop rules,
/// streaming, log-probabilities; false stops here), and the draft token is kept iff it equals
/// `x`.
///
/// With `p` the sampler's final distribution at a row, a draft token `t` is then accepted with
/// probability `p(t)`, and after a rejection `x` is distributed as `p` without `t`,
/// renormalised: the speculative sampling rule. Each committed token consumes exactly one draw,
/// so for a seed the output is token for token plain decoding's whatever the drafts were;
/// greedy is the argmax rule.
///
/// Panics when there are fewer than `draft.len() + 1` rows (a caller bug, not bad input).
pub fn verify_rows<'r>(
    rows: impl IntoIterator<Item = &'r [f32]>,
    draft: &[TokenId],
    sampler: &mut Sampler,
    context: &[usize],
    commit: impl FnMut(usize, &[f32]) -> bool,
) -> Verdict {
    verify_rows_constrained(rows, draft, sampler, None, context, commit)
}

/// [`verify_rows`] under a grammar: row `i` is sampled among the tokens `constraint` allows
/// after the tokens committed before it, and a token advances the constraint once `commit`
/// has taken it. A draft token is only ever compared, never fed to the constraint, so a
/// rejection leaves nothing to undo and the output is constrained plain decoding's.
///
/// When the constraint cannot go on (no mask, a token it refuses) the verification ends as
/// if `commit` had stopped it: `next` is `None` and `constraint.error()` says why.
pub fn verify_rows_constrained<'r>(
    rows: impl IntoIterator<Item = &'r [f32]>,
    draft: &[TokenId],
    sampler: &mut Sampler,
    mut constraint: Option<&mut Constraint>,
    context: &[usize],
    mut commit: impl FnMut(usize, &[f32]) -> bool,
) -> Verdict {
    let base = context.len() - draft.len();
    let mut rows = rows.into_iter();
    for i in 0..=draft.len() {
        let row = rows
            .next()
            .expect("verify needs one logits row per draft token plus one");
        let stopped = Verdict {
            accepted: i,
            next: None,
        };
        let x = match constraint.as_deref_mut() {
            None => sampler.sample(row, &context[..base + i]),
            Some(c) => match c.mask() {
                Ok(mask) => sampler.sample_masked(row, &context[..base + i], Some(mask)),
                Err(_) => return stopped,
            },
        };
        if !commit(x, row) {
            return stopped;
        }
        if let Some(c) = constraint.as_deref_mut() {
            if c.commit(x).is_err() {
                return stopped;
            }
        }
        if draft.get(i) != Some(&x) {
            return Verdict {
                accepted: i,
                next: Some(x),
            };
        }
    }
    unreachable!("the row after the last draft token has no draft token to match")
}

/// Verifies `draft` and returns the committed tokens: the accepted draft prefix followed by
/// exactly one more token drawn by the target. `rows[i]` (for `i` in `0..=draft.len()`) are the
/// logits after `history` and `draft[..i]`; `history` ends with the token fed with the draft.
/// See [`verify_rows`] for the rule.
pub fn verify<R: AsRef<[f32]>>(
    rows: &[R],
    draft: &[TokenId],
    sampler: &mut Sampler,
    history: &[TokenId],
) -> Vec<TokenId> {
    assert!(
        rows.len() > draft.len(),
        "verify needs one logits row per draft token plus one"
    );
    // Penalties only look at the last `penalty_last_n` tokens: a window is the same history.
    let window = sampler.config.penalty_last_n;
    let mut context = history[history.len().saturating_sub(window)..].to_vec();
    context.extend_from_slice(draft);
    let mut out = Vec::with_capacity(draft.len() + 1);
    verify_rows(
        rows.iter().map(AsRef::as_ref),
        draft,
        sampler,
        &context,
        |x, _| {
            out.push(x);
            true
        },
    );
    out
}
