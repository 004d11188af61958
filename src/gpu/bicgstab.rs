//! PBiCGStab as a device loop: the iteration of `solve::bicgstab::bicgstab`
//! (OpenFOAM v1912 `PBiCGStab`, right preconditioning with Jacobi or none)
//! with its vectors and scalars on the device (`kernels/krylov.cu`, `bs_*`),
//! so that a chunk of `check_interval` iterations runs with no host round
//! trip. The generic loop over `gpu::krylov::GpuKrylovBackend` reads three
//! sums back per iteration (r0 · v, Σ|s|, then t · s, t · t, Σ|r| and
//! r0 · r), each after a stream synchronisation; this loop reads its records
//! back once per chunk, as PCG's device loop does (`gpu::pcg`).
//!
//! One iteration is five launches (`Folded`; nine `Separate`): the direction
//! update with Jacobi on p, the SpMV v = A y with r0 · v, the half step
//! s = r − α v with Σ|s| and Jacobi on s, the SpMV t = A z with t · s and
//! t · t, and the update of x and r with Σ|r| and r0 · r. The scalars
//! (ρ, ρ_old, α, ω, β, the last and best residuals, the controls) live in
//! the device state `st` (`BS_*`); each reduction is finished by the last
//! block of its grid (or a one-block kernel), which applies the generic
//! loop's tests: the breakdowns (|r0 · r| or |ω| below `VSMALL`, r0 · v not
//! finite or zero, t · t not above zero), the half-step convergence test on
//! s (x += α y and stop), a residual that is not finite or diverges by
//! [`DIVERGENCE_FACTOR`](crate::solve::pcg::DIVERGENCE_FACTOR), and
//! `tolerance`, `relTol`, `maxIter`, `minIter`.
//! Once the state says done, every later launch returns at once, except the
//! update of the iteration that stopped at its half step, which adds α y.
//!
//! **Lanes.** One loop solves up to [`MAX_LANES`] systems that share a
//! matrix's pattern and off-diagonal values and differ in the diagonal, the
//! right-hand side and x ([`DeviceBicgstab::solve_lanes`]: the momentum
//! components of `gpu::simple`). Each lane has its own vectors, state,
//! records and stopping tests; the same five launches serve every lane (the
//! vector kernels one grid row per lane, the SpMV one block per slice that
//! reads the slice's codes and values once for all lanes), and the host
//! reads every lane's records back in one transfer per chunk; the lanes'
//! row sums and Jacobi are one pass over the matrix at the start
//! (`bs_lane_row_sums`), their initial residuals one launch each. A lane's
//! arithmetic is that of the loop on its system alone, bit for bit; a lane
//! that stops is skipped by the later launches while the others go on.
//!
//! Each step's sum is recorded per iteration, and the host replays the
//! generic loop's scalar logic on the records ([`HostReplay`], line for
//! line): it produces the same [`SolverPerformance`], the same `--log debug`
//! line per iteration and the same [`SolveError`]s with the same iteration
//! numbers, and checks that the device stopped where the host rule stops.
//! The element formulas are the generic kernels' and the partial sums are
//! added in the same fixed order, so the iterates are the generic loop's
//! bit for bit, run to run. Chunks are captured into CUDA graphs
//! ([`LaunchMode`], as in `gpu::pcg`), one per matrix, diagonals, x and
//! lane count, with the fallback to direct launches when a capture fails
//! and under `FVPOISSON_GPU_SYNC=1`.

use std::cell::{Cell, RefCell};

use cudarc::driver::{CudaSlice, DevicePtr};

use super::graphs::GraphCache;
use super::matrix::DeviceModSell;
use super::pcg::{
    initial_norms_of, launch_initial_norms, GpuSolveOptions, LaunchMode, NormBuffers,
};
use super::{
    arg_or_null, check_row_count, chunked_vector_grid, vector_grid, Gpu, GpuError, NULL,
    VECTOR_BLOCK,
};
use crate::solve::bicgstab::VSMALL;
use crate::solve::pcg::{check_divergence, check_residual, record, solver_name};
use crate::solve::{SolveError, SolverControls, SolverPerformance, StopRule};

const NAME: &str = "PBiCGStab";
/// The tallest slice `bs_operator` runs as one block (its launch bounds).
const MAX_SLICE_HEIGHT: usize = 512;
/// Threads of the one-block finishing kernel.
const REDUCE_BLOCK: u32 = 1024;
/// Captured chunk graphs kept (the momentum solvers `U` and `UFinal`, a
/// few single solves).
const GRAPH_CACHE: usize = 4;
/// Systems one loop solves at once (kernels/krylov.cu BS_MAX_LANES).
pub const MAX_LANES: usize = 3;
/// Device addresses per lane in the lane table (kernels/krylov.cu BsLane).
const LANE_ENTRIES: usize = 14;

/// Slots of the device state `st` (kernels/krylov.cu BS_*).
mod slot {
    pub const DONE: usize = 0;
    pub const ITER: usize = 1;
    pub const RHO: usize = 2;
    pub const BEST: usize = 8;
    pub const LAST: usize = 7;
    pub const CAP: usize = 9;
    pub const TOLERANCE: usize = 10;
    pub const REL_TOL: usize = 11;
    pub const INITIAL: usize = 12;
    pub const NORM_FACTOR: usize = 13;
    pub const MAX_ITER: usize = 14;
    pub const MIN_ITER: usize = 15;
    pub const HALF_AT: usize = 17;
    pub const LEN: usize = 18;
}

/// Records: one header value (r0 · r of the prologue), then per chunk
/// iteration r0 · v, Σ|s|, t · s, t · t, Σ|r|, r0 · r (kernels/krylov.cu
/// BS_REC_*).
const REC_HEAD: usize = 1;
const REC: usize = 6;
const REC_R0_V: usize = 0;
const REC_S_SUM: usize = 1;
const REC_T_S: usize = 2;
const REC_T_T: usize = 3;
const REC_R_SUM: usize = 4;
const REC_RHO: usize = 5;

/// Steps of `bs_finish` (kernels/krylov.cu BS_STEP_*).
const STEP_START: i32 = 0;
const STEP_R0_V: i32 = 1;
const STEP_HALF: i32 = 2;
const STEP_T: i32 = 3;
const STEP_UPDATE: i32 = 4;

/// One lane's work vectors (names of `solve::bicgstab`) and scratch; its
/// state and records are its slices of [`Shared`]'s.
struct Lane {
    r: CudaSlice<f64>,
    r0: CudaSlice<f64>,
    p: CudaSlice<f64>,
    v: CudaSlice<f64>,
    y: CudaSlice<f64>,
    s: CudaSlice<f64>,
    z: CudaSlice<f64>,
    t: CudaSlice<f64>,
    /// 1/a_ii (Jacobi) and rowSum of the matrix (normFactor).
    inv_diag: CudaSlice<f64>,
    row_sums: CudaSlice<f64>,
    /// Per-block partials of the vector kernels (two sums).
    vector_partials: CudaSlice<f64>,
    /// Per-slice partials of the SpMVs (two sums).
    slice_partials: CudaSlice<f64>,
    /// Blocks of the lane's running grid that have finished (ticketed
    /// vector launches).
    ticket: CudaSlice<u32>,
    /// Σx of the normFactor.
    x_sum: CudaSlice<f64>,
}

impl Lane {
    fn new(gpu: &Gpu, n: usize, grid: usize, slices: usize) -> Result<Self, GpuError> {
        Ok(Self {
            r: gpu.zeros(n)?,
            r0: gpu.zeros(n)?,
            p: gpu.zeros(n)?,
            v: gpu.zeros(n)?,
            y: gpu.zeros(n)?,
            s: gpu.zeros(n)?,
            z: gpu.zeros(n)?,
            t: gpu.zeros(n)?,
            inv_diag: gpu.zeros(n)?,
            row_sums: gpu.zeros(n)?,
            vector_partials: gpu.zeros(2 * grid.max(1))?,
            slice_partials: gpu.zeros(2 * slices.max(1))?,
            ticket: gpu.zeros(1)?,
            x_sum: gpu.zeros(1)?,
        })
    }

    /// The lane's entry of the lane table (kernels/krylov.cu BsLane, in its
    /// order): its buffers' device addresses, `state` and `records` its
    /// slices of the shared ones.
    fn table_entry(&self, gpu: &Gpu, state: u64, records: u64) -> [u64; LANE_ENTRIES] {
        let stream = gpu.stream();
        let at = |b: &CudaSlice<f64>| b.device_ptr(stream).0;
        [
            at(&self.r),
            at(&self.r0),
            at(&self.p),
            at(&self.v),
            at(&self.y),
            at(&self.s),
            at(&self.z),
            at(&self.t),
            at(&self.inv_diag),
            at(&self.vector_partials),
            at(&self.slice_partials),
            state,
            records,
            self.ticket.device_ptr(stream).0,
        ]
    }
}

/// What every lane's launches share: the lanes' states, records and
/// initial norms (lane after lane: one transfer each way per chunk, one
/// read-back of the starts), the SpMV's ticket and the lane table.
struct Shared {
    states: CudaSlice<f64>,
    records: CudaSlice<f64>,
    norms: CudaSlice<f64>,
    operator_ticket: CudaSlice<u32>,
    table: CudaSlice<u64>,
}

/// The device addresses a chunk's launches take beyond the solver's own
/// buffers: the matrix's slots, each lane's diagonal and x (`NULL` past
/// the lane count), the lane count and Jacobi or none.
#[derive(Clone, Copy, PartialEq)]
struct ChunkKey {
    slice_ptr: u64,
    codes: u64,
    values: u64,
    diags: [u64; MAX_LANES],
    xs: [u64; MAX_LANES],
    lanes: usize,
    jacobi: bool,
    /// Iterations of the chunk (at most `check_interval`).
    iterations: usize,
}

/// What the host replay of a chunk found.
enum Replayed {
    /// The loop goes on (the chunk ran all its iterations).
    Continues,
    /// The loop stopped; `Some(j)`: at the half step of chunk iteration j.
    Stopped(Option<usize>),
}

/// PBiCGStab on one GPU for systems of one size (module documentation):
/// its work vectors, scratch and captured chunks are kept between solves.
pub struct DeviceBicgstab<'g> {
    gpu: &'g Gpu,
    n: usize,
    slice_height: usize,
    check_interval: usize,
    /// Never `Auto`; `Graph` falls back to `Folded` when a capture fails.
    launches: Cell<LaunchMode>,
    lanes: Vec<Lane>,
    shared: RefCell<Shared>,
    graphs: GraphCache<ChunkKey>,
}

/// Minimum bytes the loop moves on a matrix of n rows and `off_diagonal`
/// stored off-diagonal entries for lanes that ran `iterations` each, Jacobi
/// (`jacobi`) or none. An iteration: two SpMVs, each reading the shared
/// off-diagonal values and codes once for the lanes still running (12 per
/// slot) and per lane its diagonal, the input and the output (24n); per
/// lane r0 and s read for the SpMVs' dots (16n), the direction (r, v, p →
/// p: 32n; Jacobi: 1/a_ii read, y written, +16n), the half step (r, v → s:
/// 24n; Jacobi +16n) and the update (y, z, s, t, r0, x → x, r: 64n).
pub fn loop_bytes(n: usize, off_diagonal: usize, iterations: &[usize], jacobi: bool) -> f64 {
    let v = 8.0 * n as f64;
    let jacobi_vectors = if jacobi { 2.0 * v } else { 0.0 };
    let per_lane =
        2.0 * 3.0 * v + 2.0 * v + (4.0 * v + jacobi_vectors) + (3.0 * v + jacobi_vectors) + 8.0 * v;
    let shared = 2.0 * 12.0 * off_diagonal as f64;
    let longest = iterations.iter().copied().max().unwrap_or(0);
    let lane_iterations: usize = iterations.iter().sum();
    shared * longest as f64 + per_lane * lane_iterations as f64
}

impl<'g> DeviceBicgstab<'g> {
    /// The loop for matrices of `n` rows in mod-SELL slices of
    /// `options.slice_height` rows, reading back every
    /// `options.check_interval` iterations, launched as `options.launches`:
    /// one system at a time.
    pub fn new(gpu: &'g Gpu, n: usize, options: &GpuSolveOptions) -> Result<Self, GpuError> {
        Self::with_lanes(gpu, n, 1, options)
    }

    /// [`Self::new`] for up to `lanes` (1 to [`MAX_LANES`]) systems at once
    /// ([`Self::solve_lanes`]).
    pub fn with_lanes(
        gpu: &'g Gpu,
        n: usize,
        lanes: usize,
        options: &GpuSolveOptions,
    ) -> Result<Self, GpuError> {
        check_row_count(n, "the GPU PBiCGStab takes")?;
        if !(1..=MAX_LANES).contains(&lanes) {
            return Err(GpuError::Invalid(format!(
                "the GPU PBiCGStab solves 1 to {MAX_LANES} systems at once, not {lanes}"
            )));
        }
        if options.slice_height > MAX_SLICE_HEIGHT {
            return Err(GpuError::Invalid(format!(
                "the GPU PBiCGStab's product runs a slice per block of at most \
                 {MAX_SLICE_HEIGHT} threads (kernels/bicgstab.cu bs_operator); slices of {} rows \
                 are too tall: use a slice height of at most {MAX_SLICE_HEIGHT}",
                options.slice_height
            )));
        }
        let check_interval = options.check_interval.max(1);
        let slices = n.div_ceil(options.slice_height.max(1));
        let grid = vector_grid(n) as usize;
        let lanes = (0..lanes)
            .map(|_| Lane::new(gpu, n, grid, slices))
            .collect::<Result<Vec<_>, _>>()?;
        let rec_len = REC_HEAD + REC * check_interval;
        let states = gpu.zeros(slot::LEN * lanes.len())?;
        let records = gpu.zeros(rec_len * lanes.len())?;
        let mut table = Vec::with_capacity(LANE_ENTRIES * lanes.len());
        {
            let stream = gpu.stream();
            let (st0, rec0) = (states.device_ptr(stream).0, records.device_ptr(stream).0);
            for (c, lane) in lanes.iter().enumerate() {
                let st = st0 + (8 * slot::LEN * c) as u64;
                let rec = rec0 + (8 * rec_len * c) as u64;
                table.extend_from_slice(&lane.table_entry(gpu, st, rec));
            }
        }
        let shared = Shared {
            states,
            records,
            norms: gpu.zeros(2 * lanes.len())?,
            operator_ticket: gpu.zeros(1)?,
            table: gpu.upload(&table)?,
        };
        let solver = Self {
            gpu,
            n,
            slice_height: options.slice_height,
            check_interval,
            launches: Cell::new(LaunchMode::Folded),
            lanes,
            shared: RefCell::new(shared),
            graphs: GraphCache::new(GRAPH_CACHE),
        };
        solver.set_launch_mode(options.launches);
        Ok(solver)
    }

    /// Rows of the systems it solves.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Systems it solves at once at most.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// How the chunks are launched (`Graph` turns into `Folded` after a
    /// failed capture).
    pub fn launch_mode(&self) -> LaunchMode {
        self.launches.get()
    }

    /// Launches the chunks in `mode` from now on (`Auto` resolved on the
    /// size; `Graph` as `Folded` while `FVPOISSON_GPU_SYNC=1`).
    pub fn set_launch_mode(&self, mode: LaunchMode) {
        self.launches.set(mode.on_device(self.n, self.gpu, NAME));
    }

    /// CUDA graphs captured so far.
    pub fn graph_captures(&self) -> usize {
        self.graphs.captures()
    }

    /// Solves `matrix` x = b by PBiCGStab from the initial guess in `x`
    /// (device vectors of n values, rows in the matrix's order), Jacobi
    /// preconditioned when `jacobi` (else none): `solve::bicgstab::bicgstab`'s
    /// result, log lines and errors. `field` names the unknown in the log.
    pub fn solve(
        &self,
        matrix: &DeviceModSell,
        jacobi: bool,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        controls: &SolverControls,
        field: &str,
    ) -> Result<SolverPerformance, SolveError> {
        let launched = self.launch_start_lane(0, matrix, jacobi, b, x, controls);
        let starts = self.starts(vec![launched], controls);
        let diag = matrix.diag.device_ptr(self.gpu.stream()).0;
        let solved = self.run_lanes(matrix, &[diag], jacobi, &[x], starts, &[field], controls);
        solved.into_iter().next().unwrap_or_else(|| {
            Err(SolveError::from(GpuError::Invalid(
                "the PBiCGStab loop returned no result".into(),
            )))
        })
    }

    /// Solves the systems (`matrix`'s pattern and off-diagonal values with
    /// diagonal `diagonals[c]`) x_c = b_c at once, one lane each (as many
    /// as `diagonals`, at most [`Self::lanes`]); each x_c holds its initial
    /// guess. Lane c's result, log lines and errors are those of
    /// [`Self::solve`] on its system alone, its iterates the same bits.
    /// `matrix.diag` is used as scratch (swapped with each lane's diagonal
    /// for its initial residual) and is given back unchanged.
    #[allow(clippy::too_many_arguments)]
    pub fn solve_lanes(
        &self,
        matrix: &mut DeviceModSell,
        diagonals: &mut [CudaSlice<f64>],
        jacobi: bool,
        b: &[&CudaSlice<f64>],
        x: &[&CudaSlice<f64>],
        controls: &SolverControls,
        fields: &[&str],
    ) -> Vec<Result<SolverPerformance, SolveError>> {
        let k = diagonals.len();
        if let Some(d) = diagonals.iter().find(|d| d.len() != self.n) {
            let e = GpuError::Invalid(format!(
                "a diagonal has {} entries but the matrix has {} rows",
                d.len(),
                self.n
            ));
            return vec![Err(e.into())];
        }
        if k > self.lanes.len() || b.len() != k || x.len() != k || fields.len() != k {
            let e = GpuError::Invalid(format!(
                "the GPU PBiCGStab has {} lanes and got {k} diagonals, {} right-hand sides, \
                 {} initial guesses and {} names",
                self.lanes.len(),
                b.len(),
                x.len(),
                fields.len()
            ));
            return vec![Err(e.into())];
        }
        let mut launched = Vec::with_capacity(k);
        // Every lane's row sums (and Jacobi) in one pass over the matrix where
        // every lane's system is valid; else lane by lane, each with its own
        // error.
        let valid = controls.validate().is_ok()
            && (0..k).all(|c| self.check_sizes(matrix, b[c], x[c]).is_ok());
        if valid && k > 1 {
            let sums = self.launch_lane_row_sums(matrix, diagonals, jacobi);
            for c in 0..k {
                std::mem::swap(&mut matrix.diag, &mut diagonals[c]);
                launched.push(match &sums {
                    Ok(()) => self.launch_initial_norms_lane(c, matrix, b[c], x[c]),
                    Err(e) => Err(SolveError::Device(e.to_string())),
                });
                std::mem::swap(&mut matrix.diag, &mut diagonals[c]);
            }
        } else {
            for c in 0..k {
                std::mem::swap(&mut matrix.diag, &mut diagonals[c]);
                launched.push(self.launch_start_lane(c, matrix, jacobi, b[c], x[c], controls));
                std::mem::swap(&mut matrix.diag, &mut diagonals[c]);
            }
        }
        let starts = self.starts(launched, controls);
        let stream = self.gpu.stream();
        let diags: Vec<u64> = diagonals.iter().map(|d| d.device_ptr(stream).0).collect();
        self.run_lanes(matrix, &diags, jacobi, x, starts, fields, controls)
    }

    /// Lane c's start on `matrix` (with the lane's diagonal): its row sums
    /// and Jacobi, r = b − A x and the sums of the initial norms, left in
    /// the lane's slot of the shared norms ([`Self::starts`] reads them).
    fn launch_start_lane(
        &self,
        c: usize,
        matrix: &DeviceModSell,
        jacobi: bool,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        controls: &SolverControls,
    ) -> Result<(), SolveError> {
        controls.validate()?;
        self.check_sizes(matrix, b, x)?;
        let lane = &self.lanes[c];
        let inv_diag = jacobi.then_some(&lane.inv_diag);
        matrix.row_sums_and_inverse_diagonal_into(self.gpu, &lane.row_sums, inv_diag)?;
        self.launch_initial_norms_lane(c, matrix, b, x)
    }

    /// The row sums and (`jacobi`) inverse diagonals of lanes 0..k, k the
    /// number of `diagonals` (lane c's matrix: `matrix`'s slots with
    /// diagonal `diagonals[c]`), in one launch that reads the slots once
    /// (`bs_lane_row_sums`: `modsell_row_sums`'s bits per lane).
    fn launch_lane_row_sums(
        &self,
        matrix: &DeviceModSell,
        diagonals: &[CudaSlice<f64>],
        jacobi: bool,
    ) -> Result<(), GpuError> {
        let k = diagonals.len();
        if k > self.lanes.len() || diagonals.iter().any(|d| d.len() != self.n) {
            return Err(GpuError::Invalid(format!(
                "{k} lane diagonals for {} lanes of {} rows",
                self.lanes.len(),
                self.n
            )));
        }
        let (n, k_i) = (self.n as i32, k as i32);
        let lane = |c: usize| (c < k).then(|| &self.lanes[c]);
        self.gpu.launch(
            "bs_lane_row_sums",
            matrix.n_slices() as u32,
            matrix.slice_height as u32,
            0,
            |a| {
                a.arg(&n)
                    .arg(&matrix.slice_ptr)
                    .arg(&matrix.codes)
                    .arg(&matrix.values)
                    .arg(&k_i);
                for c in 0..MAX_LANES {
                    arg_or_null(a, diagonals.get(c));
                }
                for c in 0..MAX_LANES {
                    arg_or_null(a, lane(c).map(|l| &l.row_sums));
                }
                for c in 0..MAX_LANES {
                    arg_or_null(a, lane(c).filter(|_| jacobi).map(|l| &l.inv_diag));
                }
            },
        )
    }

    /// Lane c's r = b − A x and the sums of its initial norms on `matrix`
    /// (with the lane's diagonal), its row sums already computed, left in
    /// the lane's slot of the shared norms ([`Self::starts`] reads them).
    fn launch_initial_norms_lane(
        &self,
        c: usize,
        matrix: &DeviceModSell,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
    ) -> Result<(), SolveError> {
        let lane = &self.lanes[c];
        let shared = self.shared.borrow();
        let buffers = NormBuffers {
            vector_partials: &lane.vector_partials,
            slice_partials: &lane.slice_partials,
            x_sum: &lane.x_sum,
            scalars: &shared.norms,
        };
        let norms = shared.norms.device_ptr(self.gpu.stream()).0;
        launch_initial_norms(
            self.gpu,
            matrix,
            &lane.row_sums,
            None,
            (b, x, &lane.r),
            &buffers,
            norms + (16 * c) as u64,
        )
        .map_err(SolveError::from)
    }

    /// The lanes' initial norms (one read-back for all) and, per lane, the
    /// performance so far and the stopping rule when it iterates.
    fn starts(
        &self,
        launched: Vec<Result<(), SolveError>>,
        controls: &SolverControls,
    ) -> Vec<Result<(SolverPerformance, Option<StopRule>), SolveError>> {
        let sums = if launched.iter().any(Result::is_ok) {
            self.gpu
                .download(&self.shared.borrow().norms)
                .map_err(|e| e.to_string())
        } else {
            Ok(Vec::new())
        };
        launched
            .into_iter()
            .enumerate()
            .map(|(c, launched)| {
                launched?;
                let sums = sums.as_ref().map_err(|e| SolveError::Device(e.clone()))?;
                let (perf, run) = initial_norms_of(&sums[2 * c..2 * c + 2]).start(controls)?;
                Ok((perf, run.map(|(_, rule)| rule)))
            })
            .collect()
    }

    fn check_sizes(
        &self,
        matrix: &DeviceModSell,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        if matrix.n != self.n || matrix.slice_height != self.slice_height {
            return Err(GpuError::Invalid(format!(
                "the GPU PBiCGStab was set up for {} rows in slices of {}, the matrix has {} in \
                 slices of {}",
                self.n, self.slice_height, matrix.n, matrix.slice_height
            )));
        }
        for (what, len) in [("b", b.len()), ("x", x.len())] {
            if len != self.n {
                return Err(GpuError::Invalid(format!(
                    "{what} has {len} entries but the matrix has {} rows",
                    self.n
                )));
            }
        }
        Ok(())
    }

    /// The loop after the lanes' starts: chunks of every lane still
    /// iterating until the host replay stops each (its performance logged,
    /// or the generic loop's error). `diags` and `x` per lane.
    #[allow(clippy::too_many_arguments)]
    fn run_lanes(
        &self,
        matrix: &DeviceModSell,
        diags: &[u64],
        jacobi: bool,
        x: &[&CudaSlice<f64>],
        starts: Vec<Result<(SolverPerformance, Option<StopRule>), SolveError>>,
        fields: &[&str],
        controls: &SolverControls,
    ) -> Vec<Result<SolverPerformance, SolveError>> {
        let stream = self.gpu.stream();
        let mut key = ChunkKey {
            slice_ptr: matrix.slice_ptr.device_ptr(stream).0,
            codes: matrix.codes.device_ptr(stream).0,
            values: matrix.values.device_ptr(stream).0,
            diags: [NULL; MAX_LANES],
            xs: [NULL; MAX_LANES],
            lanes: starts.len(),
            jacobi,
            iterations: self.check_interval,
        };
        for c in 0..starts.len() {
            key.diags[c] = diags[c];
            key.xs[c] = x[c].device_ptr(stream).0;
        }
        let count = self.check_interval;
        // No chunk runs past the iteration where maxIter (or minIter, if
        // larger) stops every lane: its launches would all be no-ops.
        let last = controls.max_iter.max(controls.min_iter);
        let mut lanes: Vec<LaneRun> = starts
            .into_iter()
            .zip(fields)
            .map(|(start, &field)| LaneRun::new(start, field))
            .collect();
        let solver = solver_name(Some(crate::solve::jacobi::log_name(jacobi)), NAME);
        let mut first = true;
        loop {
            let mut any = false;
            for lane in &mut lanes {
                any |= lane.wants_chunk(first);
            }
            if !any {
                break;
            }
            let done = lanes
                .iter()
                .filter(|lane| lane.running)
                .map(LaneRun::host_iterations)
                .min()
                .unwrap_or(0);
            key.iterations = count.min(last.saturating_sub(done)).max(1);
            match self.run_chunk(&key, &lanes, first) {
                Ok((records, states)) => {
                    let rec_len = REC_HEAD + REC * count;
                    for (c, lane) in lanes.iter_mut().enumerate() {
                        let st = &states[slot::LEN * c..slot::LEN * (c + 1)];
                        let rec = &records[rec_len * c..rec_len * (c + 1)];
                        lane.take_chunk(first, rec, st, key.iterations);
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    for lane in lanes.iter_mut().filter(|lane| lane.running) {
                        lane.fail(SolveError::Device(message.clone()));
                    }
                }
            }
            first = false;
        }
        lanes
            .into_iter()
            .zip(fields)
            .map(|(lane, field)| {
                lane.finish()
                    .inspect(|perf| perf.log(&solver, "iterations", field, controls))
            })
            .collect()
    }

    /// One chunk of every lane that `wants` it (the others marked done in
    /// their state): the states written, the prologue when `first`, the
    /// chunk launched, the records and states read back (lane after lane).
    fn run_chunk(
        &self,
        key: &ChunkKey,
        lanes: &[LaneRun],
        first: bool,
    ) -> Result<(Vec<f64>, Vec<f64>), GpuError> {
        let gpu = self.gpu;
        let count = self.check_interval;
        let mut states = Vec::with_capacity(slot::LEN * self.lanes.len());
        for c in 0..self.lanes.len() {
            match lanes.get(c) {
                Some(lane) if lane.running => {
                    let mut st = lane.st;
                    st[slot::DONE] = 0.0;
                    st[slot::CAP] = (lane.host_iterations() + key.iterations) as f64;
                    st[slot::HALF_AT] = -1.0;
                    states.extend_from_slice(&st);
                }
                _ => {
                    let mut st = [f64::NAN; slot::LEN];
                    st[slot::DONE] = 1.0;
                    states.extend_from_slice(&st);
                }
            }
        }
        let mut shared = self.shared.borrow_mut();
        gpu.write(&states, &mut shared.states)?;
        let rec_len = REC_HEAD + REC * count;
        gpu.write(
            &vec![f64::NAN; rec_len * self.lanes.len()],
            &mut shared.records,
        )?;
        drop(shared);
        let shared = self.shared.borrow();
        if first {
            self.launch_start(&shared, key, self.launches.get() != LaunchMode::Separate)?;
        }
        self.launch_or_replay(&shared, key)?;
        Ok((
            gpu.download(&shared.records)?,
            gpu.download(&shared.states)?,
        ))
    }

    /// The prologue r0 = r, ρ = r0 · r and the first iteration's tests.
    fn launch_start(&self, s: &Shared, key: &ChunkKey, folded: bool) -> Result<(), GpuError> {
        let (n, grid) = (self.n as i32, vector_grid(self.n));
        let (folded_i, chunked) = (i32::from(folded), chunked_vector_grid(self.n));
        self.gpu.launch_grid(
            "bs_start",
            (chunked, key.lanes as u32),
            VECTOR_BLOCK,
            0,
            |a| {
                a.arg(&n).arg(&s.table).arg(&folded_i);
            },
        )?;
        if !folded {
            self.launch_finish(s, key, STEP_START, grid as i32, false, 0)?;
        }
        Ok(())
    }

    /// One-block-per-lane `bs_finish` of `step` of chunk iteration j over m
    /// partials (the lanes' slice partials when `slices`).
    fn launch_finish(
        &self,
        s: &Shared,
        key: &ChunkKey,
        step: i32,
        m: i32,
        slices: bool,
        j: i32,
    ) -> Result<(), GpuError> {
        let slices = i32::from(slices);
        self.gpu
            .launch_grid("bs_finish", (1, key.lanes as u32), REDUCE_BLOCK, 0, |a| {
                a.arg(&step).arg(&m).arg(&slices).arg(&s.table).arg(&j);
            })
    }

    /// Runs one chunk in the current launch mode: the graph of `key`
    /// (captured at its first use), or direct launches.
    fn launch_or_replay(&self, s: &Shared, key: &ChunkKey) -> Result<(), GpuError> {
        match self.launches.get() {
            LaunchMode::Graph => {
                let replayed = self
                    .graphs
                    .replay(self.gpu, *key, NAME, || self.launch_chunk(s, key, true))?;
                if !replayed {
                    self.launches.set(LaunchMode::Folded);
                    self.launch_chunk(s, key, true)?;
                }
                Ok(())
            }
            mode => self.launch_chunk(s, key, mode == LaunchMode::Folded),
        }
    }

    /// The launches of one chunk of `check_interval` iterations for every
    /// lane: 5 per iteration, or 9 when not `folded` (a one-block-per-lane
    /// `bs_finish` after each reduction). Without a preconditioner y is p
    /// and z is s.
    fn launch_chunk(&self, s: &Shared, key: &ChunkKey, folded: bool) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let (n, grid) = (self.n as i32, vector_grid(self.n));
        let (rows, chunked) = (key.lanes as u32, chunked_vector_grid(self.n));
        let slices = self.n.div_ceil(self.slice_height);
        let (vm, sm) = (grid as i32, slices as i32);
        let (k, jacobi, folded_i) = (key.lanes as i32, i32::from(key.jacobi), i32::from(folded));
        let shared_bytes = (MAX_LANES * self.slice_height * 8) as u32;
        let matrix = (key.slice_ptr, key.codes, key.values);
        let operator = |step: i32, j: i32| {
            gpu.launch(
                "bs_operator",
                slices as u32,
                self.slice_height as u32,
                shared_bytes,
                |a| {
                    a.arg(&n)
                        .arg(&matrix.0)
                        .arg(&matrix.1)
                        .arg(&matrix.2)
                        .arg(&key.diags[0])
                        .arg(&key.diags[1])
                        .arg(&key.diags[2])
                        .arg(&s.table)
                        .arg(&k)
                        .arg(&jacobi)
                        .arg(&step)
                        .arg(&j)
                        .arg(&folded_i)
                        .arg(&s.operator_ticket);
                },
            )
        };
        for j in 0..key.iterations as i32 {
            // p = r + β (p − ω v), y = M⁻¹ p.
            gpu.launch_grid("bs_direction", (grid, rows), VECTOR_BLOCK, 0, |a| {
                a.arg(&n).arg(&s.table).arg(&jacobi);
            })?;
            // v = A y with r0 · v; α = ρ / r0 · v.
            operator(STEP_R0_V, j)?;
            if !folded {
                self.launch_finish(s, key, STEP_R0_V, sm, true, j)?;
            }
            // s = r − α v with Σ|s|, z = M⁻¹ s; the half-step test.
            gpu.launch_grid("bs_half", (chunked, rows), VECTOR_BLOCK, 0, |a| {
                a.arg(&n).arg(&s.table).arg(&jacobi).arg(&j).arg(&folded_i);
            })?;
            if !folded {
                self.launch_finish(s, key, STEP_HALF, vm, false, j)?;
            }
            // t = A z with t · s, t · t; ω = t · s / t · t.
            operator(STEP_T, j)?;
            if !folded {
                self.launch_finish(s, key, STEP_T, sm, true, j)?;
            }
            // x += α y + ω z, r = s − ω t with Σ|r|, r0 · r (or x += α y
            // after a half-step stop); the residual tests.
            gpu.launch_grid("bs_update", (chunked, rows), VECTOR_BLOCK, 0, |a| {
                a.arg(&n)
                    .arg(&s.table)
                    .arg(&jacobi)
                    .arg(&key.xs[0])
                    .arg(&key.xs[1])
                    .arg(&key.xs[2])
                    .arg(&j)
                    .arg(&folded_i);
            })?;
            if !folded {
                self.launch_finish(s, key, STEP_UPDATE, vm, false, j)?;
            }
        }
        Ok(())
    }
}

/// One lane of [`DeviceBicgstab::run_lanes`]: its host replay and device
/// state between chunks, and its result once stopped.
struct LaneRun<'a> {
    driver: Option<ChunkDriver<'a>>,
    st: [f64; slot::LEN],
    /// The performance so far, or the error that stopped the lane.
    solved: Result<SolverPerformance, SolveError>,
    /// The lane takes part in the current chunk.
    running: bool,
}

impl<'a> LaneRun<'a> {
    fn new(
        start: Result<(SolverPerformance, Option<StopRule>), SolveError>,
        field: &'a str,
    ) -> Self {
        let (solved, rule) = match start {
            Ok((perf, rule)) => (Ok(perf), rule),
            Err(e) => (Err(e), None),
        };
        Self {
            st: rule.as_ref().map_or([f64::NAN; slot::LEN], initial_state),
            driver: rule.map(|rule| ChunkDriver::new(rule, field)),
            solved,
            running: false,
        }
    }

    fn host_iterations(&self) -> usize {
        self.driver.as_ref().map_or(0, |d| d.host.iterations)
    }

    /// Whether the lane runs the next chunk (`first`: the one with the
    /// prologue); a lane that stops at the top of the chunk is finished.
    fn wants_chunk(&mut self, first: bool) -> bool {
        self.running = match (&mut self.driver, &mut self.solved) {
            (Some(driver), Ok(perf)) => match driver.wants_chunk(first, perf) {
                Ok(true) => true,
                Ok(false) => {
                    self.driver = None;
                    false
                }
                Err(e) => {
                    self.fail(e);
                    false
                }
            },
            _ => false,
        };
        self.running
    }

    /// The chunk it ran: its records and device state replayed.
    fn take_chunk(&mut self, first: bool, records: &[f64], st: &[f64], count: usize) {
        if !self.running {
            return;
        }
        let (Some(driver), Ok(perf)) = (&mut self.driver, &mut self.solved) else {
            return;
        };
        self.st.copy_from_slice(st);
        let device_stop = [st[slot::ITER], st[slot::HALF_AT]];
        match driver.take_chunk(first, records, device_stop, count, perf) {
            Ok(true) => self.driver = None,
            Ok(false) => {}
            Err(e) => self.fail(e),
        }
    }

    /// Stops the lane with `e` (the first error it met).
    fn fail(&mut self, e: SolveError) {
        self.driver = None;
        self.running = false;
        if self.solved.is_ok() {
            self.solved = Err(e);
        }
    }

    fn finish(self) -> Result<SolverPerformance, SolveError> {
        self.solved
    }
}

/// The host side of one system's chunk loop: before each chunk whether it
/// runs (nothing is launched past a stop at the top of an iteration), after
/// it the replay of its records, which stops where the generic loop stops
/// and checks that the device stopped there too.
struct ChunkDriver<'a> {
    host: HostReplay<'a>,
}

impl<'a> ChunkDriver<'a> {
    fn new(rule: StopRule, field: &'a str) -> Self {
        Self {
            host: HostReplay::new(&rule, field),
        }
    }

    /// `false` when the loop stops at the top of the next chunk's first
    /// iteration (the first chunk's comes after the prologue): `perf` is
    /// then singular ([`HostReplay::begin`]).
    fn wants_chunk(
        &mut self,
        first: bool,
        perf: &mut SolverPerformance,
    ) -> Result<bool, SolveError> {
        if first {
            return Ok(true);
        }
        let stops = self.host.begin()?;
        perf.singular |= stops;
        Ok(!stops)
    }

    /// Replays a chunk of `count` iterations from its records and the
    /// device's completed iterations and half-step slot (`BS_ITER`,
    /// `BS_HALF_AT`); `true` when the loop has stopped.
    fn take_chunk(
        &mut self,
        first: bool,
        records: &[f64],
        [device_iterations, device_half_at]: [f64; 2],
        count: usize,
        perf: &mut SolverPerformance,
    ) -> Result<bool, SolveError> {
        let host = &mut self.host;
        if first {
            host.rho = records[0];
        }
        let replayed = host.replay(records, count, perf)?;
        let half_at = match replayed {
            Replayed::Stopped(Some(j)) => j as f64,
            _ => -1.0,
        };
        if device_iterations != host.iterations as f64 || device_half_at != half_at {
            return Err(SolveError::from(GpuError::Invalid(format!(
                "the device PBiCGStab loop stopped after {device_iterations} iterations (half \
                 step {device_half_at}) where the host rule gives {} (half step {half_at})",
                host.iterations
            ))));
        }
        Ok(matches!(replayed, Replayed::Stopped(_)))
    }
}

/// One system's chunk loop on the host ([`ChunkDriver`]): `run_chunk(first,
/// iterations)` runs the next chunk of `count` iterations on the device
/// (after `iterations` completed ones; `first`: with the prologue) and
/// returns its records and the device's completed iterations and half-step
/// slot.
#[cfg(test)]
fn drive_chunks(
    rule: &StopRule,
    field: &str,
    count: usize,
    perf: &mut SolverPerformance,
    mut run_chunk: impl FnMut(bool, usize) -> Result<(Vec<f64>, [f64; 2]), GpuError>,
) -> Result<(), SolveError> {
    let mut driver = ChunkDriver::new(*rule, field);
    let mut first = true;
    while driver.wants_chunk(first, perf)? {
        let (records, device_stop) = run_chunk(first, driver.host.iterations)?;
        if driver.take_chunk(first, &records, device_stop, count, perf)? {
            break;
        }
        first = false;
    }
    Ok(())
}

/// The device state at the start of a solve (kernels/krylov.cu BS_*).
fn initial_state(rule: &StopRule) -> [f64; slot::LEN] {
    let c = &rule.controls;
    let mut st = [f64::NAN; slot::LEN];
    st[slot::DONE] = 0.0;
    st[slot::ITER] = 0.0;
    st[slot::LAST] = rule.initial;
    st[slot::BEST] = rule.initial;
    st[slot::TOLERANCE] = c.tolerance;
    st[slot::REL_TOL] = c.rel_tol;
    st[slot::INITIAL] = rule.initial;
    st[slot::NORM_FACTOR] = rule.norm_factor;
    st[slot::MAX_ITER] = c.max_iter as f64;
    st[slot::MIN_ITER] = c.min_iter as f64;
    st[slot::RHO] = f64::NAN;
    st
}

/// The scalar logic of `solve::bicgstab::bicgstab`, replayed on the sums the
/// device recorded: the same tests in the same order, the same errors,
/// records and debug lines. The device applies the same tests to stop; the
/// caller checks that both stopped at the same place.
struct HostReplay<'a> {
    controls: SolverControls,
    initial: f64,
    norm_factor: f64,
    field: &'a str,
    rho: f64,
    omega: f64,
    last: f64,
    best: f64,
    iterations: usize,
}

impl<'a> HostReplay<'a> {
    fn new(rule: &StopRule, field: &'a str) -> Self {
        Self {
            controls: rule.controls,
            initial: rule.initial,
            norm_factor: rule.norm_factor,
            field,
            rho: f64::NAN,
            omega: 0.0,
            last: rule.initial,
            best: rule.initial,
            iterations: 0,
        }
    }

    fn breakdown(quantity: &'static str, iteration: usize, value: f64) -> SolveError {
        SolveError::KrylovBreakdown {
            method: NAME,
            quantity,
            iteration,
            value,
        }
    }

    /// The top of the loop: `true` to stop (ρ vanished at a zero residual:
    /// the solve is singular, as the generic loop marks it), the breakdown
    /// errors of ρ and ω.
    fn begin(&self) -> Result<bool, SolveError> {
        let it = self.iterations + 1;
        if self.rho.is_nan() || self.rho.abs() < VSMALL {
            if self.last == 0.0 {
                return Ok(true);
            }
            return Err(Self::breakdown("r0 · r", it, self.rho));
        }
        if self.iterations > 0 && (self.omega.is_nan() || self.omega.abs() < VSMALL) {
            return Err(Self::breakdown("omega", it, self.omega));
        }
        Ok(false)
    }

    /// The chunk's `count` iterations from their records.
    fn replay(
        &mut self,
        records: &[f64],
        count: usize,
        perf: &mut SolverPerformance,
    ) -> Result<Replayed, SolveError> {
        let (c, initial, nf) = (self.controls, self.initial, self.norm_factor);
        for j in 0..count {
            if self.begin()? {
                perf.singular = true;
                return Ok(Replayed::Stopped(None));
            }
            let it = self.iterations + 1;
            let rec = &records[REC_HEAD + REC * j..REC_HEAD + REC * (j + 1)];
            let r0_v = rec[REC_R0_V];
            if !(r0_v.is_finite() && r0_v != 0.0) {
                return Err(Self::breakdown("r0 · A M⁻¹ p", it, r0_v));
            }
            let s_sum = rec[REC_S_SUM];
            let half = s_sum / nf;
            check_residual(half, it)?;
            if c.converged(initial, half) && it >= c.min_iter {
                record(perf, &c, initial, it, half);
                return Ok(Replayed::Stopped(Some(j)));
            }
            let (t_s, t_t) = (rec[REC_T_S], rec[REC_T_T]);
            if !(t_t.is_finite() && t_t > 0.0) {
                if s_sum == 0.0 {
                    record(perf, &c, initial, it, half);
                    return Ok(Replayed::Stopped(Some(j)));
                }
                return Err(Self::breakdown("t · t", it, t_t));
            }
            self.omega = t_s / t_t;
            self.rho = rec[REC_RHO];
            let residual = rec[REC_R_SUM] / nf;
            check_residual(residual, it)?;
            log::debug!(
                "{NAME}: {} iteration {it}, residual = {residual:e}",
                self.field
            );
            record(perf, &c, initial, it, residual);
            check_divergence(residual, it, &mut self.best)?;
            self.last = residual;
            self.iterations = it;
            if (perf.converged || it >= c.max_iter) && it >= c.min_iter {
                return Ok(Replayed::Stopped(None));
            }
        }
        Ok(Replayed::Continues)
    }
}

#[cfg(test)]
mod tests {
    //! The host side of the device loop without a device: the generic loop
    //! runs on the CPU backend, which records each step's sums as the device
    //! kernels do; [`drive_chunks`] replays them chunk by chunk and must give
    //! the generic loop's performance or error, whatever the chunk length.

    use std::cell::RefCell;

    use super::*;
    use crate::solve::bicgstab::bicgstab;
    use crate::solve::jacobi::Identity;
    use crate::solve::krylov::KrylovBackend;
    use crate::solve::precond::Jacobi;
    use crate::solve::{CpuKrylovBackend, Executor, InitialNorms, LinearOperator};
    use crate::sparse::testing::{random_nonsymmetric, random_vector};
    use crate::sparse::Csr;

    /// The CPU backend, recording what the device loop records: ρ of the
    /// prologue, then per iteration the sums of `REC_*` (NaN where the
    /// iteration stopped before a step), whether its update ran, and the
    /// initial norms.
    struct Recording<'a> {
        cpu: CpuKrylovBackend<'a>,
        norms: RefCell<Option<InitialNorms>>,
        rho0: RefCell<f64>,
        rows: RefCell<Vec<[f64; REC]>>,
        updated: RefCell<usize>,
    }

    impl Recording<'_> {
        fn row(&self, slot: usize, value: f64) {
            let mut rows = self.rows.borrow_mut();
            rows.last_mut().expect("a step before the first operator")[slot] = value;
        }
    }

    type V = Vec<f64>;

    impl Executor for Recording<'_> {
        type Vector = V;
        fn n(&self) -> usize {
            self.cpu.n()
        }
        fn new_vector(&self) -> V {
            self.cpu.new_vector()
        }
        fn initialize(&self, b: &V, x: &V, r: &mut V) -> InitialNorms {
            let norms = self.cpu.initialize(b, x, r);
            *self.norms.borrow_mut() = Some(norms);
            norms
        }
        fn dot(&self, a: &V, b: &V) -> f64 {
            let d = self.cpu.dot(a, b);
            *self.rho0.borrow_mut() = d;
            d
        }
        fn sum_abs(&self, v: &V) -> f64 {
            self.cpu.sum_abs(v)
        }
    }

    impl KrylovBackend for Recording<'_> {
        fn residual(&self, b: &V, x: &V, r: &mut V) -> (f64, f64) {
            self.cpu.residual(b, x, r)
        }
        fn precondition(&self, v: &V, z: &mut V) {
            self.cpu.precondition(v, z)
        }
        fn apply_operator(&self, v: &V, y: &mut V, w: Option<&V>) -> (f64, f64) {
            let (yw, yy) = self.cpu.apply_operator(v, y, w);
            // The first product of an iteration (v = A y) opens its row:
            // every earlier row has had its update.
            if *self.updated.borrow() == self.rows.borrow().len() {
                self.rows.borrow_mut().push([f64::NAN; REC]);
                self.row(REC_R0_V, yw);
            } else {
                self.row(REC_T_S, yw);
                self.row(REC_T_T, yy);
            }
            (yw, yy)
        }
        fn scale(&self, alpha: f64, x: &V, y: &mut V) {
            self.cpu.scale(alpha, x, y)
        }
        fn axpy_dot(&self, alpha: f64, x: &V, y: &mut V, w: Option<&V>) -> f64 {
            self.cpu.axpy_dot(alpha, x, y, w)
        }
        fn multi_dot(&self, vs: &[&V], w: &V) -> Vec<f64> {
            self.cpu.multi_dot(vs, w)
        }
        fn multi_axpy(&self, c: &[f64], vs: &[&V], y: &mut V) -> f64 {
            self.cpu.multi_axpy(c, vs, y)
        }
        fn bicg_direction(&self, beta: f64, omega: f64, r: &V, v: &V, p: &mut V) {
            self.cpu.bicg_direction(beta, omega, r, v, p)
        }
        fn bicg_half(&self, alpha: f64, r: &V, v: &V, s: &mut V) -> f64 {
            let sum = self.cpu.bicg_half(alpha, r, v, s);
            self.row(REC_S_SUM, sum);
            sum
        }
        fn bicg_update(
            &self,
            alpha: f64,
            omega: f64,
            y: &V,
            z: &V,
            s: &V,
            t: &V,
            r0: &V,
            x: &mut V,
            r: &mut V,
        ) -> (f64, f64) {
            let (r_sum, rho) = self.cpu.bicg_update(alpha, omega, y, z, s, t, r0, x, r);
            self.row(REC_R_SUM, r_sum);
            self.row(REC_RHO, rho);
            *self.updated.borrow_mut() += 1;
            (r_sum, rho)
        }
    }

    /// The generic loop's result on `a`, the device loop's host side
    /// replaying its records in chunks of `count`, and whether the generic
    /// loop stopped at a half step.
    fn both(
        a: &Csr,
        b: &[f64],
        precond: &dyn LinearOperator,
        controls: &SolverControls,
        count: usize,
    ) -> (
        Result<SolverPerformance, String>,
        Result<SolverPerformance, String>,
        bool,
    ) {
        let rec = Recording {
            cpu: CpuKrylovBackend::new(a, precond),
            norms: RefCell::new(None),
            rho0: RefCell::new(f64::NAN),
            rows: RefCell::new(Vec::new()),
            updated: RefCell::new(0),
        };
        let mut x = vec![0.0; a.n_rows()];
        let generic = bicgstab(&rec, &b.to_vec(), &mut x, controls, "u").map_err(|e| e.to_string());
        let norms = rec.norms.borrow().expect("initialised");
        let replayed = (|| {
            let (mut perf, run) = norms.start(controls)?;
            if let Some((_, rule)) = run {
                let rows = rec.rows.borrow();
                let updated = *rec.updated.borrow();
                let generic_failed = generic.is_err();
                drive_chunks(&rule, "u", count, &mut perf, |first, iterations| {
                    let mut records = vec![f64::NAN; REC_HEAD + REC * count];
                    if first {
                        records[0] = *rec.rho0.borrow();
                    }
                    for j in 0..count {
                        if let Some(row) = rows.get(iterations + j) {
                            records[REC_HEAD + REC * j..][..REC].copy_from_slice(row);
                        }
                    }
                    // What the device's state says: iterations completed
                    // in this chunk, and the half-step stop when the last
                    // row never reached its update.
                    let completed = updated.min(iterations + count);
                    let half =
                        rows.len() > updated && rows.len() <= iterations + count && !generic_failed;
                    let half_at = if half {
                        (rows.len() - 1 - iterations) as f64
                    } else {
                        -1.0
                    };
                    Ok((records, [completed as f64, half_at]))
                })?;
            }
            Ok::<_, SolveError>(perf)
        })()
        .map_err(|e| e.to_string());
        let half = generic.is_ok() && rec.rows.borrow().len() > *rec.updated.borrow();
        (generic, replayed, half)
    }

    fn systems() -> Vec<(String, Csr, Vec<f64>)> {
        let (name, a, _, b) = crate::fvm::testing::convection_diffusion_system(
            "box:7x6x5:tet:perturb=0.2:renumber",
            0.01,
        );
        let mut all = vec![(name, a, b)];
        for (n, seed) in [(300, 2), (700, 3)] {
            all.push((
                format!("random {n}"),
                random_nonsymmetric(n, 7, seed),
                random_vector(n, seed + 1),
            ));
        }
        all
    }

    #[test]
    fn the_host_replay_is_the_generic_loop_for_any_chunk_length() {
        let controls = [
            SolverControls::absolute(1e-10, 1000),
            SolverControls::absolute(1e-12, 5),
            SolverControls {
                min_iter: 9,
                ..SolverControls::absolute(1e-2, 1000)
            },
            SolverControls {
                tolerance: 0.0,
                rel_tol: 0.9,
                max_iter: 100,
                min_iter: 0,
            },
            SolverControls {
                tolerance: 0.0,
                rel_tol: 0.0,
                max_iter: 7,
                min_iter: 0,
            },
            SolverControls::absolute(1e-10, 0),
        ];
        let mut half_steps = 0;
        for (name, a, b) in systems() {
            let jacobi = Jacobi::new(&a).unwrap();
            let identity = Identity(a.n_rows());
            for (pname, p) in [
                ("jacobi", &jacobi as &dyn LinearOperator),
                ("none", &identity),
            ] {
                for c in &controls {
                    for count in [1, 3, 50] {
                        let (generic, replayed, half) = both(&a, &b, p, c, count);
                        assert_eq!(replayed, generic, "{name} {pname} {c:?} chunks of {count}");
                        half_steps += usize::from(half);
                    }
                }
            }
        }
        assert!(half_steps > 0, "no case stopped at a half step");
    }

    #[test]
    fn breakdowns_and_nan_are_the_generic_loops_errors() {
        let controls = SolverControls::absolute(1e-10, 100);
        // r0 · A r0 = 0 at the first iteration (skew-symmetric).
        let skew = Csr::new(
            2,
            vec![0, 2, 4],
            vec![0, 1, 0, 1],
            vec![0.0, 1.0, -1.0, 0.0],
        )
        .unwrap();
        let identity = Identity(2);
        for count in [1, 3] {
            let (generic, replayed, _) = both(&skew, &[1.0, 1.0], &identity, &controls, count);
            let err = generic.clone().unwrap_err();
            assert!(
                err.contains("r0 · A M⁻¹ p") && err.contains("iteration 1"),
                "{err}"
            );
            assert_eq!(replayed, generic);
        }
        // A NaN right-hand side: the initial residual.
        let (_, a, mut b) = systems().swap_remove(1);
        b[5] = f64::NAN;
        let jacobi = Jacobi::new(&a).unwrap();
        let (generic, replayed, _) = both(&a, &b, &jacobi, &controls, 3);
        assert!(generic.is_err());
        assert_eq!(replayed, generic);
        // Overflow inside the loop.
        let (_, mut a, b) = systems().swap_remove(1);
        for v in a.values_mut() {
            *v *= 1e300;
        }
        let b: Vec<f64> = b.iter().map(|v| v * 1e300).collect();
        let identity = Identity(a.n_rows());
        for count in [1, 3] {
            let (generic, replayed, _) = both(&a, &b, &identity, &controls, count);
            assert!(generic.is_err(), "{generic:?}");
            assert_eq!(replayed, generic);
        }
    }
}
