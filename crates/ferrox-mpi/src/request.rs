//! What rank 0's threads send the communication thread (and what both sides count): the
//! requests, the handlers serving ranks run, and the traffic counters. A leaf, so the thread
//! (`comm.rs`) and pipeline transport (`stages.rs`) both use it without using each other.

use crate::MpiError;
use ferrox_core::cache::CacheFormat;
use ferrox_models::distributed::{ExchangeError, ExpertWork, StageSeq};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, SyncSender};

/// What a serving rank runs for each MoE layer's work: outputs into the `Vec`.
pub type Handler =
    Box<dyn FnMut(usize, &ExpertWork, &mut Vec<f32>) -> Result<(), ExchangeError> + Send>;

pub(crate) type Outputs = Result<Vec<Vec<f32>>, ExchangeError>;

/// What a rank after 0 runs for one micro-batch: its layers over `x` in place, its caches in
/// the driver's format.
pub type StageHandler =
    Box<dyn FnMut(&[StageSeq], CacheFormat, &mut [f32]) -> Result<(), ExchangeError> + Send>;

pub(crate) enum Request {
    Moe {
        layer: usize,
        hidden: usize,
        /// Per rank: packed work (index 0 empty).
        payloads: Vec<Vec<u32>>,
        pairs: Vec<usize>,
        reply: SyncSender<Outputs>,
    },
    Serve {
        hidden: usize,
        handler: Handler,
        done: SyncSender<Result<(), MpiError>>,
    },
    /// Rank 0: one pipelined forward; micro-batches arrive on `data`.
    Forward {
        header: Vec<u64>,
        hidden: usize,
        data: Receiver<Vec<f32>>,
        reply: SyncSender<Result<Vec<Vec<f32>>, ExchangeError>>,
    },
    ServeStages {
        hidden: usize,
        handler: StageHandler,
        done: SyncSender<()>,
    },
    /// Waits until every rank has reached its `ready`.
    Barrier(SyncSender<()>),
    Stop,
    Abort,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) exchanges: AtomicU64,
    pub(crate) rows: AtomicU64,
    pub(crate) pairs: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) bytes_back: AtomicU64,
    pub(crate) forwards: AtomicU64,
    pub(crate) micro_batches: AtomicU64,
    pub(crate) stage_rows: AtomicU64,
    pub(crate) stage_bytes: AtomicU64,
}

/// Prints `ferrox-mpi rank R: error` in one write and gives mpiexec time to forward it:
/// `MPI_Abort` tears the job down at once, and a message still in (or half in) the forwarder's
/// pipe was lost — eprintln! writes its pieces separately, and a test saw only
/// "ferrox-mpi rank " arrive.
pub(crate) fn report_before_abort(rank: impl std::fmt::Display, error: &dyn std::fmt::Display) {
    use std::io::Write;
    let line = format!("ferrox-mpi rank {rank}: {error}\n");
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(line.as_bytes());
    let _ = err.flush();
    drop(err);
    std::thread::sleep(std::time::Duration::from_millis(300));
}
