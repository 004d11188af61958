//! A distributed run's GPU rank ([`MultiGpuBackend::for_rank`]): one rank per
//! process or thread, the others reached through the run's
//! [`Communicator`] (thread ranks of `run -np N --device gpu`, MPI ranks of
//! `mpirun`, on one node or several).
//!
//! Which loop runs PCG's iterations:
//!
//! - the NCCL device loop, where every rank has a device of its own (told
//!   apart by UUID, so that it holds across nodes and whatever
//!   `CUDA_VISIBLE_DEVICES` does), libnccl loads on every rank, and the
//!   preconditioner is Jacobi or none. The ranks agree on that through one
//!   `comm.sum`, so all take the same path. Rank 0 makes two NCCL unique ids
//!   (`ncclGetUniqueId`), [`broadcast_bytes`] hands them to every rank, and
//!   each rank joins two communicators with `ncclCommInitRank` (one on a
//!   comm stream for the halo send/recv, one on the compute stream for the
//!   all-reduces, as [`MultiGpuBackend::new`] has); a rank keeps them on
//!   its thread for the next solve when every rank kept its own (one more
//!   `comm.sum`), since `ncclCommInitRank` takes a good part of a second.
//!   Each chunk of `check_interval` iterations is the rank's
//!   `RankChunk::run` (or `run_single`, the default single-reduction form)
//!   on the calling thread: no host round trip inside a chunk, records read once
//!   per chunk.
//! - the host-driven steps otherwise (ranks sharing a device, no NCCL, block
//!   preconditioners, `--transport host`): the packed halo goes through
//!   `comm.exchange`, each sum through `comm.sum`.
//!
//! No rank waits forever for one that failed:
//!
//! - set-up (the local system, the device buffers, the NCCL streams and
//!   communicators) is agreed before the next collective
//!   ([`crate::parallel::collective::agree`]): all
//!   ranks go on, or all return an error naming the failing rank and its
//!   message;
//! - in the host-driven steps, a rank whose step fails (or failed before)
//!   still joins every collective of every step with NaN contributions
//!   ([`join_failed`]): the sums become NaN on every rank, `StopRule` stops
//!   all of them at the same iteration, and [`MultiGpuBackend::solve_agreed`]
//!   makes every rank return the failed rank's error;
//! - in the NCCL device loop, the ranks agree on each chunk's success after
//!   it (one `comm.sum` per chunk).
//!
//! The remaining limit: a failure in the middle of a chunk of the NCCL device
//! loop (a launch or NCCL error on one rank), or in `ncclCommInitRank` on one
//! rank, leaves the other ranks inside an NCCL call that waits for it: NCCL
//! has no time-out by default, so such a run hangs rather than fails
//! (`NCCL_DEBUG=WARN` shows the error).

use std::cell::RefCell;
use std::ffi::c_char;
use std::sync::{Arc, Mutex, Once, PoisonError};

use cudarc::driver::CudaStream;
use cudarc::nccl::safe::{Comm, Id};

use super::{
    chunk_records, chunk_state, nccl, nccl_available, CgVectors, GpuError, IterationRecord,
    LoopState, MultiGpuBackend, MultiGpuOptions, MultiVector, Peers, StopRule, Transport,
};
use crate::parallel::collective::{agreed, broadcast_bytes, join_failed, Collective, RankFailure};
use crate::parallel::Communicator;
use crate::solve::{SolveError, SolverControls, SolverPerformance};

/// Bytes of an NCCL unique id.
const ID_BYTES: usize = 128;

/// The environment NCCL reads that the `fvpoisson` binary sets before any
/// thread starts ([`nccl_environment_defaults`]): where a process (another
/// program linking the library, a test binary) has not set it, NCCL may use
/// NVLink multicast. Logged once per process, when NCCL is first set up.
pub(super) fn check_nccl_environment() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let unset = nccl_environment_defaults(|name| std::env::var_os(name));
        for (name, value) in unset {
            log::warn!(
                "{name} is not set: NCCL may use NVLink multicast, which fvpoisson never uses \
                 (the fvpoisson binary sets {name}={value}; set it in this program's \
                 environment)"
            );
        }
    });
}

/// The NCCL environment variables that `get` (an environment lookup) lacks
/// and fvpoisson's defaults for them: `NCCL_NVLS_ENABLE=0`, NVLink
/// multicast (NVLS) off unless the environment asks for it. NCCL offers no
/// communicator setting that turns NVLS off (`ncclConfig_t` sizes it only),
/// so the binary's `main` writes these before any thread starts: a write to
/// the environment races with every read on other threads, so the library
/// itself never writes it.
pub fn nccl_environment_defaults(
    get: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<(&'static str, &'static str)> {
    [("NCCL_NVLS_ENABLE", "0")]
        .into_iter()
        .filter(|(name, _)| get(name).is_none())
        .collect()
}

/// The steps of the host-driven PCG, by the collectives they make.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step {
    Initialize,
    Precondition,
    Direction,
    Operator,
    Update,
}

/// `outcome` agreed by every rank ([`agreed`]): this rank's own error, or
/// the failing rank's.
pub(super) fn agreed_gpu<T>(
    comm: &dyn Communicator,
    outcome: Result<T, GpuError>,
) -> Result<T, GpuError> {
    agreed(
        comm,
        outcome,
        |_| 1,
        |f: RankFailure| GpuError::Invalid(f.to_string()),
    )
}

/// A rank's NCCL communicators kept from one solve for the next on the same
/// thread (`ncclCommInitRank` takes a good part of a second): for the rank
/// and size in `key` and the compute stream its all-reduces are bound to.
struct KeptComms {
    key: (usize, usize, usize),
    stream: Arc<CudaStream>,
    halo: Comm,
    reduce: Comm,
}

thread_local! {
    static KEPT: RefCell<Option<KeptComms>> = const { RefCell::new(None) };
}

/// Logs on rank 0 which loop the GPU ranks run, when it changes.
fn log_loop(comm: &dyn Communicator, line: String) {
    static LAST: Mutex<String> = Mutex::new(String::new());
    if comm.rank() != 0 {
        return;
    }
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if *last != line {
        log::info!("{line}");
        *last = line;
    }
}

impl Peers<'_> {
    /// The failure injected by [`MultiGpuBackend::fail_after`] when its
    /// count runs out.
    fn injected(&self) -> Result<(), GpuError> {
        match self.fail_at.get() {
            None => Ok(()),
            Some(0) => {
                self.fail_at.set(None);
                Err(GpuError::Invalid(format!(
                    "a failure injected on rank {} (test)",
                    self.comm.rank()
                )))
            }
            Some(n) => {
                self.fail_at.set(Some(n - 1));
                Ok(())
            }
        }
    }
}

impl<'g> MultiGpuBackend<'g> {
    /// `for_rank`'s choice of loop (module documentation), the same on every
    /// rank; starts the NCCL communicators for the device loop.
    pub(super) fn start_rank_loop(
        &mut self,
        comm: &dyn Communicator,
        options: &MultiGpuOptions,
    ) -> Result<(), GpuError> {
        let size = comm.size();
        if size == 1 {
            self.device_loop.set(options.device_loop);
            return Ok(());
        }
        let host = |why: &str| format!("GPU ranks: PCG runs host-driven steps ({why})");
        if !options.device_loop {
            log_loop(
                comm,
                host("the device loop takes Jacobi or no preconditioner"),
            );
            return Ok(());
        }
        // Peer stores need the ranks in one process (`MultiGpuBackend::new`):
        // `Peer` takes NCCL here, as `Auto` does.
        if options.transport == Transport::Host {
            log_loop(comm, host("transport host"));
            return Ok(());
        }
        if let Some(why) = self.nccl_ranks(comm) {
            if options.transport == Transport::Nccl {
                return Err(GpuError::Invalid(format!(
                    "NCCL between the ranks asked for, but {why}; use --transport host or \
                     auto, or one GPU per rank"
                )));
            }
            log_loop(comm, host(&why));
            return Ok(());
        }
        match self.bootstrap_nccl(comm) {
            Ok(()) => {
                self.transport = Transport::Nccl;
                self.device_loop.set(true);
                log_loop(
                    comm,
                    format!(
                        "GPU ranks: PCG runs the NCCL device loop ({size} ranks, one GPU each, \
                         {} iterations per host check)",
                        self.check_interval
                    ),
                );
                Ok(())
            }
            Err(e) if options.transport != Transport::Nccl => {
                log::warn!("NCCL between the GPU ranks failed to start ({e}); halos and sums go through the host");
                log_loop(comm, host("NCCL failed to start"));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Why the ranks cannot run NCCL (one `comm.sum`), or `None`: every
    /// rank's device UUID and whether libnccl loads there.
    fn nccl_ranks(&self, comm: &dyn Communicator) -> Option<String> {
        // Per rank: 1 ready, 2 no NCCL, 0 no UUID; then the UUID's 4 words.
        const W: usize = 5;
        let (rank, size) = (comm.rank(), comm.size());
        let mut v = vec![0.0; W * size];
        if let Ok(id) = self.ranks[0].gpu.uuid() {
            v[W * rank] = if nccl_available().is_ok() { 1.0 } else { 2.0 };
            for (slot, w) in v[W * rank + 1..W * (rank + 1)]
                .iter_mut()
                .zip(id.chunks_exact(4))
            {
                *slot = f64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
            }
        }
        comm.sum(&mut v);
        let flags: Vec<f64> = v.iter().step_by(W).copied().collect();
        if let Some(k) = flags.iter().position(|&f| f == 0.0) {
            return Some(format!("rank {k} could not read its device's UUID"));
        }
        if let Some(k) = flags.iter().position(|&f| f == 2.0) {
            return Some(format!("NCCL (libnccl.so) does not load on rank {k}"));
        }
        let mut devices: Vec<Vec<u64>> = v
            .chunks_exact(W)
            .map(|c| c[1..].iter().map(|&w| w as u64).collect())
            .collect();
        devices.sort();
        devices.dedup();
        (devices.len() < size).then(|| {
            format!(
                "ranks share a device: {size} ranks on {} devices",
                devices.len()
            )
        })
    }

    /// The two NCCL communicators of this rank (module documentation),
    /// agreed by every rank: those of the last solve where every rank kept
    /// its own (one `comm.sum`), else new ones.
    fn bootstrap_nccl(&mut self, comm: &dyn Communicator) -> Result<(), GpuError> {
        let gpu = self.ranks[0].gpu;
        let (rank, size) = (comm.rank(), comm.size());
        let key = (rank, size, Arc::as_ptr(gpu.stream()) as usize);
        let kept = KEPT
            .with(|k| k.borrow_mut().take())
            .filter(|k| k.key == key);
        let mut everywhere = [f64::from(u8::from(kept.is_some()))];
        comm.sum(&mut everywhere);
        if let (Some(k), true) = (kept, everywhere[0] == size as f64) {
            self.install(k.stream, k.halo, k.reduce);
            return Ok(());
        }
        check_nccl_environment();
        // ncclGetUniqueId starts the bootstrap root: rank 0 only.
        let ids = (comm.rank() == 0).then(|| Id::new().and_then(|a| Id::new().map(|b| [a, b])));
        let mine: Vec<u8> = match ids {
            Some(Ok(ids)) => ids
                .iter()
                .flat_map(|id| id.internal().iter().map(|&c| c as u8))
                .collect(),
            _ => Vec::new(),
        };
        let bytes = broadcast_bytes(comm, 0, &mine, 2 * ID_BYTES);
        if bytes.len() != 2 * ID_BYTES {
            return Err(GpuError::Invalid(
                "rank 0 could not make an NCCL unique id (ncclGetUniqueId)".into(),
            ));
        }
        let id = |k: usize| {
            let mut internal = [0 as c_char; ID_BYTES];
            for (i, &b) in internal.iter_mut().zip(&bytes[k * ID_BYTES..]) {
                *i = b as c_char;
            }
            Id::uninit(internal)
        };
        // NCCL takes the device of the thread's current context.
        let stream = agreed_gpu(comm, gpu.bind_to_thread().and_then(|()| gpu.new_stream()))?;
        let comms = Comm::from_rank(Arc::clone(&stream), rank, size, id(0))
            .and_then(|halo| {
                Comm::from_rank(Arc::clone(gpu.stream()), rank, size, id(1))
                    .map(|reduce| (halo, reduce))
            })
            .map_err(|e| nccl("ncclCommInitRank", e));
        let (halo, reduce) = agreed_gpu(comm, comms)?;
        self.install(stream, halo, reduce);
        Ok(())
    }

    /// This rank's comm stream and communicators.
    fn install(&mut self, stream: Arc<CudaStream>, halo: Comm, reduce: Comm) {
        self.ranks[0].comm_stream = Some(stream);
        self.comms = Some(vec![halo]);
        self.reduce_comms = Some(vec![reduce]);
    }

    /// Which loop PCG's iterations run: "NCCL device loop", "peer device
    /// loop", "device loop" (one rank) or "host-driven steps".
    pub fn pcg_loop(&self) -> &'static str {
        match (self.device_loop(), self.transport) {
            (false, _) => "host-driven steps",
            (true, _) if self.reduce_comms.is_some() => "NCCL device loop",
            (true, Transport::Peer) => "peer device loop",
            (true, _) => "device loop",
        }
    }

    /// Tests: on this rank of a distributed run, the step (or device-loop
    /// chunk) after the next `steps` fails, as a device error would.
    #[doc(hidden)]
    pub fn fail_after(&self, steps: usize) {
        if let Some(peers) = &self.peers {
            peers.fail_at.set(Some(steps));
        }
    }

    /// The collectives of `step` in the host-driven steps of a rank, in
    /// order (`initialize`, `precondition`, ... of the `CgBackend`).
    fn calls(&self, step: Step) -> Vec<Collective> {
        use Collective::Sum;
        let exchange = self.exchange.get().then_some(Collective::Exchange);
        match step {
            Step::Initialize => [Some(Sum(1)), exchange, Some(Sum(2))]
                .into_iter()
                .flatten()
                .collect(),
            Step::Precondition | Step::Update => vec![Sum(1)],
            Step::Direction => Vec::new(),
            Step::Operator => exchange.into_iter().chain([Sum(1)]).collect(),
        }
    }

    /// `failure.guarded` for one step of the host-driven PCG; on a rank of a
    /// distributed run whose step fails (or failed before), the collectives
    /// of the step it did not make are joined with NaN contributions.
    pub(super) fn step<T>(
        &self,
        step: Step,
        fallback: T,
        work: impl FnOnce() -> Result<T, GpuError>,
    ) -> T {
        let Some(peers) = &self.peers else {
            return self.failure.guarded(fallback, work);
        };
        peers.calls.set(0);
        let value = self.failure.guarded(fallback, || {
            peers.injected()?;
            work()
        });
        if self.failure.failed() {
            let calls = self.calls(step);
            let done = peers.calls.get().min(calls.len());
            let r = &self.ranks[0];
            let n_halo = r.halo.borrow().len();
            join_failed(
                peers.comm,
                &peers.packed,
                r.plan.idx.len(),
                n_halo,
                &calls[done..],
            );
        }
        value
    }

    /// One chunk of the NCCL device loop on this rank, its success agreed
    /// by every rank after it.
    pub(super) fn rank_device_chunk(
        &self,
        peers: &Peers,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: &CgVectors<'_, MultiVector>,
    ) -> Vec<IterationRecord> {
        let earlier = self.failure.message().map(GpuError::Invalid);
        // This rank's `RankChunk::run` (or `run_single`) on the calling thread.
        let run = || -> Result<(Vec<f64>, Vec<f64>), GpuError> {
            let host_state = chunk_state(rule, state, count);
            let exchange = self.exchange.get() && peers.comm.size() > 1;
            let r = &self.ranks[0];
            let mut halo = r.halo.borrow_mut();
            let mut buffers = r.device.borrow_mut();
            let send_buf = r.send_buf.borrow();
            let chunk = self.rank_chunk(0, exchange, &mut halo, &mut buffers, &send_buf, v)?;
            match chunk.single {
                true => chunk.run_single(&host_state, count),
                false => chunk.run(&host_state, count),
            }
        };
        let outcome = match earlier {
            Some(e) => Err(e),
            None => run().and_then(|out| peers.injected().map(|()| out)),
        };
        match agreed_gpu(peers.comm, outcome) {
            Ok((records, st)) => chunk_records(&records, &st, state, count),
            Err(e) => {
                self.failure.record(e);
                Vec::new()
            }
        }
    }

    /// `outcome` (of the set-up between `for_rank` and the solve, e.g. block
    /// preconditioners and uploads) agreed by the ranks of a distributed
    /// run: all go on, or all return an error.
    pub fn agree<T>(&self, outcome: Result<T, SolveError>) -> Result<T, SolveError> {
        match &self.peers {
            Some(peers) => agreed(
                peers.comm,
                outcome,
                |_| 1,
                |f| SolveError::Device(format!("rank {} failed: {}", f.rank, f.message)),
            ),
            None => outcome,
        }
    }

    /// PCG (deflated by `deflation` where given) from `x` (uploaded initial
    /// guess) for `b`, then the whole solution
    /// (every rank's rows, on every rank of a distributed run). On a rank of
    /// a distributed run the ranks agree on the outcome: a rank whose device
    /// failed makes every rank return its error ("rank K failed: ...")
    /// rather than the NaN sums the others saw.
    pub fn solve_agreed(
        &self,
        deflation: Option<&super::MultiGpuDeflation>,
        b: &MultiVector,
        x: &mut MultiVector,
        controls: &SolverControls,
        field: &str,
    ) -> Result<(SolverPerformance, Vec<f64>), SolveError> {
        let solved =
            super::pcg_over_ranks(self, deflation, b, x, controls, field).and_then(|perf| {
                let whole = self.download(x)?;
                Ok((perf, whole))
            });
        let Some(peers) = &self.peers else {
            return solved;
        };
        let severity = |e: &SolveError| match e {
            SolveError::Device(_) => 2,
            _ => 1,
        };
        let (perf, mut whole) = agreed(peers.comm, solved, severity, |f| {
            let message = f.message.trim_start_matches("GPU solver failed: ");
            SolveError::Device(format!("rank {} failed: {message}", f.rank))
        })?;
        peers.comm.merge(&mut whole);
        Ok((perf, whole))
    }
}

/// Drops the NCCL communicators this thread kept from its last distributed
/// GPU solve: a rank calls it at the end of its run, while its device is
/// still open (a thread's kept communicators are dropped at its exit
/// otherwise).
pub fn release_kept_comms() {
    KEPT.with(|k| k.borrow_mut().take());
}

/// A distributed run's rank keeps its NCCL communicators for the next solve
/// on this thread, unless the solve failed.
impl Drop for MultiGpuBackend<'_> {
    fn drop(&mut self) {
        let Some(peers) = &self.peers else { return };
        if self.failure.failed() {
            return;
        }
        let comms = (
            self.ranks.first_mut().and_then(|r| r.comm_stream.take()),
            self.comms.as_mut().and_then(Vec::pop),
            self.reduce_comms.as_mut().and_then(Vec::pop),
        );
        if let (Some(stream), Some(halo), Some(reduce)) = comms {
            let gpu = self.ranks[0].gpu;
            let key = (
                peers.comm.rank(),
                peers.comm.size(),
                Arc::as_ptr(gpu.stream()) as usize,
            );
            KEPT.with(|k| {
                *k.borrow_mut() = Some(KeptComms {
                    key,
                    stream,
                    halo,
                    reduce,
                })
            });
        }
    }
}
