//! Transient incompressible laminar flow: the time step of OpenFOAM v1912's
//! icoFoam (PISO; Issa 1986) and laminar pimpleFoam (PIMPLE: PISO inside outer
//! correctors with under-relaxation), built on the SIMPLE pieces of
//! [`super::simple`] (viscous systems, Rhie–Chow face flux, pressure equation).
//!
//! One time step ([`Piso::step`]), t → t + Δt, φ⁰ and U⁰ the old-time fields:
//! 1. **Courant number** of the old fluxes, as `CourantNo.H`:
//!    Co = ½ Δt max_P(Σ_f |φ_f| / V_P), mean ½ Δt Σ_P Σ_f |φ_f| / Σ V.
//! 2. per outer corrector (1 for PISO): the **momentum equation**
//!    `ddt(U) + div(φ, U) − laplacian(ν, U)` per solved component: the viscous
//!    [`crate::fvm::LaplacianSystem`] plus the time term (Euler: V/Δt on the
//!    diagonal and V/Δt U⁰ on the right; backward: 3/2, 2 and −1/2 with U⁰⁰,
//!    Euler on the first step, as OpenFOAM does without an older time) and the
//!    convection term (`Gauss linear`: central weights, implicit; upwind,
//!    linearUpwind and limitedLinear as in SIMPLE; `bounded` subtracts
//!    (∇·φ)U), relaxed by α_U (PIMPLE; `UFinal`'s factor on the last outer
//!    corrector). pimpleFoam's laminar model adds its explicit stress
//!    −∇·(ν dev2((∇U)ᵀ)) ([`Simple::explicit_stress`], from the U the outer
//!    corrector starts from; enabled by [`SimpleSettings::explicit_stress`]),
//!    which vanishes for constant ν in the continuum but not discretely;
//!    icoFoam has no such term. With `momentumPredictor` it is solved with −∇p
//!    on the right.
//! 3. per PISO corrector: rAU = V/a_P, HbyA = H/a_P with the current U,
//!    φ_HbyA = (HbyA)_f·S_f + (rAU)_f ddtCorr, where ddtCorr is OpenFOAM's
//!    `fvc::ddtCorr(U, φ)`: (1 − min(|φ⁰ − U⁰_f·S_f| / (|φ⁰| + 10⁻¹⁵), 1))
//!    (φ⁰ − U⁰_f·S_f)/Δt (backward: the scheme's combination of the two old
//!    levels), zero on fixed-value velocity patches; then the pressure equation
//!    ∇·(rAU ∇p) = ∇·φ_HbyA (`nNonOrthogonalCorrectors + 1` solves; the last
//!    solve of the last corrector of every outer corrector with the `pFinal`
//!    solver, as v1912's `finalInnerIter`), φ = φ_HbyA − the equation's flux,
//!    the continuity errors of `continuityErrs.H` (times Δt), p relaxed by α_p
//!    towards the p of the outer corrector's start (PIMPLE; `pFinal`'s factor
//!    on the last outer corrector), and U = HbyA − rAU ∇p with the relaxed p.
//!
//! icoFoam and laminar pimpleFoam (1 and 2 outer correctors, relaxed) match
//! OpenFOAM v1912 on the cavity to ~1e-14 (`tests/ico_foam.rs`).
//!
//! Not done: adjustPhi (closed domains with flux-adjustable patches),
//! `fixedFluxPressure`.

use super::simple::{
    add_deferred_correction, correct_velocity, momentum_rhs, Convection, MomentumSolver,
    PressureSolve, Simple, SimpleSettings,
};
use super::{FlowError, VelocityCondition};
use crate::foam::write::format_log;
use crate::fvm::convection::{add_upwind_boundary, add_upwind_internal};
use crate::fvm::BoundaryCondition;
use crate::mesh::{Geometry, Mesh, Vec3};
use crate::solve::SolverPerformance;
use crate::sparse::Csr;

/// OpenFOAM's `SMALL` (double precision), the guard of ddtCorr's ratio.
const SMALL: f64 = 1e-15;

/// `ddtSchemes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdtScheme {
    /// First order, implicit.
    Euler,
    /// Second order, three time levels (Euler on the first step).
    Backward,
}

impl DdtScheme {
    pub fn from_foam(text: &str) -> Result<Self, FlowError> {
        match text.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["Euler"] => Ok(Self::Euler),
            ["backward"] => Ok(Self::Backward),
            _ => Err(FlowError::invalid(format!(
                "ddt scheme '{text}' is not supported for transient flow (Euler or backward)"
            ))),
        }
    }
}

/// `div(phi,U)` of a transient solver: not bounded unless written so.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransientConvection {
    /// `None`: `Gauss linear` (central differences).
    pub scheme: Option<Convection>,
    /// `bounded Gauss ...`: −(∇·φ) U subtracted.
    pub bounded: bool,
}

impl TransientConvection {
    /// Parses `Gauss linear`, `Gauss upwind`, `Gauss linearUpwind grad(U)`,
    /// `Gauss limitedLinear(V) k`, each optionally `bounded`.
    pub fn from_foam(text: &str) -> Result<Self, FlowError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let (bounded, rest) = match words.as_slice() {
            ["bounded", rest @ ..] => (true, rest),
            all => (false, all),
        };
        if rest == ["Gauss", "linear"] {
            return Ok(Self {
                scheme: None,
                bounded,
            });
        }
        let scheme = Convection::from_foam(&rest.join(" ")).map_err(|_| {
            FlowError::invalid(format!(
                "convection scheme '{text}' is not supported (expected Gauss linear, Gauss \
                 upwind, Gauss linearUpwind grad(U) or Gauss limitedLinear K, optionally bounded)"
            ))
        })?;
        Ok(Self {
            scheme: Some(scheme),
            bounded,
        })
    }
}

/// What a time step does besides the SIMPLE settings (ν, schemes, pressure
/// reference, `nNonOrthogonalCorrectors`, the momentum solver of the outer
/// correctors before the last).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransientSettings {
    pub ddt: DdtScheme,
    pub convection: TransientConvection,
    /// `nOuterCorrectors` (1: PISO).
    pub n_outer_correctors: usize,
    /// pimpleFoam's loop: its log names every outer corrector (`PIMPLE:
    /// iteration 1` with one as well); icoFoam's does not.
    pub pimple: bool,
    /// `nCorrectors`: pressure correctors per outer corrector.
    pub n_correctors: usize,
    pub momentum_predictor: bool,
    /// The momentum solver of the last outer corrector (`UFinal`; icoFoam: `U`).
    pub momentum_final: MomentumSolver,
    /// Equation relaxation of U, and on the last outer corrector.
    pub relaxation_u: f64,
    pub relaxation_u_final: f64,
    /// Field relaxation of p, and on the last outer corrector.
    pub relaxation_p: f64,
    pub relaxation_p_final: f64,
    /// `outerCorrectorResidualControl`: the outer correctors stop once every
    /// field's first initial residual of the corrector is below these (0: not
    /// checked); `None`: all `nOuterCorrectors` run.
    pub outer_residual_control: Option<[f64; 2]>,
}

impl TransientSettings {
    /// icoFoam's PISO with `n_correctors` pressure correctors and Euler.
    pub fn piso(
        n_correctors: usize,
        convection: TransientConvection,
        momentum: MomentumSolver,
    ) -> Self {
        Self {
            ddt: DdtScheme::Euler,
            convection,
            n_outer_correctors: 1,
            pimple: false,
            n_correctors,
            momentum_predictor: true,
            momentum_final: momentum,
            relaxation_u: 1.0,
            relaxation_u_final: 1.0,
            relaxation_p: 1.0,
            relaxation_p_final: 1.0,
            outer_residual_control: None,
        }
    }

    /// What outer corrector `outer` (from 0) uses; the CPU and the device
    /// step both ask here.
    pub fn outer_corrector(&self, outer: usize) -> OuterCorrector {
        let final_outer = outer + 1 == self.n_outer_correctors;
        OuterCorrector {
            final_outer,
            alpha_u: if final_outer {
                self.relaxation_u_final
            } else {
                self.relaxation_u
            },
            alpha_p: if final_outer {
                self.relaxation_p_final
            } else {
                self.relaxation_p
            },
            // icoFoam has no UFinal: one outer corrector solves with U.
            final_momentum: final_outer && self.n_outer_correctors > 1,
        }
    }

    /// Whether the pressure solve that is the `last` of its corrector's
    /// non-orthogonal loop, in PISO corrector `corrector` (from 0), takes the
    /// `pFinal` solver: v1912's `finalInnerIter()`, the last solve of the
    /// last corrector of every outer corrector, not only of the last.
    pub fn final_pressure_solve(&self, corrector: usize, last: bool) -> bool {
        last && corrector + 1 == self.n_correctors
    }

    /// Whether `outerCorrectorResidualControl` ends the outer correctors
    /// after `corrector` (which is not the final one): every field's first
    /// initial residual of the corrector below its tolerance (0: not checked).
    pub fn outer_converged(&self, corrector: &OuterCorrector, u_max: f64, p_initial: f64) -> bool {
        match self.outer_residual_control {
            Some([u_tol, p_tol]) => {
                !corrector.final_outer
                    && (u_tol <= 0.0 || u_max < u_tol)
                    && (p_tol <= 0.0 || p_initial < p_tol)
            }
            None => false,
        }
    }

    fn validate(&self) -> Result<(), FlowError> {
        if self.n_outer_correctors == 0 || self.n_correctors == 0 {
            return Err(FlowError::invalid(format!(
                "nOuterCorrectors {} and nCorrectors {}: both must be at least 1",
                self.n_outer_correctors, self.n_correctors
            )));
        }
        for (name, alpha) in [
            ("U", self.relaxation_u),
            ("UFinal", self.relaxation_u_final),
            ("p", self.relaxation_p),
            ("pFinal", self.relaxation_p_final),
        ] {
            if !(alpha > 0.0 && alpha <= 1.0) {
                return Err(FlowError::invalid(format!(
                    "relaxation factor of {name} is {alpha}; it must be in (0, 1]"
                )));
            }
        }
        Ok(())
    }
}

/// The factors and solver of one outer corrector
/// ([`TransientSettings::outer_corrector`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OuterCorrector {
    /// The last outer corrector of the time step.
    pub final_outer: bool,
    /// Equation relaxation of U and field relaxation of p (`UFinal`,
    /// `pFinal` on the final outer corrector).
    pub alpha_u: f64,
    pub alpha_p: f64,
    /// The momentum predictor solves with `UFinal` (the final one of
    /// several outer correctors), else with `U`.
    pub final_momentum: bool,
}

/// Backward's coefficients (c, c⁰, c⁰⁰) of φ, φ⁰, φ⁰⁰ in dφ/dt ≈ (c φ −
/// c⁰ φ⁰ + c⁰⁰ φ⁰⁰)/Δt for the step `dt` after one of `old_dt`; Euler's (1,
/// 1, 0), also on a first backward step (`old_dt` `None`), as OpenFOAM
/// without an older time.
pub fn ddt_coefficients(scheme: DdtScheme, dt: f64, old_dt: Option<f64>) -> (f64, f64, f64) {
    match (scheme, old_dt) {
        (DdtScheme::Backward, Some(dt0)) => {
            let c = 1.0 + dt / (dt + dt0);
            let c00 = dt * dt / (dt0 * (dt + dt0));
            (c, c + c00, c00)
        }
        _ => (1.0, 1.0, 0.0),
    }
}

/// The largest initial residual of an outer corrector's momentum solves
/// (0 without any), what [`TransientSettings::outer_converged`] holds
/// against U's tolerance.
pub fn max_initial_residual(solves: &[(String, SolverPerformance)]) -> f64 {
    solves
        .iter()
        .map(|(_, r)| r.initial_residual)
        .fold(0.0, f64::max)
}

/// `Courant Number mean: … max: …`, as `CourantNo.H` logs it.
pub fn log_courant((mean, max): (f64, f64)) {
    log::info!(
        "Courant Number mean: {} max: {}",
        format_log(mean),
        format_log(max)
    );
}

/// pimpleFoam's `adjustTimeStep yes`: Δt from the Courant number
/// (`setInitialDeltaT.H`, `setDeltaT.H`) and, with `writeControl
/// adjustableRunTime`, fitted to land on the write times
/// (`Time::adjustDeltaT`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeStepControl {
    /// `maxCo` (default 1).
    pub max_co: f64,
    /// `maxDeltaT` (default: no limit).
    pub max_delta_t: f64,
    /// `writeControl adjustableRunTime`: the `writeInterval` (a time) that Δt
    /// is fitted to.
    pub fit_to_writes: Option<f64>,
}

impl TimeStepControl {
    /// Δt of the first step from the `deltaT` given and the Courant number
    /// `co_max` of the initial fluxes with it (unchanged for a fluid at rest).
    pub fn initial_delta_t(&self, dt: f64, co_max: f64, write_index: usize) -> f64 {
        if co_max > SMALL {
            let dt = (self.max_co * dt / co_max).min(dt.min(self.max_delta_t));
            self.fit(dt, 0.0, write_index)
        } else {
            dt
        }
    }

    /// Δt of the next step after one of `dt` whose fluxes give the Courant
    /// number `co_max`: grown by at most 20 % (and 10 % of the headroom),
    /// cut to reach `maxCo`, at most `maxDeltaT`, then fitted to the next
    /// write time; `since_start`: the time since the run's start,
    /// `write_index`: the write times passed since then.
    pub fn next_delta_t(&self, dt: f64, co_max: f64, since_start: f64, write_index: usize) -> f64 {
        let factor = self.max_co / (co_max + SMALL);
        let growth = factor.min(1.0 + 0.1 * factor).min(1.2);
        self.fit(
            (growth * dt).min(self.max_delta_t),
            since_start,
            write_index,
        )
    }

    /// `Time::adjustDeltaT`: the next write time reached in a whole number of
    /// steps (the nearest; at least one), Δt changed by at most 2× up and 5×
    /// down.
    fn fit(&self, dt: f64, since_start: f64, write_index: usize) -> f64 {
        let Some(interval) = self.fit_to_writes else {
            return dt;
        };
        let to_write = ((write_index + 1) as f64 * interval - since_start).max(0.0);
        let n_steps = to_write / dt;
        // OpenFOAM's labelMax (32-bit labels).
        if n_steps.is_nan() || n_steps >= i32::MAX as f64 {
            return dt;
        }
        let fitted = to_write / n_steps.round().max(1.0);
        if fitted >= dt {
            fitted.min(2.0 * dt)
        } else {
            fitted.max(0.2 * dt)
        }
    }
}

/// The write times passed `since_start` into a run writing every
/// `interval` (of time) after a step of `dt` (`Time::operator++`: the time
/// plus half a step, in whole intervals).
pub fn write_index(since_start: f64, dt: f64, interval: f64) -> usize {
    ((since_start + 0.5 * dt) / interval).floor().max(0.0) as usize
}

/// What one time step did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// Time steps done.
    pub step: usize,
    /// The time reached.
    pub time: f64,
    /// Courant number of the old fluxes: mean, max.
    pub courant: (f64, f64),
    /// The solve of each solved velocity component (`Ux`, ...) in the first
    /// outer corrector (none without momentum predictor).
    pub u_solves: Vec<(String, SolverPerformance)>,
    /// Every pressure solve of the step.
    pub p_solves: Vec<SolverPerformance>,
    /// Continuity errors of the last corrector: sum local, global, cumulative.
    pub continuity: [f64; 3],
    /// Outer correctors run.
    pub outer_correctors: usize,
}

/// Old-time fields.
#[derive(Clone, Debug)]
pub struct OldTime {
    pub u: Vec<Vec3>,
    pub phi: Vec<f64>,
    pub dt: f64,
}

/// A transient computation on one mesh.
pub struct Piso<'m> {
    /// Systems, the fields U, p, φ (see [`Simple`]).
    pub simple: Simple<'m>,
    settings: TransientSettings,
    momentum: MomentumSolver,
    /// Per boundary face: the velocity condition fixes the value (ddtCorr is
    /// zero there).
    fixes_value: Vec<bool>,
    /// The time step size of the next step.
    pub dt: f64,
    pub time: f64,
    /// Time steps done (restarts continue the count).
    pub step: usize,
    /// The fields of the time before the current one (backward's U⁰⁰, φ⁰⁰),
    /// `None` until a step was made or read.
    pub old: Option<OldTime>,
    momentum_seconds: f64,
}

impl<'m> Piso<'m> {
    /// U and p from `u`, `p` (per cell), φ from `phi` (every face) or else
    /// the flux of `u`; at `time` after `step` steps.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        settings: SimpleSettings,
        transient: TransientSettings,
        velocity: &[VelocityCondition],
        pressure: Vec<BoundaryCondition>,
        (u, p, phi): (Vec<Vec3>, Vec<f64>, Option<Vec<f64>>),
        dt: f64,
    ) -> Result<Self, FlowError> {
        transient.validate()?;
        if !(dt.is_finite() && dt > 0.0) {
            return Err(FlowError::invalid(format!(
                "time step {dt}: it must be a positive number"
            )));
        }
        let simple_settings = SimpleSettings {
            relaxation_u: 1.0,
            relaxation_p: 1.0,
            consistent: false,
            ..settings
        };
        let mut simple = Simple::new(mesh, geometry, simple_settings, velocity, pressure, u, p)?;
        if let Some(phi) = phi {
            if phi.len() != mesh.n_faces() {
                return Err(FlowError::invalid(format!(
                    "phi has {} values for {} faces",
                    phi.len(),
                    mesh.n_faces()
                )));
            }
            simple.phi = phi;
        }
        let mut fixes_value = vec![false; mesh.n_faces() - mesh.n_internal_faces()];
        let first = mesh.n_internal_faces();
        for (patch, condition) in mesh.patches().iter().zip(velocity) {
            if matches!(condition, VelocityCondition::FixedValue(_)) {
                fixes_value[patch.start - first..patch.start - first + patch.size].fill(true);
            }
        }
        Ok(Self {
            simple,
            settings: transient,
            momentum: settings.momentum,
            fixes_value,
            dt,
            time: 0.0,
            step: 0,
            old: None,
            momentum_seconds: 0.0,
        })
    }

    pub fn settings(&self) -> &TransientSettings {
        &self.settings
    }

    /// New values of the velocity conditions (same kind per patch), for the
    /// steps from now on: call it before a step with the values at the time
    /// the step reaches (OpenFOAM evaluates a time-dependent condition at
    /// the new time). The old fluxes keep the old boundary values.
    pub fn set_velocity_values(&mut self, velocity: &[VelocityCondition]) -> Result<(), FlowError> {
        self.simple.set_velocity_values(velocity)
    }

    /// `CourantNo.H`: (mean, max) for the current fluxes and Δt.
    pub fn courant(&self) -> (f64, f64) {
        let mesh = self.simple.mesh();
        let volumes = &self.simple.geometry().cell_volumes;
        let mut sum = vec![0.0; mesh.n_cells()];
        for (f, flux) in self.simple.phi.iter().enumerate() {
            sum[mesh.owner()[f] as usize] += flux.abs();
            if f < mesh.n_internal_faces() {
                sum[mesh.neighbour()[f] as usize] += flux.abs();
            }
        }
        let max = sum
            .iter()
            .zip(volumes)
            .map(|(s, v)| s / v)
            .fold(0.0, f64::max);
        let mean = sum.iter().sum::<f64>() / volumes.iter().sum::<f64>();
        (0.5 * mean * self.dt, 0.5 * max * self.dt)
    }

    /// [`ddt_coefficients`] of the next step.
    fn ddt_coefficients(&self) -> (f64, f64, f64) {
        ddt_coefficients(self.settings.ddt, self.dt, self.old.as_ref().map(|o| o.dt))
    }

    /// The momentum solver of the outer correctors that are not the final
    /// one of several (`U`).
    pub fn momentum_solver(&self) -> &MomentumSolver {
        &self.momentum
    }

    /// Per boundary face (index `face − n_internal_faces`): whether the
    /// velocity condition fixes the value (ddtCorr is zero there).
    pub fn fixes_value(&self) -> &[bool] {
        &self.fixes_value
    }

    /// Seconds spent in the momentum equations (assembly and solves) of the
    /// steps so far.
    pub fn momentum_seconds(&self) -> f64 {
        self.momentum_seconds
    }

    /// The momentum equation of solved component `k` (without the pressure
    /// gradient) around the current U, relaxed by `alpha`.
    fn momentum_equation(
        &mut self,
        k: usize,
        u_old: &[Vec3],
        alpha: f64,
    ) -> Result<(Csr, Vec<f64>), FlowError> {
        let c = self.simple.components()[k];
        let u_c: Vec<f64> = self.simple.u.iter().map(|u| u[c]).collect();
        let (coeff, coeff0, coeff00) = self.ddt_coefficients();
        let convection = self.settings.convection;
        self.simple.viscous_system_mut(k).update_rhs(&u_c, None)?;
        // Shared borrows from here: the fluxes and the face offsets are read
        // in place, not copied per component and step, and the offsets are
        // made only where a scheme reads them.
        let older = self.old.as_ref().map(|o| &o.u);
        let simple = &self.simple;
        let (mesh, geometry, phi) = (simple.mesh(), simple.geometry(), &simple.phi);
        let (system, _) = simple.viscous_system(k);
        let mut matrix = system.matrix.clone();
        let mut source = system.rhs.clone();
        let slots = system.slots();
        let bc = system.boundary_coeffs();
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let first = mesh.n_internal_faces();
        let r_dt = 1.0 / self.dt;
        let values = matrix.values_mut();
        for (i, v) in geometry.cell_volumes.iter().enumerate() {
            values[slots.diagonal[i] as usize] += coeff * r_dt * v;
            let older = older.map_or(0.0, |o| coeff00 * o[i][c]);
            source[i] += r_dt * v * (coeff0 * u_old[i][c] - older);
        }
        match convection.scheme {
            None => {
                for f in 0..first {
                    let (o, n, w, flux) = (
                        owner[f] as usize,
                        neighbour[f] as usize,
                        geometry.weights[f],
                        phi[f],
                    );
                    values[slots.diagonal[o] as usize] += w * flux;
                    values[slots.upper[f] as usize] += (1.0 - w) * flux;
                    values[slots.diagonal[n] as usize] -= (1.0 - w) * flux;
                    values[slots.lower[f] as usize] -= w * flux;
                }
                for b in (0..bc.active.len()).filter(|&b| bc.active[b]) {
                    let o = owner[first + b] as usize;
                    let flux = phi[first + b];
                    values[slots.diagonal[o] as usize] += flux * bc.value_internal[b];
                    source[o] -= flux * bc.value_boundary[b];
                }
                if convection.bounded {
                    add_flux_divergence(mesh, slots, phi, values, -1.0);
                }
            }
            Some(scheme) => {
                // The bounded form, and the deferred correction of the
                // higher-order schemes on the right-hand side.
                add_upwind_internal(mesh, slots, phi, values);
                add_upwind_boundary(mesh, slots, bc, phi, values, &mut source);
                if scheme != Convection::Upwind {
                    let grad = system.gradient(&u_c);
                    let field = (u_c.as_slice(), grad.as_slice());
                    add_deferred_correction(
                        mesh,
                        geometry,
                        scheme,
                        phi,
                        field,
                        simple.face_offsets(),
                        &mut source,
                    );
                }
                if !convection.bounded {
                    add_flux_divergence(mesh, slots, phi, values, 1.0);
                }
            }
        }
        if alpha < 1.0 {
            super::simple::relax(&mut matrix, &mut source, &u_c, &slots.diagonal, alpha);
        }
        Ok((matrix, source))
    }

    /// The Courant number ([`Self::courant`]), logged as `CourantNo.H` does.
    pub fn log_courant(&self) -> (f64, f64) {
        let courant = self.courant();
        log_courant(courant);
        courant
    }

    /// One time step (see the module documentation); `solve_pressure` is told
    /// which solve is the final one (`pFinal`).
    pub fn step(
        &mut self,
        solve_pressure: &mut PressureSolve<'_>,
    ) -> Result<StepReport, FlowError> {
        let courant = self.log_courant();
        self.advance(courant, solve_pressure)
    }

    /// [`Self::step`] after its Courant number `courant` was computed and
    /// logged (with the Δt of the step before, where `adjustTimeStep`
    /// changed Δt since).
    pub fn advance(
        &mut self,
        courant: (f64, f64),
        solve_pressure: &mut PressureSolve<'_>,
    ) -> Result<StepReport, FlowError> {
        if !(self.dt.is_finite() && self.dt > 0.0) {
            return Err(FlowError::invalid(format!(
                "time step {}: it must be a positive number",
                self.dt
            )));
        }
        let u_old = self.simple.u.clone();
        let phi_old = self.simple.phi.clone();
        let volumes = self.simple.geometry().cell_volumes.clone();
        let components = self.simple.components().to_vec();
        let n_outer = self.settings.n_outer_correctors;
        let mut u_solves = Vec::new();
        let mut p_solves = Vec::new();
        let mut continuity = [0.0; 3];
        let mut outer_done = 0;
        for outer in 0..n_outer {
            outer_done = outer + 1;
            let corrector_settings = self.settings.outer_corrector(outer);
            if self.settings.pimple || n_outer > 1 {
                log::info!("PIMPLE: iteration {}", outer + 1);
            }
            let momentum_clock = std::time::Instant::now();
            let alpha_u = corrector_settings.alpha_u;
            // pimpleFoam's laminar stress, explicit from the U this outer
            // corrector starts from (all components before any is solved).
            let stress = if self.simple.settings().explicit_stress {
                self.simple.explicit_stress()
            } else {
                Vec::new()
            };
            let mut equations = Vec::with_capacity(components.len());
            for (k, &c) in components.iter().enumerate() {
                let (matrix, mut source) = self.momentum_equation(k, &u_old, alpha_u)?;
                for (s, t) in source.iter_mut().zip(&stress) {
                    *s += t[c];
                }
                equations.push((matrix, source));
            }
            let mut residuals = Vec::new();
            if self.settings.momentum_predictor {
                let grad_p = self.simple.pressure_system().0.gradient(&self.simple.p);
                let solver = if corrector_settings.final_momentum {
                    self.settings.momentum_final
                } else {
                    self.momentum
                };
                for ((matrix, source), &c) in equations.iter().zip(&components) {
                    let b = momentum_rhs(source, &volumes, &grad_p, c);
                    residuals.push(solver.solve_component(
                        None,
                        matrix,
                        &b,
                        &mut self.simple.u,
                        c,
                    )?);
                }
            }
            self.momentum_seconds += momentum_clock.elapsed().as_secs_f64();
            // p of the outer corrector's start: every corrector relaxes
            // towards it (OpenFOAM stores p's previous iteration per outer
            // corrector and relaxes p before each momentum correction).
            let p_before = self.simple.p.clone();
            let alpha_p = corrector_settings.alpha_p;
            let first_p_solve = p_solves.len();
            let settings = self.settings;
            for corrector in 0..settings.n_correctors {
                let (r_au, hbya) = self.h_by_a(&equations);
                let mut phi_hbya = self.simple.face_flux(&hbya);
                self.add_ddt_correction(&mut phi_hbya, &r_au, &u_old, &phi_old);
                let mut solve = |a: &Csr, b: &[f64], x: &mut [f64], last: bool| {
                    solve_pressure(a, b, x, settings.final_pressure_solve(corrector, last))
                };
                let solves = self
                    .simple
                    .pressure_equation(&r_au, &phi_hbya, &mut solve)?;
                p_solves.extend(solves);
                continuity = self.continuity_errors();
                if alpha_p < 1.0 {
                    for (p, old) in self.simple.p.iter_mut().zip(&p_before) {
                        *p = old + alpha_p * (*p - old);
                    }
                }
                let grad_p = self.simple.pressure_system().0.gradient(&self.simple.p);
                correct_velocity(&mut self.simple.u, &components, &hbya, &r_au, &grad_p);
            }
            let p_initial = p_solves[first_p_solve].initial_residual;
            let u_max = max_initial_residual(&residuals);
            if outer == 0 {
                u_solves = residuals;
            }
            if self
                .settings
                .outer_converged(&corrector_settings, u_max, p_initial)
            {
                log::info!("PIMPLE: converged in {} iterations", outer + 1);
                break;
            }
        }
        self.old = Some(OldTime {
            u: u_old,
            phi: phi_old,
            dt: self.dt,
        });
        self.time += self.dt;
        self.step += 1;
        Ok(StepReport {
            step: self.step,
            time: self.time,
            courant,
            u_solves,
            p_solves,
            continuity,
            outer_correctors: outer_done,
        })
    }

    /// rAU = V/a_P and HbyA = H/a_P with the current U ([`Simple::h_by_a`]).
    fn h_by_a(&self, equations: &[(Csr, Vec<f64>)]) -> (Vec<f64>, Vec<Vec3>) {
        let (a_p, hbya) = self.simple.h_by_a(equations);
        let volumes = &self.simple.geometry().cell_volumes;
        let r_au = volumes.iter().zip(&a_p).map(|(v, a)| v / a).collect();
        (r_au, hbya)
    }

    /// φ_HbyA += (rAU)_f ddtCorr(U, φ) (see the module documentation).
    fn add_ddt_correction(
        &self,
        phi_hbya: &mut [f64],
        r_au: &[f64],
        u_old: &[Vec3],
        phi_old: &[f64],
    ) {
        let mesh = self.simple.mesh();
        let first = mesh.n_internal_faces();
        let weights = &self.simple.geometry().weights;
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let flux_old = self.simple.face_flux(u_old);
        let (_, c0, c00) = self.ddt_coefficients();
        // Backward: the correction of c⁰ φ⁰ − c⁰⁰ φ⁰⁰ against the flux of
        // c⁰ U⁰ − c⁰⁰ U⁰⁰; its coupling coefficient is that of the old level alone.
        let older = match (&self.old, c00 != 0.0) {
            (Some(old), true) => Some((self.simple.face_flux(&old.u), &old.phi)),
            _ => None,
        };
        let r_dt = 1.0 / self.dt;
        for f in 0..phi_hbya.len() {
            if f >= first && self.fixes_value[f - first] {
                continue;
            }
            let corr = phi_old[f] - flux_old[f];
            let coupling = 1.0 - (corr.abs() / (phi_old[f].abs() + SMALL)).min(1.0);
            let combined = match &older {
                Some((flux_older, phi_older)) => c0 * corr - c00 * (phi_older[f] - flux_older[f]),
                None => corr,
            };
            let r_au_f = if f < first {
                let w = weights[f];
                w * r_au[owner[f] as usize] + (1.0 - w) * r_au[neighbour[f] as usize]
            } else {
                r_au[owner[f] as usize]
            };
            phi_hbya[f] += r_au_f * coupling * r_dt * combined;
        }
    }

    /// `continuityErrs.H` of a transient solver: Δt Σ|∇·φ|V/ΣV, Δt Σ(∇·φ)V/ΣV,
    /// and the running sum of the latter; logged.
    fn continuity_errors(&mut self) -> [f64; 3] {
        let volumes = &self.simple.geometry().cell_volumes;
        let div = self.simple.flux_divergence();
        let total: f64 = volumes.iter().sum();
        let local = self.dt
            * div
                .iter()
                .zip(volumes)
                .map(|(d, v)| d.abs() * v)
                .sum::<f64>()
            / total;
        let global = self.dt * div.iter().zip(volumes).map(|(d, v)| d * v).sum::<f64>() / total;
        self.simple.record_continuity(local, global)
    }
}

/// Adds `sign` × (∇·φ)_P to the diagonal (the term the `bounded` form
/// subtracts, or adds back).
fn add_flux_divergence(
    mesh: &Mesh,
    slots: &crate::fvm::SlotMap,
    phi: &[f64],
    values: &mut [f64],
    sign: f64,
) {
    let first = mesh.n_internal_faces();
    for (f, flux) in phi.iter().enumerate() {
        values[slots.diagonal[mesh.owner()[f] as usize] as usize] += sign * flux;
        if f < first {
            values[slots.diagonal[mesh.neighbour()[f] as usize] as usize] -= sign * flux;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pimple(outer: usize, correctors: usize) -> TransientSettings {
        let convection = TransientConvection {
            scheme: None,
            bounded: false,
        };
        TransientSettings {
            n_outer_correctors: outer,
            relaxation_u: 0.7,
            relaxation_u_final: 0.9,
            relaxation_p: 0.3,
            relaxation_p_final: 0.8,
            ..TransientSettings::piso(correctors, convection, MomentumSolver::default())
        }
    }

    #[test]
    fn outer_correctors_relax_with_the_final_factors_only_on_the_last() {
        let s = pimple(3, 2);
        let first = s.outer_corrector(0);
        assert_eq!((first.alpha_u, first.alpha_p), (0.7, 0.3));
        assert!(!first.final_outer && !first.final_momentum);
        let last = s.outer_corrector(2);
        assert_eq!((last.alpha_u, last.alpha_p), (0.9, 0.8));
        assert!(last.final_outer && last.final_momentum);
        // PISO (one outer corrector): the final factors, but U's solver.
        let piso = pimple(1, 2).outer_corrector(0);
        assert!(piso.final_outer && !piso.final_momentum);
        assert_eq!(piso.alpha_u, 0.9);
    }

    #[test]
    fn pfinal_is_the_last_solve_of_the_last_corrector() {
        let s = pimple(2, 3);
        assert!(!s.final_pressure_solve(0, true));
        assert!(!s.final_pressure_solve(2, false));
        assert!(s.final_pressure_solve(2, true));
    }

    #[test]
    fn outer_residual_control_stops_before_the_final_corrector_only() {
        let mut s = pimple(3, 1);
        let first = s.outer_corrector(0);
        assert!(!s.outer_converged(&first, 0.0, 0.0), "no control set");
        s.outer_residual_control = Some([1e-3, 0.0]);
        assert!(s.outer_converged(&first, 5e-4, 1.0), "p not checked");
        assert!(!s.outer_converged(&first, 2e-3, 0.0));
        s.outer_residual_control = Some([1e-3, 1e-2]);
        assert!(!s.outer_converged(&first, 5e-4, 2e-2));
        assert!(s.outer_converged(&first, 5e-4, 5e-3));
        let last = s.outer_corrector(2);
        assert!(!s.outer_converged(&last, 0.0, 0.0));
    }

    #[test]
    #[allow(clippy::excessive_precision)] // pimpleFoam's log, as printed
    fn adjusted_time_steps_follow_pimple_foam() {
        // pimpleFoam v1912 on the cavity (maxCo 0.5, maxDeltaT 0.004,
        // adjustableRunTime every 0.05, deltaT 0.005): the first steps'
        // Courant numbers and the Δt it chose (tests/data/pimple_foam_adjust).
        let control = TimeStepControl {
            max_co: 0.5,
            max_delta_t: 0.004,
            fit_to_writes: Some(0.05),
        };
        assert_eq!(control.initial_delta_t(0.005, 0.0, 0), 0.005);
        let dt1 = control.next_delta_t(0.005, 0.0, 0.0, 0);
        assert!((dt1 - 0.0038461538461538464).abs() < 1e-18, "{dt1}");
        let dt2 = control.next_delta_t(dt1, 0.42645187759586101, dt1, 0);
        assert!((dt2 - 0.0038461538461538464).abs() < 1e-17, "{dt2}");
        let t2 = dt1 + dt2;
        let dt3 = control.next_delta_t(dt2, 0.56035204125180971, t2, 0);
        assert!((dt3 - 0.0035256410256410257).abs() < 1e-17, "{dt3}");
        let t3 = t2 + dt3;
        let dt4 = control.next_delta_t(dt3, 0.54895777930599587, t3, 0);
        assert!((dt4 - 0.0032318376068376071).abs() < 1e-16, "{dt4}");
        let t4 = t3 + dt4;
        let dt5 = control.next_delta_t(dt4, 0.51773977834996909, t4, 0);
        let t5 = t4 + dt5;
        // 10.5 steps to the write: rounded to 11, Δt cut (not 10, grown).
        let dt6 = control.next_delta_t(dt5, 0.52630193698439842, t5, 0);
        assert!((dt6 - 0.0029380341880341884).abs() < 1e-16, "{dt6}");
        // Without a write to fit: the Courant limit and maxDeltaT only.
        let free = TimeStepControl {
            fit_to_writes: None,
            ..control
        };
        assert_eq!(free.next_delta_t(0.001, 0.0, 0.0, 0), 0.0012);
        assert_eq!(free.next_delta_t(0.0039, 0.1, 0.0, 0), 0.004);
        assert!((free.next_delta_t(0.001, 1.0, 0.0, 0) - 0.0005).abs() < 1e-18);
        // Write times passed: within half a step of the write time.
        assert_eq!(write_index(0.0499999, 0.003, 0.05), 1);
        assert_eq!(write_index(0.048, 0.003, 0.05), 0);
    }

    #[test]
    fn backward_coefficients_fall_back_to_euler_without_an_older_time() {
        assert_eq!(
            ddt_coefficients(DdtScheme::Backward, 0.1, None),
            (1.0, 1.0, 0.0)
        );
        assert_eq!(
            ddt_coefficients(DdtScheme::Euler, 0.1, Some(0.1)),
            (1.0, 1.0, 0.0)
        );
        // Equal steps: 3/2, 2, 1/2.
        let (c, c0, c00) = ddt_coefficients(DdtScheme::Backward, 0.1, Some(0.1));
        assert!((c - 1.5).abs() < 1e-15 && (c0 - 2.0).abs() < 1e-15 && (c00 - 0.5).abs() < 1e-15);
        // Exact for a quadratic in time on unequal steps: f = t², t = 0, 0.2, 0.3.
        let (dt, dt0) = (0.1, 0.2);
        let (c, c0, c00) = ddt_coefficients(DdtScheme::Backward, dt, Some(dt0));
        let derivative = (c * 0.09 - c0 * 0.04 + c00 * 0.0) / dt;
        assert!((derivative - 0.6).abs() < 1e-12, "{derivative}");
    }
}
