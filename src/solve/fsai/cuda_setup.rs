//! FSAI set-up on the device (`kernels/fsai.cu`), the paper's structure
//! (Bernaschi et al. 2019, §2.4–2.7) with the CPU reference's arithmetic
//! (`solve::fsai::fsai_setup`, FSAI_SPEC.md), so that G is the same bits in
//! f64.
//!
//! Adaptive pattern: rows in batches sized to a work-memory budget; per batch
//! a host loop over the steps k with the active rows compacted on the device
//! (flags → deterministic exclusive scan → list, one count read back per
//! step), and per step
//! - (K1) `fsai_gradient`: the Kaporin gradient, a group of 4 to 32 lanes
//!   per row (the fewest the step needs, `gradient_lanes`), lane t
//!   holding contributing row t, a group-minimum merge of their sorted
//!   columns below i, products summed by the xor butterfly, pattern columns
//!   excluded, the best `step_size` kept in lanes sorted by |v| (ties: the
//!   smaller column);
//! - (K2) `fsai_gather`: the new rows of the dense system (and a_{c,i}) into
//!   the interleaved per-row factor storage, one thread per row;
//! - (K3) `fsai_cholesky`: the incremental Cholesky extension, forward
//!   solve, ψ update and back solve, one thread per system;
//! - (K4) `fsai_stop`: breakdown check, commit and the stop rule.
//!
//! The postfilter drops |g| < δ and solves the kept columns again from
//! scratch (the same gather/Cholesky kernels over all the rows of the
//! system). Static patterns are built on the host (the CPU reference's
//! pattern), gathered and factored the same way. (K5) `fsai_assemble` writes
//! each batch's rows (sorted, diagonal last, scaled by 1/√ψ) into a chunk;
//! the chunks are placed by a prefix sum of the row counts, and Gᵀ is built
//! by counting, slotting and sorting its rows.

use crate::gpu::kernel_args::KernelElement;
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use rayon::prelude::*;

use super::amg::{DeviceCsr, Scan};
use super::levels::csr_of_modsell;
use super::matrix::{f32_copy, DeviceModSell};
use super::setup::{checked_diagonal, SetupSpans};
use super::{arg_or_null, Gpu, GpuError, KernelArgs, PhaseTimes};
use crate::solve::cpu::square_size;
use crate::solve::fsai::{
    fsai_diagonal, static_pattern_into, AdaptivePattern, FsaiPattern, FsaiSettings, FsaiStop,
    PatternScratch, MAX_ADAPTIVE_PATTERN,
};
use crate::solve::scalar::Precision;
use crate::solve::SolveError;
use crate::sparse::Csr;

/// kernels/fsai.cu FSAI_STOP_*.
const STOP_STAGNATION: i32 = 0;
const STOP_REDUCTION: i32 = 1;
/// Threads per block of the gradient kernel (a group of lanes per row).
const GRADIENT_BLOCK: u32 = 256;

/// Lanes of the gradient kernel per row at adaptive step `step` (from 0) of
/// `step_size` columns: a row then holds at most step · step_size columns,
/// and the kernel needs a lane per pattern column and one for the row, and
/// s lanes for the candidates; the fewest such lanes (a power of two, 4 to
/// 32), so that a warp merges the rows of 32 / lanes rows at once.
fn gradient_lanes(step: usize, step_size: usize) -> usize {
    (step * step_size + 1)
        .max(step_size)
        .next_power_of_two()
        .clamp(4, 32)
}

/// Most bins of `fsai_histogram` (kernels/fsai.cu FSAI_HISTOGRAM_BINS).
const HISTOGRAM_BINS: usize = 64;

/// Rows per parallel block of the host's static pattern.
const PATTERN_BLOCK: usize = 4096;

/// Default work-memory budget of the set-up's per-row state.
pub const DEFAULT_WORK_BYTES: usize = 4 << 30;

/// What the device set-up measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FsaiSetupStats {
    /// (K1) Kaporin gradient and choice of the new columns, ms.
    pub gradient_ms: f64,
    /// (K2) gather of the dense systems' new rows, ms.
    pub gather_ms: f64,
    /// (K3) Cholesky extension and solves, ms.
    pub cholesky_ms: f64,
    /// (K4) stop test and commit, with the active-row compaction, ms.
    pub stop_ms: f64,
    /// Postfilter and the re-solves it causes, ms.
    pub postfilter_ms: f64,
    /// (K5) G's rows, their placement and Gᵀ, ms.
    pub assemble_ms: f64,
    /// The whole set-up on the host clock (uploads and read-backs included), ms.
    pub total_ms: f64,
    /// The largest per-batch work memory (per-row state, lists), bytes.
    pub peak_work_bytes: usize,
    /// Batches of rows.
    pub batches: usize,
    /// rows_by_steps[k]: rows that took k adaptive steps (static: every row 1).
    pub rows_by_steps: Vec<usize>,
    /// Rows that broke down and kept their last good state.
    pub fallback_rows: usize,
    /// nnz(G)/nnz(A) before the postfilter (μ0).
    pub density_before_postfilter: f64,
    /// nnz(G)/nnz(A) (μ).
    pub density: f64,
}

impl FsaiSetupStats {
    /// The per-kernel breakdown, one line (Bernaschi et al. 2019, §2.7's shares).
    pub fn describe(&self) -> String {
        let kernels = self.gradient_ms
            + self.gather_ms
            + self.cholesky_ms
            + self.stop_ms
            + self.postfilter_ms
            + self.assemble_ms;
        let share = |t: f64| {
            if kernels > 0.0 {
                100.0 * t / kernels
            } else {
                0.0
            }
        };
        format!(
            "set-up {:.2} ms: gradient {:.2} ms ({:.0}%), gather {:.2} ms ({:.0}%), \
             Cholesky {:.2} ms ({:.0}%), stop {:.2} ms ({:.0}%), postfilter {:.2} ms ({:.0}%), \
             assemble {:.2} ms ({:.0}%); work {:.1} MB in {} batch(es); mu0 {:.3}, mu {:.3}; \
             fallback rows {}",
            self.total_ms,
            self.gradient_ms,
            share(self.gradient_ms),
            self.gather_ms,
            share(self.gather_ms),
            self.cholesky_ms,
            share(self.cholesky_ms),
            self.stop_ms,
            share(self.stop_ms),
            self.postfilter_ms,
            share(self.postfilter_ms),
            self.assemble_ms,
            share(self.assemble_ms),
            self.peak_work_bytes as f64 / 1e6,
            self.batches,
            self.density_before_postfilter,
            self.density,
            self.fallback_rows
        )
    }
}

/// The pattern the device set-up grows or factors.
#[derive(Clone, Debug, PartialEq)]
enum SetupPattern {
    /// Greedy Kaporin-gradient growth (FSAI_SPEC adaptive).
    Adaptive(AdaptivePattern),
    /// A strictly-lower pattern built on the host, ascending columns per
    /// row (CSR row pointers and columns).
    Static { row_ptr: Vec<usize>, cols: Vec<u32> },
}

/// The work budget of [`fsai_setup_gpu`]: env `FVPOISSON_FSAI_WORK_MB`
/// (MiB, e.g. to force batches on a small mesh), else [`DEFAULT_WORK_BYTES`].
pub fn work_budget() -> usize {
    std::env::var("FVPOISSON_FSAI_WORK_MB")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(DEFAULT_WORK_BYTES, |mb| mb.max(1) << 20)
}

/// The FSAI set-up of `a` (square, symmetric, sorted columns, positive
/// diagonal) on the device with the work budget [`work_budget`]: G and Gᵀ as device
/// CSR (ascending columns, so G's diagonal is last in each row and Gᵀ's
/// first) and the set-up's statistics. G equals `solve::fsai::fsai_setup`'s
/// (bit for bit in f64). Settings the CPU reference refuses are refused
/// (e.g. steps * stepSize > 31).
pub fn fsai_setup_gpu(
    gpu: &Gpu,
    a: &Csr,
    s: &FsaiSettings,
) -> Result<(DeviceCsr, DeviceCsr, FsaiSetupStats), SolveError> {
    fsai_setup_gpu_budget(gpu, a, s, work_budget())
}

/// The settings checked and the size of `a`, which the device set-up takes.
fn checked_size(a: &Csr, s: &FsaiSettings) -> Result<usize, SolveError> {
    s.validate().map_err(SolveError::InvalidControls)?;
    let n = square_size(a)?;
    if n >= i32::MAX as usize || a.nnz() >= u32::MAX as usize {
        return Err(SolveError::Device(format!(
            "the FSAI set-up on the GPU takes fewer than 2^31 rows and 2^32 entries, this \
             matrix has {n} rows and {} entries",
            a.nnz()
        )));
    }
    Ok(n)
}

/// [`fsai_setup_gpu`] of `a` from `m`, its copy resident on the device in
/// the same row order: with an adaptive pattern A's CSR is built on the
/// device (`levels::csr_of_modsell`: the host's CSR entry for entry, so G is the
/// same bit for bit) and its diagonal checked there (the CPU's error for a
/// non-positive one), so the host reads nothing of A but its sizes. A's
/// values must be finite (the solves check them first: `check_system`). A
/// static pattern is built on the host from `a`: [`fsai_setup_gpu`].
pub fn fsai_setup_gpu_resident(
    gpu: &Gpu,
    a: &Csr,
    m: &DeviceModSell,
    s: &FsaiSettings,
) -> Result<(DeviceCsr, DeviceCsr, FsaiSetupStats), SolveError> {
    let FsaiPattern::Adaptive(growth) = s.pattern else {
        return fsai_setup_gpu(gpu, a, s);
    };
    let mut spans = SetupSpans::new("FSAI", Some(gpu));
    let n = checked_size(a, s)?;
    m.check_rows("FSAI preconditioner", a)?;
    checked_diagonal(gpu, m, "FSAI")?;
    spans.device("diagonal checked (1 read-back)");
    let start = std::time::Instant::now();
    let csr = csr_of_modsell(gpu, m, "FSAI")?;
    spans.device("A's CSR from the resident matrix (1 read-back: nnz)");
    let plan = Plan {
        pattern: SetupPattern::Adaptive(growth),
        postfilter: s.postfilter,
        work_bytes: work_budget().max(1),
    };
    let size = (n, csr.nnz);
    let (g, gt, mut stats) = match s.precision {
        Precision::Double => {
            let da = DeviceA::<f64>::of_csr(gpu, csr)?;
            run(gpu, da, size, &plan, &mut spans)
        }
        Precision::Mixed => {
            let da = DeviceA::<f32>::of_csr(gpu, csr)?;
            spans.device("f32 values");
            run(gpu, da, size, &plan, &mut spans)
        }
    }?;
    stats.total_ms = start.elapsed().as_secs_f64() * 1e3;
    spans.finish();
    Ok((g, gt, stats))
}

/// [`fsai_setup_gpu`] with a work-memory budget (bytes) for the per-row
/// state: the rows are processed in batches that fit it (one row at least).
pub fn fsai_setup_gpu_budget(
    gpu: &Gpu,
    a: &Csr,
    s: &FsaiSettings,
    work_bytes: usize,
) -> Result<(DeviceCsr, DeviceCsr, FsaiSetupStats), SolveError> {
    let mut spans = SetupSpans::new("FSAI", Some(gpu));
    let n = checked_size(a, s)?;
    let diag = fsai_diagonal(a)?;
    spans.host("checks and the diagonal (rows in parallel)");
    let start = std::time::Instant::now();
    let pattern = match s.pattern {
        FsaiPattern::Adaptive(growth) => {
            debug_assert!(growth.max_columns() <= MAX_ADAPTIVE_PATTERN);
            SetupPattern::Adaptive(growth)
        }
        FsaiPattern::Static { power, prefilter } => {
            // Rows in blocks, each block's columns in one vector.
            let blocks: Vec<(Vec<usize>, Vec<u32>)> = (0..n.div_ceil(PATTERN_BLOCK))
                .into_par_iter()
                .map(|b| {
                    let rows = b * PATTERN_BLOCK..((b + 1) * PATTERN_BLOCK).min(n);
                    let mut scratch = PatternScratch::default();
                    let (mut ends, mut cols) = (Vec::with_capacity(rows.len()), Vec::new());
                    for i in rows {
                        let row = (i, power, prefilter);
                        static_pattern_into(a, &diag, row, &mut scratch, &mut cols);
                        ends.push(cols.len());
                    }
                    (ends, cols)
                })
                .collect();
            let mut row_ptr = Vec::with_capacity(n + 1);
            row_ptr.push(0);
            for (ends, cols) in &blocks {
                let base = row_ptr.last().copied().unwrap_or(0);
                row_ptr.extend(ends.iter().map(|e| base + e));
                debug_assert_eq!(ends.last().copied().unwrap_or(0), cols.len());
            }
            let cols = blocks.into_iter().flat_map(|(_, c)| c).collect();
            let pattern = SetupPattern::Static { row_ptr, cols };
            spans.host("static pattern (rows in parallel)");
            pattern
        }
    };
    let plan = Plan {
        pattern,
        postfilter: s.postfilter,
        work_bytes: work_bytes.max(1),
    };
    let size = (n, a.nnz());
    let (g, gt, mut stats) = match s.precision {
        Precision::Double => {
            let da = uploaded_a::<f64>(gpu, a)?;
            spans.host("A's CSR uploaded");
            run(gpu, da, size, &plan, &mut spans)
        }
        Precision::Mixed => {
            let da = uploaded_a::<f32>(gpu, a)?;
            spans.host("A's CSR uploaded");
            run(gpu, da, size, &plan, &mut spans)
        }
    }?;
    stats.total_ms = start.elapsed().as_secs_f64() * 1e3;
    spans.finish();
    Ok((g, gt, stats))
}

/// What [`run`] does.
struct Plan {
    pattern: SetupPattern,
    postfilter: f64,
    work_bytes: usize,
}

/// The precision of a set-up: its kernels and the conversion of A's values.
trait Real:
    DeviceRepr + ValidAsZeroBits + KernelElement + super::HostElement + Copy + Unpin + 'static
{
    const INIT: &'static str;
    const GRADIENT: &'static str;
    const GATHER: &'static str;
    const CHOLESKY: &'static str;
    const STOP: &'static str;
    const COMMIT: &'static str;
    const POSTFILTER: &'static str;
    const ASSEMBLE: &'static str;
    fn of(x: f64) -> Self;
    /// A's values on the device in this precision.
    fn upload_values(gpu: &Gpu, values: &[f64]) -> Result<CudaSlice<Self>, GpuError>;
    /// A's values, already on the device in f64, in this precision.
    fn device_values(gpu: &Gpu, values: CudaSlice<f64>) -> Result<CudaSlice<Self>, GpuError>;
}

impl Real for f64 {
    const INIT: &'static str = "fsai_init_f64";
    const GRADIENT: &'static str = "fsai_gradient_f64";
    const GATHER: &'static str = "fsai_gather_f64";
    const CHOLESKY: &'static str = "fsai_cholesky_f64";
    const STOP: &'static str = "fsai_stop_f64";
    const COMMIT: &'static str = "fsai_commit_f64";
    const POSTFILTER: &'static str = "fsai_postfilter_f64";
    const ASSEMBLE: &'static str = "fsai_assemble_f64";
    fn of(x: f64) -> Self {
        x
    }
    /// The values as they are: no host copy of A's values.
    fn upload_values(gpu: &Gpu, values: &[f64]) -> Result<CudaSlice<Self>, GpuError> {
        gpu.upload(values)
    }
    fn device_values(_: &Gpu, values: CudaSlice<f64>) -> Result<CudaSlice<Self>, GpuError> {
        Ok(values)
    }
}

impl Real for f32 {
    const INIT: &'static str = "fsai_init_f32";
    const GRADIENT: &'static str = "fsai_gradient_f32";
    const GATHER: &'static str = "fsai_gather_f32";
    const CHOLESKY: &'static str = "fsai_cholesky_f32";
    const STOP: &'static str = "fsai_stop_f32";
    const COMMIT: &'static str = "fsai_commit_f32";
    const POSTFILTER: &'static str = "fsai_postfilter_f32";
    const ASSEMBLE: &'static str = "fsai_assemble_f32";
    fn of(x: f64) -> Self {
        x as f32
    }
    fn upload_values(gpu: &Gpu, values: &[f64]) -> Result<CudaSlice<Self>, GpuError> {
        let narrowed: Vec<f32> = values.par_iter().map(|&v| Self::of(v)).collect();
        gpu.upload(&narrowed)
    }
    fn device_values(gpu: &Gpu, values: CudaSlice<f64>) -> Result<CudaSlice<Self>, GpuError> {
        f32_copy(gpu, &values)
    }
}

/// A on the device in the set-up's precision.
struct DeviceA<T> {
    row_ptr: CudaSlice<u64>,
    cols: CudaSlice<u32>,
    vals: CudaSlice<T>,
}

impl<T: Real> DeviceA<T> {
    /// A from its CSR on the device (values in f64), in this precision.
    fn of_csr(gpu: &Gpu, csr: DeviceCsr) -> Result<Self, GpuError> {
        Ok(Self {
            row_ptr: csr.row_ptr,
            cols: csr.cols,
            vals: T::device_values(gpu, csr.vals)?,
        })
    }

    /// Pushes A as the set-up's kernels take it: row pointers, columns,
    /// values.
    fn push_args<'a>(&'a self, a: &mut KernelArgs<'a>) {
        a.arg(&self.row_ptr).arg(&self.cols).arg(&self.vals);
    }
}

/// The per-row state of a batch of up to `rows` rows with systems of up to
/// `size` rows, interleaved (kernels/fsai.cu).
struct Work<T> {
    rows: usize,
    m: CudaSlice<i32>,
    npick: CudaSlice<i32>,
    flags: CudaSlice<u32>,
    steps: CudaSlice<i32>,
    status: CudaSlice<i32>,
    bad: CudaSlice<i32>,
    psi0: CudaSlice<T>,
    psi: CudaSlice<T>,
    psi_new: CudaSlice<T>,
    cols: CudaSlice<i32>,
    l: CudaSlice<T>,
    y: CudaSlice<T>,
    g: CudaSlice<T>,
    gnew: CudaSlice<T>,
    list: CudaSlice<i32>,
    offsets: CudaSlice<u64>,
    counts: CudaSlice<u32>,
}

/// Entries of a packed lower triangle of `size` rows.
fn triangle(size: usize) -> usize {
    size * (size + 1) / 2
}

/// Work bytes per row for systems of up to `size` rows.
fn row_bytes(size: usize, real: usize) -> usize {
    // L; y, g, gnew; cols; psi0, psi, psi_new; m, npick, flags, steps,
    // status, bad, list, counts (4 B each); offsets (8 B).
    (triangle(size) + 3 * size + 3) * real + 4 * size + 8 * 4 + 8
}

impl<T: Real> Work<T> {
    fn new(gpu: &Gpu, rows: usize, size: usize) -> Result<Self, GpuError> {
        Ok(Self {
            rows,
            m: gpu.zeros(rows)?,
            npick: gpu.zeros(rows)?,
            flags: gpu.zeros(rows)?,
            steps: gpu.zeros(rows)?,
            status: gpu.zeros(rows)?,
            bad: gpu.zeros(rows)?,
            psi0: gpu.zeros(rows)?,
            psi: gpu.zeros(rows)?,
            psi_new: gpu.zeros(rows)?,
            cols: gpu.zeros(rows * size)?,
            l: gpu.zeros(rows * triangle(size))?,
            y: gpu.zeros(rows * size)?,
            g: gpu.zeros(rows * size)?,
            gnew: gpu.zeros(rows * size)?,
            list: gpu.zeros(rows)?,
            offsets: gpu.zeros(rows + 1)?,
            counts: gpu.zeros(rows)?,
        })
    }
}

/// A batch's rows of G, to be placed once all row counts are known.
struct Chunk {
    first: usize,
    len: usize,
    cols: CudaSlice<u32>,
    vals: CudaSlice<f64>,
}

/// The set-up's device state and accumulated statistics.
struct Setup<'g, T> {
    gpu: &'g Gpu,
    a: DeviceA<T>,
    n: usize,
    nnz_a: usize,
    scan: Scan,
    /// Row counts of G (all rows).
    counts: CudaSlice<u32>,
    chunks: Vec<Chunk>,
    stats: FsaiSetupStats,
    /// Device time per [`Phase`], read once at the end.
    times: PhaseTimes,
    nnz_before: usize,
}

/// The set-up's phases as [`FsaiSetupStats`] reports their device times.
#[derive(Clone, Copy)]
enum Phase {
    Gradient,
    Gather,
    Cholesky,
    Stop,
    Postfilter,
    Assemble,
}
const PHASES: usize = 6;

/// What a gather and factorisation solves ([`Setup::gather_and_factor`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Solve {
    /// An adaptive step: the new rows, with the committed ψ.
    Step,
    /// A static pattern's rows from scratch.
    Static,
    /// The rows the postfilter cut, from scratch on their kept columns.
    Postfilter,
}

/// A's CSR uploaded from the host in the set-up's precision.
fn uploaded_a<T: Real>(gpu: &Gpu, a: &Csr) -> Result<DeviceA<T>, GpuError> {
    let row_ptr: Vec<u64> = a.row_ptr().par_iter().map(|&p| p as u64).collect();
    Ok(DeviceA {
        row_ptr: gpu.upload(&row_ptr)?,
        cols: gpu.upload(a.cols())?,
        vals: T::upload_values(gpu, a.values())?,
    })
}

/// The set-up of `plan` on A (`da`, n rows, `nnz_a` entries) on the device.
fn run<T: Real>(
    gpu: &Gpu,
    da: DeviceA<T>,
    (n, nnz_a): (usize, usize),
    plan: &Plan,
    spans: &mut SetupSpans<'_>,
) -> Result<(DeviceCsr, DeviceCsr, FsaiSetupStats), GpuError> {
    let mut setup = Setup {
        gpu,
        a: da,
        n,
        nnz_a,
        scan: Scan::new(gpu, n)?,
        counts: gpu.zeros(n)?,
        chunks: Vec::new(),
        stats: FsaiSetupStats::default(),
        times: PhaseTimes::default(),
        nnz_before: 0,
    };
    let real = size_of::<T>();
    match &plan.pattern {
        SetupPattern::Adaptive(growth) => {
            let size = growth.max_columns();
            let rows = (plan.work_bytes / row_bytes(size, real)).clamp(1, n);
            let work = Work::<T>::new(gpu, rows, size)?;
            setup.stats.peak_work_bytes = rows * row_bytes(size, real);
            setup.stats.rows_by_steps = vec![0; growth.steps + 1];
            let mut r0 = 0;
            while r0 < n {
                let nb = rows.min(n - r0);
                setup.adaptive_batch(&work, r0, nb, growth)?;
                setup.finish_batch(&work, r0, nb, plan.postfilter)?;
                r0 += nb;
            }
        }
        SetupPattern::Static { row_ptr, cols } => {
            setup.stats.rows_by_steps = vec![0, n];
            let mut r0 = 0;
            while r0 < n {
                // Rows while their largest system fits the budget (one at least).
                let (mut r1, mut size) = (r0, 0);
                while r1 < n {
                    let s = size.max(row_ptr[r1 + 1] - row_ptr[r1]);
                    if r1 > r0 && (r1 + 1 - r0) * row_bytes(s, real) > plan.work_bytes {
                        break;
                    }
                    size = s;
                    r1 += 1;
                }
                let nb = r1 - r0;
                let work = Work::<T>::new(gpu, nb, size.max(1))?;
                setup.stats.peak_work_bytes = setup
                    .stats
                    .peak_work_bytes
                    .max(nb * row_bytes(size.max(1), real));
                let local: Vec<u64> = row_ptr[r0..=r1]
                    .iter()
                    .map(|&p| (p - row_ptr[r0]) as u64)
                    .collect();
                let pat_ptr = gpu.upload(&local)?;
                let pat_cols = gpu.upload(&cols[row_ptr[r0]..row_ptr[r1]])?;
                setup.static_batch(&work, r0, nb, &pat_ptr, &pat_cols)?;
                setup.finish_batch(&work, r0, nb, plan.postfilter)?;
                r0 = r1;
            }
        }
    }
    spans.device("rows in batches: gradient, gather, Cholesky, stop, postfilter");
    let assembled = setup.assemble();
    spans.device("G and Gᵀ assembled");
    assembled
}

impl<T: Real> Setup<'_, T> {
    /// How many of the first `nb` rows hold each value 0 .. bins - 1 of
    /// `values` (a larger value counts in the last bin), counted on the
    /// device: only the counts are read back.
    fn histogram(
        &self,
        values: &CudaSlice<i32>,
        nb: usize,
        bins: usize,
    ) -> Result<Vec<u64>, GpuError> {
        if !(1..=HISTOGRAM_BINS).contains(&bins) {
            return Err(GpuError::Invalid(format!(
                "FSAI set-up: a histogram of {bins} bins (the kernel holds 1 to {HISTOGRAM_BINS})"
            )));
        }
        let counts = self.gpu.zeros::<u64>(bins)?;
        let (nb32, bins32) = (nb as i32, bins as i32);
        self.gpu.launch_vector("fsai_histogram", nb, |a| {
            a.arg(&nb32).arg(values).arg(&bins32).arg(&counts);
        })?;
        self.gpu.download(&counts)
    }

    /// G's row counts of the batch (m + 1) into work.counts, their
    /// exclusive scan into work.offsets; their sum.
    fn row_counts(&self, work: &Work<T>, nb: usize) -> Result<usize, GpuError> {
        let nb32 = nb as i32;
        self.gpu.launch_vector("fsai_row_counts", nb, |a| {
            a.arg(&nb32).arg(&work.m).arg(&work.counts);
        })?;
        Ok(self.scan.run(self.gpu, &work.counts, nb, &work.offsets)? as usize)
    }

    /// The rows flagged in work.flags[..nb] into work.list; their count.
    fn compact(&self, work: &Work<T>, nb: usize) -> Result<usize, GpuError> {
        let count = self.scan.run(self.gpu, &work.flags, nb, &work.offsets)? as usize;
        let nb32 = nb as i32;
        self.gpu.launch_vector("fsai_compact", nb, |a| {
            a.arg(&nb32)
                .arg(&work.flags)
                .arg(&work.offsets)
                .arg(&work.list);
        })?;
        Ok(count)
    }

    fn init(&self, work: &Work<T>, r0: usize, nb: usize) -> Result<(), GpuError> {
        let (nb32, r032) = (nb as i32, r0 as i32);
        self.gpu.launch_vector(T::INIT, nb, |a| {
            a.arg(&nb32).arg(&r032);
            self.a.push_args(a);
            a.arg(&work.m)
                .arg(&work.npick)
                .arg(&work.flags)
                .arg(&work.steps)
                .arg(&work.status)
                .arg(&work.psi0)
                .arg(&work.psi);
        })
    }

    /// (K2) and (K3) over `count` rows (`list`, or the first `count`) for
    /// `solve`: an adaptive step's new rows with the committed ψ, or the
    /// whole system from scratch with ψ from a_ii.
    fn gather_and_factor(
        &self,
        work: &Work<T>,
        r0: usize,
        nb: usize,
        (count, list): (usize, Option<&CudaSlice<i32>>),
        solve: Solve,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let full = solve != Solve::Step;
        let phases = match solve {
            Solve::Postfilter => (Phase::Postfilter, Phase::Postfilter),
            Solve::Step | Solve::Static => (Phase::Gather, Phase::Cholesky),
        };
        let (count32, nb32, r032, full32) = (count as i32, nb as i32, r0 as i32, full as i32);
        gpu.time_phase(&self.times, phases.0 as usize, || {
            gpu.launch_vector(T::GATHER, count, |a| {
                a.arg(&count32);
                arg_or_null(a, list);
                a.arg(&nb32).arg(&r032).arg(&full32);
                self.a.push_args(a);
                a.arg(&work.m)
                    .arg(&work.npick)
                    .arg(&work.cols)
                    .arg(&work.l)
                    .arg(&work.y);
            })
        })?;
        let psi = if full { &work.psi0 } else { &work.psi };
        gpu.time_phase(&self.times, phases.1 as usize, || {
            gpu.launch_vector(T::CHOLESKY, count, |a| {
                a.arg(&count32);
                arg_or_null(a, list);
                a.arg(&nb32)
                    .arg(&full32)
                    .arg(&work.m)
                    .arg(&work.npick)
                    .arg(psi)
                    .arg(&work.l)
                    .arg(&work.y)
                    .arg(&work.gnew)
                    .arg(&work.psi_new)
                    .arg(&work.bad);
            })
        })
    }

    /// Commit of from-scratch solves (static rows, postfilter re-solves).
    fn commit(
        &self,
        work: &Work<T>,
        nb: usize,
        count: usize,
        list: Option<&CudaSlice<i32>>,
    ) -> Result<(), GpuError> {
        let (count32, nb32) = (count as i32, nb as i32);
        self.gpu.launch_vector(T::COMMIT, count, |a| {
            a.arg(&count32);
            arg_or_null(a, list);
            a.arg(&nb32)
                .arg(&work.m)
                .arg(&work.psi_new)
                .arg(&work.bad)
                .arg(&work.psi)
                .arg(&work.g)
                .arg(&work.gnew)
                .arg(&work.status);
        })
    }

    /// The adaptive steps of rows r0 .. r0 + nb.
    fn adaptive_batch(
        &mut self,
        work: &Work<T>,
        r0: usize,
        nb: usize,
        growth: &AdaptivePattern,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        self.init(work, r0, nb)?;
        let step_size = growth.step_size;
        let (nb32, r032, s32) = (nb as i32, r0 as i32, step_size as i32);
        let epsilon = T::of(growth.epsilon);
        let rule = match growth.stop {
            FsaiStop::Stagnation => STOP_STAGNATION,
            FsaiStop::Reduction => STOP_REDUCTION,
        };
        for step in 0..growth.steps {
            let mut count = 0;
            gpu.time_phase(&self.times, Phase::Stop as usize, || {
                count = self.compact(work, nb)?;
                Ok(())
            })?;
            if count == 0 {
                break;
            }
            let count32 = count as i32;
            let lanes = gradient_lanes(step, step_size);
            let lanes32 = lanes as i32;
            let rows_per_block = GRADIENT_BLOCK as usize / lanes;
            gpu.time_phase(&self.times, Phase::Gradient as usize, || {
                gpu.launch(
                    T::GRADIENT,
                    count.div_ceil(rows_per_block) as u32,
                    GRADIENT_BLOCK,
                    0,
                    |a| {
                        a.arg(&count32)
                            .arg(&work.list)
                            .arg(&nb32)
                            .arg(&r032)
                            .arg(&s32)
                            .arg(&lanes32);
                        self.a.push_args(a);
                        a.arg(&work.m)
                            .arg(&work.cols)
                            .arg(&work.g)
                            .arg(&work.npick)
                            .arg(&work.flags);
                    },
                )
            })?;
            self.gather_and_factor(work, r0, nb, (count, Some(&work.list)), Solve::Step)?;
            gpu.time_phase(&self.times, Phase::Stop as usize, || {
                gpu.launch_vector(T::STOP, count, |a| {
                    a.arg(&count32)
                        .arg(&work.list)
                        .arg(&nb32)
                        .arg(&rule)
                        .arg(&epsilon)
                        .arg(&work.m)
                        .arg(&work.npick)
                        .arg(&work.psi0)
                        .arg(&work.psi)
                        .arg(&work.psi_new)
                        .arg(&work.bad)
                        .arg(&work.g)
                        .arg(&work.gnew)
                        .arg(&work.flags)
                        .arg(&work.steps)
                        .arg(&work.status);
                })
            })?;
        }
        let rows_by_steps = self.histogram(&work.steps, nb, self.stats.rows_by_steps.len())?;
        for (total, rows) in self.stats.rows_by_steps.iter_mut().zip(rows_by_steps) {
            *total += rows as usize;
        }
        Ok(())
    }

    /// The static rows r0 .. r0 + nb with their pattern (batch-local CSR).
    fn static_batch(
        &mut self,
        work: &Work<T>,
        r0: usize,
        nb: usize,
        pat_ptr: &CudaSlice<u64>,
        pat_cols: &CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        self.init(work, r0, nb)?;
        let nb32 = nb as i32;
        gpu.time_phase(&self.times, Phase::Gather as usize, || {
            gpu.launch_vector("fsai_static_pattern", nb, |a| {
                a.arg(&nb32)
                    .arg(pat_ptr)
                    .arg(pat_cols)
                    .arg(&work.m)
                    .arg(&work.cols);
            })
        })?;
        self.gather_and_factor(work, r0, nb, (nb, None), Solve::Static)?;
        gpu.time_phase(&self.times, Phase::Stop as usize, || {
            self.commit(work, nb, nb, None)
        })?;
        Ok(())
    }

    /// Postfilter, statistics and the batch's chunk of G.
    fn finish_batch(
        &mut self,
        work: &Work<T>,
        r0: usize,
        nb: usize,
        postfilter: f64,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let nb32 = nb as i32;
        if postfilter > 0.0 {
            // G's entries before the filter (after it: the chunk's length).
            self.nnz_before += self.row_counts(work, nb)?;
            let delta = T::of(postfilter);
            let mut count = 0;
            gpu.time_phase(&self.times, Phase::Postfilter as usize, || {
                gpu.launch_vector(T::POSTFILTER, nb, |a| {
                    a.arg(&nb32)
                        .arg(&delta)
                        .arg(&work.m)
                        .arg(&work.cols)
                        .arg(&work.g)
                        .arg(&work.flags);
                })?;
                count = self.compact(work, nb)?;
                Ok(())
            })?;
            if count > 0 {
                let list = Some(&work.list);
                self.gather_and_factor(work, r0, nb, (count, list), Solve::Postfilter)?;
                gpu.time_phase(&self.times, Phase::Postfilter as usize, || {
                    self.commit(work, nb, count, list)
                })?;
            }
        }
        self.stats.fallback_rows += self.histogram(&work.status, nb, 2)?[1] as usize;
        let mut len = 0;
        gpu.time_phase(&self.times, Phase::Assemble as usize, || {
            len = self.row_counts(work, nb)?;
            Ok(())
        })?;
        if postfilter <= 0.0 {
            self.nnz_before += len;
        }
        let chunk = Chunk {
            first: r0,
            len,
            cols: gpu.zeros(len)?,
            vals: gpu.zeros(len)?,
        };
        let r032 = r0 as i32;
        gpu.time_phase(&self.times, Phase::Assemble as usize, || {
            gpu.launch_vector(T::ASSEMBLE, nb, |a| {
                a.arg(&nb32)
                    .arg(&r032)
                    .arg(&work.offsets)
                    .arg(&work.m)
                    .arg(&work.cols)
                    .arg(&work.g)
                    .arg(&work.psi)
                    .arg(&chunk.cols)
                    .arg(&chunk.vals);
            })?;
            gpu.launch_vector("fsai_place_counts", nb, |a| {
                a.arg(&nb32).arg(&r032).arg(&work.counts).arg(&self.counts);
            })
        })?;
        self.chunks.push(chunk);
        self.stats.batches += 1;
        debug_assert!(nb <= work.rows);
        Ok(())
    }

    /// G from the chunks, and Gᵀ.
    fn assemble(mut self) -> Result<(DeviceCsr, DeviceCsr, FsaiSetupStats), GpuError> {
        let gpu = self.gpu;
        let n = self.n;
        let n32 = n as i32;
        let row_ptr = gpu.zeros::<u64>(n + 1)?;
        let mut nnz = 0;
        let mut t_nnz = 0;
        let mut out = None;
        let chunks = std::mem::take(&mut self.chunks);
        gpu.time_phase(&self.times, Phase::Assemble as usize, || {
            nnz = self.scan.run(gpu, &self.counts, n, &row_ptr)? as usize;
            let cols = gpu.zeros::<u32>(nnz)?;
            let vals = gpu.zeros::<f64>(nnz)?;
            for c in &chunks {
                let (len, first) = (c.len as i64, c.first as i32);
                gpu.launch_vector("fsai_place_chunk", c.len, |a| {
                    a.arg(&len)
                        .arg(&first)
                        .arg(&row_ptr)
                        .arg(&c.cols)
                        .arg(&c.vals)
                        .arg(&cols)
                        .arg(&vals);
                })?;
            }
            let t_counts = gpu.zeros::<u32>(n)?;
            gpu.launch_vector("fsai_transpose_count", n, |a| {
                a.arg(&n32).arg(&row_ptr).arg(&cols).arg(&t_counts);
            })?;
            let t_row_ptr = gpu.zeros::<u64>(n + 1)?;
            t_nnz = self.scan.run(gpu, &t_counts, n, &t_row_ptr)? as usize;
            let fill = gpu.zeros::<u32>(n)?;
            let t_cols = gpu.zeros::<u32>(nnz)?;
            let t_vals = gpu.zeros::<f64>(nnz)?;
            gpu.launch_vector("fsai_transpose_fill", n, |a| {
                a.arg(&n32)
                    .arg(&row_ptr)
                    .arg(&cols)
                    .arg(&vals)
                    .arg(&t_row_ptr)
                    .arg(&fill)
                    .arg(&t_cols)
                    .arg(&t_vals);
            })?;
            gpu.launch_vector("fsai_sort_rows", n, |a| {
                a.arg(&n32).arg(&t_row_ptr).arg(&t_cols).arg(&t_vals);
            })?;
            out = Some((cols, vals, t_row_ptr, t_cols, t_vals));
            Ok(())
        })?;
        drop(chunks);
        let (cols, vals, t_row_ptr, t_cols, t_vals) =
            out.ok_or_else(|| GpuError::Invalid("FSAI assembly produced nothing".into()))?;
        if t_nnz != nnz {
            return Err(GpuError::Invalid(format!(
                "FSAI: G has {nnz} entries but its transpose {t_nnz}"
            )));
        }
        let g = DeviceCsr {
            n,
            nnz,
            row_ptr,
            cols,
            vals,
        };
        let gt = DeviceCsr {
            n,
            nnz,
            row_ptr: t_row_ptr,
            cols: t_cols,
            vals: t_vals,
        };
        let ms = self.times.read(PHASES)?;
        let stats = &mut self.stats;
        stats.gradient_ms = ms[Phase::Gradient as usize];
        stats.gather_ms = ms[Phase::Gather as usize];
        stats.cholesky_ms = ms[Phase::Cholesky as usize];
        stats.stop_ms = ms[Phase::Stop as usize];
        stats.postfilter_ms = ms[Phase::Postfilter as usize];
        stats.assemble_ms = ms[Phase::Assemble as usize];
        stats.density_before_postfilter = self.nnz_before as f64 / self.nnz_a as f64;
        stats.density = nnz as f64 / self.nnz_a as f64;
        Ok((g, gt, self.stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step of every pattern the settings allow has a lane for the row,
    /// one per committed column and one per candidate, in groups that tile a
    /// warp.
    #[test]
    fn gradient_lanes_hold_the_row_its_pattern_and_the_candidates() {
        for step_size in 1..=MAX_ADAPTIVE_PATTERN {
            for steps in 1..=MAX_ADAPTIVE_PATTERN / step_size {
                for step in 0..steps {
                    let lanes = gradient_lanes(step, step_size);
                    assert!(lanes.is_power_of_two() && (4..=32).contains(&lanes));
                    assert!(
                        lanes > step * step_size,
                        "{steps} x {step_size}, step {step}"
                    );
                    assert!(lanes >= step_size);
                }
            }
        }
        assert_eq!(gradient_lanes(0, 1), 4);
        assert_eq!(gradient_lanes(4, 1), 8);
        assert_eq!(gradient_lanes(9, 1), 16);
        assert_eq!(gradient_lanes(15, 2), 32);
    }
}
