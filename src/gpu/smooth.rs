//! Smoothers on the GPU over mod-SELL (`kernels/smooth.cu`), as OpenFOAM's
//! smoothSolver and as PCG preconditioners; their CPU references are in
//! `solve::smoother` and `solve::block_jacobi`.
//!
//! - Weighted and L1 Jacobi: one SpMV-like kernel per sweep, double-buffered.
//! - Multicolour Gauss–Seidel: Jones–Plassmann colours computed on the GPU
//!   (identical to the CPU's `Colouring::jones_plassmann`), rows addressed by a
//!   colour index list (rows grouped by colour, ascending), one launch per
//!   colour. The solves renumber the rows colour by colour first
//!   ([`colour_layout`]), so that the list is the identity and each colour's
//!   rows are contiguous in mod-SELL.
//! - Block Jacobi (Wikberg 2024, §4.3, its `smooth_kern`): one thread block
//!   per mod-SELL slice; the slice's local matrix in shared memory. The rows
//!   are ordered by [`crate::sparse::blocks::grown_blocks`] so that slices are
//!   compact; [`block_layout`] picks the largest slice height ≤ `blockSize`
//!   whose local matrices fit the device's shared memory (and threads per
//!   block), saying so when it has to go smaller.
//! - Polynomial smoothers (`gpu::polynomial`): x += M⁻¹ (b − A x) in place.
//!
//! [`DevicePreconditioner`] is the device analogue of `solve::LinearOperator`
//! for preconditioners: `GpuCgBackend::set_preconditioner` takes any of them.
//! Both are one `solve::precondition::Precondition` of their executor's
//! vectors (the blanket implementation below); what PCG's device loop adds
//! (`apply_gated`, `graph_key`) stays with this trait.

use crate::gpu::kernel_args::KernelElement;
use crate::gpu::KernelArgs;
use std::cell::RefCell;
use std::rc::Rc;

use cudarc::driver::CudaSlice;

use super::amg::gpu_amg_settings;
use super::block_jacobi::{BlockIcStructure, DeviceBlockIc, BLOCK_IC_KERNELS};
use super::levels::{identity_rows, widen};
use super::matrix::{DeviceModSell, DeviceModSellF32};
use super::pcg::{DeviceSolve, GpuCgBackend, GpuSolveOptions, GpuSolver, GpuVector, ScaledSystem};
use super::polynomial::DevicePolynomial;
use super::setup::{checked_diagonal, jacobi_scales, RowScale, SetupSpans};
use super::{arg_or_null, Gpu, GpuError, NULL};
use crate::solve::colouring::Colouring;
use crate::solve::cpu::check_system;
use crate::solve::registry::{self, Role};
use crate::solve::smooth_solver::{smooth_solve, SmoothBackend};
use crate::solve::smoother::{check_diagonal, sweep_order};
use crate::solve::{
    pcg, ColouringKind, Equilibration, EquilibrationKind, InnerSolver, OnExecutor,
    PolynomialSettings, Precision, Preconditioner, PreconditionerKind, SmootherKind,
    SmootherSettings, SolveError, SolverPerformance, Sweep,
};
use crate::sparse::blocks::{grown_blocks, in_slice_counts};
use crate::sparse::ordering::reverse_cuthill_mckee;
use crate::sparse::{Csr, ModSell, Permutation};

/// A preconditioner applied on the device.
pub trait DevicePreconditioner {
    /// The rows of M.
    fn n(&self) -> usize;
    /// z = M⁻¹ r; z is fully overwritten (through kernels: PCG's work
    /// vectors are shared with the backend's pool). With `done` (PCG's fused
    /// device loop, which may run on past the end of the solve): `done[0] != 0`
    /// on the device means the result is not needed, and kernels that read
    /// `done` first can return at once; then only kernel launches and memsets
    /// on the Gpu's stream are allowed (no downloads, allocations or host
    /// synchronisation): the loop is captured into a CUDA graph.
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError>;
    /// z = M⁻¹ r.
    fn apply(&self, r: &CudaSlice<f64>, z: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.apply_with(r, z, None)
    }
    /// z = M⁻¹ r inside PCG's fused device loop (see [`Self::apply_with`]).
    fn apply_gated(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: &CudaSlice<f64>,
    ) -> Result<(), GpuError> {
        self.apply_with(r, z, Some(done))
    }
    /// z = M⁻¹ r inside PCG's fused device loop (as [`Self::apply_gated`],
    /// `dot.state` the stop flag) with the r · z partials that
    /// `cg_precondition` would store from r and z, bit for bit, written by
    /// the application's last kernel, and with `dot.ticket` its last block's
    /// finish of iteration `dot.j`: one pass over z and a launch fewer per
    /// iteration. `Ok(false)` where the preconditioner does not (z is applied
    /// all the same; the loop then launches `cg_precondition`).
    fn apply_gated_with_dot(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        dot: &LoopDot<'_>,
    ) -> Result<bool, GpuError> {
        self.apply_gated(r, z, dot.state)?;
        Ok(false)
    }
    /// Whether M⁻¹ is the same linear map at every application; if not, PCG
    /// runs flexible (`CgBackend::flexible_term`).
    fn is_linear(&self) -> bool;
    /// Names the kernels and device buffers an application launches with:
    /// two preconditioners with the same key launch the same kernels with
    /// the same arguments (new values in the same buffers, as after a
    /// value-only re-set-up), so a CUDA graph PCG captured with one replays
    /// the other. `None` promises nothing: a graph is captured again after
    /// every `GpuCgBackend::set_preconditioner`.
    fn graph_key(&self) -> Option<u64> {
        None
    }
    /// Its name before the Krylov method's in the log line, where OpenFOAM
    /// has the preconditioner (`GAMG` of `GAMGPCG`:
    /// `solve::Preconditioner::log_name`).
    fn preconditioner_name(&self) -> Option<&'static str> {
        None
    }
    /// Minimum bytes one application moves (each array its kernels read or
    /// write, once per kernel), for the floor of a solve's time; `None`
    /// where it is not counted.
    fn application_bytes(&self) -> Option<f64> {
        None
    }
}

/// Where PCG's fused loop takes r · z of iteration `j` from
/// ([`DevicePreconditioner::apply_gated_with_dot`]): the loop's state (also
/// its stop flag) and records, the partials of r · z in chunks of
/// `chunk_rows` rows (`cg_precondition`'s block, [`super::VECTOR_BLOCK`]),
/// and the ticket of a folded launch (none: the loop reduces them after).
pub struct LoopDot<'a> {
    pub state: &'a CudaSlice<f64>,
    pub records: &'a CudaSlice<f64>,
    pub partials: &'a CudaSlice<f64>,
    pub chunk_rows: i32,
    pub j: i32,
    pub ticket: Option<&'a CudaSlice<u32>>,
}

/// A preconditioner kept by its owner between solves (e.g. an AMG hierarchy
/// re-set-up in place for each new matrix) and lent to one PCG backend at a
/// time.
impl<P: DevicePreconditioner + ?Sized> DevicePreconditioner for Rc<P> {
    fn n(&self) -> usize {
        (**self).n()
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        (**self).apply_with(r, z, done)
    }
    fn apply_gated_with_dot(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        dot: &LoopDot<'_>,
    ) -> Result<bool, GpuError> {
        (**self).apply_gated_with_dot(r, z, dot)
    }
    fn is_linear(&self) -> bool {
        (**self).is_linear()
    }
    fn graph_key(&self) -> Option<u64> {
        (**self).graph_key()
    }
    fn preconditioner_name(&self) -> Option<&'static str> {
        (**self).preconditioner_name()
    }
    fn application_bytes(&self) -> Option<f64> {
        (**self).application_bytes()
    }
}

/// Every device preconditioner is a `solve::precondition::Precondition` of
/// the GPU executors' vectors (the one trait the Krylov backends apply
/// preconditioners through); a failed application is the device's error.
/// Named by its path, not imported, so that `apply` on a device
/// preconditioner stays [`DevicePreconditioner::apply`] in this module.
impl<P: DevicePreconditioner + ?Sized> crate::solve::precondition::Precondition<GpuVector> for P {
    type Error = GpuError;
    fn n(&self) -> usize {
        DevicePreconditioner::n(self)
    }
    /// [`DevicePreconditioner::apply`]: the same launches.
    fn apply(&self, r: &GpuVector, z: &mut GpuVector) -> Result<(), GpuError> {
        DevicePreconditioner::apply(self, r.dev()?, z.dev()?)
    }
    fn is_linear(&self) -> bool {
        DevicePreconditioner::is_linear(self)
    }
}

/// Rounds of [`jones_plassmann`] launched between two read-backs of the
/// rows left uncoloured (a round after the last colours nothing).
const JP_BATCH: usize = 8;

/// Jones–Plassmann colouring on the GPU (Jones and Plassmann 1993;
/// `jp_select`, `jp_assign`): each round colours the uncoloured rows that
/// outrank their uncoloured neighbours by hashed priority, first fit. The
/// rounds run in batches of [`JP_BATCH`], each round counting the rows it
/// leaves uncoloured into its own counter, and the host reads the batch's
/// counters once (a mesh needs tens of rounds: a few read-backs instead
/// of one per round); rounds past the last change nothing. Returns the colours
/// and the number of rounds that coloured rows.
pub fn jones_plassmann(gpu: &Gpu, m: &DeviceModSell) -> Result<(Vec<u32>, usize), GpuError> {
    let (n, dims) = (m.n, m.dims());
    let colour = gpu.upload(&vec![-1i32; n])?;
    let candidate = gpu.zeros::<i32>(n)?;
    let mut uncoloured = gpu.zeros::<i32>(JP_BATCH)?;
    let mut rounds = 0;
    let mut all_coloured = n == 0;
    while !all_coloured {
        gpu.zero(&mut uncoloured)?;
        for k in 0..JP_BATCH {
            m.launch_pattern(gpu, "jp_select", &dims, |a| {
                a.arg(&colour).arg(&candidate);
            })?;
            let left = uncoloured.slice(k..k + 1);
            m.launch_pattern(gpu, "jp_assign", &dims, |a| {
                a.arg(&colour).arg(&candidate).arg(&left);
            })?;
        }
        let left = gpu.download(&uncoloured)?;
        // Each round colours at least the top-ranked uncoloured row.
        if let Some(k) = left.iter().position(|&l| l == 0) {
            rounds += k + 1;
            all_coloured = true;
            continue;
        }
        rounds += JP_BATCH;
        if rounds > n {
            return Err(GpuError::Invalid(format!(
                "Jones-Plassmann colouring still had rows left after {rounds} rounds on {n} rows"
            )));
        }
    }
    let colours = gpu.download(&colour)?;
    Ok((colours[..n].iter().map(|&c| c as u32).collect(), rounds))
}

/// A colouring on the device: the rows grouped by colour.
pub struct DeviceColouring {
    colouring: Colouring,
    /// Each colour's first row and row count, as the kernels take them.
    bounds: Vec<(i32, i32)>,
    rows: CudaSlice<i32>,
}

impl DeviceColouring {
    /// Jones–Plassmann (on the GPU) or greedy (on the host, natural order) colours.
    pub fn new(
        gpu: &Gpu,
        a: &Csr,
        m: &DeviceModSell,
        kind: ColouringKind,
    ) -> Result<Self, GpuError> {
        let colouring =
            match kind {
                ColouringKind::JonesPlassmann => {
                    let (colours, rounds) = jones_plassmann(gpu, m)?;
                    let c = Colouring::from_colours(colours).map_err(GpuError::Invalid)?;
                    log::debug!(
                        "Jones-Plassmann colouring: {} colours in {rounds} rounds",
                        c.n_colours()
                    );
                    c
                }
                ColouringKind::Greedy => Colouring::greedy(a),
                ColouringKind::Natural => return Err(GpuError::Invalid(
                    "natural-order Gauss-Seidel is sequential; on the GPU it needs a colouring \
                     (JonesPlassmann or greedy)"
                        .into(),
                )),
            };
        Self::from_colouring(gpu, colouring)
    }

    /// A colouring computed before (e.g. by [`colour_layout`]).
    pub fn from_colouring(gpu: &Gpu, colouring: Colouring) -> Result<Self, GpuError> {
        let n = colouring.rows().len();
        // A colour-contiguous order's list is 0..n (a flag of the
        // colouring, no pass over the rows): written on the device.
        let rows = match colouring.is_contiguous() {
            true => identity_rows(gpu, n)?,
            false => {
                let rows: Vec<i32> = colouring.rows().iter().map(|&r| r as i32).collect();
                gpu.upload(&rows)?
            }
        };
        let bounds = colouring
            .colour_ptr()
            .windows(2)
            .map(|w| (w[0] as i32, (w[1] - w[0]) as i32))
            .collect();
        Ok(Self {
            rows,
            bounds,
            colouring,
        })
    }

    pub fn colouring(&self) -> &Colouring {
        &self.colouring
    }

    /// Launches `kernel` for each colour in `sweep`'s order, one thread per
    /// row of the colour: the colour's row count and first row, the slice
    /// height `h` and the rows, then the arguments `push` adds.
    fn launch_colours<'a>(
        &'a self,
        gpu: &'a Gpu,
        kernel: &'static str,
        sweep: Sweep,
        h: &'a i32,
        push: impl Fn(&mut KernelArgs<'a>),
    ) -> Result<(), GpuError> {
        for k in sweep_order(sweep, self.bounds.len()) {
            let (first, count) = &self.bounds[k];
            gpu.launch_vector(kernel, *count as usize, |a| {
                a.arg(count).arg(first).arg(h).arg(&self.rows);
                push(a);
            })?;
        }
        Ok(())
    }
}

/// Multicolour Gauss–Seidel's layout: the rows of `a` grouped by their
/// Jones–Plassmann colour (computed on the GPU), ascending within a colour so
/// that `a`'s locality (RCM) is kept; each colour is then a contiguous run of
/// mod-SELL rows and its sweep reads its slots coalesced, instead of picking
/// its rows out of sectors shared with the other colours (Wikberg's (2024)
/// objection §4.2.1 (i)). Returns the ordering, `a` in it and the colouring in it.
pub fn colour_layout(
    gpu: &Gpu,
    a: &Csr,
    slice_height: usize,
) -> Result<(Permutation, Csr, Colouring), GpuError> {
    let mut spans = SetupSpans::new("colour layout", Some(gpu));
    let m = ModSell::from_csr(a, slice_height).map_err(GpuError::Invalid)?;
    let m = DeviceModSell::upload(gpu, &m)?;
    spans.host("mod-SELL copy and upload for the colouring");
    colour_layout_of(gpu, a, &m, spans)
}

/// [`colour_layout`] of `a` coloured on `m`, its copy already resident on
/// the device (the same rows): no mod-SELL conversion or upload.
pub fn colour_layout_resident(
    gpu: &Gpu,
    a: &Csr,
    m: &DeviceModSell,
) -> Result<(Permutation, Csr, Colouring), GpuError> {
    m.check_rows("colour layout", a)?;
    colour_layout_of(gpu, a, m, SetupSpans::new("colour layout", Some(gpu)))
}

fn colour_layout_of(
    gpu: &Gpu,
    a: &Csr,
    m: &DeviceModSell,
    mut spans: SetupSpans<'_>,
) -> Result<(Permutation, Csr, Colouring), GpuError> {
    let (colours, _) = jones_plassmann(gpu, m)?;
    spans.device("Jones-Plassmann colouring (a read-back per 8 rounds)");
    let (p, colouring) = Colouring::from_colours(colours)
        .map_err(GpuError::Invalid)?
        .contiguous();
    spans.host("rows grouped by colour");
    let ordered = p.apply_symmetric(a);
    spans.host("colour-contiguous permutation of the matrix");
    spans.finish();
    Ok((p, ordered, colouring))
}

/// Bytes of dynamic shared memory of one block-Jacobi block of `h` rows whose
/// rows have at most `mnz` in-slice off-diagonals: x (8 B) and the local matrix
/// (value 8 B + column 4 B per entry) per row (Wikberg 2024, (4.15)).
pub fn block_shared_bytes(h: usize, mnz: usize) -> usize {
    h * (8 + 12 * mnz)
}

/// Block Jacobi's layout: the largest slice height ≤ `wanted` (halving, down
/// to 32) at which one thread block per slice fits the device (threads per
/// block, shared memory), the grown-block ordering for it and `a` in that order.
pub fn block_layout(
    gpu: &Gpu,
    a: &Csr,
    wanted: usize,
) -> Result<(usize, Permutation, Csr), GpuError> {
    block_layout_for(gpu, a, wanted, &["smooth_block"], "block Jacobi")
}

/// [`block_layout`] for the block kernels `kernels` (`what` names them in
/// the messages): block-IC's ([`super::block_jacobi::BLOCK_IC_KERNELS`]) or block
/// Jacobi's.
pub fn block_layout_for(
    gpu: &Gpu,
    a: &Csr,
    wanted: usize,
    kernels: &[&'static str],
    what: &str,
) -> Result<(usize, Permutation, Csr), GpuError> {
    let mut limits = gpu.kernel_limits(kernels[0])?;
    for &k in &kernels[1..] {
        let l = gpu.kernel_limits(k)?;
        limits.threads_per_block = limits.threads_per_block.min(l.threads_per_block);
        limits.dynamic_shared_bytes = limits.dynamic_shared_bytes.min(l.dynamic_shared_bytes);
    }
    let rcm = reverse_cuthill_mckee(a);
    let mut h = wanted;
    loop {
        let p = grown_blocks(a, h, &rcm);
        let ordered = p.apply_symmetric(a);
        let mnz = in_slice_counts(&ordered, h).into_iter().max().unwrap_or(0) as usize;
        let bytes = block_shared_bytes(h, mnz);
        if h <= limits.threads_per_block && bytes <= limits.dynamic_shared_bytes {
            return Ok((h, p, ordered));
        }
        let why = format!(
            "{h}-row blocks need {h} threads (the kernel allows {}) and {bytes} bytes of shared \
             memory for rows with up to {mnz} in-block neighbours (the device allows {})",
            limits.threads_per_block, limits.dynamic_shared_bytes
        );
        if h <= 32 {
            return Err(GpuError::Invalid(format!(
                "{what} does not fit on this GPU: {why}"
            )));
        }
        h = (h / 64).max(1) * 32;
        log::warn!("{what}: {why}; using {h}-row blocks instead");
    }
}

/// Bytes of dynamic shared memory of one mixed-precision block-Jacobi block
/// (`smooth_block_f32`): [`block_shared_bytes`] with f32 values (x 4 B, entry
/// 4 B + column 4 B).
pub fn block_shared_bytes_f32(h: usize, mnz: usize) -> usize {
    h * (4 + 8 * mnz)
}

/// The block kernel's arguments.
struct BlockKernel {
    slice_mnz: CudaSlice<i32>,
    shared_bytes: u32,
    inner: i32,
    max_iter: i32,
    tol2: f64,
    omega: f64,
    asynchronous: bool,
    /// Mixed precision (PCG preconditioner only, `smooth_block_f32`): the
    /// f32 twin of the matrix and two f32 iterates.
    mixed: Option<(DeviceModSellF32, [CudaSlice<f32>; 2])>,
}

impl BlockKernel {
    /// One sweep of `kernel` on `m`'s slices: `smooth_block` with T = f64
    /// (A's values and diagonal) or `smooth_block_f32` with T = f32 (the f32
    /// twin's), from `from` (None: x = 0) into `to`.
    #[allow(clippy::too_many_arguments)]
    fn launch<T: KernelElement>(
        &self,
        gpu: &Gpu,
        kernel: &'static str,
        m: &DeviceModSell,
        (values, diag): (&CudaSlice<T>, &CudaSlice<T>),
        b: &CudaSlice<f64>,
        (from, to): (Option<&CudaSlice<T>>, &CudaSlice<T>),
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (n, h) = (m.n as i32, m.slice_height as u32);
        let (inner, max_iter, tol2, omega) = (&self.inner, &self.max_iter, &self.tol2, &self.omega);
        gpu.launch(kernel, m.n_slices() as u32, h, self.shared_bytes, |a| {
            a.arg(&n).arg(&m.slice_ptr).arg(&m.codes);
            a.arg(values).arg(diag).arg(&self.slice_mnz).arg(b);
            arg_or_null(a, from);
            a.arg(to);
            a.arg(inner).arg(max_iter).arg(tol2).arg(omega);
            arg_or_null(a, done);
        })
    }
}

/// x = 0 in f32 (`zero_vector_f32`), gated.
fn zero_f32(
    gpu: &Gpu,
    n: usize,
    x: &CudaSlice<f32>,
    done: Option<&CudaSlice<f64>>,
) -> Result<(), GpuError> {
    let n32 = n as i32;
    gpu.launch_vector("zero_vector_f32", n, |a| {
        a.arg(&n32).arg(x);
        arg_or_null(a, done);
    })
}

enum Method<'g> {
    /// Weighted or L1 Jacobi with its row scales.
    Jacobi {
        scale: CudaSlice<f64>,
    },
    GaussSeidel {
        colouring: DeviceColouring,
        sweep: Sweep,
        /// Mixed precision (PCG preconditioner only): the f32 twin of the
        /// matrix and the f32 iterate.
        mixed: Option<(DeviceModSellF32, CudaSlice<f32>)>,
    },
    Block(BlockKernel),
    /// x += M⁻¹ (b − A x), a polynomial M⁻¹ (`gpu::polynomial`), in place.
    Polynomial(Box<DevicePolynomial<'g>>),
    /// Block-IC (block Jacobi with inner DIC or IC0, `gpu::ic`), double-buffered.
    BlockIc(Box<DeviceBlockIc>),
    /// Weighted or L1 Jacobi in mixed precision (PCG preconditioner only):
    /// the f32 twin of the matrix, f32 scales and two f32 iterates.
    JacobiF32 {
        twin: DeviceModSellF32,
        scale: CudaSlice<f32>,
        x: [CudaSlice<f32>; 2],
    },
}

/// A smoother on the device for a mod-SELL matrix.
pub struct DeviceSmoother<'g> {
    gpu: &'g Gpu,
    matrix: Rc<DeviceModSell>,
    method: Method<'g>,
    /// The second buffer of double-buffered sweeps, exchanged with x.
    spare: RefCell<Option<CudaSlice<f64>>>,
}

impl<'g> DeviceSmoother<'g> {
    /// The smoother of `settings` for `matrix`, the device copy of `a` (same
    /// row order). Block Jacobi's blocks are the matrix's slices
    /// ([`block_layout`] chooses their height). Gauss–Seidel needs a colouring
    /// and DIC is not available: see [`gpu_smoother`].
    pub fn new(
        gpu: &'g Gpu,
        a: &Csr,
        matrix: Rc<DeviceModSell>,
        settings: &SmootherSettings,
    ) -> Result<Self, GpuError> {
        Self::with_colouring(gpu, a, matrix, settings, None)
    }

    /// [`Self::new`], with Gauss–Seidel's colouring given (of `a`'s rows)
    /// instead of computed from `settings.colouring`.
    pub fn with_colouring(
        gpu: &'g Gpu,
        a: &Csr,
        matrix: Rc<DeviceModSell>,
        settings: &SmootherSettings,
        colouring: Option<Colouring>,
    ) -> Result<Self, GpuError> {
        settings.validate().map_err(GpuError::Invalid)?;
        matrix.check_rows("smoother", a)?;
        let invalid = |e: SolveError| GpuError::Invalid(e.to_string());
        let mixed = settings.polynomial.precision == Precision::Mixed;
        let mut spans = SetupSpans::new(settings.kind.name(), Some(gpu));
        let method = match settings.kind {
            SmootherKind::Jacobi | SmootherKind::L1Jacobi => {
                // The row scales on the device from the resident matrix
                // (`gpu::setup`; the CPU's `PointJacobi` scales bit for bit).
                let (kind, what) = match settings.kind {
                    SmootherKind::Jacobi => (RowScale::Weighted(settings.omega), "Jacobi smoother"),
                    _ => (RowScale::L1, "L1-Jacobi smoother"),
                };
                let (scale, rounded) =
                    jacobi_scales(gpu, &matrix, kind, mixed, what).map_err(invalid)?;
                spans.device("row scales");
                match rounded {
                    Some(scale) => Method::JacobiF32 {
                        twin: matrix.f32_twin(gpu)?,
                        scale,
                        x: [gpu.zeros(matrix.n)?, gpu.zeros(matrix.n)?],
                    },
                    None => Method::Jacobi { scale },
                }
            }
            SmootherKind::GaussSeidel(sweep) => {
                checked_diagonal(gpu, &matrix, "Gauss-Seidel").map_err(invalid)?;
                spans.device("diagonal check (1 read-back)");
                let colouring = match colouring {
                    Some(c) if c.colours().len() == a.n_rows() => {
                        DeviceColouring::from_colouring(gpu, c)?
                    }
                    Some(c) => {
                        return Err(GpuError::Invalid(format!(
                            "the colouring has {} rows, the matrix {}",
                            c.colours().len(),
                            a.n_rows()
                        )))
                    }
                    None => DeviceColouring::new(gpu, a, &matrix, settings.colouring)?,
                };
                spans.host("colouring (given: its row list, 0..n on the device when contiguous; else Jones-Plassmann)");
                let mixed = match mixed {
                    true => Some((matrix.f32_twin(gpu)?, gpu.zeros(matrix.n)?)),
                    false => None,
                };
                spans.device("f32 twin");
                Method::GaussSeidel {
                    colouring,
                    sweep,
                    mixed,
                }
            }
            SmootherKind::BlockJacobi if settings.block.inner.is_factorisation() => {
                Method::BlockIc(Box::new(
                    DeviceBlockIc::new(
                        gpu,
                        a,
                        &matrix,
                        settings.block.inner,
                        settings.polynomial.precision,
                    )
                    .map_err(invalid)?,
                ))
            }
            SmootherKind::BlockJacobi => {
                checked_diagonal(gpu, &matrix, "block-Jacobi smoother").map_err(invalid)?;
                spans.device("diagonal check");
                let block = Self::block_kernel(gpu, a, &matrix, settings)?;
                spans.device("in-slice counts");
                Method::Block(block)
            }
            SmootherKind::Polynomial(kind) => Method::Polynomial(Box::new(DevicePolynomial::new(
                gpu,
                a,
                Rc::clone(&matrix),
                &PolynomialSettings {
                    kind,
                    ..settings.polynomial
                },
            )?)),
            SmootherKind::Dic | SmootherKind::DicGaussSeidel => {
                return Err(GpuError::Invalid(format!(
                    "the {} smoother is not available on the GPU",
                    settings.kind.name()
                )))
            }
        };
        let mut smoother = Self {
            gpu,
            matrix,
            method,
            spare: RefCell::new(None),
        };
        if smoother.double_buffered() {
            smoother.spare = RefCell::new(Some(gpu.zeros(smoother.matrix.n)?));
        }
        spans.device("method and work buffers");
        spans.finish();
        Ok(smoother)
    }

    fn block_kernel(
        gpu: &Gpu,
        a: &Csr,
        m: &DeviceModSell,
        settings: &SmootherSettings,
    ) -> Result<BlockKernel, GpuError> {
        let h = m.slice_height;
        m.check_rows("block-Jacobi smoother", a)?;
        // The in-slice counts on the device (with block-IC's levels, which
        // block Jacobi does not use: one launch, no pass over `a`).
        let structure = BlockIcStructure::on_device(gpu, m)?;
        let mnz = structure.maxima[0] as usize;
        let mixed = settings.polynomial.precision == Precision::Mixed;
        let (kernel, bytes) = match mixed {
            false => ("smooth_block", block_shared_bytes(h, mnz)),
            true => ("smooth_block_f32", block_shared_bytes_f32(h, mnz)),
        };
        let limits = gpu.kernel_limits(kernel)?;
        if h > limits.threads_per_block || bytes > limits.dynamic_shared_bytes {
            return Err(GpuError::Invalid(format!(
                "block Jacobi: {h}-row slices need {h} threads (limit {}) and {bytes} bytes of \
                 shared memory (limit {}); choose the slice height with block_layout",
                limits.threads_per_block, limits.dynamic_shared_bytes
            )));
        }
        // Above the default 48 KB a kernel must opt in.
        if bytes > 48 * 1024 {
            gpu.allow_dynamic_shared(kernel, bytes)?;
        }
        let b = &settings.block;
        let mixed = match mixed {
            true => Some((m.f32_twin(gpu)?, [gpu.zeros(m.n)?, gpu.zeros(m.n)?])),
            false => None,
        };
        Ok(BlockKernel {
            slice_mnz: structure.slice_mnz,
            shared_bytes: bytes as u32,
            inner: match b.inner {
                InnerSolver::Jacobi => 0,
                InnerSolver::GaussSeidel => 1,
                InnerSolver::SymGaussSeidel => 2,
                InnerSolver::Cg => 3,
                InnerSolver::Dic | InnerSolver::Ic0 => {
                    return Err(GpuError::Invalid(
                        "block-IC runs its own kernels (Method::BlockIc)".into(),
                    ))
                }
            },
            max_iter: i32::try_from(b.inner_max_iter).unwrap_or(i32::MAX),
            tol2: b.inner_tolerance * b.inner_tolerance,
            omega: settings.omega,
            asynchronous: b.asynchronous,
            mixed,
        })
    }

    /// The colouring of multicolour Gauss–Seidel.
    pub fn colouring(&self) -> Option<&Colouring> {
        match &self.method {
            Method::GaussSeidel { colouring, .. } => Some(colouring.colouring()),
            _ => None,
        }
    }

    /// `sweeps` sweeps on A x = b, the result in x. Double-buffered sweeps
    /// alternate between x and the spare buffer so that the last one writes
    /// x; an odd count first copies x to the spare.
    pub fn smooth(
        &self,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        sweeps: usize,
    ) -> Result<(), GpuError> {
        self.sweeps(b, x, sweeps, false, None)
    }

    /// `sweeps` sweeps from x = 0 (x's content is not read). The first sweep
    /// of Jacobi and of synchronous block Jacobi then reads neither x nor (for
    /// Jacobi) the matrix, with the same result bits as sweeping a zero x.
    /// The kernels return at once when `done` is set and its first entry
    /// nonzero (`DevicePreconditioner::apply_gated`).
    pub fn smooth_from_zero(
        &self,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        sweeps: usize,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        if let Method::JacobiF32 { twin, scale, x: xs } = &self.method {
            return self.jacobi_f32(twin, scale, xs, b, x, sweeps, done);
        }
        if let Method::GaussSeidel {
            colouring,
            sweep,
            mixed: Some((twin, w)),
        } = &self.method
        {
            return self.gauss_seidel_f32(colouring, *sweep, twin, w, b, x, sweeps, done);
        }
        if let Method::Block(k @ BlockKernel { mixed: Some(_), .. }) = &self.method {
            return self.block_f32(k, b, x, sweeps, done);
        }
        if !self.double_buffered() || sweeps == 0 {
            let n = self.matrix.n as i32;
            self.gpu.launch_vector("zero_vector", self.matrix.n, |a| {
                a.arg(&n).arg(x);
                arg_or_null(a, done);
            })?;
        }
        self.sweeps(b, x, sweeps, self.double_buffered(), done)
    }

    /// Whether a sweep reads one buffer and writes another (Jacobi,
    /// synchronous block Jacobi); the others update x in place.
    fn double_buffered(&self) -> bool {
        match &self.method {
            Method::Jacobi { .. } => true,
            Method::Block(k) => !k.asynchronous && k.mixed.is_none(),
            Method::BlockIc(_) => true,
            Method::GaussSeidel { .. } | Method::Polynomial(_) | Method::JacobiF32 { .. } => false,
        }
    }

    /// `first_from_zero`: the first sweep reads x as zero (double-buffered
    /// methods only, whose kernels take a null x for it). `done`: the kernels'
    /// gate (null: always run).
    fn sweeps(
        &self,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        sweeps: usize,
        first_from_zero: bool,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (gpu, m) = (self.gpu, &*self.matrix);
        let (n, h, h32) = (m.n as i32, m.slice_height as u32, m.slice_height as i32);
        let slices = m.n_slices() as u32;
        let mut spare_buffer = self.spare.borrow_mut();
        if let Some(spare) = spare_buffer.as_mut() {
            if !first_from_zero && sweeps % 2 == 1 {
                gpu.copy(x, spare)?;
            }
        }
        let spare = spare_buffer.as_ref();
        // Double-buffered: sweep i writes x when an odd number of sweeps
        // (this one included) is left, so the last writes x, and reads the
        // other buffer (nothing for a first sweep from zero).
        let buffers = |i: usize| -> (Option<&CudaSlice<f64>>, &CudaSlice<f64>) {
            let spare = spare.expect("double-buffered sweeps have a spare buffer");
            let (from, to) = match (sweeps - i) % 2 == 1 {
                true => (spare, x),
                false => (x, spare),
            };
            ((!(first_from_zero && i == 0)).then_some(from), to)
        };
        for i in 0..sweeps {
            match &self.method {
                Method::Jacobi { scale } => {
                    let (from, to) = buffers(i);
                    gpu.launch("smooth_jacobi", slices, h, h * 8, |a| {
                        a.arg(&n);
                        m.push_args(a);
                        a.arg(scale).arg(b);
                        // The kernel reads a null x as zero.
                        arg_or_null(a, from);
                        a.arg(to);
                        arg_or_null(a, done);
                    })?;
                }
                Method::GaussSeidel { mixed: Some(_), .. } => {
                    return Err(preconditioner_only("Gauss-Seidel"))
                }
                Method::GaussSeidel {
                    colouring, sweep, ..
                } => {
                    colouring.launch_colours(gpu, "smooth_colour", *sweep, &h32, |a| {
                        m.push_args(a);
                        a.arg(b).arg(x);
                        arg_or_null(a, done);
                    })?;
                }
                Method::Block(BlockKernel { mixed: Some(_), .. }) => {
                    return Err(preconditioner_only("block Jacobi"))
                }
                Method::Block(k) => {
                    let (from, to) = match k.asynchronous {
                        true => (Some(x), x),
                        false => buffers(i),
                    };
                    let values = (&m.values, &m.diag);
                    k.launch(gpu, "smooth_block", m, values, b, (from, to), done)?;
                }
                Method::Polynomial(p) => p.sweep(b, x)?,
                Method::BlockIc(ic) => {
                    let (from, to) = buffers(i);
                    ic.sweep(gpu, m, b, from, to, done)?;
                }
                Method::JacobiF32 { .. } => return Err(preconditioner_only("Jacobi")),
            }
        }
        Ok(())
    }
}

/// The error of a smoothSolver sweep with a mixed-precision `method`, which
/// runs as a PCG preconditioner only (sweeps from zero).
fn preconditioner_only(method: &str) -> GpuError {
    GpuError::Invalid(format!(
        "mixed-precision {method} runs as a PCG preconditioner only (sweeps from zero); use \
         precision double in smoothSolver"
    ))
}

impl DeviceSmoother<'_> {
    /// Mixed-precision Jacobi from zero (`smooth_jacobi_f32`): `sweeps`
    /// sweeps alternating between the two f32 iterates, then x = the last
    /// widened to f64 (`ic_widen`).
    #[allow(clippy::too_many_arguments)]
    fn jacobi_f32(
        &self,
        twin: &DeviceModSellF32,
        scale: &CudaSlice<f32>,
        xs: &[CudaSlice<f32>; 2],
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        sweeps: usize,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (gpu, m) = (self.gpu, &*self.matrix);
        let (n, h) = (m.n as i32, m.slice_height as u32);
        let slices = m.n_slices() as u32;
        for i in 0..sweeps.max(1) {
            let to = &xs[i % 2];
            gpu.launch("smooth_jacobi_f32", slices, h, h * 4, |a| {
                a.arg(&n)
                    .arg(&m.slice_ptr)
                    .arg(&m.codes)
                    .arg(&twin.values)
                    .arg(&twin.diag)
                    .arg(scale)
                    .arg(b);
                match i {
                    0 => a.arg(&NULL),
                    _ => a.arg(&xs[(i + 1) % 2]),
                };
                a.arg(to);
                arg_or_null(a, done);
            })?;
        }
        let last = &xs[(sweeps.max(1) - 1) % 2];
        widen(gpu, m.n, last, x, done)
    }

    /// Mixed-precision block Jacobi from zero (`smooth_block_f32`):
    /// synchronous sweeps alternate between the two f32 iterates (the first
    /// reads x = 0), asynchronous ones update the first in place after
    /// zeroing it; then x = the last iterate widened to f64 (`ic_widen`).
    fn block_f32(
        &self,
        k: &BlockKernel,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        sweeps: usize,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (gpu, m) = (self.gpu, &*self.matrix);
        let (twin, xs) = k.mixed.as_ref().expect("a mixed-precision block kernel");
        let sweeps = sweeps.max(1);
        if k.asynchronous {
            zero_f32(gpu, m.n, &xs[0], done)?;
        }
        for i in 0..sweeps {
            let (from, to) = match (k.asynchronous, i) {
                (true, _) => (Some(&xs[0]), &xs[0]),
                (false, 0) => (None, &xs[0]),
                (false, _) => (Some(&xs[(i + 1) % 2]), &xs[i % 2]),
            };
            let values = (&twin.values, &twin.diag);
            k.launch(gpu, "smooth_block_f32", m, values, b, (from, to), done)?;
        }
        let last = match k.asynchronous {
            true => &xs[0],
            false => &xs[(sweeps - 1) % 2],
        };
        widen(gpu, m.n, last, x, done)
    }

    /// Mixed-precision multicolour Gauss–Seidel from zero
    /// (`smooth_colour_f32` on the f32 iterate `w`), then x = w in f64.
    #[allow(clippy::too_many_arguments)]
    fn gauss_seidel_f32(
        &self,
        colouring: &DeviceColouring,
        sweep: Sweep,
        twin: &DeviceModSellF32,
        w: &CudaSlice<f32>,
        b: &CudaSlice<f64>,
        x: &CudaSlice<f64>,
        sweeps: usize,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let (gpu, m) = (self.gpu, &*self.matrix);
        let h = m.slice_height as i32;
        zero_f32(gpu, m.n, w, done)?;
        for _ in 0..sweeps {
            colouring.launch_colours(gpu, "smooth_colour_f32", sweep, &h, |a| {
                a.arg(&m.slice_ptr).arg(&m.codes);
                a.arg(&twin.values).arg(&twin.diag);
                a.arg(b).arg(w);
                arg_or_null(a, done);
            })?;
        }
        widen(gpu, m.n, w, x, done)
    }
}

/// z = M⁻¹ r as smoother sweeps from z = 0 (`solve::smoother::SmootherPreconditioner`
/// on the device).
pub struct DeviceSmootherPreconditioner<'g> {
    smoother: DeviceSmoother<'g>,
    sweeps: usize,
    linear: bool,
}

impl<'g> DeviceSmootherPreconditioner<'g> {
    pub fn new(smoother: DeviceSmoother<'g>, settings: &SmootherSettings) -> Self {
        Self {
            smoother,
            sweeps: settings.sweeps,
            linear: settings.is_linear(),
        }
    }
}

impl DevicePreconditioner for DeviceSmootherPreconditioner<'_> {
    fn n(&self) -> usize {
        self.smoother.matrix.n
    }
    fn apply_with(
        &self,
        r: &CudaSlice<f64>,
        z: &CudaSlice<f64>,
        done: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        self.smoother.smooth_from_zero(r, z, self.sweeps, done)
    }
    fn is_linear(&self) -> bool {
        self.linear
    }
}

/// The smoother loop's executor on the GPU: residuals from the PCG backend's
/// `initialize`, sweeps from the device smoother.
pub struct GpuSmoothing<'a, 'g> {
    pub cg: &'a GpuCgBackend<'g>,
    pub smoother: &'a DeviceSmoother<'g>,
}

/// The PCG backend's executor.
impl<'g> OnExecutor for GpuSmoothing<'_, 'g> {
    type Inner = GpuCgBackend<'g>;
    fn executor(&self) -> &GpuCgBackend<'g> {
        self.cg
    }
}

impl SmoothBackend for GpuSmoothing<'_, '_> {
    fn smooth(&self, b: &GpuVector, x: &mut GpuVector, sweeps: usize) -> Result<(), SolveError> {
        self.smoother
            .smooth(b.dev()?, x.dev()?, sweeps)
            .map_err(SolveError::from)
    }
}

/// What the GPU runs for a smoother: Gauss–Seidel in natural order (sequential)
/// becomes multicolour with Jones–Plassmann colours; DIC (a triangular solve)
/// becomes multicolour symGaussSeidel and DICGaussSeidel multicolour
/// GaussSeidel. The rest runs as given.
pub fn gpu_smoother(s: &SmootherSettings) -> SmootherSettings {
    let mut g = *s;
    match s.kind {
        SmootherKind::Dic => g.kind = SmootherKind::GaussSeidel(Sweep::Symmetric),
        SmootherKind::DicGaussSeidel => g.kind = SmootherKind::GaussSeidel(Sweep::Forward),
        _ => {}
    }
    if matches!(g.kind, SmootherKind::GaussSeidel(_)) && g.colouring == ColouringKind::Natural {
        g.colouring = ColouringKind::JonesPlassmann;
    }
    g
}

/// What the GPU runs for a PCG preconditioner: Jacobi, none and the
/// polynomials (`gpu::polynomial`) and FSAI (`gpu::fsai`) as given;
/// symmetric Gauss–Seidel as multicolour symGaussSeidel; smoothers through
/// [`gpu_smoother`]; AMG through [`gpu_amg_settings`]; ILU(k) and Schwarz
/// as given (`gpu::ilu`); DIC / IC(0) in mixed precision as given (their
/// f32 level-scheduled sweeps, `gpu::ic`); Eisenstat SGS as given
/// (`gpu::eisenstat`); the registry's algorithms as given
/// (`gpu::registered`). What has no device form is the registry's
/// decision (`solve::registry`, `GpuSupport::Fallback`), with a reason the
/// run logs once (`case::run::log_gpu_mapping`). This is the device form of
/// `p` as given: a case run first replaces DIC, IC(0) and GAMG given without
/// GPU keys by their GPU defaults (`registry::GPU_DEFAULTS`,
/// `case::SolveTarget::adapt`).
pub fn gpu_preconditioner(p: &Preconditioner) -> Preconditioner {
    if let Some((used, _message)) = registry::gpu_fallback(p, Role::Pcg) {
        return used;
    }
    match p {
        Preconditioner::Kind(PreconditionerKind::None | PreconditionerKind::Jacobi) => *p,
        Preconditioner::Amg(s) => Preconditioner::Amg(gpu_amg_settings(s)),
        Preconditioner::Kind(PreconditionerKind::SymGaussSeidel) => {
            Preconditioner::Smoother(gpu_smoother(&SmootherSettings::new(
                SmootherKind::GaussSeidel(Sweep::Symmetric),
            )))
        }
        Preconditioner::Kind(PreconditionerKind::EisenstatSgs) => *p,
        Preconditioner::Smoother(s) => Preconditioner::Smoother(gpu_smoother(s)),
        Preconditioner::Kind(_)
        | Preconditioner::Polynomial(_)
        | Preconditioner::Ilu(_)
        | Preconditioner::Schwarz(_)
        | Preconditioner::Fsai(_)
        | Preconditioner::MixedIc(_)
        | Preconditioner::Registered(_) => *p,
    }
}

/// How the GPU lays out the system for a smoother.
pub(super) struct Layout {
    /// The matrix in the solve's row order.
    pub(super) a: Csr,
    /// That order (None: as given).
    ordering: Option<Permutation>,
    slice_height: usize,
    /// Multicolour Gauss–Seidel's colouring of the ordered rows.
    pub(super) colouring: Option<Colouring>,
}

impl Layout {
    /// The system in the order the GPU solves it with `smoother`: block
    /// Jacobi's [`block_layout`] (its own ordering, whatever `options.ordering`
    /// says); else `options.ordering` (from `solver`'s cache) followed, for
    /// Jones–Plassmann Gauss–Seidel, by [`colour_layout`].
    pub(super) fn new(
        solver: &mut GpuSolver<'_>,
        a: &Csr,
        smoother: &SmootherSettings,
        options: &GpuSolveOptions,
    ) -> Result<Self, SolveError> {
        let gpu = solver.gpu();
        let h = options.slice_height;
        if smoother.kind == SmootherKind::BlockJacobi {
            let (slice_height, p, ordered) = match smoother.block.inner.is_factorisation() {
                true => block_layout_for(
                    gpu,
                    a,
                    smoother.block.block_size,
                    &BLOCK_IC_KERNELS,
                    "block-IC",
                ),
                false => block_layout(gpu, a, smoother.block.block_size),
            }?;
            return Ok(Self {
                a: ordered,
                ordering: Some(p),
                slice_height,
                colouring: None,
            });
        }
        let base = solver.permutation(a, options)?.cloned();
        let ordered = match &base {
            Some(p) => p.apply_symmetric(a),
            None => a.clone(),
        };
        let multicolour = matches!(smoother.kind, SmootherKind::GaussSeidel(_))
            && smoother.colouring == ColouringKind::JonesPlassmann;
        if !multicolour {
            return Ok(Self {
                a: ordered,
                ordering: base,
                slice_height: h,
                colouring: None,
            });
        }
        let (by_colour, a_coloured, colouring) = colour_layout(gpu, &ordered, h)?;
        // New row k is base row by_colour[k], original row base[by_colour[k]].
        let ordering = match base {
            Some(base) => {
                let composed = by_colour
                    .new_to_old()
                    .iter()
                    .map(|&k| base.new_to_old()[k as usize])
                    .collect();
                Permutation::from_new_to_old(composed).map_err(SolveError::Device)?
            }
            None => by_colour,
        };
        Ok(Self {
            a: a_coloured,
            ordering: Some(ordering),
            slice_height: h,
            colouring: Some(colouring),
        })
    }

    /// The device backend (matrix, residuals, PCG steps; `equilibration` in
    /// this layout's row order when `a` is an equilibrated matrix) and the
    /// smoother on its matrix.
    fn build<'g>(
        &self,
        gpu: &'g Gpu,
        settings: &SmootherSettings,
        equilibration: Option<&Equilibration>,
        options: &GpuSolveOptions,
    ) -> Result<(GpuCgBackend<'g>, DeviceSmoother<'g>), GpuError> {
        let options = GpuSolveOptions {
            slice_height: self.slice_height,
            ..*options
        };
        let backend = GpuCgBackend::new(gpu, &self.a, false, equilibration, &options)?;
        let smoother = DeviceSmoother::with_colouring(
            gpu,
            &self.a,
            backend.shared_matrix(),
            settings,
            self.colouring.clone(),
        )?;
        Ok((backend, smoother))
    }

    /// Uploads b and x in this layout's order, runs `solve` on the device
    /// vectors and copies x back in the original order.
    pub(super) fn solve(
        &self,
        backend: &GpuCgBackend<'_>,
        b: &[f64],
        x: &mut [f64],
        solve: impl FnOnce(&GpuVector, &mut GpuVector) -> Result<SolverPerformance, SolveError>,
    ) -> Result<SolverPerformance, SolveError> {
        let to_new = |v: &[f64]| match &self.ordering {
            Some(p) => p.to_new(v),
            None => v.to_vec(),
        };
        let b_dev = backend.upload(&to_new(b))?;
        let mut x_dev = backend.upload(&to_new(x))?;
        let perf = solve(&b_dev, &mut x_dev)?;
        let x_new = backend.download(&x_dev)?;
        match &self.ordering {
            Some(p) => x.copy_from_slice(&p.to_old(&x_new)),
            None => x.copy_from_slice(&x_new),
        }
        Ok(perf)
    }
}

impl GpuSolver<'_> {
    /// PCG with any preconditioner the GPU has ([`gpu_preconditioner`] maps
    /// the others) on the system equilibrated by `equilibration`: Jacobi and
    /// none on the fused device loop ([`GpuSolver::solve`]), AMG by
    /// [`GpuSolver::solve_amg`], ILU, Schwarz, FSAI and the registry's
    /// algorithms by `GpuSolver::pcg_preconditioned`, smoothers through
    /// `GpuCgBackend::set_preconditioner` (flexible PCG when they are not
    /// linear), on the scaled matrix in the smoother's row order. The
    /// convergence test and the returned performance are those of the
    /// original system, as in `solve::solve_pcg_scaled`.
    pub fn solve_with(
        &mut self,
        preconditioner: &Preconditioner,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        let (a, equilibration, b, controls) = (s.a, s.equilibration, s.b, s.controls);
        let (field, options) = (s.field, s.options);
        let eisenstat_layout;
        let settings = match preconditioner {
            // Its own scaling; equilibrated, multicolour symGS (the same M).
            Preconditioner::Kind(PreconditionerKind::EisenstatSgs) => {
                if *equilibration == EquilibrationKind::None {
                    return self.solve_eisenstat(a, b, s.x, controls, field, options);
                }
                eisenstat_layout = super::eisenstat::layout_settings();
                &eisenstat_layout
            }
            Preconditioner::Kind(kind) => {
                return self.solve_in_precision(*kind, Precision::Double, s)
            }
            Preconditioner::Smoother(settings) => settings,
            Preconditioner::Polynomial(p) => return self.solve_polynomial(p, s),
            Preconditioner::Amg(settings) => return self.solve_amg(settings, s),
            Preconditioner::Ilu(_) | Preconditioner::Schwarz(_) => {
                return self.pcg_preconditioned(s, preconditioner, |gpu, ordered, _| {
                    super::ilu::pcg_ilu_or_schwarz(gpu, ordered, preconditioner)
                })
            }
            Preconditioner::Fsai(settings) => {
                return self.pcg_preconditioned(s, preconditioner, |gpu, ordered, backend| {
                    let resident = backend.shared_matrix();
                    super::fsai::pcg_fsai(gpu, ordered.matrix(), &resident, settings)
                })
            }
            Preconditioner::Registered(r) => {
                return self.pcg_preconditioned(s, preconditioner, |gpu, ordered, backend| {
                    let resident = backend.shared_matrix();
                    super::registered::device_preconditioner(gpu, ordered.matrix(), resident, r)
                })
            }
            Preconditioner::MixedIc(kind) => {
                preconditioner.check()?;
                return self.solve_in_precision(*kind, Precision::Mixed, s);
            }
        };
        let x = s.x;
        check_system(a, b, x, controls)?;
        preconditioner.check()?;
        let mut scaled = ScaledSystem::new(a, equilibration, b, x)?;
        let layout = Layout::new(self, scaled.matrix(a), settings, options)?;
        let eq_ordered = scaled.permuted_equilibration(layout.ordering.as_ref());
        let (mut backend, smoother) =
            layout.build(self.gpu(), settings, eq_ordered.as_deref(), options)?;
        backend.set_preconditioner(Box::new(DeviceSmootherPreconditioner::new(
            smoother, settings,
        )));
        let perf = layout.solve(&backend, &scaled.b, &mut scaled.x, |b, x| {
            pcg(&backend, b, x, controls, field)
        })?;
        scaled.unscale_into(&scaled.x, x);
        Ok(perf)
    }

    /// OpenFOAM's smoothSolver (`solve::smooth_solve`, residual read back
    /// every `nSweeps` sweeps) with the smoother of `settings` (as given: map
    /// it with [`gpu_smoother`] first), in the smoother's row order.
    pub fn solve_smooth(
        &mut self,
        settings: &SmootherSettings,
        s: DeviceSolve<'_>,
    ) -> Result<SolverPerformance, SolveError> {
        let s = s.unequilibrated(&"smoothSolver")?;
        let DeviceSolve {
            a,
            b,
            x,
            controls,
            field,
            options,
            ..
        } = s;
        check_system(a, b, x, controls)?;
        settings.validate().map_err(SolveError::InvalidControls)?;
        check_diagonal(a, "smoother")?;
        let layout = Layout::new(self, a, settings, options)?;
        let (backend, smoother) = layout.build(self.gpu(), settings, None, options)?;
        let smoothing = GpuSmoothing {
            cg: &backend,
            smoother: &smoother,
        };
        layout.solve(&backend, b, x, |b, x| {
            smooth_solve(&smoothing, b, x, controls, settings.sweeps, field)
        })
    }
}

/// [`GpuSolver::solve_with`] for one system.
pub fn solve_pcg_gpu_with(
    gpu: &Gpu,
    preconditioner: &Preconditioner,
    s: DeviceSolve<'_>,
) -> Result<SolverPerformance, SolveError> {
    GpuSolver::new(gpu).solve_with(preconditioner, s)
}

/// [`GpuSolver::solve_smooth`] for one system.
pub fn solve_smooth_gpu(
    gpu: &Gpu,
    settings: &SmootherSettings,
    s: DeviceSolve<'_>,
) -> Result<SolverPerformance, SolveError> {
    GpuSolver::new(gpu).solve_smooth(settings, s)
}
