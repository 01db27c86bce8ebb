//! Pipeline parallelism (issue 22), both sides. The driver's decoder holds the first layers
//! and a [`StageExchange`] to the places holding the rest; it splits a multi-sequence forward
//! into micro-batches of whole sequences, runs its layers over each and hands it on at once,
//! so place `p` works on micro-batch `k` while place `p + 1` works on `k − 1`; the hidden
//! states come back after the last place, and the driver applies the final norm and the head.
//! Every row is computed as it would be in one batch (the forward is batch-invariant), so the
//! logits are bit-identical to one process. A place after the driver runs
//! [`Decoder::forward_stage`] on its own caches, which it keeps per [`SeqBatch::key`].

use super::{grow, Decoder, Head, Scratch, SeqBatch};
use crate::blocks::Experts;
use crate::distributed::{StageExchange, StageSeq};
use ferrox_core::cache::KvCache;
use std::sync::Arc;

/// One sequence of a micro-batch on a place after the driver: `n` rows at `pos` in `caches`
/// (one per layer of that place's decoder).
pub struct StageRows<'a> {
    pub n: usize,
    pub pos: usize,
    pub caches: &'a mut [KvCache],
}

impl Decoder {
    /// Makes this (driver's) decoder send its hidden states through `stages` after its own
    /// layers: the layers after them run elsewhere.
    pub fn set_stages(&mut self, stages: Arc<dyn StageExchange>) {
        self.stages = Some(stages);
    }

    /// Whether every layer's cache is in the caches this process holds, so a sequence's
    /// caches can be copied or restored here (prefix reuse); false when some layers run in
    /// other processes, whose caches follow only the forwards.
    pub fn caches_local(&self) -> bool {
        self.stages.is_none()
    }

    /// `forward_head` with the later layers elsewhere (`seqs` already prepared, `out` empty).
    ///
    /// # Panics
    /// When the transport fails (a lost place): the step cannot finish without its layers.
    pub(super) fn forward_pipelined(
        &self,
        stages: &dyn StageExchange,
        seqs: &mut [SeqBatch<'_>],
        out: &mut Vec<f32>,
        head: Head,
    ) {
        let d = self.config.hidden_dim;
        let groups = micro_batches(seqs.len(), stages.places());
        let meta: Vec<Vec<StageSeq>> = groups
            .iter()
            .map(|g| {
                seqs[g.clone()]
                    .iter()
                    .map(|q| StageSeq {
                        key: q.key,
                        pos: q.pos,
                        n: q.tokens.len(),
                    })
                    .collect()
            })
            .collect();
        let fail =
            |e: crate::distributed::ExchangeError| -> ! { panic!("pipeline parallelism: {e}") };
        stages
            .begin(&meta, self.cache_format)
            .unwrap_or_else(|e| fail(e));
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Scratch { x, h, t, states } = &mut *guard;
        for (g, range) in groups.iter().enumerate() {
            let grp = &mut seqs[range.clone()];
            let n: usize = grp.iter().map(|q| q.tokens.len()).sum();
            let (xg, hg, tg) = (grow(x, n * d), grow(h, n * d), grow(t, n * d));
            self.embed_rows(grp, xg);
            self.run_layers(grp, states, xg, hg, tg, Experts::All);
            stages.send(g, xg.to_vec()).unwrap_or_else(|e| fail(e));
        }
        let back = stages.finish().unwrap_or_else(|e| fail(e));
        for (range, xg) in groups.iter().zip(&back) {
            let grp = &seqs[range.clone()];
            let n: usize = grp.iter().map(|q| q.tokens.len()).sum();
            if xg.len() != n * d {
                let got = xg.len();
                panic!("pipeline parallelism: {got} values back for {n} rows");
            }
            self.head_rows(grp, xg, grow(h, n * d), out, head);
        }
    }

    /// A place after the driver: this decoder's layers over the micro-batch `x` (`[rows,
    /// hidden]`, the rows of `seqs` back to back), in place. Each sequence's caches are
    /// checked against and cut at its `pos` first, as the driver's are.
    pub fn forward_stage(
        &self,
        x: &mut [f32],
        seqs: &mut [StageRows<'_>],
    ) -> Result<(), super::ForwardError> {
        let d = self.config.hidden_dim;
        let n: usize = seqs.iter().map(|s| s.n).sum();
        if x.len() != n * d {
            return Err(super::ForwardError::CacheShape(format!(
                "{} values for {n} rows of {d}",
                x.len()
            )));
        }
        for s in seqs.iter_mut() {
            self.prepare_caches(s.pos, s.caches)?;
        }
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Scratch { h, t, states, .. } = &mut *guard;
        if states.len() < seqs.len() {
            states.resize_with(seqs.len(), Default::default);
        }
        let (h, t) = (grow(h, n * d), grow(t, n * d));
        let mut segs: Vec<crate::blocks::Segment<'_>> = seqs
            .iter_mut()
            .zip(states.iter_mut())
            .map(|(s, state)| {
                state.topk.clear();
                state.topk_width = 0;
                crate::blocks::Segment {
                    n: s.n,
                    pos: s.pos,
                    caches: &mut *s.caches,
                    state,
                    tree: None,
                }
            })
            .collect();
        self.layer_stack(x, h, t, n, &mut segs, Experts::All);
        Ok(())
    }
}

/// Contiguous micro-batches of whole sequences: as many as there are places (one in flight
/// per place), at most one per sequence, sizes differing by at most one sequence.
fn micro_batches(seqs: usize, places: usize) -> Vec<std::ops::Range<usize>> {
    let m = places.clamp(1, seqs.max(1));
    (0..m).map(|g| seqs * g / m..seqs * (g + 1) / m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_batches_cover_every_sequence_once() {
        assert_eq!(micro_batches(1, 4), vec![0..1]);
        assert_eq!(micro_batches(5, 2), vec![0..2, 2..5]);
        assert_eq!(micro_batches(4, 4), vec![0..1, 1..2, 2..3, 3..4]);
        assert_eq!(micro_batches(3, 1), vec![0..3]);
    }
}
