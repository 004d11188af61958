//! Aggregation AMG on the device (`kernels/amg.cu`): the CPU reference's
//! algorithm (`solve::amg`, `AMG_SPEC.md`) with its set-up run on the GPU from
//! the PCG's mod-SELL matrix, giving the same aggregates and the same coarse
//! matrices (bit for bit), and its cycle a [`DevicePreconditioner`].
//!
//! Set-up (host reads only sizes, once per scan, and at the end one status
//! array: bad diagonals, a failed coarsest pivot):
//!
//! - the fine mod-SELL matrix to CSR with ascending columns (as
//!   `ModSell::to_csr`, which the CPU reference gets), keeping each entry's
//!   mod-SELL slot for value-only updates;
//! - per pass, pairwise matching in Jacobi-style rounds (candidate and
//!   handshake kernels; a round after one that matched nothing is a no-op on
//!   the device, so no round count is read back), leaders numbered by a
//!   deterministic multi-block exclusive scan, and the Galerkin product: a
//!   symbolic phase (the coarse columns a thread per coarse row, and for each
//!   fine entry the slot it adds to) and a numeric phase, a warp per coarse
//!   row, that sums each
//!   coarse entry from zero in the CPU's encounter order — the same kernel as
//!   the value-only re-set-up ([`DeviceAmg::update_values`]);
//! - the level's aggregates (passes composed) and their members, ascending,
//!   for the restriction R = Pᵀ;
//! - one scratch `Workspace` for every pass (sized for the fine level),
//!   arrays written in full allocated without a memset, and the memory pool
//!   keeping freed memory (`Gpu::on_device`), so a pass costs its kernels
//!   and two size read-backs, not ~20 allocations;
//! - smoother scales per level (weighted or L1 Jacobi) and the coarsest
//!   matrix's dense operator (`CoarsestSolver::inverse`'s A_L⁻¹ or A_L⁺):
//!   the matrix formed (the singularity test on the device), factored by a
//!   blocked Cholesky (panels of 32 columns, many blocks per launch) and
//!   inverted as Wᵀ W, W = L⁻¹ (blocked too), on the device.
//!
//! The value-only re-set-up ([`DeviceAmg::update_values`]) is device passes
//! only, into the set-up's arrays (no allocation): fine CSR values, Galerkin
//! values, smoother scales, the coarsest operator, the f32 copies; it reads
//! the status array back once.
//!
//! The cycle (`apply`) only launches kernels on the Gpu's stream, with every
//! buffer allocated at set-up, so PCG may capture it into a CUDA graph. The
//! fine level runs the mod-SELL kernels (`smooth_jacobi`, the residual through
//! `modsell_row`), the coarse levels CSR kernels (residual and restriction
//! fused), the coarsest one dense matrix-vector kernel; the K-cycle's
//! flexible-CG steps keep their dot products and step lengths on the device.
//!
//! Precision ([`Arith`]): f64, or (`precision mixed`) f32 copies of every
//! level's values, the smoother scales and the fine mod-SELL matrix, with f32
//! cycle vectors; PCG's r is read in f64 and z written in f64 (`solve::amg::
//! cycle` is the reference of both). `fused` (one sweep each side) runs each
//! visit as a residual from s∘b (+ restriction) and one post-sweep from
//! s∘b + θ P x_c: no pre-sweep or prolongation launches, and the iterates
//! between them are never stored. [`DeviceAmg::cycle_bytes`] counts what a
//! cycle moves per level (`bench --amg`).

use crate::gpu::kernel_args::shared_args;
use crate::gpu::KernelArgs;
use std::rc::Rc;

use crate::gpu::kernel_args::KernelElement;
use cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};

use super::matrix::{f32_copy, f32_copy_into, DeviceModSell};
use super::pcg::{DeviceSolve, GpuSolver};
pub(super) use super::scan::{read_at, unzeroed, Scan};
use super::smooth::{DevicePreconditioner, LoopDot};
use super::{arg_or_null, driver, vector_grid, DeferredRead, Gpu, GpuError, NULL, VECTOR_BLOCK};
use crate::solve::amg::{AmgSettings, AmgSmootherKind, CycleKind, Precision, MAX_DENSE_ROWS};
use crate::solve::{Preconditioner, SolveError, SolverPerformance};
use crate::sparse::Csr;

/// kernels/amg.cu SCALE_JACOBI, SCALE_L1.
const SCALE_JACOBI: i32 = 0;
const SCALE_L1: i32 = 1;
/// Grid of a warp-per-row kernel over `rows` rows (`amg_dense_apply`, the
/// Galerkin values) in blocks of [`VECTOR_BLOCK`] threads.
fn warp_grid(rows: usize) -> u32 {
    rows.div_ceil(VECTOR_BLOCK as usize / 32) as u32
}
/// kernels/amg.cu K_*: the K-cycle's scalars on the device.
const K_RHO1: i32 = 0;
const K_ALPHA1: i32 = 1;
const K_GAMMA: i32 = 2;
const K_BETA: i32 = 3;
const K_ALPHA2: i32 = 4;
const K_SLOTS: usize = 5;
/// Threads of `amg_dot_finish` (reduce_fixed: a multiple of 32, at most 1024).
const DOT_FINISH_BLOCK: u32 = 1024;
/// Threads of the blocked dense Cholesky's kernels (a multiple of 32).
const DENSE_BLOCK: u32 = 256;
/// kernels/amg.cu DENSE_PANEL: columns per panel of the blocked Cholesky.
const DENSE_PANEL: usize = 32;
/// A_L is singular when Σ_i |Σ_j a_ij| ≤ SINGULAR · Σ_i a_ii (`solve::amg::coarsest`).
const SINGULAR: f64 = 1e-10;

/// A level shrinking by less than this factor is not kept: the CPU's rule
/// (`solve::amg` MIN_COARSENING, private there; see AMG_SPEC.md Changes).
const MIN_COARSENING: f64 = 1.2;

/// A square CSR matrix on the device: u64 row pointers, ascending u32
/// columns, the diagonal stored.
pub struct DeviceCsr {
    pub n: usize,
    pub nnz: usize,
    pub row_ptr: CudaSlice<u64>,
    pub cols: CudaSlice<u32>,
    pub vals: CudaSlice<f64>,
}

impl DeviceCsr {
    /// Pushes the matrix as the CSR kernels take it: row pointers, columns,
    /// values.
    pub(super) fn push_args<'a>(&'a self, a: &mut KernelArgs<'a>) {
        a.arg(&self.row_ptr).arg(&self.cols).arg(&self.vals);
    }

    /// `a` copied to the device.
    pub fn upload(gpu: &Gpu, a: &Csr) -> Result<Self, GpuError> {
        let row_ptr: Vec<u64> = a.row_ptr().iter().map(|&p| p as u64).collect();
        Ok(Self {
            n: a.n_rows(),
            nnz: a.nnz(),
            row_ptr: gpu.upload(&row_ptr)?,
            cols: gpu.upload(a.cols())?,
            vals: gpu.upload(a.values())?,
        })
    }

    /// The matrix read back.
    pub fn download(&self, gpu: &Gpu) -> Result<Csr, GpuError> {
        let row_ptr: Vec<usize> = gpu.download(&self.row_ptr)?[..=self.n]
            .iter()
            .map(|&p| p as usize)
            .collect();
        let cols = gpu.download_prefix(&self.cols, self.nnz)?;
        let vals = gpu.download_prefix(&self.vals, self.nnz)?;
        Csr::new(self.n, row_ptr, cols, vals).map_err(GpuError::Invalid)
    }

    fn n32(&self) -> i32 {
        self.n as i32
    }
}

/// Scratch of the set-up's passes, sized for the fine level (n rows, nnz
/// entries: a pass's product has at most as many rows and entries as its
/// matrix) and reused by every pass of every level instead of allocated per
/// pass. Only the atomic counters need zeroing (their first rows, per use);
/// the kernels write every other element they later read.
struct Workspace {
    partner: CudaSlice<i32>,
    cand: CudaSlice<i32>,
    /// Rows matched per round (atomic: zeroed per pass by `amg_match_start`).
    matched: CudaSlice<i32>,
    strongest: CudaSlice<f64>,
    host: CudaSlice<i32>,
    leader: CudaSlice<u32>,
    leader_offsets: CudaSlice<u64>,
    bound: CudaSlice<u32>,
    bound_ptr: CudaSlice<u64>,
    /// Each coarse row's distinct columns (room: the members' entries).
    scratch: CudaSlice<u32>,
    count: CudaSlice<u32>,
    /// Aggregate sizes, then placement cursors: [0, nc) and [nc, 2 nc)
    /// (atomic: zeroed per use).
    counters: CudaSlice<u32>,
}

impl Workspace {
    fn new(gpu: &Gpu, n: usize, nnz: usize, rounds: usize) -> Result<Self, GpuError> {
        Ok(Self {
            partner: unzeroed(gpu, n)?,
            cand: unzeroed(gpu, n)?,
            matched: unzeroed(gpu, rounds.max(1))?,
            strongest: unzeroed(gpu, n)?,
            host: unzeroed(gpu, n)?,
            leader: unzeroed(gpu, n)?,
            leader_offsets: unzeroed(gpu, n + 1)?,
            bound: unzeroed(gpu, n)?,
            bound_ptr: unzeroed(gpu, n + 1)?,
            scratch: unzeroed(gpu, nnz)?,
            count: unzeroed(gpu, n)?,
            counters: unzeroed(gpu, 2 * n)?,
        })
    }

    /// Checks that a pass over `n` rows and `nnz` entries fits.
    fn check(&self, n: usize, nnz: usize) -> Result<(), GpuError> {
        if n > self.partner.len() || nnz > self.scratch.len() {
            return Err(GpuError::Invalid(format!(
                "AMG set-up workspace of {} rows and {} entries is too small for a pass over \
                 {n} rows and {nnz} entries",
                self.partner.len(),
                self.scratch.len()
            )));
        }
        Ok(())
    }
}

/// Zeroes `buffer[0..len)` (set-up counters).
fn zero_prefix<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    buffer: &mut CudaSlice<T>,
    len: usize,
) -> Result<(), GpuError> {
    let len = len.min(buffer.len());
    driver(
        "cuMemsetD8",
        gpu.stream().memset_zeros(&mut buffer.slice_mut(0..len)),
    )
}

/// The fine mod-SELL matrix as CSR (`ModSell::to_csr` on the device) and
/// each CSR entry's mod-SELL slot (-(row + 1): the diagonal of row), for value-only updates.
pub(super) fn fine_csr(
    gpu: &Gpu,
    m: &DeviceModSell,
    scan: &Scan,
) -> Result<(DeviceCsr, CudaSlice<i64>), GpuError> {
    let (n, dims) = (m.n, m.dims());
    let (row_ptr, nnz) = modsell_csr_row_ptr(gpu, m, scan, "AMG")?;
    let cols = unzeroed::<u32>(gpu, nnz)?;
    let source = unzeroed::<i64>(gpu, nnz)?;
    m.launch_pattern(gpu, "amg_modsell_to_csr", &dims, |a| {
        a.arg(&row_ptr).arg(&cols).arg(&source);
    })?;
    let csr = DeviceCsr {
        n,
        nnz,
        row_ptr,
        cols,
        vals: unzeroed(gpu, nnz)?,
    };
    fine_values(gpu, &csr, &source, m)?;
    Ok((csr, source))
}

/// The row pointers of the CSR copy of `m` (the diagonal and the stored
/// off-diagonals of each row: `amg_modsell_row_lengths`, then their scan)
/// and its entry count, read back (the only read-back); `what` names the
/// method in the error for 2^32 entries or more.
pub(super) fn modsell_csr_row_ptr(
    gpu: &Gpu,
    m: &DeviceModSell,
    scan: &Scan,
    what: &str,
) -> Result<(CudaSlice<u64>, usize), GpuError> {
    let (n, dims) = (m.n, m.dims());
    let lengths = unzeroed::<u32>(gpu, n)?;
    m.launch_pattern(gpu, "amg_modsell_row_lengths", &dims, |a| {
        a.arg(&lengths);
    })?;
    let row_ptr = unzeroed::<u64>(gpu, n + 1)?;
    let nnz = scan.run(gpu, &lengths, n, &row_ptr)? as usize;
    if nnz >= u32::MAX as usize {
        return Err(GpuError::Invalid(format!(
            "{what} on the GPU takes matrices of fewer than 2^32 entries, this one has {nnz}"
        )));
    }
    Ok((row_ptr, nnz))
}

/// The fine CSR's values from the mod-SELL matrix's current values (a thread
/// per entry through the slot map `source`).
fn fine_values(
    gpu: &Gpu,
    csr: &DeviceCsr,
    source: &CudaSlice<i64>,
    m: &DeviceModSell,
) -> Result<(), GpuError> {
    csr_values_from_modsell(gpu, csr.nnz, source, m, &csr.vals)
}

/// `vals[k]` = the value of `m` at entry k's mod-SELL slot `source[k]`
/// (−(row + 1): the diagonal of row) for the `nnz` entries, a thread per
/// entry: the values of a CSR copy of `m` made by [`fine_csr`], after `m`'s
/// values changed.
pub(super) fn csr_values_from_modsell(
    gpu: &Gpu,
    nnz: usize,
    source: &CudaSlice<i64>,
    m: &DeviceModSell,
    vals: &CudaSlice<f64>,
) -> Result<(), GpuError> {
    let nnz64 = nnz as u64;
    gpu.launch_vector("amg_csr_values_from_modsell", nnz, |a| {
        a.arg(&nnz64)
            .arg(source)
            .arg(&m.values)
            .arg(&m.diag)
            .arg(vals);
    })
}

/// One pairwise pass's product, kept for value-only updates: for every
/// entry of the product, the entries of the pass's fine matrix that add to
/// it, in the order the CPU adds them (`amg_galerkin_sources`).
struct Pass {
    /// Where each product entry's sources end (they begin where the previous
    /// entry's end, the first at 0).
    source_end: CudaSlice<u32>,
    /// Fine entry indices, grouped by product entry.
    sources: CudaSlice<u32>,
    /// The product, except for a level's last pass (whose product is the
    /// next level's matrix).
    product: Option<DeviceCsr>,
}

impl Pass {
    /// Pairwise matching of `a` in at most `rounds` rounds and the Galerkin
    /// product; returns the pass, its product and its aggregate map.
    fn new(
        gpu: &Gpu,
        a: &DeviceCsr,
        rounds: usize,
        scan: &Scan,
        work: &mut Workspace,
    ) -> Result<(Self, DeviceCsr, CudaSlice<u32>), GpuError> {
        let (n, n32) = (a.n, a.n32());
        work.check(n, a.nnz)?;
        let w = &*work;
        let rounds = rounds.min(w.matched.len());
        let rounds32 = rounds as i32;
        // s_i, every row unmatched, the round counters zeroed.
        gpu.launch_vector("amg_match_start", n, |args| {
            args.arg(&n32);
            a.push_args(args);
            args.arg(&w.strongest)
                .arg(&w.partner)
                .arg(&rounds32)
                .arg(&w.matched);
        })?;
        for round in 0..rounds {
            let this = w.matched.slice(round..round + 1);
            let before = (round > 0).then(|| w.matched.slice(round - 1..round));
            gpu.launch_vector("amg_match_candidates", n, |args| {
                args.arg(&n32);
                a.push_args(args);
                args.arg(&w.strongest).arg(&w.partner).arg(&w.cand);
                arg_or_null(args, before.as_ref());
            })?;
            gpu.launch_vector("amg_match_handshake", n, |args| {
                args.arg(&n32).arg(&w.partner).arg(&w.cand).arg(&this);
                arg_or_null(args, before.as_ref());
            })?;
        }
        // Rows left unmatched join a neighbouring pair (AMG_SPEC 17:45); the
        // leader flags in the same launch.
        gpu.launch_vector("amg_join_singletons", n, |args| {
            args.arg(&n32);
            a.push_args(args);
            args.arg(&w.partner).arg(&w.host).arg(&w.leader);
        })?;
        let nc = scan.run(gpu, &w.leader, n, &w.leader_offsets)? as usize;
        let nc32 = nc as i32;
        // Every array below is written in full by its kernels.
        let aggregate = unzeroed::<u32>(gpu, n)?;
        gpu.launch_vector("amg_pass_aggregates", n, |args| {
            args.arg(&n32)
                .arg(&w.partner)
                .arg(&w.host)
                .arg(&w.leader_offsets)
                .arg(&aggregate);
        })?;
        let (member_ptr, members) = aggregate_members(gpu, &aggregate, n, nc, scan, work)?;
        let w = &*work;
        // Symbolic product: room per coarse row (the members' entries: nnz in
        // all), its distinct columns sorted, their count, then the pattern.
        gpu.launch_vector("amg_galerkin_bounds", nc, |args| {
            args.arg(&nc32)
                .arg(&member_ptr)
                .arg(&members)
                .arg(&a.row_ptr)
                .arg(&w.bound);
        })?;
        scan.launch(gpu, &w.bound, nc, &w.bound_ptr)?;
        // The columns' and the fill's kernels begin alike: each coarse
        // row's members, the fine pattern with its columns' aggregates, and
        // the room and sorted distinct columns of each coarse row.
        let members_and_columns = shared_args(|args| {
            args.arg(&nc32)
                .arg(&member_ptr)
                .arg(&members)
                .arg(&a.row_ptr)
                .arg(&a.cols)
                .arg(&aggregate)
                .arg(&w.bound_ptr)
                .arg(&w.scratch);
        });
        gpu.launch_vector("amg_galerkin_columns", nc, |args| {
            members_and_columns(args);
            args.arg(&w.count);
        })?;
        let row_ptr = unzeroed::<u64>(gpu, nc + 1)?;
        let nnz = scan.run(gpu, &w.count, nc, &row_ptr)? as usize;
        let cols = unzeroed::<u32>(gpu, nnz)?;
        // The value kernel indexes fine and coarse entries in 32 bits.
        if u32::try_from(a.nnz).is_err() || u32::try_from(nnz).is_err() {
            return Err(GpuError::Invalid(format!(
                "AMG: a level of {} stored entries with a coarse product of {nnz} is past the \
                 {} entries a level can hold; split the case over more GPUs",
                a.nnz,
                u32::MAX
            )));
        }
        // The slot of every fine entry, needed here only: the sources are
        // what the value updates read.
        let dest = unzeroed::<u64>(gpu, a.nnz)?;
        gpu.launch(
            "amg_galerkin_fill",
            warp_grid(nc),
            VECTOR_BLOCK,
            0,
            |args| {
                members_and_columns(args);
                args.arg(&row_ptr).arg(&cols).arg(&dest);
            },
        )?;
        let source_end = unzeroed::<u32>(gpu, nnz)?;
        let sources = unzeroed::<u32>(gpu, a.nnz)?;
        gpu.launch_vector("amg_galerkin_sources", nc, |args| {
            args.arg(&nc32)
                .arg(&member_ptr)
                .arg(&members)
                .arg(&a.row_ptr)
                .arg(&w.bound_ptr)
                .arg(&dest)
                .arg(&row_ptr)
                .arg(&source_end)
                .arg(&sources);
        })?;
        let product = DeviceCsr {
            n: nc,
            nnz,
            row_ptr,
            cols,
            vals: unzeroed(gpu, nnz)?,
        };
        let pass = Self {
            source_end,
            sources,
            product: None,
        };
        pass.values(gpu, a, &product, None)?;
        Ok((pass, product, aggregate))
    }

    /// The product's values from `a`'s (numeric phase), and their f32
    /// rounding into `product_f32` where given (a value update of a mixed
    /// cycle's coarse level: the cast the f32 copy would make, in the same
    /// launch).
    fn values(
        &self,
        gpu: &Gpu,
        a: &DeviceCsr,
        product: &DeviceCsr,
        product_f32: Option<&CudaSlice<f32>>,
    ) -> Result<(), GpuError> {
        let nnz32 = product.nnz as u32;
        gpu.launch_vector("amg_galerkin_values", product.nnz, |args| {
            args.arg(&nnz32)
                .arg(&self.source_end)
                .arg(&self.sources)
                .arg(&a.vals)
                .arg(&product.vals);
            arg_or_null(args, product_f32);
        })
    }
}

/// Level l's link to level l + 1.
struct Transfer {
    passes: Vec<Pass>,
    /// Row → coarse row (the passes composed).
    aggregate: CudaSlice<u32>,
    /// Rows of each coarse row, ascending: members[member_ptr[I] .. member_ptr[I+1]].
    member_ptr: CudaSlice<u64>,
    members: CudaSlice<u32>,
}

/// The members of each aggregate of `aggregate` (n rows, nc aggregates):
/// counted, scanned, placed, then sorted.
fn aggregate_members(
    gpu: &Gpu,
    aggregate: &CudaSlice<u32>,
    n: usize,
    nc: usize,
    scan: &Scan,
    work: &mut Workspace,
) -> Result<(CudaSlice<u64>, CudaSlice<u32>), GpuError> {
    let (n32, nc32) = (n as i32, nc as i32);
    work.check(n, 0)?;
    // Sizes at [0, nc), cursors at [nc, 2 nc), zeroed in one memset.
    zero_prefix(gpu, &mut work.counters, 2 * nc)?;
    let size = &work.counters;
    let cursor = work.counters.slice(nc..2 * nc);
    gpu.launch_vector("amg_count_members", n, |a| {
        a.arg(&n32).arg(aggregate).arg(size);
    })?;
    let member_ptr = unzeroed::<u64>(gpu, nc + 1)?;
    scan.launch(gpu, size, nc, &member_ptr)?;
    let members = unzeroed::<u32>(gpu, n)?;
    gpu.launch_vector("amg_place_members", n, |a| {
        a.arg(&n32)
            .arg(aggregate)
            .arg(&member_ptr)
            .arg(&cursor)
            .arg(&members);
    })?;
    gpu.launch_vector("amg_sort_members", nc, |a| {
        a.arg(&nc32).arg(&member_ptr).arg(&members);
    })?;
    Ok((member_ptr, members))
}

/// One level's matrix (f64, as set up) and smoother scales.
struct Level {
    a: DeviceCsr,
    /// The smoother's row scales, f64 (not on the coarsest level).
    scale: CudaSlice<f64>,
    /// To the next level (none on the coarsest).
    transfer: Option<Transfer>,
}

/// One coarse level's K-cycle step (`solve::amg::cycle` k_step): the vectors
/// c = B b, v = A c, r, d = B r, w = A d in the cycle's precision, the
/// scalars on the device in f64 (kernels/amg.cu K_*), and the dot products'
/// per-block partials.
struct Krylov<T> {
    c: CudaSlice<T>,
    v: CudaSlice<T>,
    r: CudaSlice<T>,
    d: CudaSlice<T>,
    w: CudaSlice<T>,
    scalars: CudaSlice<f64>,
    partials: CudaSlice<f64>,
}

impl<T: Arith> Krylov<T> {
    fn new(gpu: &Gpu, n: usize) -> Result<Self, GpuError> {
        Ok(Self {
            c: gpu.zeros(n)?,
            v: gpu.zeros(n)?,
            r: gpu.zeros(n)?,
            d: gpu.zeros(n)?,
            w: gpu.zeros(n)?,
            scalars: gpu.zeros(K_SLOTS)?,
            partials: gpu.zeros(vector_grid(n) as usize)?,
        })
    }
}

/// The kernels of the cycle in one precision (kernels/amg.cu).
struct CycleKernels {
    /// The fine level's Jacobi sweep and residual (mod-SELL).
    fine_jacobi: &'static str,
    fine_residual: &'static str,
    jacobi_csr: &'static str,
    restrict: &'static str,
    residual_restrict_csr: &'static str,
    prolong: &'static str,
    copy: &'static str,
    dense_apply: &'static str,
    spmv_csr: &'static str,
    dot_partials: &'static str,
    k_residual: &'static str,
    k_combine: &'static str,
    /// The fused cycle's fine residual from s∘b (`AmgSettings::fused`).
    fine_residual_zero: &'static str,
    /// Sweeps from an iterate computed per entry ([`SweepFrom`]).
    fine_jacobi_fused: &'static str,
    jacobi_fused_csr: &'static str,
}

/// [`CycleKernels`] of one precision: the kernels are named alike but for
/// `suffix` (`""` for f64, `"_f32"`); the f64 cycle's fine Jacobi sweep is
/// the smoothers' own kernel, so `fine_jacobi` is named apart.
macro_rules! cycle_kernels {
    (fine_jacobi: $fine_jacobi:literal, suffix: $suffix:literal) => {
        CycleKernels {
            fine_jacobi: $fine_jacobi,
            fine_residual: concat!("amg_residual_modsell", $suffix),
            jacobi_csr: concat!("amg_jacobi_csr", $suffix),
            restrict: concat!("amg_restrict", $suffix),
            residual_restrict_csr: concat!("amg_residual_restrict_csr", $suffix),
            prolong: concat!("amg_prolong", $suffix),
            copy: concat!("amg_copy", $suffix),
            dense_apply: concat!("amg_dense_apply", $suffix),
            spmv_csr: concat!("amg_spmv_csr", $suffix),
            dot_partials: concat!("amg_dot_partials", $suffix),
            k_residual: concat!("amg_k_residual", $suffix),
            k_combine: concat!("amg_k_combine", $suffix),
            fine_residual_zero: concat!("amg_fine_residual_zero", $suffix),
            fine_jacobi_fused: concat!("amg_fine_jacobi_fused", $suffix),
            jacobi_fused_csr: concat!("amg_jacobi_fused_csr", $suffix),
        }
    };
}

/// The arithmetic of the device cycle: f64 (`precision double`) or f32
/// (`mixed`: f32 copies of every level's values and smoother scales, f32
/// vectors; the set-up, the coarsest operator and the K-cycle's scalars f64).
trait Arith: DeviceRepr + ValidAsZeroBits + KernelElement + Copy + Unpin + 'static {
    const KERNELS: CycleKernels;
    /// Whether the fine sweep widens its last result into z (f32) rather
    /// than writing z as its iterate (f64).
    const WIDENS: bool;
    /// `f64s` rounded to this precision into `own` (f32; allocated the first
    /// time, rewritten in place by value updates), nothing for f64 (the
    /// cycle reads `f64s` itself).
    fn round_into(
        gpu: &Gpu,
        f64s: &CudaSlice<f64>,
        own: &mut Option<CudaSlice<Self>>,
    ) -> Result<(), GpuError>;
    /// The buffer in this precision: `own` (f32) or `f64s` (f64).
    fn pick<'a>(own: Option<&'a CudaSlice<Self>>, f64s: &'a CudaSlice<f64>) -> &'a CudaSlice<Self>;
}

impl Arith for f64 {
    const KERNELS: CycleKernels = cycle_kernels!(fine_jacobi: "smooth_jacobi", suffix: "");
    const WIDENS: bool = false;
    fn round_into(
        _: &Gpu,
        _: &CudaSlice<f64>,
        _: &mut Option<CudaSlice<Self>>,
    ) -> Result<(), GpuError> {
        Ok(())
    }
    fn pick<'a>(_: Option<&'a CudaSlice<Self>>, f64s: &'a CudaSlice<f64>) -> &'a CudaSlice<Self> {
        f64s
    }
}

impl Arith for f32 {
    const KERNELS: CycleKernels =
        cycle_kernels!(fine_jacobi: "amg_jacobi_modsell_f32", suffix: "_f32");
    const WIDENS: bool = true;
    fn round_into(
        gpu: &Gpu,
        f64s: &CudaSlice<f64>,
        own: &mut Option<CudaSlice<Self>>,
    ) -> Result<(), GpuError> {
        match own {
            Some(to) if to.len() == f64s.len() => f32_copy_into(gpu, f64s, to),
            _ => {
                *own = Some(f32_copy(gpu, f64s)?);
                Ok(())
            }
        }
    }
    fn pick<'a>(own: Option<&'a CudaSlice<Self>>, _: &'a CudaSlice<f64>) -> &'a CudaSlice<Self> {
        own.expect("the f32 copy of a mixed-precision cycle")
    }
}

/// One level's cycle data in precision T.
struct LevelVectors<T> {
    /// The level matrix's values (coarse levels) and smoother scales rounded
    /// to T (f32).
    values: Option<CudaSlice<T>>,
    scale: Option<CudaSlice<T>>,
    /// Right-hand side and solution of this level's cycle (coarse levels;
    /// the fine level's are `apply`'s r and z, and the f32 cycle's x is
    /// [`Cycle::fine_x`]).
    b: CudaSlice<T>,
    x: CudaSlice<T>,
    /// The smoother's second buffer (double-buffered sweeps).
    spare: CudaSlice<T>,
    /// The K-cycle's vectors and scalars (K-cycle, coarse levels but the
    /// coarsest).
    krylov: Option<Krylov<T>>,
}

/// The cycle's data in precision T.
struct Cycle<T> {
    levels: Vec<LevelVectors<T>>,
    /// The fine mod-SELL values and diagonal rounded to T (f32).
    fine_values: Option<CudaSlice<T>>,
    fine_diag: Option<CudaSlice<T>>,
    /// The fine level's iterate (f32; f64 iterates in z).
    fine_x: Option<CudaSlice<T>>,
    /// The fine level's residual.
    residual: CudaSlice<T>,
}

impl<T: Arith> Cycle<T> {
    fn new(
        gpu: &Gpu,
        levels: &[Level],
        fine: &DeviceModSell,
        kind: CycleKind,
    ) -> Result<Self, GpuError> {
        let last = levels.len() - 1;
        let vectors = levels
            .iter()
            .enumerate()
            .map(|(l, level)| {
                let (n_l, coarse) = (level.a.n, l > 0);
                Ok(LevelVectors {
                    values: None,
                    scale: None,
                    b: gpu.zeros(if coarse { n_l } else { 0 })?,
                    x: gpu.zeros(if coarse { n_l } else { 0 })?,
                    spare: gpu.zeros(n_l)?,
                    // K-cycle steps on the coarse levels above the coarsest.
                    krylov: (kind == CycleKind::K && coarse && l < last)
                        .then(|| Krylov::new(gpu, n_l))
                        .transpose()?,
                })
            })
            .collect::<Result<_, GpuError>>()?;
        let mut cycle = Self {
            levels: vectors,
            fine_values: None,
            fine_diag: None,
            fine_x: match T::WIDENS {
                true => Some(gpu.zeros(fine.n)?),
                false => None,
            },
            residual: gpu.zeros(fine.n)?,
        };
        cycle.round_values(gpu, levels, fine)?;
        Ok(cycle)
    }

    /// The level values, smoother scales and fine matrix rounded to T (the
    /// set-up, allocating the f32 copies; device passes only; nothing for
    /// f64). Value updates round the levels' values and scales in the
    /// launches that write them (`Pass::values`, `amg_smoother_scale`) and
    /// only the fine matrix here ([`Self::round_fine`]).
    fn round_values(
        &mut self,
        gpu: &Gpu,
        levels: &[Level],
        fine: &DeviceModSell,
    ) -> Result<(), GpuError> {
        for (l, (v, level)) in self.levels.iter_mut().zip(levels).enumerate() {
            // The fine level's cycle reads the mod-SELL matrix, not its CSR.
            if l > 0 {
                T::round_into(gpu, &level.a.vals, &mut v.values)?;
            }
            T::round_into(gpu, &level.scale, &mut v.scale)?;
        }
        self.round_fine(gpu, fine)
    }

    /// The fine mod-SELL values and diagonal rounded to T (in place after the
    /// set-up; nothing for f64): the assembly writes them, not the AMG.
    fn round_fine(&mut self, gpu: &Gpu, fine: &DeviceModSell) -> Result<(), GpuError> {
        T::round_into(gpu, &fine.values, &mut self.fine_values)?;
        T::round_into(gpu, &fine.diag, &mut self.fine_diag)
    }
}

/// The arrays that form the coarsest operator (set-up and value updates).
struct CoarsestWork {
    /// Row sums and diagonal of A_L (`amg_dense_row_sums`).
    sums: CudaSlice<f64>,
    diag: CudaSlice<f64>,
    /// [singular (1) or not (0), shift] (`amg_dense_singular`).
    singular: CudaSlice<f64>,
    /// The dense matrix, then its Cholesky factor (n_L² each).
    factor: CudaSlice<f64>,
    /// A_L dense, then the inverse's columns.
    scratch: CudaSlice<f64>,
    /// The grid barrier of the one-launch factorisation (2 words).
    barrier: CudaSlice<u32>,
    /// Value updates refine the previous inverse
    /// ([`AmgSettings::refine_coarsest`]).
    refine: bool,
    /// Its buffers, allocated at the first value update that refines.
    refinement: Option<CoarsestRefinement>,
}

impl CoarsestWork {
    fn new(gpu: &Gpu, n: usize, refine: bool) -> Result<Self, GpuError> {
        Ok(Self {
            sums: gpu.zeros(n)?,
            diag: gpu.zeros(n)?,
            singular: gpu.zeros(2)?,
            factor: gpu.zeros(n * n)?,
            scratch: gpu.zeros(n * n)?,
            barrier: gpu.zeros(2)?,
            refine,
            refinement: None,
        })
    }
}

/// Residual launches of a refinement at most: from a residual of
/// `REFINE_START` (0.5, kernels/amg_dense_refine.cu) the sixth (0.5³²) is
/// below `REFINE_ACCEPT` (1e-8).
const REFINE_STEPS: usize = 6;

/// The buffers of the coarsest inverse's Newton–Schulz refinement
/// (kernels/amg_dense_refine.cu): after a value update, E_k = I − M X_k and
/// X_{k+1} = X_k + X_k E_k from the previous inverse X_0, decided on the
/// device (accepted, or the factorisation runs as at the set-up).
struct CoarsestRefinement {
    /// The iterates X_k of odd k (the even ones are the inverse itself).
    iterate: CudaSlice<f64>,
    /// E_k.
    residual: CudaSlice<f64>,
    /// Per block of a residual launch, its sum of E_k's squares.
    partials: CudaSlice<f64>,
    /// The residual launch's ticket (its last block decides).
    ticket: CudaSlice<u32>,
    /// [updates that run, verdict (0 iterating, 1 accepted, 2 rejected),
    /// residuals that ran].
    state: CudaSlice<i32>,
    /// ‖E_k‖_F of each residual that ran (for the debug log).
    norms: CudaSlice<f64>,
}

impl CoarsestRefinement {
    fn new(gpu: &Gpu, n: usize) -> Result<Self, GpuError> {
        let tiles = n.div_ceil(32);
        Ok(Self {
            iterate: gpu.zeros(n * n)?,
            residual: gpu.zeros(n * n)?,
            partials: gpu.zeros(tiles * tiles)?,
            ticket: gpu.zeros(1)?,
            state: gpu.zeros(3)?,
            norms: gpu.zeros(REFINE_STEPS)?,
        })
    }

    /// The refinement's launches for the symmetric `m` (the matrix the
    /// factorisation would factor, not singular; a singular one is rejected
    /// on the device) from the previous inverse in `inverse`, which holds
    /// the accepted one after them: [`REFINE_STEPS`] residuals and updates
    /// (those after a verdict return at once), then the copy of an iterate
    /// that ended in `iterate`.
    fn launch(
        &self,
        gpu: &Gpu,
        n: usize,
        m: &CudaSlice<f64>,
        singular: &CudaSlice<f64>,
        inverse: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        let n32 = n as i32;
        let tiles = n.div_ceil(32);
        let last = (REFINE_STEPS - 1) as i32;
        for k in 0..REFINE_STEPS {
            let k32 = k as i32;
            let (x, next) = if k % 2 == 0 {
                (inverse, &self.iterate)
            } else {
                (&self.iterate, inverse)
            };
            dense_step(gpu, "amg_dense_refine_residual", tiles * tiles, |args| {
                args.arg(&n32)
                    .arg(&k32)
                    .arg(&last)
                    .arg(m)
                    .arg(x)
                    .arg(singular)
                    .arg(&self.residual)
                    .arg(&self.partials)
                    .arg(&self.ticket)
                    .arg(&self.state)
                    .arg(&self.norms);
            })?;
            dense_step(
                gpu,
                "amg_dense_refine_update",
                tiles * (tiles + 1) / 2,
                |args| {
                    args.arg(&n32)
                        .arg(&k32)
                        .arg(x)
                        .arg(&self.residual)
                        .arg(next)
                        .arg(&self.state);
                },
            )?;
        }
        gpu.launch_vector("amg_dense_refine_copy", n * n, |args| {
            args.arg(&n32)
                .arg(&self.iterate)
                .arg(inverse)
                .arg(&self.state);
        })
    }
}

/// The cycle in the precision of the settings.
enum Arithmetic {
    Double(Cycle<f64>),
    Mixed(Cycle<f32>),
}

/// Where a run of sweeps starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// From x = 0 (the first sweep reads nothing).
    Zero,
    /// From the iterate in x.
    X,
    /// From the iterate in the spare buffer (an odd number of sweeps).
    Spare,
    /// From x + θ P x_c, the iterate in x before the prolongation and
    /// correction, which the first sweep makes as it reads (an even number
    /// of sweeps: that sweep writes the spare buffer).
    Corrected,
}

/// What one sweep launch starts from (kernels/amg_cycle.cu SweepIterate).
#[derive(Clone, Copy)]
enum SweepFrom<'a, T> {
    /// x = 0: the sweep is s∘b.
    Zero,
    /// The iterate in this buffer.
    Buffer(&'a CudaSlice<T>),
    /// Two sweeps from x = 0 in one launch: the second reads s∘b per entry.
    ZeroTwice,
    /// The iterate in this buffer corrected, x + θ P x_c, per entry.
    Corrected(&'a CudaSlice<T>),
    /// One sweep from x = 0 corrected, s∘b + θ P x_c, per entry (the fused
    /// cycle's post-sweep, `AmgSettings::fused`).
    ZeroCorrected,
}

impl<'a, T> SweepFrom<'a, T> {
    /// The sweeps this launch makes.
    fn sweeps(self) -> usize {
        match self {
            SweepFrom::ZeroTwice => 2,
            _ => 1,
        }
    }
    /// The stored iterate it reads (None: computed from s∘b).
    fn stored(self) -> Option<&'a CudaSlice<T>> {
        match self {
            SweepFrom::Buffer(x) | SweepFrom::Corrected(x) => Some(x),
            SweepFrom::Zero | SweepFrom::ZeroTwice | SweepFrom::ZeroCorrected => None,
        }
    }
    /// Whether a fused kernel computes the iterate per entry (else the plain
    /// sweep), and whether it adds θ P x_c.
    fn fused(self) -> Option<bool> {
        match self {
            SweepFrom::Zero | SweepFrom::Buffer(_) => None,
            SweepFrom::ZeroTwice => Some(false),
            SweepFrom::Corrected(_) | SweepFrom::ZeroCorrected => Some(true),
        }
    }
}

/// What the cycle needs of the settings, checked.
#[derive(Clone, Copy, Debug)]
struct CycleParams {
    kind: CycleKind,
    /// Pre- and post-smoothing sweeps.
    sweeps: usize,
    scale_kind: i32,
    omega: f64,
    correction: f64,
    precision: Precision,
    /// One sweep each side and `AmgSettings::fused`: the fused kernels.
    fused: bool,
}

/// The AMG hierarchy on the device and its cycle as a preconditioner.
pub struct DeviceAmg<'g> {
    gpu: &'g Gpu,
    fine: Rc<DeviceModSell>,
    fine_source: CudaSlice<i64>,
    levels: Vec<Level>,
    /// The coarsest level's operator (A_L⁻¹ or A_L⁺), row-major.
    coarsest_inverse: CudaSlice<f64>,
    /// The arrays that form it, kept for value updates.
    coarsest_work: CoarsestWork,
    /// Set-up status words (kernels/amg.cu `amg_status_reset`): per level
    /// but the coarsest, its smallest row without a positive diagonal
    /// (i32::MAX: none); last, the coarsest factor's failed pivot + 1 (0:
    /// none). Read back once per set-up; a deferred value update
    /// ([`Self::update_values_deferred`]) copies them into `status_read`
    /// without waiting, and [`Self::deferred_status`] reads that copy.
    status: CudaSlice<i32>,
    status_read: DeferredRead<i32>,
    cycle: CycleParams,
    /// The cycle's vectors (and rounded values) in its precision.
    arithmetic: Arithmetic,
    /// Why coarsening stopped (for the log and the bench).
    stop_reason: String,
    /// [`DevicePreconditioner::graph_key`]: kept by value updates, which
    /// write every level's values into the buffers the set-up allocated.
    graph_key: u64,
}

/// Host wall-clock time per set-up phase, the stream synchronised at each
/// mark (`DeviceAmg::new_profiled`; nothing when off).
struct Phases<'a> {
    gpu: &'a Gpu,
    on: bool,
    last: std::time::Instant,
    times: Vec<(String, f64)>,
}

impl<'a> Phases<'a> {
    /// Timing from now (synchronised first when `on`, so that earlier work
    /// is not counted), nothing recorded yet.
    fn start(gpu: &'a Gpu, on: bool) -> Result<Self, GpuError> {
        let mut phases = Phases {
            gpu,
            on,
            last: std::time::Instant::now(),
            times: Vec::new(),
        };
        phases.mark(|| "start".into())?;
        phases.times.clear();
        Ok(phases)
    }

    fn mark(&mut self, phase: impl FnOnce() -> String) -> Result<(), GpuError> {
        if self.on {
            self.gpu.synchronize()?;
            let now = std::time::Instant::now();
            let ms = now.duration_since(self.last).as_secs_f64() * 1e3;
            self.times.push((phase(), ms));
            self.last = now;
        }
        Ok(())
    }
}

impl<'g> DeviceAmg<'g> {
    /// Whether [`DevicePreconditioner::apply_gated_with_dot`] takes PCG's
    /// r · z from the last fine sweep: a mixed cycle of more than one level
    /// whose fine slices hold whole chunks of `dot`'s rows.
    fn takes_dot(&self, dot: &LoopDot<'_>) -> bool {
        let chunk = dot.chunk_rows as usize;
        matches!(self.arithmetic, Arithmetic::Mixed(_))
            && self.levels[0].transfer.is_some()
            && chunk > 0
            && chunk.is_multiple_of(32)
            && self.fine.slice_height.is_multiple_of(chunk)
    }

    /// The hierarchy of `settings` for `fine` (the PCG's matrix, rows in the
    /// solve's order), set up on the device.
    pub fn new(
        gpu: &'g Gpu,
        fine: Rc<DeviceModSell>,
        settings: &AmgSettings,
    ) -> Result<Self, GpuError> {
        Self::build(gpu, fine, settings, false).map(|(amg, _)| amg)
    }

    /// [`Self::new`] with the host time of each set-up phase (fine CSR, each
    /// level's passes, smoothers and coarsest operator, cycle buffers), the
    /// stream synchronised between phases (`bench --amg`).
    pub fn new_profiled(
        gpu: &'g Gpu,
        fine: Rc<DeviceModSell>,
        settings: &AmgSettings,
    ) -> Result<(Self, Vec<(String, f64)>), GpuError> {
        Self::build(gpu, fine, settings, true)
    }

    fn build(
        gpu: &'g Gpu,
        fine: Rc<DeviceModSell>,
        settings: &AmgSettings,
        profile: bool,
    ) -> Result<(Self, Vec<(String, f64)>), GpuError> {
        let mut phases = Phases::start(gpu, profile)?;
        settings.validate().map_err(GpuError::Invalid)?;
        let cycle = CycleParams {
            kind: settings.cycle,
            sweeps: settings.sweeps,
            scale_kind: match settings.smoother {
                AmgSmootherKind::Jacobi => SCALE_JACOBI,
                AmgSmootherKind::L1Jacobi => SCALE_L1,
                other => {
                    return Err(GpuError::Invalid(format!(
                        "the AMG smoother {} is not available on the GPU; use Jacobi or L1Jacobi",
                        other.name()
                    )))
                }
            },
            omega: settings.omega,
            precision: settings.precision,
            fused: settings.fused && settings.sweeps == 1,
            // The K-cycle's Krylov steps scale the correction themselves.
            correction: match settings.cycle {
                CycleKind::K => 1.0,
                CycleKind::V | CycleKind::W => settings.over_correction,
            },
        };
        let n = fine.n;
        if n == 0 || n >= i32::MAX as usize {
            return Err(GpuError::Invalid(format!(
                "AMG on the GPU needs between 1 and 2^31 - 1 rows, this matrix has {n}"
            )));
        }
        let scan = Scan::new(gpu, n)?;
        let (csr, source) = fine_csr(gpu, &fine, &scan)?;
        let mut work = Workspace::new(gpu, n, csr.nnz, settings.matching_rounds)?;
        phases.mark(|| "fine CSR".into())?;
        let mut matrices = vec![csr];
        let mut transfers = Vec::new();
        let stop_reason = loop {
            let a = matrices.last().expect("the fine level");
            if a.n <= settings.coarsest_rows {
                break format!("{} rows <= coarsestRows {}", a.n, settings.coarsest_rows);
            }
            if matrices.len() >= settings.max_levels {
                break format!("maxLevels {} reached", settings.max_levels);
            }
            let (transfer, coarse) = Self::coarsen(gpu, a, settings, &scan, &mut work)?;
            let (level, rows) = (matrices.len() - 1, a.n);
            phases.mark(|| format!("level {level} ({rows} rows) passes"))?;
            // The CPU's rule (`Hierarchy::setup`): a level shrinking by less
            // than MIN_COARSENING is not kept.
            if (a.n as f64) < MIN_COARSENING * coarse.n as f64 {
                log::info!(
                    "GPU AMG: coarsening stalled at level {} ({} rows would become {}); it is \
                     the coarsest",
                    matrices.len() - 1,
                    a.n,
                    coarse.n
                );
                break format!("stalled: {} rows would become {}", a.n, coarse.n);
            }
            transfers.push(transfer);
            matrices.push(coarse);
        };
        let mut transfers = transfers.into_iter();
        let levels = matrices
            .into_iter()
            .map(|a| {
                Ok(Level {
                    scale: gpu.zeros(a.n)?,
                    transfer: transfers.next(),
                    a,
                })
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        let n_last = levels.last().expect("one level").a.n;
        if n_last > MAX_DENSE_ROWS {
            return Err(GpuError::Invalid(format!(
                "AMG: coarsening ended ({stop_reason}) with {n_last} rows on the coarsest level, \
                 more than the {MAX_DENSE_ROWS} that can be factored densely; raise maxLevels, or \
                 use another preconditioner for this matrix"
            )));
        }
        let mut amg = Self {
            gpu,
            coarsest_inverse: gpu.zeros(n_last * n_last)?,
            coarsest_work: CoarsestWork::new(gpu, n_last, settings.refine_coarsest)?,
            status: gpu.zeros(levels.len())?,
            status_read: DeferredRead::new(gpu, levels.len())?,
            fine,
            fine_source: source,
            levels,
            cycle,
            // Filled once the scales exist.
            arithmetic: Arithmetic::Double(Cycle {
                levels: Vec::new(),
                fine_values: None,
                fine_diag: None,
                fine_x: None,
                residual: gpu.zeros(0)?,
            }),
            stop_reason,
            graph_key: super::unique_buffers_id(),
        };
        amg.smoothers_and_coarsest(false)?;
        amg.check_status()?;
        phases.mark(|| "smoothers + coarsest operator".into())?;
        amg.arithmetic = match cycle.precision {
            Precision::Double => {
                Arithmetic::Double(Cycle::new(gpu, &amg.levels, &amg.fine, cycle.kind)?)
            }
            Precision::Mixed => {
                Arithmetic::Mixed(Cycle::new(gpu, &amg.levels, &amg.fine, cycle.kind)?)
            }
        };
        phases.mark(|| "cycle buffers".into())?;
        log::debug!("GPU AMG set up: {}", amg.describe());
        Ok((amg, phases.times))
    }

    /// One level's passes: their products (the last is the coarse matrix),
    /// the aggregates composed and their members.
    fn coarsen(
        gpu: &Gpu,
        a: &DeviceCsr,
        settings: &AmgSettings,
        scan: &Scan,
        work: &mut Workspace,
    ) -> Result<(Transfer, DeviceCsr), GpuError> {
        let mut passes: Vec<Pass> = Vec::with_capacity(settings.passes);
        let mut aggregate: Option<CudaSlice<u32>> = None;
        let mut product: Option<DeviceCsr> = None;
        for _ in 0..settings.passes.max(1) {
            let input = product.as_ref().unwrap_or(a);
            let (pass, next, pass_aggregate) =
                Pass::new(gpu, input, settings.matching_rounds, scan, work)?;
            aggregate = Some(match aggregate {
                None => pass_aggregate,
                Some(level_aggregate) => {
                    let n32 = a.n32();
                    gpu.launch_vector("amg_compose", a.n, |args| {
                        args.arg(&n32).arg(&level_aggregate).arg(&pass_aggregate);
                    })?;
                    level_aggregate
                }
            });
            if let Some(previous) = passes.last_mut() {
                previous.product = product.take();
            }
            passes.push(pass);
            product = Some(next);
        }
        let coarse = product.expect("at least one pass");
        let aggregate = aggregate.expect("at least one pass");
        let (member_ptr, members) = aggregate_members(gpu, &aggregate, a.n, coarse.n, scan, work)?;
        Ok((
            Transfer {
                passes,
                aggregate,
                member_ptr,
                members,
            },
            coarse,
        ))
    }

    /// Smoother scales on every level but the coarsest, and the coarsest
    /// level's dense operator (refined from the previous one where `update`
    /// and the settings allow): launches only, their failures recorded in
    /// `status` ([`Self::check_status`] or [`Self::deferred_status`] reads
    /// them).
    fn smoothers_and_coarsest(&mut self, update: bool) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let last = self.levels.len() - 1;
        let last32 = last as i32;
        gpu.launch_vector("amg_status_reset", last + 1, |a| {
            a.arg(&last32).arg(&self.status);
        })?;
        for (l, level) in self.levels[..last].iter().enumerate() {
            let a = &level.a;
            let n32 = a.n32();
            let bad_l = self.status.slice(l..l + 1);
            // A mixed cycle's f32 scales, rounded in this launch (value
            // updates; the set-up's cycle does not exist yet and rounds them
            // when it is built).
            let scale_f32 = match &self.arithmetic {
                Arithmetic::Mixed(c) => c.levels.get(l).and_then(|v| v.scale.as_ref()),
                Arithmetic::Double(_) => None,
            };
            gpu.launch_vector("amg_smoother_scale", a.n, |args| {
                args.arg(&n32);
                a.push_args(args);
                args.arg(&self.cycle.scale_kind)
                    .arg(&self.cycle.omega)
                    .arg(&level.scale);
                arg_or_null(args, scale_f32);
                args.arg(&bad_l);
            })?;
        }
        self.coarsest_operator(update)
    }

    /// Reads the status words back (the one synchronising read of the
    /// set-up and of [`Self::update_values`]): see [`Self::status_error`].
    fn check_status(&self) -> Result<(), GpuError> {
        let status = self.gpu.download(&self.status)?;
        self.status_error(&status)
    }

    /// The status words of the last deferred value update
    /// ([`Self::update_values_deferred`]), if nobody read them yet: the error
    /// [`Self::update_values`] would have returned, or `Ok`. Waits only for
    /// the copy queued at the end of that update: after a solve whose
    /// residual read-backs drained the stream, it has long landed and this
    /// reads host memory. A second call (or one with nothing pending) is
    /// `Ok`.
    pub fn deferred_status(&self) -> Result<(), GpuError> {
        match self.status_read.take()? {
            Some(status) => {
                if log::log_enabled!(log::Level::Debug) {
                    self.log_refinement()?;
                }
                self.status_error(&status)
            }
            None => Ok(()),
        }
    }

    /// The debug log's line on the last update's coarsest inverse: refined
    /// (the residual norms ‖I − M X_k‖_F) or factored (reads back).
    fn log_refinement(&self) -> Result<(), GpuError> {
        if self.coarsest_work.refinement.is_none() {
            return Ok(());
        }
        let (refined, norms) = self.coarsest_refinement()?;
        let norms: Vec<String> = norms.iter().map(|d| format!("{d:.2e}")).collect();
        log::debug!(
            "AMG coarsest inverse {} (‖I − M X_k‖_F: {})",
            if refined { "refined" } else { "factored" },
            norms.join(", ")
        );
        Ok(())
    }

    /// Whether the last value update's coarsest inverse came from refining
    /// the previous one ([`AmgSettings::refine_coarsest`]) rather than from
    /// the factorisation, and the residual norms ‖I − M X_k‖_F of its
    /// refinement (reads them back: for checks and logs; `(false, [])`
    /// when no update refined yet).
    pub fn coarsest_refinement(&self) -> Result<(bool, Vec<f64>), GpuError> {
        let Some(r) = &self.coarsest_work.refinement else {
            return Ok((false, Vec::new()));
        };
        let state = self.gpu.download(&r.state)?;
        let mut norms = self.gpu.download(&r.norms)?;
        norms.truncate((state[2].max(0) as usize).min(REFINE_STEPS));
        Ok((state[1] == 1, norms))
    }

    /// Whether a deferred value update's status is still unread.
    pub fn status_pending(&self) -> bool {
        self.status_read.pending()
    }

    /// The status words `status` as an error: a level's diagonal that is not
    /// positive, or a coarsest matrix that is not positive definite.
    fn status_error(&self, status: &[i32]) -> Result<(), GpuError> {
        let last = self.levels.len() - 1;
        if let Some((l, row)) = status[..last]
            .iter()
            .enumerate()
            .find(|(_, &r)| r != i32::MAX)
        {
            return Err(GpuError::Invalid(format!(
                "AMG: row {row} of level {l} has a diagonal entry that is not positive and \
                 finite; the Jacobi smoothers need a positive diagonal (is the matrix SPD?)"
            )));
        }
        let pivot = status[last];
        if pivot < 0 {
            return Err(GpuError::Invalid(format!(
                "AMG: the coarsest matrix's one-launch factorisation gave up waiting at a grid \
                 barrier (its blocks were not all resident); {DENSE_STEPS_HINT}"
            )));
        }
        if pivot != 0 {
            let n = self.levels[last].a.n;
            return Err(GpuError::Invalid(format!(
                "AMG: the coarsest matrix ({n} rows) is not positive definite (pivot {pivot} of \
                 its Cholesky factor), so it cannot be inverted; is the matrix symmetric positive \
                 definite, or singular only through constants as in an all-Neumann problem?"
            )));
        }
        Ok(())
    }

    /// The coarsest level's dense operator A_L⁻¹ (or A_L⁺), as
    /// `CoarsestSolver::inverse` defines it, formed on the device with
    /// nothing read back: the matrix that `CoarsestSolver` factors
    /// (scattered, and its singularity test — `amg_dense_singular` makes the
    /// host's test in its order), then [`dense_symmetric_inverse`]. A value
    /// `update` with [`AmgSettings::refine_coarsest`] first queues the
    /// refinement of the inverse it replaces ([`CoarsestRefinement`]), and
    /// the one-launch factorisation returns at once where that was accepted
    /// (the launch per step has no such test, so it always factors).
    fn coarsest_operator(&mut self, update: bool) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let last = self.levels.len() - 1;
        let a = &self.levels[last].a;
        let w = &mut self.coarsest_work;
        let n = a.n;
        let n32 = a.n32();
        gpu.launch_vector("amg_dense_row_sums", n, |args| {
            args.arg(&n32);
            a.push_args(args);
            args.arg(&w.sums).arg(&w.diag);
        })?;
        gpu.launch("amg_dense_singular", 1, 32, 0, |args| {
            args.arg(&n32)
                .arg(&w.sums)
                .arg(&w.diag)
                .arg(&SINGULAR)
                .arg(&w.singular);
        })?;
        // A_L dense in `scratch` (zeroed, then scattered), symmetrised
        // (shifted when singular) into `factor`.
        gpu.zero(&mut w.scratch)?;
        gpu.launch_vector("amg_dense_scatter", n, |args| {
            args.arg(&n32);
            a.push_args(args);
            args.arg(&w.scratch);
        })?;
        let refine = update && w.refine && dense_one_launch(gpu).is_some();
        if refine {
            // Allocated at the first update that refines, kept after it.
            let refinement = match w.refinement.take() {
                Some(r) => r,
                None => CoarsestRefinement::new(gpu, n)?,
            };
            let refinement = &*w.refinement.insert(refinement);
            // M = (A_L + A_Lᵀ) / 2 in `factor`, as the factorisation forms it
            // (and forms again from `scratch` if the refinement is rejected).
            gpu.launch_vector("amg_dense_symmetrise", n * n, |args| {
                args.arg(&n32)
                    .arg(&w.scratch)
                    .arg(&w.singular)
                    .arg(&w.factor);
            })?;
            refinement.launch(gpu, n, &w.factor, &w.singular, &self.coarsest_inverse)?;
        }
        let failed = self.status.slice(last..last + 1);
        dense_symmetric_inverse(
            gpu,
            n,
            DenseInverseBuffers {
                dense: &w.scratch,
                singular: &w.singular,
                factor: &w.factor,
                w: &w.scratch,
                failed: &failed,
                inverse: &self.coarsest_inverse,
                barrier: &mut w.barrier,
                refined: w.refinement.as_ref().filter(|_| refine).map(|r| &r.state),
            },
        )
    }

    /// Recomputes every value for `fine`, a matrix of the set-up's pattern
    /// (the set-up's matrix itself after new values were written into it, or
    /// another of the same pattern): the fine CSR, the Galerkin products in
    /// the set-up's order (so the bits of a fresh set-up that finds the same
    /// aggregates), the smoother scales and the coarsest operator. Aggregates
    /// and patterns are kept. Reads the status back (synchronising); a time
    /// step uses [`Self::update_values_deferred`] instead.
    pub fn update_values(&mut self, fine: Rc<DeviceModSell>) -> Result<(), GpuError> {
        self.update(fine, false)?;
        self.deferred_status()
    }

    /// [`Self::update_values`] without waiting for the device: the status
    /// words are copied to page-locked host memory behind the update's
    /// launches, and [`Self::deferred_status`] reports them (the same errors)
    /// once the caller reads something back anyway — the next solve's
    /// residuals. Until then the hierarchy may hold the values of a matrix
    /// it rejects (a cycle applied with them gives garbage, not a fault),
    /// so the caller must read the status before it trusts that solve. An
    /// earlier update's unread status is read (and reported) first.
    pub fn update_values_deferred(&mut self, fine: Rc<DeviceModSell>) -> Result<(), GpuError> {
        self.update(fine, false).map(|_| ())
    }

    /// [`Self::update_values`] with the host time of each phase (fine CSR
    /// values, Galerkin values with their f32 copies, smoothers and coarsest
    /// operator, the fine f32 copy and the status read-back), the stream
    /// synchronised between phases (`bench --amg`).
    pub fn update_values_profiled(
        &mut self,
        fine: Rc<DeviceModSell>,
    ) -> Result<Vec<(String, f64)>, GpuError> {
        let mut times = self.update(fine, true)?;
        let clock = std::time::Instant::now();
        self.deferred_status()?;
        if let Some((_, ms)) = times.last_mut() {
            *ms += clock.elapsed().as_secs_f64() * 1e3;
        }
        Ok(times)
    }

    fn update(
        &mut self,
        fine: Rc<DeviceModSell>,
        profile: bool,
    ) -> Result<Vec<(String, f64)>, GpuError> {
        let gpu = self.gpu;
        let mut phases = Phases::start(gpu, profile)?;
        // The status words are about to be reset: an earlier update's unread
        // copy is reported first.
        self.deferred_status()?;
        let old = &self.fine;
        if fine.n != old.n
            || fine.slice_height != old.slice_height
            || fine.codes.len() != old.codes.len()
        {
            return Err(GpuError::Invalid(format!(
                "AMG update: the matrix has {} rows in slices of {} ({} slots) but the hierarchy \
                 was set up for {} rows in slices of {} ({} slots); set it up again for a new \
                 pattern",
                fine.n,
                fine.slice_height,
                fine.codes.len(),
                old.n,
                old.slice_height,
                old.codes.len()
            )));
        }
        if !Rc::ptr_eq(&fine, &self.fine) {
            // The cycle reads the fine matrix's own buffers.
            self.graph_key = super::unique_buffers_id();
        }
        self.fine = fine;
        fine_values(gpu, &self.levels[0].a, &self.fine_source, &self.fine)?;
        phases.mark(|| "fine CSR values".into())?;
        for l in 0..self.levels.len() - 1 {
            let (head, tail) = self.levels.split_at(l + 1);
            let (level, next) = (&head[l], &tail[0]);
            let transfer = level
                .transfer
                .as_ref()
                .expect("a transfer below the coarsest");
            // A mixed cycle's f32 copy of the next level's values, written by
            // the level's last pass (which writes that level's values).
            let next_f32 = match &self.arithmetic {
                Arithmetic::Mixed(c) => c.levels.get(l + 1).and_then(|v| v.values.as_ref()),
                Arithmetic::Double(_) => None,
            };
            let mut input = &level.a;
            for pass in &transfer.passes {
                let (output, output_f32) = match &pass.product {
                    Some(product) => (product, None),
                    None => (&next.a, next_f32),
                };
                pass.values(gpu, input, output, output_f32)?;
                input = output;
            }
        }
        phases.mark(|| "Galerkin values".into())?;
        self.smoothers_and_coarsest(true)?;
        phases.mark(|| "smoothers + coarsest operator".into())?;
        match &mut self.arithmetic {
            Arithmetic::Double(c) => c.round_fine(gpu, &self.fine)?,
            Arithmetic::Mixed(c) => c.round_fine(gpu, &self.fine)?,
        }
        // The status behind the launches, not waited for.
        self.status_read.start(gpu, &self.status)?;
        phases.mark(|| "f32 copies + status".into())?;
        Ok(phases.times)
    }

    /// Rows per level, fine first.
    pub fn level_rows(&self) -> Vec<usize> {
        self.levels.iter().map(|l| l.a.n).collect()
    }

    /// Stored entries per level, fine first.
    pub fn level_entries(&self) -> Vec<usize> {
        self.levels.iter().map(|l| l.a.nnz).collect()
    }

    /// The precision the cycle runs in.
    pub fn precision(&self) -> Precision {
        self.cycle.precision
    }

    /// Bytes one application of the cycle moves per level, fine first (the
    /// byte floor of the cycle, `bench --amg`): every launch counted as
    /// reading each array it reads and writing each it writes once (matrix
    /// values and indices, vectors, aggregates and members; the fine level's
    /// mod-SELL slots including padding), summed over the level's visits (W:
    /// two per coarse visit, K: two cycles, two products, five dot products
    /// and two updates per visit of a coarse level above the coarsest).
    pub fn cycle_bytes(&self) -> Vec<f64> {
        let mut bytes = vec![0.0; self.levels.len()];
        self.visit_bytes(0, 1.0, true, &mut bytes);
        bytes
    }

    /// Adds the bytes of `visits` visits of level l (one cycle each; `from_zero`
    /// false: a W-cycle's second visit) and of what they call below.
    fn visit_bytes(&self, l: usize, visits: f64, from_zero: bool, bytes: &mut [f64]) {
        let vs = match self.cycle.precision {
            Precision::Double => 8.0,
            Precision::Mixed => 4.0,
        };
        let level = &self.levels[l];
        let n = level.a.n as f64;
        // The right-hand side: PCG's f64 residual on the fine level.
        let bs = if l == 0 { 8.0 } else { vs };
        if level.transfer.is_none() {
            // Dense f64 operator, b read, x written.
            bytes[l] += visits * (8.0 * n * n + 2.0 * vs * n);
            return;
        }
        let matrix = if l == 0 {
            let m = &*self.fine;
            let slots = m.codes.len() as f64;
            slots * (4.0 + vs) + n * vs + 8.0 * (m.n_slices() as f64 + 1.0)
        } else {
            level.a.nnz as f64 * (4.0 + vs) + 8.0 * (n + 1.0)
        };
        let next = &self.levels[l + 1];
        let nc = next.a.n as f64;
        let sweeps = self.cycle.sweeps as f64;
        // A sweep from an iterate: matrix, x, b, scale read, x_new written.
        let sweep = matrix + n * (3.0 * vs + bs);
        // From zero: scale, b read, x written.
        let first = n * (2.0 * vs + bs);
        // Restriction's members, pointers and coarse b.
        let members = 4.0 * n + 8.0 * (nc + 1.0) + vs * nc;
        // The written iterate: z in f64 on the fine level.
        let out = if l == 0 { 8.0 } else { vs };
        let b = if self.cycle.fused && from_zero {
            // Residual from s∘b (+ restriction); the post-sweep from
            // s∘b + θ P x_c: scale, b, aggregate, x_c read, x written.
            let residual = matrix + n * (vs + bs) + members;
            let stored_r = if l == 0 { 2.0 * vs * n } else { 0.0 };
            residual + stored_r + matrix + n * (vs + bs + 4.0 + out) + vs * nc
        } else {
            let mut b = if from_zero && sweeps >= 2.0 {
                // The first two sweeps in one launch: matrix, scale and b
                // read, x written; then the others.
                matrix + n * (2.0 * vs + bs) + (sweeps - 2.0) * sweep
            } else if from_zero {
                first
            } else {
                sweeps * sweep
                    + if sweeps as usize % 2 == 1 {
                        2.0 * vs * n
                    } else {
                        0.0
                    }
            };
            // Residual and restriction (fine: r stored and read back; coarse: fused).
            b += if l == 0 {
                matrix + n * (2.0 * vs + bs) + vs * n + members
            } else {
                matrix + 2.0 * vs * n + members
            };
            // Prolongation and post-sweeps. Even: the first sweep reads x,
            // aggregate and x_c and forms x + θ P x_c itself. Odd: the
            // prolongation reads x, aggregate, x_c and writes the spare.
            let prolong = if self.cycle.sweeps.is_multiple_of(2) {
                n * 4.0 + vs * nc
            } else {
                n * (2.0 * vs + 4.0) + vs * nc
            };
            b + prolong + sweeps * sweep + n * (out - vs)
        };
        bytes[l] += visits * b;
        let coarse_visits = match self.cycle.kind {
            CycleKind::W if next.transfer.is_some() => {
                self.visit_bytes(l + 1, visits, true, bytes);
                self.visit_bytes(l + 1, visits, false, bytes);
                return;
            }
            CycleKind::K if next.transfer.is_some() => {
                // Two products, five dot products, r and x updates.
                let nm = next.a.nnz as f64 * (4.0 + vs) + 8.0 * (nc + 1.0);
                bytes[l + 1] +=
                    visits * (2.0 * (nm + 2.0 * vs * nc) + 10.0 * vs * nc + 6.0 * vs * nc);
                2.0 * visits
            }
            _ => visits,
        };
        self.visit_bytes(l + 1, coarse_visits, true, bytes);
    }

    /// Σ nnz(A_l) / nnz(A_0).
    pub fn operator_complexity(&self) -> f64 {
        let e = self.level_entries();
        e.iter().sum::<usize>() as f64 / e[0] as f64
    }

    /// Rows per level, e.g. `5 levels: 262144 → 66134 → … → 812 rows,
    /// operator complexity 1.32 (812 rows <= coarsestRows 1000)`.
    pub fn describe(&self) -> String {
        let rows: Vec<String> = self.level_rows().iter().map(|n| n.to_string()).collect();
        format!(
            "{} levels: {} rows, operator complexity {:.2} ({})",
            rows.len(),
            rows.join(" → "),
            self.operator_complexity(),
            self.stop_reason
        )
    }

    /// Why coarsening stopped.
    pub fn stop_reason(&self) -> &str {
        &self.stop_reason
    }

    /// Level `l`'s matrix read back (level 0: the fine matrix as CSR).
    pub fn matrix(&self, l: usize) -> Result<Csr, GpuError> {
        self.level(l)?.a.download(self.gpu)
    }

    /// Level `l`'s aggregates (row → row of level l + 1) read back.
    pub fn aggregate(&self, l: usize) -> Result<Vec<u32>, GpuError> {
        let level = self.level(l)?;
        let t = level.transfer.as_ref().ok_or_else(|| {
            GpuError::Invalid(format!("level {l} is the coarsest; it has no aggregates"))
        })?;
        let mut agg = self.gpu.download(&t.aggregate)?;
        agg.truncate(level.a.n);
        Ok(agg)
    }

    fn level(&self, l: usize) -> Result<&Level, GpuError> {
        self.levels.get(l).ok_or_else(|| {
            GpuError::Invalid(format!(
                "the hierarchy has {} levels, no level {l}",
                self.levels.len()
            ))
        })
    }
}

/// Threads per coarse row of `amg_residual_restrict_csr` (its
/// `AMG_RR_LANES`): one per member, up to this many at a time.
const RESIDUAL_RESTRICT_LANES: usize = 8;

/// One application of the cycle in precision T: the hierarchy, the cycle's
/// data and the solve's stop flag (launches only: every buffer exists).
struct Run<'s, 'g, T> {
    amg: &'s DeviceAmg<'g>,
    c: &'s Cycle<T>,
    done: Option<&'s CudaSlice<f64>>,
    /// PCG's r · z, taken by the last fine sweep (a mixed cycle of more than
    /// one level whose slices hold whole chunks: [`DeviceAmg::takes_dot`]).
    dot: Option<&'s LoopDot<'s>>,
}

/// The r · z arguments of the fine sweeps (`sweep_rz_partials`): `dot`'s
/// where the sweep writes z and takes PCG's r · z, else a null partials
/// pointer (and nulls and zeros for the rest).
fn push_dot<'a>(a: &mut KernelArgs<'a>, dot: Option<&'a LoopDot<'a>>) {
    match dot {
        Some(d) => {
            a.arg(d.partials)
                .arg(&d.chunk_rows)
                .arg(d.state)
                .arg(d.records)
                .arg(&d.j);
            arg_or_null(a, d.ticket);
        }
        None => {
            a.arg::<&u64>(&NULL).arg(&0i32).arg::<&u64>(&NULL);
            a.arg::<&u64>(&NULL).arg(&0i32).arg::<&u64>(&NULL);
        }
    }
}

impl<T: Arith> Run<'_, '_, T> {
    /// Level l's matrix values in T.
    fn values(&self, l: usize) -> &CudaSlice<T> {
        T::pick(self.c.levels[l].values.as_ref(), &self.amg.levels[l].a.vals)
    }

    /// Level l's smoother scales in T.
    fn scale(&self, l: usize) -> &CudaSlice<T> {
        T::pick(self.c.levels[l].scale.as_ref(), &self.amg.levels[l].scale)
    }

    /// z = cycle(r) on the fine level, from z = 0 (f64 iterates in z; f32 in
    /// its own x, the last sweep widened into z).
    fn fine(&self, r: &CudaSlice<f64>, z: &CudaSlice<f64>) -> Result<(), GpuError> {
        let amg = self.amg;
        let Some(t) = &amg.levels[0].transfer else {
            // One level: the coarsest solve alone, in f64.
            let n = amg.levels[0].a.n;
            let n32 = n as i32;
            let grid = warp_grid(n);
            return self.launch_gated("amg_dense_apply", grid, |a| {
                a.arg(&n32).arg(&amg.coarsest_inverse).arg(r).arg(z);
            });
        };
        let k = &T::KERNELS;
        let n32 = amg.fine.n as i32;
        let scale = self.scale(0);
        let x = T::pick(self.c.fine_x.as_ref(), z);
        let next = &self.c.levels[1];
        let correction = amg.cycle.correction;
        // A sweep into `to`, or (widen, f32) into z, widened; the one that
        // writes z takes PCG's r · z when the loop asked for it.
        let sweep = |from: SweepFrom<'_, T>, to: &CudaSlice<T>, widen: Option<&CudaSlice<f64>>| {
            let dot = self.dot.filter(|_| widen.is_some());
            let Some(corrected) = from.fused() else {
                return self.launch_fine(k.fine_jacobi, &n32, |a| {
                    a.arg(scale).arg(r);
                    arg_or_null(a, from.stored());
                    a.arg(to);
                    if T::WIDENS {
                        arg_or_null(a, widen);
                        push_dot(a, dot);
                    }
                });
            };
            self.launch_fine(k.fine_jacobi_fused, &n32, |a| {
                a.arg(scale).arg(r);
                arg_or_null(a, from.stored());
                arg_or_null(a, corrected.then_some(&t.aggregate));
                arg_or_null(a, corrected.then_some(&next.x));
                a.arg(&correction).arg(to);
                arg_or_null(a, widen);
                push_dot(a, dot);
            })
        };
        // The last post-sweep writes z (f32: widened from its result).
        let widen = T::WIDENS.then_some(z);
        let nc32 = amg.levels[1].a.n32();
        let restrict = || {
            self.launch_gated(k.restrict, vector_grid(amg.levels[1].a.n), |a| {
                a.arg(&nc32)
                    .arg(&t.member_ptr)
                    .arg(&t.members)
                    .arg(&self.c.residual)
                    .arg(&next.b);
            })
        };
        if amg.cycle.fused {
            // r = b − A (s∘b), restricted; z = x + s (b − A x), x = s∘b + θ P x_c.
            self.launch_fine(k.fine_residual_zero, &n32, |a| {
                a.arg(scale).arg(r).arg(&self.c.residual);
            })?;
            restrict()?;
            self.coarse_solve(1)?;
            return sweep(SweepFrom::ZeroCorrected, x, widen);
        }
        let sweeps = amg.cycle.sweeps;
        self.smooth(0, x, sweeps, Start::Zero, |from, to, _| {
            sweep(from, to, None)
        })?;
        self.launch_fine(k.fine_residual, &n32, |a| {
            a.arg(r).arg(x).arg(&self.c.residual);
        })?;
        restrict()?;
        self.coarse_solve(1)?;
        let post = self.prolong(0, x)?;
        self.smooth(0, x, sweeps, post, |from, to, last| {
            sweep(from, to, if last { widen } else { None })
        })
    }

    /// Launches a fine-level mod-SELL kernel (one block per slice): n, the
    /// matrix with its values and diagonal in T, the arguments `push` adds,
    /// then the stop flag.
    fn launch_fine<'a>(
        &'a self,
        kernel: &'static str,
        n: &'a i32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        let m = &*self.amg.fine;
        let values = T::pick(self.c.fine_values.as_ref(), &m.values);
        let diag = T::pick(self.c.fine_diag.as_ref(), &m.diag);
        let grid = m.n_slices() as u32;
        self.amg
            .gpu
            .launch(kernel, grid, m.slice_height as u32, m.shared_bytes(), |a| {
                a.arg(n)
                    .arg(&m.slice_ptr)
                    .arg(&m.codes)
                    .arg(values)
                    .arg(diag);
                push(a);
                arg_or_null(a, self.done);
            })
    }

    /// Launches a cycle kernel on `grid` blocks of [`VECTOR_BLOCK`] threads:
    /// the arguments `push` adds, then the stop flag every cycle kernel
    /// takes last (kernels/amg_cycle.cu `done`).
    fn launch_gated<'a>(
        &'a self,
        kernel: &'static str,
        grid: u32,
        push: impl FnOnce(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        self.amg.gpu.launch(kernel, grid, VECTOR_BLOCK, 0, |a| {
            push(a);
            arg_or_null(a, self.done);
        })
    }

    /// x = cycle(b) on coarse level l, from x = 0 or (`from_zero` false: a
    /// W-cycle's second visit) from the x given.
    fn cycle_level(
        &self,
        l: usize,
        b: &CudaSlice<T>,
        x: &CudaSlice<T>,
        from_zero: bool,
    ) -> Result<(), GpuError> {
        let amg = self.amg;
        let k = &T::KERNELS;
        let level = &amg.levels[l];
        let Some(t) = &level.transfer else {
            // The coarsest level (visited from zero only).
            let n = level.a.n;
            let n32 = n as i32;
            let grid = warp_grid(n);
            return self.launch_gated(k.dense_apply, grid, |a| {
                a.arg(&n32).arg(&amg.coarsest_inverse).arg(b).arg(x);
            });
        };
        let m = &level.a;
        let (n32, values, scale) = (m.n32(), self.values(l), self.scale(l));
        let (xc, correction) = (&self.c.levels[l + 1].x, amg.cycle.correction);
        let sweep = |from: SweepFrom<'_, T>, to: &CudaSlice<T>, _| {
            let corrected = from.fused();
            let kernel = match corrected {
                None => k.jacobi_csr,
                Some(_) => k.jacobi_fused_csr,
            };
            self.launch_gated(kernel, vector_grid(m.n), |a| {
                a.arg(&n32).arg(&m.row_ptr).arg(&m.cols).arg(values);
                a.arg(scale).arg(b);
                arg_or_null(a, from.stored());
                if let Some(corrected) = corrected {
                    arg_or_null(a, corrected.then_some(&t.aggregate));
                    arg_or_null(a, corrected.then_some(xc));
                    a.arg(&correction);
                }
                a.arg(to);
            })
        };
        let next = &amg.levels[l + 1];
        let nc32 = next.a.n32();
        // b_c = R (b − A x); x None: the iterate s∘b of one sweep from zero.
        let residual_restrict = |x: Option<&CudaSlice<T>>| {
            let threads = next.a.n * RESIDUAL_RESTRICT_LANES;
            self.launch_gated(k.residual_restrict_csr, vector_grid(threads), |a| {
                a.arg(&nc32).arg(&t.member_ptr).arg(&t.members);
                a.arg(&m.row_ptr).arg(&m.cols).arg(values);
                a.arg(scale).arg(b);
                arg_or_null(a, x);
                a.arg(&self.c.levels[l + 1].b);
            })
        };
        if amg.cycle.fused && from_zero {
            // b_c = R (b − A (s∘b)); x = y + s (b − A y), y = s∘b + θ P x_c.
            residual_restrict(None)?;
            self.coarse_solve(l + 1)?;
            return sweep(SweepFrom::ZeroCorrected, x, false);
        }
        let start = if from_zero { Start::Zero } else { Start::X };
        let sweeps = amg.cycle.sweeps;
        self.smooth(l, x, sweeps, start, sweep)?;
        residual_restrict(Some(x))?;
        self.coarse_solve(l + 1)?;
        let post = self.prolong(l, x)?;
        self.smooth(l, x, sweeps, post, sweep)
    }

    /// The coarse solve of level l (its b to its x): the coarsest's is
    /// exact; above it, one cycle (V), one more from its iterate (W) or two
    /// Krylov steps (K).
    fn coarse_solve(&self, l: usize) -> Result<(), GpuError> {
        let v = &self.c.levels[l];
        let has_transfer = self.amg.levels[l].transfer.is_some();
        match self.amg.cycle.kind {
            CycleKind::K if v.krylov.is_some() => self.k_step(l),
            CycleKind::W if has_transfer => {
                self.cycle_level(l, &v.b, &v.x, true)?;
                self.cycle_level(l, &v.b, &v.x, false)
            }
            _ => self.cycle_level(l, &v.b, &v.x, true),
        }
    }

    /// x + θ P x_c on level l where the post-sweeps start: with an even
    /// number of sweeps the first one makes it as it reads x (no launch),
    /// with an odd number into the spare buffer, from which they end in x.
    /// Returns where they start.
    fn prolong(&self, l: usize, x: &CudaSlice<T>) -> Result<Start, GpuError> {
        let amg = self.amg;
        if amg.cycle.sweeps.is_multiple_of(2) {
            return Ok(Start::Corrected);
        }
        let level = &amg.levels[l];
        let t = level
            .transfer
            .as_ref()
            .expect("a transfer below the coarsest");
        let into = &self.c.levels[l].spare;
        let n32 = level.a.n32();
        let correction = amg.cycle.correction;
        self.launch_gated(T::KERNELS.prolong, vector_grid(level.a.n), |a| {
            a.arg(&n32)
                .arg(&t.aggregate)
                .arg(&self.c.levels[l + 1].x)
                .arg(&correction)
                .arg(x)
                .arg(into);
        })?;
        Ok(Start::Spare)
    }

    /// x_l ≈ A_l⁻¹ b_l on coarse level l by two flexible-CG steps from 0,
    /// each preconditioned by the cycle B of level l (Notay & Vassilevski
    /// 2008, as `solve::amg::cycle` k_step): c = B b, v = A c, r = b −
    /// (c·b / c·v) v, d = B r, w = A d, then x = cc c + cd d from the five
    /// dot products (`amg_k_combine`), all on the device.
    fn k_step(&self, l: usize) -> Result<(), GpuError> {
        let kn = &T::KERNELS;
        let level = &self.c.levels[l];
        let k = level
            .krylov
            .as_ref()
            .expect("K-cycle vectors on this level");
        let (b, x) = (&level.b, &level.x);
        let n = self.amg.levels[l].a.n;
        let (n32, grid) = (n as i32, vector_grid(n));
        self.cycle_level(l, b, &k.c, true)?;
        self.spmv(l, &k.c, &k.v)?;
        self.dot(l, k, &k.c, &k.v, K_RHO1)?;
        self.dot(l, k, &k.c, b, K_ALPHA1)?;
        self.launch_gated(kn.k_residual, grid, |a| {
            a.arg(&n32).arg(b).arg(&k.v).arg(&k.scalars).arg(&k.r);
        })?;
        self.cycle_level(l, &k.r, &k.d, true)?;
        self.spmv(l, &k.d, &k.w)?;
        self.dot(l, k, &k.d, &k.v, K_GAMMA)?;
        self.dot(l, k, &k.d, &k.w, K_BETA)?;
        self.dot(l, k, &k.d, &k.r, K_ALPHA2)?;
        self.launch_gated(kn.k_combine, grid, |a| {
            a.arg(&n32).arg(&k.c).arg(&k.d).arg(&k.scalars).arg(x);
        })
    }

    /// y = A_l x on a coarse level.
    fn spmv(&self, l: usize, x: &CudaSlice<T>, y: &CudaSlice<T>) -> Result<(), GpuError> {
        let m = &self.amg.levels[l].a;
        let n32 = m.n32();
        let values = self.values(l);
        self.launch_gated(T::KERNELS.spmv_csr, vector_grid(m.n), |a| {
            a.arg(&n32).arg(&m.row_ptr).arg(&m.cols).arg(values);
            a.arg(x).arg(y);
        })
    }

    /// k.scalars[slot] = u · v on level l in f64 (per-block partials, then
    /// one block in a fixed order).
    fn dot(
        &self,
        l: usize,
        k: &Krylov<T>,
        u: &CudaSlice<T>,
        v: &CudaSlice<T>,
        slot: i32,
    ) -> Result<(), GpuError> {
        let (gpu, done) = (self.amg.gpu, self.done);
        let n = self.amg.levels[l].a.n;
        let (n32, grid) = (n as i32, vector_grid(n));
        let m = grid as i32;
        self.launch_gated(T::KERNELS.dot_partials, grid, |a| {
            a.arg(&n32).arg(u).arg(v).arg(&k.partials);
        })?;
        gpu.launch("amg_dot_finish", 1, DOT_FINISH_BLOCK, 0, |a| {
            a.arg(&m).arg(&k.partials).arg(&k.scalars).arg(&slot);
            arg_or_null(a, done);
        })
    }

    /// `sweeps` sweeps on level l ending in x, alternating between x and the
    /// level's spare buffer: `sweep(from, to, last)` launches one, or the
    /// first two from x = 0 ([`SweepFrom::ZeroTwice`]).
    fn smooth(
        &self,
        l: usize,
        x: &CudaSlice<T>,
        sweeps: usize,
        start: Start,
        mut sweep: impl FnMut(SweepFrom<'_, T>, &CudaSlice<T>, bool) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let spare = &self.c.levels[l].spare;
        let n = self.amg.levels[l].a.n;
        let n32 = n as i32;
        let buffers = [x, spare];
        if sweeps == 0 {
            return Err(GpuError::Invalid("AMG needs at least one sweep".into()));
        }
        let odd = sweeps % 2 == 1;
        // What the first launch reads.
        let first = match start {
            Start::Zero if sweeps >= 2 => SweepFrom::ZeroTwice,
            Start::Zero => SweepFrom::Zero,
            Start::X if odd => {
                self.launch_gated(T::KERNELS.copy, vector_grid(n), |a| {
                    a.arg(&n32).arg(x).arg(spare);
                })?;
                SweepFrom::Buffer(spare)
            }
            Start::X => SweepFrom::Buffer(x),
            Start::Spare if odd => SweepFrom::Buffer(spare),
            Start::Corrected if !odd => SweepFrom::Corrected(x),
            Start::Spare => {
                return Err(GpuError::Invalid(
                    "AMG smoothing from the spare buffer needs an odd number of sweeps".into(),
                ))
            }
            Start::Corrected => {
                return Err(GpuError::Invalid(
                    "AMG smoothing from the corrected iterate needs an even number of sweeps"
                        .into(),
                ))
            }
        };
        // After `done` sweeps the iterate is in buffers[(sweeps - done) % 2],
        // so that the last one writes x.
        let mut done = first.sweeps();
        let mut to = (sweeps - done) % 2;
        sweep(first, buffers[to], done == sweeps)?;
        while done < sweeps {
            let from = to;
            done += 1;
            to = (sweeps - done) % 2;
            sweep(
                SweepFrom::Buffer(buffers[from]),
                buffers[to],
                done == sweeps,
            )?;
        }
        Ok(())
    }
}

impl DevicePreconditioner for DeviceAmg<'_> {
    fn n(&self) -> usize {
        self.fine.n
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let dot = None;
        match &self.arithmetic {
            Arithmetic::Double(c) => Run {
                amg: self,
                c,
                done,
                dot,
            }
            .fine(r, z),
            Arithmetic::Mixed(c) => Run {
                amg: self,
                c,
                done,
                dot,
            }
            .fine(r, z),
        }
    }
    /// The mixed cycle's last fine sweep writes z and stores r · z's
    /// partials with it ([`Self::takes_dot`]); the f64 cycle's last sweep is
    /// the smoothers' kernel, which does not.
    fn apply_gated_with_dot(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        dot: &LoopDot<'_>,
    ) -> Result<bool, GpuError> {
        match &self.arithmetic {
            Arithmetic::Mixed(c) if self.takes_dot(dot) => {
                let done = Some(dot.state);
                Run {
                    amg: self,
                    c,
                    done,
                    dot: Some(dot),
                }
                .fine(r, z)?;
                Ok(true)
            }
            _ => {
                self.apply_gated(r, z, dot.state)?;
                Ok(false)
            }
        }
    }
    /// V- and W-cycles with Jacobi smoothers are fixed symmetric linear maps;
    /// the K-cycle's step lengths depend on r (PCG runs flexible).
    fn is_linear(&self) -> bool {
        self.cycle.kind != CycleKind::K
    }
    fn preconditioner_name(&self) -> Option<&'static str> {
        Some("GAMG")
    }
    fn graph_key(&self) -> Option<u64> {
        Some(self.graph_key)
    }
    /// One cycle's bytes, all levels ([`Self::cycle_bytes`]).
    fn application_bytes(&self) -> Option<f64> {
        Some(self.cycle_bytes().iter().sum())
    }
}

/// The AMG the GPU runs for `s`: V-, W- and K-cycles as given, with Jacobi or
/// L1-Jacobi as given; Chebyshev and multicolour Gauss–Seidel (not on the GPU
/// yet) as L1-Jacobi.
pub fn gpu_amg_settings(s: &AmgSettings) -> AmgSettings {
    let mut g = *s;
    if !matches!(
        g.smoother,
        AmgSmootherKind::Jacobi | AmgSmootherKind::L1Jacobi
    ) {
        g.smoother = AmgSmootherKind::L1Jacobi;
    }
    g
}

impl GpuSolver<'_> {
    /// PCG preconditioned by the GPU AMG of `settings` (as given: map it with
    /// [`gpu_amg_settings`] first), set up on the device from the PCG's
    /// matrix, on the system `s` equilibrated, rows in `s.options.ordering`
    /// (this solver's cached permutation): the fused
    /// device loop, as [`GpuSolver::solve`] runs Jacobi. The convergence test
    /// and the returned performance are those of the original system.
    pub fn solve_amg(
        &mut self,
        settings: &AmgSettings,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        let amg = Preconditioner::Amg(*settings);
        self.pcg_preconditioned(s, &amg, |gpu, _, backend| {
            let amg = DeviceAmg::new(gpu, backend.shared_matrix(), settings)?;
            log::info!("GPU {settings}: {}", amg.describe());
            Ok(Box::new(amg))
        })
    }
}

/// The buffers of [`dense_symmetric_inverse`] (n × n row-major unless said).
pub(super) struct DenseInverseBuffers<'a> {
    /// The matrix M (read; may be `w`, which the inverse overwrites).
    pub dense: &'a CudaSlice<f64>,
    /// [singular (≠ 0: shift and project), shift], as `amg_dense_singular`
    /// writes it; [0, 0] for an SPD matrix.
    pub singular: &'a CudaSlice<f64>,
    /// Work: (M + Mᵀ)/2 (shifted), then its Cholesky factor L.
    pub factor: &'a CudaSlice<f64>,
    /// Work: W = L⁻¹.
    pub w: &'a CudaSlice<f64>,
    /// One word, 0 on entry: the first pivot that is not positive + 1.
    pub failed: &'a CudaView<'a, i32>,
    /// Out: the inverse Wᵀ W (exactly symmetric), each column minus its
    /// mean when singular.
    pub inverse: &'a CudaSlice<f64>,
    /// Work: the grid barrier of the one-launch factorisation (2 words,
    /// zeroed here before the launch).
    pub barrier: &'a mut CudaSlice<u32>,
    /// The state of a refinement queued before ([`CoarsestRefinement`]):
    /// the one-launch factorisation returns at once where it accepted its
    /// inverse. `None`: always factor.
    pub refined: Option<&'a CudaSlice<i32>>,
}

/// The buffers of one dense inverse of an n × n matrix of its own (the
/// hierarchy's coarsest level keeps its own in its work arrays), zeroed:
/// the work arrays, the inverse, the failed word and the barrier.
pub(super) struct DenseInverseWork {
    pub factor: CudaSlice<f64>,
    w: CudaSlice<f64>,
    pub inverse: CudaSlice<f64>,
    pub failed: CudaSlice<i32>,
    barrier: CudaSlice<u32>,
}

impl DenseInverseWork {
    pub fn new(gpu: &Gpu, n: usize) -> Result<Self, GpuError> {
        Ok(Self {
            factor: gpu.zeros(n * n)?,
            w: gpu.zeros(n * n)?,
            inverse: gpu.zeros(n * n)?,
            failed: gpu.zeros(1)?,
            barrier: gpu.zeros(2)?,
        })
    }

    /// `inverse` (a dense inverse's launches) on these buffers with the
    /// matrix `dense` and its `singular` pair.
    pub fn run<R>(
        &mut self,
        dense: &CudaSlice<f64>,
        singular: &CudaSlice<f64>,
        inverse: impl FnOnce(DenseInverseBuffers<'_>) -> R,
    ) -> R {
        let failed = self.failed.slice(0..1);
        inverse(DenseInverseBuffers {
            dense,
            singular,
            factor: &self.factor,
            w: &self.w,
            failed: &failed,
            inverse: &self.inverse,
            barrier: &mut self.barrier,
            refined: None,
        })
    }
}

/// What an error of the one-launch dense factorisation suggests.
pub(super) const DENSE_STEPS_HINT: &str =
    "set FVPOISSON_GPU_DENSE_STEPS=1 to factor dense matrices with a launch per step";

/// Whether [`dense_symmetric_inverse`] runs a launch per step
/// (`FVPOISSON_GPU_DENSE_STEPS=1`, or a device without cooperative
/// launches) rather than one cooperative launch.
fn dense_launch_per_step() -> bool {
    static STEPS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STEPS.get_or_init(|| std::env::var("FVPOISSON_GPU_DENSE_STEPS").is_ok_and(|v| v == "1"))
}

/// The inverse of the symmetric part of a dense n × n matrix on the device,
/// nothing read back (`CoarsestSolver::inverse` of the AMG's coarsest level;
/// subdomain deflation's E⁻¹): (M + Mᵀ)/2, shifted when singular, factored
/// by the blocked Cholesky (`amg_dense_diag`, then per panel of
/// [`DENSE_PANEL`] columns `amg_dense_panel` and `amg_dense_update`: many
/// blocks each), and inverted as Wᵀ W with W = L⁻¹ (blocked forward
/// substitution on the identity, then a tiled product; the host's O(n³)
/// inverse takes ~1 s at 1000 rows), projected when singular. A pivot that
/// is not positive stops the factorisation and is left in `failed` for the
/// caller to read.
///
/// The steps run in one cooperative launch (`amg_dense_inverse_fused`, a
/// block per multiprocessor, 2 + 2⌈n/32⌉ grid barriers) where the device has
/// cooperative launches, else (or with `FVPOISSON_GPU_DENSE_STEPS=1`) as a
/// launch per step, about 4 n / 32 launches (78 at 580 rows): the steps are
/// small (a 32-column panel, one tile per block), so the launches, not the
/// arithmetic, set the time. Both run the same code per block and thread
/// and write the same bits.
pub(super) fn dense_symmetric_inverse(
    gpu: &Gpu,
    n: usize,
    buffers: DenseInverseBuffers<'_>,
) -> Result<(), GpuError> {
    match dense_one_launch(gpu) {
        Some(blocks) => dense_symmetric_inverse_fused(gpu, n, buffers, blocks),
        None => dense_symmetric_inverse_steps(gpu, n, buffers),
    }
}

/// The blocks of [`dense_symmetric_inverse`]'s one cooperative launch, or
/// `None` where it runs a launch per step.
fn dense_one_launch(gpu: &Gpu) -> Option<u32> {
    gpu.cooperative_blocks()
        .filter(|_| !dense_launch_per_step())
}

/// At most this many blocks for the one-launch inverse
/// (`FVPOISSON_GPU_DENSE_BLOCKS`; default: a block per multiprocessor). Its
/// time is a chain of small steps, so fewer blocks leave the other
/// multiprocessors to work that runs beside it (a time step's re-set-up
/// runs beside the momentum solve); the bits are the same for any count.
fn dense_block_cap() -> Option<u32> {
    static CAP: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| {
        std::env::var("FVPOISSON_GPU_DENSE_BLOCKS")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&b| b > 0)
    })
}

/// [`dense_symmetric_inverse`] in one cooperative launch of `blocks` blocks.
fn dense_symmetric_inverse_fused(
    gpu: &Gpu,
    n: usize,
    buffers: DenseInverseBuffers<'_>,
    blocks: u32,
) -> Result<(), GpuError> {
    let n32 = n as i32;
    // No more blocks than the largest step has (Wᵀ W's tiles).
    let tiles = n.div_ceil(32);
    let grid = blocks
        .min((tiles * tiles).max(1) as u32)
        .min(dense_block_cap().unwrap_or(u32::MAX));
    gpu.zero(buffers.barrier)?;
    gpu.launch_cooperative("amg_dense_inverse_fused", grid, DENSE_BLOCK, 0, |args| {
        args.arg(&n32)
            .arg(buffers.dense)
            .arg(buffers.singular)
            .arg(buffers.factor)
            .arg(buffers.w)
            .arg(buffers.failed)
            .arg(buffers.inverse)
            .arg(&*buffers.barrier);
        arg_or_null(args, buffers.refined);
    })
}

/// One step of [`dense_symmetric_inverse_steps`]: `kernel` in `blocks`
/// blocks of [`DENSE_BLOCK`] threads (the block every dense kernel is
/// written for), no shared memory.
fn dense_step<'a>(
    gpu: &'a Gpu,
    kernel: &'static str,
    blocks: usize,
    push: impl FnOnce(&mut KernelArgs<'a>),
) -> Result<(), GpuError> {
    gpu.launch(kernel, blocks as u32, DENSE_BLOCK, 0, push)
}

/// [`dense_symmetric_inverse`] as a launch per step.
fn dense_symmetric_inverse_steps(
    gpu: &Gpu,
    n: usize,
    buffers: DenseInverseBuffers<'_>,
) -> Result<(), GpuError> {
    let DenseInverseBuffers {
        dense,
        singular,
        factor,
        w,
        failed,
        inverse,
        barrier: _,
        refined: _,
    } = buffers;
    let n32 = n as i32;
    gpu.launch_vector("amg_dense_symmetrise", n * n, |args| {
        args.arg(&n32).arg(dense).arg(singular).arg(factor);
    })?;
    // The factorisation's steps at the panel of column `p`.
    let factor_step = |kernel, blocks, p: &i32| {
        dense_step(gpu, kernel, blocks, |args| {
            args.arg(&n32).arg(p).arg(factor).arg(failed);
        })
    };
    factor_step("amg_dense_diag", 1, &0)?;
    let rows_per_block = DENSE_BLOCK as usize / 32;
    for p in (0..n).step_by(DENSE_PANEL) {
        let below = n.saturating_sub(p + DENSE_PANEL);
        if below == 0 {
            break;
        }
        let p32 = p as i32;
        factor_step("amg_dense_panel", below.div_ceil(rows_per_block), &p32)?;
        let tiles = below.div_ceil(32);
        factor_step("amg_dense_update", tiles * (tiles + 1) / 2, &p32)?;
    }
    // W = L⁻¹ in `w`, then M⁻¹ = Wᵀ W, projected when singular.
    gpu.launch_vector("amg_dense_identity", n * n, |args| {
        args.arg(&n32).arg(w);
    })?;
    for p in (0..n).step_by(DENSE_PANEL) {
        let p32 = p as i32;
        let columns = (p + DENSE_PANEL).min(n);
        let blocks = columns.div_ceil(DENSE_BLOCK as usize);
        dense_step(gpu, "amg_dense_trinv_panel", blocks, |args| {
            args.arg(&n32).arg(&p32).arg(factor).arg(w);
        })?;
        let below = n.saturating_sub(p + DENSE_PANEL);
        if below > 0 {
            let col_tiles = columns.div_ceil(32);
            let col_tiles32 = col_tiles as i32;
            let blocks = col_tiles * below.div_ceil(32);
            dense_step(gpu, "amg_dense_trinv_update", blocks, |args| {
                args.arg(&n32)
                    .arg(&p32)
                    .arg(&col_tiles32)
                    .arg(factor)
                    .arg(w);
            })?;
        }
    }
    let tiles = n.div_ceil(32);
    dense_step(gpu, "amg_dense_wtw", tiles * tiles, |args| {
        args.arg(&n32).arg(w).arg(inverse);
    })?;
    dense_step(gpu, "amg_dense_project", tiles, |args| {
        args.arg(&n32).arg(singular).arg(inverse);
    })
}

/// The dense inverse of one matrix and what it leaves behind, for checks
/// ([`dense_inverse_for_check`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DenseInverseCheck {
    /// The Cholesky factor L (lower triangle, row-major; the upper triangle
    /// is (M + Mᵀ)/2's).
    pub factor: Vec<f64>,
    /// The inverse Wᵀ W (row-major), projected when singular.
    pub inverse: Vec<f64>,
    /// The first pivot that is not positive + 1 (0: none; −1: a grid barrier
    /// gave up).
    pub failed: i32,
}

/// The dense inverse of the row-major n × n `m` as the AMG's coarsest level
/// forms it (`singular`: [shift and project (≠ 0) or not, the shift]), in one
/// cooperative launch (`fused`) or a launch per step; for checks (the two
/// write the same bits). `fused` on a device without cooperative launches is
/// an error.
pub fn dense_inverse_for_check(
    gpu: &Gpu,
    n: usize,
    m: &[f64],
    singular: [f64; 2],
    fused: bool,
) -> Result<DenseInverseCheck, GpuError> {
    if n == 0 || m.len() != n * n {
        return Err(GpuError::Invalid(format!(
            "a dense {n} x {n} matrix needs {} values, not {}",
            n * n,
            m.len()
        )));
    }
    let dense = gpu.upload(m)?;
    let singular = gpu.upload(&singular)?;
    let mut work = DenseInverseWork::new(gpu, n)?;
    work.run(&dense, &singular, |buffers| {
        match (fused, gpu.cooperative_blocks()) {
            (true, Some(blocks)) => dense_symmetric_inverse_fused(gpu, n, buffers, blocks),
            (true, None) => Err(GpuError::Invalid(
                "the device has no cooperative launches".into(),
            )),
            (false, _) => dense_symmetric_inverse_steps(gpu, n, buffers),
        }
    })?;
    Ok(DenseInverseCheck {
        factor: gpu.download(&work.factor)?,
        inverse: gpu.download(&work.inverse)?,
        failed: gpu.download(&work.failed)?[0],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_runs_every_cycle_with_jacobi_smoothers_and_maps_the_rest() {
        let base = AmgSettings::default();
        for cycle in CycleKind::ALL {
            for smoother in [AmgSmootherKind::Jacobi, AmgSmootherKind::L1Jacobi] {
                let s = AmgSettings {
                    cycle,
                    smoother,
                    ..base
                };
                assert_eq!(gpu_amg_settings(&s), s);
            }
        }
        for smoother in [
            AmgSmootherKind::Chebyshev,
            AmgSmootherKind::MulticolourGaussSeidel,
        ] {
            let s = AmgSettings {
                cycle: CycleKind::K,
                smoother,
                ..base
            };
            let g = gpu_amg_settings(&s);
            assert_eq!(
                (g.cycle, g.smoother),
                (CycleKind::K, AmgSmootherKind::L1Jacobi)
            );
            assert_eq!(g.sweeps, s.sweeps);
        }
    }
}
