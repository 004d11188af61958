//! N ranks as threads of one process, communicating through shared memory:
//! the transport of `--ranks N` without MPI and of the tests.
//!
//! - A sum: each rank copies its values into its own slot, waits at a
//!   barrier, and adds every rank's slot in rank order, so every rank gets
//!   the same bits (an MPI rank's all-gather and addition give the same).
//!   Long vectors (a solution gathered on every rank) are reduced by parts:
//!   after the barrier rank r adds the ranks' values of the r-th part, in rank
//!   order, a second barrier, and every rank copies the parts: each rank
//!   reads the vector's length twice instead of N times.
//! - A halo exchange: a mailbox per ordered pair of ranks holds two buffers,
//!   written and read in turn (messages k and k + 1 may be in flight at
//!   once; the writer of message k + 2 waits until message k is read), and
//!   kept from one exchange to the next, so a step allocates nothing.
//!
//! The slots of a sum alternate between two sets from one sum to the next:
//! a rank that is still reading sum k's slots is never overwritten, since no
//! rank can start sum k + 2 before every rank has reached sum k + 1's
//! barrier. A rank waits by spinning briefly (a peer a few microseconds
//! behind), then yields its core a few times, then sleeps on a condition
//! variable that every change rings.
//!
//! A rank that stops (returns or panics) marks itself stopped when its
//! [`ThreadRank`] is dropped: a rank waiting for it at a barrier, or for a
//! message it never posted, unwinds with [`PeerStopped`] instead of waiting
//! forever; messages it posted before stopping are still delivered.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::{halo_range, send_values, Communicator, HaloExchange};

/// One rank of a group of threads.
pub struct ThreadRank {
    rank: usize,
    shared: Arc<Shared>,
    /// Sums this rank has taken part in: their parity picks the slots.
    sums: Cell<u64>,
    /// Messages posted to each rank, and read from each rank.
    posted: RefCell<Vec<u64>>,
    read: RefCell<Vec<u64>>,
}

/// Keeps what different ranks write on cache lines of their own.
#[repr(align(128))]
struct Padded<T>(T);

/// The memory the ranks of one group share.
struct Shared {
    n: usize,
    /// Ranks arrived at the current barrier.
    arrived: AtomicUsize,
    /// Barriers completed.
    generation: AtomicU64,
    /// `stopped[r]`: rank r's [`ThreadRank`] is gone.
    stopped: Vec<Padded<AtomicBool>>,
    any_stopped: AtomicBool,
    /// Ranks asleep on `bell` (the others spin and need no ringing).
    sleepers: AtomicUsize,
    doorbell: Mutex<()>,
    bell: Condvar,
    /// Each rank's values of a sum, in two sets used in turn.
    slots: [Vec<Padded<Mutex<Vec<f64>>>>; 2],
    /// Rank r's part of a long sum, in two sets used in turn.
    parts: [Vec<Padded<Mutex<Vec<f64>>>>; 2],
    /// The mailbox from rank i to rank j at `i * n + j`.
    mail: Vec<Mailbox>,
}

/// Messages from one rank to another: message k in `buffers[k % 2]`.
#[repr(align(128))]
struct Mailbox {
    /// Messages written.
    posted: AtomicU64,
    /// Messages read.
    read: AtomicU64,
    buffers: [Mutex<Vec<f64>>; 2],
}

/// Sums of at least this many values per rank are reduced by parts.
const LONG_SUM: usize = 1 << 15;

/// How long a waiting rank spins before it yields its core, then sleeps: a
/// peer on a core of its own is usually closer than that, and waking a
/// sleeper costs about as much.
const SPIN: Duration = Duration::from_micros(20);

/// Yields of the core (to a peer waiting for it, when ranks outnumber the
/// cores) before a waiting rank sleeps.
const YIELDS: u32 = 8;

/// Memory of one mailbox, the n² of a group.
const MAILBOX_BYTES: u128 = std::mem::size_of::<Mailbox>() as u128;

/// Memory [`ThreadRank::group`] takes for `n` ranks (its n² mailboxes,
/// before any message).
pub fn group_bytes(n: usize) -> u128 {
    (n as u128).pow(2) * MAILBOX_BYTES
}

/// A rank's lock of a buffer: a rank that panicked while holding it left
/// nothing another rank depends on (its peers stop at their next wait).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn new(n: usize) -> Self {
        let buffers = || (0..n).map(|_| Padded(Mutex::new(Vec::new()))).collect();
        Self {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            stopped: (0..n).map(|_| Padded(AtomicBool::new(false))).collect(),
            any_stopped: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            doorbell: Mutex::new(()),
            bell: Condvar::new(),
            slots: [buffers(), buffers()],
            parts: [buffers(), buffers()],
            mail: (0..n * n)
                .map(|_| Mailbox {
                    posted: AtomicU64::new(0),
                    read: AtomicU64::new(0),
                    buffers: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
                })
                .collect(),
        }
    }

    /// Wakes the sleeping ranks after a change they may wait for.
    fn ring(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            let _door = lock(&self.doorbell);
            self.bell.notify_all();
        }
    }

    fn is_stopped(&self, rank: usize) -> bool {
        self.stopped[rank].0.load(SeqCst)
    }

    /// The lowest stopped rank, if any.
    fn first_stopped(&self) -> Option<usize> {
        match self.any_stopped.load(SeqCst) {
            false => None,
            true => (0..self.n).find(|&r| self.is_stopped(r)),
        }
    }

    /// Waits until `ready()`; `Err(peer)` when `gone()` names a rank that
    /// stopped while `ready()` was still false (checked in that order, so a
    /// change a rank made before stopping counts). Spins first, then yields
    /// its core a few times, then sleeps on the bell (every change rings it;
    /// a sleeper also wakes on its own every 100 ms).
    fn wait(
        &self,
        ready: impl Fn() -> bool,
        gone: impl Fn() -> Option<usize>,
    ) -> Result<(), usize> {
        let check = || match gone() {
            Some(peer) if !ready() => Some(Err(peer)),
            Some(_) => Some(Ok(())),
            None => ready().then_some(Ok(())),
        };
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(outcome) = check() {
                return outcome;
            }
            spins += 1;
            // The clock read once per 64 spins.
            if spins.is_multiple_of(64) && start.elapsed() > SPIN {
                break;
            }
            std::hint::spin_loop();
        }
        for _ in 0..YIELDS {
            if let Some(outcome) = check() {
                return outcome;
            }
            std::thread::yield_now();
        }
        let mut door = lock(&self.doorbell);
        self.sleepers.fetch_add(1, SeqCst);
        let outcome = loop {
            if let Some(outcome) = check() {
                break outcome;
            }
            door = self
                .bell
                .wait_timeout(door, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        self.sleepers.fetch_sub(1, SeqCst);
        outcome
    }
}

impl Drop for ThreadRank {
    fn drop(&mut self) {
        self.shared.stopped[self.rank].0.store(true, SeqCst);
        self.shared.any_stopped.store(true, SeqCst);
        let _door = lock(&self.shared.doorbell);
        self.shared.bell.notify_all();
    }
}

impl ThreadRank {
    /// The `n` ranks of one group, to be moved into one thread each.
    pub fn group(n: usize) -> Vec<ThreadRank> {
        let shared = Arc::new(Shared::new(n));
        (0..n)
            .map(|rank| ThreadRank {
                rank,
                shared: Arc::clone(&shared),
                sums: Cell::new(0),
                posted: RefCell::new(vec![0; n]),
                read: RefCell::new(vec![0; n]),
            })
            .collect()
    }

    /// Unwinds this rank: `peer` stopped before this one heard from it. Not
    /// a failure of this rank: the peer's own result says why it stopped.
    /// Unwound without the panic hook, so nothing is printed.
    fn peer_stopped(&self, peer: usize) -> ! {
        std::panic::resume_unwind(Box::new(PeerStopped {
            rank: self.rank,
            peer,
        }))
    }

    /// Waits until every rank has arrived here.
    fn barrier(&self) {
        let s = &self.shared;
        let generation = s.generation.load(SeqCst);
        if s.arrived.fetch_add(1, SeqCst) + 1 == s.n {
            s.arrived.store(0, SeqCst);
            s.generation.store(generation + 1, SeqCst);
            s.ring();
            return;
        }
        let passed = || s.generation.load(SeqCst) != generation;
        if let Err(peer) = s.wait(passed, || s.first_stopped()) {
            self.peer_stopped(peer);
        }
    }

    /// Posts the message `fill` writes to rank `to` (a stopped rank's mail
    /// is written and never read).
    fn post(&self, to: usize, fill: impl FnOnce(&mut Vec<f64>)) {
        let s = &self.shared;
        let mailbox = &s.mail[self.rank * s.n + to];
        let k = self.posted.borrow()[to];
        // Message k − 2, in the buffer about to be written, must be read.
        let free = || mailbox.read.load(SeqCst) + 2 > k;
        let gone = || s.is_stopped(to).then_some(to);
        let _ = s.wait(free, gone);
        {
            let mut buffer = lock(&mailbox.buffers[(k % 2) as usize]);
            buffer.clear();
            fill(&mut buffer);
        }
        mailbox.posted.store(k + 1, SeqCst);
        self.posted.borrow_mut()[to] = k + 1;
        s.ring();
    }

    /// Reads the next message from rank `from` with `take`.
    fn take(&self, from: usize, take: impl FnOnce(&[f64])) {
        let s = &self.shared;
        let mailbox = &s.mail[from * s.n + self.rank];
        let k = self.read.borrow()[from];
        let arrived = || mailbox.posted.load(SeqCst) > k;
        if let Err(peer) = s.wait(arrived, || s.is_stopped(from).then_some(from)) {
            self.peer_stopped(peer);
        }
        take(&lock(&mailbox.buffers[(k % 2) as usize]));
        mailbox.read.store(k + 1, SeqCst);
        self.read.borrow_mut()[from] = k + 1;
        s.ring();
    }
}

/// Why a rank gave up: `peer` stopped (returned, typically with an error,
/// or panicked) before `rank` heard from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerStopped {
    pub rank: usize,
    pub peer: usize,
}

impl std::fmt::Display for PeerStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rank {} stopped before rank {} heard from it",
            self.peer, self.rank
        )
    }
}

/// Where the ranks' threads run their rayon work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankThreads {
    /// Each rank on a rayon pool of its own of 1/N of the cores (at least
    /// one thread: the rank's own when there are as many ranks as cores):
    /// its products, dot products and set-up run there, as an MPI process's
    /// on its cores, and no rank queues work on another's threads.
    ShareOfCores,
    /// The ranks share the global rayon pool (GPU ranks, whose host work
    /// around the device stays as it was).
    SharedPool,
}

impl RankThreads {
    /// The threads of each of `n` ranks' pools (`None`: the global pool).
    pub fn per_rank(self, n: usize) -> Option<usize> {
        match self {
            Self::ShareOfCores => {
                let cores = std::thread::available_parallelism().map_or(1, usize::from);
                Some((cores / n.max(1)).max(1))
            }
            Self::SharedPool => None,
        }
    }
}

/// Runs `body` on `n` ranks, one thread each, and returns their results in
/// rank order. Ranks other than 0 log quietly ([`super::set_quiet`]). A rank
/// whose peer stopped early panics with [`PeerStopped`]'s message; use
/// [`run_ranks`] to get each rank's own outcome instead.
pub fn run_threads<T: Send>(n: usize, body: impl Fn(&ThreadRank) -> T + Sync) -> Vec<T> {
    run_ranks(n, body)
        .into_iter()
        .map(|r| r.unwrap_or_else(|stopped| panic!("{stopped}")))
        .collect()
}

/// [`run_threads`], a rank that stopped because a peer stopped before it
/// (an error returned, say) given as `Err`: the caller reports the peer's
/// own error. A rank's panic is passed on (re-raised here). Each rank runs
/// on a pool of its own ([`RankThreads::ShareOfCores`]).
pub fn run_ranks<T: Send>(
    n: usize,
    body: impl Fn(&ThreadRank) -> T + Sync,
) -> Vec<Result<T, PeerStopped>> {
    run_ranks_on(n, RankThreads::ShareOfCores, body)
}

/// [`run_ranks`] with the ranks' rayon work on `threads`.
pub fn run_ranks_on<T: Send>(
    n: usize,
    threads: RankThreads,
    body: impl Fn(&ThreadRank) -> T + Sync,
) -> Vec<Result<T, PeerStopped>> {
    let ranks = ThreadRank::group(n);
    let outcomes: Vec<std::thread::Result<T>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|rank| {
                let body = &body;
                let name = format!("rank {}", rank.rank);
                std::thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || {
                        let run = move || {
                            super::set_quiet(rank.rank != 0);
                            body(&rank)
                        };
                        // The rank's body and rayon work on its pool; the
                        // rank's thread waits for them.
                        let pool = threads.per_rank(n).map(|k| {
                            rayon::ThreadPoolBuilder::new()
                                .num_threads(k)
                                .thread_name(move |i| match i {
                                    0 => name.clone(),
                                    _ => format!("{name}.{i}"),
                                })
                                .build()
                        });
                        match pool {
                            Some(Ok(pool)) => pool.install(run),
                            // No threads for a pool: the shared one.
                            Some(Err(_)) | None => run(),
                        }
                    })
                    .expect("spawning a rank thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    // A rank's own panic (not a peer's having stopped) is the one to pass on.
    let own_panic = outcomes
        .iter()
        .position(|r| r.as_ref().is_err_and(|e| !e.is::<PeerStopped>()));
    if let Some(i) = own_panic {
        let Some(Err(payload)) = outcomes.into_iter().nth(i) else {
            unreachable!("position found an Err")
        };
        std::panic::resume_unwind(payload);
    }
    outcomes
        .into_iter()
        .map(|r| {
            r.map_err(|payload| match payload.downcast::<PeerStopped>() {
                Ok(stopped) => *stopped,
                Err(_) => unreachable!("own panics were passed on above"),
            })
        })
        .collect()
}

/// [`run_threads`] on a thread of its own, waited for at most `limit`: a
/// hang (a rank waiting forever for another) or a panic becomes an error
/// instead of blocking the caller (the tests of failing ranks); ranks left
/// hanging are abandoned.
pub fn run_threads_within<T: Send + 'static>(
    n: usize,
    limit: std::time::Duration,
    body: impl Fn(&ThreadRank) -> T + Send + Sync + 'static,
) -> Result<Vec<T>, String> {
    use std::sync::mpsc::RecvTimeoutError;
    let (done, wait) = channel();
    std::thread::spawn(move || {
        let _ = done.send(run_threads(n, body));
    });
    wait.recv_timeout(limit).map_err(|e| match e {
        RecvTimeoutError::Timeout => format!("{n} ranks hung: no result within {limit:?}"),
        RecvTimeoutError::Disconnected => "a rank panicked (its message is above)".into(),
    })
}

/// The part of `0..len` that rank `r` of `n` adds up in a long sum.
fn part(len: usize, n: usize, r: usize) -> std::ops::Range<usize> {
    len * r / n..len * (r + 1) / n
}

impl Communicator for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.n
    }

    fn sum(&self, values: &mut [f64]) {
        let n = self.size();
        if n == 1 {
            return;
        }
        let s = &self.shared;
        let set = (self.sums.get() % 2) as usize;
        self.sums.set(self.sums.get() + 1);
        let slots = &s.slots[set];
        let len = values.len();
        {
            let mut mine = lock(&slots[self.rank].0);
            mine.clear();
            mine.extend_from_slice(values);
        }
        self.barrier();
        // Rank order, from rank 0's values: the bits of every rank's sum.
        let add = |range: std::ops::Range<usize>, out: &mut [f64]| {
            for (r, slot) in slots.iter().enumerate() {
                let part = lock(&slot.0);
                assert_eq!(part.len(), len, "sum: ranks disagree on the length");
                let part = &part[range.clone()];
                match r {
                    0 => out.copy_from_slice(part),
                    _ => out.iter_mut().zip(part).for_each(|(v, p)| *v += p),
                }
            }
        };
        if len < LONG_SUM {
            add(0..len, values);
            return;
        }
        // Rank r adds the r-th part; every rank copies all the parts.
        let parts = &s.parts[set];
        {
            let range = part(len, n, self.rank);
            let mut mine = lock(&parts[self.rank].0);
            mine.resize(range.len(), 0.0);
            add(range, &mut mine);
        }
        self.barrier();
        for (r, sum) in parts.iter().enumerate() {
            values[part(len, n, r)].copy_from_slice(&lock(&sum.0));
        }
    }

    fn exchange(&self, exchange: HaloExchange<'_>, overlap: &mut dyn FnMut()) {
        let (neighbours, owned, halo) = (exchange.neighbours, exchange.owned, exchange.halo);
        for nb in neighbours {
            self.post(nb.rank, |buffer| buffer.extend(send_values(nb, owned)));
        }
        overlap();
        let n_owned = owned.len();
        for nb in neighbours {
            let slots = halo_range(nb, n_owned);
            self.take(nb.rank, |data| {
                assert_eq!(data.len(), slots.len(), "halo of rank {}: size", nb.rank);
                halo[slots].copy_from_slice(data);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_identical_on_every_rank_and_added_in_rank_order() {
        // 1 + 1e-16 + ... depends on the order: every rank must agree.
        let results = run_threads(4, |c| {
            let mut v = [[1.0, 1e-16, -1.0, 3.0][c.rank()], c.rank() as f64];
            c.sum(&mut v);
            v
        });
        let expected: f64 = ((1.0 + 1e-16) + -1.0) + 3.0;
        for v in &results {
            assert_eq!(v[0].to_bits(), expected.to_bits());
            assert_eq!(v[1], 6.0);
        }
        assert_eq!(run_threads(1, |c| c.size()), vec![1]);
    }

    /// A long sum is added by parts (one part per rank), still in rank
    /// order on every element, and every rank gets all of it.
    #[test]
    fn long_sums_are_added_by_parts_in_rank_order() {
        let len = LONG_SUM + 7;
        let results = run_threads(3, move |c| {
            let r = c.rank();
            // Element i: 1, 1e-16, -1 from ranks 0, 1, 2 (rank order gives 0
            // + 1e-16 rounding away, another order 1e-16) plus the rank's i.
            let mut v: Vec<f64> = (0..len)
                .map(|i| [1.0, 1e-16, -1.0][r] + if i % 2 == 0 { 0.0 } else { i as f64 })
                .collect();
            c.sum(&mut v);
            // A short sum and a long one again: the two sets of slots in turn.
            let mut short = [r as f64];
            c.sum(&mut short);
            let mut again = vec![r as f64; len];
            c.sum(&mut again);
            (v, short[0], again)
        });
        let first = ((1.0 + 1e-16) + -1.0f64).to_bits();
        for (v, short, again) in &results {
            for (i, x) in v.iter().enumerate() {
                let expected = match i % 2 {
                    0 => f64::from_bits(first),
                    _ => ((1.0 + i as f64) + (1e-16 + i as f64)) + (-1.0 + i as f64),
                };
                assert_eq!(x.to_bits(), expected.to_bits(), "element {i}");
            }
            assert_eq!(*short, 3.0);
            assert!(again.iter().all(|&x| x == 3.0));
        }
    }

    /// Halo exchanges back to back with no sum between them: every message
    /// arrives whole and in order through the two buffers of each mailbox.
    #[test]
    fn halo_messages_arrive_in_order_through_reused_buffers() {
        use crate::sparse::distribute::Decomposition;
        use crate::sparse::testing::grid_laplacian;
        let a = grid_laplacian(4, 4, 6);
        let owners = (0..a.n_rows()).map(|i| (i / 32) as u32).collect();
        let d = Decomposition::from_owners(owners, 3).unwrap();
        let locals: Vec<_> = (0..3).map(|r| d.local(&a, r).unwrap()).collect();
        let results = run_threads(3, |c| {
            let local = &locals[c.rank()];
            let mut halo = vec![0.0; local.n_halo()];
            let mut wrong = 0;
            for step in 0..50 {
                // Owned values: the global row plus the step.
                let owned: Vec<f64> = local.global[..local.n_owned]
                    .iter()
                    .map(|&g| f64::from(g) + 1000.0 * step as f64)
                    .collect();
                c.exchange(
                    HaloExchange::new(&local.neighbours, &owned, &mut halo),
                    &mut || {},
                );
                for (h, &g) in halo.iter().zip(&local.global[local.n_owned..]) {
                    wrong += usize::from(*h != f64::from(g) + 1000.0 * step as f64);
                }
            }
            (wrong, local.n_halo())
        });
        for (rank, (wrong, n_halo)) in results.into_iter().enumerate() {
            assert!(n_halo > 0, "rank {rank} has a halo");
            assert_eq!(wrong, 0, "rank {rank}");
        }
    }

    /// A message posted before its rank stopped is still read; a rank
    /// waiting for one that never comes stops naming the peer.
    #[test]
    fn a_stopped_peer_delivers_what_it_posted_then_stops_the_reader() {
        let outcomes = run_ranks(2, |c| {
            if c.rank() == 1 {
                c.post(0, |b| b.push(42.0));
                return None;
            }
            let mut got = 0.0;
            c.take(1, |d| got = d[0]);
            // Nothing more comes from rank 1: this take unwinds.
            c.take(1, |_| {});
            Some(got)
        });
        assert_eq!(outcomes[1], Ok(None));
        assert_eq!(outcomes[0], Err(PeerStopped { rank: 0, peer: 1 }));
    }

    /// Each rank's rayon work runs on a pool of its share of the cores, or
    /// on the global pool when shared.
    #[test]
    fn each_rank_has_a_pool_of_its_share_of_the_cores_unless_shared() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        for n in [1, 2, 3] {
            let own = run_threads(n, |_| rayon::current_num_threads());
            assert_eq!(own, vec![(cores / n).max(1); n]);
        }
        let shared = run_ranks_on(2, RankThreads::SharedPool, |_| rayon::current_num_threads());
        let global = rayon::current_num_threads();
        assert!(shared.into_iter().all(|n| n == Ok(global)));
    }

    #[test]
    fn hung_or_panicking_ranks_become_errors_in_time() {
        use std::time::Duration;
        let slow = run_threads_within(2, Duration::from_millis(50), |_| {
            std::thread::sleep(Duration::from_secs(2))
        });
        assert!(slow.unwrap_err().contains("2 ranks hung"));
        // Rank 1 returns without joining rank 0's sum: rank 0's receive fails.
        let gone = run_threads_within(2, Duration::from_secs(20), |c| {
            if c.rank() == 0 {
                c.sum(&mut [1.0]);
            }
        });
        assert!(gone.unwrap_err().contains("panicked"));
    }
}
