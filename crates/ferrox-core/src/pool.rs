//! The fork-join pool of the per-token hot loop: `for_each(n, f)` runs `f(0..n)` on the
//! calling thread and `threads() − 1` persistent workers, which take task indices from a
//! shared counter (a late worker costs one task, not half the product).
//!
//! A decoded token is ~200 short parallel regions. Workers that sleep between them must be
//! woken by a futex, and on a virtual machine waking an idle (halted) vCPU goes through the
//! hypervisor; so workers spin on the job epoch for `SPIN` after their last task, then park.
//! This is llama.cpp's choice (ggml's threadpool spins between graph nodes) with a bounded
//! spin, so an idle server does not burn its cores.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks.
const SPIN: Duration = Duration::from_millis(2);

/// One `for_each` call, on the caller's stack; workers reach it only through `Shared::job`.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// The first panic of a task, re-raised by the caller after the join.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

struct Shared {
    /// Bumped when a job is published; workers spin on it.
    epoch: AtomicU64,
    /// The current job (null between jobs). A worker increments `active` before loading it
    /// and decrements after its last access; the caller clears it and waits for `active == 0`
    /// before its `Job` goes out of scope.
    job: AtomicPtr<Job<'static>>,
    active: AtomicUsize,
    sleeping: AtomicUsize,
    quit: AtomicBool,
}

struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
        });
        let workers = (1..threads)
            .map(|i| {
                let s = shared.clone();
                thread::Builder::new()
                    .name(format!("ferrox-worker-{i}"))
                    .spawn(move || worker(&s))
                    .expect("spawning a pool worker")
            })
            .collect();
        Pool { shared, workers }
    }

    /// The caller plus the workers.
    fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    fn stop(self) {
        self.shared.quit.store(true, SeqCst);
        for w in &self.workers {
            w.thread().unpark();
        }
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// The pool; locked for the duration of a `for_each` (callers on other threads run serially).
static POOL: Mutex<Option<Pool>> = Mutex::new(None);
/// The pool's thread count (0 before the first use), readable without the lock: kernels ask
/// for it from inside tasks while the caller holds `POOL`.
static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread runs pool tasks: nested `for_each` calls run inline.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

fn default_threads() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// Sets the number of threads (the caller plus workers); 0 means all cores.
pub fn set_threads(threads: usize) {
    let threads = if threads == 0 {
        default_threads()
    } else {
        threads
    };
    install(&mut POOL.lock().unwrap_or_else(|e| e.into_inner()), threads);
}

/// Replaces the pool in `slot` by one of `threads` threads unless it already has that many.
fn install(slot: &mut Option<Pool>, threads: usize) {
    if slot.as_ref().is_some_and(|p| p.threads() == threads) {
        return;
    }
    if let Some(old) = slot.take() {
        old.stop();
    }
    *slot = Some(Pool::new(threads));
    THREADS.store(threads, SeqCst);
}

/// Threads a `for_each` uses.
pub fn threads() -> usize {
    match THREADS.load(SeqCst) {
        0 => default_threads(),
        n => n,
    }
}

/// Runs `f(i)` for every `i < n`, in parallel, and returns when all have finished. Each index
/// runs exactly once, on some thread; which one does not affect any kernel's arithmetic.
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    if n == 0 {
        return;
    }
    if n == 1 || IN_TASK.with(|t| t.get()) {
        (0..n).for_each(f);
        return;
    }
    let mut guard = match POOL.try_lock() {
        Ok(g) => g,
        // Another thread is using the pool (or panicked in it): run here.
        Err(_) => {
            (0..n).for_each(f);
            return;
        }
    };
    if guard.is_none() {
        install(&mut guard, default_threads());
    }
    let pool = guard.as_ref().expect("initialised above");
    if pool.threads() == 1 {
        (0..n).for_each(f);
        return;
    }
    let s = &*pool.shared;
    let job = Job {
        f: &f,
        n,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        panic: Mutex::new(None),
    };
    // Workers see the job only between the publication and the clear below, and the caller
    // waits for every worker to leave it before `job` is dropped: the erased lifetime never
    // outlives the borrow.
    let ptr = (&job as *const Job<'_>).cast_mut().cast::<Job<'static>>();
    s.job.store(ptr, SeqCst);
    s.epoch.fetch_add(1, SeqCst);
    if s.sleeping.load(SeqCst) > 0 {
        for w in &pool.workers {
            w.thread().unpark();
        }
    }
    IN_TASK.with(|t| t.set(true));
    run_tasks(&job);
    IN_TASK.with(|t| t.set(false));
    while job.done.load(SeqCst) < n {
        std::hint::spin_loop();
    }
    s.job.store(std::ptr::null_mut(), SeqCst);
    while s.active.load(SeqCst) > 0 {
        std::hint::spin_loop();
    }
    drop(guard);
    let panic = job.panic.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
}

/// Runs `f(i, chunk_i)` for the `chunk`-long pieces of `data` (the last may be shorter), in
/// parallel as `for_each`.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(chunk > 0, "for_each_chunk_mut: empty chunks");
    chunks_in_order(data, chunk, |t, _| t, f);
}

/// As [`for_each_chunk_mut`], handing the chunks out last first (`f` still gets each chunk's
/// own index): causal attention's later rows cost the most, and starting them first evens the
/// threads' finishing times.
pub fn for_each_chunk_mut_rev<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(chunk > 0, "for_each_chunk_mut_rev: empty chunks");
    chunks_in_order(data, chunk, |t, n| n - 1 - t, f);
}

/// Runs `f(i, chunk_i)` for the `chunk`-long pieces of `data` (`chunk` > 0) in parallel, the
/// `t`-th handed out being chunk `order(t, chunks)`, `order` a permutation of the indices.
fn chunks_in_order<T: Send>(
    data: &mut [T],
    chunk: usize,
    order: impl Fn(usize, usize) -> usize + Sync,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let (len, base) = (data.len(), ChunkPtr(data.as_mut_ptr()));
    let n = len.div_ceil(chunk);
    for_each(n, |t| {
        let i = order(t, n);
        let start = i * chunk;
        let m = chunk.min(len - start);
        // SAFETY: chunk i covers start..start + m inside `data`, which is borrowed mutably for
        // the whole call; `order` is a permutation and every index runs exactly once, so the
        // pieces never alias.
        f(i, unsafe {
            std::slice::from_raw_parts_mut(base.get().add(start), m)
        });
    });
}

/// `data`'s base pointer, shared with the tasks of `for_each_chunk_mut`.
struct ChunkPtr<T>(*mut T);
impl<T> ChunkPtr<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}
// SAFETY: tasks only form disjoint chunks from it (see `for_each_chunk_mut`); T: Send.
unsafe impl<T: Send> Sync for ChunkPtr<T> {}

/// Takes task indices until none are left; the caller drains them all by itself if no worker
/// comes. A panicking task counts as done and its panic is kept for the caller.
fn run_tasks(job: &Job<'_>) {
    loop {
        let i = job.next.fetch_add(1, SeqCst);
        if i >= job.n {
            return;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.f)(i)));
        if let Err(p) = r {
            let mut slot = job.panic.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(p);
        }
        job.done.fetch_add(1, SeqCst);
    }
}

fn worker(s: &Shared) {
    IN_TASK.with(|t| t.set(true));
    // Epochs start at 0 with the pool: a worker that starts after the first publication
    // still takes part in it.
    let mut seen = 0;
    let mut idle_since = Instant::now();
    let mut spins = 0u32;
    while !s.quit.load(SeqCst) {
        let epoch = s.epoch.load(SeqCst);
        if epoch != seen {
            seen = epoch;
            s.active.fetch_add(1, SeqCst);
            let p = s.job.load(SeqCst);
            if !p.is_null() {
                // SAFETY: non-null while the caller keeps the job alive, and the caller waits
                // for `active` to return to 0 before dropping it.
                let job = unsafe { &*p };
                run_tasks(job);
            }
            s.active.fetch_sub(1, SeqCst);
            idle_since = Instant::now();
            spins = 0;
            continue;
        }
        std::hint::spin_loop();
        spins += 1;
        if spins.is_multiple_of(1024) && idle_since.elapsed() > SPIN {
            s.sleeping.fetch_add(1, SeqCst);
            if s.epoch.load(SeqCst) == seen && !s.quit.load(SeqCst) {
                thread::park_timeout(Duration::from_millis(100));
            }
            s.sleeping.fetch_sub(1, SeqCst);
            idle_since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_index_runs_once_and_nested_calls_run_inline() {
        for threads in [1, 2, 3] {
            set_threads(threads);
            for n in [0, 1, 2, 7, 1000] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                for_each(n, |i| {
                    hits[i].fetch_add(1, SeqCst);
                    for_each(3, |_| {});
                });
                assert!(
                    hits.iter().all(|h| h.load(SeqCst) == 1),
                    "threads {threads} n {n}"
                );
            }
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_survives() {
        set_threads(2);
        let r = std::panic::catch_unwind(|| {
            for_each(64, |i| {
                if i == 40 {
                    panic!("task 40");
                }
            })
        });
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        for_each(100, |i| {
            sum.fetch_add(i, SeqCst);
        });
        assert_eq!(sum.load(SeqCst), 4950);
    }

    #[test]
    fn callers_on_several_threads_all_finish() {
        set_threads(2);
        thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..200 {
                        let sum = AtomicUsize::new(0);
                        for_each(16, |i| {
                            sum.fetch_add(i, SeqCst);
                        });
                        assert_eq!(sum.load(SeqCst), 120);
                    }
                });
            }
        });
    }
}
