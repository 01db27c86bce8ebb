//! Verification of a deterministic draft by sample-and-match: speculative sampling (Leviathan
//! et al. 2023; Chen et al. 2023) with a point-mass draft, realised by the coupling that makes
//! it exact and reproducible.

use crate::sampling::Sampler;
use crate::structured::Constraint;
use crate::tree::Tree;
use crate::TokenId;

/// How a verification ended: `accepted` draft tokens were kept, and either `next` (the token
/// drawn at the first row whose draft token was rejected, or the bonus row after a fully
/// accepted draft) or nothing when the caller's `commit` stopped the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub accepted: usize,
    pub next: Option<usize>,
}

/// [`verify_tree`] over a chain, without a grammar: `rows[i]` are the logits after
/// `context[..base + i]`, where `context` ends with the fed token followed by `draft` and
/// `base = context.len() - draft.len()`.
///
/// Panics when there are fewer than `draft.len() + 1` rows (a caller bug, not bad input).
pub fn verify_rows<'r>(
    rows: impl IntoIterator<Item = &'r [f32]>,
    draft: &[TokenId],
    sampler: &mut Sampler,
    context: &[usize],
    commit: impl FnMut(usize, &[f32]) -> bool,
) -> Verdict {
    let base = context.len() - draft.len();
    let rows: Vec<&[f32]> = rows.into_iter().take(draft.len() + 1).collect();
    assert!(
        rows.len() > draft.len(),
        "verify needs one logits row per draft token plus one"
    );
    let mut ctx = context[..base].to_vec();
    let rows = Rows {
        row: |i| rows[i],
        tree: Tree::chain(draft.len() + 1),
        tokens: &context[base - 1..],
    };
    verify_tree(rows, sampler, None, &mut ctx, &mut Vec::new(), commit)
}

/// A draft tree's logits rows: `row(i)` is the logits after row `i`'s branch (its ancestors'
/// tokens and its own, `tokens[i]`; row 0 is the fed token).
pub struct Rows<'t, F> {
    pub row: F,
    pub tree: Tree<'t>,
    pub tokens: &'t [TokenId],
}

/// The one verification loop, over a draft tree (a chain is one). From the root, at each
/// row the sampler draws its own token `x` exactly as plain decoding would (same history,
/// same random draw) and hands it with its row to `commit` (stop rules, streaming,
/// log-probabilities; false stops here); the walk goes on to the row's child whose token is
/// `x`, if there is one. `context` ends with the fed token; each kept draft token is pushed
/// to it, and its row to `kept`.
///
/// With `p` the sampler's final distribution at a row, the draft token of one child `t` is
/// then kept with probability `p(t)`, and of several children, whichever `x` names: a
/// deterministic draft, verified by the speculative sampling rule. Each committed token
/// consumes exactly one draw, so for a seed the output is token for token plain decoding's
/// whatever the drafts were; greedy is the argmax rule.
///
/// Under a grammar, each row is sampled among the tokens `constraint` allows after the tokens
/// committed before it, and a token advances the constraint once `commit` has taken it. A draft
/// token is only ever compared, never fed to the constraint, so a rejection leaves nothing to
/// undo. When the constraint cannot go on (no mask, a token it refuses) the verification ends
/// as if `commit` had stopped it: `next` is `None` and `constraint.error()` says why.
pub fn verify_tree<'r>(
    rows: Rows<'_, impl Fn(usize) -> &'r [f32]>,
    sampler: &mut Sampler,
    mut constraint: Option<&mut Constraint>,
    context: &mut Vec<usize>,
    kept: &mut Vec<usize>,
    mut commit: impl FnMut(usize, &[f32]) -> bool,
) -> Verdict {
    kept.clear();
    let mut at = 0;
    loop {
        let row = (rows.row)(at);
        let stopped = Verdict {
            accepted: kept.len(),
            next: None,
        };
        let x = match constraint.as_deref_mut() {
            None => sampler.sample(row, context),
            Some(c) => match c.mask() {
                Ok(mask) => sampler.sample_masked(row, context, Some(mask)),
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
        match rows.tree.child(at, x, rows.tokens) {
            Some(c) => {
                context.push(x);
                kept.push(c);
                at = c;
            }
            None => {
                return Verdict {
                    accepted: kept.len(),
                    next: Some(x),
                }
            }
        }
    }
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
