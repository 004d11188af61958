//! SGS-PCG by Eisenstat's trick on the GPU (compiled as `gpu::eisenstat`;
//! kernels in `kernels/eisenstat.cu`; the loop and the CPU reference are
//! `solve::eisenstat`): multicolour symmetric Gauss–Seidel's iterates at
//! about one matrix read per iteration.
//!
//! Layout: the rows renumbered colour by colour (`smooth::colour_layout`,
//! Jones–Plassmann colours of the RCM order, as multicolour symGS), so that
//! the strictly lower part of the scaled matrix couples a row to earlier
//! colours only and the strictly upper part to later ones. The two parts are
//! stored apart as plain SELL of [`SLICE_HEIGHT`]-row slices (one thread per
//! row, no shared-memory staging: a colour's rows read x of other colours
//! only), values scaled by D^-1/2 on both sides. An iteration is one launch
//! per colour of the backward sweep (with the direction update fused in),
//! one per colour of the forward sweep (with p · A p's partials), one update
//! of x, ρ (and r when carried; α = ρ · ρ / p · q read from the device
//! scalars) and two one-block reductions, read back once by the host, which
//! runs the loop (`solve::eisenstat::eisenstat_cg`). With predicted checks
//! (the default, [`DEFAULT_OPTIONS`]) up to `max_chunk` iterations may be
//! chained on the device between read-backs, and the residual is
//! `eis_residual`'s D^1/2 C ρ; optionally the sweeps' rows are sorted by
//! length inside the colours (less SELL padding). The initial residual and
//! OpenFOAM's normFactor are the PCG backend's (`GpuCgBackend::initialize`)
//! on the full matrix.

use crate::gpu::KernelArgs;
use cudarc::driver::CudaSlice;

use super::amg::{read_at, unzeroed, Scan};
use super::matrix::DeviceModSell;
use super::matrix::{DeviceMatrix, Format};
use super::pcg::{GpuCgBackend, GpuSolveOptions, GpuSolver, GpuVector};
use super::setup::{checked_diagonal, SetupSpans};
use super::smooth::Layout;
use super::{arg_or_null, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::solve::colouring::Colouring;
use crate::solve::cpu::check_system;
use crate::solve::eisenstat::{
    broke_down, eisenstat_cg, length_sorted_order, EisenstatBackend, EisenstatVectors,
    ResidualCheck, ScaledTriangles, DEFAULT_RESIDUAL_CHECK,
};
use crate::solve::smoother::check_diagonal;
use crate::solve::{
    ColouringKind, Executor, InitialNorms, OnExecutor, SmootherKind, SmootherSettings, SolveError,
    SolverControls, SolverPerformance, Sweep,
};
use crate::sparse::{Csr, Permutation};

/// Rows per SELL slice of the two triangles (one warp: the least padding).
pub const SLICE_HEIGHT: usize = 32;

/// Length of `DeviceEisenstat::scalars` (kernels/eisenstat.cu `eis_update`).
const SCALARS: usize = 4;

/// The most iterations chained on the device between read-backs
/// ([`DeviceEisenstat::set_max_chunk`]).
pub const MAX_CHUNK: usize = 64;

/// How the GPU runs Eisenstat SGS-PCG.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EisenstatOptions {
    pub check: ResidualCheck,
    /// [`DeviceEisenstat::set_max_chunk`].
    pub max_chunk: usize,
    /// [`DeviceEisenstat::with_sorted_rows`]'s window (0: colour order).
    pub sort_window: usize,
}

/// The solvers' options (`GpuSolver::solve_eisenstat`): predicted checks,
/// up to 8 iterations chained between read-backs, rows sorted by length in
/// 256-row windows (H100, 8 M perturbed tets: 0.643 ms per iteration against
/// 0.661 with neither; `bench --eisenstat` measures each alone).
pub const DEFAULT_OPTIONS: EisenstatOptions = EisenstatOptions {
    check: DEFAULT_RESIDUAL_CHECK,
    max_chunk: 8,
    sort_window: 256,
};

/// Threads of the one-block reductions (as `gpu::pcg`).
const REDUCE_BLOCK: u32 = 1024;

/// A triangle in plain SELL on the device.
struct DeviceTriangle {
    slice_ptr: CudaSlice<u64>,
    cols: CudaSlice<i32>,
    values: CudaSlice<f64>,
    /// Stored entries (the bench's byte count).
    nnz: usize,
}

impl DeviceTriangle {
    fn upload(gpu: &Gpu, part: &Csr) -> Result<Self, GpuError> {
        match DeviceMatrix::upload(gpu, part, Format::Sell, SLICE_HEIGHT)? {
            DeviceMatrix::Sell {
                slice_ptr,
                cols,
                values,
                ..
            } => Ok(Self {
                slice_ptr,
                cols,
                values,
                nnz: part.nnz(),
            }),
            _ => unreachable!("uploaded as SELL"),
        }
    }
}

/// A SELL triangle read back: its slots and its stored entries.
#[derive(Clone, Debug, PartialEq)]
pub struct SellArrays {
    pub slice_ptr: Vec<u64>,
    pub cols: Vec<i32>,
    pub values: Vec<f64>,
    pub nnz: usize,
}

/// [`DeviceEisenstat::download_setup`]'s arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct EisenstatArrays {
    pub lower: SellArrays,
    pub upper: SellArrays,
    pub inv_sqrt_diag: Vec<f64>,
    pub sqrt_diag: Vec<f64>,
    pub perm: Vec<i32>,
}

/// The set-up's checks of sizes and layout: the colouring and the PCG
/// backend fit `a`, and the rows are colour-contiguous.
fn check_layout(cg: &GpuCgBackend<'_>, a: &Csr, colouring: &Colouring) -> Result<(), SolveError> {
    let n = a.n_rows();
    let invalid = |m: String| SolveError::Device(format!("Eisenstat SGS: {m}"));
    if colouring.colours().len() != n || cg.n() != n {
        return Err(invalid(format!(
            "the colouring ({} rows) or the PCG backend ({} rows) does not fit the {n}-row \
             matrix",
            colouring.colours().len(),
            cg.n()
        )));
    }
    if !colouring.is_contiguous() {
        return Err(invalid(
            "the rows are not colour-contiguous (renumber them with smooth::colour_layout)".into(),
        ));
    }
    Ok(())
}

/// The scaled split in the sweeps' order, on the device.
struct DeviceSplit {
    lower: DeviceTriangle,
    upper: DeviceTriangle,
    inv_sqrt_diag: CudaSlice<f64>,
    sqrt_diag: CudaSlice<f64>,
    perm: Option<CudaSlice<i32>>,
}

impl DeviceSplit {
    /// Built from `m` (A, colour-contiguous as `colouring` says) by the
    /// `eis_setup_*` kernels: per-row lengths and the coupling check, the
    /// length-sorted order in windows of `window` rows (0: A's order), the
    /// scales, the SELL slice pointers (a device scan) and the two
    /// triangles. An error is the host set-up's, in its order (coupled rows
    /// of a colour, then a diagonal that is not positive).
    fn build(
        gpu: &Gpu,
        m: &DeviceModSell,
        a: &Csr,
        colouring: &Colouring,
        window: usize,
    ) -> Result<Self, SolveError> {
        let n = m.n;
        let (n32, dims) = (n as i32, m.dims());
        let ptr: Vec<i32> = colouring.colour_ptr().iter().map(|&p| p as i32).collect();
        let n_colours = ptr.len().saturating_sub(1) as i32;
        let colour_ptr = gpu.upload(&ptr)?;
        // The arrays below are written whole by their kernels (a slot per
        // row or slice, the triangles' padding included): none is
        // zero-filled; the totals are added to from zero.
        let lower_len = unzeroed::<u32>(gpu, n)?;
        let upper_len = unzeroed::<u32>(gpu, n)?;
        // [coupled rows of a colour, a diagonal entry not positive]: the
        // first such row + 1, from n + 1.
        let failed = gpu.upload(&[n32 + 1; 2])?;
        let totals = gpu.zeros::<u64>(2)?;
        m.launch_pattern(gpu, "eis_setup_rows", &dims, |l| {
            l.arg(&m.diag).arg(&colour_ptr).arg(&n_colours);
            l.arg(&lower_len).arg(&upper_len).arg(&failed).arg(&totals);
        })?;
        let flags = gpu.download(&failed)?;
        if flags[0] <= n32 {
            let (r, c) = colouring.conflict(a).unwrap_or((0, 0));
            return Err(SolveError::Device(format!(
                "Eisenstat SGS: rows {r} and {c} are coupled but have the same colour"
            )));
        }
        if flags[1] <= n32 {
            // The shared check names the row and its value.
            checked_diagonal(gpu, m, "Eisenstat SGS")?;
            return Err(SolveError::Device(format!(
                "Eisenstat SGS: the diagonal entry of row {} is not positive",
                flags[1] - 1
            )));
        }
        let totals = gpu.download(&totals)?;
        let order = unzeroed::<i32>(gpu, n)?;
        let new_of = unzeroed::<i32>(gpu, n)?;
        let window32 = i32::try_from(window).unwrap_or(i32::MAX);
        gpu.launch_vector("eis_setup_order", n, |l| {
            l.arg(&n32).arg(&colour_ptr).arg(&n_colours).arg(&window32);
            l.arg(&lower_len).arg(&upper_len).arg(&order).arg(&new_of);
        })?;
        let sqrt_diag = unzeroed::<f64>(gpu, n)?;
        let inv_sqrt_diag = unzeroed::<f64>(gpu, n)?;
        let inv_sqrt_old = unzeroed::<f64>(gpu, n)?;
        gpu.launch_vector("eis_setup_scales", n, |l| {
            l.arg(&n32).arg(&m.diag).arg(&order);
            l.arg(&sqrt_diag).arg(&inv_sqrt_diag).arg(&inv_sqrt_old);
        })?;
        // SELL slice pointers: exclusive scans of each slice's slot count.
        let th = SLICE_HEIGHT as i32;
        let slices = n.div_ceil(SLICE_HEIGHT);
        let lower_slots = unzeroed::<u32>(gpu, slices)?;
        let upper_slots = unzeroed::<u32>(gpu, slices)?;
        gpu.launch_vector("eis_setup_widths", slices, |l| {
            l.arg(&n32)
                .arg(&th)
                .arg(&order)
                .arg(&lower_len)
                .arg(&upper_len);
            l.arg(&lower_slots).arg(&upper_slots);
        })?;
        let scan = Scan::new(gpu, slices)?;
        let lower_ptr = unzeroed::<u64>(gpu, slices + 1)?;
        let upper_ptr = unzeroed::<u64>(gpu, slices + 1)?;
        // Both scans launched, then both totals read (one synchronisation:
        // the second read finds nothing left to wait for).
        scan.launch(gpu, &lower_slots, slices, &lower_ptr)?;
        scan.launch(gpu, &upper_slots, slices, &upper_ptr)?;
        let lower_total = read_at(gpu, &lower_ptr, slices)? as usize;
        let upper_total = read_at(gpu, &upper_ptr, slices)? as usize;
        let lower_cols = unzeroed::<i32>(gpu, lower_total)?;
        let lower_vals = unzeroed::<f64>(gpu, lower_total)?;
        let upper_cols = unzeroed::<i32>(gpu, upper_total)?;
        let upper_vals = unzeroed::<f64>(gpu, upper_total)?;
        let slices32 = slices as i32;
        gpu.launch_vector("eis_setup_fill", slices * SLICE_HEIGHT, |l| {
            l.arg(&n32).arg(&dims[1]).arg(&m.slice_ptr).arg(&m.codes);
            l.arg(&m.values)
                .arg(&inv_sqrt_old)
                .arg(&order)
                .arg(&new_of)
                .arg(&th);
            l.arg(&lower_ptr).arg(&lower_cols).arg(&lower_vals);
            l.arg(&upper_ptr).arg(&upper_cols).arg(&upper_vals);
            l.arg(&slices32);
        })?;
        Ok(Self {
            lower: DeviceTriangle {
                slice_ptr: lower_ptr,
                cols: lower_cols,
                values: lower_vals,
                nnz: totals[0] as usize,
            },
            upper: DeviceTriangle {
                slice_ptr: upper_ptr,
                cols: upper_cols,
                values: upper_vals,
                nnz: totals[1] as usize,
            },
            inv_sqrt_diag,
            sqrt_diag,
            perm: (window > 0).then_some(order),
        })
    }
}

/// The device steps of Eisenstat SGS-PCG on a colour-contiguous matrix; the
/// PCG backend `cg` (same matrix, same row order) gives the initial residual
/// and the work vectors.
pub struct DeviceEisenstat<'a, 'g> {
    gpu: &'g Gpu,
    cg: &'a GpuCgBackend<'g>,
    n: usize,
    /// Each colour's first row and row count.
    colours: Vec<(i32, i32)>,
    lower: DeviceTriangle,
    upper: DeviceTriangle,
    inv_sqrt_diag: CudaSlice<f64>,
    sqrt_diag: CudaSlice<f64>,
    /// With sorted rows: the sweeps' row i is row perm[i] of x and r.
    perm: Option<CudaSlice<i32>>,
    /// Per-block partials: the forward sweep's (all colours), or the update's two sums.
    partials: CudaSlice<f64>,
    /// [p · q, Σ|r|, ρ · ρ, previous ρ · ρ] of the last iteration
    /// ([`SCALARS`]); ρ · ρ is the next iteration's r · z, read by the
    /// update on the device (and by the backward sweep for β when chained).
    scalars: CudaSlice<f64>,
    /// The chained iterations' [p · q, Σ|r|, ρ · ρ] (`eis_record`).
    records: CudaSlice<f64>,
    /// [`EisenstatBackend::max_chunk`].
    max_chunk: usize,
}

impl<'a, 'g> DeviceEisenstat<'a, 'g> {
    /// Eisenstat SGS for `a` (the matrix of `cg`, rows colour-contiguous as
    /// `colouring` says: every colour a run of rows). Errors: a diagonal
    /// entry missing or not positive (the row is named), a colouring of
    /// another size, of rows that are not contiguous, or with coupled rows in
    /// one colour.
    pub fn new(
        gpu: &'g Gpu,
        cg: &'a GpuCgBackend<'g>,
        a: &Csr,
        colouring: &Colouring,
    ) -> Result<Self, SolveError> {
        Self::with_sorted_rows(gpu, cg, a, colouring, 0)
    }

    /// [`Self::new`] with the sweeps' rows sorted by their triangle lengths
    /// in runs of `window` rows inside each colour
    /// ([`crate::solve::eisenstat::length_sorted_order`]: less SELL padding)
    /// when `window` > 0; x and r keep `a`'s order (the update and the
    /// initial sweep index them through the permutation).
    ///
    /// Set up on the device from `cg`'s resident matrix ([`DeviceSplit`]):
    /// the colouring's coupling check, the row order, the scales and the two
    /// SELL triangles; the host reads sizes and flags only (and checks that
    /// the colouring is contiguous: a flag of the colouring, O(1)). Equal
    /// bit for bit to
    /// [`Self::with_sorted_rows_on_host`].
    pub fn with_sorted_rows(
        gpu: &'g Gpu,
        cg: &'a GpuCgBackend<'g>,
        a: &Csr,
        colouring: &Colouring,
        window: usize,
    ) -> Result<Self, SolveError> {
        let mut spans = SetupSpans::new("Eisenstat SGS", Some(gpu));
        check_layout(cg, a, colouring)?;
        spans.host("colouring size and contiguity flag");
        let split = DeviceSplit::build(gpu, &cg.shared_matrix(), a, colouring, window)?;
        spans.device("coupling check, row order, scales and SELL triangles");
        let eisenstat = Self::from_parts(gpu, cg, colouring, split)?;
        spans.device("work arrays");
        spans.finish();
        Ok(eisenstat)
    }

    /// [`Self::with_sorted_rows`] set up on the host (the reference): the
    /// checks, the order and `solve::eisenstat::ScaledTriangles` on the host,
    /// the triangles converted to SELL and uploaded.
    pub fn with_sorted_rows_on_host(
        gpu: &'g Gpu,
        cg: &'a GpuCgBackend<'g>,
        a: &Csr,
        colouring: &Colouring,
        window: usize,
    ) -> Result<Self, SolveError> {
        let mut spans = SetupSpans::new("Eisenstat SGS (host set-up)", Some(gpu));
        check_layout(cg, a, colouring)?;
        let invalid = |m: String| SolveError::Device(format!("Eisenstat SGS: {m}"));
        if let Some((r, c)) = colouring.conflict(a) {
            return Err(invalid(format!(
                "rows {r} and {c} are coupled but have the same colour"
            )));
        }
        spans.host("colouring checks (contiguous, no coupled rows in a colour)");
        let (split, perm) = match window {
            0 => (ScaledTriangles::new(a)?, None),
            w => {
                let order = length_sorted_order(a, colouring.colour_ptr(), w);
                let p = Permutation::from_new_to_old(order).map_err(invalid)?;
                let order: Vec<i32> = p.new_to_old().iter().map(|&r| r as i32).collect();
                let sorted = p.apply_symmetric(a);
                (ScaledTriangles::new(&sorted)?, Some(gpu.upload(&order)?))
            }
        };
        spans.host("length-sorted order, permuted copy and the scaled split");
        let split = DeviceSplit {
            lower: DeviceTriangle::upload(gpu, &split.lower)?,
            upper: DeviceTriangle::upload(gpu, &split.upper)?,
            inv_sqrt_diag: gpu.upload(&split.inv_sqrt_diag)?,
            sqrt_diag: gpu.upload(&split.sqrt_diag)?,
            perm,
        };
        spans.host("SELL conversion and upload of the triangles and scales");
        let eisenstat = Self::from_parts(gpu, cg, colouring, split)?;
        spans.finish();
        Ok(eisenstat)
    }

    /// The steps on a split, with their work arrays.
    fn from_parts(
        gpu: &'g Gpu,
        cg: &'a GpuCgBackend<'g>,
        colouring: &Colouring,
        split: DeviceSplit,
    ) -> Result<Self, SolveError> {
        let n = cg.n();
        let colours: Vec<(i32, i32)> = colouring
            .colour_ptr()
            .windows(2)
            .map(|w| (w[0] as i32, (w[1] - w[0]) as i32))
            .collect();
        let forward_blocks: usize = colours
            .iter()
            .map(|&(_, count)| vector_grid(count as usize) as usize)
            .sum();
        let partial_len = forward_blocks.max(2 * vector_grid(n) as usize);
        Ok(Self {
            gpu,
            cg,
            n,
            colours,
            lower: split.lower,
            upper: split.upper,
            inv_sqrt_diag: split.inv_sqrt_diag,
            sqrt_diag: split.sqrt_diag,
            perm: split.perm,
            partials: gpu.zeros(partial_len)?,
            scalars: gpu.zeros(SCALARS)?,
            records: gpu.zeros(3 * MAX_CHUNK)?,
            max_chunk: 1,
        })
    }

    /// The set-up's arrays read back (the tests compare the device set-up
    /// with the host's): each triangle's slice pointers, columns and values
    /// (SELL slots) and stored entries, 1/√a_ii and √a_ii in the sweeps' order, and that order
    /// (empty: A's).
    pub fn download_setup(&self) -> Result<EisenstatArrays, GpuError> {
        let gpu = self.gpu;
        let triangle = |t: &DeviceTriangle| -> Result<SellArrays, GpuError> {
            let slice_ptr = gpu.download(&t.slice_ptr)?;
            let slots = slice_ptr.last().copied().unwrap_or(0) as usize;
            Ok(SellArrays {
                cols: gpu.download_prefix(&t.cols, slots)?,
                values: gpu.download_prefix(&t.values, slots)?,
                slice_ptr,
                nnz: t.nnz,
            })
        };
        let n = self.n;
        let perm = match &self.perm {
            Some(p) => gpu.download_prefix(p, n)?,
            None => Vec::new(),
        };
        Ok(EisenstatArrays {
            lower: triangle(&self.lower)?,
            upper: triangle(&self.upper)?,
            inv_sqrt_diag: gpu.download_prefix(&self.inv_sqrt_diag, n)?,
            sqrt_diag: gpu.download_prefix(&self.sqrt_diag, n)?,
            perm,
        })
    }

    pub fn n_colours(&self) -> usize {
        self.colours.len()
    }

    /// With predicted checks, chain up to `max_chunk` (≤ [`MAX_CHUNK`])
    /// iterations on the device between read-backs (β on the device too);
    /// 1 (the default) reads every iteration back.
    pub fn set_max_chunk(&mut self, max_chunk: usize) {
        self.max_chunk = max_chunk.clamp(1, MAX_CHUNK);
    }

    /// The sums of the first `count` groups of `m` partials into
    /// `scalars[at..at + count]` (on the device).
    fn reduce(&self, m: usize, count: usize, at: usize) -> Result<(), GpuError> {
        let (m32, c32) = (m as i32, count as i32);
        let out = self.scalars.slice(at..at + count);
        self.gpu.launch("reduce_partials", 1, REDUCE_BLOCK, 0, |a| {
            a.arg(&m32).arg(&c32).arg(&self.partials).arg(&out);
        })
    }

    /// p = ρ + β p and the backward sweep t = (I + Lᵀ)⁻¹ p: one launch per
    /// colour, the last colour first.
    fn launch_backward(
        &self,
        beta: f64,
        device_beta: bool,
        v: &EisenstatVectors<'_, GpuVector>,
    ) -> Result<(), GpuError> {
        let (rho, p, t) = (dev(v.rho)?, dev(v.p)?, dev(v.t)?);
        for k in (0..self.n_colours()).rev() {
            self.launch_colour("eis_backward", k, &self.upper, |a| {
                a.arg(rho).arg(&beta);
                arg_or_null(a, device_beta.then_some(&self.scalars));
                a.arg(p).arg(t);
            })?;
        }
        Ok(())
    }

    /// The forward sweep (s, and g when `carried`), one launch per colour,
    /// and p · q reduced into `scalars[0]`.
    fn launch_forward(
        &self,
        carried: bool,
        v: &EisenstatVectors<'_, GpuVector>,
    ) -> Result<(), GpuError> {
        let (p, t, s, g) = (dev(v.p)?, dev(v.t)?, dev(v.s)?, dev(v.g)?);
        let mut offset = 0i32;
        for k in 0..self.n_colours() {
            let grid = self.launch_colour("eis_forward", k, &self.lower, |a| {
                a.arg(p).arg(t).arg(s);
                arg_or_null(a, carried.then_some(g));
                a.arg(&self.partials).arg(&offset);
            })?;
            offset += grid as i32;
        }
        self.reduce(offset as usize, 1, 0)
    }

    /// The update of x, ρ (and r when `carried`), Σ|r| and ρ · ρ reduced
    /// into `scalars[1..3]`.
    fn launch_update(
        &self,
        carried: bool,
        v: &EisenstatVectors<'_, GpuVector>,
    ) -> Result<(), GpuError> {
        let n = self.n as i32;
        let (t, s, g) = (dev(v.t)?, dev(v.s)?, dev(v.g)?);
        let (x, rho, r) = (dev(v.x)?, dev(v.rho)?, dev(v.r)?);
        self.gpu.launch_vector("eis_update", self.n, |a| {
            a.arg(&n).arg(&self.scalars);
            a.arg(&self.inv_sqrt_diag).arg(&self.sqrt_diag);
            a.arg(t).arg(s).arg(g);
            arg_or_null(a, self.perm.as_ref());
            a.arg(x).arg(rho);
            arg_or_null(a, carried.then_some(r));
            a.arg(&self.partials);
        })?;
        self.reduce(vector_grid(self.n) as usize, 2, 1)
    }

    /// One iteration's launches: [`Self::launch_backward`] (β from the
    /// host, or from `scalars` when `device_beta`), [`Self::launch_forward`]
    /// and [`Self::launch_update`].
    fn launch_iteration(
        &self,
        beta: f64,
        device_beta: bool,
        carried: bool,
        v: &EisenstatVectors<'_, GpuVector>,
    ) -> Result<(), GpuError> {
        self.launch_backward(beta, device_beta, v)?;
        self.launch_forward(carried, v)?;
        self.launch_update(carried, v)
    }

    /// Bench: bytes of the backward sweep, the forward sweep and the update,
    /// each array once (12 per stored entry, 8 per vector element read or
    /// written; gathers of t and s and the SELL padding not counted, as in
    /// kernels/NOTES.md).
    pub fn phase_bytes(&self, carried: bool) -> [f64; 3] {
        let n = self.n as f64;
        let extra = if carried { 1.0 } else { 0.0 };
        let perm = if self.perm.is_some() { 4.0 } else { 0.0 };
        [
            12.0 * self.upper.nnz as f64 + 32.0 * n,
            12.0 * self.lower.nnz as f64 + (24.0 + 8.0 * extra) * n,
            (56.0 + 32.0 * extra + perm) * n,
        ]
    }

    /// Bench: ms of the backward sweep, the forward sweep (with its
    /// reduction) and the update (with its reductions), each run `reps`
    /// times back to back on scratch vectors and averaged; `carried` as in
    /// the solve.
    pub fn phase_ms(&self, carried: bool, reps: usize) -> Result<[f64; 3], SolveError> {
        let mut work: Vec<GpuVector> = (0..7)
            .map(|_| self.checked_vector())
            .collect::<Result<_, _>>()?;
        let v = EisenstatVectors::from_slice(&mut work);
        let mut ms = [0.0; 3];
        for (phase, ms) in ms.iter_mut().enumerate() {
            self.gpu.synchronize()?;
            let start = std::time::Instant::now();
            for _ in 0..reps.max(1) {
                match phase {
                    0 => self.launch_backward(0.5, false, &v),
                    1 => self.launch_forward(carried, &v),
                    _ => self.launch_update(carried, &v),
                }?;
            }
            self.gpu.synchronize()?;
            *ms = start.elapsed().as_secs_f64() * 1e3 / reps.max(1) as f64;
        }
        Ok(ms)
    }

    /// Launches `kernel` over colour k's rows, one thread per row: the
    /// colour's first row and row count, the slice height and `triangle`,
    /// then the arguments `push` adds. Returns the grid.
    fn launch_colour<'s>(
        &'s self,
        kernel: &'static str,
        k: usize,
        triangle: &'s DeviceTriangle,
        push: impl FnOnce(&mut KernelArgs<'s>),
    ) -> Result<u32, GpuError> {
        const H: i32 = SLICE_HEIGHT as i32;
        let (first, count) = &self.colours[k];
        let grid = vector_grid(*count as usize);
        self.gpu.launch(kernel, grid, VECTOR_BLOCK, 0, |a| {
            a.arg(first).arg(count).arg(&H);
            a.arg(&triangle.slice_ptr)
                .arg(&triangle.cols)
                .arg(&triangle.values);
            push(a);
        })?;
        Ok(grid)
    }
}

fn dev(v: &GpuVector) -> Result<&CudaSlice<f64>, GpuError> {
    v.dev()
}

/// The PCG backend's executor (on the colour-contiguous order).
impl<'g> OnExecutor for DeviceEisenstat<'_, 'g> {
    type Inner = GpuCgBackend<'g>;
    fn executor(&self) -> &GpuCgBackend<'g> {
        self.cg
    }
}

impl EisenstatBackend for DeviceEisenstat<'_, '_> {
    fn initialize_rho(
        &self,
        b: &GpuVector,
        v: &mut EisenstatVectors<'_, GpuVector>,
    ) -> Result<(InitialNorms, f64), SolveError> {
        let norms = self.initialize(b, v.x, v.r);
        self.device_status()?;
        let run = || -> Result<f64, GpuError> {
            let (r, rho) = (dev(v.r)?, dev(v.rho)?);
            for k in 0..self.n_colours() {
                self.launch_colour("eis_initial", k, &self.lower, |a| {
                    a.arg(&self.inv_sqrt_diag);
                    arg_or_null(a, self.perm.as_ref());
                    a.arg(r).arg(rho);
                })?;
            }
            let n = self.n as i32;
            self.gpu.launch_vector("dot_partials", self.n, |a| {
                a.arg(&n).arg(rho).arg(rho).arg(&self.partials);
            })?;
            self.reduce(vector_grid(self.n) as usize, 1, 2)?;
            Ok(self.gpu.download(&self.scalars)?[2])
        };
        let rho_rho = run()?;
        Ok((norms, rho_rho))
    }

    /// The iteration with one read-back: α = ρ · ρ / p · q on the device
    /// (`eis_update` reads both from `scalars`), β from the host.
    fn iteration(
        &self,
        beta: f64,
        _r_z: f64,
        carried: bool,
        v: &mut EisenstatVectors<'_, GpuVector>,
    ) -> Result<(f64, f64, f64), SolveError> {
        let run = || -> Result<(f64, f64, f64), GpuError> {
            self.launch_iteration(beta, false, carried, v)?;
            let sums = self.gpu.download(&self.scalars)?;
            Ok((sums[0], sums[1], sums[2]))
        };
        run().map_err(SolveError::from)
    }

    /// Chained on the device: β of the first from the host, of the next
    /// ones from `scalars`; each iteration's sums copied to `records`, read
    /// back once.
    fn iterations(
        &self,
        beta: f64,
        r_z: f64,
        count: usize,
        carried: bool,
        v: &mut EisenstatVectors<'_, GpuVector>,
    ) -> Result<Vec<(f64, f64, f64)>, SolveError> {
        if count <= 1 {
            return Ok(vec![self.iteration(beta, r_z, carried, v)?]);
        }
        let count = count.min(MAX_CHUNK);
        let run = || -> Result<Vec<(f64, f64, f64)>, GpuError> {
            for j in 0..count {
                self.launch_iteration(beta, j > 0, carried, v)?;
                let j32 = j as i32;
                self.gpu.launch("eis_record", 1, 32, 0, |a| {
                    a.arg(&self.scalars).arg(&self.records).arg(&j32);
                })?;
            }
            let all = self.gpu.download(&self.records)?;
            let mut records = Vec::with_capacity(count);
            for j in 0..count {
                let record = (all[3 * j], all[3 * j + 1], all[3 * j + 2]);
                records.push(record);
                if broke_down(record.0) {
                    break;
                }
            }
            Ok(records)
        };
        run().map_err(SolveError::from)
    }

    fn max_chunk(&self) -> usize {
        self.max_chunk
    }

    /// `eis_residual` over all rows (no colour order: it reads ρ only),
    /// Σ|r| reduced into `scalars[1]` and read back.
    fn residual_of_rho(&self, v: &mut EisenstatVectors<'_, GpuVector>) -> Result<f64, SolveError> {
        let run = || -> Result<f64, GpuError> {
            let (n, h) = (self.n as i32, SLICE_HEIGHT as i32);
            let (rho, r) = (dev(v.rho)?, dev(v.r)?);
            let l = &self.lower;
            let grid = vector_grid(self.n);
            self.gpu
                .launch("eis_residual", grid, VECTOR_BLOCK, 0, |a| {
                    a.arg(&n).arg(&h);
                    a.arg(&l.slice_ptr).arg(&l.cols).arg(&l.values);
                    a.arg(&self.sqrt_diag);
                    arg_or_null(a, self.perm.as_ref());
                    a.arg(rho).arg(r).arg(&self.partials);
                })?;
            self.reduce(grid as usize, 1, 1)?;
            Ok(self.gpu.download(&self.scalars)?[1])
        };
        run().map_err(SolveError::from)
    }
}

/// The multicolour symmetric Gauss–Seidel settings whose layout Eisenstat
/// SGS uses (Jones–Plassmann colours, colour-contiguous rows).
pub fn layout_settings() -> SmootherSettings {
    let mut s = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric));
    s.colouring = ColouringKind::JonesPlassmann;
    s
}

impl GpuSolver<'_> {
    /// SGS-PCG by Eisenstat's trick (`PreconditionerKind::EisenstatSgs`) in
    /// multicolour symGS's row order (`options.ordering`, then colour by
    /// colour): the iterates of multicolour symGS-PCG on the same layout.
    pub fn solve_eisenstat(
        &mut self,
        a: &Csr,
        b: &[f64],
        x: &mut [f64],
        controls: &SolverControls,
        field: &str,
        options: &GpuSolveOptions,
    ) -> Result<SolverPerformance, SolveError> {
        check_system(a, b, x, controls)?;
        // In the given numbering, before the layout renumbers the rows.
        check_diagonal(a, "Eisenstat SGS")?;
        let layout = Layout::new(self, a, &layout_settings(), options)?;
        let colouring = layout
            .colouring
            .as_ref()
            .ok_or_else(|| SolveError::Device("Eisenstat SGS: no colouring".into()))?;
        let gpu = self.gpu();
        let cg = GpuCgBackend::new(gpu, &layout.a, false, None, options)?;
        let o = DEFAULT_OPTIONS;
        let mut eisenstat =
            DeviceEisenstat::with_sorted_rows(gpu, &cg, &layout.a, colouring, o.sort_window)?;
        eisenstat.set_max_chunk(o.max_chunk);
        log::debug!(
            "Eisenstat SGS on the GPU: {} colours",
            eisenstat.n_colours()
        );
        layout.solve(&cg, b, x, |b, x| {
            eisenstat_cg(&eisenstat, b, x, controls, o.check, field)
        })
    }
}
