//! The SIMPLE loop of OpenFOAM v1912's simpleFoam (`UEqn.H`, `pEqn.H`) for
//! steady incompressible laminar flow, ν constant, kinematic pressure.
//!
//! One outer iteration ([`Simple::iterate`]):
//! 1. **Momentum predictor**: per solved component, the viscous
//!    [`LaplacianSystem`] (ν, that component's boundary conditions, explicit
//!    non-orthogonal correction) plus `bounded Gauss` convection with the
//!    fluxes φ of the last iteration (upwind implicit; linearUpwind or
//!    limitedLinear as a deferred correction on the right-hand side), the
//!    explicit laminar stress ∇·(ν dev2((∇U)ᵀ)) of the last iteration's U on
//!    the right-hand side ([`Simple::explicit_stress`]), relaxed
//!    the way `fvMatrix::relax(α_U)` does (Patankar's implicit
//!    under-relaxation: D ← max(|D|, Σ|a_off|)/α, b += (D_new − D_old) U_old),
//!    solved with −∇p (Gauss linear, p's conditions) on the right-hand side.
//! 2. **Rhie–Chow**: rAU = V/a_P (a_P the diagonal averaged over the
//!    components, as `fvVectorMatrix::A()`), HbyA = H/a_P with the new U,
//!    φ_HbyA = (linear HbyA)_f·S_f, with the velocity's boundary values on
//!    fixed-value patches (`constrainHbyA`). SIMPLEC (`consistent`,
//!    Van Doormaal & Raithby 1984): rAtU = V/(a_P − Σ_nb |a_nb|),
//!    φ_HbyA += (rAtU − rAU)_f |S_f| snGrad p (with the snGrad scheme's
//!    non-orthogonal correction), HbyA −= (rAU − rAtU)∇p, rAU ← rAtU.
//! 3. **Pressure**: −∇·(rAU∇p) = −∇·φ_HbyA, a [`LaplacianSystem`] with
//!    Γ = rAU per cell (linear to the faces), `nNonOrthogonalCorrectors + 1`
//!    solves; all-Neumann pressure takes OpenFOAM's `setReference(pRefCell,
//!    pRefValue)`.
//! 4. **Corrections**: φ = φ_HbyA − the pressure equation's face flux (the
//!    non-orthogonal part from the p the last corrector assembled with, as
//!    `fvMatrix::flux`), continuity errors as `continuityErrs.H`, p relaxed
//!    by α_p, U = HbyA − rAU ∇p.

use super::{component_conditions, solved_components, FlowError, VelocityCondition};
use crate::foam::write::format_log;
use crate::fvm::convection::{add_upwind_boundary, add_upwind_internal};
use crate::fvm::{
    BoundaryCondition, CellField, FvmError, GammaInterpolation, LaplacianProblem, LaplacianSystem,
    ProblemValues, Reference, Schemes, SingularPolicy,
};
use crate::mesh::{Geometry, Mesh, Vec3};
use crate::solve::{
    solve_krylov, solve_smooth, KrylovMethod, Preconditioner, SmootherSettings, SolveError,
    SolverControls, SolverPerformance,
};
use crate::sparse::Csr;
use rayon::prelude::*;
use std::time::Instant;

/// Convection scheme of `div(phi,U)`, always in OpenFOAM's `bounded` form
/// (the term −(∇·φ) U is subtracted, as steady solvers are told to).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Convection {
    /// `bounded Gauss upwind`.
    Upwind,
    /// `bounded Gauss linearUpwind grad(U)`: the upwind cell's value
    /// extrapolated to the face with its gradient.
    LinearUpwind,
    /// `bounded Gauss limitedLinear k` (0 ≤ k ≤ 1): linear interpolation
    /// limited towards upwind by ψ(r) = max(min(2r/k, 1), 0),
    /// r = 2 d·∇φ_C/(φ_D − φ_C) − 1 (OpenFOAM's `NVDTVD::r`), per component.
    LimitedLinear(f64),
}

impl Convection {
    /// Parses an OpenFOAM `div(phi,U)` entry such as `bounded Gauss
    /// linearUpwind grad(U)` (`bounded` optional: it is always applied).
    pub fn from_foam(text: &str) -> Result<Self, FlowError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let words = match words.as_slice() {
            ["bounded", rest @ ..] => rest,
            all => all,
        };
        match words {
            ["Gauss", "upwind", ..] => Ok(Self::Upwind),
            ["Gauss", "linearUpwind", ..] => Ok(Self::LinearUpwind),
            ["Gauss", "limitedLinear" | "limitedLinearV", k] => {
                let k: f64 = k.parse().map_err(|_| {
                    FlowError::invalid(format!(
                        "convection scheme '{text}': limitedLinear coefficient '{k}' is not a number"
                    ))
                })?;
                if !(0.0..=1.0).contains(&k) {
                    return Err(FlowError::invalid(format!(
                        "convection scheme '{text}': the limitedLinear coefficient must be \
                         between 0 and 1"
                    )));
                }
                Ok(Self::LimitedLinear(k))
            }
            _ => Err(FlowError::invalid(format!(
                "convection scheme '{text}' is not supported (expected 'bounded Gauss upwind', \
                 'bounded Gauss linearUpwind grad(U)' or 'bounded Gauss limitedLinear K')"
            ))),
        }
    }

    /// φ_f − φ_upwind on an internal face (the deferred correction), from the
    /// owner and neighbour values and gradients; `flux` ≥ 0 means the owner is upwind.
    pub(crate) fn correction(
        self,
        flux: f64,
        weight: f64,
        (value_o, value_n): (f64, f64),
        (grad_o, grad_n): (&Vec3, &Vec3),
        (to_face_o, to_face_n): (&Vec3, &Vec3),
        delta: &Vec3,
    ) -> f64 {
        let upwind_owner = flux >= 0.0;
        match self {
            Self::Upwind => 0.0,
            Self::LinearUpwind => {
                if upwind_owner {
                    grad_o.dot(to_face_o)
                } else {
                    grad_n.dot(to_face_n)
                }
            }
            Self::LimitedLinear(k) => {
                let jump = value_n - value_o;
                let along = if upwind_owner {
                    delta.dot(grad_o)
                } else {
                    delta.dot(grad_n)
                };
                // OpenFOAM's NVDTVD::r, its guard against a vanishing jump included.
                let r = if along.abs() >= 1000.0 * jump.abs() {
                    2.0 * 1000.0 * along.signum() * jump.signum() - 1.0
                } else {
                    2.0 * along / jump - 1.0
                };
                let limiter = (2.0 / k.max(f64::EPSILON) * r).clamp(0.0, 1.0);
                let linear = weight * value_o + (1.0 - weight) * value_n;
                let upwind = if upwind_owner { value_o } else { value_n };
                limiter * (linear - upwind)
            }
        }
    }
}

/// simpleFoam's `residualControl`: converged when the first initial residual
/// of the iteration is below these for every field (0: not checked).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct ResidualControl {
    /// Largest over the velocity components.
    pub u: f64,
    pub p: f64,
}

/// The momentum predictor's solver: OpenFOAM's smoothSolver (the momentum
/// matrix is not symmetric; Gauss–Seidel needs only its diagonal dominance),
/// or GMRES / PBiCGStab (`solve::krylov`) with `preconditioner`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MomentumSolver {
    pub smoother: SmootherSettings,
    pub controls: SolverControls,
    /// `Some`: this Krylov method instead of smoothSolver.
    pub krylov: Option<KrylovMethod>,
    /// The Krylov method's preconditioner.
    pub preconditioner: Preconditioner,
}

/// A momentum solve run outside the loop (on the GPU): matrix, right-hand
/// side, the current component (overwritten with the solution), field name.
pub type MomentumSolve<'s> =
    dyn FnMut(&Csr, &[f64], &mut [f64], &str) -> Result<SolverPerformance, SolveError> + 's;

impl MomentumSolver {
    /// Solves component `c` of the momentum equation, `matrix` with the
    /// right-hand side `b`, for `u` from its current values: by `outside`
    /// where given (a solve run outside the loop), else by this solver.
    /// Returns the field's name (`Ux`, `Uy`, `Uz`) and the solve's
    /// performance.
    pub(super) fn solve_component(
        &self,
        outside: Option<&mut MomentumSolve<'_>>,
        matrix: &Csr,
        b: &[f64],
        u: &mut [Vec3],
        c: usize,
    ) -> Result<(String, SolverPerformance), FlowError> {
        let mut u_c: Vec<f64> = u.iter().map(|u| u[c]).collect();
        let field = format!("U{}", ["x", "y", "z"][c]);
        let solving = crate::timings::enter(crate::timings::Phase::Solve);
        let perf = match (outside, &self.krylov) {
            (Some(solve), _) => solve(matrix, b, &mut u_c, &field),
            (None, Some(method)) => solve_krylov(
                matrix,
                method,
                self.preconditioner,
                b,
                &mut u_c,
                &self.controls,
                &field,
            ),
            (None, None) => {
                solve_smooth(matrix, &self.smoother, b, &mut u_c, &self.controls, &field)
            }
        }
        .map_err(|e| e.solving(&field))?;
        drop(solving);
        for (u, x) in u.iter_mut().zip(&u_c) {
            u[c] = *x;
        }
        Ok((field, perf))
    }
}

/// The velocity correction U = HbyA − rAU ∇p, of the solved `components`.
pub(super) fn correct_velocity(
    u: &mut [Vec3],
    components: &[usize],
    hbya: &[Vec3],
    r_au: &[f64],
    grad_p: &[Vec3],
) {
    for i in 0..u.len() {
        for &c in components {
            u[i][c] = hbya[i][c] - r_au[i] * grad_p[i][c];
        }
    }
}

/// The right-hand side of component `c`'s momentum solve: the equation's
/// `source` less the pressure gradient's part, V ∂p/∂x_c per cell.
pub(super) fn momentum_rhs(source: &[f64], volumes: &[f64], grad_p: &[Vec3], c: usize) -> Vec<f64> {
    (0..source.len())
        .map(|i| source[i] - volumes[i] * grad_p[i][c])
        .collect()
}

impl Default for MomentumSolver {
    /// The cavity tutorial's `smoothSolver; smoother symGaussSeidel;
    /// tolerance 1e-5; relTol 0.1;`.
    fn default() -> Self {
        Self {
            smoother: SmootherSettings::new(crate::solve::SmootherKind::GaussSeidel(
                crate::solve::Sweep::Symmetric,
            )),
            controls: SolverControls {
                tolerance: 1e-5,
                rel_tol: 0.1,
                max_iter: 1000,
                min_iter: 0,
            },
            krylov: None,
            preconditioner: crate::solve::PreconditionerKind::Jacobi.into(),
        }
    }
}

/// Everything the SIMPLE loop needs besides mesh, boundary conditions and
/// the pressure solver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimpleSettings {
    /// Kinematic viscosity ν (`transportProperties`).
    pub nu: f64,
    pub convection: Convection,
    /// snGrad and gradient schemes of the viscous and pressure Laplacians
    /// (their Γ is interpolated linearly, as `Gauss linear corrected`).
    pub schemes: Schemes,
    pub n_non_orth_correctors: usize,
    /// SIMPLEC.
    pub consistent: bool,
    /// α_U (`relaxationFactors { equations { U } }`), 0 < α_U ≤ 1.
    pub relaxation_u: f64,
    /// α_p (`relaxationFactors { fields { p } }`), 0 < α_p ≤ 1.
    pub relaxation_p: f64,
    pub residual_control: ResidualControl,
    /// `pRefCell`, `pRefValue`: the pressure level where no patch fixes it.
    pub p_ref_cell: usize,
    pub p_ref_value: f64,
    pub momentum: MomentumSolver,
    /// The explicit part of the laminar stress, −∇·(ν dev2((∇U)ᵀ)), in the
    /// momentum equation (simpleFoam's `divDevReff`). It vanishes for
    /// constant ν and ∇·U = 0 in the continuum but not discretely: without
    /// it the lid-corner cells of a cavity differ from simpleFoam by ~5 %.
    pub explicit_stress: bool,
}

impl SimpleSettings {
    /// simpleFoam's defaults for a fluid of viscosity `nu`: linearUpwind,
    /// α_U = 0.7, α_p = 0.3, SIMPLE, no residual control.
    pub fn new(nu: f64) -> Self {
        Self {
            nu,
            convection: Convection::LinearUpwind,
            schemes: Schemes {
                gamma_interpolation: GammaInterpolation::Linear,
                ..Schemes::default()
            },
            n_non_orth_correctors: 0,
            consistent: false,
            relaxation_u: 0.7,
            relaxation_p: 0.3,
            residual_control: ResidualControl::default(),
            p_ref_cell: 0,
            p_ref_value: 0.0,
            momentum: MomentumSolver::default(),
            explicit_stress: true,
        }
    }

    /// Takes the snGrad and gradient schemes of `schemes` (a case's
    /// `laplacianSchemes`, `snGradSchemes` and `gradSchemes`); Γ keeps its
    /// linear interpolation.
    pub fn set_schemes(&mut self, schemes: Schemes) {
        self.schemes = Schemes {
            gamma_interpolation: self.schemes.gamma_interpolation,
            ..schemes
        };
    }

    fn validate(&self, n_cells: usize) -> Result<(), FlowError> {
        if !(self.nu.is_finite() && self.nu > 0.0) {
            return Err(FlowError::invalid(format!(
                "viscosity nu is {}; it must be finite and positive",
                self.nu
            )));
        }
        for (name, alpha) in [("U", self.relaxation_u), ("p", self.relaxation_p)] {
            if !(alpha > 0.0 && alpha <= 1.0) {
                return Err(FlowError::invalid(format!(
                    "relaxation factor of {name} is {alpha}; it must be in (0, 1]"
                )));
            }
        }
        if self.consistent && self.relaxation_u >= 1.0 {
            return Err(FlowError::invalid(
                "SIMPLEC (consistent) needs a velocity relaxation factor below 1: \
                 rAtU = V/(a_P − Σ|a_nb|) is infinite without relaxation",
            ));
        }
        check_reference("p", (self.p_ref_cell, self.p_ref_value), n_cells)
    }
}

/// An error unless the reference `(cell, value)` of `field` (`pRefCell`,
/// `pRefValue`; `PhiRefCell`, ...) names one of the `n_cells` cells and a
/// finite value.
pub(crate) fn check_reference(
    field: &str,
    (cell, value): (usize, f64),
    n_cells: usize,
) -> Result<(), FlowError> {
    if cell >= n_cells || !value.is_finite() {
        return Err(FlowError::invalid(format!(
            "{field}RefCell {cell} with {field}RefValue {value}: the cell must be below {n_cells} \
             and the value finite"
        )));
    }
    Ok(())
}

/// The steady problem ∇·∇x = q (Γ = 1; the source is set per solve) with
/// `conditions`, the level fixed at the reference `(cell, value)` where no
/// patch fixes it: the pressure equation's (and the potential's).
pub(crate) fn referenced_poisson(
    conditions: Vec<BoundaryCondition>,
    (cell, value): (usize, f64),
) -> LaplacianProblem {
    LaplacianProblem {
        singular: SingularPolicy {
            reference: Reference::Cell { cell, value },
            ..SingularPolicy::default()
        },
        ..LaplacianProblem::steady(CellField::Uniform(1.0), CellField::Uniform(0.0), conditions)
    }
}

/// What one outer iteration did.
#[derive(Clone, Debug, PartialEq)]
pub struct IterationReport {
    pub iteration: usize,
    /// Initial residual of each solved velocity component (`Ux`, ...).
    pub u_initial: Vec<(String, f64)>,
    /// Initial residual of the first pressure solve.
    pub p_initial: f64,
    /// Every pressure solve of the iteration (one per corrector).
    pub p_solves: Vec<SolverPerformance>,
    /// `time step continuity errors`: sum local, global, cumulative.
    pub continuity: [f64; 3],
    /// Whether the residual control is met.
    pub converged: bool,
}

impl IterationReport {
    /// The largest initial residual of the velocity components.
    pub fn u_max(&self) -> f64 {
        self.u_initial.iter().map(|(_, r)| *r).fold(0.0, f64::max)
    }
}

/// The momentum predictor's and Rhie–Chow's results ([`Simple::predict`]),
/// what the pressure equation starts from.
#[derive(Clone, Debug)]
pub struct Predicted {
    /// Initial residual of each solved velocity component.
    pub u_initial: Vec<(String, f64)>,
    /// HbyA per cell.
    pub hbya: Vec<Vec3>,
    /// rAU (SIMPLEC: rAtU) per cell, the pressure equation's Γ.
    pub r_au: Vec<f64>,
    /// φ_HbyA on every face (0 on empty faces).
    pub phi_hbya: Vec<f64>,
}

/// Wall time of the outer iterations so far, by part (seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseSeconds {
    /// Momentum assembly and solves.
    pub momentum: f64,
    /// rAU, HbyA and the Rhie–Chow face flux.
    pub fluxes: f64,
    /// Pressure assembly and solves (all correctors), flux correction.
    pub pressure: f64,
    /// Continuity errors, pressure relaxation, velocity correction.
    pub corrections: f64,
}

impl PhaseSeconds {
    pub fn total(&self) -> f64 {
        self.momentum + self.fluxes + self.pressure + self.corrections
    }
}

/// The wall time of an iteration's parts, lap by lap.
struct Stopwatch(Instant);

impl Stopwatch {
    fn start() -> Self {
        Self(Instant::now())
    }

    /// Adds the time since the last lap (or the start) to `part` (of
    /// [`PhaseSeconds`]).
    fn lap(&mut self, part: &mut f64) {
        *part += self.0.elapsed().as_secs_f64();
        self.0 = Instant::now();
    }
}

/// A pressure solve: matrix, right-hand side, the current p (the initial
/// guess, overwritten with the solution), whether this is the iteration's
/// last corrector (OpenFOAM's `pFinal` solver).
pub type PressureSolve<'s> =
    dyn FnMut(&Csr, &[f64], &mut [f64], bool) -> Result<SolverPerformance, SolveError> + 's;

/// The state of a SIMPLE computation on one mesh.
pub struct Simple<'m> {
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    settings: SimpleSettings,
    /// The velocity components solved for (the one normal to a 2-D mesh's
    /// empty patches stays zero).
    components: Vec<usize>,
    /// The viscous system of each solved component.
    viscous: Vec<LaplacianSystem<'m>>,
    /// Their problems (ν, the component's conditions).
    viscous_problems: Vec<LaplacianProblem>,
    pressure: LaplacianSystem<'m>,
    pressure_problem: LaplacianProblem,
    /// Face centre minus owner centre, and minus neighbour centre, of every
    /// internal face (linearUpwind on the host), computed on first use: a
    /// device loop computes its own in device order.
    to_face: std::sync::OnceLock<Vec<(Vec3, Vec3)>>,
    /// Cell velocities.
    pub u: Vec<Vec3>,
    /// Cell pressures (kinematic).
    pub p: Vec<f64>,
    /// Face fluxes φ of every face (0 on empty faces), owner to neighbour
    /// on internal faces, outward on boundary faces.
    pub phi: Vec<f64>,
    cumulative_continuity: f64,
    iteration: usize,
    seconds: PhaseSeconds,
    /// Replaces the momentum solver of the settings (`set_momentum_solve`).
    momentum_solve: Option<Box<MomentumSolve<'m>>>,
}

impl<'m> Simple<'m> {
    /// Sets up the systems; U and p start from `u` and `p` (per cell), φ from
    /// the linear interpolate of `u` and the boundary velocities.
    pub fn new(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        settings: SimpleSettings,
        velocity: &[VelocityCondition],
        pressure: Vec<BoundaryCondition>,
        u: Vec<Vec3>,
        p: Vec<f64>,
    ) -> Result<Self, FlowError> {
        let n = mesh.n_cells();
        settings.validate(n)?;
        if u.len() != n || p.len() != n {
            return Err(FlowError::invalid(format!(
                "initial fields have {} velocities and {} pressures for {n} cells",
                u.len(),
                p.len()
            )));
        }
        let components = solved_components(mesh, geometry)?;
        // The momentum matrix is never singular (convection and relaxation add
        // to its diagonal), so the Laplacian's all-Neumann check must not fire.
        let never_singular = SingularPolicy {
            tolerance: f64::INFINITY,
            ..SingularPolicy::default()
        };
        // The systems share the mesh and schemes: the first builds the
        // pattern and face geometry, the others share them. Their matrices
        // are assembled on the first host use (the momentum predictor and
        // pressure equation on the host): a device loop that assembles and
        // solves every equation itself never has the host assemble them.
        let mut viscous: Vec<LaplacianSystem> = Vec::with_capacity(components.len());
        let mut viscous_problems = Vec::with_capacity(components.len());
        for &c in &components {
            let mut problem = LaplacianProblem::steady(
                CellField::Uniform(settings.nu),
                CellField::Uniform(0.0),
                component_conditions(velocity, mesh, geometry, c)?,
            );
            problem.singular = never_singular;
            let system = match viscous.first() {
                Some(first) => first.deferred_with_structure_of(&problem)?,
                None => LaplacianSystem::deferred(mesh, geometry, settings.schemes, &problem)?,
            };
            viscous.push(system);
            viscous_problems.push(problem);
        }
        let pressure_problem =
            referenced_poisson(pressure, (settings.p_ref_cell, settings.p_ref_value));
        let pressure = match viscous.first() {
            Some(first) => first.deferred_with_structure_of(&pressure_problem)?,
            None => LaplacianSystem::deferred(mesh, geometry, settings.schemes, &pressure_problem)?,
        };
        let mut simple = Self {
            mesh,
            geometry,
            settings,
            components,
            viscous,
            viscous_problems,
            pressure,
            pressure_problem,
            to_face: std::sync::OnceLock::new(),
            u,
            p,
            phi: Vec::new(),
            cumulative_continuity: 0.0,
            iteration: 0,
            seconds: PhaseSeconds::default(),
            momentum_solve: None,
        };
        simple.phi = simple.face_flux(&simple.u);
        Ok(simple)
    }

    /// Replaces the velocity conditions by `velocity`, of the same kind per
    /// patch as before (new values only: a time-dependent wall or inlet
    /// velocity), and re-assembles the viscous systems with them; the face
    /// fluxes keep their values until the next corrector computes them.
    pub fn set_velocity_values(&mut self, velocity: &[VelocityCondition]) -> Result<(), FlowError> {
        for (k, &c) in self.components.iter().enumerate() {
            let conditions = component_conditions(velocity, self.mesh, self.geometry, c)?;
            let problem = &mut self.viscous_problems[k];
            for ((old, new), patch) in problem
                .boundary
                .iter()
                .zip(&conditions)
                .zip(self.mesh.patches())
            {
                if std::mem::discriminant(old) != std::mem::discriminant(new) {
                    return Err(FlowError::invalid(format!(
                        "patch '{}': the velocity condition changes from {} to {}; only its \
                         values may change during a run",
                        patch.name,
                        old.foam_name(),
                        new.foam_name()
                    )));
                }
            }
            problem.boundary = conditions;
            self.viscous[k].reassemble(problem)?;
        }
        Ok(())
    }

    /// Solves the momentum equations with `solve` (e.g. on the GPU) instead
    /// of the settings' CPU solver.
    pub fn set_momentum_solve(&mut self, solve: Box<MomentumSolve<'m>>) {
        self.momentum_solve = Some(solve);
    }

    pub fn settings(&self) -> &SimpleSettings {
        &self.settings
    }
    pub fn mesh(&self) -> &'m Mesh {
        self.mesh
    }
    pub fn geometry(&self) -> &'m Geometry {
        self.geometry
    }
    /// Outer iterations done.
    pub fn iteration(&self) -> usize {
        self.iteration
    }
    /// Wall time of the outer iterations done, by part.
    pub fn phase_seconds(&self) -> PhaseSeconds {
        self.seconds
    }
    /// The velocity components solved for (0 = x).
    pub fn components(&self) -> &[usize] {
        &self.components
    }

    /// The pressure equation's system and problem (Γ and source of the last
    /// assembly): the device SIMPLE loop builds its system from them.
    pub fn pressure_system(&self) -> (&LaplacianSystem<'m>, &LaplacianProblem) {
        (&self.pressure, &self.pressure_problem)
    }

    /// The viscous system and problem of solved component `k` (of
    /// [`Self::components`]).
    pub fn viscous_system(&self, k: usize) -> (&LaplacianSystem<'m>, &LaplacianProblem) {
        (&self.viscous[k], &self.viscous_problems[k])
    }

    /// The pressure problem's values for the device's first assembly: those
    /// the deferred pressure system kept from its check (taken, so the
    /// problem is not evaluated again), else evaluated
    /// ([`LaplacianSystem::take_or_evaluate`]).
    pub fn take_pressure_values(&mut self) -> Result<ProblemValues, FvmError> {
        self.pressure.take_or_evaluate(&self.pressure_problem)
    }

    /// [`Self::take_pressure_values`] of the viscous system of solved
    /// component `k`.
    pub fn take_viscous_values(&mut self, k: usize) -> Result<ProblemValues, FvmError> {
        self.viscous[k].take_or_evaluate(&self.viscous_problems[k])
    }

    /// The viscous system of solved component `k`, to update its right-hand
    /// side (the transient loop assembles its own momentum equation on it).
    pub(crate) fn viscous_system_mut(&mut self, k: usize) -> &mut LaplacianSystem<'m> {
        &mut self.viscous[k]
    }

    /// Face centre minus owner centre and minus neighbour centre of every
    /// internal face (linearUpwind).
    pub fn face_offsets(&self) -> &[(Vec3, Vec3)] {
        self.to_face.get_or_init(|| {
            (0..self.mesh.n_internal_faces())
                .into_par_iter()
                .map(|f| face_offsets(self.mesh, self.geometry, f))
                .collect()
        })
    }

    /// Adds time spent outside [`Self::iterate`] (the device loop).
    pub(crate) fn add_seconds(&mut self, seconds: PhaseSeconds) {
        self.seconds.momentum += seconds.momentum;
        self.seconds.fluxes += seconds.fluxes;
        self.seconds.pressure += seconds.pressure;
        self.seconds.corrections += seconds.corrections;
    }

    /// Counts a new outer iteration done outside [`Self::iterate`] (the
    /// device loop, momentum included).
    pub(crate) fn begin_iteration(&mut self) {
        self.iteration += 1;
    }

    /// Velocity on every boundary face (index `face − n_internal_faces`; 0
    /// on empty faces): the conditions' face values.
    pub fn boundary_velocity(&self) -> Vec<Vec3> {
        self.boundary_values(&self.u)
    }

    /// Pressure on every boundary face (0 on empty faces).
    pub fn boundary_pressure(&self) -> Vec<f64> {
        self.pressure
            .boundary_coeffs()
            .face_values(self.mesh, &self.p)
    }

    /// ∇·φ per cell (the flux divergence per volume, `fvc::div(phi)`).
    pub fn flux_divergence(&self) -> Vec<f64> {
        self.divergence(&self.phi)
            .iter()
            .zip(&self.geometry.cell_volumes)
            .map(|(d, v)| d / v)
            .collect()
    }

    /// Face values of a cell vector field on the boundary faces by the
    /// velocity conditions (value = valueInternal·x_P + valueBoundary per component).
    pub fn boundary_values(&self, x: &[Vec3]) -> Vec<Vec3> {
        let mesh = self.mesh;
        let first = mesh.n_internal_faces();
        let mut out = vec![Vec3::zeros(); mesh.n_faces() - first];
        for (system, &c) in self.viscous.iter().zip(&self.components) {
            let bc = system.boundary_coeffs();
            for (b, v) in out.iter_mut().enumerate() {
                if bc.active[b] {
                    let o = mesh.owner()[first + b] as usize;
                    v[c] = bc.value_internal[b] * x[o][c] + bc.value_boundary[b];
                }
            }
        }
        out
    }

    /// (x_f)·S_f on every face: x linearly interpolated inside, the
    /// velocity conditions' face values on the boundary.
    pub(crate) fn face_flux(&self, x: &[Vec3]) -> Vec<f64> {
        let mesh = self.mesh;
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let sf = &self.geometry.face_area_vectors;
        let first = mesh.n_internal_faces();
        let mut flux: Vec<f64> = (0..first)
            .into_par_iter()
            .map(|f| {
                let w = self.geometry.weights[f];
                let face = w * x[owner[f] as usize] + (1.0 - w) * x[neighbour[f] as usize];
                face.dot(&sf[f])
            })
            .collect();
        flux.extend(
            self.boundary_values(x)
                .iter()
                .zip(&sf[first..])
                .map(|(v, s)| v.dot(s)),
        );
        flux
    }

    /// Σ_f φ_f out of every cell ([`divergence`]).
    fn divergence(&self, phi: &[f64]) -> Vec<f64> {
        divergence(self.mesh, phi)
    }

    /// ∫∇·(ν dev2((∇U)ᵀ)) dV of every cell, as OpenFOAM's `fvc::div` with
    /// `Gauss linear` of the tensor field computes it: Σ_f S_f·X_f with
    /// X = ν dev2((∇U)ᵀ), linearly interpolated on internal faces. ∇U is the
    /// velocity's cell gradient (the `grad(U)` scheme, boundary face values
    /// from the conditions); on a boundary face it is the owner's gradient
    /// with its normal part replaced by the face's snGrad, n(snGrad U −
    /// n·∇U_P) added (`gaussGrad::correctBoundaryConditions`). With ∇U_ij =
    /// ∂_i U_j, S·X = ν (∇U S − ⅔ tr(∇U) S).
    pub fn explicit_stress(&self) -> Vec<Vec3> {
        use nalgebra::Matrix3;
        let mesh = self.mesh;
        let geometry = self.geometry;
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let first = mesh.n_internal_faces();
        let n_boundary = mesh.n_faces() - first;
        let nu = self.settings.nu;
        // Column c of ∇U is the gradient of component c; unsolved components are 0.
        let mut grad = vec![Matrix3::<f64>::zeros(); mesh.n_cells()];
        // snGrad of every component on every boundary face.
        let mut sn_grad = vec![Vec3::zeros(); n_boundary];
        for (system, &c) in self.viscous.iter().zip(&self.components) {
            let u_c: Vec<f64> = self.u.iter().map(|u| u[c]).collect();
            for (g, gc) in grad.iter_mut().zip(system.gradient(&u_c)) {
                g.set_column(c, &gc);
            }
            let bc = system.boundary_coeffs();
            for (b, sn) in sn_grad.iter_mut().enumerate() {
                let o = owner[first + b] as usize;
                sn[c] = bc.gradient_internal[b] * u_c[o] + bc.gradient_boundary[b];
            }
        }
        let face_stress =
            |g: &Matrix3<f64>, s: &Vec3| -> Vec3 { nu * (g * s - (2.0 / 3.0) * g.trace() * s) };
        let sf = &geometry.face_area_vectors;
        let mut total = vec![Vec3::zeros(); mesh.n_cells()];
        for f in 0..first {
            let (o, nb) = (owner[f] as usize, neighbour[f] as usize);
            let w = geometry.weights[f];
            let g = w * grad[o] + (1.0 - w) * grad[nb];
            let flux = face_stress(&g, &sf[f]);
            total[o] += flux;
            total[nb] -= flux;
        }
        let active = &self.viscous[0].boundary_coeffs().active;
        for (b, sn) in sn_grad.iter().enumerate().filter(|(b, _)| active[*b]) {
            let s = &sf[first + b];
            let normal = s / s.norm();
            let o = owner[first + b] as usize;
            let g = grad[o] + normal * (sn - grad[o].transpose() * normal).transpose();
            total[o] += face_stress(&g, s);
        }
        total
    }

    /// The relaxed momentum equation of solved component `k` (without the
    /// pressure gradient): matrix and right-hand side.
    fn momentum_equation(&mut self, k: usize, u_c: &[f64]) -> Result<(Csr, Vec<f64>), FlowError> {
        let mesh = self.mesh;
        let system = &mut self.viscous[k];
        system.update_rhs(u_c, None)?;
        let system = &self.viscous[k];
        let mut matrix = system.matrix.clone();
        let mut source = system.rhs.clone();
        let slots = system.slots();
        let bc = system.boundary_coeffs();
        let gradient = match self.settings.convection {
            Convection::Upwind => None,
            _ => Some(system.gradient(u_c)),
        };
        let values = matrix.values_mut();
        // Upwind, and the bounded form's −(∇·φ) U_P (`fvm::convection`).
        add_upwind_internal(mesh, slots, &self.phi, values);
        if let Some(grad) = &gradient {
            add_deferred_correction(
                mesh,
                self.geometry,
                self.settings.convection,
                &self.phi,
                (u_c, grad),
                self.face_offsets(),
                &mut source,
            );
        }
        // F_b (valueInternal U_P + valueBoundary) − F_b U_P.
        add_upwind_boundary(mesh, slots, bc, &self.phi, values, &mut source);
        relax(
            &mut matrix,
            &mut source,
            u_c,
            &slots.diagonal,
            self.settings.relaxation_u,
        );
        Ok((matrix, source))
    }

    /// One SIMPLE outer iteration (see the module documentation).
    pub fn iterate(
        &mut self,
        solve_pressure: &mut PressureSolve<'_>,
    ) -> Result<IterationReport, FlowError> {
        let Predicted {
            u_initial,
            hbya,
            r_au,
            phi_hbya,
        } = self.predict()?;
        let components = self.components.clone();
        let mut stopwatch = Stopwatch::start();

        // 3. The pressure equation; 4. flux, continuity errors, pressure
        // relaxation, velocity.
        let p_old = self.p.clone();
        let p_solves = self.pressure_equation(&r_au, &phi_hbya, solve_pressure)?;
        stopwatch.lap(&mut self.seconds.pressure);
        let continuity = self.continuity_errors();
        let alpha_p = self.settings.relaxation_p;
        for (p, old) in self.p.iter_mut().zip(&p_old) {
            *p = old + alpha_p * (*p - old);
        }
        let grad_p = self.pressure.gradient(&self.p);
        correct_velocity(&mut self.u, &components, &hbya, &r_au, &grad_p);
        stopwatch.lap(&mut self.seconds.corrections);
        Ok(self.report(u_initial, p_solves, continuity))
    }

    /// The report of the iteration just done, with the residual control checked.
    pub(crate) fn report(
        &self,
        u_initial: Vec<(String, f64)>,
        p_solves: Vec<SolverPerformance>,
        continuity: [f64; 3],
    ) -> IterationReport {
        let control = self.settings.residual_control;
        let p_initial = p_solves[0].initial_residual;
        let mut report = IterationReport {
            iteration: self.iteration,
            u_initial,
            p_initial,
            p_solves,
            continuity,
            converged: false,
        };
        report.converged = (control.u > 0.0 || control.p > 0.0)
            && (control.u <= 0.0 || report.u_max() < control.u)
            && (control.p <= 0.0 || p_initial < control.p);
        report
    }

    /// a_P, the momentum diagonal averaged over the solved components (as
    /// `fvVectorMatrix::A()` times V), and HbyA = H/a_P per cell with the
    /// current U, from each component's equation (matrix and right-hand side
    /// without the pressure gradient).
    pub(crate) fn h_by_a(&self, equations: &[(Csr, Vec<f64>)]) -> (Vec<f64>, Vec<Vec3>) {
        let n = self.mesh.n_cells();
        let diagonal = &self.viscous[0].slots().diagonal;
        let a_p: Vec<f64> = (0..n)
            .into_par_iter()
            .map(|i| {
                equations
                    .iter()
                    .map(|(m, _)| m.values()[diagonal[i] as usize])
                    .sum::<f64>()
                    / equations.len() as f64
            })
            .collect();
        // Cells in parallel, each component's row as the serial loop sums it.
        let (u, components) = (&self.u, &self.components);
        let mut hbya = vec![Vec3::zeros(); n];
        hbya.par_iter_mut().enumerate().for_each(|(i, h)| {
            for ((matrix, source), &c) in equations.iter().zip(components) {
                let (cols, values) = matrix.row(i);
                let mut sum = source[i];
                for (&j, &a) in cols.iter().zip(values) {
                    let j = j as usize;
                    // The component's own diagonal beyond the average a_P
                    // moves to H, so that a_P U_P = H − V∇p holds per component.
                    let a = if j == i { a - a_p[i] } else { a };
                    sum -= a * u[j][c];
                }
                h[c] = sum / a_p[i];
            }
        });
        (a_p, hbya)
    }

    /// Steps 1 and 2 of a new outer iteration (counted): the momentum
    /// predictor (U updated) and rAU, HbyA, φ_HbyA, timed as momentum and fluxes.
    pub fn predict(&mut self) -> Result<Predicted, FlowError> {
        self.iteration += 1;
        let mesh = self.mesh;
        let geometry = self.geometry;
        let n = mesh.n_cells();
        let first = mesh.n_internal_faces();
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let volumes = &geometry.cell_volumes;
        let components = self.components.clone();
        let mut stopwatch = Stopwatch::start();

        // 1. Momentum predictor, its explicit stress from the U of the last
        // iteration (all components, before any is solved).
        let grad_p = self.pressure.gradient(&self.p);
        let stress = if self.settings.explicit_stress {
            self.explicit_stress()
        } else {
            Vec::new()
        };
        let mut equations = Vec::with_capacity(components.len());
        let mut u_initial = Vec::with_capacity(components.len());
        for (k, &c) in components.iter().enumerate() {
            let u_c: Vec<f64> = self.u.iter().map(|u| u[c]).collect();
            let (matrix, mut source) = self.momentum_equation(k, &u_c)?;
            for (s, t) in source.iter_mut().zip(&stress) {
                *s += t[c];
            }
            let b = momentum_rhs(&source, volumes, &grad_p, c);
            let (field, perf) = self.settings.momentum.solve_component(
                self.momentum_solve.as_deref_mut(),
                &matrix,
                &b,
                &mut self.u,
                c,
            )?;
            u_initial.push((field, perf.initial_residual));
            equations.push((matrix, source));
        }
        stopwatch.lap(&mut self.seconds.momentum);

        // 2. rAU, HbyA and the Rhie–Chow flux φ_HbyA.
        let (a_p, mut hbya) = self.h_by_a(&equations);
        let mut r_au: Vec<f64> = volumes.iter().zip(&a_p).map(|(v, a)| v / a).collect();
        let mut phi_hbya = self.face_flux(&hbya);
        if self.settings.consistent {
            let (matrix, _) = &equations[0];
            let r_atu: Vec<f64> = (0..n)
                .map(|i| {
                    let off = off_diagonal_sum(matrix, i, |a| a);
                    // Off-diagonals are −a_nb: a_P − Σ a_nb = a_P + Σ off.
                    volumes[i] / (a_p[i] + off)
                })
                .collect();
            let faces = self.pressure.face_geometry();
            let mag_sf = &faces.mag_sf;
            // fvc::snGrad(p): the orthogonal part and, for corrected
            // schemes, the explicit non-orthogonal part.
            let sn_grad_correction = self.pressure.sn_grad_correction(&self.p, &grad_p);
            for f in 0..first {
                let (o, nb) = (owner[f] as usize, neighbour[f] as usize);
                let w = geometry.weights[f];
                let diff = w * (r_atu[o] - r_au[o]) + (1.0 - w) * (r_atu[nb] - r_au[nb]);
                let sn_grad = faces.delta_coeffs[f] * (self.p[nb] - self.p[o])
                    + sn_grad_correction.get(f).copied().unwrap_or(0.0);
                phi_hbya[f] += diff * mag_sf[f] * sn_grad;
            }
            let bc = self.pressure.boundary_coeffs();
            for b in (0..bc.active.len()).filter(|&b| bc.active[b]) {
                let o = owner[first + b] as usize;
                let sn_grad = bc.gradient_internal[b] * self.p[o] + bc.gradient_boundary[b];
                phi_hbya[first + b] += (r_atu[o] - r_au[o]) * mag_sf[first + b] * sn_grad;
            }
            for i in 0..n {
                hbya[i] -= (r_au[i] - r_atu[i]) * grad_p[i];
            }
            r_au = r_atu;
        }
        stopwatch.lap(&mut self.seconds.fluxes);
        Ok(Predicted {
            u_initial,
            hbya,
            r_au,
            phi_hbya,
        })
    }

    /// −∇·(Γ∇p) = −∇·φ_pre into p and φ ([`flux_poisson`]).
    pub(crate) fn pressure_equation(
        &mut self,
        gamma: &[f64],
        phi_pre: &[f64],
        solve_pressure: &mut PressureSolve<'_>,
    ) -> Result<Vec<SolverPerformance>, FlowError> {
        let (solves, phi) = flux_poisson(
            &mut self.pressure,
            &mut self.pressure_problem,
            FluxPoisson {
                gamma,
                phi_pre,
                n_correctors: self.settings.n_non_orth_correctors,
                field: "p",
            },
            &mut self.p,
            solve_pressure,
        )?;
        self.phi = phi;
        Ok(solves)
    }

    /// potentialFoam: φ = flux of the initial U (with its boundary values),
    /// then ∇²Φ = ∇·φ for the potential Φ (held in p, with p's boundary
    /// conditions: fixed where p is fixed, else zero-gradient, reference cell
    /// where no patch fixes it), φ −= ∇Φ·S, U = `fvc::reconstruct(φ)`.
    /// Reported as one iteration with the Φ solves as its p solves.
    pub fn potential_flow(
        &mut self,
        solve_potential: &mut PressureSolve<'_>,
    ) -> Result<IterationReport, FlowError> {
        self.iteration += 1;
        let phi = self.face_flux(&self.u);
        let unit = vec![1.0; self.mesh.n_cells()];
        let p_solves = self.pressure_equation(&unit, &phi, solve_potential)?;
        let continuity = self.continuity_errors();
        self.u = self.reconstruct(&self.phi);
        Ok(IterationReport {
            iteration: self.iteration,
            u_initial: Vec::new(),
            p_initial: p_solves[0].initial_residual,
            p_solves,
            continuity,
            converged: true,
        })
    }

    /// `fvc::reconstruct(φ)` ([`reconstruct`]).
    fn reconstruct(&self, phi: &[f64]) -> Vec<Vec3> {
        let active = &self.pressure.boundary_coeffs().active;
        reconstruct(self.mesh, self.geometry, &self.components, active, phi)
    }

    /// `continuityErrs.H`: Σ|∇·φ|V/ΣV, Σ(∇·φ)V/ΣV and the running sum of the
    /// latter (the time step is 1 in a steady run); logged.
    fn continuity_errors(&mut self) -> [f64; 3] {
        let div = self.divergence(&self.phi);
        let total: f64 = self.geometry.cell_volumes.iter().sum();
        let local = div.iter().map(|d| d.abs()).sum::<f64>() / total;
        let global = div.iter().sum::<f64>() / total;
        self.record_continuity(local, global)
    }

    /// Adds `global` to the cumulative continuity error and logs the three
    /// as `continuityErrs.H` does.
    pub(crate) fn record_continuity(&mut self, local: f64, global: f64) -> [f64; 3] {
        self.cumulative_continuity += global;
        log::info!(
            "time step continuity errors : sum local = {}, global = {}, cumulative = {}",
            format_log(local),
            format_log(global),
            format_log(self.cumulative_continuity)
        );
        [local, global, self.cumulative_continuity]
    }

    /// Outer iterations (each logged as simpleFoam's `Time = N`) until the
    /// residual control is met or `max_iterations` are done; the reports of
    /// all of them.
    pub fn run(
        &mut self,
        max_iterations: usize,
        solve_pressure: &mut PressureSolve<'_>,
        mut after_each: impl FnMut(&Self, &IterationReport) -> Result<(), FlowError>,
    ) -> Result<Vec<IterationReport>, FlowError> {
        let mut reports = Vec::new();
        for _ in 0..max_iterations {
            log::info!("Time = {}", self.iteration + 1);
            let report = self.iterate(solve_pressure)?;
            after_each(self, &report)?;
            let converged = report.converged;
            reports.push(report);
            if converged {
                log::info!("SIMPLE solution converged in {} iterations", self.iteration);
                break;
            }
        }
        Ok(reports)
    }
}

/// Adds the deferred correction of the higher-order `scheme` on the
/// internal faces (flux times its face value less upwind's) to the
/// momentum right-hand side `source` of component values and gradients
/// `field`, `to_face` as [`Simple::face_offsets`] gives them: the term
/// SIMPLE and PISO share.
pub(crate) fn add_deferred_correction(
    mesh: &Mesh,
    geometry: &Geometry,
    scheme: Convection,
    phi: &[f64],
    (u_c, grad): (&[f64], &[Vec3]),
    to_face: &[(Vec3, Vec3)],
    source: &mut [f64],
) {
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let centres = &geometry.cell_centres;
    for f in 0..mesh.n_internal_faces() {
        let (o, n) = (owner[f] as usize, neighbour[f] as usize);
        let (to_o, to_n) = &to_face[f];
        let correction = scheme.correction(
            phi[f],
            geometry.weights[f],
            (u_c[o], u_c[n]),
            (&grad[o], &grad[n]),
            (to_o, to_n),
            &(centres[n] - centres[o]),
        );
        source[o] -= phi[f] * correction;
        source[n] += phi[f] * correction;
    }
}

/// Face centre minus owner centre and minus neighbour centre of internal
/// face `f` (linearUpwind's extrapolation from either side).
pub fn face_offsets(mesh: &Mesh, geometry: &Geometry, f: usize) -> (Vec3, Vec3) {
    let centre = geometry.face_centre(mesh, f);
    let cells = &geometry.cell_centres;
    (
        centre - cells[mesh.owner()[f] as usize],
        centre - cells[mesh.neighbour()[f] as usize],
    )
}

/// Σ f(a_ij) over row i's off-diagonal entries, in stored order.
fn off_diagonal_sum(matrix: &Csr, i: usize, f: impl Fn(f64) -> f64) -> f64 {
    let (cols, values) = matrix.row(i);
    cols.iter()
        .zip(values)
        .filter(|(&j, _)| j as usize != i)
        .map(|(_, &a)| f(a))
        .sum()
}

/// `fvMatrix::relax(α)`: the diagonal made at least the sum of the
/// off-diagonal magnitudes, divided by α, and the change times the current
/// x added to the right-hand side (Patankar's implicit under-relaxation).
pub(crate) fn relax(matrix: &mut Csr, source: &mut [f64], x: &[f64], diagonal: &[u32], alpha: f64) {
    let relaxed: Vec<f64> = (0..matrix.n_rows())
        .map(|i| {
            let off = off_diagonal_sum(matrix, i, f64::abs);
            let d = matrix.values()[diagonal[i] as usize];
            d.abs().max(off) / alpha
        })
        .collect();
    let values = matrix.values_mut();
    for (i, d) in relaxed.into_iter().enumerate() {
        let slot = diagonal[i] as usize;
        source[i] += (d - values[slot]) * x[i];
        values[slot] = d;
    }
}

/// Σ_f φ_f out of every cell (`fvc::div(φ)` times the volume).
pub fn divergence(mesh: &Mesh, phi: &[f64]) -> Vec<f64> {
    let mut div = vec![0.0; mesh.n_cells()];
    for (f, &flux) in phi.iter().enumerate() {
        div[mesh.owner()[f] as usize] += flux;
        if f < mesh.n_internal_faces() {
            div[mesh.neighbour()[f] as usize] -= flux;
        }
    }
    div
}

/// `fvc::reconstruct(φ)`: per cell the velocity whose face fluxes fit φ in
/// least squares, (Σ_f S_f S_fᵀ/|S_f|)⁻¹ Σ_f S_f φ_f/|S_f| over its internal
/// faces and the boundary faces `active` marks (not empty ones); the
/// components not in `components` (normal to a 2-D mesh) stay 0.
pub fn reconstruct(
    mesh: &Mesh,
    geometry: &Geometry,
    components: &[usize],
    active: &[bool],
    phi: &[f64],
) -> Vec<Vec3> {
    let n = mesh.n_cells();
    let first = mesh.n_internal_faces();
    let mut tensor = vec![nalgebra::Matrix3::<f64>::zeros(); n];
    let mut sum = vec![Vec3::zeros(); n];
    for (f, &flux) in phi.iter().enumerate() {
        if f >= first && !active[f - first] {
            continue;
        }
        let s = geometry.face_area_vectors[f];
        let mag = s.norm();
        // S φ and S Sᵀ are the same seen from either side of the face.
        let (t, v) = (s * s.transpose() / mag, s * flux / mag);
        let o = mesh.owner()[f] as usize;
        tensor[o] += t;
        sum[o] += v;
        if f < first {
            let nb = mesh.neighbour()[f] as usize;
            tensor[nb] += t;
            sum[nb] += v;
        }
    }
    tensor
        .into_iter()
        .zip(sum)
        .map(|(mut t, v)| {
            for c in (0..3).filter(|c| !components.contains(c)) {
                t[(c, c)] = 1.0;
            }
            t.lu().solve(&v).unwrap_or_else(Vec3::zeros)
        })
        .collect()
}

/// The data of one [`flux_poisson`] solve.
pub(crate) struct FluxPoisson<'a> {
    /// Γ per cell (linear to the faces).
    pub gamma: &'a [f64],
    /// The flux whose divergence is the source, on every face.
    pub phi_pre: &'a [f64],
    /// Non-orthogonal correctors (solves − 1).
    pub n_correctors: usize,
    /// The field's name in errors.
    pub field: &'a str,
}

/// −∇·(Γ∇x) = −∇·φ_pre on `system` (re-assembled from `problem` with Γ and
/// the source), `n_correctors + 1` solves into x from the x given, then the
/// conservative flux φ = φ_pre − the equation's face flux Γ_f|S_f|(snGrad x)
/// (its non-orthogonal part from the x of the last assembly, as
/// `fvMatrix::flux`; 0 on empty faces). The pressure equation of SIMPLE and
/// potentialFoam's `Phi` equation. Returns the solves and φ.
pub(crate) fn flux_poisson(
    system: &mut LaplacianSystem<'_>,
    problem: &mut LaplacianProblem,
    data: FluxPoisson<'_>,
    x: &mut [f64],
    solve: &mut PressureSolve<'_>,
) -> Result<(Vec<SolverPerformance>, Vec<f64>), FlowError> {
    let FluxPoisson {
        gamma,
        phi_pre,
        n_correctors,
        field,
    } = data;
    let mesh = system.mesh();
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let first = mesh.n_internal_faces();
    let volumes = &system.geometry().cell_volumes;
    let div = divergence(mesh, phi_pre);
    problem.gamma = CellField::PerCell(gamma.to_vec());
    problem.source = CellField::PerCell(div.iter().zip(volumes).map(|(d, v)| -d / v).collect());
    system.reassemble(problem)?;
    let mut solves = Vec::with_capacity(n_correctors + 1);
    let mut correction = Vec::new();
    for corrector in 0..=n_correctors {
        system.update_rhs(x, None)?;
        let last = corrector == n_correctors;
        if last {
            correction = system.non_orth_correction(x);
        }
        let perf = solve(&system.matrix, &system.rhs, x, last).map_err(|e| e.solving(field))?;
        solves.push(perf);
    }
    let faces = system.face_geometry();
    let gamma_mag_sf = system.gamma_mag_sf();
    let mut phi = vec![0.0; phi_pre.len()];
    for f in 0..first {
        let (o, nb) = (owner[f] as usize, neighbour[f] as usize);
        let implicit = gamma_mag_sf[f] * faces.delta_coeffs[f] * (x[nb] - x[o]);
        phi[f] = phi_pre[f] - implicit - correction.get(f).copied().unwrap_or(0.0);
    }
    let bc = system.boundary_coeffs();
    for b in (0..bc.active.len()).filter(|&b| bc.active[b]) {
        let o = owner[first + b] as usize;
        let sn_grad = bc.gradient_internal[b] * x[o] + bc.gradient_boundary[b];
        phi[first + b] = phi_pre[first + b] - gamma[o] * faces.mag_sf[first + b] * sn_grad;
    }
    Ok((solves, phi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_outside_the_mesh_or_not_finite_is_refused_naming_the_field() {
        let e = check_reference("p", (5, 0.0), 5).unwrap_err().to_string();
        assert!(
            e.contains(
                "pRefCell 5 with pRefValue 0: the cell must be below 5 and the value finite"
            ),
            "{e}"
        );
        let e = check_reference("Phi", (0, f64::NAN), 5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("PhiRefCell 0 with PhiRefValue NaN"), "{e}");
        assert!(check_reference("p", (4, -1.0), 5).is_ok());
        let problem = referenced_poisson(vec![], (4, -1.0));
        assert_eq!(
            problem.singular.reference,
            Reference::Cell {
                cell: 4,
                value: -1.0
            }
        );
    }

    #[test]
    fn the_equations_share_one_structure_and_assemble_on_their_first_host_use() {
        let mesh = crate::mesh::load("box:6x5x4").unwrap();
        let geometry = mesh.geometry().unwrap();
        let mut simple =
            crate::flow::testing::lid_driven_cavity(&mesh, &geometry, SimpleSettings::new(0.01));
        let (pressure, _) = simple.pressure_system();
        assert!(!pressure.is_assembled());
        for k in 0..simple.components().len() {
            let (viscous, _) = simple.viscous_system(k);
            assert!(!viscous.is_assembled());
            assert!(viscous.matrix.shares_pattern_with(&pressure.matrix));
            assert!(std::ptr::eq(
                viscous.face_geometry(),
                pressure.face_geometry()
            ));
        }
        // The boundary velocities are there before any assembly.
        assert!(simple.boundary_velocity().iter().any(|u| u.x == 1.0));
        let mut solve = |a: &Csr, b: &[f64], x: &mut [f64], _last: bool| {
            crate::solve::solve_pcg(
                a,
                crate::solve::PreconditionerKind::Jacobi,
                b,
                x,
                &SolverControls::default(),
                "p",
            )
        };
        simple.iterate(&mut solve).unwrap();
        assert!(simple.pressure_system().0.is_assembled());
        assert!((0..simple.components().len()).all(|k| simple.viscous_system(k).0.is_assembled()));
    }
}
