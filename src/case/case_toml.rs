//! The native case file `case.toml` → [`CaseSetup`]. Every error names the
//! file, line and column (and the key where one is at fault).
//!
//! ```toml
//! [mesh]
//! source = "box:32x32x32:tet:perturb=0.2"  # generator spec, or a path relative to the
//!                                          # case directory (OpenFOAM case/polyMesh dir, .msh)
//! [physics]
//! kind = "laplacian"          # default
//! field = "T"                 # default "T"
//! gamma = 1.0                 # number or expression of x, y, z, t (default 1)
//! source = "3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z)"   # Su, default 0
//! implicitSource = -1.0       # Sp (OpenFOAM semiImplicitSource), optional
//! initial = 0                 # default 0
//! exact = "sin(pi*x)*sin(pi*y)*sin(pi*z)"           # optional: error norms and field
//!
//! [boundary.xmin]             # one table per patch; [boundary.default] for the rest
//! type = "fixedValue"         # fixedValue, zeroGradient, fixedGradient, mixed, empty
//! value = "exact"             # number, expression or "exact"
//! # fixedGradient: gradient = ..; mixed: refValue, refGradient, valueFraction
//!
//! [schemes]
//! laplacian = "Gauss linear corrected"   # OpenFOAM laplacianSchemes words (default)
//! grad = "Gauss linear"                  # or "leastSquares"
//! nNonOrthogonalCorrectors = 0
//!
//! [time]
//! scheme = "steadyState"      # default; maxIterations (100), residualControl (1e-6, 0: off)
//! # scheme = "Euler" with deltaT and endTime
//!
//! [reference]                 # all-Neumann steady problems only
//! type = "zeroMean"           # or "cell" with cell = 0, value = 0.0
//! project = false             # remove an inconsistent source sum instead of refusing
//! tolerance = 1e-9            # |sum of sources| / sum of |sources| counted as consistent
//!
//! [solver.T]                  # and [solver.TFinal] for the last non-orthogonal corrector
//! solver = "PCG"              # or "smoothSolver" (OpenFOAM's: residual checked every
//!                             # nSweeps), or "GAMG" (OpenFOAM's GAMG on the CPU,
//!                             # PCG + AMG on the GPU; docs/src/solvers.md),
//!                             # or "PBiCGStab" / "GMRES" (nonsymmetric matrices;
//!                             # README "Nonsymmetric solvers"; no equilibration)
//! nKrylov = 20                # GMRES: restart length
//! orthogonalisation = "MGS"   # GMRES: MGS or CGS2
//! preconditioningSide = "right" # GMRES: left or right
//! flexible = false            # GMRES: flexible GMRES (right side only)
//! preconditioner = "DIC"      # DIC, FDIC, diagonal, none, or ic0, sgs (default DIC), AMG
//!                             # (or GAMG: one aggregation-AMG cycle), or a
//!                             # symmetric smoother run from 0: symGaussSeidel,
//!                             # multicolourSymGaussSeidel, Jacobi, L1Jacobi, blockJacobi,
//!                             # or a polynomial: Neumann, Chebyshev, leastSquares,
//!                             # or FSAI (factored sparse approximate inverse)
//! degree = 4                  # polynomial (preconditioner or smoother): products by A
//!                             # per application (1..32)
//! eigenBound = "Gershgorin"   # polynomial: upper eigenvalue bound, Gershgorin or Lanczos
//! lanczosSteps = 10           # polynomial: Lanczos steps (implies eigenBound = "Lanczos")
//! eigenRatio = 30.0           # Chebyshev: interval [b/eigenRatio, b]
//! precision = "double"        # polynomial: double, or mixed (polynomial in f32, PCG in f64)
//! fsai = { steps = 10 }       # FSAI preconditioner parameters (README "FSAI"): pattern
//!                             # (adaptive, static), steps, stepSize, epsilon, stop
//!                             # (stagnation, reduction), power, prefilter, postfilter,
//!                             # precision (double, mixed: f32 setup)
//! gamg = { smoother = "GaussSeidel" } # solver GAMG: OpenFOAM's keys (smoother,
//!                             # agglomerator, nCellsInCoarsestLevel, mergeLevels,
//!                             # nPreSweeps, nPostSweeps, nFinestSweeps, scaleCorrection, ...)
//! amg = { cycle = "V" }       # AMG parameters (README "Aggregation AMG"; GAMG's on the GPU): cycle
//!                             # (V, W, K), smoother (Jacobi, L1Jacobi, Chebyshev,
//!                             # multicolourGaussSeidel), sweeps, omega, overCorrection,
//!                             # passes, matchingRounds, maxLevels, coarsestRows,
//!                             # precision (double, mixed: f32 hierarchy and cycle)
//! equilibration = "none"      # PCG: none, jacobi, ruiz[:norm=inf|2][:tol=X][:sweeps=N]:
//!                             # PCG on S A S (the preconditioner acts on it); residuals
//!                             # and tolerances stay those of the original system
//! smoother = "symGaussSeidel" # smoothSolver's: GaussSeidel, backwardGaussSeidel,
//!                             # symGaussSeidel (multicolour… forms), Jacobi, L1Jacobi,
//!                             # blockJacobi, DIC, DICGaussSeidel, Neumann, Chebyshev,
//!                             # leastSquares
//! nSweeps = 1                 # smoother sweeps per residual check / per preconditioning
//! omega = 1.0                 # Jacobi damping
//! colouring = "natural"       # Gauss-Seidel order: natural (CPU; the GPU uses
//!                             # JonesPlassmann), JonesPlassmann, greedy
//! inner = "CG"                # blockJacobi: Jacobi, GaussSeidel, symGaussSeidel, CG
//! innerTolerance = 1e-8       # blockJacobi: relative block residual (0: innerMaxIter steps)
//! innerMaxIter = 100          # blockJacobi: inner steps at most
//! blockSize = 512             # blockJacobi: rows per block (GPU slice height)
//! asynchronous = false        # blockJacobi: update x in place
//! tolerance = 1e-8            # default 1e-6
//! relTol = 0                  # default 0; TFinal entries default to the T entry's values
//! maxIter = 1000              # default 1000
//! minIter = 0                 # default 0
//! ordering = "rcm"            # row ordering of GPU solves: natural, cm, rcm (default), metis
//! deflation = "none"          # PCG and GAMG in distributed runs: none, subdomains (one
//!                             # deflation vector per rank; CPU and GPU ranks)
//!
//! [output]
//! formats = ["vtk", "foam"]   # default ["vtk"]
//! interval = 10               # write every 10th iteration / time step and the last;
//!                             # default: steady the last only, Euler every step
//! directory = "results"       # VTK directory, relative to the case directory;
//!                             # foam time directories go in the case directory
//! vtkFormat = "binary"        # VTK arrays: binary (raw appended, default), zlib
//!                             # (compressed as ParaView does), ascii
//! precision = 17              # OpenFOAM writePrecision (foam format)
//! writeFormat = "ascii"       # or "binary" (foam format)
//! writeCompression = false    # gzip the foam files
//! ```
//!
//! Expressions (grammar in [`super::expr`]) may use x, y, z, t and pi;
//! `"exact"` (fixedValue `value`, mixed `refValue`) stands for `physics.exact`.

use super::expr;
use super::setup::{
    check_non_orth_correctors, check_step_count, BoundarySpec, CaseSetup, LinearSolver,
    OutputFormat, OutputSettings, PatchCondition, Physics, Scalar, SolverSettings, SourceSplit,
    TimeControl,
};
use super::CaseError;
use crate::foam::FoamFormat;
use crate::fvm::{Reference, Schemes, SingularPolicy};
use crate::mesh::MeshSource;
use crate::solve::amg::AmgSettings;
use crate::solve::distributed::Deflation;
use crate::solve::gamg::GamgSettings;
use crate::solve::registry::{self, KeyValues, RegistryError};
use crate::solve::{
    EigenBound, EquilibrationKind, FsaiSettings, KrylovMethod, PolynomialKind, PolynomialSettings,
    Precision, Preconditioner, PreconditionerKind, SmootherKind, SmootherSettings, SolverControls,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::{Spanned, Value};

/// File name of the native case file in a case directory.
pub const CASE_FILE: &str = "case.toml";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    mesh: MeshSection,
    #[serde(default)]
    physics: PhysicsSection,
    #[serde(default)]
    boundary: BTreeMap<String, Spanned<BoundaryEntry>>,
    #[serde(default)]
    schemes: SchemesSection,
    #[serde(default)]
    time: TimeSection,
    reference: Option<ReferenceSection>,
    #[serde(default)]
    solver: BTreeMap<String, Spanned<SolverEntry>>,
    #[serde(default)]
    output: OutputSection,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MeshSection {
    pub(super) source: Spanned<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PhysicsSection {
    kind: Option<Spanned<String>>,
    field: Option<Spanned<String>>,
    gamma: Option<Spanned<Value>>,
    source: Option<Spanned<Value>>,
    #[serde(rename = "implicitSource")]
    implicit_source: Option<Spanned<Value>>,
    initial: Option<Spanned<Value>>,
    exact: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BoundaryEntry {
    #[serde(rename = "type")]
    kind: Spanned<String>,
    value: Option<Spanned<Value>>,
    gradient: Option<Spanned<Value>>,
    #[serde(rename = "refValue")]
    ref_value: Option<Spanned<Value>>,
    #[serde(rename = "refGradient")]
    ref_gradient: Option<Spanned<Value>>,
    #[serde(rename = "valueFraction")]
    value_fraction: Option<Spanned<Value>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SchemesSection {
    laplacian: Option<Spanned<String>>,
    grad: Option<Spanned<String>>,
    #[serde(rename = "nNonOrthogonalCorrectors")]
    n_non_orth_correctors: Option<Spanned<usize>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TimeSection {
    scheme: Option<Spanned<String>>,
    #[serde(rename = "maxIterations")]
    max_iterations: Option<Spanned<usize>>,
    #[serde(rename = "residualControl")]
    residual_control: Option<Spanned<f64>>,
    #[serde(rename = "deltaT")]
    delta_t: Option<Spanned<f64>>,
    #[serde(rename = "endTime")]
    end_time: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReferenceSection {
    #[serde(rename = "type")]
    kind: Spanned<String>,
    cell: Option<Spanned<usize>>,
    value: Option<f64>,
    #[serde(default)]
    project: bool,
    tolerance: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SolverEntry {
    solver: Option<Spanned<String>>,
    preconditioner: Option<Spanned<PreconditionerValue>>,
    smoother: Option<Spanned<String>>,
    amg: Option<Spanned<BTreeMap<String, Value>>>,
    gamg: Option<Spanned<BTreeMap<String, Value>>>,
    fsai: Option<Spanned<BTreeMap<String, Value>>>,
    #[serde(rename = "nSweeps")]
    n_sweeps: Option<Spanned<usize>>,
    omega: Option<Spanned<f64>>,
    colouring: Option<Spanned<String>>,
    inner: Option<Spanned<String>>,
    #[serde(rename = "innerTolerance")]
    inner_tolerance: Option<Spanned<f64>>,
    #[serde(rename = "innerMaxIter")]
    inner_max_iter: Option<Spanned<usize>>,
    #[serde(rename = "blockSize")]
    block_size: Option<Spanned<usize>>,
    asynchronous: Option<Spanned<bool>>,
    degree: Option<Spanned<usize>>,
    #[serde(rename = "eigenBound")]
    eigen_bound: Option<Spanned<String>>,
    #[serde(rename = "lanczosSteps")]
    lanczos_steps: Option<Spanned<usize>>,
    #[serde(rename = "eigenRatio")]
    eigen_ratio: Option<Spanned<f64>>,
    precision: Option<Spanned<String>>,
    equilibration: Option<Spanned<String>>,
    tolerance: Option<f64>,
    #[serde(rename = "relTol")]
    rel_tol: Option<f64>,
    #[serde(rename = "maxIter")]
    max_iter: Option<usize>,
    #[serde(rename = "minIter")]
    min_iter: Option<usize>,
    ordering: Option<Spanned<String>>,
    #[serde(rename = "nKrylov")]
    n_krylov: Option<Spanned<usize>>,
    orthogonalisation: Option<Spanned<String>>,
    #[serde(rename = "preconditioningSide")]
    preconditioning_side: Option<Spanned<String>>,
    flexible: Option<Spanned<bool>>,
    deflation: Option<Spanned<String>>,
}

/// `preconditioner = "DIC"` (the command line's `name:key=value,...` in a
/// string, other keys of the entry beside it), or a table of the name and
/// its keys: `preconditioner = { name = "SSOR", omega = 1.2 }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum PreconditionerValue {
    Spec(String),
    Table(BTreeMap<String, Value>),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputSection {
    formats: Option<Vec<Spanned<String>>>,
    pub(super) interval: Option<Spanned<usize>>,
    directory: Option<PathBuf>,
    precision: Option<Spanned<usize>>,
    #[serde(rename = "writeFormat")]
    write_format: Option<Spanned<String>>,
    #[serde(rename = "writeCompression", default)]
    write_compression: bool,
    #[serde(rename = "vtkFormat")]
    vtk_format: Option<Spanned<String>>,
}

/// Steady-state iterations when `maxIterations` is not given.
const DEFAULT_MAX_ITERATIONS: usize = 100;
/// Steady-state residual control when `residualControl` is not given.
const DEFAULT_RESIDUAL_CONTROL: f64 = 1e-6;

/// Reads `case_dir/case.toml`.
pub fn read_case(case_dir: &Path) -> Result<CaseSetup, CaseError> {
    let file = case_dir.join(CASE_FILE);
    let text = crate::limits::read_regular_text(&file)
        .map_err(|e| CaseError::invalid(format!("{}: {e}", file.display())))?;
    parse_case(&text, &file, case_dir)
}

/// Parses the text of a case file; `file` is named in errors, `case_dir`
/// anchors relative paths.
pub fn parse_case(text: &str, file: &Path, case_dir: &Path) -> Result<CaseSetup, CaseError> {
    let src = Source { text, file };
    let case: CaseFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let msg = e.message().trim_end();
        match src.key_at(span.start) {
            Some(key) if !msg.contains(&key) => src.error(span, format!("{key}: {msg}")),
            _ => src.error(span, msg.to_string()),
        }
    })?;

    let mesh = src.mesh_source(&case.mesh, case_dir)?;

    let physics = &case.physics;
    if let Some(kind) = &physics.kind {
        if kind.get_ref() != "laplacian" {
            return Err(src.error(
                kind.span(),
                format!(
                    "physics.kind '{}' is not supported (only \"laplacian\")",
                    kind.get_ref()
                ),
            ));
        }
    }
    let field = match &physics.field {
        Some(f) if !is_field_name(f.get_ref()) => {
            return Err(src.error(
                f.span(),
                format!(
                    "physics.field '{}' must be a word of letters, digits and '_' \
                     (it names files)",
                    f.get_ref()
                ),
            ))
        }
        Some(f) => f.get_ref().clone(),
        None => "T".to_string(),
    };
    let scalar = |value: &Option<Spanned<Value>>, key: &str, default: f64| match value {
        Some(v) => src.scalar(v, key, None),
        None => Ok(Scalar::Uniform(default)),
    };
    let exact = physics
        .exact
        .as_ref()
        .map(|v| src.scalar(v, "physics.exact", None))
        .transpose()?;
    let gamma = scalar(&physics.gamma, "physics.gamma", 1.0)?;
    // A constant is refused here, at its line; expressions are checked per cell.
    if let (Some(given), Scalar::Uniform(g)) = (&physics.gamma, &gamma) {
        if *g <= 0.0 {
            return Err(src.error(
                given.span(),
                format!("physics.gamma is {g}; the diffusivity must be positive"),
            ));
        }
    }
    let source = scalar(&physics.source, "physics.source", 0.0)?;
    let implicit_source = physics
        .implicit_source
        .as_ref()
        .map(|v| src.scalar(v, "physics.implicitSource", None))
        .transpose()?;
    let initial = scalar(&physics.initial, "physics.initial", 0.0)?;

    let mut boundary = Vec::new();
    let mut default_boundary = None;
    for (patch, entry) in &case.boundary {
        let spec = src.boundary(entry.get_ref(), patch, exact.as_ref())?;
        if patch == "default" {
            default_boundary = Some(spec);
        } else {
            boundary.push(PatchCondition {
                patch: patch.clone(),
                spec,
                origin: src.position(entry.span()),
            });
        }
    }

    let schemes = src.schemes(&case.schemes)?;
    let time = src.time(&case.time)?;
    let singular = case
        .reference
        .as_ref()
        .map(|r| src.reference(r))
        .transpose()?
        .unwrap_or_default();
    let solver = src.solvers(&case.solver, &field)?;
    let mut output = src.output(&case.output)?;
    if case.output.interval.is_none() {
        // As OpenFOAM's steady solvers: results at the end, not every
        // iteration, unless an interval is given; transient runs every step.
        output.interval = match time {
            TimeControl::Steady { .. } => usize::MAX,
            TimeControl::Euler { .. } => 1,
        };
    }

    Ok(CaseSetup {
        origin: file.display().to_string(),
        case_dir: case_dir.to_path_buf(),
        mesh,
        physics: Physics::Laplacian,
        field,
        gamma,
        source,
        implicit_source,
        source_split: SourceSplit::Stable,
        boundary,
        default_boundary,
        initial,
        schemes,
        n_non_orth_correctors: src.non_orth_correctors(&case.schemes)?,
        time,
        singular,
        solver,
        output,
        exact,
    })
}

fn is_field_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The case file's text and name, to turn byte spans into `file:line:col` errors.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    pub(super) file: &'a Path,
}

impl Source<'_> {
    /// 1-based line and column (in characters) of byte offset `at`.
    fn line_column(&self, at: usize) -> (usize, usize) {
        let before = &self.text[..at.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    pub(super) fn position(&self, span: Range<usize>) -> String {
        let (line, column) = self.line_column(span.start);
        format!("{}:{line}:{column}", self.file.display())
    }

    /// The dotted key (`table.key`) whose value starts on the line of byte
    /// offset `at`, for serde's type errors, which name only the type.
    fn key_at(&self, at: usize) -> Option<String> {
        let before = &self.text[..at.min(self.text.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let (key, _) = before[line_start..].split_once('=')?;
        let key = key.trim().trim_matches('"');
        if key.is_empty() || key.starts_with('#') {
            return None;
        }
        let table = before[..line_start].lines().rev().find_map(|l| {
            let l = l.trim();
            let header = l.strip_prefix('[')?.split(']').next()?;
            Some(header.trim_matches('[').trim().to_string())
        });
        Some(match table {
            Some(t) if !t.is_empty() => format!("{t}.{key}"),
            _ => key.to_string(),
        })
    }

    /// `mesh.source`: a generator spec, or a path relative to `case_dir`.
    pub(super) fn mesh_source(
        &self,
        section: &MeshSection,
        case_dir: &Path,
    ) -> Result<MeshSource, CaseError> {
        let spec = section.source.get_ref();
        if spec.starts_with("box:") {
            MeshSource::parse(spec)
        } else {
            MeshSource::parse(&case_dir.join(spec).to_string_lossy())
        }
        .map_err(|e| self.error(section.source.span(), format!("mesh.source: {e}")))
    }

    pub(super) fn error(&self, span: Range<usize>, msg: impl Into<String>) -> CaseError {
        let (line, column) = self.line_column(span.start);
        CaseError::Parse {
            file: self.file.to_path_buf(),
            line,
            column,
            msg: msg.into(),
        }
    }

    /// A number or an expression; `"exact"` means `exact` where that is allowed.
    fn scalar(
        &self,
        value: &Spanned<Value>,
        key: &str,
        exact: Option<Option<&Scalar>>,
    ) -> Result<Scalar, CaseError> {
        match value.get_ref() {
            Value::Integer(i) => Ok(Scalar::Uniform(*i as f64)),
            Value::Float(f) if f.is_finite() => Ok(Scalar::Uniform(*f)),
            Value::String(s) if s.trim() == "exact" => match exact {
                Some(Some(exact)) => Ok(exact.clone()),
                Some(None) => Err(self.error(
                    value.span(),
                    format!("{key} = \"exact\" needs physics.exact (the exact solution)"),
                )),
                None => Err(self.error(
                    value.span(),
                    format!("{key} cannot be \"exact\"; give a number or an expression"),
                )),
            },
            Value::String(s) => expr::compile(s)
                .map(Scalar::Function)
                .map_err(|e| self.error(value.span(), format!("{key}: {e}"))),
            other => Err(self.error(
                value.span(),
                format!(
                    "{key} must be a finite number or an expression string, not {}",
                    describe(other)
                ),
            )),
        }
    }

    fn boundary(
        &self,
        entry: &BoundaryEntry,
        patch: &str,
        exact: Option<&Scalar>,
    ) -> Result<BoundarySpec, CaseError> {
        let key = |name: &str| format!("boundary.{patch}.{name}");
        let required = |v: &Option<Spanned<Value>>, name: &str, allow_exact: bool| match v {
            Some(v) => self.scalar(v, &key(name), allow_exact.then_some(exact)),
            None => Err(self.error(
                entry.kind.span(),
                format!("{} needs '{name}' (boundary.{patch})", entry.kind.get_ref()),
            )),
        };
        let given = [
            ("value", &entry.value),
            ("gradient", &entry.gradient),
            ("refValue", &entry.ref_value),
            ("refGradient", &entry.ref_gradient),
            ("valueFraction", &entry.value_fraction),
        ];
        let (spec, allowed): (BoundarySpec, &[&str]) = match entry.kind.get_ref().as_str() {
            "fixedValue" => (
                BoundarySpec::FixedValue(required(&entry.value, "value", true)?),
                &["value"],
            ),
            "zeroGradient" => (BoundarySpec::ZeroGradient, &[]),
            "fixedGradient" => (
                BoundarySpec::FixedGradient(required(&entry.gradient, "gradient", false)?),
                &["gradient"],
            ),
            "mixed" => (
                BoundarySpec::Mixed {
                    ref_value: required(&entry.ref_value, "refValue", true)?,
                    ref_gradient: required(&entry.ref_gradient, "refGradient", false)?,
                    value_fraction: required(&entry.value_fraction, "valueFraction", false)?,
                },
                &["refValue", "refGradient", "valueFraction"],
            ),
            "empty" => (BoundarySpec::Empty, &[]),
            other => {
                return Err(self.error(
                    entry.kind.span(),
                    format!(
                        "{}: unknown boundary condition '{other:.80}' (expected fixedValue, \
                         zeroGradient, fixedGradient, mixed or empty)",
                        key("type")
                    ),
                ))
            }
        };
        for (name, value) in given {
            if let Some(value) = value.as_ref().filter(|_| !allowed.contains(&name)) {
                return Err(self.error(
                    value.span(),
                    format!(
                        "{}: a {} condition takes no '{name}'",
                        key(name),
                        entry.kind.get_ref()
                    ),
                ));
            }
        }
        Ok(spec)
    }

    /// `schemes.nNonOrthogonalCorrectors` (default 0), within its limit.
    fn non_orth_correctors(&self, section: &SchemesSection) -> Result<usize, CaseError> {
        let Some(n) = &section.n_non_orth_correctors else {
            return Ok(0);
        };
        check_non_orth_correctors(*n.get_ref())
            .map_err(|e| self.error(n.span(), format!("schemes.{e}")))
    }

    fn schemes(&self, section: &SchemesSection) -> Result<Schemes, CaseError> {
        let laplacian = section.laplacian.as_ref();
        let grad = section.grad.as_ref();
        let laplacian_text = laplacian.map_or("Gauss linear corrected", |s| s.get_ref());
        let grad_text = grad.map_or("Gauss linear", |s| s.get_ref());
        Schemes::from_foam(laplacian_text, grad_text).map_err(|e| {
            // Point at whichever entry the message is about.
            let at = if e.to_string().starts_with("gradient") {
                grad
            } else {
                laplacian
            };
            self.error(at.map_or(0..0, |s| s.span()), format!("schemes: {e}"))
        })
    }

    fn time(&self, section: &TimeSection) -> Result<TimeControl, CaseError> {
        let scheme = section.scheme.as_ref();
        // The first of `keys` given, refused: it belongs to the other scheme.
        let misplaced = |scheme: &str, keys: [(&str, Option<Range<usize>>); 2]| {
            let given = keys
                .into_iter()
                .find_map(|(name, span)| Some((name, span?)));
            match given {
                Some((name, span)) => Err(self.error(
                    span,
                    format!("time.{name} does not apply to the {scheme} scheme"),
                )),
                None => Ok(()),
            }
        };
        match scheme.map_or("steadyState", |s| s.get_ref().as_str()) {
            "steadyState" => {
                misplaced(
                    "steadyState",
                    [
                        ("deltaT", section.delta_t.as_ref().map(Spanned::span)),
                        ("endTime", section.end_time.as_ref().map(Spanned::span)),
                    ],
                )?;
                let residual_tolerance = match &section.residual_control {
                    Some(r) if !(r.get_ref().is_finite() && *r.get_ref() >= 0.0) => {
                        return Err(self.error(
                            r.span(),
                            "time.residualControl must be a finite number >= 0 (0: off)",
                        ))
                    }
                    Some(r) => *r.get_ref(),
                    None => DEFAULT_RESIDUAL_CONTROL,
                };
                let max_iterations = match &section.max_iterations {
                    Some(m) if *m.get_ref() == 0 => {
                        return Err(self.error(m.span(), "time.maxIterations must be at least 1"))
                    }
                    Some(m) => *m.get_ref(),
                    None => DEFAULT_MAX_ITERATIONS,
                };
                Ok(TimeControl::Steady {
                    max_iterations,
                    residual_tolerance,
                })
            }
            "Euler" => {
                misplaced(
                    "Euler",
                    [
                        (
                            "maxIterations",
                            section.max_iterations.as_ref().map(Spanned::span),
                        ),
                        (
                            "residualControl",
                            section.residual_control.as_ref().map(Spanned::span),
                        ),
                    ],
                )?;
                let positive = |v: &Option<Spanned<f64>>, name: &str| match v {
                    Some(v) if v.get_ref().is_finite() && *v.get_ref() > 0.0 => Ok(*v.get_ref()),
                    Some(v) => {
                        Err(self
                            .error(v.span(), format!("time.{name} must be a finite number > 0")))
                    }
                    None => Err(self.error(
                        scheme.map_or(0..0, |s| s.span()),
                        format!("the Euler scheme needs time.{name}"),
                    )),
                };
                let delta_t = positive(&section.delta_t, "deltaT")?;
                let end_time = positive(&section.end_time, "endTime")?;
                check_step_count((end_time / delta_t).ceil(), delta_t, end_time).map_err(
                    |msg| self.error(section.delta_t.as_ref().map_or(0..0, |s| s.span()), msg),
                )?;
                Ok(TimeControl::Euler { delta_t, end_time })
            }
            other => Err(self.error(
                scheme.map_or(0..0, |s| s.span()),
                format!("time.scheme '{other:.80}' is not supported (steadyState or Euler)"),
            )),
        }
    }

    fn reference(&self, section: &ReferenceSection) -> Result<SingularPolicy, CaseError> {
        let reference = match section.kind.get_ref().as_str() {
            "zeroMean" => {
                if section.cell.is_some() || section.value.is_some() {
                    return Err(self.error(
                        section.kind.span(),
                        "reference.cell and reference.value need type = \"cell\"",
                    ));
                }
                Reference::ZeroMean
            }
            "cell" => Reference::Cell {
                cell: *section
                    .cell
                    .as_ref()
                    .ok_or_else(|| {
                        self.error(section.kind.span(), "reference type \"cell\" needs 'cell'")
                    })?
                    .get_ref(),
                value: section.value.unwrap_or(0.0),
            },
            other => {
                return Err(self.error(
                    section.kind.span(),
                    format!("reference.type '{other:.80}' is not supported (zeroMean or cell)"),
                ))
            }
        };
        let mut policy = SingularPolicy {
            reference,
            project: section.project,
            ..SingularPolicy::default()
        };
        if let Some(tolerance) = &section.tolerance {
            if !(tolerance.get_ref().is_finite() && *tolerance.get_ref() >= 0.0) {
                return Err(self.error(
                    tolerance.span(),
                    "reference.tolerance must be a finite number >= 0",
                ));
            }
            policy.tolerance = *tolerance.get_ref();
        }
        Ok(policy)
    }

    fn solvers(
        &self,
        entries: &BTreeMap<String, Spanned<SolverEntry>>,
        field: &str,
    ) -> Result<SolverSettings, CaseError> {
        let final_name = format!("{field}Final");
        let mut settings = SolverSettings::default();
        if let Some((name, entry)) = entries
            .iter()
            .find(|(name, _)| **name != field && **name != final_name)
        {
            return Err(self.error(
                entry.span(),
                format!(
                    "solver.{name}: no field '{name}' in this case (solved field: '{field}', \
                     so solver.{field} and solver.{final_name})"
                ),
            ));
        }
        if let Some(entry) = entries.get(field) {
            settings.regular = self.solver(entry.get_ref(), field, LinearSolver::default())?;
        }
        if let Some(entry) = entries.get(&final_name) {
            settings.final_corrector =
                Some(self.solver(entry.get_ref(), &final_name, settings.regular)?);
        }
        Ok(settings)
    }

    /// OpenFOAM's GAMG controls of `[solver.NAME.gamg]` (fvSolution's key
    /// names) over those of `base`; `amg` is what the GPU runs instead.
    fn gamg_parameters(
        &self,
        entry: &SolverEntry,
        name: &str,
        base: Option<GamgSettings>,
        amg: AmgSettings,
    ) -> Result<GamgSettings, CaseError> {
        let mut gamg = GamgSettings {
            amg,
            ..base.unwrap_or_default()
        };
        if let Some(table) = &entry.gamg {
            for (key, value) in table.get_ref() {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                gamg.set(key, &text).map_err(|e| {
                    self.error(table.span(), format!("solver.{name}.gamg.{key}: {e}"))
                })?;
            }
            gamg.validate()
                .map_err(|e| self.error(table.span(), format!("solver.{name}.gamg: {e}")))?;
        }
        Ok(gamg)
    }

    /// One solver entry; unset keys keep their value in `base`.
    pub(super) fn solver(
        &self,
        entry: &SolverEntry,
        name: &str,
        base: LinearSolver,
    ) -> Result<LinearSolver, CaseError> {
        let (smooth_solver, gamg_solver, mut krylov) = match &entry.solver {
            None => (base.smoother.is_some(), base.gamg.is_some(), base.krylov),
            Some(solver) => match solver.get_ref().as_str() {
                "PCG" => (false, false, None),
                "smoothSolver" => (true, false, None),
                "GAMG" => (false, true, None),
                other => match KrylovMethod::named(other) {
                    Some(method) => (false, false, Some(method)),
                    None => {
                        return Err(self.error(
                            solver.span(),
                            format!(
                                "solver.{name}.solver '{other:.80}' is not available (PCG, \
                                 smoothSolver, GAMG, PBiCGStab or GMRES)"
                            ),
                        ))
                    }
                },
            },
        };
        self.krylov_parameters(entry, name, &mut krylov)?;
        let mut amg = base
            .gamg
            .map(|g| g.amg)
            .or(match base.preconditioner {
                Preconditioner::Amg(s) => Some(s),
                _ => None,
            })
            .unwrap_or_default();
        // Keys that tune DIC / IC(0) / AMG for the GPU: it runs them as
        // given, not its default (`registry::GPU_DEFAULTS`).
        let mut gpu_keys_given = base.gpu_keys_given || entry.precision.is_some();
        if let Some(table) = &entry.amg {
            let mut keys = KeyValues::new();
            for (key, value) in table.get_ref() {
                keys.push(key.as_str(), toml_text(value));
            }
            gpu_keys_given |= registry::explicit_gpu_keys("AMG", &keys);
            for (key, value) in table.get_ref() {
                amg.set(key, &toml_text(value)).map_err(|e| {
                    self.error(table.span(), format!("solver.{name}.amg.{key}: {e}"))
                })?;
            }
            amg.validate()
                .map_err(|e| self.error(table.span(), format!("solver.{name}.amg: {e}")))?;
        }
        let mut fsai = match base.preconditioner {
            Preconditioner::Fsai(s) => s,
            _ => FsaiSettings::default(),
        };
        if let Some(table) = &entry.fsai {
            let pairs: Vec<(String, String)> = table
                .get_ref()
                .iter()
                .map(|(key, value)| (key.clone(), toml_text(value)))
                .collect();
            fsai = fsai
                .with_keys(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| self.error(table.span(), format!("solver.{name}.fsai: {e}")))?;
        }
        let mut preconditioner = base.preconditioner;
        if let Some(p) = &entry.preconditioner {
            let at = |e: RegistryError| {
                self.error(p.span(), format!("solver.{name}.preconditioner: {e}"))
            };
            let (parsed, with_keys) = match p.get_ref() {
                PreconditionerValue::Spec(spec) => {
                    // `dic:precision=double`: keys given with the name.
                    gpu_keys_given |= spec.contains(':');
                    (registry::parse_spec(spec).map_err(at)?, spec.contains(':'))
                }
                PreconditionerValue::Table(table) => {
                    let given = table.get("name").ok_or_else(|| {
                        self.error(
                            p.span(),
                            format!(
                                "solver.{name}.preconditioner: the table needs the name, e.g. \
                                 {{ name = \"DIC\" }}"
                            ),
                        )
                    })?;
                    let mut keys = KeyValues::new();
                    for (key, value) in table.iter().filter(|(k, _)| *k != "name") {
                        keys.push(key.as_str(), toml_text(value));
                    }
                    let with_keys = !keys.is_empty();
                    gpu_keys_given |= registry::explicit_gpu_keys(&toml_text(given), &keys);
                    (
                        registry::parse(&toml_text(given), &keys).map_err(at)?,
                        with_keys,
                    )
                }
            };
            // Keys given with the name win over the inherited `amg` / `fsai`
            // settings; given in both places they are refused.
            match (parsed, &entry.amg, &entry.fsai) {
                (Preconditioner::Amg(_), Some(t), _) | (Preconditioner::Fsai(_), _, Some(t))
                    if with_keys =>
                {
                    return Err(self.error(
                        t.span(),
                        format!(
                            "solver.{name}: give the preconditioner's keys in one place, with \
                             its name or in this table"
                        ),
                    ))
                }
                (Preconditioner::Amg(s), ..) if with_keys => amg = s,
                (Preconditioner::Fsai(s), ..) if with_keys => fsai = s,
                _ => {}
            }
            preconditioner = parsed;
        }
        let mut smoother = base.smoother;
        if let Some(sm) = &entry.smoother {
            if !smooth_solver {
                return Err(self.error(
                    sm.span(),
                    format!(
                        "solver.{name}.smoother: only smoothSolver has a smoother (set solver = \
                         \"smoothSolver\", or give PCG a smoother as its preconditioner)"
                    ),
                ));
            }
            smoother = Some(
                SmootherSettings::named(sm.get_ref())
                    .map_err(|e| self.error(sm.span(), format!("solver.{name}.smoother: {e}")))?,
            );
        }
        if !smooth_solver {
            smoother = None;
        } else if smoother.is_none() {
            let span = entry.solver.as_ref().map_or(0..0, |s| s.span());
            return Err(self.error(
                span,
                format!(
                    "solver.{name}: smoothSolver needs a smoother (e.g. smoother = \
                     \"symGaussSeidel\")"
                ),
            ));
        }
        let target = match (&mut smoother, &mut preconditioner) {
            (Some(s), _) | (None, Preconditioner::Smoother(s)) => Some(s),
            _ => None,
        };
        self.smoother_parameters(entry, name, target)?;
        let block_ic = match (&smoother, &preconditioner) {
            (Some(s), _) | (None, Preconditioner::Smoother(s)) => {
                !matches!(s.kind, SmootherKind::Polynomial(_)) && s.has_mixed_precision()
            }
            _ => false,
        };
        // DIC / IC(0) as PCG's preconditioner take `precision` (mixed: f32
        // triangular sweeps on the GPU) and no other polynomial key.
        let ic_kind = match (&smoother, preconditioner) {
            (None, Preconditioner::MixedIc(k)) => Some(k),
            (
                None,
                Preconditioner::Kind(k @ (PreconditionerKind::Dic | PreconditionerKind::Ic0)),
            ) => Some(k),
            _ => None,
        };
        if let Some(kind) = ic_kind {
            let mut p = PolynomialSettings::new(PolynomialKind::LeastSquares, 4);
            p.precision = match preconditioner {
                Preconditioner::MixedIc(_) => Precision::Mixed,
                _ => Precision::Double,
            };
            self.block_ic_precision(entry, name, &mut p)?;
            preconditioner = Preconditioner::with_ic_precision(kind, p.precision);
        }
        let polynomial = match (&mut smoother, &mut preconditioner) {
            (Some(s), _) if matches!(s.kind, SmootherKind::Polynomial(_)) => {
                Some(&mut s.polynomial)
            }
            (None, Preconditioner::Polynomial(p)) => Some(p),
            (Some(s), _) | (None, Preconditioner::Smoother(s)) if block_ic => {
                // Block-IC and the Jacobi smoothers take `precision` only.
                self.block_ic_precision(entry, name, &mut s.polynomial)?;
                None
            }
            _ => None,
        };
        if polynomial.is_some() || !(block_ic || ic_kind.is_some()) {
            self.polynomial_parameters(entry, name, polynomial)?;
        }
        let equilibration = match &entry.equilibration {
            Some(e) if smooth_solver => {
                return Err(self.error(
                    e.span(),
                    format!(
                        "solver.{name}.equilibration: only PCG equilibrates its system \
                         (smoothSolver's point smoothers are unchanged by a diagonal scaling); \
                         remove the key or set solver = \"PCG\""
                    ),
                ))
            }
            Some(e) if krylov.is_some() => {
                return Err(self.error(
                    e.span(),
                    format!(
                        "solver.{name}.equilibration: only PCG equilibrates its system; remove \
                         the key or set solver = \"PCG\""
                    ),
                ))
            }
            Some(e) => e.get_ref().parse::<EquilibrationKind>().map_err(|err| {
                self.error(e.span(), format!("solver.{name}.equilibration: {err}"))
            })?,
            // A TFinal smoothSolver does not inherit the PCG entry's scaling.
            None if smooth_solver || krylov.is_some() => EquilibrationKind::None,
            None => base.equilibration,
        };
        let controls = SolverControls {
            tolerance: entry.tolerance.unwrap_or(base.controls.tolerance),
            rel_tol: entry.rel_tol.unwrap_or(base.controls.rel_tol),
            max_iter: entry.max_iter.unwrap_or(base.controls.max_iter),
            min_iter: entry.min_iter.unwrap_or(base.controls.min_iter),
        };
        // Spanned entries point at the table; the controls are checked as a whole.
        let invalid =
            |e: String| CaseError::invalid(format!("{}: solver.{name}: {e}", self.file.display()));
        controls.validate().map_err(|e| invalid(e.to_string()))?;
        match &smoother {
            Some(s) => s.validate().map_err(invalid)?,
            None => preconditioner.check().map_err(|e| invalid(e.to_string()))?,
        }
        let ordering = match &entry.ordering {
            Some(o) => o
                .get_ref()
                .parse()
                .map_err(|e| self.error(o.span(), format!("solver.{name}.ordering: {e}")))?,
            None => base.ordering,
        };
        if let Preconditioner::Amg(s) = &mut preconditioner {
            *s = amg;
        }
        if let Preconditioner::Fsai(s) = &mut preconditioner {
            *s = fsai;
        }
        if let (Some(table), false) = (
            &entry.fsai,
            matches!(preconditioner, Preconditioner::Fsai(_)),
        ) {
            return Err(self.error(
                table.span(),
                format!(
                    "solver.{name}.fsai: only the FSAI preconditioner uses it (preconditioner = \
                     \"FSAI\")"
                ),
            ));
        }
        let deflation = match &entry.deflation {
            None => base.deflation,
            Some(d) if smooth_solver || krylov.is_some() => {
                return Err(self.error(
                    d.span(),
                    format!(
                        "solver.{name}.deflation: applies to PCG and GAMG in distributed runs; \
                         remove the key or set solver = \"PCG\""
                    ),
                ))
            }
            Some(d) => d
                .get_ref()
                .parse::<Deflation>()
                .map_err(|e| self.error(d.span(), format!("solver.{name}.deflation: {e}")))?,
        };
        if let (Some(table), false) = (&entry.gamg, gamg_solver) {
            return Err(self.error(
                table.span(),
                format!("solver.{name}.gamg: only solver = \"GAMG\" uses it"),
            ));
        }
        let uses_amg = gamg_solver || matches!(preconditioner, Preconditioner::Amg(_));
        if let (Some(table), false) = (&entry.amg, uses_amg) {
            return Err(self.error(
                table.span(),
                format!(
                    "solver.{name}.amg: only AMG uses it (solver = \"GAMG\", or preconditioner \
                     = \"AMG\")"
                ),
            ));
        }
        Ok(LinearSolver {
            preconditioner,
            smoother,
            gamg: if gamg_solver {
                Some(self.gamg_parameters(entry, name, base.gamg, amg)?)
            } else {
                None
            },
            // GAMG cycles on the system as given.
            equilibration: if gamg_solver {
                EquilibrationKind::None
            } else {
                equilibration
            },
            controls,
            ordering,
            krylov,
            deflation,
            gpu_keys_given,
        })
    }

    /// The GMRES keys of a solver entry (`nKrylov`, `orthogonalisation`,
    /// `preconditioningSide`, `flexible`) into `krylov`; an error naming the
    /// key when the solver is not GMRES.
    fn krylov_parameters(
        &self,
        entry: &SolverEntry,
        name: &str,
        krylov: &mut Option<KrylovMethod>,
    ) -> Result<(), CaseError> {
        // Each key's span and its value as text, for `GmresSettings::set`.
        fn text<T: ToString>(v: &Option<Spanned<T>>) -> Option<(Range<usize>, String)> {
            v.as_ref().map(|v| (v.span(), v.get_ref().to_string()))
        }
        let keys = [
            ("nKrylov", text(&entry.n_krylov)),
            ("orthogonalisation", text(&entry.orthogonalisation)),
            ("preconditioningSide", text(&entry.preconditioning_side)),
            ("flexible", text(&entry.flexible)),
        ];
        for (key, value) in keys {
            let Some((span, text)) = value else { continue };
            let Some(KrylovMethod::Gmres(settings)) = krylov else {
                return Err(self.error(
                    span,
                    format!("solver.{name}.{key}: only GMRES uses it (solver = \"GMRES\")"),
                ));
            };
            settings
                .set(key, &text)
                .map_err(|e| self.error(span, format!("solver.{name}.{key}: {e}")))?;
        }
        Ok(())
    }

    /// The smoother keys of a solver entry, set on `target` (smoothSolver's
    /// smoother or a smoother preconditioner); an error where there is none.
    /// The polynomial preconditioner's keys into `target`; an error naming
    /// the key when there is no polynomial preconditioner to take them.
    fn polynomial_parameters(
        &self,
        entry: &SolverEntry,
        name: &str,
        target: Option<&mut PolynomialSettings>,
    ) -> Result<(), CaseError> {
        let Some(p) = target else {
            let precision = ("precision", entry.precision.as_ref().map(Spanned::span));
            return self.refuse_keys(
                name,
                polynomial_only_spans(entry).into_iter().chain([precision]),
                "only a polynomial preconditioner or smoother uses it (Neumann, Chebyshev or \
                 leastSquares)",
            );
        };
        if let Some(v) = &entry.degree {
            p.degree = *v.get_ref();
        }
        if let Some(v) = &entry.eigen_bound {
            p.bound = self.parsed(name, "eigenBound", v)?;
        }
        if let Some(v) = &entry.lanczos_steps {
            p.bound = EigenBound::Lanczos {
                steps: *v.get_ref(),
            };
        }
        if let Some(v) = &entry.eigen_ratio {
            p.eigen_ratio = *v.get_ref();
        }
        if let Some(v) = &entry.precision {
            p.precision = self.parsed(name, "precision", v)?;
        }
        Ok(())
    }

    /// Block-IC's `precision` into `p` (taken out of `entry` for
    /// [`Self::polynomial_parameters`]); the other polynomial keys are errors.
    fn block_ic_precision(
        &self,
        entry: &SolverEntry,
        name: &str,
        p: &mut PolynomialSettings,
    ) -> Result<(), CaseError> {
        if let Some(v) = &entry.precision {
            p.precision = self.parsed(name, "precision", v)?;
        }
        self.refuse_keys(
            name,
            polynomial_only_spans(entry),
            "only a polynomial preconditioner or smoother uses it (DIC, IC0, block Jacobi, \
             block-IC and Jacobi take precision only)",
        )
    }

    /// An error at the first key of `keys` the entry gives (`solver.<name>.<key>:
    /// <uses>`), or none where it gives none of them.
    fn refuse_keys<'k>(
        &self,
        name: &str,
        keys: impl IntoIterator<Item = (&'k str, Option<Range<usize>>)>,
        uses: &str,
    ) -> Result<(), CaseError> {
        match keys.into_iter().find_map(|(k, s)| s.map(|s| (k, s))) {
            Some((key, span)) => Err(self.error(span, format!("solver.{name}.{key}: {uses}"))),
            None => Ok(()),
        }
    }

    /// The text of `solver.<name>.<key>` parsed; an error at its span naming
    /// the key where it does not parse.
    fn parsed<T: std::str::FromStr<Err = String>>(
        &self,
        name: &str,
        key: &str,
        v: &Spanned<String>,
    ) -> Result<T, CaseError> {
        v.get_ref()
            .parse()
            .map_err(|e: String| self.error(v.span(), format!("solver.{name}.{key}: {e}")))
    }

    fn smoother_parameters(
        &self,
        entry: &SolverEntry,
        name: &str,
        target: Option<&mut SmootherSettings>,
    ) -> Result<(), CaseError> {
        let spans = [
            ("nSweeps", entry.n_sweeps.as_ref().map(Spanned::span)),
            ("omega", entry.omega.as_ref().map(Spanned::span)),
            ("colouring", entry.colouring.as_ref().map(Spanned::span)),
            ("inner", entry.inner.as_ref().map(Spanned::span)),
            (
                "innerTolerance",
                entry.inner_tolerance.as_ref().map(Spanned::span),
            ),
            (
                "innerMaxIter",
                entry.inner_max_iter.as_ref().map(Spanned::span),
            ),
            ("blockSize", entry.block_size.as_ref().map(Spanned::span)),
            (
                "asynchronous",
                entry.asynchronous.as_ref().map(Spanned::span),
            ),
        ];
        let Some(target) = target else {
            return self.refuse_keys(
                name,
                spans,
                "only a smoother uses it (solver = \"smoothSolver\", or a smoother as PCG's \
                 preconditioner)",
            );
        };
        if let Some(v) = &entry.n_sweeps {
            target.sweeps = *v.get_ref();
        }
        if let Some(v) = &entry.omega {
            target.omega = *v.get_ref();
        }
        if let Some(v) = &entry.colouring {
            target.colouring = self.parsed(name, "colouring", v)?;
        }
        if let Some(v) = &entry.inner {
            target.block.inner = self.parsed(name, "inner", v)?;
        }
        if let Some(v) = &entry.inner_tolerance {
            target.block.inner_tolerance = *v.get_ref();
        }
        if let Some(v) = &entry.inner_max_iter {
            target.block.inner_max_iter = *v.get_ref();
        }
        if let Some(v) = &entry.block_size {
            target.block.block_size = *v.get_ref();
        }
        if let Some(v) = &entry.asynchronous {
            target.block.asynchronous = *v.get_ref();
        }
        Ok(())
    }

    pub(super) fn output(&self, section: &OutputSection) -> Result<OutputSettings, CaseError> {
        let mut output = OutputSettings::default();
        if let Some(formats) = &section.formats {
            output.formats.clear();
            for format in formats {
                let parsed = match format.get_ref().as_str() {
                    "vtk" => OutputFormat::Vtk,
                    "foam" => OutputFormat::Foam,
                    other => {
                        return Err(self.error(
                            format.span(),
                            format!("output.formats: unknown format '{other:.80}' (vtk or foam)"),
                        ))
                    }
                };
                if !output.formats.contains(&parsed) {
                    output.formats.push(parsed);
                }
            }
        }
        if let Some(interval) = &section.interval {
            if *interval.get_ref() == 0 {
                return Err(self.error(interval.span(), "output.interval must be at least 1"));
            }
            output.interval = *interval.get_ref();
        }
        if let Some(directory) = &section.directory {
            output.directory = directory.clone();
        }
        if let Some(precision) = &section.precision {
            if !(1..=17).contains(precision.get_ref()) {
                return Err(self.error(precision.span(), "output.precision must be 1 to 17"));
            }
            output.foam.precision = *precision.get_ref();
        }
        if let Some(format) = &section.write_format {
            output.foam.format = match format.get_ref().as_str() {
                "ascii" => FoamFormat::Ascii,
                "binary" => FoamFormat::Binary,
                other => {
                    return Err(self.error(
                        format.span(),
                        format!("output.writeFormat '{other:.80}' is not ascii or binary"),
                    ))
                }
            };
        }
        output.foam.compress = section.write_compression;
        if let Some(format) = &section.vtk_format {
            output.vtk_encoding = format
                .get_ref()
                .parse()
                .map_err(|e| self.error(format.span(), format!("output.vtkFormat: {e}")))?;
        }
        Ok(output)
    }
}

/// The polynomial keys of `entry` but `precision` (which block-IC takes too)
/// with the spans of those it gives.
fn polynomial_only_spans(entry: &SolverEntry) -> [(&'static str, Option<Range<usize>>); 4] {
    [
        ("degree", entry.degree.as_ref().map(Spanned::span)),
        ("eigenBound", entry.eigen_bound.as_ref().map(Spanned::span)),
        (
            "lanczosSteps",
            entry.lanczos_steps.as_ref().map(Spanned::span),
        ),
        ("eigenRatio", entry.eigen_ratio.as_ref().map(Spanned::span)),
    ]
}

/// A TOML value as the text a registry key reads (strings unquoted).
fn toml_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a non-finite number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}
