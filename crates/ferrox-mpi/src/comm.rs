//! The communication thread: MPI is initialised, used and finalised on it alone
//! (`MPI_THREAD_FUNNELED`); rank 0's forward pass reaches it through [`DriverExchange`]
//! (expert parallelism) or [`DriverStages`] (pipeline parallelism), the other ranks hand it
//! their handler and it serves until rank 0 stops.

use crate::request::report_before_abort;
use crate::request::{Counters, Handler, Outputs, Request, StageHandler};
use crate::stages::{self, DriverStages};
use crate::{wire, MpiError};
use ferrox_models::distributed::{ExchangeError, ExpertExchange, ExpertWork};
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

const OP_STOP: i32 = 0;
const OP_MOE: i32 = 1;
const HEADER: usize = 4;

/// How the ranks share the model: it decides how rank 0 stops the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Expert parallelism: collectives over all ranks per MoE layer.
    Experts,
    /// Pipeline parallelism: point to point along the ranks.
    Stages,
}

/// What rank 0 moved, counted on its side (headers included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// Exchanges (one per MoE layer and forward with remote work).
    pub exchanges: u64,
    /// Token rows sent (a token goes once to each rank owning any of its experts).
    pub rows: u64,
    /// (token, expert) pairs run elsewhere.
    pub pairs: u64,
    pub bytes_out: u64,
    pub bytes_back: u64,
    /// Pipelined forwards, their micro-batches and rows.
    pub forwards: u64,
    pub micro_batches: u64,
    pub stage_rows: u64,
    /// Bytes each rank boundary carried (headers, hidden states, status words).
    pub stage_bytes: u64,
}

/// This process's place in the MPI job and its communication thread.
pub struct Cluster {
    mode: Mode,
    rank: usize,
    size: usize,
    tx: SyncSender<Request>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl Cluster {
    /// Initialises MPI on a new communication thread.
    pub fn start(mode: Mode) -> Result<Cluster, MpiError> {
        let (tx, rx) = sync_channel(1);
        let (ready_tx, ready_rx) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("ferrox-mpi".into())
            .spawn(move || comm_thread(rx, ready_tx, mode))
            .map_err(|_| MpiError::CommThread)?;
        let (rank, size) = ready_rx.recv().map_err(|_| MpiError::CommThread)??;
        Ok(Cluster {
            mode,
            rank,
            size,
            tx,
            thread: Some(thread),
            counters: Arc::default(),
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Rank 0's side of the expert exchange, for hidden states of `hidden` values.
    pub fn exchange(&self, hidden: usize) -> DriverExchange {
        DriverExchange {
            tx: self.tx.clone(),
            hidden,
            pending: Mutex::new(None),
            counters: self.counters.clone(),
            size: self.size,
        }
    }

    /// Rank 0's side of the pipeline, for hidden states of `hidden` values.
    pub fn stages(&self, hidden: usize) -> DriverStages {
        DriverStages::new(self.tx.clone(), hidden, self.size, self.counters.clone())
    }

    /// Ranks 1..: runs `handler` on rank 0's micro-batches until rank 0 stops, then
    /// finalises MPI.
    pub fn serve_stages(self, hidden: usize, handler: StageHandler) -> Result<(), MpiError> {
        self.serve_until_stopped(|done| Request::ServeStages {
            hidden,
            handler,
            done,
        })
    }

    /// Hands the communication thread the serving loop `request(done)`, waits for the loop to
    /// end (rank 0 stopped) and for the thread (which finalises MPI); what the loop sent.
    fn serve_until_stopped<T>(
        mut self,
        request: impl FnOnce(SyncSender<T>) -> Request,
    ) -> Result<T, MpiError> {
        let (done, done_rx) = sync_channel(1);
        self.tx
            .send(request(done))
            .map_err(|_| MpiError::CommThread)?;
        let r = done_rx.recv().map_err(|_| MpiError::CommThread)?;
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| MpiError::CommThread)?;
        }
        Ok(r)
    }

    /// What rank 0 moved so far.
    pub fn traffic(&self) -> Traffic {
        let c = &self.counters;
        Traffic {
            exchanges: c.exchanges.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            pairs: c.pairs.load(Ordering::Relaxed),
            bytes_out: c.bytes_out.load(Ordering::Relaxed),
            bytes_back: c.bytes_back.load(Ordering::Relaxed),
            forwards: c.forwards.load(Ordering::Relaxed),
            micro_batches: c.micro_batches.load(Ordering::Relaxed),
            stage_rows: c.stage_rows.load(Ordering::Relaxed),
            stage_bytes: c.stage_bytes.load(Ordering::Relaxed),
        }
    }

    /// Returns once every rank has called it: rank 0 calls it when its model is loaded and
    /// the others before they serve, so rank 0's first forward (and "loaded" or "serving"
    /// on stderr) does not wait on a rank still loading.
    pub fn ready(&self) -> Result<(), MpiError> {
        let (done, rx) = sync_channel(1);
        self.tx
            .send(Request::Barrier(done))
            .map_err(|_| MpiError::CommThread)?;
        rx.recv().map_err(|_| MpiError::CommThread)
    }

    /// Ends every rank of the job (`MPI_Abort`, exit code 1) after printing `error`: for a
    /// failure before the ranks serve, when a plain exit would leave the others waiting in a
    /// collective forever.
    pub fn abort(mut self, error: &dyn std::fmt::Display) -> ! {
        report_before_abort(self.rank, error);
        let _ = self.tx.send(Request::Abort);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Only reached when the communication thread is gone.
        std::process::exit(1)
    }

    /// Ranks 1..: serves rank 0's expert work with `handler` until rank 0 stops, then
    /// finalises MPI.
    pub fn serve(self, hidden: usize, handler: Handler) -> Result<(), MpiError> {
        self.serve_until_stopped(|done| Request::Serve {
            hidden,
            handler,
            done,
        })?
    }
}

impl Drop for Cluster {
    /// Rank 0 tells the others to stop; every rank finalises MPI on its thread.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.tx.send(Request::Stop);
            let _ = t.join();
        }
    }
}

/// Rank 0's [`ExpertExchange`]: packs the work on the calling thread, the communication
/// thread moves it.
pub struct DriverExchange {
    tx: SyncSender<Request>,
    hidden: usize,
    pending: Mutex<Option<Receiver<Outputs>>>,
    counters: Arc<Counters>,
    size: usize,
}

impl ExpertExchange for DriverExchange {
    fn start(&self, layer: usize, work: &[ExpertWork]) -> Result<(), ExchangeError> {
        if work.len() != self.size {
            let msg = format!("work for {} places on {} ranks", work.len(), self.size);
            return Err(ExchangeError::Malformed(msg));
        }
        let mut payloads = vec![Vec::new(); self.size];
        let mut pairs = vec![0; self.size];
        let c = &self.counters;
        for (p, w) in work.iter().enumerate().skip(1) {
            wire::pack(w, &mut payloads[p]);
            pairs[p] = w.pairs.len();
            let rows = (w.rows.len() / self.hidden.max(1)) as u64;
            c.rows.fetch_add(rows, Ordering::Relaxed);
            c.pairs.fetch_add(w.pairs.len() as u64, Ordering::Relaxed);
            let out = (payloads[p].len() + HEADER) * 4;
            c.bytes_out.fetch_add(out as u64, Ordering::Relaxed);
            let back = (1 + w.pairs.len() * self.hidden) * 4;
            c.bytes_back.fetch_add(back as u64, Ordering::Relaxed);
        }
        c.exchanges.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = sync_channel(1);
        let req = Request::Moe {
            layer,
            hidden: self.hidden,
            payloads,
            pairs,
            reply,
        };
        let lost = || ExchangeError::Transport("the MPI communication thread stopped".into());
        self.tx.send(req).map_err(|_| lost())?;
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(rx);
        Ok(())
    }

    fn finish(&self, out: &mut Vec<Vec<f32>>) -> Result<(), ExchangeError> {
        let rx = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| ExchangeError::Transport("finish without start".into()))?;
        let lost = || ExchangeError::Transport("the MPI communication thread stopped".into());
        let got = rx.recv().map_err(|_| lost())??;
        out.resize_with(self.size, Vec::new);
        for (p, v) in got.into_iter().enumerate().skip(1) {
            out[p] = v;
        }
        Ok(())
    }
}

fn comm_thread(
    rx: Receiver<Request>,
    ready: SyncSender<Result<(usize, usize), MpiError>>,
    mode: Mode,
) {
    let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
        let _ = ready.send(Err(MpiError::Init));
        return;
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    if ready.send(Ok((rank, size))).is_err() {
        return;
    }
    while let Ok(req) = rx.recv() {
        match req {
            Request::Moe {
                layer,
                hidden,
                payloads,
                pairs,
                reply,
            } => {
                let r = drive(&world, layer, hidden, &payloads, &pairs);
                let _ = reply.send(r);
            }
            Request::Serve {
                hidden,
                handler,
                done,
            } => {
                let _ = done.send(serve(&world, hidden, handler));
                break;
            }
            Request::Forward {
                header,
                hidden,
                data,
                reply,
            } => {
                let _ = reply.send(stages::drive(&world, &header, hidden, &data));
            }
            Request::ServeStages {
                hidden,
                handler,
                done,
            } => {
                stages::serve(&world, hidden, handler);
                let _ = done.send(());
                break;
            }
            Request::Barrier(done) => {
                world.barrier();
                let _ = done.send(());
            }
            Request::Abort => world.abort(1),
            Request::Stop if mode == Mode::Stages => {
                if rank == 0 && size > 1 {
                    world
                        .process_at_rank(1)
                        .send_with_tag(&[stages::OP_STOP][..], stages::TAG_HEADER);
                }
                break;
            }
            Request::Stop => {
                if rank == 0 {
                    let header = vec![OP_STOP; HEADER * size];
                    let mut got = vec![0; HEADER * size];
                    world.all_to_all_into(&header[..], &mut got[..]);
                }
                break;
            }
        }
    }
    // `universe` drops here: MPI_Finalize on the thread that initialised MPI.
}

fn count(n: usize) -> Result<Count, ExchangeError> {
    Count::try_from(n)
        .map_err(|_| ExchangeError::Transport(format!("{n} does not fit an MPI count")))
}

/// Displacements of `counts` laid back to back.
fn displs(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect()
}

/// Rank 0: one MoE layer's exchange (header, work out, outputs back).
fn drive(
    world: &SimpleCommunicator,
    layer: usize,
    hidden: usize,
    payloads: &[Vec<u32>],
    pairs: &[usize],
) -> Outputs {
    let size = payloads.len();
    let mut header = vec![0; HEADER * size];
    for p in 1..size {
        let h = [
            OP_MOE,
            count(layer)?,
            count(payloads[p].len())?,
            count(pairs[p])?,
        ];
        header[p * HEADER..(p + 1) * HEADER].copy_from_slice(&h);
    }
    let mut ignored = vec![0; HEADER * size];
    world.all_to_all_into(&header[..], &mut ignored[..]);

    let counts: Vec<Count> = payloads
        .iter()
        .map(|p| count(p.len()))
        .collect::<Result<_, _>>()?;
    let flat: Vec<u32> = payloads.concat();
    let zeros = vec![0; size];
    let send = Partition::new(&flat[..], &counts[..], displs(&counts));
    let mut none: [u32; 0] = [];
    let mut recv = PartitionMut::new(&mut none[..], &zeros[..], &zeros[..]);
    world.all_to_all_varcount_into(&send, &mut recv);

    let back: Vec<Count> = (0..size)
        .map(|p| {
            if p == 0 {
                Ok(0)
            } else {
                count(1 + pairs[p] * hidden)
            }
        })
        .collect::<Result<_, _>>()?;
    let total = back.iter().map(|&c| c as usize).sum();
    let mut got = vec![0f32; total];
    let empty: [f32; 0] = [];
    let send = Partition::new(&empty[..], &zeros[..], &zeros[..]);
    let at = displs(&back);
    let mut recv = PartitionMut::new(&mut got[..], &back[..], &at[..]);
    world.all_to_all_varcount_into(&send, &mut recv);

    let mut out = vec![Vec::new(); size];
    for p in 1..size {
        let part = &got[at[p] as usize..(at[p] + back[p]) as usize];
        if part[0] != 0.0 {
            return Err(ExchangeError::Transport(format!(
                "rank {p} failed layer {layer}'s experts (see its stderr)"
            )));
        }
        out[p] = part[1..].to_vec();
    }
    Ok(out)
}

/// Ranks 1..: answers rank 0's exchanges until it stops.
fn serve(world: &SimpleCommunicator, hidden: usize, mut handler: Handler) -> Result<(), MpiError> {
    let size = world.size() as usize;
    let rank = world.rank();
    let zeros = vec![0; size];
    let (mut work, mut out, mut words) = (ExpertWork::default(), Vec::new(), Vec::new());
    loop {
        let mine = vec![0; HEADER * size];
        let mut header = vec![0; HEADER * size];
        world.all_to_all_into(&mine[..], &mut header[..]);
        let [op, layer, n_words, pairs] = [header[0], header[1], header[2], header[3]];
        if op == OP_STOP {
            return Ok(());
        }
        let bad = |what: String| MpiError::Exchange(ExchangeError::Malformed(what));
        if op != OP_MOE || layer < 0 || n_words < 0 || pairs < 0 {
            return Err(bad(format!("header {op} {layer} {n_words} {pairs}")));
        }
        words.clear();
        words.resize(n_words as usize, 0u32);
        let mut from0 = zeros.clone();
        from0[0] = n_words;
        let empty: [u32; 0] = [];
        let send = Partition::new(&empty[..], &zeros[..], &zeros[..]);
        let mut recv = PartitionMut::new(&mut words[..], &from0[..], &zeros[..]);
        world.all_to_all_varcount_into(&send, &mut recv);

        let want = pairs as usize * hidden;
        let done = wire::unpack(&words, pairs as usize, &mut work)
            .and_then(|()| handler(layer as usize, &work, &mut out))
            .and_then(|()| match out.len() == want {
                true => Ok(()),
                false => Err(ExchangeError::Malformed(format!("{} outputs", out.len()))),
            });
        // Status word, then the outputs; on failure the same count of zeros, so rank 0's
        // receive matches and it reports the failure.
        let mut reply = Vec::with_capacity(1 + want);
        match done {
            Ok(()) => {
                reply.push(0.0);
                reply.extend_from_slice(&out);
            }
            Err(e) => {
                eprintln!("ferrox-mpi rank {rank}: layer {layer}: {e}");
                reply.push(1.0);
                reply.resize(1 + want, 0.0);
            }
        }
        let mut to0 = zeros.clone();
        to0[0] = count(reply.len())?;
        let send = Partition::new(&reply[..], &to0[..], &zeros[..]);
        let mut none: [f32; 0] = [];
        let mut recv = PartitionMut::new(&mut none[..], &zeros[..], &zeros[..]);
        world.all_to_all_varcount_into(&send, &mut recv);
    }
}
