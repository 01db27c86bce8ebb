//! Expert and pipeline parallelism over MPI (issue 22), on rsmpi. Pipeline parallelism
//! (`--pipeline-parallel`): each rank builds a contiguous range of layers; see [`stages`] for
//! the transport. Expert parallelism: `mpiexec -n R ferrox ... --expert-parallel`
//! runs one process per rank; rank 0 is the driver (HTTP, scheduling, attention, dense layers,
//! shared experts, its own share of routed experts), ranks 1.. keep only their contiguous
//! share of each layer's routed experts and serve them ([`ferrox_models::distributed`] is the
//! transport-free side).
//!
//! One communication thread per rank initialises, uses and finalises MPI; the forward pass
//! talks to it through channels. Per MoE layer that has remote work (rank 0 sends, the others
//! receive; their own send parts are empty):
//! 1. `MPI_Alltoall` of a 4-word header per rank: `[op, layer, payload words, pairs]`;
//! 2. `MPI_Alltoallv` of the payload (u32 words): the (row, expert) pairs, then the rows'
//!    f32 bits;
//! 3. `MPI_Alltoallv` back (f32): a status word, then `pairs × hidden` expert outputs in pair
//!    order, unsummed, so rank 0 accumulates them in the single-process order.

// Without the `mpi` feature (the CLI's `mpi` feature enables it) the crate is empty: the
// workspace then builds and tests without the system's MPICH.
#![cfg(feature = "mpi")]

mod comm;
mod request;
mod stages;
mod wire;

pub use comm::{Cluster, Mode, Traffic};
pub use request::Handler;
pub use stages::DriverStages;
pub use stages::StageHandler;

use ferrox_core::cache::KvCache;
use ferrox_models::blocks::moe::MoeBlock;
use ferrox_models::decoder::{Decoder, StageRows};
use ferrox_models::distributed::{
    ExchangeError, ExpertPlacement, ExpertSplit, PlacementError, RemoteExperts,
};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    #[error("MPI could not be initialised (already initialised, or no MPI runtime)")]
    Init,
    #[error("the MPI communication thread stopped")]
    CommThread,
    #[error("placing layer {layer}'s experts: {source}")]
    Placement {
        layer: usize,
        source: PlacementError,
    },
    #[error("the model has no mixture-of-experts layer to spread")]
    NoMoe,
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    #[error("{0} does not fit an MPI count")]
    Count(usize),
}

/// This rank's place among the cluster's for `load` (per layer, measured load per expert;
/// `None`: even ranges).
pub fn split(cluster: &Cluster, load: Option<Arc<Vec<Option<Vec<f64>>>>>) -> ExpertSplit {
    ExpertSplit {
        place: cluster.rank(),
        places: cluster.size(),
        load,
    }
}

/// Per layer, the placement of its routed experts (`experts[l]`: its routed expert count,
/// `None` for a layer without routed experts).
fn placements(
    split: &ExpertSplit,
    experts: impl Iterator<Item = Option<usize>>,
) -> Result<Vec<Option<ExpertPlacement>>, MpiError> {
    let out: Vec<Option<ExpertPlacement>> = experts
        .enumerate()
        .map(|(layer, n)| {
            n.map(|n| {
                split
                    .placement(layer, n)
                    .map_err(|source| MpiError::Placement { layer, source })
            })
            .transpose()
        })
        .collect::<Result<_, _>>()?;
    if out.iter().all(Option::is_none) {
        return Err(MpiError::NoMoe);
    }
    Ok(out)
}

/// The routed expert count of a block that routes.
fn routed(moe: Option<&MoeBlock>) -> Option<usize> {
    moe.filter(|m| m.router.is_some()).map(|m| m.experts.len())
}

/// Rank 0: makes every MoE layer of `decoder` send the experts other ranks own (as `split`
/// places them; the decoder was loaded with the same split) to them.
pub fn drive_experts(
    cluster: &Cluster,
    decoder: &mut Decoder,
    split: &ExpertSplit,
) -> Result<(), MpiError> {
    let experts = decoder.layers.iter().map(|l| routed(l.ffn.as_moe()));
    let placements = placements(split, experts)?;
    let exchange = Arc::new(cluster.exchange(decoder.config.hidden_dim));
    for (layer, (l, p)) in decoder.layers.iter_mut().zip(placements).enumerate() {
        if let (Some(moe), Some(placement)) = (l.ffn.as_moe_mut(), p) {
            moe.remote = Some(RemoteExperts {
                layer,
                placement,
                exchange: exchange.clone(),
            });
        }
    }
    Ok(())
}

/// Ranks 1..: the handler that serves rank 0's work on `blocks` (per layer, the MoE block
/// holding this rank's experts, from `ferrox_models::load::load_experts` with the same
/// `split`), for [`Cluster::serve`].
pub fn expert_handler(
    cluster: &Cluster,
    blocks: Vec<Option<MoeBlock>>,
    split: &ExpertSplit,
) -> Result<Handler, MpiError> {
    let placements = placements(split, blocks.iter().map(|b| routed(b.as_ref())))?;
    let rank = cluster.rank();
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    let handler =
        move |layer: usize, work: &ferrox_models::distributed::ExpertWork, out: &mut Vec<f32>| {
            let moe = blocks
                .get(layer)
                .and_then(|b| b.as_ref())
                .ok_or(ExchangeError::NotMoe { layer })?;
            let own = placements[layer]
                .as_ref()
                .ok_or(ExchangeError::NotMoe { layer })?
                .range(rank);
            if let Some(&(_, e)) = work.pairs.iter().find(|p| !own.contains(&(p.1 as usize))) {
                return Err(ExchangeError::NotHere { expert: e as usize });
            }
            moe.run_work(work, &mut xs, &mut ys, out)
        };
    Ok(Box::new(handler))
}

/// This rank's layers for pipeline parallelism (`ferrox_models::distributed::layer_ranges`).
pub fn stage_layers(cluster: &Cluster, cfg: &ferrox_models::ModelConfig) -> std::ops::Range<usize> {
    ferrox_models::distributed::layer_ranges(cfg, cluster.size())[cluster.rank()].clone()
}

/// Rank 0: makes `decoder` (built with rank 0's layers) hand its hidden states to the other
/// ranks' layers.
pub fn drive_stages(cluster: &Cluster, decoder: &mut Decoder) {
    if cluster.size() > 1 {
        let stages = cluster.stages(decoder.config.hidden_dim);
        decoder.set_stages(Arc::new(stages));
    }
}

/// Ranks 1..: the handler that runs `decoder`'s layers (this rank's range) over each
/// micro-batch, on the caches it keeps per sequence key, for [`Cluster::serve_stages`].
pub fn stage_handler(mut decoder: Decoder) -> StageHandler {
    let mut caches: HashMap<u64, Vec<KvCache>> = HashMap::new();
    Box::new(move |group, format, x| {
        if decoder.cache_format() != format {
            decoder
                .set_cache_format(format)
                .map_err(|e| ExchangeError::Malformed(format!("KV cache format: {e}")))?;
        }
        // Each sequence's caches leave the map for the forward (two borrows at once).
        let mut taken: Vec<(u64, Vec<KvCache>)> = Vec::with_capacity(group.len());
        for s in group {
            if taken.iter().any(|(k, _)| *k == s.key) {
                let msg = format!("sequence key {} twice in one micro-batch", s.key);
                return Err(ExchangeError::Malformed(msg));
            }
            let c = caches
                .remove(&s.key)
                .unwrap_or_else(|| decoder.new_caches());
            taken.push((s.key, c));
        }
        let mut rows: Vec<StageRows<'_>> = group
            .iter()
            .zip(taken.iter_mut())
            .map(|(s, (_, c))| StageRows {
                n: s.n,
                pos: s.pos,
                caches: c,
            })
            .collect();
        let r = decoder.forward_stage(x, &mut rows);
        drop(rows);
        caches.extend(taken);
        r.map_err(|e| ExchangeError::Malformed(e.to_string()))
    })
}
