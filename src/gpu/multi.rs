//! PCG over several GPUs in one process: the rows are split by a
//! [`Decomposition`] (METIS or explicit owners, e.g. slabs of a box), each
//! rank's local system ([`LocalMatrix`]) lives on one GPU, and
//! [`MultiGpuBackend`] is a [`CgBackend`], so `solve::pcg` runs unchanged.
//!
//! Each rank holds the owned square block A_oo (interior and boundary rows ×
//! owned columns) in mod-SELL (the single-GPU SpMV, [`DeviceModSell`]) and
//! the coupling A_oh (boundary rows × halo slots) in CSR ([`DeviceCsr`]).
//! y = A x is: pack the values the neighbours read (`halo_pack`), start the
//! transfer, y = A_oo x on the compute stream while it runs, then
//! y_boundary += A_oh x_halo (`halo_add`) once the halo has arrived.
//!
//! Transport ([`Transport`]):
//! - peer stores (default where every pair of GPUs has peer access, one rank
//!   per device; [`super::peer`]): the pack kernel stores the values into the
//!   neighbours' halos over NVLink and raises a flag there; the receiver's
//!   `peer_halo_add` waits on the flag after its A_oo x. The device loop's
//!   reductions go the same way (each rank stores its sums into every rank's
//!   memory; a one-block kernel adds them in rank order), so an iteration
//!   makes no library call and no host round trip;
//! - NCCL (grouped `ncclSend`/`ncclRecv` on a second stream per GPU, so the
//!   exchange overlaps A_oo x; one rank per device);
//! - host staging (download the packed sends, upload each halo: no
//!   overlap), used when NCCL is not installed or when ranks share a device
//!   (tests of 2 and 3 ranks on one GPU).
//!
//! NVLink multicast (NVLS) is never used: the `fvpoisson` binary sets
//! `NCCL_NVLS_ENABLE=0` unless the environment sets it
//! ([`nccl_environment_defaults`], in `main` before any thread starts; the
//! library never writes the environment and warns where it is unset).
//!
//! Two loops run the PCG iterations (`CgBackend::iterate`):
//!
//! - the device loop (default, [`MultiGpuOptions::device_loop`]; one rank,
//!   the peer transport, or NCCL with one rank per device; Jacobi or no
//!   preconditioner): one host thread per rank (`std::thread::scope`)
//!   launches its rank's kernels (and NCCL calls) for `check_interval`
//!   iterations with no host round trip, as the single-GPU fused loop
//!   (`gpu::pcg`, `kernels/pcg.cu`) does. The scalars stay in the device
//!   state `st`: at each reduction point (r · z; p · Ap; Σ|r| with the next
//!   r · z) each rank reduces its partials and the ranks' sums are added in
//!   device memory (peer stores, summed in rank order by
//!   `peer_finish_*`; or `reduce_partials` and an `ncclAllReduce` on a
//!   second set of communicators bound to the compute streams, then
//!   `cg_finish_*`), and the one-block finish kernels compute α and β and
//!   apply `StopRule` on every rank alike (every rank gets the same summed
//!   bits, so all stop at the same iteration and keep issuing the same
//!   exchanges). The host reads rank 0's records once per chunk. p · Ap is
//!   A_oo's slice partials plus the boundary rows' p · A_oh p_halo partials
//!   (`halo_add`; with peers the last block of `peer_halo_add` publishes
//!   the rank's sum at once).
//!
//!   By default ([`MultiGpuOptions::single_reduction`]) the device loop runs
//!   PCG in its single-reduction form (Chronopoulos & Gear 1989; kernels/
//!   pcg.cu): u = M r, w = A u and s = A p carried by s = w + β s, so each
//!   iteration is one vector step, one product and one reduction of Σ|r|,
//!   r · u and w · u (p · Ap = w · u − β² p · Ap_old), where the
//!   two-reduction form of `solve::pcg` needs two synchronisations of all
//!   GPUs. Same bytes per iteration, same `StopRule`, same iterates up to
//!   rounding; `solve::single_reduction` is its CPU reference.
//! - the host-driven steps (`solve::pcg::iterate_steps`; host staging,
//!   ranks sharing a device, block-Jacobi device preconditioners, or
//!   `device_loop: false`): each rank reduces its block partials in the fixed
//!   order of `reduce_partials`, the host reads the per-rank sums (three
//!   reads per iteration) and adds them in rank order, or NCCL all-reduces
//!   them ([`Reduction`]).
//!
//! Both are deterministic for a fixed decomposition and GPU count (NCCL's
//! all-reduce of doubles adds in a fixed order for a fixed set of GPUs).
//! Neither is bitwise equal to the single-GPU solve (the sums are split by
//! ranks): solutions agree to the solver tolerance, iteration counts within
//! one or two.
//!
//! Preconditioners: Jacobi (or none), or block Jacobi over the ranks with
//! any linear [`DevicePreconditioner`] built on a rank's A_oo
//! ([`MultiGpuBackend::set_preconditioners`], e.g. level-scheduled DIC).
//!
//! A distributed run (`run -np N --device gpu`, `mpirun`) holds one rank per
//! process or thread ([`MultiGpuBackend::for_rank`], `rank_loop`): the NCCL
//! device loop on the calling thread where every rank has a GPU of its own
//! (the communicators bootstrapped through the run's [`Communicator`]), else
//! the host-driven steps with halos and sums through the [`Communicator`];
//! a rank that fails makes every rank return an error rather than hang,
//! except inside an NCCL call (`rank_loop` says where).
//!
//! A failure on one rank's thread in the middle of the device loop (a launch
//! error) ends the others' chunks after [`PEER_TIMEOUT`] with the peer
//! transport (an error names the rank they waited for). With NCCL the other
//! ranks wait in their collectives: NCCL has no time-out by default, so such
//! a run hangs rather than fails (`NCCL_DEBUG=WARN` shows the error).

use crate::gpu::KernelArgs;
use crate::timings;
use rayon::prelude::*;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::safe::{group_end, group_start, Comm, ReduceOp};

use super::amg::DeviceCsr;
use super::matrix::DeviceModSell;
use super::pcg::{
    chunk_records, chunk_state, launch_direction, loop_preconditioner_name, DirectionBeta,
    FirstFailure, GpuVector, STATE_LEN,
};
use super::peer::{self, PeerLinks, VectorSums, PEER_TIMEOUT};
use super::smooth::DevicePreconditioner;
use super::{arg_or_null, vector_grid, Gpu, GpuError, NULL, VECTOR_BLOCK};
use crate::parallel::{Communicator, HaloExchange, SingleProcess};
use crate::solve::cpu::{check_system, openfoam_row_sums};
use crate::solve::pcg::NORM_FACTOR_SMALL;
use crate::solve::{
    iterate_steps, pcg, CgBackend, CgVectors, Executor, InitialNorms, IterationRecord, LoopState,
    SolveError, SolverControls, SolverPerformance, StopRule,
};
use crate::sparse::distribute::{Decomposition, LocalMatrix, Neighbour};
use crate::sparse::{Csr, ModSell};

mod rank_loop;
pub use rank_loop::nccl_environment_defaults;
pub use rank_loop::release_kept_comms;
use rank_loop::{check_nccl_environment, Step};
mod deflation;
pub use deflation::{pcg_over_ranks, MultiGpuDeflation};

/// Threads of the one-block reduction kernel (as `gpu::pcg`).
pub(super) const REDUCE_BLOCK: u32 = 1024;

/// How halos travel between GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Peer stores when every rank has a device of its own and every pair
    /// has peer access, else NCCL when libnccl loads, else host staging.
    Auto,
    /// Through host memory (works with any number of ranks per device).
    Host,
    /// NCCL send/recv (one rank per device; libnccl.so must load).
    Nccl,
    /// Stores straight into the peers' memory, with flags (`gpu::peer`):
    /// one rank per device, every pair of devices with peer access.
    Peer,
}

/// How the per-rank sums of a reduction become one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The host reads each rank's sum and adds them in rank order.
    HostRead,
    /// `ncclAllReduce` of the per-rank sums (NCCL's order, the same on every
    /// rank and run for a fixed set of GPUs), then one host read; the host
    /// read where the transport is not NCCL.
    NcclAllReduce,
}

/// Settings of a multi-GPU solve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MultiGpuOptions {
    /// mod-SELL slice height of A_oo.
    pub slice_height: usize,
    pub transport: Transport,
    /// z = D⁻¹ r; else no preconditioner (unless set with
    /// [`MultiGpuBackend::set_preconditioners`]).
    pub jacobi: bool,
    /// The device loop (module documentation) where it applies; false: the
    /// host-driven steps always.
    pub device_loop: bool,
    /// Iterations of the device loop between host reads of the records.
    pub check_interval: usize,
    /// The device loop runs PCG in its single-reduction form (one
    /// reduction per iteration, kernels/pcg.cu); false: the two-reduction
    /// form of `solve::pcg`.
    pub single_reduction: bool,
}

impl Default for MultiGpuOptions {
    fn default() -> Self {
        Self {
            slice_height: 512,
            transport: Transport::Auto,
            jacobi: true,
            device_loop: true,
            check_interval: 50,
            single_reduction: true,
        }
    }
}

/// Whether libnccl can be loaded, and the error to show when it cannot.
pub fn nccl_available() -> Result<(), GpuError> {
    // SAFETY: only probes whether the shared library can be loaded.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(GpuError::Invalid(
            "NCCL was not found: the loader looks for libnccl.so (not libnccl.so.2). Put a \
             directory holding libnccl.so on LD_LIBRARY_PATH (pip's nvidia-nccl-cu12 installs \
             nvidia/nccl/lib/libnccl.so.2 under site-packages: `ln -s .../libnccl.so.2 \
             DIR/libnccl.so`), or use --transport host"
                .into(),
        ))
    }
}

/// Who sends what to whom, from one rank's local system: `idx` the owned
/// rows packed for sending, `sends` (peer, slots of the packed buffer it
/// reads), `recvs` (peer, halo slots it fills; halo slot 0 is local index
/// `n_owned`). Both sides derive it from the partition alone.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangePlan {
    pub idx: Vec<u32>,
    pub sends: Vec<(usize, Range<usize>)>,
    pub recvs: Vec<(usize, Range<usize>)>,
}

impl ExchangePlan {
    pub fn of(local: &LocalMatrix) -> Self {
        let (mut idx, mut sends, mut recvs) = (Vec::new(), Vec::new(), Vec::new());
        for nb in &local.neighbours {
            if !nb.send.is_empty() {
                sends.push((nb.rank, idx.len()..idx.len() + nb.send.len()));
                idx.extend_from_slice(&nb.send);
            }
            if !nb.recv.is_empty() {
                let start = nb.recv.start - local.n_owned;
                recvs.push((nb.rank, start..start + nb.recv.len()));
            }
        }
        Self { idx, sends, recvs }
    }

    /// Rank `me`'s halo from every rank's packed sends (`sent[rank]`, in the
    /// order of that rank's `idx`): the host-staged transfer.
    pub fn receive(
        plans: &[ExchangePlan],
        sent: &[Vec<f64>],
        me: usize,
        halo: &mut [f64],
    ) -> Result<(), String> {
        for (peer, range) in &plans[me].recvs {
            let (_, from) = plans[*peer]
                .sends
                .iter()
                .find(|(reader, _)| *reader == me)
                .ok_or_else(|| format!("internal: rank {peer} sends nothing to rank {me}"))?;
            if from.len() != range.len() {
                return Err(format!(
                    "internal: rank {peer} sends {} values, rank {me} expects {}",
                    from.len(),
                    range.len()
                ));
            }
            halo[range.clone()].copy_from_slice(&sent[*peer][from.clone()]);
        }
        Ok(())
    }
}

/// A vector split over the ranks: each part the rank's owned rows in local
/// order, on the rank's device.
pub struct MultiVector {
    parts: Vec<GpuVector>,
}

impl MultiVector {
    fn part(&self, rank: usize) -> Result<&CudaSlice<f64>, GpuError> {
        self.parts[rank].dev()
    }
}

/// One rank's share of the system on its GPU.
struct Rank<'g> {
    gpu: &'g Gpu,
    /// The rank in the decomposition.
    index: usize,
    n_owned: usize,
    n_interior: usize,
    /// Global row of each owned row.
    global: Vec<u32>,
    a_oo: DeviceModSell,
    /// None when the rank has no halo.
    a_oh: Option<DeviceCsr>,
    inv_diag: Option<CudaSlice<f64>>,
    /// rowSum of the global matrix for the owned rows (normFactor).
    row_sums: CudaSlice<f64>,
    /// The exchange; `plan.idx` on the device in `send_idx` (one unused
    /// slot when empty).
    plan: ExchangePlan,
    send_idx: CudaSlice<u32>,
    send_buf: RefCell<CudaSlice<f64>>,
    halo: RefCell<CudaSlice<f64>>,
    /// Two sums of block partials (vector_grid(n_owned) each).
    partials: CudaSlice<f64>,
    /// Reduced sums read back; scalars[0] also carries α to `cg_update`.
    scalars: RefCell<CudaSlice<f64>>,
    /// Stream of the NCCL transfers or the peer stores (NCCL and peer
    /// transports).
    comm_stream: Option<Arc<CudaStream>>,
    /// The links to the other ranks (peer transport only).
    peer: Option<PeerLinks>,
    preconditioner: Option<Box<dyn DevicePreconditioner + 'g>>,
    /// The device loop's state, records and sums.
    device: RefCell<LoopBuffers>,
    /// w = A u of the device loop's single-reduction form.
    w: CudaSlice<f64>,
    /// Which form of PCG the device loop runs.
    single_reduction: bool,
}

/// One rank's buffers of the device loop.
struct LoopBuffers {
    /// `kernels/pcg.cu` ST_* (the same on every rank).
    state: CudaSlice<f64>,
    /// 3 per iteration of a chunk (r · z, p · Ap, residual).
    records: CudaSlice<f64>,
    /// The rank's sums, all-reduced in place: [p · Ap] or [Σ|r|, r · z].
    sums: CudaSlice<f64>,
    /// Partials of p · Ap (w · u): A_oo's slices, then the boundary rows'
    /// blocks.
    pq_partials: CudaSlice<f64>,
}

/// One rank's blocks built on the host: its local system, the coupling
/// A_oh and A_oo in mod-SELL.
struct RankHost {
    local: LocalMatrix,
    a_oh: Csr,
    m: ModSell,
}

impl RankHost {
    /// Every rank's blocks of `a` split by `d`, the ranks in parallel (each
    /// rank's local system is itself built in parallel over its rows).
    fn all(a: &Csr, d: &Decomposition, options: &MultiGpuOptions) -> Vec<Result<Self, GpuError>> {
        timings::span("local systems", || {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..d.n_ranks())
                    .map(|rank| s.spawn(move || Self::of(a, d, rank, options)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("local system thread panicked"))
                    .collect()
            })
        })
    }

    fn of(
        a: &Csr,
        d: &Decomposition,
        rank: usize,
        options: &MultiGpuOptions,
    ) -> Result<Self, GpuError> {
        let local = d.local(a, rank).map_err(GpuError::Invalid)?;
        // A_oo (`n_owned` square) and A_oh (the boundary rows × the halo
        // slots).
        let (a_oo, a_oh) = (local.owned_block(), local.halo_block());
        let m = ModSell::from_csr(&a_oo, options.slice_height).map_err(GpuError::Invalid)?;
        Ok(Self { local, a_oh, m })
    }

    /// Jacobi's inverse diagonal (where `jacobi`) and the owned rows' sums
    /// of the global matrix (`row_sums`).
    fn scales(&self, row_sums: &[f64], jacobi: bool) -> (Option<Vec<f64>>, Vec<f64>) {
        let inv_diag = jacobi.then(|| self.m.diag().par_iter().map(|d| 1.0 / d).collect());
        let owned_sums = self.local.global[..self.local.n_owned]
            .par_iter()
            .map(|&g| row_sums[g as usize])
            .collect();
        (inv_diag, owned_sums)
    }
}

impl<'g> Rank<'g> {
    /// The rank's share on `gpu` from its host blocks; `row_sums` the global
    /// matrix's.
    fn new(
        gpu: &'g Gpu,
        index: usize,
        host: &RankHost,
        row_sums: &[f64],
        options: &MultiGpuOptions,
        comm_stream: Option<Arc<CudaStream>>,
    ) -> Result<Self, GpuError> {
        let RankHost { local, a_oh, m } = host;
        let a_oo = DeviceModSell::upload(gpu, m)?;
        let a_oh = (a_oh.nnz() > 0)
            .then(|| DeviceCsr::upload(gpu, a_oh))
            .transpose()?;
        let a_oo_slices = a_oo.n_slices();
        let a_oh_blocks = a_oh.as_ref().map_or(0, |c| vector_grid(c.n) as usize);
        let (inv_diag, owned_sums) = host.scales(row_sums, options.jacobi);
        let inv_diag = inv_diag.map(|d| gpu.upload(&d)).transpose()?;
        let plan = ExchangePlan::of(local);
        let check_interval = options.check_interval.max(1);
        Ok(Self {
            gpu,
            index,
            n_owned: local.n_owned,
            n_interior: local.n_interior,
            global: local.global[..local.n_owned].to_vec(),
            a_oo,
            a_oh,
            inv_diag,
            row_sums: gpu.upload(&owned_sums)?,
            send_buf: RefCell::new(gpu.zeros(plan.idx.len())?),
            send_idx: match plan.idx.is_empty() {
                true => gpu.zeros(1)?,
                false => gpu.upload(&plan.idx)?,
            },
            plan,
            halo: RefCell::new(gpu.zeros(local.n_halo())?),
            partials: gpu.zeros(2 * vector_grid(local.n_owned) as usize)?,
            scalars: RefCell::new(gpu.zeros(2)?),
            comm_stream,
            peer: None,
            preconditioner: None,
            device: RefCell::new(LoopBuffers {
                state: gpu.zeros(STATE_LEN)?,
                records: gpu.zeros(3 * (check_interval + 1))?,
                sums: gpu.zeros(4)?,
                pq_partials: gpu.zeros(a_oo_slices + a_oh_blocks.max(1))?,
            }),
            w: gpu.zeros(local.n_owned.max(1))?,
            single_reduction: options.single_reduction,
        })
    }

    fn n32(&self) -> i32 {
        self.n_owned as i32
    }
    fn grid(&self) -> u32 {
        vector_grid(self.n_owned)
    }

    /// Writes the values of `host`, blocks of the pattern this rank was
    /// built from, into its device arrays (the pattern, the exchange and the
    /// buffers stay).
    fn write_values(&mut self, host: &RankHost, row_sums: &[f64]) -> Result<(), GpuError> {
        let RankHost { local, a_oh, m } = host;
        let same = local.n_owned == self.n_owned
            && local.n_interior == self.n_interior
            && m.values().len() == self.a_oo.values.len()
            && a_oh.nnz() == self.a_oh.as_ref().map_or(0, |c| c.nnz)
            && ExchangePlan::of(local) == self.plan
            && local.global[..local.n_owned] == self.global[..];
        if !same {
            return Err(GpuError::Invalid(format!(
                "internal: rank {}'s new system does not have the pattern it was set up with",
                self.index
            )));
        }
        let gpu = self.gpu;
        gpu.write(m.values(), &mut self.a_oo.values)?;
        gpu.write(m.diag(), &mut self.a_oo.diag)?;
        if let Some(c) = &mut self.a_oh {
            gpu.write(a_oh.values(), &mut c.vals)?;
        }
        let (inv_diag, owned_sums) = host.scales(row_sums, self.inv_diag.is_some());
        if let (Some(host), Some(dev)) = (inv_diag, &mut self.inv_diag) {
            gpu.write(&host, dev)?;
        }
        gpu.write(&owned_sums, &mut self.row_sums)
    }
}

/// `local`'s neighbours for a [`Communicator::exchange`] of the packed send
/// buffer of `plan` (see [`Peers::packed`]).
pub fn packed_neighbours(local: &LocalMatrix, plan: &ExchangePlan) -> Vec<Neighbour> {
    let (n_packed, n_owned) = (plan.idx.len(), local.n_owned);
    local
        .neighbours
        .iter()
        .map(|nb| {
            let slots = plan
                .sends
                .iter()
                .find(|(peer, _)| *peer == nb.rank)
                .map_or(0..0, |(_, range)| range.clone());
            Neighbour {
                rank: nb.rank,
                send: slots.map(|i| i as u32).collect(),
                recv: nb.recv.start - n_owned + n_packed..nb.recv.end - n_owned + n_packed,
            }
        })
        .collect()
}

/// The other ranks of a distributed run, reached through a [`Communicator`].
struct Peers<'g> {
    comm: &'g dyn Communicator,
    /// The neighbours with their sends renumbered as slots of the packed
    /// send buffer (what is downloaded, passed as the "owned" values) and
    /// their receives shifted to follow it (a communicator's halo slots
    /// count from the end of the owned values).
    packed: Vec<Neighbour>,
    /// Collective calls made in the current step (`rank_loop`: what a
    /// failed step still owes the other ranks).
    calls: Cell<usize>,
    /// Steps (and device-loop chunks) left before an injected failure
    /// ([`MultiGpuBackend::fail_after`], tests only).
    fail_at: Cell<Option<usize>>,
}

/// [`CgBackend`] over several GPUs (module documentation).
pub struct MultiGpuBackend<'g> {
    ranks: Vec<Rank<'g>>,
    n_global: usize,
    transport: Transport,
    comms: Option<Vec<Comm>>,
    /// Communicators on the compute streams: the device loop's all-reduces.
    reduce_comms: Option<Vec<Comm>>,
    device_loop: Cell<bool>,
    check_interval: usize,
    /// This process's or thread's one rank of a distributed run
    /// ([`MultiGpuBackend::for_rank`]): halos and sums through the
    /// communicator.
    peers: Option<Peers<'g>>,
    /// False: the halo transfer is skipped (stale halos; the bench's
    /// measure of the communication share only).
    exchange: Cell<bool>,
    reduction: Cell<Reduction>,
    failure: FirstFailure,
}

impl<'g> MultiGpuBackend<'g> {
    /// The system `a` split by `d`; rank r runs on `gpus[r % gpus.len()]`.
    /// The local systems are built on the host in parallel, one thread per rank.
    pub fn new(
        gpus: &'g [Gpu],
        a: &Csr,
        d: &Decomposition,
        options: &MultiGpuOptions,
    ) -> Result<Self, GpuError> {
        if gpus.is_empty() {
            return Err(GpuError::Invalid(
                "a multi-GPU solve needs at least one GPU".into(),
            ));
        }
        let n_ranks = d.n_ranks();
        let check_interval = options.check_interval.max(1);
        let row_sums = timings::span("row sums of the system", || openfoam_row_sums(a));
        let hosts = RankHost::all(a, d, options);
        let distinct = n_ranks <= gpus.len();
        let rank_gpus: Vec<&Gpu> = (0..n_ranks).map(|r| &gpus[r % gpus.len()]).collect();
        let peers = distinct && n_ranks > 1 && peer::all_peers(&rank_gpus)?;
        let mut transport = match options.transport {
            // One rank: nothing travels.
            _ if n_ranks == 1 => Transport::Host,
            Transport::Auto if peers => Transport::Peer,
            Transport::Auto if distinct && n_ranks > 1 && nccl_available().is_ok() => {
                Transport::Nccl
            }
            Transport::Auto => Transport::Host,
            Transport::Peer if !peers => {
                return Err(GpuError::Invalid(format!(
                    "--transport peer needs one GPU per rank and peer access between every \
                     pair: {n_ranks} ranks on {} GPUs{}; use --transport nccl or host",
                    gpus.len(),
                    if distinct { " without peer access" } else { "" }
                )))
            }
            Transport::Peer => Transport::Peer,
            Transport::Nccl if !distinct => {
                return Err(GpuError::Invalid(format!(
                    "NCCL needs one GPU per rank: {n_ranks} ranks on {} GPUs; use --transport \
                     host or fewer ranks",
                    gpus.len()
                )))
            }
            Transport::Nccl => {
                nccl_available()?;
                Transport::Nccl
            }
            Transport::Host => Transport::Host,
        };
        let uploads = || -> Result<Vec<Rank<'g>>, GpuError> {
            let mut ranks = Vec::with_capacity(n_ranks);
            for (rank, host) in hosts.into_iter().enumerate() {
                let host = host?;
                let gpu = &gpus[rank % gpus.len()];
                let comm_stream = matches!(transport, Transport::Nccl | Transport::Peer)
                    .then(|| gpu.new_stream())
                    .transpose()?;
                let rank = Rank::new(gpu, rank, &host, &row_sums, options, comm_stream)?;
                ranks.push(rank);
            }
            Ok(ranks)
        };
        let mut ranks = timings::span("rank systems uploaded", uploads)?;
        let comms = if transport == Transport::Nccl {
            check_nccl_environment();
            let streams = ranks
                .iter()
                .map(|r| {
                    r.comm_stream
                        .clone()
                        .expect("NCCL transport has comm streams")
                })
                .collect();
            match Comm::from_devices(streams) {
                Ok(comms) => Some(comms),
                // auto falls back to host staging (the comm streams stay idle).
                Err(e) if options.transport == Transport::Auto => {
                    log::warn!("NCCL failed to start ({e:?}); halos go through the host");
                    transport = Transport::Host;
                    None
                }
                Err(e) => {
                    return Err(GpuError::Driver {
                        call: "ncclCommInitAll",
                        error: format!("{e:?}"),
                    })
                }
            }
        } else {
            None
        };
        if transport == Transport::Peer {
            let plans: Vec<ExchangePlan> = ranks.iter().map(|r| r.plan.clone()).collect();
            let halos: Vec<u64> = ranks
                .iter()
                .map(|r| r.gpu.address(&r.halo.borrow()))
                .collect();
            let links = timings::span("peer links", || peer::link(&rank_gpus, &plans, &halos))?;
            for (r, l) in ranks.iter_mut().zip(links) {
                r.peer = Some(l);
            }
        }
        // The device loop's all-reduces go on the compute streams, through
        // communicators of their own.
        let reduce_comms = match (&comms, options.device_loop) {
            (Some(_), true) => {
                let streams = ranks.iter().map(|r| Arc::clone(r.gpu.stream())).collect();
                match Comm::from_devices(streams) {
                    Ok(comms) => Some(comms),
                    // auto keeps the host-driven steps.
                    Err(e) if options.transport == Transport::Auto => {
                        log::warn!(
                            "NCCL failed to start the all-reduce communicators ({e:?}); PCG \
                             runs the host-driven steps"
                        );
                        None
                    }
                    Err(e) => return Err(nccl("ncclCommInitAll", e)),
                }
            }
            _ => None,
        };
        Ok(Self {
            ranks,
            n_global: a.n_rows(),
            transport,
            comms,
            reduce_comms,
            device_loop: Cell::new(options.device_loop),
            check_interval,
            peers: None,
            exchange: Cell::new(true),
            reduction: Cell::new(Reduction::HostRead),
            failure: FirstFailure::default(),
        })
    }

    /// Takes the values of `a`, a system of the pattern this backend was
    /// built from, split by the same `d` (a later solve of a run): each
    /// rank's blocks are built on the host as [`Self::new`] builds them and
    /// only their values are written into the device arrays. The exchange,
    /// the buffers, the peer links and the communicators stay. Jacobi or no
    /// preconditioner only (a set preconditioner would need its own set-up).
    pub fn refresh_values(
        &mut self,
        a: &Csr,
        d: &Decomposition,
        options: &MultiGpuOptions,
    ) -> Result<(), GpuError> {
        if self.peers.is_some() || self.ranks.iter().any(|r| r.preconditioner.is_some()) {
            return Err(GpuError::Invalid(
                "internal: only a serial run's split system without a set preconditioner \
                 takes new values in place"
                    .into(),
            ));
        }
        if a.n_rows() != self.n_global || d.n_ranks() != self.ranks.len() {
            return Err(GpuError::Invalid(format!(
                "internal: a system of {} rows in {} parts does not have the pattern of the \
                 split system ({} rows in {} parts)",
                a.n_rows(),
                d.n_ranks(),
                self.n_global,
                self.ranks.len()
            )));
        }
        let row_sums = timings::span("row sums of the system", || openfoam_row_sums(a));
        let hosts = RankHost::all(a, d, options);
        timings::span("rank values uploaded", || {
            self.ranks
                .iter_mut()
                .zip(hosts)
                .try_for_each(|(rank, host)| rank.write_values(&host?, &row_sums))
        })
    }

    /// Rank `comm.rank()` of a distributed run (`run -np N --device gpu`,
    /// `mpirun`) on `gpu`: the rank's rows of `a` split by `d`. Vectors are
    /// uploaded from and downloaded into global vectors (only the rank's
    /// rows are read and written). Jacobi or no preconditioner, or block
    /// Jacobi ([`MultiGpuBackend::set_preconditioners`]). Every rank must
    /// call it; all succeed or all return an error (`rank_loop`).
    ///
    /// PCG runs the NCCL device loop where every rank has a device of its
    /// own and libnccl loads (`options.device_loop`, transport not `Host`;
    /// the communicators are bootstrapped through `comm`), else the
    /// host-driven steps: the halo travels through `comm` (the packed sends
    /// downloaded, the halo uploaded) and the sums are `comm.sum`s of the
    /// host-read rank sums.
    pub fn for_rank(
        gpu: &'g Gpu,
        a: &Csr,
        d: &Decomposition,
        comm: &'g dyn Communicator,
        options: &MultiGpuOptions,
    ) -> Result<Self, GpuError> {
        if d.n_ranks() != comm.size() {
            return Err(GpuError::Invalid(format!(
                "a decomposition of {} ranks for a run of {}",
                d.n_ranks(),
                comm.size()
            )));
        }
        let set_up = || -> Result<Self, GpuError> {
            let host = RankHost::of(a, d, comm.rank(), options)?;
            let row_sums = openfoam_row_sums(a);
            let rank = Rank::new(gpu, comm.rank(), &host, &row_sums, options, None)?;
            let packed = packed_neighbours(&host.local, &rank.plan);
            Ok(Self {
                ranks: vec![rank],
                n_global: a.n_rows(),
                transport: Transport::Host,
                comms: None,
                reduce_comms: None,
                device_loop: Cell::new(false),
                check_interval: options.check_interval.max(1),
                peers: Some(Peers {
                    comm,
                    packed,
                    calls: Cell::new(0),
                    fail_at: Cell::new(None),
                }),
                exchange: Cell::new(true),
                reduction: Cell::new(Reduction::HostRead),
                failure: FirstFailure::default(),
            })
        };
        // Every rank set up, or every rank returns an error: none waits in
        // the collectives below for a rank that gave up.
        let mut backend = rank_loop::agreed_gpu(comm, set_up())?;
        backend.start_rank_loop(comm, options)?;
        Ok(backend)
    }

    /// The transport in use (`Auto` resolved).
    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn n_ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Skips the halo transfer when false (wrong results: for the bench's
    /// communication share only). The halos are zeroed, so that A p is then
    /// the block-diagonal A_oo p, still SPD: PCG runs on without breaking
    /// down and the device loop's timed solves reach their iteration count.
    pub fn set_exchange(&self, on: bool) -> Result<(), GpuError> {
        self.exchange.set(on);
        if !on {
            for r in &self.ranks {
                let mut halo = r.halo.borrow_mut();
                if !halo.is_empty() {
                    r.gpu.write(&vec![0.0; halo.len()], &mut halo)?;
                }
            }
        }
        Ok(())
    }

    /// Whether `iterate` runs the device loop (module documentation): asked
    /// for, Jacobi or no preconditioner, and one rank, the peer transport or
    /// NCCL with communicators for the all-reduces.
    pub fn device_loop(&self) -> bool {
        let ranks = match &self.peers {
            Some(peers) => peers.comm.size(),
            None => self.ranks.len(),
        };
        self.device_loop.get()
            && self.ranks.iter().all(|r| r.preconditioner.is_none())
            && (ranks == 1 || self.transport == Transport::Peer || self.reduce_comms.is_some())
    }

    /// Asks for the device loop (where it applies) or the host-driven steps.
    pub fn set_device_loop(&self, on: bool) {
        self.device_loop.set(on);
    }

    /// One chunk of the device loop: a host thread per rank.
    fn device_chunk(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: &CgVectors<'_, MultiVector>,
    ) -> Result<Vec<IterationRecord>, GpuError> {
        let host_state = chunk_state(rule, state, count);
        let exchange = self.exchange.get() && self.ranks.len() > 1;
        let mut halos: Vec<_> = self.ranks.iter().map(|r| r.halo.borrow_mut()).collect();
        let mut buffers: Vec<_> = self.ranks.iter().map(|r| r.device.borrow_mut()).collect();
        let send_bufs: Vec<_> = self.ranks.iter().map(|r| r.send_buf.borrow()).collect();
        let mut chunks = Vec::with_capacity(self.ranks.len());
        for (k, (halo, buffers)) in halos.iter_mut().zip(&mut buffers).enumerate() {
            chunks.push(self.rank_chunk(k, exchange, halo, buffers, &send_bufs[k], v)?);
        }
        let host_state = &host_state;
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|c| {
                    s.spawn(move || match c.single {
                        true => c.run_single(host_state, count),
                        false => c.run(host_state, count),
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(GpuError::Invalid("a rank's PCG thread panicked".into()))
                    })
                })
                .collect()
        });
        // A rank's own error first: the others' peer waits then gave up on it.
        let results: Vec<(Vec<f64>, Vec<f64>)> = results.into_iter().collect::<Result<_, _>>()?;
        self.peer_failure()?;
        let (records, st) = &results[0];
        for (k, (_, st_k)) in results.iter().enumerate().skip(1) {
            if st_k[..2] != st[..2] {
                return Err(GpuError::Invalid(format!(
                    "internal: rank {k} stopped at iteration {} and rank 0 at {}",
                    st_k[1], st[1]
                )));
            }
        }
        Ok(chunk_records(records, st, state, count))
    }

    /// A peer-transport wait that gave up (a rank failed or stalled for
    /// [`PEER_TIMEOUT`]), as an error naming the ranks.
    fn peer_failure(&self) -> Result<(), GpuError> {
        for r in &self.ranks {
            if let Some(peer) = &r.peer {
                if let Some(waited_for) = peer.failure(r.gpu)? {
                    return Err(GpuError::Invalid(format!(
                        "rank {} (GPU {}) waited {} s for rank {waited_for}, which failed or \
                         stalled; the solve was abandoned (rerun with --transport nccl or host \
                         to compare)",
                        r.index,
                        r.gpu.ordinal(),
                        PEER_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Rank `k`'s part of a chunk of the device loop, on the buffers the
    /// caller borrowed from it; `exchange`: the halo is transferred (by the
    /// peer stores or NCCL, where the rank has them and a comm stream).
    fn rank_chunk<'a>(
        &'a self,
        k: usize,
        exchange: bool,
        halo: &'a mut CudaSlice<f64>,
        buffers: &'a mut LoopBuffers,
        send_buf: &'a CudaSlice<f64>,
        v: &'a CgVectors<'_, MultiVector>,
    ) -> Result<RankChunk<'a>, GpuError> {
        let r = &self.ranks[k];
        let exchange = match (&self.comms, &r.comm_stream, &r.peer, exchange) {
            (_, _, _, false) => None,
            (_, Some(stream), Some(peer), true) => Some(ChunkExchange::Peer(peer, stream)),
            (Some(comms), Some(stream), None, true) => {
                Some(ChunkExchange::Nccl(stream, RankComm(&comms[k])))
            }
            _ => None,
        };
        let reduce = match (&r.peer, &self.reduce_comms) {
            (Some(peer), _) => Some(ChunkReduce::Peer(peer)),
            (None, Some(comms)) => Some(ChunkReduce::Nccl(RankComm(&comms[k]))),
            (None, None) => None,
        };
        Ok(RankChunk {
            gpu: r.gpu,
            n_owned: r.n_owned,
            n_interior: r.n_interior,
            a_oo: &r.a_oo,
            a_oh: r.a_oh.as_ref(),
            inv_diag: r.inv_diag.as_ref(),
            plan: &r.plan,
            send_idx: &r.send_idx,
            send_buf,
            halo,
            partials: &r.partials,
            buffers,
            exchange,
            reduce,
            vectors: [
                v.x.part(k)?,
                v.r.part(k)?,
                v.z.part(k)?,
                v.p.part(k)?,
                v.q.part(k)?,
            ],
            w: &r.w,
            single: r.single_reduction,
        })
    }

    /// How reductions combine the ranks (default [`Reduction::HostRead`]).
    pub fn set_reduction(&self, reduction: Reduction) {
        self.reduction.set(reduction);
    }

    /// Halo values sent per exchange, summed over ranks.
    pub fn halo_values(&self) -> usize {
        self.ranks.iter().map(|r| r.plan.idx.len()).sum()
    }

    /// Block Jacobi over the ranks: `build(gpu, a_oo)` makes a rank's
    /// preconditioner on its owned block (host CSR, local order). Replaces
    /// Jacobi; it must be linear (fixed-β PCG).
    pub fn set_preconditioners(
        &mut self,
        a: &Csr,
        d: &Decomposition,
        mut build: impl FnMut(&'g Gpu, &Csr) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError>,
    ) -> Result<(), SolveError> {
        for r in self.ranks.iter_mut() {
            let local = d.local(a, r.index).map_err(SolveError::Device)?;
            let a_oo = local.owned_block();
            let p = build(r.gpu, &a_oo)?;
            if !p.is_linear() {
                return Err(SolveError::Device(
                    "multi-GPU PCG takes linear preconditioners only (no flexible PCG)".into(),
                ));
            }
            r.preconditioner = Some(p);
        }
        Ok(())
    }

    /// A global vector split over the ranks.
    pub fn upload(&self, global: &[f64]) -> Result<MultiVector, GpuError> {
        if global.len() != self.n_global {
            return Err(GpuError::Invalid(format!(
                "a vector of {} values for a system of {} rows",
                global.len(),
                self.n_global
            )));
        }
        let parts = self
            .ranks
            .iter()
            .map(|r| {
                // Gathered a piece at a time on all cores straight into the
                // staging buffers: no whole local copy on the host.
                r.gpu
                    .upload_with(r.global.len(), |start, piece: &mut [f64]| {
                        let rows = &r.global[start..start + piece.len()];
                        piece
                            .par_iter_mut()
                            .zip(rows)
                            .for_each(|(v, &g)| *v = global[g as usize]);
                    })
                    .map(GpuVector::from)
            })
            .collect::<Result<_, _>>()?;
        Ok(MultiVector { parts })
    }

    /// The global vector back.
    pub fn download(&self, v: &MultiVector) -> Result<Vec<f64>, GpuError> {
        let mut global = vec![0.0; self.n_global];
        for (rank, r) in self.ranks.iter().enumerate() {
            let local = r.gpu.download(v.part(rank)?)?;
            for (&g, &x) in r.global.iter().zip(&local) {
                global[g as usize] = x;
            }
        }
        Ok(global)
    }

    /// Waits for every GPU.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.ranks.iter().try_for_each(|r| r.gpu.synchronize())
    }

    /// y = A x over all ranks (module documentation: pack, transfer while
    /// A_oo x runs, add A_oh x_halo).
    pub fn product(&self, x: &MultiVector, y: &MultiVector) -> Result<(), GpuError> {
        let exchange = self.exchange.get() && self.ranks.len() > 1;
        let by_peers = exchange && self.transport == Transport::Peer;
        for (rank, r) in self.ranks.iter().enumerate() {
            match &r.peer {
                Some(peer) if by_peers => {
                    peer.pack(r.gpu, r.gpu.stream(), &r.send_idx, x.part(rank)?, None)?
                }
                _ => launch_pack(
                    r.gpu,
                    &r.plan,
                    &r.send_idx,
                    x.part(rank)?,
                    &r.send_buf.borrow(),
                )?,
            }
        }
        match (&self.comms, exchange) {
            (_, true) if by_peers => {}
            (Some(comms), true) => self.start_nccl(comms)?,
            (None, true) => self.host_staged()?,
            (_, false) => {}
        }
        if let (Some(peers), true) = (&self.peers, self.exchange.get()) {
            self.exchange_with_peers(peers)?;
        }
        for (rank, r) in self.ranks.iter().enumerate() {
            r.a_oo.spmv(r.gpu, x.part(rank)?, y.part(rank)?)?;
        }
        for (rank, r) in self.ranks.iter().enumerate() {
            if let (Some(s), true) = (&r.comm_stream, exchange) {
                driver("cuStreamWaitEvent", r.gpu.stream().join(s))?;
            }
            if let Some(a_oh) = &r.a_oh {
                let halo = r.halo.borrow();
                let step = HaloAdd {
                    a_oh,
                    n_interior: r.n_interior,
                    halo: &halo,
                    y: y.part(rank)?,
                    dot: None,
                    st: None,
                };
                match &r.peer {
                    Some(peer) if by_peers => peer.halo_add(r.gpu, &step, None, None)?,
                    _ => step.launch(r.gpu)?,
                }
            }
        }
        Ok(())
    }

    /// Grouped NCCL sends and receives on each rank's comm stream, after the
    /// pack on its compute stream.
    fn start_nccl(&self, comms: &[Comm]) -> Result<(), GpuError> {
        for r in &self.ranks {
            let s = r
                .comm_stream
                .as_ref()
                .expect("NCCL transport has comm streams");
            driver("cuStreamWaitEvent", s.join(r.gpu.stream()))?;
        }
        group_start().map_err(|e| nccl("ncclGroupStart", e))?;
        let mut result = Ok(());
        for (r, comm) in self.ranks.iter().zip(comms) {
            result = push_exchange(
                comm,
                &r.plan,
                &r.send_buf.borrow(),
                &mut r.halo.borrow_mut(),
            );
            if result.is_err() {
                break;
            }
        }
        group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
        result
    }

    /// The halo exchange of a distributed run's rank: the packed sends read
    /// back, exchanged through the communicator, the halo written.
    fn exchange_with_peers(&self, peers: &Peers) -> Result<(), GpuError> {
        let r = &self.ranks[0];
        let sent = match r.plan.idx.is_empty() {
            true => Vec::new(),
            false => r.gpu.download(&r.send_buf.borrow())?,
        };
        let mut halo = r.halo.borrow_mut();
        let mut host = vec![0.0; halo.len()];
        peers.comm.exchange(
            HaloExchange::new(&peers.packed, &sent, &mut host),
            &mut || {},
        );
        peers.calls.set(peers.calls.get() + 1);
        if !host.is_empty() {
            r.gpu.write(&host, &mut halo)?;
        }
        Ok(())
    }

    /// The exchange through host memory: every rank's packed sends read
    /// back, each halo written from them.
    fn host_staged(&self) -> Result<(), GpuError> {
        let sent: Vec<Vec<f64>> = self
            .ranks
            .iter()
            .map(|r| match r.plan.idx.is_empty() {
                true => Ok(Vec::new()),
                false => r.gpu.download(&r.send_buf.borrow()),
            })
            .collect::<Result<_, _>>()?;
        let plans: Vec<ExchangePlan> = self.ranks.iter().map(|r| r.plan.clone()).collect();
        for (me, r) in self.ranks.iter().enumerate() {
            if r.plan.recvs.is_empty() {
                continue;
            }
            let mut halo = r.halo.borrow_mut();
            let mut host = vec![0.0; halo.len()];
            ExchangePlan::receive(&plans, &sent, me, &mut host).map_err(GpuError::Invalid)?;
            r.gpu.write(&host, &mut halo)?;
        }
        Ok(())
    }

    /// Sums of the first `count` groups of each rank's partials, added over
    /// the ranks in rank order.
    fn reduce(&self, count: usize) -> Result<Vec<f64>, GpuError> {
        for r in &self.ranks {
            let (m, c) = (r.grid() as i32, count as i32);
            let scalars = r.scalars.borrow();
            r.gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&m).arg(&c).arg(&r.partials).arg(&*scalars);
            })?;
        }
        if let (Some(comms), Reduction::NcclAllReduce, true) =
            (&self.comms, self.reduction.get(), self.ranks.len() > 1)
        {
            return self.nccl_all_reduce(comms, count);
        }
        let mut total = vec![0.0; count];
        for r in &self.ranks {
            let s = r.gpu.download(&r.scalars.borrow())?;
            for (t, v) in total.iter_mut().zip(s) {
                *t += v;
            }
        }
        if let Some(peers) = &self.peers {
            peers.comm.sum(&mut total);
            peers.calls.set(peers.calls.get() + 1);
        }
        Ok(total)
    }

    /// The first `count` scalars all-reduced by NCCL on the comm streams,
    /// read back from rank 0.
    fn nccl_all_reduce(&self, comms: &[Comm], count: usize) -> Result<Vec<f64>, GpuError> {
        let comm_stream = |r: &Rank| -> Arc<CudaStream> {
            Arc::clone(
                r.comm_stream
                    .as_ref()
                    .expect("NCCL transport has comm streams"),
            )
        };
        for r in &self.ranks {
            driver("cuStreamWaitEvent", comm_stream(r).join(r.gpu.stream()))?;
        }
        group_start().map_err(|e| nccl("ncclGroupStart", e))?;
        let mut result = Ok(());
        for (r, comm) in self.ranks.iter().zip(comms) {
            let mut scalars = r.scalars.borrow_mut();
            let mut sums = scalars.slice_mut(0..count);
            if let Err(e) = comm.all_reduce_in_place(&mut sums, &ReduceOp::Sum) {
                result = Err(nccl("ncclAllReduce", e));
                break;
            }
        }
        group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
        result?;
        for r in &self.ranks {
            driver("cuStreamWaitEvent", r.gpu.stream().join(&comm_stream(r)))?;
        }
        let first = &self.ranks[0];
        first.gpu.download_prefix(&first.scalars.borrow(), count)
    }

    /// Each of this process's ranks' sum of `what` (block partials, then
    /// `reduce_partials`, read back), in the backend's rank order.
    pub(super) fn rank_sums(&self, what: Partials) -> Result<Vec<f64>, GpuError> {
        let mut sums = Vec::with_capacity(self.ranks.len());
        for (k, r) in self.ranks.iter().enumerate() {
            let (n, m, one) = (r.n32(), r.grid() as i32, 1i32);
            let (kernel, vectors) = match what {
                Partials::Sum(v) => ("sum_partials", [Some(v.part(k)?), None]),
                Partials::Dot(a, b) => ("dot_partials", [Some(a.part(k)?), Some(b.part(k)?)]),
                Partials::AbsSum(v) => ("abs_sum_partials", [Some(v.part(k)?), None]),
            };
            r.gpu.launch(kernel, r.grid(), VECTOR_BLOCK, 0, |a| {
                a.arg(&n);
                vectors.iter().flatten().for_each(|v| {
                    a.arg(*v);
                });
                if let Partials::Sum(_) = what {
                    a.arg(&NULL); // no scale
                }
                a.arg(&r.partials);
            })?;
            let scalars = r.scalars.borrow();
            r.gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&m).arg(&one).arg(&r.partials).arg(&*scalars);
            })?;
            sums.push(r.gpu.download(&scalars)?[0]);
        }
        Ok(sums)
    }

    /// Σ of `what` over every rank: this process's ranks in rank order, then
    /// over the processes. The sum over the processes is made even when this
    /// rank's device failed (a NaN contribution), so that no rank waits for
    /// it.
    pub(super) fn global_sum(&self, what: Partials) -> f64 {
        let local = self
            .failure
            .guarded(f64::NAN, || Ok(self.rank_sums(what)?.iter().sum()));
        let mut total = [local];
        comm_of(self).sum(&mut total);
        total[0]
    }
}

/// The per-rank sums of the executor's reductions and the deflation's Zᵀ v.
#[derive(Clone, Copy)]
pub(super) enum Partials<'v> {
    /// Σ v (a rank's entry of Zᵀ v).
    Sum(&'v MultiVector),
    /// a · b.
    Dot(&'v MultiVector, &'v MultiVector),
    /// Σ |v|.
    AbsSum(&'v MultiVector),
}

/// The communicator across processes: the run's for a rank of a distributed
/// run, none (one process holds every rank) otherwise.
pub(super) fn comm_of<'b>(backend: &'b MultiGpuBackend<'_>) -> &'b dyn Communicator {
    match &backend.peers {
        Some(peers) => peers.comm,
        None => &SingleProcess,
    }
}

/// Solves A x = b by PCG split over `gpus` by `d` (rank r on
/// `gpus[r % gpus.len()]`), after the CPU path's input checks; `x` holds the
/// initial guess and receives the solution.
#[allow(clippy::too_many_arguments)]
pub fn solve_pcg_multi(
    gpus: &[Gpu],
    a: &Csr,
    d: &Decomposition,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
    options: &MultiGpuOptions,
) -> Result<SolverPerformance, SolveError> {
    check_system(a, b, x, controls)?;
    let backend = MultiGpuBackend::new(gpus, a, d, options)?;
    solve_pcg_with(&backend, b, x, controls, field)
}

/// [`solve_pcg_multi`] on a backend already set up for the system (a run
/// keeps one across its solves: [`MultiGpuBackend::refresh_values`]), `b`
/// and `x` checked against it by the caller (`check_system`, before the
/// set-up it would otherwise waste).
pub fn solve_pcg_with(
    backend: &MultiGpuBackend<'_>,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let (b_dev, mut x_dev) = timings::span("right-hand side and start to the GPUs", || {
        Ok::<_, GpuError>((backend.upload(b)?, backend.upload(x)?))
    })?;
    let perf = timings::span("PCG over the GPUs", || {
        pcg(backend, &b_dev, &mut x_dev, controls, field)
    })?;
    let solution = timings::span("solution to the host", || backend.download(&x_dev));
    x.copy_from_slice(&solution?);
    Ok(perf)
}

/// Slabs of an nx × ny × nz box in natural order (x fastest): rank r owns
/// the z-layers `r·nz/ranks .. (r+1)·nz/ranks` (a 1-D decomposition, two
/// neighbours per inner rank).
pub fn box_slabs(nx: usize, ny: usize, nz: usize, ranks: usize) -> Result<Decomposition, String> {
    let layer = nx * ny;
    let owner = (0..nx * ny * nz)
        .map(|i| ((i / layer) * ranks / nz.max(1)) as u32)
        .collect();
    Decomposition::from_owners(owner, ranks)
}

fn driver<T>(call: &'static str, r: Result<T, cudarc::driver::DriverError>) -> Result<T, GpuError> {
    super::driver(call, r)
}

fn nccl(call: &'static str, e: NcclError) -> GpuError {
    GpuError::Driver {
        call,
        error: format!("{e:?}"),
    }
}

/// buf = the owned values of `x` the neighbours read (`halo_pack`).
fn launch_pack(
    gpu: &Gpu,
    plan: &ExchangePlan,
    send_idx: &CudaSlice<u32>,
    x: &CudaSlice<f64>,
    buf: &CudaSlice<f64>,
) -> Result<(), GpuError> {
    let n = plan.idx.len() as i32;
    gpu.launch_vector("halo_pack", plan.idx.len(), |a| {
        a.arg(&n).arg(send_idx).arg(x).arg(buf);
    })
}

/// One rank's NCCL sends of its packed values and receives into its halo
/// (inside a group).
fn push_exchange(
    comm: &Comm,
    plan: &ExchangePlan,
    buf: &CudaSlice<f64>,
    halo: &mut CudaSlice<f64>,
) -> Result<(), GpuError> {
    for (peer, range) in &plan.sends {
        comm.send(&buf.slice(range.clone()), *peer as i32)
            .map_err(|e| nccl("ncclSend", e))?;
    }
    for (peer, range) in &plan.recvs {
        comm.recv(&mut halo.slice_mut(range.clone()), *peer as i32)
            .map_err(|e| nccl("ncclRecv", e))?;
    }
    Ok(())
}

/// y[boundary rows] += A_oh x_halo, the boundary rows' step of y = A x;
/// with `dot` = (p, partials) also the blocks' partials of p · (A_oh
/// x_halo); a no-op once `st` says done.
#[derive(Clone, Copy)]
pub struct HaloAdd<'a> {
    pub a_oh: &'a DeviceCsr,
    pub n_interior: usize,
    pub halo: &'a CudaSlice<f64>,
    pub y: &'a CudaSlice<f64>,
    pub dot: Option<(&'a CudaSlice<f64>, &'a CudaView<'a, f64>)>,
    pub st: Option<&'a CudaSlice<f64>>,
}

impl<'a> HaloAdd<'a> {
    /// The leading arguments of `halo_add` and `peer_halo_add`.
    pub(super) fn push_args(&self, a: &mut KernelArgs<'a>, n: &'a i32, row0: &'a i32) {
        a.arg(n).arg(row0);
        self.a_oh.push_args(a);
        a.arg(self.halo).arg(self.y);
        arg_or_null(a, self.dot.map(|d| d.0));
        arg_or_null(a, self.dot.map(|d| d.1));
        arg_or_null(a, self.st);
    }

    /// `halo_add` (no waiting: the halo is in place).
    fn launch(&self, gpu: &Gpu) -> Result<(), GpuError> {
        let (n, row0) = (self.a_oh.n as i32, self.n_interior as i32);
        gpu.launch_vector("halo_add", self.a_oh.n, |a| self.push_args(a, &n, &row0))
    }
}

/// A communicator handed to one rank's thread.
struct RankComm<'a>(&'a Comm);

// SAFETY: an NCCL communicator may be used from any thread, one call at a
// time; each rank's communicators go to that rank's thread alone, and the
// main thread does not use them while the rank threads run.
unsafe impl Send for RankComm<'_> {}

/// One rank's part of a chunk of the device loop, driven by its own host
/// thread.
struct RankChunk<'a> {
    gpu: &'a Gpu,
    n_owned: usize,
    n_interior: usize,
    a_oo: &'a DeviceModSell,
    a_oh: Option<&'a DeviceCsr>,
    inv_diag: Option<&'a CudaSlice<f64>>,
    plan: &'a ExchangePlan,
    send_idx: &'a CudaSlice<u32>,
    send_buf: &'a CudaSlice<f64>,
    halo: &'a mut CudaSlice<f64>,
    /// Two sums of vector-block partials.
    partials: &'a CudaSlice<f64>,
    buffers: &'a mut LoopBuffers,
    /// How halos travel (None: no transfer).
    exchange: Option<ChunkExchange<'a>>,
    /// How the ranks' sums are added (None: one rank).
    reduce: Option<ChunkReduce<'a>>,
    /// x, r, z, p, q.
    vectors: [&'a CudaSlice<f64>; 5],
    /// w = A u of the single-reduction form.
    w: &'a CudaSlice<f64>,
    /// Run the single-reduction form.
    single: bool,
}

/// The device loop's halo transfer.
enum ChunkExchange<'a> {
    /// NCCL send/recv on the comm stream.
    Nccl(&'a Arc<CudaStream>, RankComm<'a>),
    /// Stores into the peers' halos (`gpu::peer`) on the comm stream.
    Peer(&'a PeerLinks, &'a Arc<CudaStream>),
}

/// The device loop's all-reduce.
enum ChunkReduce<'a> {
    /// `ncclAllReduce` on the compute stream.
    Nccl(RankComm<'a>),
    /// Sums stored into every peer's area (`gpu::peer`).
    Peer(&'a PeerLinks),
}

/// The reduction points of an iteration (kernels/pcg.cu `finish_*`).
#[derive(Clone, Copy)]
enum Finish {
    /// r · z.
    Precondition,
    /// p · Ap.
    Operator,
    /// Σ|r| and the next r · z (Jacobi or none: z comes with the update).
    Update,
}

impl Finish {
    /// Sums reduced.
    fn count(self) -> usize {
        match self {
            Finish::Update => 2,
            _ => 1,
        }
    }
    /// (the one-block kernel, its peer-transport twin).
    fn kernels(self) -> (&'static str, &'static str) {
        match self {
            Finish::Precondition => ("cg_finish_precondition", "peer_finish_precondition"),
            Finish::Operator => ("cg_finish_operator", "peer_finish_operator"),
            Finish::Update => ("cg_finish_update", "peer_finish_update"),
        }
    }
    /// The one-block kernel's flag argument: not flexible; with r · z.
    fn flag(self) -> Option<i32> {
        match self {
            Finish::Precondition => Some(0),
            Finish::Operator => None,
            Finish::Update => Some(1),
        }
    }
}

impl<'a> RankChunk<'a> {
    /// A reduction's sums over every rank: `groups` sums of the vector
    /// partials (`vector_grid(n_owned)` each), then with `operator` = Some(m)
    /// the sum of the operator's first m partials. With peers they are
    /// published (unless the halo or update kernel `published` them) and the
    /// returned links' finish kernel gathers them; else `reduce_partials`
    /// writes the rank's sums into `sums` and NCCL all-reduces them there.
    fn sum_over_ranks(
        &mut self,
        groups: usize,
        operator: Option<usize>,
        published: bool,
    ) -> Result<Option<&'a PeerLinks>, GpuError> {
        let gpu = self.gpu;
        let vm = vector_grid(self.n_owned) as usize;
        let b = &mut *self.buffers;
        let comm = match &self.reduce {
            Some(ChunkReduce::Peer(peer)) => {
                if !published {
                    let vector = (groups > 0).then(|| vector_sums((self.partials, vm, groups)));
                    let operator = operator.map(|m| (&b.pq_partials, m));
                    peer.publish(gpu, vector, operator, &b.state)?;
                }
                return Ok(Some(*peer));
            }
            Some(ChunkReduce::Nccl(comm)) => Some(comm),
            None => None,
        };
        if groups > 0 {
            let (vm, g) = (vm as i32, groups as i32);
            gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&vm).arg(&g).arg(self.partials).arg(&b.sums);
            })?;
        }
        if let Some(m) = operator {
            let (m, tail) = (m as i32, b.sums.slice(groups..));
            gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&m).arg(&1i32).arg(&b.pq_partials).arg(&tail);
            })?;
        }
        if let Some(comm) = comm {
            let count = groups + usize::from(operator.is_some());
            comm.0
                .all_reduce_in_place(&mut b.sums.slice_mut(0..count), &ReduceOp::Sum)
                .map_err(|e| nccl("ncclAllReduce", e))?;
        }
        Ok(None)
    }

    /// Finishes reduction point `step` of iteration `j` (the two-reduction
    /// form): the sums over every rank (`sum_over_ranks`; `m` partials of
    /// p · Ap with `Finish::Operator`), then its one-block kernel.
    fn finish(&mut self, step: Finish, m: usize, j: i32, published: bool) -> Result<(), GpuError> {
        let (groups, operator) = match step {
            Finish::Operator => (0, Some(m)),
            _ => (step.count(), None),
        };
        let peer = self.sum_over_ranks(groups, operator, published)?;
        let (kernel, peer_kernel) = step.kernels();
        let b = &*self.buffers;
        if let Some(peer) = peer {
            return peer.finish(
                self.gpu,
                peer_kernel,
                &b.sums,
                &b.state,
                &b.records,
                j,
                None,
            );
        }
        let flag = step.flag();
        self.gpu.launch(kernel, 1, 32, 0, |a| {
            a.arg(&1i32).arg(&b.sums);
            if let Some(f) = &flag {
                a.arg(f);
            }
            a.arg(&b.state).arg(&b.records).arg(&j);
        })
    }

    /// Finishes a single reduction (`cg_finish_single`): the `groups` sums of
    /// the vector partials (r · u, with Σ|r| first when `groups` is 2) and
    /// w · u from the operator's `m` partials, over every rank.
    fn finish_single(
        &mut self,
        groups: usize,
        m: usize,
        j: i32,
        published: bool,
    ) -> Result<(), GpuError> {
        let prologue = groups == 1;
        let peer = self.sum_over_ranks(groups, Some(m), published)?;
        let b = &*self.buffers;
        if let Some(peer) = peer {
            let step = "peer_finish_single";
            return peer.finish(
                self.gpu,
                step,
                &b.sums,
                &b.state,
                &b.records,
                j,
                Some(prologue),
            );
        }
        let prologue = i32::from(prologue);
        self.gpu.launch("cg_finish_single", 1, 32, 0, |a| {
            a.arg(&prologue)
                .arg(&b.sums)
                .arg(&b.state)
                .arg(&b.records)
                .arg(&j);
        })
    }

    /// output = A input with the partials of input · output in
    /// `pq_partials` (iteration j): the transfer of input's packed values
    /// while A_oo input runs, then the boundary rows. With peers the halo
    /// step publishes the reduction: `vector`'s sums (the single-reduction
    /// form's), then input · output. Returns the number of partials and
    /// whether they were published.
    fn product(
        &mut self,
        j: i32,
        input: &CudaSlice<f64>,
        output: &CudaSlice<f64>,
        vector: Option<VectorSums<'_>>,
    ) -> Result<(usize, bool), GpuError> {
        let gpu = self.gpu;
        let state = &self.buffers.state;
        match &self.exchange {
            Some(ChunkExchange::Nccl(stream, comm)) => {
                launch_pack(gpu, self.plan, self.send_idx, input, self.send_buf)?;
                driver("cuStreamWaitEvent", stream.join(gpu.stream()))?;
                group_start().map_err(|e| nccl("ncclGroupStart", e))?;
                let pushed = push_exchange(comm.0, self.plan, self.send_buf, self.halo);
                group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
                pushed?;
            }
            // The stores run beside A_oo input; the receivers wait on their flags.
            Some(ChunkExchange::Peer(peer, stream)) => {
                driver("cuStreamWaitEvent", stream.join(gpu.stream()))?;
                peer.pack(gpu, stream, self.send_idx, input, Some(state))?;
            }
            None => {}
        }
        let b = &*self.buffers;
        let (m, n) = (self.a_oo, self.n_owned as i32);
        m.launch_slices(gpu, "cg_operator", &n, |a| {
            a.arg(input).arg(output).arg(&b.pq_partials).arg(&b.state);
            a.arg(&b.records).arg(&j).arg(&NULL);
        })?;
        if let Some(ChunkExchange::Nccl(stream, _)) = &self.exchange {
            driver("cuStreamWaitEvent", gpu.stream().join(stream))?;
        }
        let mut blocks = m.n_slices();
        let mut published = false;
        if let Some(a_oh) = self.a_oh {
            let tail = b.pq_partials.slice(blocks..);
            let step = HaloAdd {
                a_oh,
                n_interior: self.n_interior,
                halo: self.halo,
                y: output,
                dot: Some((input, &tail)),
                st: Some(&b.state),
            };
            match &self.exchange {
                Some(ChunkExchange::Peer(peer, _)) => {
                    let publish = Some((&b.pq_partials, blocks));
                    peer.halo_add(gpu, &step, publish, vector)?;
                    blocks += peer.halo_blocks(a_oh);
                    published = true;
                }
                _ => {
                    step.launch(gpu)?;
                    blocks += vector_grid(a_oh.n) as usize;
                }
            }
        }
        // The next vector step rewrites input: the peer stores must be done.
        if let Some(ChunkExchange::Peer(_, stream)) = &self.exchange {
            driver("cuStreamWaitEvent", gpu.stream().join(stream))?;
        }
        Ok((blocks, published))
    }

    /// z = M r (stored when `z` is given; Jacobi) with the partials of
    /// r · z, the chunk's first step.
    fn precondition(&self, r: &CudaSlice<f64>, z: Option<&CudaSlice<f64>>) -> Result<(), GpuError> {
        let n = self.n_owned as i32;
        let b = &*self.buffers;
        self.gpu
            .launch_chunked("cg_precondition", self.n_owned, |a| {
                a.arg(&n).arg(r);
                arg_or_null(a, self.inv_diag);
                a.arg(&0i32);
                arg_or_null(a, z);
                a.arg(&NULL)
                    .arg(self.partials)
                    .arg(&b.state)
                    .arg(&b.records);
                a.arg(&0i32).arg(&NULL);
            })
    }

    /// Writes the chunk's state and clears its records.
    fn start(&mut self, host_state: &[f64]) -> Result<(), GpuError> {
        let gpu = self.gpu;
        gpu.bind_to_thread()?;
        gpu.write(host_state, &mut self.buffers.state)?;
        let nan = vec![f64::NAN; self.buffers.records.len()];
        gpu.write(&nan, &mut self.buffers.records)
    }

    /// The records and the final state.
    fn end(self) -> Result<(Vec<f64>, Vec<f64>), GpuError> {
        let records = self.gpu.download(&self.buffers.records)?;
        let st = self.gpu.download(&self.buffers.state)?;
        Ok((records, st))
    }

    /// Runs up to `count` iterations of the two-reduction form from the
    /// state `host_state`; returns the records and the final state.
    fn run(mut self, host_state: &[f64], count: usize) -> Result<(Vec<f64>, Vec<f64>), GpuError> {
        self.start(host_state)?;
        let gpu = self.gpu;
        let [x, r, z, p, q] = self.vectors;
        let (n, vm) = (self.n_owned as i32, vector_grid(self.n_owned) as usize);
        // Jacobi stores z; with no preconditioner z = r (not stored).
        let z_out = self.inv_diag.map(|_| z);
        let direction_from = z_out.unwrap_or(r);
        let partials = self.partials;
        self.precondition(r, z_out)?;
        self.finish(Finish::Precondition, vm, 0, false)?;
        for j in 0..count as i32 {
            let b = &*self.buffers;
            let beta = DirectionBeta::State(&b.state);
            launch_direction(gpu, self.n_owned, beta, direction_from, p)?;
            let (blocks, published) = self.product(j, p, q, None)?;
            self.finish(Finish::Operator, blocks, j, published)?;
            let b = &*self.buffers;
            // With peers the update's last block publishes its sums.
            let published = match &self.reduce {
                Some(ChunkReduce::Peer(peer)) => {
                    let vectors = [p, q, x, r];
                    let n = self.n_owned;
                    peer.update(gpu, &b.state, vectors, self.inv_diag, z_out, partials, n)?;
                    true
                }
                _ => {
                    gpu.launch_chunked("cg_update", self.n_owned, |a| {
                        a.arg(&n).arg(&b.state).arg(&NULL);
                        a.arg(p).arg(q).arg(x).arg(r).arg(&NULL).arg(&1i32);
                        arg_or_null(a, self.inv_diag);
                        arg_or_null(a, z_out);
                        a.arg(partials).arg(&b.records).arg(&j).arg(&NULL);
                    })?;
                    false
                }
            };
            self.finish(Finish::Update, vm, j, published)?;
        }
        self.end()
    }

    /// Runs up to `count` iterations of the single-reduction form
    /// (kernels/pcg.cu, Chronopoulos–Gear): u = M r (z; r itself with no
    /// preconditioner), w = A u, s = A p in q. The prologue computes u, w,
    /// r · u and w · u of the current r; each iteration is one vector step,
    /// one product and one reduction of Σ|r|, r · u and w · u.
    fn run_single(
        mut self,
        host_state: &[f64],
        count: usize,
    ) -> Result<(Vec<f64>, Vec<f64>), GpuError> {
        self.start(host_state)?;
        let gpu = self.gpu;
        let [x, r, z, p, s] = self.vectors;
        let w = self.w;
        let (n, vm) = (self.n_owned as i32, vector_grid(self.n_owned) as usize);
        let grid = vm as u32;
        let u_out = self.inv_diag.map(|_| z);
        let u = u_out.unwrap_or(r);
        let partials = self.partials;
        self.precondition(r, u_out)?;
        let ru = vector_sums((partials, vm, 1));
        let (blocks, published) = self.product(0, u, w, Some(ru))?;
        self.finish_single(1, blocks, 0, published)?;
        for j in 0..count as i32 {
            let b = &*self.buffers;
            gpu.launch("cg_single_update", grid, VECTOR_BLOCK, 0, |a| {
                a.arg(&n).arg(&b.state);
                arg_or_null(a, self.inv_diag);
                a.arg(p).arg(s).arg(w).arg(x).arg(r);
                arg_or_null(a, u_out);
                a.arg(partials);
            })?;
            let residual_ru = vector_sums((partials, vm, 2));
            let (blocks, published) = self.product(j, u, w, Some(residual_ru))?;
            self.finish_single(2, blocks, j, published)?;
        }
        self.end()
    }
}

/// `VectorSums` of (partials, m, count).
fn vector_sums((partials, m, count): (&CudaSlice<f64>, usize, usize)) -> VectorSums<'_> {
    VectorSums { partials, m, count }
}

impl Executor for MultiGpuBackend<'_> {
    type Vector = MultiVector;

    fn n(&self) -> usize {
        self.n_global
    }

    fn new_vector(&self) -> MultiVector {
        let parts = self
            .ranks
            .iter()
            .map(|r| {
                self.failure.guarded(GpuVector::missing(), || {
                    r.gpu.zeros(r.n_owned).map(GpuVector::from)
                })
            })
            .collect();
        MultiVector { parts }
    }

    fn initialize(&self, b: &MultiVector, x: &MultiVector, r: &mut MultiVector) -> InitialNorms {
        let failed = InitialNorms {
            residual_sum: f64::NAN,
            norm_factor: 1.0,
        };
        self.step(Step::Initialize, failed, || {
            for (k, rk) in self.ranks.iter().enumerate() {
                let (n, xv) = (rk.n32(), x.part(k)?);
                rk.gpu
                    .launch("sum_partials", rk.grid(), VECTOR_BLOCK, 0, |a| {
                        a.arg(&n).arg(xv).arg(&NULL).arg(&rk.partials);
                    })?;
            }
            let mean = self.reduce(1)?[0] / self.n_global.max(1) as f64;
            self.product(x, r)?;
            for (k, rk) in self.ranks.iter().enumerate() {
                let (n, rv, bv) = (rk.n32(), r.part(k)?, b.part(k)?);
                rk.gpu
                    .launch("halo_initial_residual", rk.grid(), VECTOR_BLOCK, 0, |a| {
                        a.arg(&n).arg(&mean).arg(rv).arg(bv).arg(&rk.row_sums);
                        a.arg(rv).arg(&rk.partials);
                    })?;
            }
            let sums = self.reduce(2)?;
            Ok(InitialNorms {
                residual_sum: sums[0],
                norm_factor: sums[1] + NORM_FACTOR_SMALL,
            })
        })
    }

    /// Each rank's a · b read back, summed over the ranks in rank order
    /// (`global_sum`).
    fn dot(&self, a: &MultiVector, b: &MultiVector) -> f64 {
        self.global_sum(Partials::Dot(a, b))
    }

    /// Each rank's Σ |v| read back, summed over the ranks in rank order.
    fn sum_abs(&self, v: &MultiVector) -> f64 {
        self.global_sum(Partials::AbsSum(v))
    }

    fn device_status(&self) -> Result<(), SolveError> {
        self.failure.status()
    }
}

impl CgBackend for MultiGpuBackend<'_> {
    fn precondition(&self, r: &MultiVector, z: &mut MultiVector) -> f64 {
        self.step(Step::Precondition, f64::NAN, || {
            for (k, rk) in self.ranks.iter().enumerate() {
                let (rv, zv) = (r.part(k)?, z.part(k)?);
                let ready = match &rk.preconditioner {
                    Some(p) => {
                        p.apply(rv, zv)?;
                        1i32
                    }
                    None => 0,
                };
                let n = rk.n32();
                let j = 0i32;
                rk.gpu.launch_chunked("cg_precondition", rk.n_owned, |a| {
                    a.arg(&n).arg(rv);
                    arg_or_null(a, rk.inv_diag.as_ref());
                    a.arg(&ready).arg(zv).arg(&NULL).arg(&rk.partials);
                    a.arg(&NULL).arg(&NULL).arg(&j).arg(&NULL);
                })?;
            }
            Ok(self.reduce(1)?[0])
        })
    }

    fn update_direction(&self, beta: f64, z: &MultiVector, p: &mut MultiVector) {
        self.step(Step::Direction, (), || {
            for (k, rk) in self.ranks.iter().enumerate() {
                let beta = DirectionBeta::Host(beta);
                launch_direction(rk.gpu, rk.n_owned, beta, z.part(k)?, p.part(k)?)?;
            }
            Ok(())
        })
    }

    fn apply_operator(&self, p: &MultiVector, q: &mut MultiVector) -> f64 {
        self.step(Step::Operator, f64::NAN, || {
            self.product(p, q)?;
            for (k, rk) in self.ranks.iter().enumerate() {
                let (n, pv, qv) = (rk.n32(), p.part(k)?, q.part(k)?);
                rk.gpu
                    .launch("dot_partials", rk.grid(), VECTOR_BLOCK, 0, |a| {
                        a.arg(&n).arg(pv).arg(qv).arg(&rk.partials);
                    })?;
            }
            Ok(self.reduce(1)?[0])
        })
    }

    fn update_solution(
        &self,
        alpha: f64,
        p: &MultiVector,
        q: &MultiVector,
        x: &mut MultiVector,
        r: &mut MultiVector,
    ) -> f64 {
        self.step(Step::Update, f64::NAN, || {
            for (k, rk) in self.ranks.iter().enumerate() {
                rk.gpu.write(&[alpha, 0.0], &mut rk.scalars.borrow_mut())?;
                let (n, with_rz, j) = (rk.n32(), 0i32, 0i32);
                let (pv, qv, xv, rv) = (p.part(k)?, q.part(k)?, x.part(k)?, r.part(k)?);
                let scalars = rk.scalars.borrow();
                rk.gpu.launch_chunked("cg_update", rk.n_owned, |a| {
                    a.arg(&n).arg(&NULL).arg(&*scalars);
                    a.arg(pv).arg(qv).arg(xv).arg(rv);
                    a.arg(&NULL).arg(&with_rz).arg(&NULL).arg(&NULL);
                    a.arg(&rk.partials).arg(&NULL).arg(&j).arg(&NULL);
                })?;
            }
            Ok(self.reduce(1)?[0])
        })
    }

    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, MultiVector>,
    ) -> Vec<IterationRecord> {
        if !self.device_loop() {
            return iterate_steps(self, rule, state, count, v);
        }
        let count = count.min(self.check_interval);
        if let Some(peers) = &self.peers {
            return self.rank_device_chunk(peers, rule, state, count, &v);
        }
        self.failure
            .guarded(Vec::new(), || self.device_chunk(rule, state, count, &v))
    }

    /// Every rank preconditions alike (block Jacobi of one kind).
    fn preconditioner_name(&self) -> Option<&'static str> {
        let rank = self.ranks.first()?;
        loop_preconditioner_name(rank.preconditioner.as_deref(), rank.inv_diag.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::grid_laplacian;

    #[test]
    fn nvlink_multicast_is_off_unless_the_environment_sets_it() {
        assert_eq!(
            nccl_environment_defaults(|_| None),
            vec![("NCCL_NVLS_ENABLE", "0")]
        );
        let given = |name: &str| (name == "NCCL_NVLS_ENABLE").then(|| "1".into());
        assert!(nccl_environment_defaults(given).is_empty());
    }

    /// Packing by the plans, routing through `receive` and A_oo x + A_oh
    /// x_halo per rank give the global product (slabs, METIS, a scattered
    /// layout with many neighbours), as the host-staged transfer does.
    #[test]
    fn plans_route_every_halo_value() {
        let a = grid_laplacian(11, 9, 8);
        let n = a.n_rows();
        let x: Vec<f64> = (0..n).map(|i| ((i * 7919) % 113) as f64 - 50.0).collect();
        let mut expected = vec![0.0; n];
        a.spmv(&x, &mut expected);
        let layouts = [
            box_slabs(11, 9, 8, 3).unwrap(),
            box_slabs(11, 9, 8, 8).unwrap(),
            Decomposition::metis(&a, 4).unwrap(),
            Decomposition::from_owners((0..n).map(|i| (i % 3) as u32).collect(), 3).unwrap(),
        ];
        for d in layouts {
            let locals: Vec<LocalMatrix> =
                (0..d.n_ranks()).map(|r| d.local(&a, r).unwrap()).collect();
            let plans: Vec<ExchangePlan> = locals.iter().map(ExchangePlan::of).collect();
            let owned: Vec<Vec<f64>> = locals.iter().map(|l| l.scatter(&x)).collect();
            let sent: Vec<Vec<f64>> = plans
                .iter()
                .zip(&owned)
                .map(|(p, xo)| p.idx.iter().map(|&i| xo[i as usize]).collect())
                .collect();
            let mut y = vec![f64::NAN; n];
            for (me, l) in locals.iter().enumerate() {
                let mut halo = vec![f64::NAN; l.n_halo()];
                ExchangePlan::receive(&plans, &sent, me, &mut halo).unwrap();
                assert!(
                    halo.iter().all(|v| v.is_finite()),
                    "halo slot left unfilled"
                );
                let (oo, oh) = (l.owned_block(), l.halo_block());
                let mut yl = vec![0.0; l.n_owned];
                oo.spmv(&owned[me], &mut yl);
                let mut yb = vec![0.0; oh.n_rows()];
                oh.spmv(&halo, &mut yb);
                for (i, v) in yb.iter().enumerate() {
                    yl[l.n_interior + i] += v;
                }
                l.gather_into(&yl, &mut y);
            }
            for (u, v) in y.iter().zip(&expected) {
                assert!((u - v).abs() <= 1e-13 * v.abs().max(1.0), "{u} vs {v}");
            }
        }
    }

    /// The packed exchange of a distributed run's GPU rank (only the packed
    /// sends on the host) fills the halo as the exchange of the whole owned
    /// vector does (threads transport, METIS in 4 and slabs in 3).
    #[test]
    fn packed_exchange_fills_the_halo_of_the_owned_exchange() {
        use crate::parallel::threads::run_threads;
        let a = grid_laplacian(9, 8, 7);
        let n = a.n_rows();
        let x: Vec<f64> = (0..n).map(|i| (i * 31 % 17) as f64 - 8.0).collect();
        for d in [
            Decomposition::metis(&a, 4).unwrap(),
            box_slabs(9, 8, 7, 3).unwrap(),
        ] {
            let results = run_threads(d.n_ranks(), |comm| {
                let local = d.local(&a, comm.rank()).unwrap();
                let owned = local.scatter(&x);
                let mut expected = vec![f64::NAN; local.n_halo()];
                comm.exchange(
                    HaloExchange::new(&local.neighbours, &owned, &mut expected),
                    &mut || {},
                );
                let plan = ExchangePlan::of(&local);
                let sent: Vec<f64> = plan.idx.iter().map(|&i| owned[i as usize]).collect();
                let mut halo = vec![f64::NAN; local.n_halo()];
                let packed = packed_neighbours(&local, &plan);
                comm.exchange(HaloExchange::new(&packed, &sent, &mut halo), &mut || {});
                (expected, halo)
            });
            for (expected, halo) in results {
                assert!(!halo.is_empty());
                assert_eq!(halo, expected);
            }
        }
    }

    /// A_oo and A_oh together are the local system's owned rows.
    #[test]
    fn split_keeps_every_entry() {
        let a = grid_laplacian(9, 7, 5);
        let n = a.n_rows();
        let slabs = (0..n).map(|i| (i * 3 / n) as u32).collect();
        let d = Decomposition::from_owners(slabs, 3).unwrap();
        for rank in 0..3 {
            let l = d.local(&a, rank).unwrap();
            let (oo, oh) = (l.owned_block(), l.halo_block());
            assert_eq!(oo.n_rows(), l.n_owned);
            assert_eq!(oh.n_rows(), l.n_owned - l.n_interior);
            assert_eq!(oo.nnz() + oh.nnz(), l.matrix.nnz());
            assert!(oh.nnz() > 0);
            let x: Vec<f64> = (0..l.n_local()).map(|i| (i % 13) as f64 - 6.0).collect();
            let mut full = vec![0.0; l.n_owned];
            l.matrix.spmv(&x, &mut full);
            let mut y = vec![0.0; l.n_owned];
            oo.spmv(&x[..l.n_owned], &mut y);
            let mut yh = vec![0.0; oh.n_rows()];
            oh.spmv(&x[l.n_owned..], &mut yh);
            for (i, v) in yh.iter().enumerate() {
                y[l.n_interior + i] += v;
            }
            for (u, v) in y.iter().zip(&full) {
                assert!((u - v).abs() <= 1e-13 * v.abs().max(1.0), "{u} vs {v}");
            }
        }
    }
}
