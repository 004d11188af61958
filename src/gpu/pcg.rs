//! PCG with the vectors and the scalars on the device (`kernels/pcg.cu`),
//! Jacobi or no preconditioner, optionally on an equilibrated system; or any
//! [`DevicePreconditioner`] (smoothers, AMG, polynomials: set with
//! [`GpuCgBackend::set_preconditioner`]; flexible PCG when it is not linear).
//!
//! One iteration of the fused loop (`CgBackend::iterate`) is a direction
//! update, a mod-SELL SpMV with p · Ap, and an update of x, r (and z = D⁻¹ r
//! for Jacobi) with Σ|r| and r · z. A device preconditioner instead starts
//! each iteration: its kernels write z, then one kernel reduces r · z (and
//! z · q for flexible PCG's β), or, where the preconditioner's last kernel
//! stores r · z's partials with z (the mixed AMG cycle's last fine sweep:
//! [`DevicePreconditioner::apply_gated_with_dot`]), none: the same partials,
//! one pass over z and one launch fewer. The partial sums of the reductions are
//! added in a fixed order and the stopping rule (`StopRule`) applied on the
//! device, and the host reads the records back once every `check_interval`
//! iterations. [`LaunchMode`] says how the kernels are launched:
//!
//! - `Separate`: 5 launches per iteration, the two reductions in one-block
//!   kernels;
//! - `Folded`: 3 launches, the last block of the SpMV and of the update grid
//!   to finish reduces the partials (same order, same bits);
//! - `Graph`: `Folded`, captured once per chunk length into a CUDA graph
//!   and replayed for every chunk of that length. Iterations past the end of
//!   the chunk or past convergence are no-ops on the device (`st[ST_DONE]`),
//!   so one graph serves every shorter chunk too. The graph holds the
//!   addresses of x and of the work vectors; `new_vector` reuses freed work
//!   vectors so that the same graph serves later solves on this backend too
//!   (x must then be the same device vector, rewritten with
//!   [`GpuCgBackend::write`]), and the buffers of the device preconditioner:
//!   it serves another preconditioner with the same
//!   [`DevicePreconditioner::graph_key`] (an AMG hierarchy after a
//!   value-only re-set-up), so that a system re-assembled each time step
//!   ([`GpuCgBackend::refresh_values`]) replays the graphs of the first.
//!
//! A chunk is `check_interval` iterations, except in a solve that follows
//! another on the same backend ([`chunk_length`]): it reads back where its
//! predecessor stopped and every few iterations after, since no-op
//! iterations are not free (an AMG cycle is dozens of launches, each a few
//! microseconds even when it returns at once).
//!
//! A [`LoopProjection`] ([`GpuCgBackend::iterate_projected`]) turns the fused
//! loop into deflated PCG (`gpu::deflation`): q = A p is projected, q ← P q,
//! before p · q (`cg_operator_dot` then reduces it, folded or not), and
//! x moves by α Pᵀ p, x −= α Z a before the update adds α p, with α read
//! from the device state: the iteration of `solve::deflation::Deflated` with
//! no host round trip.
//!
//! With no preconditioner (equilibrated systems in particular) z = r is not
//! stored: the direction update reads r. On an equilibrated system the
//! residual sums are weighted by 1/s (`solve::equilibrate`), so the
//! convergence test is the original system's, as on the CPU.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use cudarc::driver::{CudaSlice, DevicePtr};

use super::graphs::GraphCache;
use super::ic::{DeviceIncompleteCholesky, IcKind};
use super::levels::in_original_rows;
use super::matrix::DeviceModSell;
use super::smooth::{DevicePreconditioner, LoopDot};
use super::{arg_or_null, check_row_count, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::solve::cpu::{check_system, openfoam_row_sums};
use crate::solve::{
    pcg, CgBackend, CgVectors, Equilibration, EquilibrationKind, Executor, InitialNorms,
    IterationRecord, LoopState, Precision, Preconditioner, PreconditionerKind, SolveError,
    SolverControls, SolverPerformance, StopRule,
};
use crate::sparse::{Csr, ModSell, Permutation, Reordered, RowOrdering};

/// Threads of the one-block reduction kernels.
const REDUCE_BLOCK: u32 = 1024;
/// Length of the device state `st` (kernels/pcg.cu ST_*).
pub(crate) const STATE_LEN: usize = 16;
/// [`LaunchMode::Auto`] uses CUDA graphs up to this many rows and `Separate`
/// above. An iteration moves ~190 bytes per row: ~6 µs at 10⁵ rows on an
/// H100, less than the host takes to launch its kernels, so small systems are
/// launch-bound (H100, `fvpoisson bench`: 132 k tets 17.7 µs with the graph
/// against 21.6 µs separate). On large systems the folded last block, which
/// reduces every block's partial alone, is the tail: at 8 M rows folded and
/// graph take 0.65 ms per iteration against 0.58 ms separate.
pub const GRAPH_MAX_ROWS: usize = 1 << 20;

/// How the fused PCG loop launches its kernels (module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchMode {
    /// `Graph` up to [`GRAPH_MAX_ROWS`] rows, `Separate` above.
    Auto,
    /// 5 launches per iteration (one-block reduction kernels).
    Separate,
    /// 3 launches per iteration (the last block of a grid reduces).
    Folded,
    /// `Folded`, captured into a CUDA graph once and replayed per chunk.
    Graph,
}

impl LaunchMode {
    /// The mode used on `n` rows (resolves `Auto`).
    pub fn resolve(self, n: usize) -> Self {
        match self {
            Self::Auto if n <= GRAPH_MAX_ROWS => Self::Graph,
            Self::Auto => Self::Separate,
            other => other,
        }
    }

    /// The mode a device loop (`loop_name` in the log) runs on `n` rows of
    /// `gpu`: resolved, and `Graph` as `Folded` while `FVPOISSON_GPU_SYNC=1`
    /// (a capture cannot synchronise after each launch).
    pub(crate) fn on_device(self, n: usize, gpu: &Gpu, loop_name: &str) -> Self {
        let mode = self.resolve(n);
        if mode == Self::Graph && gpu.syncs_each_launch() {
            log::debug!(
                "FVPOISSON_GPU_SYNC=1: {loop_name} launches its kernels directly, no CUDA graph"
            );
            return Self::Folded;
        }
        mode
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Separate => "separate",
            Self::Folded => "folded",
            Self::Graph => "graph",
        }
    }
}

/// Minimum bytes of one fused PCG iteration on n rows with `off_diagonal`
/// stored off-diagonal entries, its preconditioner's application not
/// counted: the SpMV ([`super::matrix::mod_sell_spmv_bytes`]), the
/// direction (read z, p; write p: 24n) and the update (read p, q, x, r;
/// write x, r: 48n; Jacobi also reads D⁻¹ and writes z: +16n; an
/// equilibrated system reads the residual weights 1/s: +8n).
pub fn iteration_bytes(n: usize, off_diagonal: usize, jacobi: bool, equilibrated: bool) -> f64 {
    let vectors = 72 + if jacobi { 16 } else { 0 } + if equilibrated { 8 } else { 0 };
    super::matrix::mod_sell_spmv_bytes(n, off_diagonal) + (vectors * n) as f64
}

/// Options of a GPU solve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuSolveOptions {
    /// mod-SELL slice height (multiple of 32, at most 1024).
    pub slice_height: usize,
    /// Iterations run on the device between residual read-backs.
    pub check_interval: usize,
    /// Row ordering of the mod-SELL matrix (b and x are permuted in and the
    /// solution back out).
    pub ordering: RowOrdering,
    pub launches: LaunchMode,
}

impl Default for GpuSolveOptions {
    fn default() -> Self {
        Self {
            slice_height: 512,
            check_interval: 50,
            ordering: RowOrdering::default(),
            launches: LaunchMode::Auto,
        }
    }
}

/// A vector in device memory (`None` only after a failed allocation, which
/// the backend reports through `device_status`). Shared with the backend's
/// pool when it came from `new_vector`.
pub struct GpuVector(Option<Rc<CudaSlice<f64>>>);

impl From<CudaSlice<f64>> for GpuVector {
    fn from(v: CudaSlice<f64>) -> Self {
        Self(Some(Rc::new(v)))
    }
}

impl GpuVector {
    /// The vector of a failed allocation (the backend reports the error).
    pub(crate) fn missing() -> Self {
        Self(None)
    }

    /// The device buffer (an error after a failed allocation).
    pub fn dev(&self) -> Result<&CudaSlice<f64>, GpuError> {
        self.0.as_deref().ok_or_else(|| {
            GpuError::Invalid("a device vector could not be allocated earlier".into())
        })
    }
}

/// The scaling of an equilibrated system on the device (`Equilibration`).
pub struct DeviceScaling {
    /// s_i: the original unknowns are s · y (for the mean in normFactor).
    pub scale: CudaSlice<f64>,
    /// 1/s_i: the original residual is r̂ / s.
    pub unscale: CudaSlice<f64>,
}

impl DeviceScaling {
    pub fn upload(gpu: &Gpu, e: &Equilibration) -> Result<Self, GpuError> {
        Ok(Self {
            scale: gpu.upload(e.scale())?,
            unscale: gpu.upload(e.unscale())?,
        })
    }
}

struct Scratch {
    /// Per-block partials of the vector kernels (two sums each).
    vector_partials: CudaSlice<f64>,
    /// Per-slice partials of the SpMV (p · Ap; two sums in the initial residual).
    slice_partials: CudaSlice<f64>,
    state: CudaSlice<f64>,
    records: CudaSlice<f64>,
    /// Small host-visible results.
    scalars: CudaSlice<f64>,
    /// Blocks of the running grid that have finished (ticketed launches).
    ticket: CudaSlice<u32>,
}

/// What a captured chunk holds: its length, the device addresses of x, r,
/// z, p, q, the [`LoopProjection::id`] of the projection and the
/// [`DevicePreconditioner::graph_key`] of the preconditioner (`None`:
/// Jacobi or none).
#[derive(PartialEq)]
struct ChunkKey {
    length: usize,
    vectors: [u64; 5],
    projection: Option<u64>,
    preconditioner: Option<Option<u64>>,
}

/// Captured chunks a backend keeps (one per length, vectors, projection
/// and preconditioner); the oldest goes first.
const MAX_GRAPHS: usize = 8;

/// The shortest chunk once a solve has run past the iterations its
/// predecessor took (module documentation).
const MIN_CHUNK: usize = 4;

/// Steps the fused loop inserts into each iteration to run deflated PCG
/// (module documentation; `gpu::deflation::DeviceDeflation`). Both only
/// launch kernels on the stream, each a no-op once `st[ST_DONE]` is set.
pub trait LoopProjection {
    /// Unique to this projection and its device buffers in the process (a
    /// captured graph is replayed only with the projection it holds).
    fn id(&self) -> u64;
    /// q ← P q = q − (AZ) E⁻¹ Zᵀ q, keeping a = E⁻¹ Zᵀ q.
    fn project_in_loop(&self, q: &CudaSlice<f64>, st: &CudaSlice<f64>) -> Result<(), GpuError>;
    /// x ← x − α Z a, α = `st[ST_ALPHA]`, a of the last projection.
    fn prolong_in_loop(&self, x: &CudaSlice<f64>, st: &CudaSlice<f64>) -> Result<(), GpuError>;
}

/// `CgBackend` on one GPU with a mod-SELL matrix and Jacobi (or no)
/// preconditioning, or any [`DevicePreconditioner`] (`set_preconditioner`;
/// flexible PCG when it is not linear), in the fused device loop.
pub struct GpuCgBackend<'g> {
    gpu: &'g Gpu,
    matrix: Rc<DeviceModSell>,
    inv_diag: Option<CudaSlice<f64>>,
    /// Replaces Jacobi (`set_preconditioner`).
    preconditioner: Option<Box<dyn DevicePreconditioner + 'g>>,
    /// rowSum of the original matrix (normFactor).
    row_sums: CudaSlice<f64>,
    scaling: Option<DeviceScaling>,
    check_interval: usize,
    /// Never `Auto`; `Graph` falls back to `Folded` when a capture fails.
    launches: Cell<LaunchMode>,
    scratch: RefCell<Scratch>,
    /// Work vectors handed out by `new_vector`; one is reused once only the
    /// pool holds it.
    pool: RefCell<Vec<Rc<CudaSlice<f64>>>>,
    graphs: GraphCache<ChunkKey>,
    /// Iterations of the solve in progress after its last chunk, and what
    /// the solve before it took (the expected length of this one).
    iterations_so_far: Cell<Option<usize>>,
    expected_iterations: Cell<Option<usize>>,
    failure: FirstFailure,
}

impl<'g> GpuCgBackend<'g> {
    /// `a` square, rows in the order to use; `jacobi` selects z = D⁻¹ r
    /// (the diagonal must be nonzero), else z = r. With `equilibration`, `a`
    /// is the scaled matrix S A S of that scaling (same row order).
    pub fn new(
        gpu: &'g Gpu,
        a: &Csr,
        jacobi: bool,
        equilibration: Option<&Equilibration>,
        options: &GpuSolveOptions,
    ) -> Result<Self, GpuError> {
        let m = ModSell::from_csr(a, options.slice_height).map_err(GpuError::Invalid)?;
        let matrix = DeviceModSell::upload(gpu, &m)?;
        let row_sums = match equilibration {
            Some(e) => Cow::Borrowed(e.row_sums()),
            None => Cow::Owned(openfoam_row_sums(a)),
        };
        let inv_diag = if jacobi {
            let inv: Vec<f64> = m.diag().iter().map(|d| 1.0 / d).collect();
            Some(gpu.upload(&inv)?)
        } else {
            None
        };
        let scaling = equilibration
            .map(|e| DeviceScaling::upload(gpu, e))
            .transpose()?;
        Self::from_device_matrix(
            gpu,
            matrix,
            gpu.upload(&row_sums)?,
            inv_diag,
            scaling,
            options,
        )
    }

    /// A backend on a matrix assembled on the device (`gpu::assembly`), rows
    /// in the order to use; the row sums and the inverse diagonal are
    /// computed there. `jacobi` as in [`Self::new`].
    pub fn from_resident(
        gpu: &'g Gpu,
        matrix: DeviceModSell,
        jacobi: bool,
        options: &GpuSolveOptions,
    ) -> Result<Self, GpuError> {
        Self::from_shared_resident(gpu, Rc::new(matrix), jacobi, options)
    }

    /// [`Self::from_resident`] on a matrix shared with its owner (a device
    /// system that re-assembles it in place, an AMG hierarchy built on it).
    pub fn from_shared_resident(
        gpu: &'g Gpu,
        matrix: Rc<DeviceModSell>,
        jacobi: bool,
        options: &GpuSolveOptions,
    ) -> Result<Self, GpuError> {
        let (row_sums, inv_diag) = matrix.row_sums_and_inverse_diagonal(gpu)?;
        let inv_diag = jacobi.then_some(inv_diag);
        Self::from_shared_matrix(gpu, matrix, row_sums, inv_diag, None, options)
    }

    /// The backend on a matrix already in device memory: `row_sums` is
    /// rowSum of the original matrix in OpenFOAM's order
    /// (`solve::cpu::openfoam_row_sums`), `inv_diag` 1/a_ii for Jacobi (`None`:
    /// no preconditioner), `scaling` set when `matrix` is an equilibrated
    /// S A S. Allocates the scratch space; uploads nothing else.
    pub fn from_device_matrix(
        gpu: &'g Gpu,
        matrix: DeviceModSell,
        row_sums: CudaSlice<f64>,
        inv_diag: Option<CudaSlice<f64>>,
        scaling: Option<DeviceScaling>,
        options: &GpuSolveOptions,
    ) -> Result<Self, GpuError> {
        Self::from_shared_matrix(gpu, Rc::new(matrix), row_sums, inv_diag, scaling, options)
    }

    fn from_shared_matrix(
        gpu: &'g Gpu,
        matrix: Rc<DeviceModSell>,
        row_sums: CudaSlice<f64>,
        inv_diag: Option<CudaSlice<f64>>,
        scaling: Option<DeviceScaling>,
        options: &GpuSolveOptions,
    ) -> Result<Self, GpuError> {
        let n = matrix.n;
        check_row_count(n, "the GPU solver takes")?;
        let mut lengths = vec![("row sums", row_sums.len())];
        lengths.extend(inv_diag.as_ref().map(|d| ("inverse diagonal", d.len())));
        if let Some(s) = &scaling {
            lengths.extend([("scale", s.scale.len()), ("unscale", s.unscale.len())]);
        }
        if let Some((what, len)) = lengths.into_iter().find(|&(_, len)| len != n) {
            return Err(GpuError::Invalid(format!(
                "{what} has {len} entries but the matrix has {n} rows"
            )));
        }
        let check_interval = options.check_interval.max(1);
        let scratch = Scratch {
            vector_partials: gpu.zeros(2 * vector_grid(n) as usize)?,
            slice_partials: gpu.zeros(2 * matrix.n_slices())?,
            state: gpu.zeros(STATE_LEN)?,
            records: gpu.zeros(3 * (check_interval + 1))?,
            scalars: gpu.zeros(2)?,
            ticket: gpu.zeros(1)?,
        };
        let backend = Self {
            gpu,
            matrix,
            inv_diag,
            preconditioner: None,
            row_sums,
            scaling,
            check_interval,
            launches: Cell::new(LaunchMode::Folded),
            scratch: RefCell::new(scratch),
            pool: RefCell::new(Vec::new()),
            graphs: GraphCache::new(MAX_GRAPHS),
            iterations_so_far: Cell::new(None),
            expected_iterations: Cell::new(None),
            failure: FirstFailure::default(),
        };
        backend.set_launch_mode(options.launches);
        Ok(backend)
    }

    /// How the fused loop launches (`Graph` turns into `Folded` after a
    /// failed capture).
    pub fn launch_mode(&self) -> LaunchMode {
        self.launches.get()
    }
    /// Launches the fused loop in `mode` from now on (`Auto` resolved on this
    /// backend's size; `Graph` as `Folded` while `FVPOISSON_GPU_SYNC=1`).
    pub fn set_launch_mode(&self, mode: LaunchMode) {
        self.launches
            .set(mode.on_device(self.matrix.n, self.gpu, "PCG"));
    }
    /// CUDA graphs captured so far (one per chunk length, set of vector
    /// addresses, projection and preconditioner).
    pub fn graph_captures(&self) -> usize {
        self.graphs.captures()
    }

    /// The matrix it solves with.
    pub fn matrix(&self) -> &DeviceModSell {
        &self.matrix
    }

    /// The matrix, shared with a preconditioner built on it (a smoother).
    pub fn shared_matrix(&self) -> Rc<DeviceModSell> {
        Rc::clone(&self.matrix)
    }

    /// The matrix back, e.g. to re-assemble it on the device; an error while
    /// something outside the backend still shares it.
    pub fn into_matrix(self) -> Result<DeviceModSell, GpuError> {
        let Self {
            matrix,
            preconditioner,
            ..
        } = self;
        drop(preconditioner);
        Rc::try_unwrap(matrix).map_err(|_| {
            GpuError::Invalid(
                "the PCG backend's matrix is still shared (with a smoother) and cannot be taken back"
                    .into(),
            )
        })
    }

    /// Preconditions with `p` instead of Jacobi (build the backend with
    /// `jacobi` false).
    pub fn set_preconditioner(&mut self, p: Box<dyn DevicePreconditioner + 'g>) {
        // A captured graph holds the preconditioner's kernels and buffers:
        // it is replayed with `p` only when both have the same graph key.
        if p.graph_key().is_none() {
            self.graphs.clear();
        }
        self.preconditioner = Some(p);
    }

    /// Whether a device preconditioner replaces Jacobi.
    pub fn has_preconditioner(&self) -> bool {
        self.preconditioner.is_some()
    }

    /// Drops the device preconditioner and the graphs captured with it: back
    /// to Jacobi (or none, as the backend was built).
    pub fn clear_preconditioner(&mut self) {
        self.preconditioner = None;
        self.graphs.clear();
    }

    /// The preconditioner back (e.g. to its owner, to re-set it up for new
    /// matrix values); the captured graphs stay for when it, or one with
    /// the same graph key, is set again.
    pub fn take_preconditioner(&mut self) -> Option<Box<dyn DevicePreconditioner + 'g>> {
        self.preconditioner.take()
    }

    /// After the matrix's values changed in place (a re-assembly into the
    /// same pattern): the row sums of the normFactor and Jacobi's inverse
    /// diagonal again, in their buffers, so that captured graphs stay valid.
    pub fn refresh_values(&self) -> Result<(), GpuError> {
        if self.scaling.is_some() {
            return Err(GpuError::Invalid(
                "an equilibrated PCG backend cannot take new matrix values in place; build it again"
                    .into(),
            ));
        }
        self.matrix.row_sums_and_inverse_diagonal_into(
            self.gpu,
            &self.row_sums,
            self.inv_diag.as_ref(),
        )
    }

    /// What a graph captured now records of the preconditioner.
    fn preconditioner_graph_key(&self) -> Option<Option<u64>> {
        self.preconditioner.as_ref().map(|p| p.graph_key())
    }

    /// [`CgBackend::iterate`] of deflated PCG: the fused loop with
    /// `projection`'s steps in each iteration (module documentation). The
    /// vectors are those of `solve::deflation::Deflated` over this backend,
    /// whose host steps (initial residual, corrected initial guess) the loop
    /// continues.
    pub fn iterate_projected(
        &self,
        projection: &dyn LoopProjection,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, GpuVector>,
    ) -> Vec<IterationRecord> {
        self.iterate_fused(Some(projection), rule, state, count, v)
    }

    /// `iterate`, deflated by `projection` when given.
    fn iterate_fused(
        &self,
        projection: Option<&dyn LoopProjection>,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, GpuVector>,
    ) -> Vec<IterationRecord> {
        if state.iterations == 0 {
            self.expected_iterations.set(self.iterations_so_far.get());
        }
        let expected = self.expected_iterations.get();
        let count = chunk_length(count, state.iterations, self.check_interval, expected);
        self.failure.guarded(Vec::new(), || {
            self.run_chunk(rule, state, count, &v, projection)
        })
    }

    /// a · b (`dot_partials`, then the fixed-order reduction).
    fn dot_dev(&self, a: &CudaSlice<f64>, b: &CudaSlice<f64>) -> Result<f64, GpuError> {
        self.vector_sum("dot_partials", &[a, b])
    }

    /// Σ |v| (`abs_sum_partials`, then the fixed-order reduction).
    fn sum_abs_dev(&self, v: &CudaSlice<f64>) -> Result<f64, GpuError> {
        self.vector_sum("abs_sum_partials", &[v])
    }

    /// [`vector_sum`] in this backend's buffers.
    fn vector_sum(
        &self,
        kernel: &'static str,
        vectors: &[&CudaSlice<f64>],
    ) -> Result<f64, GpuError> {
        let s = self.scratch.borrow();
        let buffers = (&s.vector_partials, &s.scalars);
        vector_sum(self.gpu, kernel, self.matrix.n, vectors, buffers)
    }

    pub fn upload(&self, v: &[f64]) -> Result<GpuVector, GpuError> {
        Ok(GpuVector(Some(Rc::new(self.gpu.upload(v)?))))
    }
    pub fn download(&self, v: &GpuVector) -> Result<Vec<f64>, GpuError> {
        self.gpu.download(v.dev()?)
    }
    /// Overwrites `v` (keeping its address, so a captured graph stays valid).
    pub fn write(&self, v: &mut GpuVector, host: &[f64]) -> Result<(), GpuError> {
        let dev = v.0.as_mut().and_then(Rc::get_mut).ok_or_else(|| {
            GpuError::Invalid("the device vector is missing or in use elsewhere".into())
        })?;
        if dev.len() != host.len() {
            return Err(GpuError::Invalid(format!(
                "writing {} values into a device vector of {}",
                host.len(),
                dev.len()
            )));
        }
        self.gpu.write(host, dev)
    }

    fn n32(&self) -> i32 {
        self.matrix.n as i32
    }

    /// Sums of the first `count` groups of `m` partials, read back.
    fn reduce(
        &self,
        s: &Scratch,
        partials: &CudaSlice<f64>,
        m: usize,
        count: usize,
    ) -> Result<Vec<f64>, GpuError> {
        read_sums(self.gpu, partials, &s.scalars, m, count)
    }

    /// z = M⁻¹ r (stored when `z` is set) with partials of r · z, or, with
    /// `z_ready`, r · z of the z a device preconditioner wrote (and z · q after
    /// it when `flexible_q` is set). `in_loop`: iteration j of the fused loop
    /// (a no-op once done; with a ticket the last block finishes it).
    fn launch_precondition(
        &self,
        r: &CudaSlice<f64>,
        z: Option<&CudaSlice<f64>>,
        z_ready: bool,
        flexible_q: Option<&CudaSlice<f64>>,
        s: &Scratch,
        in_loop: Option<(i32, Option<&CudaSlice<u32>>)>,
    ) -> Result<(), GpuError> {
        let (n, ready) = (self.n32(), i32::from(z_ready));
        let (j, ticket) = in_loop.unwrap_or((0, None));
        self.gpu
            .launch_chunked("cg_precondition", self.matrix.n, |a| {
                a.arg(&n).arg(r);
                arg_or_null(a, self.inv_diag.as_ref());
                a.arg(&ready);
                arg_or_null(a, z);
                arg_or_null(a, flexible_q);
                a.arg(&s.vector_partials);
                arg_or_null(a, in_loop.map(|_| &s.state));
                a.arg(&s.records).arg(&j);
                arg_or_null(a, ticket);
            })
    }

    /// q = A p with partials of p · q. `in_loop`: iteration j of the fused
    /// loop (a no-op once done; with a ticket the last block finishes).
    fn launch_operator(
        &self,
        p: &CudaSlice<f64>,
        q: &CudaSlice<f64>,
        s: &Scratch,
        in_loop: Option<(i32, Option<&CudaSlice<u32>>)>,
    ) -> Result<(), GpuError> {
        let n = self.n32();
        let (j, ticket) = in_loop.unwrap_or((0, None));
        self.matrix.launch_slices(self.gpu, "cg_operator", &n, |a| {
            a.arg(p).arg(q).arg(&s.slice_partials);
            arg_or_null(a, in_loop.map(|_| &s.state));
            a.arg(&s.records).arg(&j);
            arg_or_null(a, ticket);
        })
    }

    /// x += α p, r −= α q with partials of Σ|r| (weighted back to the
    /// original system when equilibrated) and, when `with_rz` is 1, of r · z
    /// for Jacobi's z (stored in `z_out` when set) or z = r. `in_loop`:
    /// iteration j of the fused loop, α from the device state; else α from
    /// `scalars[0]`.
    #[allow(clippy::too_many_arguments)]
    fn launch_update(
        &self,
        p: &CudaSlice<f64>,
        q: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        r: &CudaSlice<f64>,
        z_out: Option<&CudaSlice<f64>>,
        with_rz: i32,
        s: &Scratch,
        in_loop: Option<(i32, Option<&CudaSlice<u32>>)>,
    ) -> Result<(), GpuError> {
        let n = self.n32();
        let (j, ticket) = in_loop.unwrap_or((0, None));
        self.gpu.launch_chunked("cg_update", self.matrix.n, |a| {
            a.arg(&n);
            arg_or_null(a, in_loop.map(|_| &s.state));
            a.arg(&s.scalars).arg(p).arg(q).arg(x).arg(r);
            arg_or_null(a, self.scaling.as_ref().map(|sc| &sc.unscale));
            a.arg(&with_rz);
            arg_or_null(a, self.inv_diag.as_ref());
            arg_or_null(a, z_out);
            a.arg(&s.vector_partials).arg(&s.records).arg(&j);
            arg_or_null(a, ticket);
        })
    }

    /// The launches of one chunk of `count` iterations: 5 per iteration, or 3
    /// when `folded` (ticketed launches, the last block reduces). With a
    /// device preconditioner each iteration starts with its application and
    /// r · z (2 more launches, 1 folded); Jacobi's z comes with the update.
    /// A `projection` adds its kernels and p · q after them (module
    /// documentation): the SpMV then leaves α to `cg_operator_dot`.
    fn launch_chunk(
        &self,
        s: &Scratch,
        v: &CgVectors<'_, GpuVector>,
        count: usize,
        folded: bool,
        projection: Option<&dyn LoopProjection>,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let (n, grid) = (self.n32(), vector_grid(self.matrix.n));
        let (vm, sm) = (grid as i32, self.matrix.n_slices() as i32);
        let (x, r, p, q) = (v.x.dev()?, v.r.dev()?, v.p.dev()?, v.q.dev()?);
        let device_preconditioner = self.preconditioner.as_deref();
        // Jacobi and device preconditioners store z; with none z = r and the
        // direction reads r.
        let z_out = match (&self.inv_diag, device_preconditioner) {
            (None, None) => None,
            _ => Some(v.z.dev()?),
        };
        let direction_from = z_out.unwrap_or(r);
        let ticket = folded.then_some(&s.ticket);
        // The unfolded end of a reduction of the vector partials
        // (`cg_finish_precondition`, `cg_finish_update`): its flag, then
        // iteration j's state and records.
        let finish_vector = |kernel: &'static str, flag: i32, j: i32| {
            gpu.launch(kernel, 1, REDUCE_BLOCK, 0, |a| {
                a.arg(&vm)
                    .arg(&s.vector_partials)
                    .arg(&flag)
                    .arg(&s.state)
                    .arg(&s.records)
                    .arg(&j);
            })
        };
        if device_preconditioner.is_none() {
            self.launch_precondition(r, z_out, false, None, s, Some((0, ticket)))?;
            if !folded {
                finish_vector("cg_finish_precondition", 0, 0)?;
            }
        }
        let with_rz = i32::from(device_preconditioner.is_none());
        for j in 0..count as i32 {
            if let Some(m) = device_preconditioner {
                let z = v.z.dev()?;
                let flexible_q = (!m.is_linear()).then_some(q);
                // r · z from the preconditioner's last kernel where it can
                // (not with flexible PCG's z · q), else from cg_precondition.
                let dot = LoopDot {
                    state: &s.state,
                    records: &s.records,
                    partials: &s.vector_partials,
                    chunk_rows: VECTOR_BLOCK as i32,
                    j,
                    ticket,
                };
                let with_dot = match flexible_q {
                    None => m.apply_gated_with_dot(r, z, &dot)?,
                    Some(_) => {
                        m.apply_gated(r, z, &s.state)?;
                        false
                    }
                };
                if !with_dot {
                    self.launch_precondition(r, Some(z), true, flexible_q, s, Some((j, ticket)))?;
                }
                if !folded {
                    let flexible = i32::from(flexible_q.is_some());
                    finish_vector("cg_finish_precondition", flexible, j)?;
                }
            }
            let beta = DirectionBeta::State(&s.state);
            launch_direction(gpu, self.matrix.n, beta, direction_from, p)?;
            // p · q is reduced from the SpMV's partials, or with a
            // projection from those of `cg_operator_dot` (vector_partials:
            // free between the r · z and the update reductions).
            let (pq_partials, pq_count) = match projection {
                None => {
                    self.launch_operator(p, q, s, Some((j, ticket)))?;
                    (&s.slice_partials, sm)
                }
                Some(projection) => {
                    self.launch_operator(p, q, s, Some((j, None)))?;
                    projection.project_in_loop(q, &s.state)?;
                    gpu.launch("cg_operator_dot", grid, VECTOR_BLOCK, 0, |a| {
                        a.arg(&n)
                            .arg(p)
                            .arg(q)
                            .arg(&s.vector_partials)
                            .arg(&s.state)
                            .arg(&s.records)
                            .arg(&j);
                        arg_or_null(a, ticket);
                    })?;
                    (&s.vector_partials, vm)
                }
            };
            if !folded {
                gpu.launch("cg_finish_operator", 1, REDUCE_BLOCK, 0, |a| {
                    a.arg(&pq_count)
                        .arg(pq_partials)
                        .arg(&s.state)
                        .arg(&s.records)
                        .arg(&j);
                })?;
            }
            // x −= α Z a before cg_update adds α p: α is set and the
            // iteration not stopped (cg_update may stop the loop after it).
            if let Some(projection) = projection {
                projection.prolong_in_loop(x, &s.state)?;
            }
            let z_with_update = z_out.filter(|_| device_preconditioner.is_none());
            self.launch_update(p, q, x, r, z_with_update, with_rz, s, Some((j, ticket)))?;
            if !folded {
                finish_vector("cg_finish_update", with_rz, j)?;
            }
        }
        Ok(())
    }

    /// Replays a graph of at least `count` iterations (the device stops at
    /// `st[ST_CAP]`), capturing it first unless one of that length was
    /// captured with these vectors, projection and preconditioner; `false`
    /// (after a warning) when the capture failed and nothing ran.
    fn replay_chunk(
        &self,
        s: &Scratch,
        v: &CgVectors<'_, GpuVector>,
        count: usize,
        projection: Option<&dyn LoopProjection>,
    ) -> Result<bool, GpuError> {
        let stream = self.gpu.stream();
        let mut vectors = [0u64; 5];
        for (address, vector) in vectors.iter_mut().zip([&*v.x, &*v.r, &*v.z, &*v.p, &*v.q]) {
            *address = vector.dev()?.device_ptr(stream).0;
        }
        // MIN_CHUNK · 2^k or the check interval: a few lengths serve all.
        let length = count
            .next_power_of_two()
            .max(MIN_CHUNK)
            .min(self.check_interval)
            .max(count);
        let key = ChunkKey {
            length,
            vectors,
            projection: projection.map(|p| p.id()),
            preconditioner: self.preconditioner_graph_key(),
        };
        self.graphs.replay(self.gpu, key, "PCG", || {
            self.launch_chunk(s, v, length, true, projection)
        })
    }

    /// The fused device loop behind `iterate`: at most `count` iterations
    /// (the device stops at `st[ST_CAP]`), deflated by `projection`.
    fn run_chunk(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: &CgVectors<'_, GpuVector>,
        projection: Option<&dyn LoopProjection>,
    ) -> Result<Vec<IterationRecord>, GpuError> {
        let gpu = self.gpu;
        let host_state = chunk_state(rule, state, count);
        {
            let mut s = self.scratch.borrow_mut();
            gpu.write(&host_state, &mut s.state)?;
            gpu.write(
                &vec![f64::NAN; 3 * (self.check_interval + 1)],
                &mut s.records,
            )?;
        }
        let s = self.scratch.borrow();
        match self.launches.get() {
            LaunchMode::Graph => {
                if !self.replay_chunk(&s, v, count, projection)? {
                    self.launches.set(LaunchMode::Folded);
                    self.launch_chunk(&s, v, count, true, projection)?;
                }
            }
            mode => self.launch_chunk(&s, v, count, mode == LaunchMode::Folded, projection)?,
        }
        let records = gpu.download(&s.records)?;
        let st = gpu.download(&s.state)?;
        self.iterations_so_far.set(Some(st[1] as usize));
        Ok(chunk_records(&records, &st, state, count))
    }
}

/// Iterations of the next chunk of a solve that has completed `done`, at
/// most `count` and `check_interval`. A solve like its predecessor, which
/// took `expected` (warm-started pressure solves of a transient run, whose
/// counts change little), reads back at the iteration the predecessor
/// stopped, then in chunks from [`MIN_CHUNK`] that double as it runs on past
/// it (a solve much longer than its predecessor, e.g. pFinal to an absolute
/// tolerance after a relTol p, reads back a logarithmic number of times):
/// few iterations run past convergence as no-ops, each of which still costs
/// its launches (dozens for an AMG cycle). Without an expectation, every
/// `check_interval`. The lengths are powers of two or `count`, so that a few
/// captured graphs serve them all.
pub(crate) fn chunk_length(
    count: usize,
    done: usize,
    check_interval: usize,
    expected: Option<usize>,
) -> usize {
    let full = count.min(check_interval).max(1);
    let Some(expected) = expected else {
        return full;
    };
    let wanted = match expected.saturating_sub(done) {
        // Past the expected end: as many again as beyond it, rounded to a
        // power of two.
        0 => (done - expected).next_power_of_two(),
        // The largest power of two not past the expected end.
        remaining => 1 << remaining.ilog2(),
    };
    wanted.max(MIN_CHUNK).min(full)
}

/// The device state `st` (kernels/pcg.cu ST_*) at the start of a chunk of at
/// most `count` iterations from `state` (also `gpu::multi`'s device loop).
pub(crate) fn chunk_state(rule: &StopRule, state: &LoopState, count: usize) -> [f64; STATE_LEN] {
    let c = &rule.controls;
    [
        0.0,
        state.iterations as f64,
        f64::NAN,
        state.r_z_old,
        f64::NAN,
        state.last_residual,
        state.best,
        (state.iterations + count) as f64,
        c.tolerance,
        c.rel_tol,
        rule.initial,
        rule.norm_factor,
        c.max_iter as f64,
        c.min_iter as f64,
        state.p_q_old,
        f64::NAN,
    ]
}

/// One record per iteration a chunk started, from the device's records (3
/// per iteration) and final state `st`.
pub(crate) fn chunk_records(
    records: &[f64],
    st: &[f64],
    state: &LoopState,
    count: usize,
) -> Vec<IterationRecord> {
    let completed = (st[1] - state.iterations as f64) as usize;
    let started = if st[0] != 0.0 {
        (completed + 1).min(count)
    } else {
        count
    };
    (0..started)
        .map(|j| IterationRecord {
            r_z: records[3 * j],
            p_q: records[3 * j + 1],
            residual: records[3 * j + 2],
        })
        .collect()
}

impl Executor for GpuCgBackend<'_> {
    type Vector = GpuVector;

    fn n(&self) -> usize {
        self.matrix.n
    }

    /// A zero vector, a freed one of the pool when there is one (none after a
    /// device failure, reported by `device_status`).
    fn new_vector(&self) -> GpuVector {
        GpuVector(self.failure.guarded(None, || {
            let mut pool = self.pool.borrow_mut();
            for slot in pool.iter_mut() {
                if let Some(free) = Rc::get_mut(slot) {
                    self.gpu.zero(free)?;
                    return Ok(Some(Rc::clone(slot)));
                }
            }
            let fresh = Rc::new(self.gpu.zeros(self.matrix.n)?);
            pool.push(Rc::clone(&fresh));
            Ok(Some(fresh))
        }))
    }

    fn initialize(&self, b: &GpuVector, x: &GpuVector, r: &mut GpuVector) -> InitialNorms {
        self.failure.guarded(InitialNorms::NAN, || {
            let s = self.scratch.borrow();
            // Σx goes to st[0]; the state is rewritten before each chunk.
            let buffers = NormBuffers {
                vector_partials: &s.vector_partials,
                slice_partials: &s.slice_partials,
                x_sum: &s.state,
                scalars: &s.scalars,
            };
            initial_norms(
                self.gpu,
                &self.matrix,
                &self.row_sums,
                self.scaling.as_ref(),
                (b.dev()?, x.dev()?, r.dev()?),
                &buffers,
            )
        })
    }

    fn dot(&self, a: &GpuVector, b: &GpuVector) -> f64 {
        self.failure
            .guarded(f64::NAN, || self.dot_dev(a.dev()?, b.dev()?))
    }

    fn sum_abs(&self, v: &GpuVector) -> f64 {
        self.failure
            .guarded(f64::NAN, || self.sum_abs_dev(v.dev()?))
    }

    fn device_status(&self) -> Result<(), SolveError> {
        self.failure.status()
    }
}

/// The log name of a device PCG loop's preconditioning step: its device
/// preconditioner's, or that of the loop's own fused z = D⁻¹ r (`jacobi`)
/// or z = r.
pub(super) fn loop_preconditioner_name(
    preconditioner: Option<&dyn DevicePreconditioner>,
    jacobi: bool,
) -> Option<&'static str> {
    match preconditioner {
        Some(p) => p.preconditioner_name(),
        None => Some(crate::solve::jacobi::log_name(jacobi)),
    }
}

impl CgBackend for GpuCgBackend<'_> {
    fn precondition(&self, r: &GpuVector, z: &mut GpuVector) -> f64 {
        if let Some(p) = &self.preconditioner {
            return self.failure.guarded(f64::NAN, || {
                crate::solve::precondition::Precondition::apply(&**p, r, z)?;
                self.dot_dev(r.dev()?, z.dev()?)
            });
        }
        self.failure.guarded(f64::NAN, || {
            let s = self.scratch.borrow();
            self.launch_precondition(r.dev()?, Some(z.dev()?), false, None, &s, None)?;
            let m = vector_grid(self.matrix.n) as usize;
            Ok(self.reduce(&s, &s.vector_partials, m, 1)?[0])
        })
    }

    fn preconditioner_name(&self) -> Option<&'static str> {
        loop_preconditioner_name(self.preconditioner.as_deref(), self.inv_diag.is_some())
    }

    fn flexible_term(&self, z: &GpuVector, q: &GpuVector) -> Option<f64> {
        let p = self.preconditioner.as_ref()?;
        (!crate::solve::precondition::Precondition::is_linear(&**p)).then(|| {
            self.failure
                .guarded(f64::NAN, || self.dot_dev(z.dev()?, q.dev()?))
        })
    }

    fn update_direction(&self, beta: f64, z: &GpuVector, p: &mut GpuVector) {
        self.failure.guarded((), || {
            let beta = DirectionBeta::Host(beta);
            launch_direction(self.gpu, self.matrix.n, beta, z.dev()?, p.dev()?)
        })
    }

    fn apply_operator(&self, p: &GpuVector, q: &mut GpuVector) -> f64 {
        self.failure.guarded(f64::NAN, || {
            let s = self.scratch.borrow();
            self.launch_operator(p.dev()?, q.dev()?, &s, None)?;
            Ok(self.reduce(&s, &s.slice_partials, self.matrix.n_slices(), 1)?[0])
        })
    }

    fn update_solution(
        &self,
        alpha: f64,
        p: &GpuVector,
        q: &GpuVector,
        x: &mut GpuVector,
        r: &mut GpuVector,
    ) -> f64 {
        self.failure.guarded(f64::NAN, || {
            self.gpu
                .write(&[alpha, 0.0], &mut self.scratch.borrow_mut().scalars)?;
            let s = self.scratch.borrow();
            self.launch_update(p.dev()?, q.dev()?, x.dev()?, r.dev()?, None, 0, &s, None)?;
            let m = vector_grid(self.matrix.n) as usize;
            Ok(self.reduce(&s, &s.vector_partials, m, 1)?[0])
        })
    }

    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, GpuVector>,
    ) -> Vec<IterationRecord> {
        self.iterate_fused(None, rule, state, count, v)
    }
}

/// Solves A x = b by PCG on the GPU (Jacobi or no preconditioner), on the
/// system equilibrated by `equilibration` (scaled on the host, then
/// uploaded), after the CPU path's input checks; rows reordered by
/// `options.ordering` (invisible to the caller). The convergence test and the
/// returned performance are those of `solve::pcg` on the original system, as
/// in `solve_pcg_scaled`.
pub fn solve_pcg_gpu(
    gpu: &Gpu,
    kind: PreconditionerKind,
    s: DeviceSolve<'_>,
) -> Result<SolverPerformance, SolveError> {
    GpuSolver::new(gpu).solve(kind, s)
}

/// A x = b equilibrated by an [`EquilibrationKind`] on the host, before the
/// upload (as in `solve_pcg_scaled`): the scaling, the scaled matrix and the
/// scaled b and x (the system as given when the kind is none).
pub(crate) struct ScaledSystem {
    equilibration: Option<Equilibration>,
    scaled_matrix: Option<Csr>,
    pub b: Vec<f64>,
    pub x: Vec<f64>,
}

impl ScaledSystem {
    pub fn new(
        a: &Csr,
        equilibration: &EquilibrationKind,
        b: &[f64],
        x: &[f64],
    ) -> Result<Self, SolveError> {
        let equilibration = equilibration.build(a)?;
        let scaled_matrix = equilibration.as_ref().map(|e| e.scale_matrix(a));
        let (b, x) = match &equilibration {
            Some(e) => (e.scale_rhs(b), e.to_scaled(x)),
            None => (b.to_vec(), x.to_vec()),
        };
        Ok(Self {
            equilibration,
            scaled_matrix,
            b,
            x,
        })
    }

    /// Writes into `x` the solution of the original system whose scaled
    /// solution is `y`.
    pub fn unscale_into(&self, y: &[f64], x: &mut [f64]) {
        match &self.equilibration {
            Some(e) => x.copy_from_slice(&e.to_original(y)),
            None => x.copy_from_slice(y),
        }
    }

    /// The matrix to solve with: the scaled one, or `a` as given.
    pub fn matrix<'a>(&'a self, a: &'a Csr) -> &'a Csr {
        self.scaled_matrix.as_ref().unwrap_or(a)
    }

    /// The scaling in the device's row order (`p` maps to it, if any).
    pub fn permuted_equilibration(
        &self,
        p: Option<&Permutation>,
    ) -> Option<Cow<'_, Equilibration>> {
        match (&self.equilibration, p) {
            (Some(e), Some(p)) => Some(Cow::Owned(e.permuted(p))),
            (Some(e), None) => Some(Cow::Borrowed(e)),
            (None, _) => None,
        }
    }
}

/// The sums of the first `count` groups of `m` partials (`reduce_partials`
/// into `scalars`), read back.
pub(crate) fn read_sums(
    gpu: &Gpu,
    partials: &CudaSlice<f64>,
    scalars: &CudaSlice<f64>,
    m: usize,
    count: usize,
) -> Result<Vec<f64>, GpuError> {
    let (m32, c32) = (m as i32, count as i32);
    gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
        a.arg(&m32).arg(&c32).arg(partials).arg(scalars);
    })?;
    gpu.download_prefix(scalars, count)
}

/// One sum over the entries of `vectors` (`n` each): `kernel` (arguments
/// n, the vectors, the partials) writes one partial per block of the vector
/// grid into the first of `buffers`, which [`read_sums`] adds in its fixed
/// order through the second.
pub(crate) fn vector_sum(
    gpu: &Gpu,
    kernel: &'static str,
    n: usize,
    vectors: &[&CudaSlice<f64>],
    buffers: (&CudaSlice<f64>, &CudaSlice<f64>),
) -> Result<f64, GpuError> {
    let (partials, scalars) = buffers;
    let n32 = n as i32;
    gpu.launch_vector(kernel, n, |args| {
        args.arg(&n32);
        for &v in vectors {
            args.arg(v);
        }
        args.arg(partials);
    })?;
    Ok(read_sums(gpu, partials, scalars, vector_grid(n) as usize, 1)?[0])
}

/// The device buffers [`initial_norms`] works in: per-block partials of
/// the vector grid and of the slice grid (may be one buffer), Σx, and the
/// reduced sums.
pub(crate) struct NormBuffers<'a> {
    pub vector_partials: &'a CudaSlice<f64>,
    pub slice_partials: &'a CudaSlice<f64>,
    pub x_sum: &'a CudaSlice<f64>,
    pub scalars: &'a CudaSlice<f64>,
}

/// r = b − A x on the device and its [`InitialNorms`] (Σ|r|, normFactor from
/// `row_sums` and Σx): the start of [`GpuCgBackend`]'s and
/// `GpuKrylovBackend`'s solves. With `scaling` (an equilibrated system) Σx
/// and the residual are those of the original unknowns.
pub(crate) fn initial_norms(
    gpu: &Gpu,
    m: &DeviceModSell,
    row_sums: &CudaSlice<f64>,
    scaling: Option<&DeviceScaling>,
    vectors: (&CudaSlice<f64>, &CudaSlice<f64>, &CudaSlice<f64>),
    buffers: &NormBuffers<'_>,
) -> Result<InitialNorms, GpuError> {
    let out = buffers.scalars.device_ptr(gpu.stream()).0;
    launch_initial_norms(gpu, m, row_sums, scaling, vectors, buffers, out)?;
    let sums = gpu.download(buffers.scalars)?;
    Ok(initial_norms_of(&sums))
}

/// Where a direction update p = z + β p takes its β.
#[derive(Clone, Copy)]
pub(crate) enum DirectionBeta<'a> {
    /// Given by the host: one step driven from the host.
    Host(f64),
    /// The fused loop's device state (st[ST_BETA]; no update once the state
    /// says done).
    State(&'a CudaSlice<f64>),
}

/// p = z + β p over `n` rows (kernels/pcg.cu `cg_direction`).
pub(crate) fn launch_direction(
    gpu: &Gpu,
    n: usize,
    beta: DirectionBeta<'_>,
    z: &CudaSlice<f64>,
    p: &CudaSlice<f64>,
) -> Result<(), GpuError> {
    let n32 = n as i32;
    let (state, host_beta) = match beta {
        DirectionBeta::Host(beta) => (None, beta),
        DirectionBeta::State(state) => (Some(state), 0.0f64),
    };
    gpu.launch_vector("cg_direction", n, |a| {
        a.arg(&n32);
        arg_or_null(a, state);
        a.arg(&host_beta).arg(z).arg(p);
    })
}

/// The launches of [`initial_norms`]: its two sums (Σ|r| and the
/// normFactor's) left at device address `out` (two doubles), not read back,
/// so that several systems' starts read theirs back at once.
pub(crate) fn launch_initial_norms(
    gpu: &Gpu,
    m: &DeviceModSell,
    row_sums: &CudaSlice<f64>,
    scaling: Option<&DeviceScaling>,
    (b, x, r): (&CudaSlice<f64>, &CudaSlice<f64>, &CudaSlice<f64>),
    buffers: &NormBuffers<'_>,
    out: u64,
) -> Result<(), GpuError> {
    let (n, grid) = (m.n as i32, vector_grid(m.n));
    gpu.launch("sum_partials", grid, VECTOR_BLOCK, 0, |a| {
        a.arg(&n).arg(x);
        arg_or_null(a, scaling.map(|sc| &sc.scale));
        a.arg(buffers.vector_partials);
    })?;
    let (vm, one) = (grid as i32, 1i32);
    gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
        a.arg(&vm)
            .arg(&one)
            .arg(buffers.vector_partials)
            .arg(buffers.x_sum);
    })?;
    m.launch_slices(gpu, "cg_initial_residual", &n, |a| {
        a.arg(row_sums).arg(buffers.x_sum);
        arg_or_null(a, scaling.map(|sc| &sc.unscale));
        a.arg(x).arg(b).arg(r).arg(buffers.slice_partials);
    })?;
    let (sm, two) = (m.n_slices() as i32, 2i32);
    gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
        a.arg(&sm).arg(&two).arg(buffers.slice_partials).arg(&out);
    })
}

/// The [`InitialNorms`] of the two sums [`launch_initial_norms`] leaves.
pub(crate) fn initial_norms_of(sums: &[f64]) -> InitialNorms {
    InitialNorms {
        residual_sum: sums[0],
        norm_factor: sums[1] + crate::solve::pcg::NORM_FACTOR_SMALL,
    }
}

/// The first device error of a backend whose trait methods return none
/// (`Executor` and the method traits over it): later work is skipped, and
/// `device_status` reports it.
#[derive(Default)]
pub(crate) struct FirstFailure(RefCell<Option<GpuError>>);

impl FirstFailure {
    /// Runs `work` unless an earlier call failed; records its error.
    pub(crate) fn guarded<T>(&self, fallback: T, work: impl FnOnce() -> Result<T, GpuError>) -> T {
        if self.0.borrow().is_some() {
            return fallback;
        }
        work().unwrap_or_else(|e| {
            *self.0.borrow_mut() = Some(e);
            fallback
        })
    }

    /// Whether an error is recorded.
    pub(crate) fn failed(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// The text of the recorded error, if any.
    pub(crate) fn message(&self) -> Option<String> {
        self.0.borrow().as_ref().map(ToString::to_string)
    }

    /// Records `e` in place of any earlier error.
    pub(crate) fn record(&self, e: GpuError) {
        *self.0.borrow_mut() = Some(e);
    }

    /// The recorded error, if any, as a solve error.
    pub(crate) fn status(&self) -> Result<(), SolveError> {
        match &*self.0.borrow() {
            Some(e) => Err(SolveError::Device(e.to_string())),
            None => Ok(()),
        }
    }
}

/// Runs [`pcg`] with `backend` (its preconditioner set) on the scaled
/// system in the device's row order, from the scaled initial guess, and
/// writes the solution of the original system into `x`: the shared end of
/// the GPU solve wrappers.
fn pcg_scaled_reordered(
    backend: &GpuCgBackend<'_>,
    ordered: &Reordered<'_>,
    scaled: &ScaledSystem,
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let b_dev = backend.upload(&ordered.to_new(&scaled.b))?;
    let mut x_dev = backend.upload(&ordered.to_new(&scaled.x))?;
    let perf = pcg(backend, &b_dev, &mut x_dev, controls, field)?;
    let x_new = backend.download(&x_dev)?;
    let mut y = vec![0.0; x.len()];
    ordered.to_old_into(&x_new, &mut y);
    scaled.unscale_into(&y, x);
    Ok(perf)
}

/// One linear solve as the GPU solvers take it (`GpuSolver::solve_*`,
/// `solve_pcg_gpu*`, `solve_smooth_gpu`): `a x = b` to `controls`, reported
/// as `field`, `x` the initial guess and the solution, on the device as
/// `options` say; PCG on the system equilibrated by `equilibration` (the
/// other methods refuse one, [`Self::unequilibrated`]).
pub struct DeviceSolve<'s> {
    pub a: &'s Csr,
    pub equilibration: &'s EquilibrationKind,
    pub b: &'s [f64],
    pub x: &'s mut [f64],
    pub controls: &'s SolverControls,
    pub field: &'s str,
    pub options: &'s GpuSolveOptions,
}

impl<'s> DeviceSolve<'s> {
    /// `a x = b` to `controls` on the device as `options` say, `x` the
    /// initial guess and the solution: the system as given, reported as the
    /// solve of "x" ([`Self::equilibrated`] and [`Self::named`] change that).
    pub fn new(
        a: &'s Csr,
        b: &'s [f64],
        x: &'s mut [f64],
        controls: &'s SolverControls,
        options: &'s GpuSolveOptions,
    ) -> Self {
        Self {
            a,
            equilibration: &EquilibrationKind::None,
            b,
            x,
            controls,
            field: "x",
            options,
        }
    }

    /// The solve on the system equilibrated by `equilibration`.
    pub fn equilibrated(self, equilibration: &'s EquilibrationKind) -> Self {
        Self {
            equilibration,
            ..self
        }
    }

    /// The solve reported (logged) as that of `field`.
    pub fn named(self, field: &'s str) -> Self {
        Self { field, ..self }
    }

    /// `self`, refused with an error naming `method` when it asks for an
    /// equilibration, which only PCG applies.
    pub fn unequilibrated(self, method: &dyn std::fmt::Display) -> Result<Self, SolveError> {
        if *self.equilibration == EquilibrationKind::None {
            return Ok(self);
        }
        Err(SolveError::InvalidControls(format!(
            "equilibration is applied by PCG only, not by {method}: remove it or use PCG"
        )))
    }

    /// The checks of every PCG solve ([`check_system`]), made first.
    pub fn check(&self) -> Result<(), SolveError> {
        check_system(self.a, self.b, self.x, self.controls)
    }
}

/// GPU solves of a sequence of systems of one size (a run's linear solves):
/// the permutation of each row ordering is computed at its first use and
/// reused, so that an expensive ordering (METIS) is paid once per run.
/// Reuse is exact for any matrix of the same size (a permutation only
/// changes the storage order); it is the best order while the pattern stays
/// that of the first matrix, as an FVM system's does. The smoother solves
/// (`GpuSolver::solve_with`, `solve_smooth` in `gpu::smooth`) take their base
/// ordering from the same cache.
pub struct GpuSolver<'g> {
    gpu: &'g Gpu,
    permutations: HashMap<(RowOrdering, usize), Option<Permutation>>,
}

impl<'g> GpuSolver<'g> {
    pub fn new(gpu: &'g Gpu) -> Self {
        Self {
            gpu,
            permutations: HashMap::new(),
        }
    }

    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// The permutation of `options.ordering` (at `options.slice_height`) for
    /// `system`, computed at its first use in this run.
    pub fn permutation(
        &mut self,
        system: &Csr,
        options: &GpuSolveOptions,
    ) -> Result<Option<&Permutation>, SolveError> {
        let key = (options.ordering, options.slice_height);
        let cached = self
            .permutations
            .get(&key)
            .is_some_and(|p| p.as_ref().is_none_or(|p| p.len() == system.n_rows()));
        if !cached {
            let _ordering = crate::timings::enter(crate::timings::Phase::Ordering);
            let p = options
                .ordering
                .permutation(system, options.slice_height)
                .map_err(SolveError::Device)?;
            self.permutations.insert(key, p);
        }
        Ok(self.permutations[&key].as_ref())
    }

    /// The scaled system (`system`, from `scaled`) in the row order of
    /// `options` and a backend for it (fused Jacobi where `jacobi`), with
    /// the scaling in that order: the shared start of the GPU solve
    /// wrappers.
    fn reordered_backend<'s>(
        &'s mut self,
        system: &'s Csr,
        scaled: &ScaledSystem,
        jacobi: bool,
        options: &GpuSolveOptions,
    ) -> Result<(Reordered<'s>, GpuCgBackend<'g>), SolveError> {
        let gpu = self.gpu;
        let perm = self.permutation(system, options)?;
        let _setup = crate::timings::enter_synced(crate::timings::Phase::DeviceSetup, gpu);
        let ordered = Reordered::with_permutation(system, perm).map_err(SolveError::Device)?;
        let eq_ordered = scaled.permuted_equilibration(perm);
        let backend = GpuCgBackend::new(
            gpu,
            ordered.matrix(),
            jacobi,
            eq_ordered.as_deref(),
            options,
        )?;
        Ok((ordered, backend))
    }

    /// PCG on the system of `s` equilibrated, in the row order of
    /// `s.options`, on a backend (fused Jacobi where `jacobi`) that
    /// `precondition` gives its preconditioner (or none); `host` first
    /// checks the equilibrated system on the host (in the CPU path's order)
    /// and hands `precondition` what it found. The convergence test and the
    /// returned performance are those of the original system, as in
    /// `solve::solve_pcg_scaled`: the shared body of the PCG `solve_*`
    /// variants, each checking its system and settings first.
    pub(crate) fn pcg_reordered<H>(
        &mut self,
        s: DeviceSolve<'_>,
        jacobi: bool,
        host: impl FnOnce(&Csr) -> Result<H, SolveError>,
        precondition: impl FnOnce(
            &'g Gpu,
            &Reordered<'_>,
            &mut GpuCgBackend<'g>,
            H,
        ) -> Result<(), SolveError>,
    ) -> Result<SolverPerformance, SolveError> {
        let scaled = ScaledSystem::new(s.a, s.equilibration, s.b, s.x)?;
        let system = scaled.matrix(s.a);
        let found = host(system)?;
        let gpu = self.gpu;
        let (ordered, mut backend) = self.reordered_backend(system, &scaled, jacobi, s.options)?;
        precondition(gpu, &ordered, &mut backend, found)?;
        pcg_scaled_reordered(&backend, &ordered, &scaled, s.x, s.controls, s.field)
    }

    /// [`Self::pcg_reordered`] for a preconditioner that needs no host
    /// check and no fused Jacobi, after the checks of the system `s` and of
    /// `preconditioner`'s settings (in that order, as the CPU path):
    /// `build` makes it on the device from the reordered system and the
    /// backend (its resident matrix), and the backend takes it. The PCG of
    /// AMG, FSAI, ILU and Schwarz and the registry's algorithms.
    pub(crate) fn pcg_preconditioned(
        &mut self,
        s: DeviceSolve<'_>,
        preconditioner: &Preconditioner,
        build: impl FnOnce(
            &'g Gpu,
            &Reordered<'_>,
            &GpuCgBackend<'g>,
        ) -> Result<Box<dyn DevicePreconditioner + 'g>, SolveError>,
    ) -> Result<SolverPerformance, SolveError> {
        s.check()?;
        preconditioner.check()?;
        self.pcg_reordered(
            s,
            false,
            |_| Ok(()),
            |gpu, ordered, backend, ()| {
                let m = build(gpu, ordered, backend)?;
                backend.set_preconditioner(m);
                Ok(())
            },
        )
    }

    /// [`solve_pcg_gpu`] with the permutation from this solver's cache.
    pub fn solve(
        &mut self,
        kind: PreconditionerKind,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        self.solve_in_precision(kind, Precision::Double, s)
    }

    /// [`Self::solve`] with DIC / IC(0)'s triangular sweeps in `precision`
    /// (mixed: f32 sweeps, `DeviceIncompleteCholesky::on_device`;
    /// `Preconditioner::MixedIc`). The other kinds take double only.
    pub fn solve_in_precision(
        &mut self,
        kind: PreconditionerKind,
        precision: Precision,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        s.check()?;
        let incomplete_cholesky = IcKind::of(kind);
        if precision == Precision::Mixed && incomplete_cholesky.is_none() {
            return Err(SolveError::InvalidControls(format!(
                "precision mixed is available for the dic and ic0 preconditioners, not for {kind}"
            )));
        }
        let jacobi = match kind {
            PreconditionerKind::None => false,
            PreconditionerKind::Jacobi => true,
            _ if incomplete_cholesky.is_some() => false,
            other => {
                return Err(SolveError::Device(format!(
                    "the {other} preconditioner is not available on the GPU; use jacobi, dic, \
                     ic0 or none"
                )))
            }
        };
        // The CPU path's checks, in its order, with its row numbers (the
        // device factorisation makes those of DIC and IC(0)).
        let host = |system: &Csr| match incomplete_cholesky {
            None => kind.build(system).map(|_| ()),
            Some(_) => Ok(()),
        };
        self.pcg_reordered(s, jacobi, host, |gpu, ordered, backend, ()| {
            let Some(ic) = incomplete_cholesky else {
                return Ok(());
            };
            // Built on the device from the backend's resident matrix.
            let m = DeviceIncompleteCholesky::on_device(
                gpu,
                ordered.matrix(),
                &backend.shared_matrix(),
                ic,
                precision,
                None,
            )
            .map_err(|e| in_original_rows(e, ordered.permutation()))?;
            let (forward, backward) = m.levels();
            log::info!(
                "GPU {kind}: level-scheduled sweeps in {}, {forward} forward and {backward} \
                 backward levels ({} launches per application)",
                match m.precision() {
                    Precision::Double => "f64",
                    Precision::Mixed => "f32 (mixed precision)",
                },
                forward + backward
            );
            backend.set_preconditioner(Box::new(m));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{chunk_length, DeviceSolve, GpuSolveOptions, MIN_CHUNK};
    use crate::solve::{EquilibrationKind, SolverControls};
    use crate::sparse::Csr;

    #[test]
    fn only_pcg_takes_an_equilibration() {
        let a = Csr::from_rows(1, [vec![(0, 2.0)]]).unwrap();
        let (b, mut x) = (vec![1.0], vec![0.0]);
        let (controls, options) = (SolverControls::default(), GpuSolveOptions::default());
        let plain = DeviceSolve::new(&a, &b, &mut x, &controls, &options).named("U");
        let plain = plain
            .unequilibrated(&"PBiCGStab")
            .expect("no equilibration");
        assert_eq!(
            (plain.field, *plain.equilibration),
            ("U", EquilibrationKind::None)
        );
        let scaled = plain.equilibrated(&EquilibrationKind::Jacobi);
        let err = scaled
            .unequilibrated(&"PBiCGStab")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("PBiCGStab") && err.contains("PCG"), "{err}");
    }

    #[test]
    fn chunks_end_where_the_previous_solve_ended_then_stay_short() {
        // No expectation: every check interval, or what is left.
        assert_eq!(chunk_length(1000, 0, 50, None), 50);
        assert_eq!(chunk_length(7, 0, 50, None), 7);
        // A warm-started solve like one of 16 iterations: 16, then 4s.
        assert_eq!(chunk_length(1000, 0, 50, Some(16)), 16);
        assert_eq!(chunk_length(1000, 16, 50, Some(16)), MIN_CHUNK);
        assert_eq!(chunk_length(1000, 20, 50, Some(16)), MIN_CHUNK);
        // 23 expected: 16, then 4, 4 (the largest power of two not past it).
        assert_eq!(chunk_length(1000, 0, 50, Some(23)), 16);
        assert_eq!(chunk_length(1000, 16, 50, Some(23)), MIN_CHUNK);
        // A long solve reads back every interval until near its end.
        let mut done = 0;
        let mut lengths = Vec::new();
        while done < 296 {
            let l = chunk_length(1000, done, 50, Some(296));
            lengths.push(l);
            done += l;
        }
        assert_eq!(lengths, [50, 50, 50, 50, 50, 32, 8, 4, 4]);
        // Never past the interval, the iterations left, or below one.
        assert_eq!(chunk_length(1000, 0, 3, Some(16)), 3);
        assert_eq!(chunk_length(2, 0, 50, Some(16)), 2);
        assert_eq!(chunk_length(0, 0, 50, Some(16)), 1);
        assert_eq!(chunk_length(1000, 0, 50, Some(0)), MIN_CHUNK);
        // Far past the expectation the chunks double: 5 expected, 100 taken.
        let (mut done, mut lengths) = (0, Vec::new());
        while done < 100 {
            let l = chunk_length(1000, done, 50, Some(5));
            lengths.push(l);
            done += l;
        }
        assert_eq!(lengths, [4, 4, 4, 8, 16, 32, 50]);
    }
}
