//! The SIMPLE outer iteration of [`crate::flow::simple`] with its pressure
//! half on the device (issue 9; kernels in `kernels/assembly.cu` and
//! `kernels/simple.cu`).
//!
//! [`DeviceSimple`] keeps a [`DeviceLaplacian`] of the pressure equation
//! (pattern, assembly map and geometry uploaded once per run, rows in reverse
//! Cuthill–McKee order) and the fields it works on, in its row order: p, the
//! previous iteration's p, rAU, HbyA, U, and φ_HbyA and φ in the device face
//! layout ([`DeviceLaplacian::n_face_values`]). Per outer iteration:
//!
//! 1. momentum predictor and Rhie–Chow on the host ([`Simple::predict`]);
//!    rAU, HbyA and φ_HbyA are uploaded;
//! 2. on the device: ∇·φ_HbyA, the source −∇·φ_HbyA/V, re-assembly of the
//!    pressure matrix from the resident Γ = rAU and source
//!    ([`DeviceLaplacian::reassemble_from_device`]), `nNonOrthogonalCorrectors
//!    + 1` right-hand side updates and PCG solves warm-started from the
//!    resident p, φ = φ_HbyA − the equation's face flux, the continuity errors
//!    (two device sums read back), p relaxation, ∇p and U = HbyA − rAU ∇p;
//! 3. U, p and φ are read back for the next host momentum predictor.
//!
//! Every device step keeps the CPU's order of operations (gathers, no
//! atomics, round-to-nearest arithmetic), so the matrix, the fluxes and U
//! equal the CPU's bit for bit for the same p; the PCG iterates agree to
//! round-off (its reductions are tree sums), the continuity sums likewise.
//!
//! What remains on the host is the momentum predictor (matrix, convection,
//! deferred correction, relaxation, solves) and Rhie–Chow (issue 9 stage 2).

use std::time::Instant;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::assembly::{AssemblyError, DeviceLaplacian};
use super::pcg::{GpuSolveOptions, GpuVector};
use super::{vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::flow::simple::Predicted;
use crate::flow::{FlowError, IterationReport, Simple};
use crate::mesh::Vec3;
use crate::solve::{pcg, SolverControls};

/// Why the device loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum DeviceFlowError {
    #[error(transparent)]
    Flow(#[from] FlowError),
    #[error(transparent)]
    Assembly(#[from] AssemblyError),
}

impl From<GpuError> for DeviceFlowError {
    fn from(e: GpuError) -> Self {
        Self::Assembly(e.into())
    }
}

/// The pressure solver of the device loop: PCG on the resident matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePressureSolver {
    /// Jacobi preconditioner (else none).
    pub jacobi: bool,
    pub controls: SolverControls,
}

/// Device time of one outer iteration's parts so far (seconds, each part
/// synchronised at its end).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DevicePhaseSeconds {
    /// Uploads of rAU, HbyA and φ_HbyA.
    pub upload: f64,
    /// Divergence, assembly of the pressure matrix and the right-hand sides.
    pub assembly: f64,
    /// PCG solves.
    pub solve: f64,
    /// Flux correction, continuity errors, relaxation, velocity correction.
    pub corrections: f64,
    /// U, p and φ read back.
    pub download: f64,
}

/// The SIMPLE loop's pressure half on one GPU (see the module documentation).
pub struct DeviceSimple<'g> {
    gpu: &'g Gpu,
    laplacian: DeviceLaplacian<'g>,
    solver: DevicePressureSolver,
    /// Bit c set: velocity component c is solved.
    components: i32,
    p: GpuVector,
    p_old: CudaSlice<f64>,
    r_au: CudaSlice<f64>,
    /// 3 doubles per row.
    hbya: CudaSlice<f64>,
    u: CudaSlice<f64>,
    phi_hbya: CudaSlice<f64>,
    phi: CudaSlice<f64>,
    div: CudaSlice<f64>,
    source: CudaSlice<f64>,
    seconds: DevicePhaseSeconds,
}

/// Lap timer: the seconds since the last lap into `part`, after the device
/// finished its queued work.
struct Lap<'g> {
    gpu: &'g Gpu,
    clock: Instant,
}

impl Lap<'_> {
    fn lap(&mut self, part: &mut f64) -> Result<f64, GpuError> {
        self.gpu.synchronize()?;
        let s = self.clock.elapsed().as_secs_f64();
        *part += s;
        self.clock = Instant::now();
        Ok(s)
    }
}

impl<'g> DeviceSimple<'g> {
    /// The pressure system of `simple` on `gpu`, its p uploaded.
    /// [`AssemblyError::Unsupported`]: the device assembly does not handle the
    /// mesh (run the host loop instead).
    pub fn new(
        gpu: &'g Gpu,
        simple: &Simple,
        solver: DevicePressureSolver,
    ) -> Result<Self, AssemblyError> {
        let (system, problem) = simple.pressure_system();
        let slice_height = GpuSolveOptions::default().slice_height;
        let laplacian = DeviceLaplacian::new(gpu, system, problem, slice_height)?;
        let n = laplacian.n();
        let faces = laplacian.n_face_values();
        let p = GpuVector::from(laplacian.to_device_order(&simple.p)?);
        let phi = gpu.upload(&laplacian.to_device_faces(&simple.phi)?)?;
        let components = simple
            .components()
            .iter()
            .fold(0i32, |mask, &c| mask | (1 << c));
        Ok(Self {
            gpu,
            solver,
            components,
            p,
            p_old: gpu.zeros(n)?,
            r_au: gpu.zeros(n)?,
            hbya: gpu.zeros(3 * n)?,
            u: gpu.zeros(3 * n)?,
            phi_hbya: gpu.zeros(faces)?,
            phi,
            div: gpu.zeros(n)?,
            source: gpu.zeros(n)?,
            laplacian,
            seconds: DevicePhaseSeconds::default(),
        })
    }

    /// The device pressure system.
    pub fn laplacian(&self) -> &DeviceLaplacian<'g> {
        &self.laplacian
    }

    /// Device time by part of the iterations so far.
    pub fn phase_seconds(&self) -> DevicePhaseSeconds {
        self.seconds
    }

    /// One outer iteration of `simple` (the state this loop was built from,
    /// or its continuation): [`Simple::iterate`] with the pressure half on the
    /// device; U, p and φ of `simple` are updated.
    pub fn iterate(&mut self, simple: &mut Simple) -> Result<IterationReport, DeviceFlowError> {
        let Predicted {
            u_initial,
            hbya,
            r_au,
            phi_hbya,
        } = simple.predict()?;
        let gpu = self.gpu;
        let mut timer = Lap {
            gpu,
            clock: Instant::now(),
        };
        let mut seconds = self.seconds;
        let n = self.laplacian.n();
        let ordering = self.laplacian.ordering();
        gpu.write(&ordering.to_new(&r_au), &mut self.r_au)?;
        let hbya: Vec<f64> = ordering
            .to_new(&hbya)
            .iter()
            .flat_map(|v| [v.x, v.y, v.z])
            .collect();
        gpu.write(&hbya, &mut self.hbya)?;
        gpu.write(
            &self.laplacian.to_device_faces(&phi_hbya)?,
            &mut self.phi_hbya,
        )?;
        let mut pressure = timer.lap(&mut seconds.upload)?;

        // The pressure equation −∇·(rAU∇p) = −∇·φ_HbyA.
        gpu.copy(self.p.dev()?, &mut self.p_old)?;
        self.laplacian.divergence(&self.phi_hbya, &self.div)?;
        let n_i = n as i32;
        gpu.launch("simple_source", vector_grid(n), VECTOR_BLOCK, 0, |a| {
            a.arg(&n_i)
                .arg(&self.div)
                .arg(self.laplacian.volumes())
                .arg(&self.source);
        })?;
        self.laplacian
            .reassemble_from_device(&self.r_au, &self.source)?;
        let settings = *simple.settings();
        let options = GpuSolveOptions::default();
        let mut p_solves = Vec::with_capacity(settings.n_non_orth_correctors + 1);
        for _ in 0..=settings.n_non_orth_correctors {
            self.laplacian.update_rhs(self.p.dev()?, None)?;
            pressure += timer.lap(&mut seconds.assembly)?;
            let (backend, b) = self.laplacian.solver(self.solver.jacobi, &options)?;
            let perf =
                pcg(backend, b, &mut self.p, &self.solver.controls, "p").map_err(|source| {
                    FlowError::Solve {
                        field: "p".into(),
                        source,
                    }
                })?;
            p_solves.push(perf);
            pressure += timer.lap(&mut seconds.solve)?;
        }
        let p = self.p.dev()?;
        self.laplacian
            .subtract_flux(p, &self.r_au, &self.phi_hbya, &self.phi)?;
        pressure += timer.lap(&mut seconds.corrections)?;

        // Continuity errors, p relaxation, U = HbyA − rAU ∇p.
        self.laplacian.divergence(&self.phi, &self.div)?;
        let [sum, abs_sum] = self.laplacian.sums(&self.div, None)?;
        let total = self.laplacian.total_volume();
        let continuity = simple.record_continuity(abs_sum / total, sum / total);
        let alpha_p = settings.relaxation_p;
        gpu.launch("simple_relax", vector_grid(n), VECTOR_BLOCK, 0, |a| {
            a.arg(&n_i).arg(&alpha_p).arg(&self.p_old).arg(p);
        })?;
        self.laplacian.gradient(p)?;
        let components = self.components;
        gpu.launch(
            "simple_correct_velocity",
            vector_grid(n),
            VECTOR_BLOCK,
            0,
            |a| {
                a.arg(&n_i)
                    .arg(&components)
                    .arg(&self.hbya)
                    .arg(&self.r_au)
                    .arg(self.laplacian.gradient_buffer())
                    .arg(&self.u);
            },
        )?;
        let mut corrections = timer.lap(&mut seconds.corrections)?;

        // Back to the host for the next momentum predictor.
        simple.p = self.laplacian.to_mesh_order(p)?;
        simple.phi = self.laplacian.to_mesh_faces(&self.phi)?;
        let u = self.download_velocity()?;
        let solved = simple.components().to_vec();
        for (to, from) in simple.u.iter_mut().zip(&u) {
            for &c in &solved {
                to[c] = from[c];
            }
        }
        corrections += timer.lap(&mut seconds.download)?;
        self.seconds = seconds;
        simple.add_seconds(pressure, corrections);
        Ok(simple.report(u_initial, p_solves, continuity))
    }

    /// The device U in mesh order.
    fn download_velocity(&self) -> Result<Vec<Vec3>, GpuError> {
        let u = self.gpu.download(&self.u)?;
        let by_row: Vec<Vec3> = u[..3 * self.laplacian.n()]
            .chunks_exact(3)
            .map(|c| Vec3::new(c[0], c[1], c[2]))
            .collect();
        Ok(self.laplacian.ordering().to_old(&by_row))
    }

    /// [`Simple::run`] with [`Self::iterate`]: outer iterations (logged as
    /// `Time = N`) until the residual control is met or `max_iterations` are
    /// done.
    pub fn run(
        &mut self,
        simple: &mut Simple,
        max_iterations: usize,
        mut after_each: impl FnMut(&Simple, &IterationReport) -> Result<(), FlowError>,
    ) -> Result<Vec<IterationReport>, DeviceFlowError> {
        let mut reports = Vec::new();
        for _ in 0..max_iterations {
            log::info!("Time = {}", simple.iteration() + 1);
            let report = self.iterate(simple)?;
            after_each(simple, &report)?;
            let converged = report.converged;
            reports.push(report);
            if converged {
                log::info!(
                    "SIMPLE solution converged in {} iterations",
                    simple.iteration()
                );
                break;
            }
        }
        Ok(reports)
    }
}
