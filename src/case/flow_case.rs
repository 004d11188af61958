//! Steady laminar flow cases: `case.toml` with `[physics] kind = "simple"`,
//! run by SIMPLE/SIMPLEC ([`crate::flow::simple`]) with simpleFoam's log.
//! Errors name the file, line, column and key, as for Laplacian cases.
//!
//! ```toml
//! [mesh]
//! source = "box:64x64x1:2d"
//!
//! [physics]
//! kind = "simple"
//! nu = 0.01                       # kinematic viscosity (transportProperties nu)
//!
//! [boundary.ymax]                 # one table per patch; [boundary.default] for the rest
//! U = { type = "fixedValue", value = [1.0, 0.0, 0.0] }
//! #   fixedValue / movingWallVelocity (value), noSlip, zeroGradient, symmetry, empty
//! p = { type = "zeroGradient" }  # zeroGradient, fixedValue (value), symmetry, empty
//!
//! [schemes]
//! div = "bounded Gauss linearUpwind grad(U)"   # or upwind, limitedLinear K
//! laplacian = "Gauss linear corrected"
//! grad = "Gauss linear"
//!
//! [SIMPLE]
//! nNonOrthogonalCorrectors = 0
//! consistent = true               # SIMPLEC (default false)
//! explicitStress = false          # simpleFoam's explicit −∇·(ν dev2((∇U)ᵀ)) (default
//!                                 # false: zero for constant ν in the continuum limit;
//!                                 # OpenFOAM cases have it)
//! pRefCell = 0                    # where no patch fixes p
//! pRefValue = 0.0
//! maxIterations = 2000            # default 1000
//! residualControl = { U = 1e-6, p = 1e-6 }   # default: off
//!
//! [relaxationFactors]
//! U = 0.9                         # default 0.7
//! p = 1.0                         # default 0.3
//!
//! [solver.p]                      # the keys of a Laplacian case's [solver.T]
//! solver = "PCG"
//! preconditioner = "DIC"
//! tolerance = 1e-8
//! relTol = 0.01
//! [solver.U]                      # smoothSolver with a point smoother
//! solver = "smoothSolver"
//! smoother = "symGaussSeidel"
//! tolerance = 1e-8
//! relTol = 0.1
//!
//! [output]
//! directory = "results"           # NAME.vtu (U, p, div(phi)), NAME_residuals.png
//! formats = ["vtk", "foam"]       # "foam": OpenFOAM time directories <iteration>/U, p, phi
//! interval = 100                  #   in the case directory, every 100 iterations and at the
//!                                 #   end (default: at the end only)
//!
//! [validation]                    # optional: compare, print the table, fail past the tolerance
//! case = "cavity"                 # cavity (Ghia et al., Re = 1/nu), poiseuille, poiseuille-half
//! ```
//!
//! On `--device gpu` the pressure half of each outer iteration runs on the GPU
//! ([`crate::gpu::simple::DeviceSimple`]: the pressure matrix re-assembled
//! there from the resident rAU and φ_HbyA, PCG warm-started from the
//! resident p, flux correction, continuity errors, p relaxation and the
//! velocity correction). Where `[solver.U]` is a Krylov method the momentum
//! predictor and Rhie–Chow run there too (the whole loop on the device);
//! with smoothSolver they run on the CPU. GAMG for p (`solver = "GAMG"` or
//! `preconditioner = "GAMG"`) runs as AMG-PCG there, the hierarchy set up
//! once on the resident pressure matrix and its values re-set-up in place
//! after each re-assembly. Where
//! the p solver needs a host-assembled matrix (smoothSolver, ILU, FSAI, ...)
//! or the device assembly does not handle the mesh, the pressure equation is
//! assembled on the CPU and solved on the GPU instead (logged once).

use super::case_toml::{MeshSection, OutputSection, SolverEntry, Source, CASE_FILE};
use super::run::{gamg_cache, log_gpu_mapping, Device, GpuSolves, LinearSolves};
use super::setup::{check_non_orth_correctors, LinearSolver, OutputFormat, MAX_TIME_STEPS};
use super::CaseError;
use crate::flow::simple::{
    IterationReport, MomentumSolver, PressureSolve, ResidualControl, Simple, SimpleSettings,
};
use crate::flow::validation::{compare, FlowCase, Tables};
use crate::flow::{Convection, FlowError, VectorValues, VelocityCondition};
use crate::foam::write::format_g;
use crate::fvm::{BoundaryCondition, PatchValues, Schemes};
use crate::gpu::assembly::AssemblyError;
use crate::gpu::ilu::gpu_krylov_preconditioner;
use crate::gpu::pcg::{DeviceSolve, GpuSolveOptions, GpuSolver};
use crate::gpu::simple::{DeviceFlowError, DevicePhaseSeconds, DevicePressureSolver, DeviceSimple};
use crate::gpu::Gpu;
use crate::io::foam_field::FoamWriteOptions;
use crate::mesh::{Mesh, MeshSource, PatchKind, Vec3};
use crate::solve::registry::{self, Role};
use crate::solve::{
    EquilibrationKind, Preconditioner, PreconditionerKind, SmootherKind, SmootherSettings,
    SolveError, SolverPerformance, Sweep,
};
use crate::sparse::Csr;
use crate::timings::{self, Phase};
use serde::Deserialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowFile {
    mesh: MeshSection,
    physics: FlowPhysics,
    #[serde(default)]
    boundary: BTreeMap<String, Spanned<FlowBoundary>>,
    #[serde(default)]
    schemes: FlowSchemes,
    #[serde(rename = "SIMPLE", default)]
    simple: SimpleSection,
    #[serde(rename = "relaxationFactors", default)]
    relaxation: RelaxationSection,
    #[serde(default)]
    solver: BTreeMap<String, Spanned<SolverEntry>>,
    #[serde(default)]
    output: OutputSection,
    validation: Option<ValidationSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowPhysics {
    kind: Spanned<String>,
    nu: Spanned<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowBoundary {
    #[serde(rename = "U")]
    u: Spanned<PatchEntry>,
    p: Spanned<PatchEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchEntry {
    #[serde(rename = "type")]
    kind: Spanned<String>,
    value: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FlowSchemes {
    div: Option<Spanned<String>>,
    laplacian: Option<Spanned<String>>,
    grad: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SimpleSection {
    #[serde(rename = "nNonOrthogonalCorrectors")]
    n_non_orth_correctors: Option<Spanned<usize>>,
    #[serde(default)]
    consistent: bool,
    #[serde(rename = "explicitStress", default)]
    explicit_stress: bool,
    #[serde(rename = "pRefCell", default)]
    p_ref_cell: usize,
    #[serde(rename = "pRefValue", default)]
    p_ref_value: f64,
    #[serde(rename = "maxIterations")]
    max_iterations: Option<usize>,
    #[serde(rename = "residualControl")]
    residual_control: Option<ResidualSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResidualSection {
    #[serde(rename = "U", default)]
    u: f64,
    #[serde(default)]
    p: f64,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RelaxationSection {
    #[serde(rename = "U")]
    u: Option<Spanned<f64>>,
    p: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidationSection {
    case: Spanned<String>,
}

/// Outer iterations when `SIMPLE.maxIterations` is not given.
const DEFAULT_MAX_ITERATIONS: usize = 1000;

/// A flow case, read and checked.
#[derive(Clone, Debug)]
pub struct FlowSetup {
    pub origin: String,
    pub case_dir: PathBuf,
    pub mesh: MeshSource,
    pub settings: SimpleSettings,
    pub max_iterations: usize,
    /// Per named patch: velocity and pressure conditions, and where they were given.
    pub boundary: Vec<(String, VelocityCondition, BoundaryCondition, String)>,
    pub default_boundary: Option<(VelocityCondition, BoundaryCondition)>,
    /// The pressure solver (`solver.p`; PCG with DIC by default).
    pub pressure_solver: LinearSolver,
    pub output_dir: PathBuf,
    /// The validation case named in `[validation]`.
    pub validation: Option<String>,
    /// Initial cell velocities and pressures (OpenFOAM's `0/U`, `0/p`); zero when `None`.
    pub initial: Option<(Vec<Vec3>, Vec<f64>)>,
    /// Write the series `output_dir/NAME.pvd` (one step: the last
    /// iteration) in `vtk_encoding` (the residual plot is always written).
    pub vtk: bool,
    pub vtk_encoding: crate::io::vtk::VtkEncoding,
    /// OpenFOAM time directories `<iteration>/U`, `p`, `phi` in the case
    /// directory (`[output] formats = ["vtk", "foam"]`; always for OpenFOAM cases).
    pub foam_output: Option<FoamOutput>,
}

/// When and how a flow case writes OpenFOAM time directories.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FoamOutput {
    /// Every this many outer iterations (`writeInterval`); the last is always written.
    pub interval: usize,
    /// Format and precision (the dimensions are set per field).
    pub options: FoamWriteOptions,
}

/// Whether `case_dir` holds a `case.toml` whose `physics.kind` is "simple",
/// or is an OpenFOAM simpleFoam case ([`super::simple_foam::is_simple_foam_case`]).
pub fn is_flow_case(case_dir: &Path) -> bool {
    if !case_dir.join(CASE_FILE).exists() {
        return super::simple_foam::is_simple_foam_case(case_dir);
    }
    let Ok(text) = crate::limits::read_regular_text(&case_dir.join(CASE_FILE)) else {
        return false;
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return false;
    };
    table
        .get("physics")
        .and_then(|p| p.get("kind"))
        .and_then(|k| k.as_str())
        == Some("simple")
}

/// Reads `case_dir/case.toml` as a flow case, or else the OpenFOAM simpleFoam
/// case in `case_dir` ([`super::simple_foam::read_simple_foam_case`]).
pub fn read_flow_case(case_dir: &Path) -> Result<FlowSetup, CaseError> {
    if !case_dir.join(CASE_FILE).exists() && case_dir.join("system/controlDict").exists() {
        return super::simple_foam::read_simple_foam_case(case_dir).map(|case| case.setup);
    }
    let file = case_dir.join(CASE_FILE);
    let text = crate::limits::read_regular_text(&file)
        .map_err(|e| CaseError::invalid(format!("{}: {e}", file.display())))?;
    let src = Source {
        text: &text,
        file: &file,
    };
    let case: FlowFile =
        toml::from_str(&text).map_err(|e| src.error(e.span().unwrap_or(0..0), e.message()))?;
    if case.physics.kind.get_ref() != "simple" {
        return Err(src.error(
            case.physics.kind.span(),
            "physics.kind must be \"simple\" in a flow case",
        ));
    }
    let nu = *case.physics.nu.get_ref();
    if !(nu.is_finite() && nu > 0.0) {
        return Err(src.error(
            case.physics.nu.span(),
            format!("physics.nu is {nu}; the viscosity must be positive"),
        ));
    }
    let mut settings = SimpleSettings::new(nu);
    let schemes = &case.schemes;
    if let Some(div) = &schemes.div {
        settings.convection = Convection::from_foam(div.get_ref())
            .map_err(|e| src.error(div.span(), format!("schemes.div: {e}")))?;
    }
    let laplacian = schemes.laplacian.as_ref();
    let grad = schemes.grad.as_ref();
    let read = Schemes::from_foam(
        laplacian.map_or("Gauss linear corrected", |s| s.get_ref()),
        grad.map_or("Gauss linear", |s| s.get_ref()),
    )
    .map_err(|e| {
        let at = laplacian.or(grad).map_or(0..0, |s| s.span());
        src.error(at, format!("schemes: {e}"))
    })?;
    settings.set_schemes(read);
    let simple = &case.simple;
    if let Some(n) = &simple.n_non_orth_correctors {
        settings.n_non_orth_correctors = check_non_orth_correctors(*n.get_ref())
            .map_err(|e| src.error(n.span(), format!("simple.{e}")))?;
    }
    settings.consistent = simple.consistent;
    // Off unless asked: the device SIMPLE loop has no kernel for it, and
    // native cases keep their momentum predictor on the GPU.
    settings.explicit_stress = simple.explicit_stress;
    settings.p_ref_cell = simple.p_ref_cell;
    settings.p_ref_value = simple.p_ref_value;
    if let Some(r) = &simple.residual_control {
        settings.residual_control = ResidualControl { u: r.u, p: r.p };
    }
    for (name, given, target) in [
        ("U", &case.relaxation.u, &mut settings.relaxation_u),
        ("p", &case.relaxation.p, &mut settings.relaxation_p),
    ] {
        if let Some(alpha) = given {
            if !(*alpha.get_ref() > 0.0 && *alpha.get_ref() <= 1.0) {
                return Err(src.error(
                    alpha.span(),
                    format!("relaxationFactors.{name} must be in (0, 1]"),
                ));
            }
            *target = *alpha.get_ref();
        }
    }
    let mut pressure_solver = LinearSolver::default();
    for (name, entry) in &case.solver {
        match name.as_str() {
            "p" => pressure_solver = src.solver(entry.get_ref(), "p", pressure_solver)?,
            "U" => {
                let base = LinearSolver {
                    smoother: Some(SmootherSettings::new(SmootherKind::GaussSeidel(
                        Sweep::Symmetric,
                    ))),
                    ..LinearSolver::default()
                };
                let solver = src.solver(entry.get_ref(), "U", base)?;
                settings.momentum = momentum_solver(solver)
                    .map_err(|e| src.error(entry.span(), format!("solver.U: {e}")))?;
            }
            other => {
                return Err(src.error(
                    entry.span(),
                    format!("solver.{other}: a flow case has solver.U and solver.p only"),
                ))
            }
        }
    }
    let mut boundary = Vec::new();
    let mut default_boundary = None;
    for (patch, entry) in &case.boundary {
        let u = velocity_condition(&src, patch, entry.get_ref().u.get_ref())?;
        let p = pressure_condition(&src, patch, entry.get_ref().p.get_ref())?;
        if patch == "default" {
            default_boundary = Some((u, p));
        } else {
            boundary.push((patch.clone(), u, p, src.position(entry.span())));
        }
    }
    let output = src.output(&case.output)?;
    let max_iterations = simple.max_iterations.unwrap_or(DEFAULT_MAX_ITERATIONS);
    if max_iterations as f64 > MAX_TIME_STEPS {
        return Err(CaseError::invalid(format!(
            "{}: simple.maxIterations {max_iterations} is more than the {} allowed",
            file.display(),
            format_g(MAX_TIME_STEPS)
        )));
    }
    Ok(FlowSetup {
        origin: file.display().to_string(),
        case_dir: case_dir.to_path_buf(),
        mesh: src.mesh_source(&case.mesh, case_dir)?,
        settings,
        max_iterations,
        boundary,
        default_boundary,
        pressure_solver,
        output_dir: case_dir.join(&output.directory),
        validation: case.validation.map(|v| v.case.into_inner()),
        initial: None,
        vtk: output.formats.contains(&OutputFormat::Vtk),
        vtk_encoding: output.vtk_encoding,
        foam_output: output
            .formats
            .contains(&OutputFormat::Foam)
            .then_some(FoamOutput {
                // Not every outer iteration unless asked: only the last.
                interval: match case.output.interval {
                    Some(_) => output.interval,
                    None => usize::MAX,
                },
                options: output.foam,
            }),
    })
}

/// The momentum solver from the linear solver settings of U: a Krylov
/// method (PBiCGStab, GMRES) or a smoother that works on a nonsymmetric
/// matrix; the message says what to use instead.
pub(super) fn momentum_solver(solver: LinearSolver) -> Result<MomentumSolver, String> {
    if let Some(method) = solver.krylov {
        return Ok(MomentumSolver {
            controls: solver.controls,
            krylov: Some(method),
            preconditioner: solver.preconditioner,
            ..MomentumSolver::default()
        });
    }
    let Some(smoother) = solver.smoother else {
        return Err(
            "the momentum matrix is not symmetric, so PCG cannot solve it; use \
                    PBiCGStab or GMRES, or smoothSolver with a Jacobi or Gauss-Seidel smoother"
                .into(),
        );
    };
    if smoother.needs_symmetric_matrix() {
        return Err(format!(
            "the {smoother} smoother needs a symmetric matrix; the momentum matrix is not (use \
             Jacobi or Gauss-Seidel)"
        ));
    }
    Ok(MomentumSolver {
        smoother,
        controls: solver.controls,
        ..MomentumSolver::default()
    })
}

/// A number or an array of three numbers, as a velocity.
fn vector_value(src: &Source, value: &Spanned<toml::Value>, key: &str) -> Result<Vec3, CaseError> {
    let number = |v: &toml::Value| match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        _ => None,
    };
    match value.get_ref() {
        toml::Value::Array(items) if items.len() == 3 => {
            let v: Option<Vec<f64>> = items.iter().map(number).collect();
            v.map(|v| Vec3::new(v[0], v[1], v[2]))
        }
        _ => None,
    }
    .ok_or_else(|| {
        src.error(
            value.span(),
            format!("{key} must be three finite numbers [x, y, z]"),
        )
    })
}

/// The value of the condition `entry` (`key` in errors), which its kind
/// takes or not (`takes_value`): an error where a value is given that the
/// kind does not take, or where one it needs is missing.
fn given_value<'e>(
    src: &Source,
    key: &str,
    entry: &'e PatchEntry,
    takes_value: bool,
) -> Result<Option<&'e Spanned<toml::Value>>, CaseError> {
    let kind = entry.kind.get_ref();
    match (&entry.value, takes_value) {
        (Some(v), false) => Err(src.error(
            v.span(),
            format!("{key}: a {kind} condition takes no value"),
        )),
        (None, true) => Err(src.error(entry.kind.span(), format!("{key}: {kind} needs a value"))),
        (value, _) => Ok(value.as_ref()),
    }
}

fn velocity_condition(
    src: &Source,
    patch: &str,
    entry: &PatchEntry,
) -> Result<VelocityCondition, CaseError> {
    let key = format!("boundary.{patch}.U");
    let kind = entry.kind.get_ref().as_str();
    let takes_value = matches!(kind, "fixedValue" | "movingWallVelocity");
    let value = given_value(src, &key, entry, takes_value)?;
    Ok(match kind {
        "fixedValue" | "movingWallVelocity" => {
            let value = value.expect("checked above");
            VelocityCondition::FixedValue(VectorValues::Uniform(vector_value(src, value, &key)?))
        }
        "noSlip" => VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::zeros())),
        "zeroGradient" => VelocityCondition::ZeroGradient,
        "symmetry" | "symmetryPlane" => VelocityCondition::Symmetry,
        "empty" => VelocityCondition::Empty,
        other => {
            return Err(src.error(
                entry.kind.span(),
                format!(
                    "{key}: unknown velocity condition '{other:.80}' (expected fixedValue, \
                     movingWallVelocity, noSlip, zeroGradient, symmetry or empty)"
                ),
            ))
        }
    })
}

fn pressure_condition(
    src: &Source,
    patch: &str,
    entry: &PatchEntry,
) -> Result<BoundaryCondition, CaseError> {
    let key = format!("boundary.{patch}.p");
    let kind = entry.kind.get_ref().as_str();
    // Only fixedValue takes a value, and it needs one.
    if let Some(v) = given_value(src, &key, entry, kind == "fixedValue")? {
        return match v.get_ref() {
            toml::Value::Integer(i) => Ok(BoundaryCondition::FixedValue(PatchValues::Uniform(
                *i as f64,
            ))),
            toml::Value::Float(f) if f.is_finite() => {
                Ok(BoundaryCondition::FixedValue(PatchValues::Uniform(*f)))
            }
            _ => Err(src.error(
                v.span(),
                format!("{key}: the value must be a finite number"),
            )),
        };
    }
    match kind {
        "zeroGradient" | "symmetry" | "symmetryPlane" => Ok(BoundaryCondition::ZeroGradient),
        "empty" => Ok(BoundaryCondition::Empty),
        other => Err(src.error(
            entry.kind.span(),
            format!(
                "{key}: unknown pressure condition '{other:.80}' (expected zeroGradient, \
                 fixedValue, symmetry or empty)"
            ),
        )),
    }
}

/// The pressure solves of a flow run on `device`: each with `solver`, or
/// with `last_solver` for the last solve of a time step (PISO's `pFinal`),
/// its wall time added to `seconds` (read while the solves are held).
pub(super) fn timed_pressure_solves<'a, 'g: 'a>(
    solves: &'a mut LinearSolves<'g>,
    [solver, last_solver]: [&'a LinearSolver; 2],
    seconds: &'a Cell<f64>,
) -> impl FnMut(&Csr, &[f64], &mut [f64], bool) -> Result<SolverPerformance, SolveError> + use<'a, 'g>
{
    move |a, b, x, last| {
        let solver = if last { last_solver } else { solver };
        let _solve = solves.device().phase(Phase::Solve);
        let start = Instant::now();
        let perf = solves.solve(solver, a, b, x, "p");
        seconds.set(seconds.get() + start.elapsed().as_secs_f64());
        perf
    }
}

/// The mean wall time of an outer iteration and of its parts, where the
/// pressure equation's share is the point of the GPU (the benchmark's table).
fn log_phase_times(simple: &Simple, pressure_solve_seconds: f64) {
    let iterations = simple.iteration().max(1) as f64;
    let t = simple.phase_seconds();
    let ms = |s: f64| format!("{:.2} ms", 1e3 * s / iterations);
    let total = t.total();
    log::info!(
        "Time per outer iteration (mean of {}): {} = momentum {} + Rhie-Chow fluxes {} + \
         pressure equation {} (solves {}, {:.0} % of the iteration) + corrections {}",
        simple.iteration(),
        ms(total),
        ms(t.momentum),
        ms(t.fluxes),
        ms(t.pressure),
        ms(pressure_solve_seconds),
        if total > 0.0 {
            100.0 * pressure_solve_seconds / total
        } else {
            0.0
        },
        ms(t.corrections)
    );
}

/// The device loop for the pressure half when the GPU can run the p solver
/// on the device-assembled matrix (PCG, Jacobi, none or AMG after the
/// device's mapping: GAMG and PCG with GAMG run AMG-PCG, as on host-assembled
/// systems) and the mesh; else `None`, logged: the pressure matrix is then
/// assembled on the host and solved on the GPU.
fn device_simple<'g>(
    gpu: &'g Gpu,
    simple: &mut Simple,
    solver: &LinearSolver,
    device: Device,
) -> Result<Option<DeviceSimple<'g>>, CaseError> {
    let pressure = match device_pressure_solver(solver, device) {
        Ok(pressure) => pressure,
        Err(why) => {
            log::warn!("p: {why}; the pressure equation is assembled on the CPU each iteration");
            return Ok(None);
        }
    };
    match DeviceSimple::new(gpu, simple, pressure) {
        Ok(device_loop) => {
            log::info!(
                "pressure equation assembled and solved on the GPU (PCG, {}), with the flux \
                 and velocity corrections",
                pressure.describe()
            );
            Ok(Some(device_loop))
        }
        Err(AssemblyError::Unsupported(msg)) => {
            log::warn!("{msg}: the pressure equation is assembled on the CPU each iteration");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// `solver` as the device runs it on the matrix it assembles: PCG with
/// Jacobi, none, AMG or a polynomial (Gershgorin bound) after the device's
/// mapping (`Device::adapt`: DIC and GAMG given without GPU keys run their
/// GPU defaults); `Err`: why it cannot.
pub(super) fn device_pressure_solver(
    solver: &LinearSolver,
    device: Device,
) -> Result<DevicePressureSolver, String> {
    let used = device.adapt(solver);
    let amg = match used.preconditioner {
        Preconditioner::Amg(settings)
            if used.krylov.is_none()
                && used.smoother.is_none()
                && used.equilibration == EquilibrationKind::None =>
        {
            Some(settings)
        }
        _ => None,
    };
    if amg.is_none() {
        if let Some(why) = device.needs_host_assembly(solver) {
            return Err(why);
        }
    }
    let polynomial = match used.preconditioner {
        Preconditioner::Polynomial(settings) if amg.is_none() => Some(settings),
        _ => None,
    };
    Ok(DevicePressureSolver {
        jacobi: used.preconditioner == PreconditionerKind::Jacobi,
        controls: used.controls,
        amg,
        polynomial,
    })
}

/// The device loop's time per outer iteration by part (each synchronised).
fn log_device_phase_times(simple: &Simple, device_loop: &DeviceSimple) {
    let iterations = simple.iteration().max(1) as f64;
    let t = device_loop.phase_seconds();
    let ms = |s: f64| format!("{:.2} ms", 1e3 * s / iterations);
    // AMG- or polynomial-PCG: the value re-set-ups per outer iteration
    // after the first, the one set-up apart, under the preconditioner's name.
    let set_up = match device_loop.pressure_solver().preconditioner_name() {
        Some(name) if t.preconditioner_setup > 0.0 => format!(
            " + {name} re-set-up {:.2} ms (set-up once {:.2} ms)",
            1e3 * t.preconditioner_update / (iterations - 1.0).max(1.0),
            1e3 * t.preconditioner_setup
        ),
        _ => String::new(),
    };
    if device_loop.has_device_momentum() {
        log::info!(
            "GPU per outer iteration: momentum assembly {} + momentum solves {} + Rhie-Chow {} + \
             pressure assembly {}{set_up} + pressure solves {} + corrections {} (fields read back: \
             {})",
            ms(t.momentum_assembly),
            ms(t.momentum_solve),
            ms(t.fluxes),
            ms(t.assembly),
            ms(t.solve),
            ms(t.corrections),
            ms(t.download)
        );
    } else {
        log::info!(
            "GPU pressure half per outer iteration: uploads {} + pressure \
             assembly {}{set_up} + pressure solves {} + corrections {} + download {}",
            ms(t.upload),
            ms(t.assembly),
            ms(t.solve),
            ms(t.corrections),
            ms(t.download)
        );
    }
}

/// What a flow run ended with.
#[derive(Debug)]
pub struct FlowRunSummary {
    pub iterations: usize,
    pub converged: bool,
    /// The validation table, and whether it passed, where the case asks for one.
    pub validation: Option<(String, bool)>,
    /// The device loop's time by part, where it ran (`--device gpu`).
    pub device_phases: Option<DevicePhaseSeconds>,
    /// The name of the pressure preconditioner the device loop set up
    /// (`AMG`, a polynomial's kind), whose set-up and re-set-ups
    /// `device_phases` counts; `None` without one.
    pub device_preconditioner: Option<&'static str>,
    /// Linear-solver iterations of the pressure solves, summed over the run.
    pub p_iterations: usize,
}

/// The velocity and pressure condition of every patch of `mesh`, in patch
/// order: the one given by name, `empty` on empty patches, else `default`.
pub(super) fn patch_conditions(
    origin: &str,
    boundary: &[(String, VelocityCondition, BoundaryCondition, String)],
    default: Option<&(VelocityCondition, BoundaryCondition)>,
    mesh: &Mesh,
) -> Result<(Vec<VelocityCondition>, Vec<BoundaryCondition>), CaseError> {
    let mut velocity = Vec::new();
    let mut pressure = Vec::new();
    for (given, ..) in boundary {
        if mesh.patch(given).is_none() {
            return Err(CaseError::invalid(format!(
                "{origin}: boundary condition for patch '{given}', but the mesh has no such patch"
            )));
        }
    }
    for patch in mesh.patches() {
        let given = boundary
            .iter()
            .find(|(name, ..)| *name == patch.name)
            .map(|(_, u, p, _)| (u.clone(), p.clone()))
            .or_else(|| {
                (patch.kind == PatchKind::Empty)
                    .then_some((VelocityCondition::Empty, BoundaryCondition::Empty))
            })
            .or_else(|| default.cloned())
            .ok_or_else(|| {
                CaseError::invalid(format!(
                    "{origin}: patch '{}' has no boundary condition; give one for it or a default",
                    patch.name
                ))
            })?;
        velocity.push(given.0);
        pressure.push(given.1);
    }
    Ok((velocity, pressure))
}

/// Runs a flow case on `device` (the pressure solves; see the module
/// documentation), logging like simpleFoam; writes the fields and the
/// residual plot.
pub fn run_flow_case(setup: &FlowSetup, device: Device) -> Result<FlowRunSummary, CaseError> {
    let clock = Instant::now();
    let mesh = setup.mesh.load()?;
    run_flow_case_with_mesh(setup, &mesh, device, clock)
}

/// [`run_flow_case`] on `mesh`, the mesh of `setup.mesh` already loaded
/// (as reading an OpenFOAM case does); `clock` started with the run.
pub fn run_flow_case_with_mesh(
    setup: &FlowSetup,
    mesh: &Mesh,
    device: Device,
    clock: Instant,
) -> Result<FlowRunSummary, CaseError> {
    let geometry = timings::timed(Phase::Geometry, || mesh.geometry())?;
    let n = mesh.n_cells();
    let (velocity, pressure) = patch_conditions(
        &setup.origin,
        &setup.boundary,
        setup.default_boundary.as_ref(),
        mesh,
    )?;
    let flow_error = |e: FlowError| CaseError::from_flow(&setup.origin, e);
    let (u0, p0) = match &setup.initial {
        Some((u, p)) if u.len() == n && p.len() == n => (u.clone(), p.clone()),
        Some((u, p)) => {
            return Err(CaseError::invalid(format!(
                "{}: {} initial velocities and {} pressures for a mesh of {n} cells",
                setup.origin,
                u.len(),
                p.len()
            )))
        }
        None => (vec![Vec3::zeros(); n], vec![0.0; n]),
    };
    let assembly = timings::enter(Phase::Assembly);
    let mut simple = Simple::new(
        mesh,
        &geometry,
        setup.settings,
        &velocity,
        pressure.clone(),
        u0,
        p0,
    )
    .map_err(flow_error)?;
    drop(assembly);
    let write_foam = |simple: &Simple, options: &FoamWriteOptions| -> Result<(), CaseError> {
        let _output = timings::enter(Phase::Output);
        let paths = crate::flow::output::write_time_directory(
            &setup.case_dir,
            simple,
            &velocity,
            &pressure,
            options,
        )?;
        for path in paths {
            log::info!("Writing {}", path.display());
        }
        Ok(())
    };
    let mut write_error = None;
    let momentum = setup.settings.momentum;
    let gpu_solves = match (device, momentum.krylov) {
        (Device::Gpu(gpu), Some(method)) => {
            let p = gpu_krylov_preconditioner(&momentum.preconditioner);
            if let Some((_, message)) =
                registry::gpu_fallback(&momentum.preconditioner, Role::Krylov)
            {
                log::info!("U: {message}");
            }
            log::info!("pressure and momentum ({method}, {p}) solves on the GPU");
            let mut momentum_solver = GpuSolver::new(gpu);
            let controls = momentum.controls;
            simple.set_momentum_solve(Box::new(move |a, b, x, field| {
                let options = GpuSolveOptions::default();
                momentum_solver.solve_krylov_preconditioned(
                    &method,
                    &p,
                    DeviceSolve::new(a, b, x, &controls, &options).named(field),
                )
            }));
            Some(GpuSolves::new(gpu))
        }
        (Device::Gpu(gpu), None) => {
            log::info!("pressure on the GPU; momentum (smoothSolver) on the CPU");
            Some(GpuSolves::new(gpu))
        }
        (Device::Gpus(set), _) => {
            log::info!(
                "pressure split over {} GPUs; momentum on the CPU",
                set.gpus.len()
            );
            set.gpus.first().map(GpuSolves::new)
        }
        (Device::Cpu | Device::Distributed(_), _) => None,
    };
    let solver = setup.pressure_solver;
    log_gpu_mapping(device, "p", &[&solver]);
    let mut solves = LinearSolves::new(device, gpu_solves, gamg_cache(mesh, &geometry, &[&solver]));
    let pressure_solve_seconds = Cell::new(0.0);
    let solve_pressure: &mut PressureSolve<'_> =
        &mut timed_pressure_solves(&mut solves, [&solver, &solver], &pressure_solve_seconds);
    let mut device_loop = match device {
        Device::Gpu(gpu) => timings::timed(Phase::DeviceSetup, || {
            device_simple(gpu, &mut simple, &solver, device)
        })?,
        Device::Cpu | Device::Distributed(_) | Device::Gpus(_) => None,
    };
    let mut last_written = 0;
    let after_each = |simple: &Simple, report: &IterationReport| {
        super::log_execution_time(clock);
        match &setup.foam_output {
            Some(out) if report.iteration.is_multiple_of(out.interval) => {
                last_written = report.iteration;
                write_foam(simple, &out.options).map_err(|e| {
                    let msg = e.to_string();
                    write_error = Some(e);
                    FlowError::Invalid(msg)
                })
            }
            _ => Ok(()),
        }
    };
    let outer_iterations = device.phase(Phase::Assembly);
    let run = match &mut device_loop {
        Some(device_loop) => device_loop
            .run(
                &mut simple,
                setup.max_iterations,
                |iteration| {
                    setup
                        .foam_output
                        .as_ref()
                        .is_some_and(|out| iteration.is_multiple_of(out.interval))
                },
                after_each,
            )
            .map_err(|e| match e {
                DeviceFlowError::Flow(e) => flow_error(e),
                DeviceFlowError::Assembly(e) => e.into(),
            }),
        None => simple
            .run(setup.max_iterations, solve_pressure, after_each)
            .map_err(flow_error),
    };
    drop(outer_iterations);
    if let Some(device_loop) = &device_loop {
        // The device loop times its parts itself, synchronised: its solves,
        // preconditioner set-ups and read-backs leave the assembly of the
        // outer iterations.
        let d = device_loop.phase_seconds();
        timings::reassign(
            Phase::Assembly,
            Phase::Solve,
            d.solve + d.preconditioner_update,
        );
        timings::reassign(Phase::Assembly, Phase::DeviceSetup, d.preconditioner_setup);
        timings::reassign(Phase::Assembly, Phase::Output, d.download);
    }
    if let Some(e) = write_error {
        return Err(e);
    }
    let reports = run?;
    let solve_seconds = device_loop
        .as_ref()
        .map_or(pressure_solve_seconds.get(), |d| d.phase_seconds().solve);
    log_phase_times(&simple, solve_seconds);
    if let Some(device_loop) = &device_loop {
        log_device_phase_times(&simple, device_loop);
    }
    if let Some(out) = &setup.foam_output {
        if last_written != simple.iteration() {
            write_foam(&simple, &out.options)?;
        }
    }
    let converged = reports.last().is_some_and(|r| r.converged);
    if !converged {
        log::warn!(
            "SIMPLE did not reach the residual control in {} iterations",
            reports.len()
        );
    }
    let name = crate::io::vtk::series_name_for(&setup.case_dir);
    let output = timings::enter(Phase::Output);
    crate::io::create_dir_all(&setup.output_dir)?;
    if setup.vtk {
        let (pvd, bytes) = crate::flow::output::write_series(
            &setup.output_dir,
            &name,
            &simple,
            setup.vtk_encoding,
        )?;
        log::info!(
            "Wrote 1 VTK step, {:.1} MB ({}): {}",
            bytes as f64 / 1e6,
            setup.vtk_encoding,
            pvd.display()
        );
    }
    let png = setup.output_dir.join(format!("{name}_residuals.png"));
    crate::flow::output::write_residual_plot(&reports, &name, &png)
        .map_err(|e| CaseError::invalid(e.to_string()))?;
    log::info!("wrote {}", png.display());
    drop(output);
    let validation = match &setup.validation {
        None => None,
        Some(kind) => {
            let case = FlowCase::from_mesh(kind, n, setup.settings.nu).map_err(flow_error)?;
            let tables = compare(case, &simple).map_err(flow_error)?;
            let deviation = tables
                .iter()
                .map(|(_, rows)| crate::flow::reference::max_deviation(rows))
                .fold(0.0, f64::max);
            let passed = converged && deviation <= case.tolerance();
            let mut text = Tables(&tables).to_string();
            text += &format!(
                "{}: max deviation {:.3e}, tolerance {:.3e}: {}\n",
                case.name(),
                deviation,
                case.tolerance(),
                if passed { "PASS" } else { "FAIL" }
            );
            Some((text, passed))
        }
    };
    Ok(FlowRunSummary {
        iterations: reports.len(),
        converged,
        validation,
        device_phases: device_loop.as_ref().map(DeviceSimple::phase_seconds),
        device_preconditioner: device_loop
            .as_ref()
            .and_then(|d| d.pressure_solver().preconditioner_name()),
        p_iterations: reports
            .iter()
            .flat_map(|r| &r.p_solves)
            .map(|p| p.iterations)
            .sum(),
    })
}
