//! Verification of a deterministic draft: speculative sampling (Leviathan et al. 2023; Chen et
//! al. 2023) with a point-mass draft.

use crate::sampling::Sampler;

/// Verifies `draft` against the target model and returns the committed tokens: the accepted
/// draft prefix followed by exactly one more token drawn by the target.
///
/// `rows[i]` (for `i` in `0..=draft.len()`) are the logits after `history` and `draft[..i]`;
/// `history` is everything before the first draft token (its last token is the one that was fed
/// with the draft). Each draft token `t` is checked against the sampler's final distribution
/// `p` (penalties with the accepted drafts in the history, temperature, top-k/p, min-p): it is
/// accepted with probability `p(t)`; on rejection the token is drawn from `p` without `t`,
/// renormalised; when the whole draft is accepted the last row gives a bonus token. This is
/// speculative sampling (Leviathan et al. 2023; Chen et al. 2023) with a point-mass draft.
///
/// It is realised by the coupling that makes it exact and reproducible: the sampler draws its
/// own token `x ~ p` at each position, exactly as plain decoding would, and the draft token is
/// accepted iff `x == t`. Then `P(accept) = p(t)`, and after a rejection `x` is distributed as
/// `p` without `t`, renormalised. Each committed token consumes exactly one draw of the
/// sampler's random stream, as in plain decoding, so for a given seed speculative output is
/// token for token the plain output whatever the drafts were. Greedy is the argmax rule.
///
/// Panics when there are fewer than `draft.len() + 1` rows (a caller bug, not bad input).
pub fn verify<R: AsRef<[f32]>>(
    rows: &[R],
    draft: &[usize],
    sampler: &mut Sampler,
    history: &[usize],
) -> Vec<usize> {
    assert!(
        rows.len() > draft.len(),
        "verify needs one logits row per draft token plus one"
    );
    // Penalties only look at the last `penalty_last_n` tokens: a window is the same history.
    let window = sampler.config.penalty_last_n;
    let mut hist = history[history.len().saturating_sub(window)..].to_vec();
    let mut out = Vec::with_capacity(draft.len() + 1);
    for (i, row) in rows.iter().take(draft.len() + 1).enumerate() {
        let x = sampler.sample(row.as_ref(), &hist);
        out.push(x);
        if draft.get(i) != Some(&x) {
            break;
        }
        hist.push(x);
    }
    out
}
