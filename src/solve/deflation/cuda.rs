//! Subdomain deflation on the device (`kernels/deflation.cu`); the CPU
//! reference is `solve::deflation`, whose module documentation says what is
//! computed. Its inner preconditioner is none, Jacobi or a registered
//! algorithm's device form (`gpu::registered`: Gupta et al.'s (2011)
//! truncated Neumann `neu1` / `neu2`, `gpu::neumann`).
//!
//! - [`DeviceDeflation`]: the [`DeflationOps`] of the GPU. Setup (once, all
//!   on the device from the resident mod-SELL matrix; the host uploads the
//!   k + 1 subdomain offsets and reads back AZ's width and one pivot flag):
//!   each row's subdomain (a binary search of the offsets), AZ into a
//!   column-major ELL of width w (the most subdomains a row touches),
//!   E = Zᵀ(AZ) (one block per subdomain row, fixed-order sums), and E⁻¹ by
//!   [`coarse_inverse_on_device`]: the blocked dense Cholesky and Wᵀ W,
//!   W = L⁻¹, that `gpu::amg` uses for its coarsest level (E⁻¹ of k = 512
//!   subdomains took ~0.1 s as a host k³ inverse after a k² read-back). Per
//!   projection: Zᵀ v (one block per subdomain: the subdomains are contiguous
//!   rows, a segmented block reduction), a = E⁻¹ Zᵀ v (one block per row of
//!   E⁻¹), v −= (AZ) a — three launches, no copy, no allocation, no host
//!   synchronisation; the prolongation x += s Z a is one more.
//!
//! Both only launch kernels on the `Gpu`'s stream when applied. Deflated PCG
//! ([`deflated_pcg_device`], [`solve_pcg_deflated_gpu`]) runs in
//! `GpuCgBackend`'s fused device loop: [`DeviceDeflation`] is its
//! `LoopProjection`, so each iteration adds the three projection launches
//! after q = A p, p · P A p (`cg_operator_dot`) and x −= α Z a
//! (`defl_prolong_in_loop`), all gated on the loop's device state; the
//! residuals are read back once every `check_interval` iterations, and in
//! `LaunchMode::Graph` the chunk is one CUDA graph. The host steps left are
//! those of a solve's start, as `solve::deflation::Deflated` makes them: the
//! initial residual, its projection and the corrected initial guess
//! x₀ + Z E⁻¹ Zᵀ r₀ (a few launches and two read-backs); the set-up's
//! phases are `gpu::setup`'s `SetupSpans` ([`DeviceDeflation::new_timed`]
//! keeps them for the bench). [`ProjectionBytes`] counts what a projection
//! moves: about 8 n + 8 k² + (12 w + 16) n + 20 n bytes, against the
//! SpMV's 12 bytes per stored entry plus 24 n. The iteration is the CPU
//! reference's except that x moves by −α Z a before +α p (the loop reads
//! only r, so the iterates are the same; x differs by rounding).

use cudarc::driver::CudaSlice;
use nalgebra::DMatrix;

use super::amg::{dense_symmetric_inverse, DenseInverseWork};
use super::matrix::DeviceModSell;
use super::pcg::{FirstFailure, GpuCgBackend, GpuSolveOptions, GpuVector, LoopProjection};
use super::registered::device_preconditioner;
use super::setup::{SetupPhase, SetupSpans};
use super::{arg_or_null, Gpu, GpuError};
use crate::solve::deflation::{Deflated, DeflationOps, Subdomains};
use crate::solve::lanczos::{Recorded, SpectrumEstimate};
use crate::solve::neumann::NeumannSettings;
use crate::solve::pcg::cg_steps_of;
use crate::solve::registry::Registered;
use crate::solve::{
    pcg, CgBackend, CgVectors, IterationRecord, LoopState, OnExecutor, Preconditioner,
    PreconditionerKind, SolveError, SolverControls, SolverPerformance, StopRule,
};
use crate::sparse::Csr;

/// Threads per block of the per-subdomain and per-coarse-row reductions.
const COARSE_BLOCK: u32 = 256;
/// `DEFL_MAX_WIDTH` of kernels/deflation.cu.
const MAX_WIDTH: usize = 32;

/// The deflation steps on the device (module documentation).
pub struct DeviceDeflation<'g> {
    gpu: &'g Gpu,
    n: usize,
    k: usize,
    width: usize,
    offsets: CudaSlice<i32>,
    part: CudaSlice<i32>,
    az_parts: CudaSlice<i32>,
    az_values: CudaSlice<f64>,
    /// E as assembled on the device (row-major k × k).
    e: CudaSlice<f64>,
    /// E⁻¹ of E's symmetric part (row-major k × k, exactly symmetric).
    e_inverse: CudaSlice<f64>,
    /// Zᵀ v of the last projection.
    restricted: CudaSlice<f64>,
    /// a = E⁻¹ Zᵀ v of the last projection.
    correction: CudaSlice<f64>,
    failure: FirstFailure,
    /// The set-up's phases ([`Self::new_timed`]; empty otherwise).
    setup_phases: Vec<SetupPhase>,
    /// [`LoopProjection::id`].
    id: u64,
}

/// Bytes one projection of deflated PCG moves at least (each array read or
/// written once, the k-sized vectors left out but for E⁻¹), by launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProjectionBytes {
    /// Zᵀ v: v read (8 n).
    pub restrict: usize,
    /// a = E⁻¹ Zᵀ v: E⁻¹ read (8 k²).
    pub coarse: usize,
    /// v −= (AZ) a: AZ's w slots per row (4-byte subdomain + 8-byte value)
    /// and v read and written (12 n w + 16 n).
    pub subtract: usize,
    /// x −= α Z a: the owners and x read, x written (20 n).
    pub prolong: usize,
}

impl ProjectionBytes {
    pub fn total(&self) -> usize {
        self.restrict + self.coarse + self.subtract + self.prolong
    }
}

impl<'g> DeviceDeflation<'g> {
    /// Deflation of the device matrix `m` (rows in the order of
    /// `subdomains`, each subdomain contiguous).
    pub fn new(gpu: &'g Gpu, m: &DeviceModSell, subdomains: &Subdomains) -> Result<Self, GpuError> {
        Self::build(
            gpu,
            m,
            subdomains,
            SetupSpans::new("subdomain deflation", Some(gpu)),
        )
    }

    /// [`Self::new`] with each set-up phase timed (the stream synchronised
    /// after each) and kept ([`Self::setup_phases`]), for benchmarks.
    pub fn new_timed(
        gpu: &'g Gpu,
        m: &DeviceModSell,
        subdomains: &Subdomains,
    ) -> Result<Self, GpuError> {
        Self::build(
            gpu,
            m,
            subdomains,
            SetupSpans::timed("subdomain deflation", Some(gpu)),
        )
    }

    fn build(
        gpu: &'g Gpu,
        m: &DeviceModSell,
        subdomains: &Subdomains,
        mut spans: SetupSpans<'g>,
    ) -> Result<Self, GpuError> {
        let (n, k) = (m.n, subdomains.count());
        if subdomains.n_rows() != n {
            return Err(GpuError::Invalid(format!(
                "the subdomains cover {} rows, the device matrix has {n}",
                subdomains.n_rows()
            )));
        }
        // The host uploads the k + 1 offsets and reads back three words: AZ's
        // width, and the coarse factor's failed pivot (0: none).
        let offsets_host: Vec<i32> = subdomains.offsets().iter().map(|&o| o as i32).collect();
        let offsets = gpu.upload(&offsets_host)?;
        spans.host("subdomain offsets, uploaded");
        let (n32, k32, h) = (n as i32, k as i32, m.slice_height as i32);
        let part = gpu.zeros::<i32>(n)?;
        gpu.launch_vector("defl_owners", n, |a| {
            a.arg(&n32).arg(&k32).arg(&offsets).arg(&part);
        })?;
        spans.device("row owners");
        let az = |w: usize,
                  width: &CudaSlice<i32>,
                  ell: Option<(&CudaSlice<i32>, &CudaSlice<f64>)>|
         -> Result<(), GpuError> {
            let w32 = w as i32;
            gpu.launch_vector("defl_az", n, |a| {
                a.arg(&n32).arg(&h);
                m.push_args(a);
                a.arg(&part).arg(&w32).arg(width);
                match ell {
                    Some((parts, values)) => a.arg(parts).arg(values),
                    None => a.arg(&super::NULL).arg(&super::NULL),
                };
            })
        };
        let width_dev = gpu.zeros::<i32>(1)?;
        az(0, &width_dev, None)?;
        let width = gpu.download(&width_dev)?[0].max(1) as usize;
        if width > MAX_WIDTH {
            return Err(GpuError::Invalid(format!(
                "a row of the matrix touches more than {MAX_WIDTH} subdomains; use larger \
                 (fewer) subdomains"
            )));
        }
        spans.device("AZ width (read back)");
        let az_parts = gpu.zeros::<i32>(n * width)?;
        let az_values = gpu.zeros::<f64>(n * width)?;
        az(width, &width_dev, Some((&az_parts, &az_values)))?;
        spans.device("AZ");
        let e = gpu.zeros::<f64>(k * k)?;
        let w32 = width as i32;
        gpu.launch("defl_galerkin", k as u32, COARSE_BLOCK, 0, |a| {
            a.arg(&n32)
                .arg(&k32)
                .arg(&w32)
                .arg(&offsets)
                .arg(&az_parts)
                .arg(&az_values)
                .arg(&e);
        })?;
        spans.device("E = ZᵀAZ");
        let e_inverse = coarse_inverse_on_device(gpu, k, &e)?;
        spans.device("E⁻¹ (blocked Cholesky, Wᵀ W; pivot flag read back)");
        let deflation = Self {
            gpu,
            n,
            k,
            width,
            offsets,
            part,
            az_parts,
            az_values,
            e,
            e_inverse,
            restricted: gpu.zeros(k)?,
            correction: gpu.zeros(k)?,
            failure: FirstFailure::default(),
            setup_phases: Vec::new(),
            id: super::unique_buffers_id(),
        };
        let mut deflation = deflation;
        spans.device("work vectors");
        deflation.setup_phases = spans.finish();
        Ok(deflation)
    }

    /// The set-up's phases when made by [`Self::new_timed`] (empty otherwise).
    pub fn setup_phases(&self) -> &[SetupPhase] {
        &self.setup_phases
    }

    /// Subdomains k.
    pub fn subdomain_count(&self) -> usize {
        self.k
    }

    /// The most subdomains a row of AZ touches (its ELL width w).
    pub fn width(&self) -> usize {
        self.width
    }

    /// What one projection moves ([`ProjectionBytes`]).
    pub fn projection_bytes(&self) -> ProjectionBytes {
        let (n, k, w) = (self.n, self.k, self.width);
        ProjectionBytes {
            restrict: 8 * n,
            coarse: 8 * k * k,
            subtract: 12 * n * w + 16 * n,
            prolong: 20 * n,
        }
    }

    /// E = ZᵀAZ as assembled on the device, read back (k² values).
    pub fn download_coarse_matrix(&self) -> Result<DMatrix<f64>, GpuError> {
        self.download_coarse(&self.e)
    }

    /// E⁻¹ as the projections apply it, read back (k² values).
    pub fn download_coarse_inverse(&self) -> Result<DMatrix<f64>, GpuError> {
        self.download_coarse(&self.e_inverse)
    }

    /// The k × k matrix (row-major) at the start of `buffer`, read back.
    fn download_coarse(&self, buffer: &CudaSlice<f64>) -> Result<DMatrix<f64>, GpuError> {
        let values = self.gpu.download(buffer)?;
        Ok(DMatrix::from_row_slice(
            self.k,
            self.k,
            &values[..self.k * self.k],
        ))
    }

    /// AZ read back as (subdomain, value) lists per row, in the device's
    /// slot order (tests compare them with `solve::deflation::deflated_columns`).
    pub fn download_deflated_columns(&self) -> Result<Vec<Vec<(u32, f64)>>, GpuError> {
        let parts = self.gpu.download(&self.az_parts)?;
        let values = self.gpu.download(&self.az_values)?;
        Ok((0..self.n)
            .map(|i| {
                (0..self.width)
                    .map(|j| j * self.n + i)
                    .filter(|&s| parts[s] >= 0)
                    .map(|s| (parts[s] as u32, values[s]))
                    .collect()
            })
            .collect())
    }

    /// The coarse correction a of the last projection, read back.
    pub fn download_correction(&self) -> Result<Vec<f64>, GpuError> {
        self.gpu.download(&self.correction)
    }

    /// Zᵀ v, a = E⁻¹ Zᵀ v, v −= (AZ) a; no-ops once `state` (the fused
    /// loop's, when given) says done.
    fn launch_project(
        &self,
        v: &CudaSlice<f64>,
        state: Option<&CudaSlice<f64>>,
    ) -> Result<(), GpuError> {
        let gpu = self.gpu;
        let (n, k, w) = (self.n as i32, self.k as i32, self.width as i32);
        gpu.launch("defl_restrict", self.k as u32, COARSE_BLOCK, 0, |a| {
            a.arg(&self.offsets).arg(v).arg(&self.restricted);
            arg_or_null(a, state);
        })?;
        gpu.launch("defl_coarse_solve", self.k as u32, COARSE_BLOCK, 0, |a| {
            a.arg(&k)
                .arg(&self.e_inverse)
                .arg(&self.restricted)
                .arg(&self.correction);
            arg_or_null(a, state);
        })?;
        gpu.launch_vector("defl_subtract", self.n, |a| {
            a.arg(&n)
                .arg(&w)
                .arg(&self.az_parts)
                .arg(&self.az_values)
                .arg(&self.correction)
                .arg(v);
            arg_or_null(a, state);
        })
    }
}

/// E⁻¹ of the symmetric part of the k × k row-major `e` on the device, as
/// `solve::deflation::coarse_inverse` computes it on the host (to rounding:
/// the blocked Cholesky and Wᵀ W, W = L⁻¹, of `gpu::amg`'s coarsest level,
/// never shifted, since E of an SPD matrix is SPD); an error when E is not
/// positive definite (its failed pivot, one word, is the only read-back).
pub fn coarse_inverse_on_device(
    gpu: &Gpu,
    k: usize,
    e: &CudaSlice<f64>,
) -> Result<CudaSlice<f64>, GpuError> {
    let mut work = DenseInverseWork::new(gpu, k)?;
    // [not singular, no shift]: E is factored as it is.
    let singular = gpu.zeros::<f64>(2)?;
    work.run(e, &singular, |buffers| {
        dense_symmetric_inverse(gpu, k, buffers)
    })?;
    let pivot = gpu.download(&work.failed)?[0];
    if pivot < 0 {
        return Err(GpuError::Invalid(format!(
            "the coarse matrix E = ZᵀAZ ({k} x {k}): its one-launch factorisation gave up \
             waiting at a grid barrier (its blocks were not all resident); {}",
            super::amg::DENSE_STEPS_HINT
        )));
    }
    if pivot != 0 {
        return Err(GpuError::Invalid(format!(
            "the coarse matrix E = ZᵀAZ ({k} x {k}) is not positive definite (pivot {pivot} of \
             its Cholesky factor): the matrix is singular (fix the level with a reference value \
             or a fixedValue boundary) or not SPD"
        )));
    }
    Ok(work.inverse)
}

impl DeflationOps<GpuVector> for DeviceDeflation<'_> {
    fn project(&self, v: &mut GpuVector) {
        self.failure
            .guarded((), || self.launch_project(v.dev()?, None))
    }

    fn prolong_add(&self, s: f64, x: &mut GpuVector) {
        self.failure.guarded((), || {
            let n = self.n as i32;
            let x = x.dev()?;
            self.gpu.launch_vector("defl_prolong_add", self.n, |a| {
                a.arg(&n)
                    .arg(&s)
                    .arg(&self.part)
                    .arg(&self.correction)
                    .arg(x);
            })
        })
    }

    fn device_status(&self) -> Result<(), SolveError> {
        self.failure.status()
    }
}

impl LoopProjection for DeviceDeflation<'_> {
    fn id(&self) -> u64 {
        self.id
    }

    fn project_in_loop(&self, q: &CudaSlice<f64>, st: &CudaSlice<f64>) -> Result<(), GpuError> {
        self.launch_project(q, Some(st))
    }

    fn prolong_in_loop(&self, x: &CudaSlice<f64>, st: &CudaSlice<f64>) -> Result<(), GpuError> {
        let n = self.n as i32;
        self.gpu.launch_vector("defl_prolong_in_loop", self.n, |a| {
            a.arg(&n)
                .arg(st)
                .arg(&self.part)
                .arg(&self.correction)
                .arg(x);
        })
    }
}

/// `solve::deflation::Deflated` over the GPU backend with its iterations in
/// the fused device loop ([`GpuCgBackend::iterate_projected`]); the host
/// steps (initial residual, corrected initial guess) are `Deflated`'s.
struct DeviceDeflated<'a, 'g> {
    steps: Deflated<'a, GpuCgBackend<'g>, DeviceDeflation<'g>>,
    backend: &'a GpuCgBackend<'g>,
    ops: &'a DeviceDeflation<'g>,
}

/// `Deflated`'s executor.
impl<'a, 'g> OnExecutor for DeviceDeflated<'a, 'g> {
    type Inner = Deflated<'a, GpuCgBackend<'g>, DeviceDeflation<'g>>;
    fn executor(&self) -> &Self::Inner {
        &self.steps
    }
}

impl CgBackend for DeviceDeflated<'_, '_> {
    cg_steps_of!(steps);
    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, GpuVector>,
    ) -> Vec<IterationRecord> {
        self.backend
            .iterate_projected(self.ops, rule, state, count, v)
    }
    fn flexible_term(&self, z: &GpuVector, q: &GpuVector) -> Option<f64> {
        self.steps.flexible_term(z, q)
    }
}

/// Deflated PCG on `backend` in the fused device loop, from the initial
/// guess in `x` (corrected first, as `solve::deflation::deflated_pcg` does),
/// with the Lanczos estimate of M⁻¹PA's spectrum.
pub fn deflated_pcg_device(
    backend: &GpuCgBackend<'_>,
    ops: &DeviceDeflation<'_>,
    b: &GpuVector,
    x: &mut GpuVector,
    controls: &SolverControls,
) -> Result<(SolverPerformance, Option<SpectrumEstimate>), SolveError> {
    let deflated = DeviceDeflated {
        steps: Deflated::new(backend, ops),
        backend,
        ops,
    };
    deflated.steps.correct_initial_guess(b, x);
    let recorded = Recorded::new(&deflated);
    let perf = pcg(&recorded, b, x, controls, "x")?;
    Ok((perf, recorded.spectrum()))
}

/// The preconditioners of Gupta et al.'s (2011) DPCG study, which
/// [`solve_pcg_deflated_gpu`] runs: none, Jacobi, Neu1 and Neu2.
pub const DEFLATED_PCG_PRECONDITIONERS: [Preconditioner; 4] = [
    Preconditioner::Kind(PreconditionerKind::None),
    Preconditioner::Kind(PreconditionerKind::Jacobi),
    Preconditioner::Registered(Registered::Neumann(NeumannSettings::NEU1)),
    Preconditioner::Registered(Registered::Neumann(NeumannSettings::NEU2)),
];

/// PCG on the GPU on `a` as given (rows in the order to use: with
/// `subdomains`, each subdomain contiguous) with `preconditioner` (none,
/// Jacobi, or a registered algorithm: [`DEFLATED_PCG_PRECONDITIONERS`]),
/// deflated by `subdomains` when given, from the initial guess in `x`;
/// returns the performance and the Lanczos estimate of the preconditioned
/// (deflated) operator's spectrum. Undeflated solves run the fused device
/// loop for none and Jacobi.
#[allow(clippy::too_many_arguments)]
pub fn solve_pcg_deflated_gpu(
    gpu: &Gpu,
    a: &Csr,
    preconditioner: &Preconditioner,
    subdomains: Option<&Subdomains>,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    options: &GpuSolveOptions,
) -> Result<(SolverPerformance, Option<SpectrumEstimate>), SolveError> {
    crate::solve::cpu::check_system(a, b, x, controls)?;
    preconditioner.check()?;
    let jacobi = match preconditioner {
        Preconditioner::Kind(PreconditionerKind::Jacobi) => true,
        Preconditioner::Kind(PreconditionerKind::None) | Preconditioner::Registered(_) => false,
        other => {
            return Err(SolveError::Device(format!(
                "the {other} preconditioner is not available in deflated PCG on the GPU; use \
                 none, jacobi or a registered one (neu1, neu2, SSOR)"
            )))
        }
    };
    let mut backend = GpuCgBackend::new(gpu, a, jacobi, None, options)?;
    if let Preconditioner::Registered(settings) = preconditioner {
        let m = device_preconditioner(gpu, a, backend.shared_matrix(), settings)?;
        backend.set_preconditioner(m);
    }
    let b_dev = backend.upload(b)?;
    let mut x_dev = backend.upload(x)?;
    let result = match subdomains {
        Some(s) => {
            let ops = DeviceDeflation::new(gpu, backend.matrix(), s)?;
            deflated_pcg_device(&backend, &ops, &b_dev, &mut x_dev, controls)?
        }
        None => {
            let recorded = Recorded::new(&backend);
            let perf = pcg(&recorded, &b_dev, &mut x_dev, controls, "x")?;
            (perf, recorded.spectrum())
        }
    };
    x.copy_from_slice(&backend.download(&x_dev)?);
    Ok(result)
}
