//! Pipeline parallelism's transport (point to point, on the communication thread). Per
//! forward, rank 0 sends rank 1 a header (op, micro-batch count, KV cache format as
//! `wire::format_words`, then per micro-batch its sequences as (key, pos, rows)), which every
//! rank passes on; then, micro-batch by micro-batch, the hidden states go 0 → 1 → … → R−1 →
//! 0, each rank running its layers in between. Rank 0 posts every receive from the last rank
//! first and sends with immediate sends as its layers finish each micro-batch; the other ranks
//! receive a micro-batch, run it, send it on with an immediate send and go on to the next, so
//! rank `r` works on micro-batch `k` while rank `r + 1` works on `k − 1`. Each data message
//! ends in a status word: 0, or 1 once some rank failed (the later ones pass it on without
//! running).

pub use crate::request::StageHandler;
use crate::request::{report_before_abort, Counters, Request};
use crate::wire::{format_words, words_format, FORMAT_WORDS};
use ferrox_core::cache::CacheFormat;
use ferrox_models::distributed::{ExchangeError, StageExchange, StageSeq};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

pub(crate) const OP_STOP: u64 = 0;
const OP_FORWARD: u64 = 1;
pub(crate) const TAG_HEADER: i32 = 1;
/// Micro-batch `g`'s data goes under tag `TAG_DATA + g`.
const TAG_DATA: i32 = 16;
/// Header words before the micro-batches: op, micro-batch count, cache format.
const HEAD_WORDS: usize = 2 + FORMAT_WORDS;

/// A forward as its header words.
pub(crate) fn header(groups: &[Vec<StageSeq>], format: CacheFormat) -> Vec<u64> {
    let mut h = vec![OP_FORWARD, groups.len() as u64];
    h.extend(format_words(format));
    for g in groups {
        h.push(g.len() as u64);
        for s in g {
            h.extend([s.key, s.pos as u64, s.n as u64]);
        }
    }
    h
}

type Parsed = (Vec<Vec<StageSeq>>, CacheFormat);

/// The micro-batches and cache format of header words.
pub(crate) fn parse(h: &[u64]) -> Result<Parsed, ExchangeError> {
    let bad = || ExchangeError::Malformed(format!("pipeline header of {} words", h.len()));
    let f = h.get(2..HEAD_WORDS).ok_or_else(bad)?;
    let format = words_format([f[0], f[1], f[2]])?;
    let m = *h.get(1).ok_or_else(bad)? as usize;
    let mut at = HEAD_WORDS;
    let mut groups = Vec::new();
    for _ in 0..m {
        let k = *h.get(at).ok_or_else(bad)? as usize;
        let words = h.get(at + 1..at + 1 + 3 * k).ok_or_else(bad)?;
        groups.push(
            words
                .chunks_exact(3)
                .map(|w| StageSeq {
                    key: w[0],
                    pos: w[1] as usize,
                    n: w[2] as usize,
                })
                .collect(),
        );
        at += 1 + 3 * k;
    }
    if at != h.len() {
        return Err(bad());
    }
    Ok((groups, format))
}

/// Values of micro-batch `g`'s message: its rows, then the status word.
fn words(group: &[StageSeq], hidden: usize) -> usize {
    group.iter().map(|s| s.n).sum::<usize>() * hidden + 1
}

fn tag(g: usize) -> i32 {
    TAG_DATA + g as i32
}

/// Rank 0: one forward through the other ranks. `data` yields each micro-batch's hidden
/// states as rank 0's layers finish them; returns them after the last rank's layers.
pub(crate) fn drive(
    world: &SimpleCommunicator,
    header: &[u64],
    hidden: usize,
    data: &Receiver<Vec<f32>>,
) -> Result<Vec<Vec<f32>>, ExchangeError> {
    let (groups, _) = parse(header)?;
    let size = world.size();
    let (next, last) = (world.process_at_rank(1), world.process_at_rank(size - 1));
    next.send_with_tag(header, TAG_HEADER);
    let mut back: Vec<Vec<f32>> = groups.iter().map(|g| vec![0.0; words(g, hidden)]).collect();
    let mut out: Vec<Vec<f32>> = vec![Vec::new(); groups.len()];
    let mut lost = false;
    mpi::request::scope(|scope| {
        let recvs: Vec<_> = back
            .iter_mut()
            .enumerate()
            .map(|(g, b)| last.immediate_receive_into_with_tag(scope, &mut b[..], tag(g)))
            .collect();
        let mut sends = Vec::new();
        for ((g, group), buf) in groups.iter().enumerate().zip(&mut out) {
            // A lost compute thread still sends (status 1), so the others stay in step.
            *buf = match data.recv() {
                Ok(v) if v.len() + 1 == words(group, hidden) => v,
                _ => {
                    lost = true;
                    vec![0.0; words(group, hidden) - 1]
                }
            };
            buf.push(if lost { 1.0 } else { 0.0 });
            let buf: &Vec<f32> = buf;
            sends.push(next.immediate_send_with_tag(scope, &buf[..], tag(g)));
        }
        for r in recvs {
            r.wait();
        }
        for s in sends {
            s.wait();
        }
    });
    if lost {
        return Err(ExchangeError::Transport(
            "a micro-batch was not handed over".into(),
        ));
    }
    let mut result = Vec::with_capacity(back.len());
    for mut b in back {
        if b.pop() != Some(0.0) {
            return Err(ExchangeError::Transport(
                "a pipeline rank failed its layers (see its stderr)".into(),
            ));
        }
        result.push(b);
    }
    Ok(result)
}

/// Ranks 1..: runs `handler` on every micro-batch rank 0 starts until it stops the pipeline
/// (the stop passes on down the ranks). A malformed header ends the job (`MPI_Abort`): the
/// ranks could no longer agree on what follows.
pub(crate) fn serve(world: &SimpleCommunicator, hidden: usize, mut handler: StageHandler) {
    let (rank, size) = (world.rank(), world.size());
    let prev = world.process_at_rank(rank - 1);
    let dest = world.process_at_rank((rank + 1) % size);
    loop {
        let (h, _) = prev.receive_vec_with_tag::<u64>(TAG_HEADER);
        if rank + 1 < size {
            dest.send_with_tag(&h[..], TAG_HEADER);
        }
        if h.first() == Some(&OP_STOP) {
            return;
        }
        let (groups, format) = match parse(&h) {
            Ok(p) if h.first() == Some(&OP_FORWARD) => p,
            Ok(_) => abort_malformed(world, rank, &h, "unknown op"),
            Err(e) => abort_malformed(world, rank, &h, &e.to_string()),
        };
        let mut bufs: Vec<Vec<f32>> = groups.iter().map(|g| vec![0.0; words(g, hidden)]).collect();
        mpi::request::scope(|scope| {
            let mut sends = Vec::new();
            for ((g, group), buf) in groups.iter().enumerate().zip(&mut bufs) {
                prev.receive_into_with_tag(&mut buf[..], tag(g));
                let st = buf.len() - 1;
                if buf[st] == 0.0 {
                    if let Err(e) = handler(group, format, &mut buf[..st]) {
                        eprintln!("ferrox-mpi rank {rank}: pipeline stage: {e}");
                        buf[st] = 1.0;
                    }
                }
                let buf: &Vec<f32> = buf;
                sends.push(dest.immediate_send_with_tag(scope, &buf[..], tag(g)));
            }
            for s in sends {
                s.wait();
            }
        });
    }
}

/// Ends the job over header words `h` the ranks can no longer agree on (`why`).
fn abort_malformed(world: &SimpleCommunicator, rank: i32, h: &[u64], why: &str) -> ! {
    report_before_abort(rank, &format!("malformed pipeline header {h:?}: {why}"));
    world.abort(1)
}

/// Rank 0's [`StageExchange`]: each forward is one request to the communication thread,
/// which takes the micro-batches from a channel as they are sent.
pub struct DriverStages {
    tx: SyncSender<Request>,
    hidden: usize,
    size: usize,
    /// The forward under way: where its micro-batches go, where its result comes from.
    pending: Mutex<Option<StagesInFlight>>,
    counters: Arc<Counters>,
}

type StagesInFlight = (
    Sender<Vec<f32>>,
    Receiver<Result<Vec<Vec<f32>>, ExchangeError>>,
);

fn lost() -> ExchangeError {
    ExchangeError::Transport("the MPI communication thread stopped".into())
}

impl DriverStages {
    pub(crate) fn new(
        tx: SyncSender<Request>,
        hidden: usize,
        size: usize,
        counters: Arc<Counters>,
    ) -> Self {
        DriverStages {
            tx,
            hidden,
            size,
            pending: Mutex::new(None),
            counters,
        }
    }
}

impl StageExchange for DriverStages {
    fn places(&self) -> usize {
        self.size
    }

    fn begin(&self, groups: &[Vec<StageSeq>], format: CacheFormat) -> Result<(), ExchangeError> {
        // A forward that never finished (its caller panicked between `begin` and `finish`):
        // dropping its sender makes the communication thread send status-1 placeholders for
        // the missing micro-batches, so every rank is in step again before this one starts.
        let unfinished = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((data_tx, rx)) = unfinished {
            drop(data_tx);
            let _ = rx.recv();
        }
        let (data_tx, data) = channel();
        let (reply, rx) = sync_channel(1);
        let header = header(groups, format);
        let rows: usize = groups.iter().flatten().map(|s| s.n).sum();
        let c = &self.counters;
        c.forwards.fetch_add(1, Ordering::Relaxed);
        c.micro_batches
            .fetch_add(groups.len() as u64, Ordering::Relaxed);
        c.stage_rows.fetch_add(rows as u64, Ordering::Relaxed);
        let bytes = 8 * header.len() + 4 * (rows * self.hidden + groups.len());
        c.stage_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let req = Request::Forward {
            header,
            hidden: self.hidden,
            data,
            reply,
        };
        self.tx.send(req).map_err(|_| lost())?;
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some((data_tx, rx));
        Ok(())
    }

    fn send(&self, _g: usize, x: Vec<f32>) -> Result<(), ExchangeError> {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (data, _) = pending
            .as_ref()
            .ok_or_else(|| ExchangeError::Transport("send without begin".into()))?;
        data.send(x).map_err(|_| lost())
    }

    fn finish(&self) -> Result<Vec<Vec<f32>>, ExchangeError> {
        let (_, rx) = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| ExchangeError::Transport("finish without begin".into()))?;
        rx.recv().map_err(|_| lost())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrox_core::cache::KvType;

    #[test]
    fn header_round_trip() {
        let groups = vec![
            vec![StageSeq {
                key: 3,
                pos: 17,
                n: 4,
            }],
            vec![
                StageSeq {
                    key: u64::MAX,
                    pos: 0,
                    n: 9,
                },
                StageSeq {
                    key: 0,
                    pos: 5,
                    n: 1,
                },
            ],
        ];
        let format = CacheFormat {
            k: KvType::Q8_0,
            v: KvType::F16,
            bf16_products: true,
        };
        let h = header(&groups, format);
        assert_eq!(parse(&h).unwrap(), (groups, format));
        assert!(parse(&h[..h.len() - 1]).is_err());
        // An unknown type code is refused by name, never read as f32.
        let err = parse(&[OP_FORWARD, 0, 0, 7, 0]).unwrap_err();
        assert!(
            err.to_string().contains("unknown KV cache type code 7"),
            "{err}"
        );
        assert!(parse(&[OP_FORWARD, 0, 0, 0, 0]).is_ok());
        assert!(parse(&[OP_FORWARD, 0, 0, 0]).is_err());
    }
}
