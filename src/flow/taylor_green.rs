//! The Taylor–Green vortex: verification of the transient solver
//! ([`super::piso`], icoFoam's PISO) against an exact solution of the
//! Navier–Stokes equations (`fvpoisson validate-transient`).
//!
//! On [0, 2π]² with viscosity ν,
//!
//! ```text
//! u = −cos x sin y e^(−2νt),  v = sin x cos y e^(−2νt),
//! p = −(cos 2x + cos 2y)/4 e^(−4νt)
//! ```
//!
//! solves the incompressible equations exactly (u·∇u = −∇p, the time
//! derivative balances the viscous term), and the kinetic energy decays as
//! e^(−4νt). The code has no cyclic patches, so the box's walls take the exact
//! velocity of the time each step reaches as `fixedValue` (time-dependent
//! Dirichlet values, [`super::piso::Piso::set_velocity_values`]); the exact
//! pressure has zero normal gradient on these walls, so p is `zeroGradient`
//! and fixed by a reference cell, and p is compared after the volume mean of
//! both sides is subtracted. On tetrahedra the box is two hex layers deep in
//! z; its z walls take the exact (z-independent) velocity with w = 0.
//!
//! The run starts from the exact U and p at the cell centres, φ the linear
//! interpolate of U (as icoFoam starts from a `0/U`), and makes
//! `round(end_time/Δt)` steps of icoFoam's PISO (2 correctors, `Gauss
//! linear` convection, `Gauss linear corrected` Laplacians, one
//! non-orthogonal corrector on tetrahedra), with every linear solve converged
//! to 1e-12 so that only the discretisation is measured.
//!
//! Measured at the end time:
//! - `U L2` = sqrt(Σ V |U − U_exact|² / Σ V) at the cell centres, `p L2` the
//!   same for p (means removed), both divided by the exact field's L2 norm;
//! - the kinetic-energy decay rate −ln(E(T)/E(0))/T, E = ½ Σ V |U|², against
//!   the exact 4ν.
//!
//! Orders: spatial, between successive meshes with Δt ∝ h (backward), from
//! the errors against the exact solution: p = ln(e₁/e₂)/ln(h₁/h₂),
//! h = (Σ V / N)^(1/d) (d = 2 on the 2-D hex mesh, 3 on tets). Temporal, on
//! one mesh with Δt halved: the error against the run with the smallest Δt
//! on the same mesh (so that the fixed spatial error does not mask the
//! temporal one; relative discrete L2 over the cells), p = log2(e(Δt)/e(Δt/2)).
//!
//! What the measurements show (tables in `docs/src/validation.md`): U is
//! second order in space on hexahedra; p is first order, because with
//! `zeroGradient` walls the Gauss gradient of a wall cell takes p_b = p_P
//! (an O(h) error in its normal component, an O(1) error in the wall cells'
//! pressure equation, so an O(h) error in p). On a fixed mesh the solution
//! does not converge as Δt → 0: icoFoam's ddtCorr flux term depends on Δt at
//! the size of the spatial error, so the temporal self-convergence of both
//! schemes stalls at about a quarter of the spatial error; backward's error
//! at the largest step is half of Euler's.

use super::piso::{DdtScheme, Piso, TransientConvection, TransientSettings};
use super::simple::{MomentumSolver, SimpleSettings};
use super::{FlowError, VectorValues, VelocityCondition};
use crate::fvm::{BoundaryCondition, ErrorNorms, GradScheme, Schemes, SnGradScheme};
use crate::mesh::generate::BoxSpec;
use crate::mesh::{Geometry, Mesh, PatchKind, Vec3};
use crate::solve::{solve_pcg, KrylovMethod, PreconditionerKind, SolverControls};
use std::f64::consts::PI;
use std::fmt;

/// The mesh of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TaylorGreenMesh {
    /// n × n hexahedra, one layer with empty front and back (2-D).
    Hex,
    /// n × n × 2 hexahedra, each cut into 6 tetrahedra, interior points moved
    /// by `perturb` (the box generator's option).
    Tet { perturb: f64 },
}

impl TaylorGreenMesh {
    pub fn name(&self) -> String {
        match self {
            Self::Hex => "hex 2-D".into(),
            Self::Tet { perturb } if *perturb > 0.0 => format!("tet perturb={perturb}"),
            Self::Tet { .. } => "tet".into(),
        }
    }

    /// The box of `n` cells per side over [0, 2π]² (z: one or two cells).
    pub fn spec(&self, n: usize) -> BoxSpec {
        let h = 2.0 * PI / n as f64;
        match *self {
            Self::Hex => BoxSpec {
                size: [2.0 * PI, 2.0 * PI, h],
                two_d: true,
                ..BoxSpec::new([n, n, 1])
            },
            Self::Tet { perturb } => BoxSpec {
                size: [2.0 * PI, 2.0 * PI, 2.0 * h],
                tet: true,
                perturb,
                ..BoxSpec::new([n, n, 2])
            },
        }
    }

    /// Dimension of h (cells per volume): 2 on the 2-D mesh, 3 on tets.
    fn dimension(&self) -> i32 {
        match self {
            Self::Hex => 2,
            Self::Tet { .. } => 3,
        }
    }
}

/// One run: mesh, cells per side, viscosity, time scheme and step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaylorGreen {
    pub mesh: TaylorGreenMesh,
    /// Cells (hexes before the tet split) along x and y.
    pub n: usize,
    pub nu: f64,
    pub ddt: DdtScheme,
    pub dt: f64,
    pub end_time: f64,
}

/// The exact velocity at `x`, time `t`.
pub fn exact_velocity(x: &Vec3, t: f64, nu: f64) -> Vec3 {
    let decay = (-2.0 * nu * t).exp();
    Vec3::new(
        -x.x.cos() * x.y.sin() * decay,
        x.x.sin() * x.y.cos() * decay,
        0.0,
    )
}

/// The exact kinematic pressure at `x`, time `t`.
pub fn exact_pressure(x: &Vec3, t: f64, nu: f64) -> f64 {
    -((2.0 * x.x).cos() + (2.0 * x.y).cos()) / 4.0 * (-4.0 * nu * t).exp()
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct TaylorGreenResult {
    pub run: TaylorGreen,
    pub cells: usize,
    /// (Σ V / N)^(1/d).
    pub h: f64,
    pub steps: usize,
    /// Largest Courant number over the run.
    pub courant: f64,
    /// Relative L2 errors at the end time (see the module documentation).
    pub u_error: f64,
    pub p_error: f64,
    /// −ln(E(T)/E(0))/T, and the exact 4ν.
    pub decay_rate: f64,
    pub exact_decay_rate: f64,
    /// The fields at the end time.
    pub u: Vec<Vec3>,
    pub p: Vec<f64>,
}

impl TaylorGreenResult {
    /// |decay rate − 4ν| / 4ν.
    pub fn decay_rate_error(&self) -> f64 {
        (self.decay_rate - self.exact_decay_rate).abs() / self.exact_decay_rate
    }
}

/// Kinetic energy ½ Σ V |U|².
fn kinetic_energy(u: &[Vec3], volumes: &[f64]) -> f64 {
    0.5 * u
        .iter()
        .zip(volumes)
        .map(|(u, v)| v * u.norm_squared())
        .sum::<f64>()
}

/// sqrt(Σ V x² / Σ V) of per-cell values ([`ErrorNorms`]).
fn l2(x: impl Iterator<Item = f64>, volumes: &[f64]) -> f64 {
    ErrorNorms::new(&x.collect::<Vec<_>>(), volumes).l2
}

/// The volume mean.
fn mean(x: &[f64], volumes: &[f64]) -> f64 {
    x.iter().zip(volumes).map(|(x, v)| x * v).sum::<f64>() / volumes.iter().sum::<f64>()
}

/// Every solve converged to an absolute 1e-12 (normalised residual).
fn tight() -> SolverControls {
    SolverControls {
        tolerance: 1e-12,
        rel_tol: 0.0,
        max_iter: 5000,
        min_iter: 0,
    }
}

/// The exact velocity on every non-empty patch at time `t`, as
/// fixed values per face.
fn wall_velocity(mesh: &Mesh, geometry: &Geometry, t: f64, nu: f64) -> Vec<VelocityCondition> {
    mesh.patches()
        .iter()
        .map(|patch| match patch.kind {
            PatchKind::Empty => VelocityCondition::Empty,
            _ => VelocityCondition::FixedValue(VectorValues::PerFace(
                patch
                    .faces()
                    .map(|f| exact_velocity(&geometry.face_centre(mesh, f), t, nu))
                    .collect(),
            )),
        })
        .collect()
}

impl TaylorGreen {
    pub fn run(&self) -> Result<TaylorGreenResult, FlowError> {
        if !(self.dt > 0.0 && self.end_time >= self.dt && self.nu > 0.0 && self.n >= 2) {
            return Err(FlowError::invalid(format!(
                "Taylor-Green run {self:?}: needs n >= 2, nu > 0 and 0 < dt <= end time"
            )));
        }
        let mesh = self
            .mesh
            .spec(self.n)
            .generate()
            .map_err(|e| FlowError::invalid(format!("Taylor-Green mesh: {e}")))?;
        let geometry = Geometry::compute(&mesh);
        let steps = (self.end_time / self.dt).round() as usize;
        let dt = self.end_time / steps as f64;
        let nu = self.nu;
        let centres = &geometry.cell_centres;
        let volumes = &geometry.cell_volumes;
        let u0: Vec<Vec3> = centres.iter().map(|x| exact_velocity(x, 0.0, nu)).collect();
        let p0: Vec<f64> = centres.iter().map(|x| exact_pressure(x, 0.0, nu)).collect();
        let energy0 = kinetic_energy(&u0, volumes);
        let tet = matches!(self.mesh, TaylorGreenMesh::Tet { .. });
        let settings = SimpleSettings {
            schemes: Schemes {
                sn_grad: SnGradScheme::Corrected,
                grad: GradScheme::GaussLinear,
                ..SimpleSettings::new(nu).schemes
            },
            n_non_orth_correctors: usize::from(tet),
            p_ref_cell: 0,
            p_ref_value: p0[0],
            explicit_stress: false,
            ..SimpleSettings::new(nu)
        };
        let momentum = MomentumSolver {
            krylov: Some(KrylovMethod::BiCgStab),
            preconditioner: PreconditionerKind::Jacobi.into(),
            controls: tight(),
            ..MomentumSolver::default()
        };
        let transient = TransientSettings {
            ddt: self.ddt,
            ..TransientSettings::piso(
                2,
                TransientConvection {
                    scheme: None,
                    bounded: false,
                },
                momentum,
            )
        };
        let pressure = BoundaryCondition::on_every_patch(&mesh, BoundaryCondition::ZeroGradient);
        let mut piso = Piso::new(
            &mesh,
            &geometry,
            settings,
            transient,
            &wall_velocity(&mesh, &geometry, 0.0, nu),
            pressure,
            (u0, p0, None),
            dt,
        )?;
        let controls = tight();
        let mut solve_pressure = |a: &crate::sparse::Csr, b: &[f64], x: &mut [f64], _: bool| {
            solve_pcg(a, PreconditionerKind::Dic, b, x, &controls, "p")
        };
        let mut courant: f64 = 0.0;
        for step in 1..=steps {
            piso.set_velocity_values(&wall_velocity(&mesh, &geometry, step as f64 * dt, nu))?;
            courant = courant.max(piso.courant().1);
            piso.advance(piso.courant(), &mut solve_pressure)?;
        }
        let t = steps as f64 * dt;
        let u = piso.simple.u.clone();
        let p = piso.simple.p.clone();
        let u_exact: Vec<Vec3> = centres.iter().map(|x| exact_velocity(x, t, nu)).collect();
        let p_exact: Vec<f64> = centres.iter().map(|x| exact_pressure(x, t, nu)).collect();
        let (p_mean, p_exact_mean) = (mean(&p, volumes), mean(&p_exact, volumes));
        let u_norm = l2(u_exact.iter().map(|u| u.norm()), volumes);
        let p_norm = l2(p_exact.iter().map(|p| p - p_exact_mean), volumes);
        let u_error = l2(u.iter().zip(&u_exact).map(|(a, b)| (a - b).norm()), volumes) / u_norm;
        let p_error = l2(
            p.iter()
                .zip(&p_exact)
                .map(|(a, b)| (a - p_mean) - (b - p_exact_mean)),
            volumes,
        ) / p_norm;
        let decay_rate = -(kinetic_energy(&u, volumes) / energy0).ln() / t;
        let total: f64 = volumes.iter().sum();
        let h = (total / mesh.n_cells() as f64).powf(1.0 / self.mesh.dimension() as f64);
        Ok(TaylorGreenResult {
            run: TaylorGreen { dt, ..*self },
            cells: mesh.n_cells(),
            h,
            steps,
            courant,
            u_error,
            p_error,
            decay_rate,
            exact_decay_rate: 4.0 * nu,
            u,
            p,
        })
    }
}

/// Observed order between two errors at sizes `h1` > `h2`.
pub fn observed_order(e1: f64, e2: f64, h1: f64, h2: f64) -> f64 {
    (e1 / e2).ln() / (h1 / h2).ln()
}

/// Runs on meshes of `ns` cells per side (coarse to fine) with backward and
/// Δt = `courant` · h_x (h_x = 2π/n: the Courant number of the unit peak
/// velocity) to `end_time`.
pub fn spatial_study(
    mesh: TaylorGreenMesh,
    ns: &[usize],
    nu: f64,
    courant: f64,
    end_time: f64,
) -> Result<Study, FlowError> {
    let base = TaylorGreen {
        mesh,
        n: 0,
        nu,
        ddt: DdtScheme::Backward,
        dt: 0.0,
        end_time,
    };
    let rows = run_each(base, ns, |run, n| {
        run.n = n;
        run.dt = courant * 2.0 * PI / n as f64;
    })?;
    Ok(Study {
        title: format!(
            "spatial: {}, backward, dt = {courant} h, nu = {nu}, t = {end_time}",
            mesh.name()
        ),
        errors: rows.iter().map(|r| (r.u_error, r.p_error, r.h)).collect(),
        rows,
    })
}

/// Runs on one mesh with the time steps `dts` (large to small) and the
/// scheme `ddt`; errors against the run with the last (smallest) step, which
/// is a row of its own without an error.
pub fn temporal_study(
    mesh: TaylorGreenMesh,
    n: usize,
    nu: f64,
    ddt: DdtScheme,
    dts: &[f64],
    end_time: f64,
) -> Result<Study, FlowError> {
    let base = TaylorGreen {
        mesh,
        n,
        nu,
        ddt,
        dt: 0.0,
        end_time,
    };
    let rows = run_each(base, dts, |run, dt| run.dt = dt)?;
    let finest = rows.last().expect("at least one time step");
    let relative_l2 = |a: &[Vec3], b: &[Vec3]| -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).norm_squared()).sum();
        let den: f64 = b.iter().map(|y| y.norm_squared()).sum();
        (num / den).sqrt()
    };
    let errors = rows[..rows.len() - 1]
        .iter()
        .map(|r| {
            let u = relative_l2(&r.u, &finest.u);
            let centred = |p: &[f64]| -> Vec<f64> {
                let m = p.iter().sum::<f64>() / p.len() as f64;
                p.iter().map(|x| x - m).collect()
            };
            let (a, b) = (centred(&r.p), centred(&finest.p));
            let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
            let den: f64 = b.iter().map(|y| y * y).sum();
            (u, (num / den).sqrt(), r.run.dt)
        })
        .collect();
    Ok(Study {
        title: format!(
            "temporal: {} n = {n}, {ddt:?}, nu = {nu}, t = {end_time}, errors against dt = {}",
            mesh.name(),
            format_dt(finest.run.dt)
        ),
        rows,
        errors,
    })
}

/// Runs `base` once for each of `values`, `set` putting the value in
/// (a study's mesh sizes or time steps); the first failed run is the error.
fn run_each<T: Copy>(
    base: TaylorGreen,
    values: &[T],
    set: impl Fn(&mut TaylorGreen, T),
) -> Result<Vec<TaylorGreenResult>, FlowError> {
    values
        .iter()
        .map(|&value| {
            let mut run = base;
            set(&mut run, value);
            run.run()
        })
        .collect()
}

fn format_dt(dt: f64) -> String {
    format!("{dt:.5}")
}

/// A refinement study: its runs and, per row with an error, the U and p
/// errors and the size (h or Δt) the orders are taken over.
#[derive(Clone, Debug)]
pub struct Study {
    pub title: String,
    pub rows: Vec<TaylorGreenResult>,
    pub errors: Vec<(f64, f64, f64)>,
}

impl Study {
    /// Observed orders (U, p) between successive rows with errors.
    pub fn orders(&self) -> Vec<(f64, f64)> {
        self.errors
            .windows(2)
            .map(|w| {
                let ((u1, p1, h1), (u2, p2, h2)) = (w[0], w[1]);
                (
                    observed_order(u1, u2, h1, h2),
                    observed_order(p1, p2, h1, h2),
                )
            })
            .collect()
    }

    /// The orders (U, p) between the two last rows with errors.
    pub fn finest_orders(&self) -> Option<(f64, f64)> {
        self.orders().last().copied()
    }
}

impl fmt::Display for Study {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.title)?;
        writeln!(
            f,
            "| {:>5} | {:>6} | {:>8} | {:>5} | {:>5} | {:>9} | {:>5} | {:>9} | {:>5} | {:>10} | {:>9} |",
            "N", "cells", "dt", "steps", "Co", "U L2", "order", "p L2", "order", "KE rate", "rate err"
        )?;
        writeln!(
            f,
            "|------:|-------:|---------:|------:|------:|----------:|------:|----------:|------:|-----------:|----------:|"
        )?;
        let orders = self.orders();
        for (i, r) in self.rows.iter().enumerate() {
            let (u, p) = match self.errors.get(i) {
                Some(&(u, p, _)) => (format!("{u:.3e}"), format!("{p:.3e}")),
                None => ("(ref)".into(), "(ref)".into()),
            };
            let (ou, op) = match i.checked_sub(1).and_then(|j| orders.get(j)) {
                Some(&(ou, op)) => (format!("{ou:.2}"), format!("{op:.2}")),
                None => (String::new(), String::new()),
            };
            writeln!(
                f,
                "| {:>5} | {:>6} | {:>8} | {:>5} | {:>5.2} | {:>9} | {:>5} | {:>9} | {:>5} | {:>10.6} | {:>9.2e} |",
                r.run.n,
                r.cells,
                format_dt(r.run.dt),
                r.steps,
                r.courant,
                u,
                ou,
                p,
                op,
                r.decay_rate,
                r.decay_rate_error()
            )?;
        }
        Ok(())
    }
}

/// The studies `validate-transient` runs, and the bounds it checks.
#[derive(Clone, Debug, PartialEq)]
pub struct StudyPlan {
    pub nu: f64,
    pub end_time: f64,
    /// Δt / h of the spatial studies.
    pub courant: f64,
    pub hex_sizes: Vec<usize>,
    pub tet_sizes: Vec<usize>,
    pub tet_perturb: f64,
    /// The mesh of the temporal studies, and the numbers of steps to the
    /// end time (the last is the reference).
    pub temporal_size: usize,
    pub temporal_steps: Vec<usize>,
}

impl StudyPlan {
    /// The default sizes (a minute or two).
    pub fn full() -> Self {
        Self {
            nu: 0.05,
            end_time: 2.0,
            courant: 0.25,
            hex_sizes: vec![16, 32, 64],
            tet_sizes: vec![8, 16, 32],
            tet_perturb: 0.2,
            temporal_size: 32,
            temporal_steps: vec![10, 20, 40, 80, 640],
        }
    }

    /// Small meshes: seconds.
    pub fn quick() -> Self {
        Self {
            hex_sizes: vec![16, 32],
            tet_sizes: vec![8, 16],
            temporal_steps: vec![10, 20, 40, 320],
            ..Self::full()
        }
    }
}

/// One checked expectation.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub what: String,
    pub value: f64,
    pub bound: f64,
    /// `value >= bound` (else `value <= bound`).
    pub at_least: bool,
}

impl Check {
    pub fn passed(&self) -> bool {
        if self.at_least {
            self.value >= self.bound
        } else {
            self.value <= self.bound
        }
    }
}

/// The studies of a plan and their checks.
#[derive(Clone, Debug)]
pub struct StudiesReport {
    pub studies: Vec<Study>,
    pub checks: Vec<Check>,
}

impl StudiesReport {
    pub fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.passed()).count()
    }

    pub fn checks_text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!(
                "{} {:.3} {} {:.3}: {}\n",
                c.what,
                c.value,
                if c.at_least { ">=" } else { "<=" },
                c.bound,
                if c.passed() { "PASS" } else { "FAIL" }
            ));
        }
        out
    }
}

/// Observed order of U in space on hexahedra at least this on coarse meshes
/// (16² to 32²: measured 2.18).
pub const SECOND_ORDER_BOUND: f64 = 1.8;
/// ... and between the two finest meshes of the plan (32² to 64²: measured
/// 1.77; the walls' first-order pressure gradient starts to show in U).
pub const FINE_U_ORDER_BOUND: f64 = 1.7;
/// p in space on hexahedra (first order: see `docs/src/validation.md`).
pub const FIRST_ORDER_BOUND: f64 = 0.9;
/// Euler's U error over backward's at the largest time step, at least.
pub const BACKWARD_GAIN: f64 = 1.5;
/// Largest relative error of the kinetic-energy decay rate on the finest hex mesh.
pub const DECAY_RATE_TOLERANCE: f64 = 0.01;

fn at_least(what: String, value: f64, bound: f64) -> Check {
    Check {
        what,
        value,
        bound,
        at_least: true,
    }
}

/// Runs the plan's studies (each handed to `done` as it ends) and checks
/// the orders and the decay rate against the bounds above.
pub fn validation_studies(
    plan: &StudyPlan,
    mut done: impl FnMut(&Study),
) -> Result<StudiesReport, FlowError> {
    let mut studies = Vec::new();
    let mut checks = Vec::new();
    let hex = spatial_study(
        TaylorGreenMesh::Hex,
        &plan.hex_sizes,
        plan.nu,
        plan.courant,
        plan.end_time,
    )?;
    done(&hex);
    if let Some((u, p)) = hex.finest_orders() {
        checks.push(at_least(
            "hex: U order in space".into(),
            u,
            SECOND_ORDER_BOUND,
        ));
        checks.push(at_least(
            "hex: p order in space".into(),
            p,
            FIRST_ORDER_BOUND,
        ));
    }
    if let Some(finest) = hex.rows.last() {
        checks.push(Check {
            what: format!("hex N = {}: kinetic-energy decay rate error", finest.run.n),
            value: finest.decay_rate_error(),
            bound: DECAY_RATE_TOLERANCE,
            at_least: false,
        });
    }
    studies.push(hex);
    if !plan.tet_sizes.is_empty() {
        let tet = spatial_study(
            TaylorGreenMesh::Tet {
                perturb: plan.tet_perturb,
            },
            &plan.tet_sizes,
            plan.nu,
            plan.courant,
            plan.end_time,
        )?;
        done(&tet);
        studies.push(tet);
    }
    if plan.temporal_steps.len() >= 2 {
        let dts: Vec<f64> = plan
            .temporal_steps
            .iter()
            .map(|&s| plan.end_time / s as f64)
            .collect();
        let mut largest_step_error = Vec::new();
        for ddt in [DdtScheme::Euler, DdtScheme::Backward] {
            let study = temporal_study(
                TaylorGreenMesh::Hex,
                plan.temporal_size,
                plan.nu,
                ddt,
                &dts,
                plan.end_time,
            )?;
            done(&study);
            largest_step_error.push(study.errors[0].0);
            studies.push(study);
        }
        checks.push(at_least(
            "Euler's U error over backward's at the largest step".into(),
            largest_step_error[0] / largest_step_error[1],
            BACKWARD_GAIN,
        ));
    }
    Ok(StudiesReport { studies, checks })
}
