//! Where work runs when one model spans several processes ("places"; MPI ranks in the CLI's
//! `ferrox-mpi`, issue 22). This module knows no transport: the forward pass asks an
//! [`ExpertPlacement`] which place owns a routed expert and hands remote work to an
//! [`ExpertExchange`].
//!
//! Place 0 is the driver (tokenizer, scheduling, attention, dense layers, shared experts, LM
//! head); it keeps a share of the routed experts as every other place does. Results are exact:
//! remote places return each (token, expert) output unsummed, and the driver accumulates them
//! in the single-process order (ascending expert per token), so logits do not depend on the
//! number of places.

use std::ops::Range;
use std::sync::Arc;

/// Contiguous ranges of experts per place: place `p` owns `bounds[p]..bounds[p + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertPlacement {
    bounds: Vec<usize>,
}

/// Why a placement cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlacementError {
    #[error("{places} places for {experts} experts: every place needs at least one")]
    TooManyPlaces { places: usize, experts: usize },
    #[error("{got} expert weights for {experts} experts")]
    WeightCount { got: usize, experts: usize },
    #[error("expert weights must be finite and positive")]
    BadWeight,
}

impl ExpertPlacement {
    /// `experts` split into `places` ranges of equal size (the first ones one larger when it
    /// does not divide).
    pub fn even(experts: usize, places: usize) -> Result<Self, PlacementError> {
        Self::weighted(&vec![1.0; experts], places)
    }

    /// Ranges whose summed `load` (one positive number per expert, e.g. measured token counts)
    /// is as even as contiguous cuts allow: place `p` ends at the first expert where the
    /// running load reaches `(p + 1) / places` of the total, keeping one expert per place.
    pub fn weighted(load: &[f64], places: usize) -> Result<Self, PlacementError> {
        let experts = load.len();
        if places == 0 || places > experts {
            return Err(PlacementError::TooManyPlaces { places, experts });
        }
        if load.iter().any(|w| !w.is_finite() || *w <= 0.0) {
            return Err(PlacementError::BadWeight);
        }
        let total: f64 = load.iter().sum();
        let mut bounds = vec![0];
        let mut acc = 0.0;
        for (e, w) in load.iter().enumerate() {
            acc += w;
            // `bounds.len() - 1` places are cut; this expert may end place `p - 1`.
            let p = bounds.len();
            if p > places {
                break;
            }
            let (left_after, places_after) = (experts - (e + 1), places - p);
            let reached =
                p < places && acc >= total * p as f64 / places as f64 && left_after >= places_after;
            if reached || left_after == places_after {
                bounds.push(e + 1);
            }
        }
        debug_assert_eq!(bounds.len(), places + 1);
        Ok(ExpertPlacement { bounds })
    }

    /// From explicit range ends (`ends[p]` = one past place `p`'s last expert).
    pub fn from_ends(ends: &[usize], experts: usize) -> Result<Self, PlacementError> {
        let mut bounds = vec![0];
        bounds.extend_from_slice(ends);
        let ok = bounds.windows(2).all(|w| w[0] < w[1]) && bounds.last() == Some(&experts);
        if !ok {
            return Err(PlacementError::TooManyPlaces {
                places: ends.len(),
                experts,
            });
        }
        Ok(ExpertPlacement { bounds })
    }

    pub fn places(&self) -> usize {
        self.bounds.len() - 1
    }

    pub fn experts(&self) -> usize {
        *self.bounds.last().unwrap_or(&0)
    }

    /// The experts place `p` keeps resident.
    pub fn range(&self, p: usize) -> Range<usize> {
        self.bounds[p]..self.bounds[p + 1]
    }

    /// The place that runs expert `e`.
    pub fn owner(&self, e: usize) -> usize {
        self.bounds[1..].partition_point(|&end| end <= e)
    }
}

/// Which routed experts one place keeps: its index among `places`, and the measured load
/// per expert of each MoE layer the ranges follow (`None`, or a layer without figures: even
/// ranges). Every place derives the same placements from it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertSplit {
    pub place: usize,
    pub places: usize,
    /// Per layer (indexed by layer), one positive figure per routed expert.
    pub load: Option<Arc<Vec<Option<Vec<f64>>>>>,
}

impl ExpertSplit {
    /// The placement of layer `layer`'s `experts` routed experts.
    pub fn placement(
        &self,
        layer: usize,
        experts: usize,
    ) -> Result<ExpertPlacement, PlacementError> {
        let load = self.load.as_ref().and_then(|l| l.get(layer)?.as_ref());
        match load {
            Some(w) if w.len() != experts => Err(PlacementError::WeightCount {
                got: w.len(),
                experts,
            }),
            Some(w) => ExpertPlacement::weighted(w, self.places),
            None => ExpertPlacement::even(experts, self.places),
        }
    }

    /// Whether this place keeps expert `e` of layer `layer` (of `experts`); every expert when
    /// the placement cannot be made (the caller reports that error where it places them).
    pub fn keeps(&self, layer: usize, experts: usize, e: usize) -> bool {
        self.placement(layer, experts)
            .map_or(true, |p| p.range(self.place).contains(&e))
    }
}

/// The part of a model one place keeps resident; the loader skips (leaves as unread views of
/// the file, or does not build) the rest. [`Share::whole`] is one process.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// Routed experts spread over places (expert parallelism); `None`: all here.
    pub experts: Option<ExpertSplit>,
    /// The layers this place builds and runs (pipeline parallelism); `None`: all.
    pub layers: Option<Range<usize>>,
    /// Whether this place is the driver: the embedding, the final norm and the LM head are
    /// prepared for use (elsewhere they stay unread views of the file).
    pub driver: bool,
}

impl Share {
    /// Everything, in one process.
    pub fn whole() -> Share {
        Share {
            experts: None,
            layers: None,
            driver: true,
        }
    }

    /// Whether this place keeps routed expert `e` of layer `layer` (of `experts`).
    pub fn keeps_expert(&self, layer: usize, experts: usize, e: usize) -> bool {
        self.experts
            .as_ref()
            .is_none_or(|s| s.keeps(layer, experts, e))
    }
}

impl Default for Share {
    fn default() -> Share {
        Share::whole()
    }
}

/// One place's share of a MoE layer's routed work: the distinct token rows it needs and the
/// (row, expert) pairs to run, grouped by ascending expert, rows ascending within a group.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ExpertWork {
    /// `[rows, hidden]`.
    pub rows: Vec<f32>,
    /// (row index into `rows`, expert id).
    pub pairs: Vec<(u32, u32)>,
}

impl ExpertWork {
    pub fn clear(&mut self) {
        self.rows.clear();
        self.pairs.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// Why remote expert work failed (the transport's own errors come as text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExchangeError {
    #[error("expert {expert} is not held here")]
    NotHere { expert: usize },
    #[error("layer {layer} has no mixture of experts")]
    NotMoe { layer: usize },
    #[error("malformed expert work: {0}")]
    Malformed(String),
    #[error("{0}")]
    Transport(String),
}

/// Carries routed work to the other places and their outputs back. `start` returns at once so
/// the driver computes its own experts and the shared expert while the others work.
pub trait ExpertExchange: Send + Sync {
    /// Sends `work[p]` to place `p` (`work[0]`, the driver's own, is not sent) for MoE layer
    /// `layer`.
    fn start(&self, layer: usize, work: &[ExpertWork]) -> Result<(), ExchangeError>;
    /// Waits for the outputs of the started work: per place, `pairs.len() × hidden` values in
    /// pair order (place 0's entry is left empty).
    fn finish(&self, out: &mut Vec<Vec<f32>>) -> Result<(), ExchangeError>;
}

/// What a MoE block of the driver needs to run with its experts spread over places.
#[derive(Clone)]
pub struct RemoteExperts {
    /// The layer index the places know the block by.
    pub layer: usize,
    pub placement: ExpertPlacement,
    pub exchange: Arc<dyn ExpertExchange>,
}

/// Contiguous layer ranges per place for pipeline parallelism: as even as the layer count
/// allows (a place may get none), except that no range starts at a layer that borrows the
/// previous layer's DSA indexer choices (they do not cross places); such a cut moves later.
pub fn layer_ranges(cfg: &crate::config::ModelConfig, places: usize) -> Vec<Range<usize>> {
    let n = cfg.n_layers;
    let borrows = |l: usize| {
        cfg.dsa
            .as_ref()
            .is_some_and(|d| d.indexer_types.get(l) == Some(&crate::config::IndexerKind::Shared))
    };
    let mut bounds = vec![0];
    for p in 1..places.max(1) {
        let mut cut = (n * p / places).max(*bounds.last().unwrap_or(&0));
        while cut < n && borrows(cut) {
            cut += 1;
        }
        bounds.push(cut);
    }
    bounds.push(n);
    bounds.windows(2).map(|w| w[0]..w[1]).collect()
}

/// One sequence of a micro-batch as the places after the driver see it: `n` rows placed at
/// `pos` in the caches the place keeps under `key` (positions at or after `pos` dropped
/// first, as `Decoder::prepare_seq` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageSeq {
    pub key: u64,
    pub pos: usize,
    pub n: usize,
}

/// Carries hidden states through the layers the other places run (pipeline parallelism).
/// The driver describes a forward's micro-batches with `begin`, then hands each one's hidden
/// states to `send` as soon as its own layers are done (returning at once, so it works on the
/// next micro-batch while the next place works on this one), then `finish` returns every
/// micro-batch's hidden states after the last place's layers.
pub trait StageExchange: Send + Sync {
    /// Places in the pipeline, the driver included: the micro-batches a forward splits into.
    fn places(&self) -> usize;
    /// `groups[g]`: micro-batch `g`'s sequences, in row order; `format`: the driver's KV cache
    /// format, which the other places' caches take too.
    fn begin(
        &self,
        groups: &[Vec<StageSeq>],
        format: ferrox_core::cache::CacheFormat,
    ) -> Result<(), ExchangeError>;
    /// Micro-batch `g`'s hidden states after the driver's layers, `[rows, hidden]`.
    fn send(&self, g: usize, x: Vec<f32>) -> Result<(), ExchangeError>;
    /// Every micro-batch's hidden states after the last place's layers, in order.
    fn finish(&self) -> Result<Vec<Vec<f32>>, ExchangeError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_ranges_cover_all_experts_once() {
        for (e, r) in [(8, 2), (8, 4), (8, 3), (128, 8), (5, 5), (64, 1)] {
            let p = ExpertPlacement::even(e, r).unwrap();
            assert_eq!(p.places(), r);
            let mut next = 0;
            for place in 0..r {
                let range = p.range(place);
                assert_eq!(range.start, next);
                assert!(!range.is_empty());
                let len = range.len();
                assert!(len == e / r || len == e / r + 1, "{e}/{r}: {len}");
                for x in range.clone() {
                    assert_eq!(p.owner(x), place);
                }
                next = range.end;
            }
            assert_eq!(next, e);
        }
        assert!(ExpertPlacement::even(4, 5).is_err());
    }

    #[test]
    fn weighted_ranges_follow_load() {
        // Half the load on expert 0: it gets a place of its own.
        let p = ExpertPlacement::weighted(&[7.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2).unwrap();
        assert_eq!(p.range(0), 0..1);
        assert_eq!(p.range(1), 1..8);
        // Everything on the last expert still leaves one expert per place.
        let p = ExpertPlacement::weighted(&[1e-9, 1e-9, 1e-9, 100.0], 4).unwrap();
        assert_eq!((0..4).map(|i| p.range(i).len()).sum::<usize>(), 4);
        assert!(ExpertPlacement::weighted(&[1.0, 0.0], 2).is_err());
    }
}
