//! The transient step of [`crate::flow::piso`] (icoFoam's PISO, laminar
//! pimpleFoam's PIMPLE) with every part on the device, built from the
//! pieces of the SIMPLE loop ([`DeviceSimple`]; kernels in
//! `kernels/simple.cu`).
//!
//! [`DevicePiso`] keeps the pressure system, U, p and φ of a [`Piso`]
//! resident (rows in the pressure system's order), with the old-time
//! levels U⁰, φ⁰ (and backward's U⁰⁰, φ⁰⁰). One [`DevicePiso::step`]:
//!
//! 1. **Courant number** of the old fluxes: Σ_f |φ_f| per row
//!    (`piso_courant_rows`, the CPU's order), its sum (a tree sum) and the
//!    largest Σ|φ|/V (a max reduction, exact): two numbers read back.
//! 2. per outer corrector: the **momentum equation** of each solved
//!    component (`piso_momentum_rows`): the viscous matrix and right-hand side
//!    (its non-orthogonal correction updated), the time term (Euler or
//!    backward), Gauss linear (implicit central) or upwind-based convection
//!    with the deferred correction of linearUpwind / limitedLinear, the
//!    `bounded` variants, relaxation by α_U below 1 and pimpleFoam's explicit
//!    laminar stress (`simple_stress_faces`, `simple_stress_rows`, from the U
//!    the outer corrector starts from), then −V∇p; with `momentumPredictor`
//!    solved by GMRES or PBiCGStab (Jacobi or none) on the resident matrix
//!    once every component is assembled (PBiCGStab solves the components
//!    together, as the lanes of one device loop), `UFinal`'s solver on the
//!    final one of several outer correctors. While it is solved, a second
//!    stream of the device computes rAU from the assembled diagonals
//!    (`simple_r_au`), re-assembles the pressure matrix from it and re-sets
//!    its preconditioner up (`DeviceSimple::pressure_matrix_ahead`): they
//!    depend on the momentum equation's diagonal only. The AMG's value
//!    re-set-up (2 ms at 100³, its dense coarsest inverse a chain of
//!    latency-bound steps) then fills the momentum solve's host waits. Not
//!    at the first assembly (the preconditioner's set-up) nor when the parts
//!    are timed one by one.
//! 3. per PISO corrector: a_P, HbyA, rAU, the face flux φ_HbyA plus
//!    `fvc::ddtCorr` (`piso_ddt_correction_*`, zero on fixed-value velocity
//!    patches), the pressure matrix re-assembled into the resident mod-SELL
//!    (values only) and solved warm-started (`pFinal`'s controls on the
//!    solve [`TransientSettings::final_pressure_solve`] names), φ = φ_HbyA −
//!    the equation's flux, the continuity errors (two device sums read back),
//!    p relaxed towards the outer corrector's start where α_p < 1, and U =
//!    HbyA − rAU∇p.
//!
//! Only residual scalars come back per step, and the host waits for the
//! device only where it reads them: the AMG re-set-up's status is read after
//! the solve that follows it (`DeviceAmg::deferred_status`), and the parts
//! are timed with a synchronisation each only at `--log debug`
//! ([`DevicePiso::per_part_sync`]). The fields reach the host [`Piso`] at
//! [`DevicePiso::download_fields`] (the run's writes and end);
//! `docs/src/transient.md` lists a step's launches and read-backs.
//! The arithmetic follows `flow::piso` in order and association (gathers, no
//! atomics, round-to-nearest, never fused): for the same inputs the matrices,
//! fluxes and corrections equal the CPU's bit for bit, except for the
//! Krylov and PCG reductions (tree sums), the relaxation's Σ|a_nb| and HbyA's
//! row sums (the device's column order) and the Courant and continuity sums
//! (logged numbers). The step's orchestration (which corrector relaxes by
//! what, which solve is final, when the outer correctors stop, the ddt
//! coefficients) is `flow::piso`'s own, shared with the CPU step.

use std::time::Instant;

use cudarc::driver::CudaSlice;

use super::{
    launch_face_walk, launch_row_walk, lost, ComponentInputs, DeviceFlowError, DeviceKrylov,
    DeviceMomentum, DevicePhaseBytes, DevicePhaseSeconds, DevicePressureSolver, DeviceSimple, Lap,
};
use crate::flow::piso::{
    ddt_coefficients, log_courant, max_initial_residual, DdtScheme, OldTime, Piso, StepReport,
    TransientSettings,
};
use crate::flow::FlowError;
use crate::gpu::assembly::AssemblyError;
use crate::gpu::{arg_or_null, vector_grid, Gpu, GpuError, VECTOR_BLOCK};
use crate::mesh::Vec3;
use crate::solve::{SolverControls, SolverPerformance};

/// Threads of the one-block max reduction (`piso_max_reduce`).
const MAX_BLOCK: u32 = 1024;
/// Bytes of the copy that measures the bandwidth the solves' floors are
/// taken at: large against the L2 cache, small against the device.
pub const FLOOR_COPY_BYTES: usize = 256 << 20;

/// Time per part of the device steps so far (seconds; each part
/// synchronised at its end where `synchronised`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceStepSeconds {
    /// The parts as the SIMPLE loop counts them: momentum assembly and
    /// solves, Rhie–Chow fluxes (with ddtCorr and the old-time fluxes),
    /// pressure assembly, the AMG or polynomial preconditioner's set-up and
    /// re-set-ups, pressure solves, corrections (with the Courant and
    /// continuity reductions), read-backs.
    pub parts: DevicePhaseSeconds,
    /// Wall time of the steps (read-backs for writes excluded).
    pub steps: f64,
    /// Whether each part ended with a device synchronisation, so that the
    /// parts are the device's time ([`DevicePiso::per_part_sync`]). Without,
    /// the step waits only for its residual scalars, and a part that reads
    /// some back takes in the device time of the parts queued before it.
    pub synchronised: bool,
}

impl DeviceStepSeconds {
    /// Momentum assembly and solves.
    pub fn momentum(&self) -> f64 {
        self.parts.momentum_assembly + self.parts.momentum_solve
    }

    /// The pressure solves (with the preconditioner's value re-set-ups).
    pub fn pressure_solves(&self) -> f64 {
        self.parts.solve + self.parts.preconditioner_update
    }

    /// The rest of the steps: fluxes, pressure assembly, corrections,
    /// reductions, launches.
    pub fn other(&self) -> f64 {
        (self.steps - self.momentum() - self.pressure_solves()).max(0.0)
    }
}

/// The old-time levels on the device (row order, device face layout).
struct OldLevels {
    /// U⁰ per component (all three), φ⁰, and the flux of U⁰ with the
    /// current boundary values.
    u: Vec<CudaSlice<f64>>,
    phi: CudaSlice<f64>,
    flux: CudaSlice<f64>,
}

/// The transient step on one GPU (see the module documentation).
pub struct DevicePiso<'g> {
    device: DeviceSimple<'g>,
    settings: TransientSettings,
    /// The momentum solvers: `U`, and `UFinal` on the final one of several
    /// outer correctors.
    u_solver: DeviceKrylov,
    u_final: DeviceKrylov,
    /// `p`'s and `pFinal`'s controls (the preconditioner is the device
    /// solver's for both).
    p_controls: SolverControls,
    p_final_controls: SolverControls,
    /// Gauss linear (central, implicit) convection.
    central: bool,
    /// U⁰, φ⁰ and backward's U⁰⁰, φ⁰⁰.
    old: OldLevels,
    older: OldLevels,
    /// Δt of the previous step (`None` before the first: Euler).
    old_dt: Option<f64>,
    /// Per device boundary face: 1 where the velocity is fixed.
    fixes_value: CudaSlice<u8>,
    /// Courant and continuity scratch: per row, and the max reduction's.
    abs_sum: CudaSlice<f64>,
    ratio: CudaSlice<f64>,
    terms: CudaSlice<f64>,
    max_partials: CudaSlice<f64>,
    max_out: CudaSlice<f64>,
    steps: f64,
    /// Whether the step synchronises at the end of each part to time it
    /// ([`Self::per_part_sync`]).
    synchronised: bool,
}

impl<'g> DevicePiso<'g> {
    /// The device's momentum solvers (`U`, `UFinal`) for `piso`; `Err`:
    /// why the device cannot run its step (it then runs on the host).
    pub fn momentum_solvers(piso: &Piso) -> Result<(DeviceKrylov, DeviceKrylov), String> {
        let settings = piso.settings();
        let u = DeviceKrylov::new(piso.momentum_solver(), "U")?;
        let u_final = if settings.n_outer_correctors > 1 {
            DeviceKrylov::new(&settings.momentum_final, "UFinal")?
        } else {
            u
        };
        Ok((u, u_final))
    }

    /// The step of `piso` on `gpu`, its U, p, φ uploaded; p solved by
    /// PCG with `pressure`'s preconditioner, `pFinal`'s solves with
    /// `p_final_controls`. [`AssemblyError::Unsupported`]: the device does
    /// not run this step (the reason; run the host step instead).
    pub fn new(
        gpu: &'g Gpu,
        piso: &mut Piso,
        pressure: DevicePressureSolver,
        p_final_controls: SolverControls,
    ) -> Result<Self, AssemblyError> {
        let (u_solver, u_final) =
            Self::momentum_solvers(piso).map_err(AssemblyError::Unsupported)?;
        let settings = *piso.settings();
        let simple = &mut piso.simple;
        let mut device = DeviceSimple::pressure_half(gpu, simple, pressure)?;
        let convection = settings.convection.scheme;
        let explicit_stress = simple.settings().explicit_stress;
        let momentum = DeviceMomentum::new(
            gpu,
            simple,
            &device.laplacian,
            convection,
            u_solver,
            explicit_stress,
        )?;
        let piso = &*piso;
        device.momentum = Some(momentum);
        let n = device.laplacian.n();
        let faces = device.laplacian.n_face_values();
        let fixes = piso.fixes_value();
        let fixes_value: Vec<u8> = device
            .laplacian
            .device_boundary()
            .iter()
            .map(|&b| u8::from(fixes[b as usize]))
            .collect();
        let levels = || -> Result<OldLevels, GpuError> {
            Ok(OldLevels {
                u: (0..3).map(|_| gpu.zeros(n)).collect::<Result<_, _>>()?,
                phi: gpu.zeros(faces)?,
                flux: gpu.zeros(faces)?,
            })
        };
        let partials = vector_grid(n) as usize;
        log::info!(
            "{} step on the GPU: momentum ({}{}), Rhie-Chow, pressure assembly and solves, \
             corrections; fields read back at write times",
            if settings.pimple || settings.n_outer_correctors > 1 {
                "PIMPLE"
            } else {
                "PISO"
            },
            u_solver.describe(),
            if u_final != u_solver {
                format!("; UFinal {}", u_final.describe())
            } else {
                String::new()
            }
        );
        Ok(Self {
            settings,
            u_solver,
            u_final,
            p_controls: pressure.controls,
            p_final_controls,
            central: convection.is_none(),
            old: match &piso.old {
                // A restart's older level: the first step moves it to
                // `older` (shift_old_levels) and steps with backward.
                Some(old) => {
                    let lap = &device.laplacian;
                    let component = |c: usize| -> Result<CudaSlice<f64>, GpuError> {
                        let values: Vec<f64> = old.u.iter().map(|u| u[c]).collect();
                        lap.to_device_order(&values)
                    };
                    OldLevels {
                        u: (0..3).map(component).collect::<Result<_, _>>()?,
                        phi: gpu.upload(&lap.to_device_faces(&old.phi)?)?,
                        flux: gpu.zeros(faces)?,
                    }
                }
                None => levels()?,
            },
            older: levels()?,
            old_dt: piso.old.as_ref().map(|old| old.dt),
            fixes_value: gpu.upload(&if fixes_value.is_empty() {
                vec![0]
            } else {
                fixes_value
            })?,
            abs_sum: gpu.zeros(n)?,
            ratio: gpu.zeros(n)?,
            terms: gpu.zeros(n)?,
            max_partials: gpu.zeros(partials.max(1))?,
            max_out: gpu.zeros(1)?,
            synchronised: Self::per_part_sync(gpu),
            device,
            steps: 0.0,
        })
    }

    /// Whether the steps time each part on the device, a synchronisation at
    /// its end: with `--log debug` (the per-step split is logged) or where
    /// every launch synchronises anyway (`FVPOISSON_GPU_SYNC=1`,
    /// `FVPOISSON_GPU_PROFILE=1`). Otherwise a step waits for the device only
    /// where it reads residual scalars back, and the host queues the next
    /// part while the device runs the last.
    pub fn per_part_sync(gpu: &Gpu) -> bool {
        log::log_enabled!(log::Level::Debug) || gpu.syncs_each_launch()
    }

    /// The bytes the solves moved so far ([`DevicePhaseBytes`]).
    pub fn phase_bytes(&self) -> DevicePhaseBytes {
        self.device.phase_bytes()
    }

    /// The device's copy bandwidth in GB/s, measured now
    /// ([`Gpu::copy_bandwidth`] on [`FLOOR_COPY_BYTES`]).
    pub fn copy_bandwidth(&self) -> Result<f64, GpuError> {
        self.device.gpu.copy_bandwidth(FLOOR_COPY_BYTES)
    }

    /// Time per part of the steps so far.
    pub fn seconds(&self) -> DeviceStepSeconds {
        DeviceStepSeconds {
            parts: self.device.phase_seconds(),
            steps: self.steps,
            synchronised: self.synchronised,
        }
    }

    /// Value re-set-ups of the pressure's AMG or polynomial preconditioner
    /// so far (its set-up not counted): one per outer corrector, the later
    /// PISO correctors and the non-orthogonal correctors keeping the matrix.
    pub fn preconditioner_updates(&self) -> usize {
        self.device.preconditioner_updates()
    }

    /// U, p and φ of the device into `piso` (mesh order); with backward,
    /// after a step, also the older level (`piso.old`: U⁰ and φ⁰ of the
    /// step made, which the case writes as `U_0` and `phi_0`).
    pub fn download_fields(&mut self, piso: &mut Piso) -> Result<(), GpuError> {
        self.device.timed_download(&mut piso.simple)?;
        if let (DdtScheme::Backward, Some(dt)) = (self.settings.ddt, self.old_dt) {
            let lap = &self.device.laplacian;
            let mut u = vec![Vec3::zeros(); lap.n()];
            for (c, level) in self.old.u.iter().enumerate() {
                for (u, x) in u.iter_mut().zip(lap.to_mesh_order(level)?) {
                    u[c] = x;
                }
            }
            let phi = lap.to_mesh_faces(&self.old.phi)?;
            piso.old = Some(OldTime { u, phi, dt });
        }
        Ok(())
    }

    /// `CourantNo.H` of the resident φ for `dt`: (mean, max).
    fn courant(&mut self, dt: f64) -> Result<(f64, f64), GpuError> {
        let lap = &self.device.laplacian;
        let gpu = self.device.gpu;
        let arrays = lap.arrays()?;
        let n = lap.n();
        let n_i = n as i32;
        let n_faces = lap.device_faces().len() as i32;
        launch_row_walk(gpu, "piso_courant_rows", &n_i, &arrays, |a| {
            a.arg(&n_faces)
                .arg(&self.device.phi)
                .arg(arrays.volumes)
                .arg(&self.abs_sum)
                .arg(&self.ratio);
        })?;
        // The max reduction is queued before the sums' read-back, so that
        // one wait covers both and the max is read from an idle stream.
        let grid = vector_grid(n);
        gpu.launch("piso_max_partials", grid, VECTOR_BLOCK, 0, |a| {
            a.arg(&n_i).arg(&self.ratio).arg(&self.max_partials);
        })?;
        let count = grid as i32;
        gpu.launch("piso_max_reduce", 1, MAX_BLOCK, 0, |a| {
            a.arg(&count).arg(&self.max_partials).arg(&self.max_out);
        })?;
        let [sum, _] = lap.sums(&self.abs_sum, None)?;
        let max = gpu.download(&self.max_out)?[0];
        let mean = sum / lap.total_volume();
        Ok((0.5 * mean * dt, 0.5 * max * dt))
    }

    /// The old-time levels of a new step: U⁰⁰, φ⁰⁰ ← U⁰, φ⁰ (after a
    /// step), U⁰, φ⁰ ← the resident U, φ, and the fluxes of U⁰ (and U⁰⁰
    /// where `older`) with the current boundary values.
    fn shift_old_levels(&mut self, older: bool) -> Result<(), DeviceFlowError> {
        if self.old_dt.is_some() {
            std::mem::swap(&mut self.old, &mut self.older);
        }
        let d = &mut self.device;
        let gpu = d.gpu;
        for (c, u) in self.old.u.iter_mut().enumerate() {
            gpu.copy(d.u[c].dev()?, u)?;
        }
        gpu.copy(&d.phi, &mut self.old.phi)?;
        let m = d.momentum.as_ref().ok_or_else(lost)?;
        let lap = &d.laplacian;
        for level in [Some(&self.old), older.then_some(&self.older)]
            .into_iter()
            .flatten()
        {
            let u = [&level.u[0], &level.u[1], &level.u[2]];
            m.face_flux(gpu, lap, &d.components, u, &level.flux)?;
        }
        Ok(())
    }

    /// φ_HbyA += (rAU)_f ddtCorr(U, φ) with coefficients `c0`, `c00` (0:
    /// no U⁰⁰ level) for `dt`.
    fn add_ddt_correction(&self, c0: f64, c00: f64, dt: f64) -> Result<(), GpuError> {
        let d = &self.device;
        let lap = &d.laplacian;
        let arrays = lap.arrays()?;
        let n = lap.n();
        let n_i = n as i32;
        let n_faces = lap.device_faces().len() as i32;
        let r_dt = 1.0 / dt;
        let older = (c00 != 0.0).then_some(&self.older);
        launch_face_walk(d.gpu, "piso_ddt_correction_faces", &n_faces, &arrays, |a| {
            a.arg(&d.r_au).arg(&self.old.phi).arg(&self.old.flux);
            arg_or_null(a, older.map(|o| &o.phi));
            arg_or_null(a, older.map(|o| &o.flux));
            a.arg(&c0).arg(&c00).arg(&r_dt).arg(&d.phi_hbya);
        })?;
        d.gpu.launch_vector("piso_ddt_correction_boundary", n, |a| {
            a.arg(&n_i)
                .arg(arrays.boundary_ptr)
                .arg(&n_faces)
                .arg(&self.fixes_value)
                .arg(&d.r_au)
                .arg(&self.old.phi)
                .arg(&self.old.flux);
            arg_or_null(a, older.map(|o| &o.phi));
            arg_or_null(a, older.map(|o| &o.flux));
            a.arg(&c0).arg(&c00).arg(&r_dt).arg(&d.phi_hbya);
        })
    }

    /// The momentum equations of the solved components around the resident
    /// U (relaxed by `alpha_u`), assembled; [`Self::solve_momentum`] solves
    /// them.
    fn assemble_momentum(
        &mut self,
        piso: &Piso,
        alpha_u: f64,
        ddt: (f64, f64, f64),
        dt: f64,
        timer: &mut Lap<'g>,
        seconds: &mut DevicePhaseSeconds,
    ) -> Result<(), DeviceFlowError> {
        let (coeff, c0, c00) = ddt;
        let simple_settings = *piso.simple.settings();
        let d = &mut self.device;
        let gpu = d.gpu;
        let m = d.momentum.as_mut().ok_or_else(lost)?;
        let pressure = &d.laplacian;
        let inputs = ComponentInputs::new(pressure, d.p.dev()?, &d.phi, &simple_settings, alpha_u)?;
        if simple_settings.explicit_stress {
            m.compute_stress(gpu, pressure, &d.components, &d.u, simple_settings.nu)?;
        }
        let r_dt = 1.0 / dt;
        let ddt_diag = coeff * r_dt;
        let central = i32::from(self.central);
        let bounded = i32::from(self.settings.convection.bounded);
        let older = (c00 != 0.0).then_some(&self.older);
        for (k, &c) in d.components.iter().enumerate() {
            let c_i = c as i32;
            m.assemble_component(
                gpu,
                "piso_momentum_rows",
                k,
                &c_i,
                d.u[c].dev()?,
                &inputs,
                |a| {
                    a.arg(inputs.arrays.weights)
                        .arg(&d.phi)
                        .arg(&central)
                        .arg(&bounded);
                },
                |a| {
                    a.arg(&ddt_diag)
                        .arg(&r_dt)
                        .arg(&c0)
                        .arg(&c00)
                        .arg(&self.old.u[c]);
                    arg_or_null(a, older.map(|o| &o.u[c]));
                },
            )?;
            timer.lap(&mut seconds.momentum_assembly)?;
        }
        Ok(())
    }

    /// The assembled momentum equations solved by `solver`; the solves'
    /// reports.
    fn solve_momentum(
        &mut self,
        solver: &DeviceKrylov,
        timer: &mut Lap<'g>,
        seconds: &mut DevicePhaseSeconds,
    ) -> Result<Vec<(String, SolverPerformance)>, DeviceFlowError> {
        let d = &mut self.device;
        let m = d.momentum.as_mut().ok_or_else(lost)?;
        let solves = m.solve_components(
            d.gpu,
            &d.components,
            &mut d.u,
            solver,
            &mut d.bytes.momentum_solve,
        )?;
        timer.lap(&mut seconds.momentum_solve)?;
        Ok(solves)
    }

    /// a_P, HbyA, rAU and φ_HbyA with ddtCorr from the current U.
    fn fluxes(&mut self, c0: f64, c00: f64, dt: f64) -> Result<(), GpuError> {
        let d = &self.device;
        let gpu = d.gpu;
        let m = d.momentum.as_ref().ok_or_else(lost)?;
        let pressure = &d.laplacian;
        m.h_by_a(gpu, pressure, &d.components, &d.u, &d.hbya, &d.r_au, None)?;
        let hbya = [&d.hbya[0], &d.hbya[1], &d.hbya[2]];
        m.face_flux(gpu, pressure, &d.components, hbya, &d.phi_hbya)?;
        self.add_ddt_correction(c0, c00, dt)
    }

    /// `continuityErrs.H` of a transient solver for the resident φ, logged
    /// and added to the cumulative error of `piso`.
    fn continuity(&mut self, piso: &mut Piso, dt: f64) -> Result<[f64; 3], GpuError> {
        let d = &self.device;
        let lap = &d.laplacian;
        let n = lap.n();
        let n_i = n as i32;
        lap.divergence(&d.phi, &d.div)?;
        d.gpu.launch_vector("piso_continuity_terms", n, |a| {
            a.arg(&n_i).arg(&d.div).arg(lap.volumes()).arg(&self.terms);
        })?;
        let [sum, abs_sum] = lap.sums(&self.terms, None)?;
        let total = lap.total_volume();
        Ok(piso
            .simple
            .record_continuity(dt * abs_sum / total, dt * sum / total))
    }

    /// One time step of `piso` (the state this step was built from, or its
    /// continuation): [`Piso::step`] on the device. `piso`'s time and step
    /// count advance; its U, p and φ come with [`Self::download_fields`],
    /// and its old-time fields stay `None` (they are on the device).
    pub fn step(&mut self, piso: &mut Piso) -> Result<StepReport, DeviceFlowError> {
        let courant = self.log_courant(piso.dt)?;
        self.advance(piso, courant)
    }

    /// The Courant number of the resident φ for `dt` ([`Piso::courant`]),
    /// logged.
    pub fn log_courant(&mut self, dt: f64) -> Result<(f64, f64), GpuError> {
        let clock = Instant::now();
        let courant = self.courant(dt)?;
        log_courant(courant);
        self.steps += clock.elapsed().as_secs_f64();
        Ok(courant)
    }

    /// [`Self::step`] after its Courant number `courant` was computed and
    /// logged ([`Piso::advance`]).
    pub fn advance(
        &mut self,
        piso: &mut Piso,
        courant: (f64, f64),
    ) -> Result<StepReport, DeviceFlowError> {
        let clock = Instant::now();
        let gpu = self.device.gpu;
        let mut timer = Lap {
            gpu,
            clock: Instant::now(),
            synced: self.synchronised,
        };
        let mut seconds = self.device.seconds;
        let dt = piso.dt;
        if !(dt.is_finite() && dt > 0.0) {
            return Err(FlowError::invalid(format!(
                "time step {dt}: it must be a positive number"
            ))
            .into());
        }
        let settings = self.settings;
        let ddt = ddt_coefficients(settings.ddt, dt, self.old_dt);
        let (_, c0, c00) = ddt;
        self.shift_old_levels(c00 != 0.0)?;
        timer.lap(&mut seconds.fluxes)?;
        let n = self.device.laplacian.n();
        let n_i = n as i32;
        let mut u_solves = Vec::new();
        let mut p_solves = Vec::new();
        let mut continuity = [0.0; 3];
        let mut outer_done = 0;
        for outer in 0..settings.n_outer_correctors {
            outer_done = outer + 1;
            let corrector = settings.outer_corrector(outer);
            if settings.pimple || settings.n_outer_correctors > 1 {
                log::info!("PIMPLE: iteration {}", outer + 1);
            }
            let solver = if corrector.final_momentum {
                self.u_final
            } else {
                self.u_solver
            };
            self.assemble_momentum(piso, corrector.alpha_u, ddt, dt, &mut timer, &mut seconds)?;
            // The pressure matrix and its preconditioner while the momentum
            // equation is solved.
            let matrix_ahead =
                self.device
                    .pressure_matrix_ahead(self.synchronised, &mut timer, &mut seconds)?;
            let residuals = if settings.momentum_predictor {
                self.solve_momentum(&solver, &mut timer, &mut seconds)?
            } else {
                Vec::new()
            };
            let matrix_kept = matrix_ahead.is_some();
            if let Some(work) = matrix_ahead {
                work.join(gpu)?;
            }
            // p of the outer corrector's start (flow::piso).
            let d = &mut self.device;
            gpu.copy(d.p.dev()?, &mut d.p_old)?;
            let first_p_solve = p_solves.len();
            for index in 0..settings.n_correctors {
                self.fluxes(c0, c00, dt)?;
                timer.lap(&mut seconds.fluxes)?;
                let (p, p_final) = (self.p_controls, self.p_final_controls);
                let mut host_pressure = 0.0;
                // rAU is the momentum equation's of this outer corrector: the
                // correctors after the first, and the first when the matrix
                // was assembled ahead, keep the pressure matrix.
                let solves = self.device.pressure_equation(
                    index > 0 || matrix_kept,
                    piso.simple.settings().n_non_orth_correctors,
                    |last| {
                        if settings.final_pressure_solve(index, last) {
                            p_final
                        } else {
                            p
                        }
                    },
                    &mut timer,
                    &mut seconds,
                    &mut host_pressure,
                )?;
                p_solves.extend(solves);
                continuity = self.continuity(piso, dt)?;
                let d = &mut self.device;
                if corrector.alpha_p < 1.0 {
                    let p = d.p.dev()?;
                    let alpha = corrector.alpha_p;
                    gpu.launch_vector("simple_relax", n, |a| {
                        a.arg(&n_i).arg(&alpha).arg(&d.p_old).arg(p);
                    })?;
                }
                d.correct_velocity()?;
                timer.lap(&mut seconds.corrections)?;
            }
            let p_initial = p_solves
                .get(first_p_solve)
                .map_or(0.0, |p: &SolverPerformance| p.initial_residual);
            let u_max = max_initial_residual(&residuals);
            if outer == 0 {
                u_solves = residuals;
            }
            if settings.outer_converged(&corrector, u_max, p_initial) {
                log::info!("PIMPLE: converged in {} iterations", outer + 1);
                break;
            }
        }
        self.device.seconds = seconds;
        self.device.host_current = false;
        self.old_dt = Some(dt);
        piso.old = None;
        piso.time += dt;
        piso.step += 1;
        self.steps += clock.elapsed().as_secs_f64();
        Ok(StepReport {
            step: piso.step,
            time: piso.time,
            courant,
            u_solves,
            p_solves,
            continuity,
            outer_correctors: outer_done,
        })
    }
}
