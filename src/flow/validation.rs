//! The flow validation cases on generated box meshes, each with its
//! reference, error table and tolerance (`fvpoisson validate-flow`, and the
//! tests at small sizes):
//!
//! - lid-driven cavity, unit square, lid velocity 1, ν = 1/Re, against Ghia,
//!   Ghia & Shin (1982) ([`super::reference`]);
//! - plane Poiseuille flow: a uniform inflow develops in a channel 6H long;
//!   at x = 5H the profile and between x = 3H and 5H the pressure gradient are
//!   compared with the analytic ones; once between two walls, once on the
//!   half channel with a symmetry plane on the centreline;
//! - potential flow (potentialFoam) around a cylinder: the speed in the
//!   first cell layer against Φ = U∞(r + a²/r) cos θ (2U∞ sin θ on the wall).

use super::output::{write_fields, write_residual_plot};
use super::reference::{
    compare_with_ghia, ghia, max_deviation, poiseuille_pressure_gradient, poiseuille_velocity,
    BoxSampler, Comparison,
};
use super::simple::{IterationReport, PressureSolve, ResidualControl, Simple, SimpleSettings};
use super::{FlowError, VectorValues, VelocityCondition};
use crate::fvm::{BoundaryCondition, PatchValues};
use crate::gpu::amg::gpu_amg_settings;
use crate::gpu::pcg::{DeviceSolve, GpuSolveOptions, GpuSolver};
use crate::gpu::Gpu;
use crate::mesh::{self, Geometry, Mesh, Vec3};
use crate::solve::amg::AmgSettings;
use crate::solve::{
    solve_pcg, Preconditioner, PreconditionerKind, SolveError, SolverControls, SolverPerformance,
};
use crate::sparse::Csr;
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the pressure equation is solved: PCG with DIC on the CPU, or the
/// GPU's fused Jacobi-PCG (either with AMG instead:
/// [`PressureSolver::with_amg`]); on the GPU the matrix is assembled on the
/// CPU and uploaded each outer iteration, p uploaded as the warm start and
/// read back. (`run --device gpu` of a flow case runs the whole loop on the
/// device: [`crate::gpu::simple::DeviceSimple`].)
#[derive(Clone, Copy)]
pub enum PressureDevice<'g> {
    Cpu,
    Gpu(&'g Gpu),
}

/// A pressure solver on `device` with `controls`, and the time it spends.
pub struct PressureSolver<'g> {
    gpu: Option<GpuSolver<'g>>,
    controls: SolverControls,
    /// `Some`: PCG with this AMG as preconditioner instead of DIC (CPU) /
    /// Jacobi (GPU; the GPU's AMG of these settings, `gpu_amg_settings`).
    amg: Option<AmgSettings>,
    /// Wall time spent in solves.
    pub elapsed: Duration,
}

impl<'g> PressureSolver<'g> {
    pub fn new(device: PressureDevice<'g>, controls: SolverControls) -> Self {
        Self {
            gpu: match device {
                PressureDevice::Gpu(gpu) => Some(GpuSolver::new(gpu)),
                PressureDevice::Cpu => None,
            },
            controls,
            amg: None,
            elapsed: Duration::ZERO,
        }
    }

    /// PCG with the AMG of `settings` as preconditioner (GAMG).
    pub fn with_amg(self, settings: AmgSettings) -> Self {
        Self {
            amg: Some(settings),
            ..self
        }
    }

    /// Solves A p = b from the p given.
    pub fn solve(
        &mut self,
        a: &Csr,
        b: &[f64],
        p: &mut [f64],
    ) -> Result<SolverPerformance, SolveError> {
        let start = Instant::now();
        let (controls, options) = (&self.controls, &GpuSolveOptions::default());
        let result = match (&mut self.gpu, &self.amg) {
            (Some(gpu), None) => gpu.solve(
                PreconditionerKind::Jacobi,
                DeviceSolve::new(a, b, p, controls, options).named("p"),
            ),
            (Some(gpu), Some(s)) => gpu.solve_amg(
                &gpu_amg_settings(s),
                DeviceSolve::new(a, b, p, controls, options).named("p"),
            ),
            (None, None) => solve_pcg(a, PreconditionerKind::Dic, b, p, controls, "p"),
            (None, Some(s)) => solve_pcg(a, Preconditioner::Amg(*s), b, p, controls, "p"),
        };
        self.elapsed += start.elapsed();
        result
    }
}

/// A validation case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FlowCase {
    /// Lid-driven cavity at Re = 100, 400 or 1000 on n × n cells.
    Cavity { reynolds: u32, n: usize },
    /// Plane Poiseuille flow at Re = U H/ν = 10 with `n` cells across the
    /// channel (6n along it); `half`: the lower half with a symmetry plane.
    Poiseuille { n: usize, half: bool },
    /// Potential flow (potentialFoam) around a cylinder of radius 1 in an
    /// annulus of outer radius [`CYLINDER_OUTER_RADIUS`], `n` cells around
    /// and radially graded cells of about the same shape; the far field
    /// takes the analytic velocity.
    Cylinder { n: usize },
}

/// Outer radius of the potential-flow annulus (the cylinder's is 1).
pub const CYLINDER_OUTER_RADIUS: f64 = 20.0;

impl FlowCase {
    pub fn name(&self) -> String {
        match self {
            Self::Cavity { reynolds, n } => format!("cavity Re={reynolds} {n}x{n}"),
            Self::Poiseuille { n, half: false } => format!("Poiseuille channel {}x{n}", 6 * n),
            Self::Poiseuille { n, half: true } => {
                format!("Poiseuille half channel with symmetry {}x{}", 6 * n, n / 2)
            }
            Self::Cylinder { n } => format!("potential flow around a cylinder, {n} cells around"),
        }
    }

    /// The case `kind` (`cavity`, `poiseuille`, `poiseuille-half`) on a mesh
    /// of `n_cells` cells with viscosity `nu`: the sizes follow from the cell
    /// count, the cavity's Reynolds number is 1/ν.
    pub fn from_mesh(kind: &str, n_cells: usize, nu: f64) -> Result<Self, FlowError> {
        let side = |cells: usize| -> Result<usize, FlowError> {
            let n = (cells as f64).sqrt().round() as usize;
            if n * n == cells {
                Ok(n)
            } else {
                Err(FlowError::invalid(format!(
                    "validation case '{kind}': the mesh's {n_cells} cells do not make its \
                     lattice (see flow::validation::FlowCase)"
                )))
            }
        };
        match kind {
            "cavity" => {
                let reynolds = (1.0 / nu).round();
                if ((1.0 / nu) - reynolds).abs() > 1e-9 * reynolds {
                    return Err(FlowError::invalid(format!(
                        "validation case cavity: Re = 1/nu = {} is not a whole number",
                        1.0 / nu
                    )));
                }
                Ok(Self::Cavity {
                    reynolds: reynolds as u32,
                    n: side(n_cells)?,
                })
            }
            "poiseuille" if n_cells.is_multiple_of(6) => Ok(Self::Poiseuille {
                n: side(n_cells / 6)?,
                half: false,
            }),
            "poiseuille-half" if n_cells.is_multiple_of(3) => Ok(Self::Poiseuille {
                n: side(n_cells / 3)?,
                half: true,
            }),
            other => Err(FlowError::invalid(format!(
                "validation case '{other}' on {n_cells} cells: expected cavity (n x n cells), \
                 poiseuille (6n x n) or poiseuille-half (6n x n/2)"
            ))),
        }
    }

    /// File name stem of the case's results.
    pub fn file_stem(&self) -> String {
        match self {
            Self::Cavity { reynolds, n } => format!("cavity_re{reynolds}_{n}"),
            Self::Poiseuille { n, half: false } => format!("poiseuille_{n}"),
            Self::Poiseuille { n, half: true } => format!("poiseuille_half_{n}"),
            Self::Cylinder { n } => format!("cylinder_{n}"),
        }
    }

    /// The largest deviation accepted, in units of the lid velocity (cavity)
    /// or relative to the analytic maximum (Poiseuille), or to U∞
    /// (cylinder: 0.5/n, first order in the cell size). The cavity's
    /// tolerance follows the grid: second-order schemes on n cells against
    /// Ghia's 129-point multigrid solution.
    pub fn tolerance(&self) -> f64 {
        match *self {
            Self::Cavity { reynolds, n } => {
                let base = match reynolds {
                    100 => 0.02,
                    400 => 0.04,
                    _ => 0.06,
                };
                base * (64.0 / n as f64).powi(2).max(1.0)
            }
            Self::Poiseuille { n, .. } => 2.0 / (n * n) as f64 + 2e-3,
            Self::Cylinder { n } => 0.5 / n as f64,
        }
    }
}

/// What a validation run produced.
pub struct FlowValidation {
    pub case: FlowCase,
    /// Titled tables of comparisons.
    pub tables: Vec<(String, Vec<Comparison>)>,
    /// Largest deviation over all tables (normalised as the tolerance is).
    pub max_deviation: f64,
    pub tolerance: f64,
    pub reports: Vec<IterationReport>,
    pub converged: bool,
    /// Wall time per outer iteration, and the part of it in pressure solves.
    pub seconds_per_iteration: f64,
    pub pressure_seconds_per_iteration: f64,
    /// The final fields (cell order of the mesh).
    pub u: Vec<Vec3>,
    pub p: Vec<f64>,
}

impl FlowValidation {
    pub fn passed(&self) -> bool {
        self.converged && self.max_deviation <= self.tolerance
    }
}

impl fmt::Display for FlowValidation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "== {}: {} outer iterations{}, {:.3} ms per iteration ({:.3} ms in the pressure solve)",
            self.case.name(),
            self.reports.len(),
            if self.converged {
                " (converged)"
            } else {
                " (NOT converged)"
            },
            1e3 * self.seconds_per_iteration,
            1e3 * self.pressure_seconds_per_iteration
        )?;
        write!(f, "{}", Tables(&self.tables))?;
        writeln!(
            f,
            "max deviation {:.3e}, tolerance {:.3e}: {}",
            self.max_deviation,
            self.tolerance,
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

/// Titled tables of comparisons, printed as columns.
pub struct Tables<'a>(pub &'a [(String, Vec<Comparison>)]);

impl fmt::Display for Tables<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (title, rows) in self.0 {
            writeln!(f, "{title}")?;
            writeln!(
                f,
                "  {:>8} {:>11} {:>11} {:>10}",
                "position", "reference", "computed", "deviation"
            )?;
            for r in rows {
                writeln!(
                    f,
                    "  {:>8.4} {:>11.5} {:>11.5} {:>10.2e}{}",
                    r.position,
                    r.reference,
                    r.computed,
                    r.deviation(),
                    if r.misprint {
                        "  (misprint in the reference, not counted)"
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }
}

fn load(spec: &str) -> Result<(Mesh, Geometry), FlowError> {
    let mesh = mesh::source::load(spec).map_err(|e| FlowError::invalid(e.to_string()))?;
    let geometry = Geometry::compute(&mesh);
    Ok((mesh, geometry))
}

/// Conditions by patch name (the box generator's names), in patch order.
fn by_name<T: Clone>(mesh: &Mesh, named: &[(&str, T)]) -> Result<Vec<T>, FlowError> {
    mesh.patches()
        .iter()
        .map(|p| {
            named
                .iter()
                .find(|(name, _)| *name == p.name)
                .map(|(_, bc)| bc.clone())
                .ok_or_else(|| FlowError::invalid(format!("no condition for patch '{}'", p.name)))
        })
        .collect()
}

/// Runs `case` for at most `max_iterations` outer iterations: the case sets
/// ν, a residual control of 1e-6 and a momentum tolerance of 1e-9 (relTol
/// 0.1), `adjust` the rest of the settings; the
/// pressure equation goes to `pressure`. With `output`, writes there
/// `NAME.vtu` (U, p, div(phi)) and `NAME_residuals.png`.
pub fn run(
    case: FlowCase,
    max_iterations: usize,
    adjust: impl Fn(&mut SimpleSettings),
    pressure_solver: &mut PressureSolver<'_>,
    output: Option<&Path>,
) -> Result<FlowValidation, FlowError> {
    let wall = VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::zeros()));
    let zero_gradient = BoundaryCondition::ZeroGradient;
    let ((mesh, geometry), velocity, pressure, nu) = match case {
        FlowCase::Cavity { reynolds, n } => {
            if ghia(reynolds).is_none() {
                return Err(FlowError::invalid(format!(
                    "Ghia et al. tabulate Re = 100, 400 and 1000, not {reynolds}"
                )));
            }
            let lid =
                VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::new(1.0, 0.0, 0.0)));
            (
                load(&format!("box:{n}x{n}x1:2d"))?,
                vec![
                    ("xmin", wall.clone()),
                    ("xmax", wall.clone()),
                    ("ymin", wall.clone()),
                    ("ymax", lid),
                    ("frontAndBack", VelocityCondition::Empty),
                ],
                vec![
                    ("xmin", zero_gradient.clone()),
                    ("xmax", zero_gradient.clone()),
                    ("ymin", zero_gradient.clone()),
                    ("ymax", zero_gradient.clone()),
                    ("frontAndBack", BoundaryCondition::Empty),
                ],
                1.0 / reynolds as f64,
            )
        }
        FlowCase::Poiseuille { n, half } => {
            let (ny, height) = if half { (n / 2, 0.5) } else { (n, 1.0) };
            let inlet =
                VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::new(1.0, 0.0, 0.0)));
            let top = if half {
                (VelocityCondition::Symmetry, zero_gradient.clone())
            } else {
                (wall.clone(), zero_gradient.clone())
            };
            (
                load(&format!("box:{}x{ny}x1:2d:size=6x{height}x1", 6 * n))?,
                vec![
                    ("xmin", inlet),
                    ("xmax", VelocityCondition::ZeroGradient),
                    ("ymin", wall.clone()),
                    ("ymax", top.0),
                    ("frontAndBack", VelocityCondition::Empty),
                ],
                vec![
                    ("xmin", zero_gradient.clone()),
                    (
                        "xmax",
                        BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
                    ),
                    ("ymin", zero_gradient.clone()),
                    ("ymax", top.1),
                    ("frontAndBack", BoundaryCondition::Empty),
                ],
                0.1,
            )
        }
        FlowCase::Cylinder { n } => {
            let mesh = cylinder_mesh(n)?;
            let geometry = Geometry::compute(&mesh);
            let far = mesh
                .patch("farField")
                .expect("cylinder_mesh names it")
                .clone();
            let first = mesh.n_internal_faces();
            let far_velocity = (far.start..far.start + far.size)
                .map(|f| potential_velocity(geometry.boundary_face_centres[f - first]))
                .collect();
            (
                (mesh, geometry),
                vec![
                    ("cylinder", wall.clone()),
                    (
                        "farField",
                        VelocityCondition::FixedValue(VectorValues::PerFace(far_velocity)),
                    ),
                    ("frontAndBack", VelocityCondition::Empty),
                ],
                vec![
                    ("cylinder", zero_gradient.clone()),
                    ("farField", zero_gradient.clone()),
                    ("frontAndBack", BoundaryCondition::Empty),
                ],
                1.0,
            )
        }
    };
    let mut settings = SimpleSettings::new(nu);
    settings.residual_control = ResidualControl { u: 1e-6, p: 1e-6 };
    // Below the tutorial's momentum tolerance (1e-5) the predictor would stop
    // sweeping before the residual control is reached.
    settings.momentum.controls.tolerance = 1e-9;
    adjust(&mut settings);
    let n_cells = mesh.n_cells();
    let mut simple = Simple::new(
        &mesh,
        &geometry,
        settings,
        &by_name(&mesh, &velocity)?,
        by_name(&mesh, &pressure)?,
        vec![Vec3::zeros(); n_cells],
        vec![0.0; n_cells],
    )?;
    let start = Instant::now();
    let solve_pressure: &mut PressureSolve<'_> =
        &mut |a, b, p, _last| pressure_solver.solve(a, b, p);
    let reports = match case {
        FlowCase::Cylinder { .. } => vec![simple.potential_flow(solve_pressure)?],
        _ => simple.run(max_iterations, solve_pressure, |_, _| Ok(()))?,
    };
    let iterations = reports.len().max(1) as f64;
    let seconds_per_iteration = start.elapsed().as_secs_f64() / iterations;
    let pressure_seconds_per_iteration = pressure_solver.elapsed.as_secs_f64() / iterations;
    if let Some(dir) = output {
        let stem = case.file_stem();
        std::fs::create_dir_all(dir)
            .map_err(|e| FlowError::invalid(format!("cannot create {}: {e}", dir.display())))?;
        write_fields(
            &dir.join(format!("{stem}.vtu")),
            &mesh,
            &simple.u,
            &simple.p,
            &simple.flux_divergence(),
        )
        .map_err(|e| FlowError::invalid(e.to_string()))?;
        write_residual_plot(
            &reports,
            &case.name(),
            &dir.join(format!("{stem}_residuals.png")),
        )
        .map_err(|e| FlowError::invalid(e.to_string()))?;
    }
    let converged = reports.last().is_some_and(|r| r.converged);
    let tables = compare(case, &simple)?;
    let max_deviation = tables
        .iter()
        .map(|(_, rows)| max_deviation(rows))
        .fold(0.0, f64::max);
    Ok(FlowValidation {
        case,
        tables,
        max_deviation,
        tolerance: case.tolerance(),
        reports,
        converged,
        seconds_per_iteration,
        pressure_seconds_per_iteration,
        u: simple.u,
        p: simple.p,
    })
}

/// The case's reference tables for a computed flow on the case's mesh.
pub fn compare(
    case: FlowCase,
    simple: &Simple<'_>,
) -> Result<Vec<(String, Vec<Comparison>)>, FlowError> {
    let (mesh, geometry) = (simple.mesh(), simple.geometry());
    let nu = simple.settings().nu;
    let boundary_u = simple.boundary_velocity();
    Ok(match case {
        FlowCase::Cavity { reynolds, n } => {
            let sampler = BoxSampler::new(mesh, geometry, (n, n), (0.0, 0.0), (1.0, 1.0))
                .ok_or_else(|| FlowError::invalid("the cavity mesh is not a lattice"))?;
            let table = ghia(reynolds).ok_or_else(|| {
                FlowError::invalid(format!("Ghia et al. have no table for Re = {reynolds}"))
            })?;
            let (u_rows, v_rows) = compare_with_ghia(table, &sampler, &simple.u, &boundary_u);
            vec![
                (
                    format!("u along x = 0.5 (Ghia et al. 1982, Table I, Re = {reynolds})"),
                    u_rows,
                ),
                (
                    format!("v along y = 0.5 (Ghia et al. 1982, Table II, Re = {reynolds})"),
                    v_rows,
                ),
            ]
        }
        FlowCase::Poiseuille { n, half } => {
            let (ny, height) = if half { (n / 2, 0.5) } else { (n, 1.0) };
            let sampler = BoxSampler::new(mesh, geometry, (6 * n, ny), (0.0, 0.0), (6.0, height))
                .ok_or_else(|| FlowError::invalid("the channel mesh is not a lattice"))?;
            // Cell-centre heights of the column at x = 5.
            let heights: Vec<f64> = (0..ny)
                .map(|j| (j as f64 + 0.5) * height / ny as f64)
                .collect();
            let points: Vec<(f64, f64)> = heights.iter().map(|&y| (5.0, y)).collect();
            let computed = sampler.sample(&simple.u, &boundary_u, 0, &points);
            let u_max = poiseuille_velocity(0.5, 1.0, 1.0);
            let profile = heights
                .iter()
                .zip(computed)
                .map(|(&y, u)| Comparison {
                    position: y,
                    reference: poiseuille_velocity(y, 1.0, 1.0) / u_max,
                    computed: u / u_max,
                    misprint: false,
                })
                .collect();
            let as_vectors = |s: &[f64]| {
                s.iter()
                    .map(|&p| Vec3::new(p, 0.0, 0.0))
                    .collect::<Vec<_>>()
            };
            let p_cells = as_vectors(&simple.p);
            let p_boundary = as_vectors(&simple.boundary_pressure());
            let y_mid = heights[heights.len() / 2];
            let p_line = sampler.sample(&p_cells, &p_boundary, 0, &[(3.0, y_mid), (5.0, y_mid)]);
            let reference = poiseuille_pressure_gradient(1.0, 1.0, nu);
            let gradient = Comparison {
                position: 4.0,
                reference: 1.0,
                computed: (p_line[1] - p_line[0]) / 2.0 / reference,
                misprint: false,
            };
            vec![
                (
                    "u/u_max at x = 5H against 6(y/H)(1 - y/H)/1.5".to_string(),
                    profile,
                ),
                (
                    "dp/dx between x = 3H and 5H over -12 nu U/H^2".to_string(),
                    vec![gradient],
                ),
            ]
        }
        FlowCase::Cylinder { n } => {
            // First-layer cells about every 15°, from the rear stagnation
            // point (θ = 0; U∞ is along x) over the top to the front one.
            let cylinder = mesh.patch("cylinder").ok_or_else(|| {
                FlowError::invalid("the cylinder case's mesh has no patch 'cylinder'")
            })?;
            let step = (n / 24).max(1);
            let rows = (cylinder.start..cylinder.start + cylinder.size)
                .step_by(step)
                .filter_map(|f| {
                    let c = geometry.cell_centres[mesh.owner()[f] as usize];
                    let theta = c.y.atan2(c.x);
                    (theta >= 0.0).then(|| Comparison {
                        position: theta.to_degrees(),
                        reference: potential_velocity(c).norm(),
                        computed: simple.u[mesh.owner()[f] as usize].norm(),
                        misprint: false,
                    })
                })
                .collect::<Vec<_>>();
            vec![(
                "|U|/U at the first cell layer against the potential solution (2 sin θ on the \
                 wall), θ in degrees"
                    .to_string(),
                rows,
            )]
        }
    })
}

/// The potential flow around the unit cylinder, U∞ = 1 along x:
/// Φ = (r + 1/r) cos θ, at `x`.
pub fn potential_velocity(x: Vec3) -> Vec3 {
    let r2 = x.x * x.x + x.y * x.y;
    let (cos2, sin2) = ((x.x * x.x - x.y * x.y) / r2, 2.0 * x.x * x.y / r2);
    // ∇[(r + 1/r) cos θ] = (1 − cos 2θ/r², −sin 2θ/r²).
    Vec3::new(1.0 - cos2 / r2, -sin2 / r2, 0.0)
}

/// The annulus 1 ≤ r ≤ [`CYLINDER_OUTER_RADIUS`], one layer 0 ≤ z ≤ 1 of
/// `n` × m hexahedra (m = n ln(R)/2π rounded: radii r_j = R^(j/m), cells of
/// about equal sides), patches `cylinder` (wall), `farField`,
/// `frontAndBack` (empty). Faces are oriented from their owner outwards.
fn cylinder_mesh(n: usize) -> Result<Mesh, FlowError> {
    use crate::mesh::{FaceList, Label, Patch, PatchKind};
    if n < 8 {
        return Err(FlowError::invalid(
            "the cylinder mesh needs at least 8 cells around",
        ));
    }
    let m = ((n as f64) * CYLINDER_OUTER_RADIUS.ln() / std::f64::consts::TAU).round() as usize;
    let m = m.max(2);
    let point = |i: usize, j: usize, k: usize| ((i % n) + n * (j + (m + 1) * k)) as Label;
    let mut points = Vec::with_capacity(2 * n * (m + 1));
    for k in 0..2 {
        for j in 0..=m {
            let r = CYLINDER_OUTER_RADIUS.powf(j as f64 / m as f64);
            for i in 0..n {
                let theta = std::f64::consts::TAU * i as f64 / n as f64;
                points.push(Vec3::new(r * theta.cos(), r * theta.sin(), k as f64));
            }
        }
    }
    let cell = |i: usize, j: usize| ((i % n) + n * j) as Label;
    let centre = |i: usize, j: usize| {
        let r = CYLINDER_OUTER_RADIUS.powf((j as f64 + 0.5) / m as f64);
        let theta = std::f64::consts::TAU * (i as f64 + 0.5) / n as f64;
        Vec3::new(r * theta.cos(), r * theta.sin(), 0.5)
    };
    // A quadrilateral, reversed unless its normal points along `out`.
    let oriented = |mut quad: [Label; 4], out: Vec3| {
        let p = |k: usize| points[quad[k] as usize];
        let normal = (p(2) - p(0)).cross(&(p(3) - p(1)));
        if normal.dot(&out) < 0.0 {
            quad.reverse();
        }
        quad
    };
    let mut faces = FaceList::default();
    let (mut owner, mut neighbour) = (Vec::new(), Vec::new());
    // Internal faces in upper-triangular order: per owner, by neighbour.
    for j in 0..m {
        for i in 0..n {
            let c = cell(i, j);
            let mut own: Vec<(Label, [Label; 4], Vec3)> = Vec::new();
            // Towards i + 1 (at angle i + 1) and towards i − 1 (at angle i).
            for (di, edge) in [(1, i + 1), (n - 1, i)] {
                let other = cell(i + di, j);
                if other > c {
                    let quad = [
                        point(edge, j, 0),
                        point(edge, j + 1, 0),
                        point(edge, j + 1, 1),
                        point(edge, j, 1),
                    ];
                    own.push((other, quad, centre(i + di, j) - centre(i, j)));
                }
            }
            if j + 1 < m {
                let quad = [
                    point(i, j + 1, 0),
                    point(i + 1, j + 1, 0),
                    point(i + 1, j + 1, 1),
                    point(i, j + 1, 1),
                ];
                own.push((cell(i, j + 1), quad, centre(i, j + 1) - centre(i, j)));
            }
            own.sort_by_key(|(other, ..)| *other);
            for (other, quad, out) in own {
                faces
                    .push(&oriented(quad, out))
                    .map_err(|e| FlowError::invalid(e.to_string()))?;
                owner.push(c);
                neighbour.push(other);
            }
        }
    }
    let mut patches = Vec::new();
    let mut boundary = |name: &str,
                        kind: PatchKind,
                        quads: Vec<(Label, [Label; 4], Vec3)>,
                        faces: &mut FaceList,
                        owner: &mut Vec<Label>|
     -> Result<(), FlowError> {
        patches.push(Patch::new(name, kind, owner.len(), quads.len()));
        for (c, quad, out) in quads {
            faces
                .push(&oriented(quad, out))
                .map_err(|e| FlowError::invalid(e.to_string()))?;
            owner.push(c);
        }
        Ok(())
    };
    let ring = |j: usize, out: f64| -> Vec<(Label, [Label; 4], Vec3)> {
        let cj = if j == 0 { 0 } else { m - 1 };
        (0..n)
            .map(|i| {
                let quad = [
                    point(i, j, 0),
                    point(i + 1, j, 0),
                    point(i + 1, j, 1),
                    point(i, j, 1),
                ];
                (
                    cell(i, cj),
                    quad,
                    out * (centre(i, cj) - Vec3::new(0.0, 0.0, 0.5)),
                )
            })
            .collect()
    };
    boundary(
        "cylinder",
        PatchKind::Wall,
        ring(0, -1.0),
        &mut faces,
        &mut owner,
    )?;
    boundary(
        "farField",
        PatchKind::Patch,
        ring(m, 1.0),
        &mut faces,
        &mut owner,
    )?;
    let caps = (0..m)
        .flat_map(|j| (0..n).map(move |i| (i, j)))
        .flat_map(|(i, j)| {
            [0, 1].map(|k| {
                let quad = [
                    point(i, j, k),
                    point(i + 1, j, k),
                    point(i + 1, j + 1, k),
                    point(i, j + 1, k),
                ];
                (
                    cell(i, j),
                    quad,
                    Vec3::new(0.0, 0.0, if k == 0 { -1.0 } else { 1.0 }),
                )
            })
        })
        .collect();
    boundary(
        "frontAndBack",
        PatchKind::Empty,
        caps,
        &mut faces,
        &mut owner,
    )?;
    Mesh::new(points, faces, owner, neighbour, patches)
        .map_err(|e| FlowError::invalid(e.to_string()))
}
