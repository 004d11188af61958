//! Manufactured-solution verification of the Laplacian discretisation
//! (`fvpoisson validate`): solve −∇²T = q for a known T on families of
//! refined box meshes, measure the error at the cell centroids and the observed
//! order of accuracy, and check the orders and scheme rankings below.
//!
//! Solutions (Γ = 1, q = −∇²T = 6 for all three), as in the OpenFOAM reference
//! runs (shared notes, `openfoam_reference.md` §3):
//! - `poisson`: T = exp(x + y)·cos(√2 z) − (x² + y² + z²), all patches
//!   `fixedValue` = T at the boundary face centres;
//! - `poisson-mixed`: the same T with `fixedGradient` = the exact outward
//!   normal gradient at the face centres on `xmax`, `ymin` and `zmax`;
//! - `quadratic`: T = 1 − (x² + y² + z²), all `fixedValue`. Its Hessian is
//!   constant, so any error comes from the schemes' geometric consistency alone
//!   (on OpenFOAM's own tets, `Gauss linear corrected` plateaus at 1e-2 here).
//!
//! Families (unit cube, the box generator of [`crate::mesh::generate`]):
//! `hex` (orthogonal), `hex-perturbed` (`perturb=0.3`, max non-orthogonality
//! ≥ 30°, checked), `tet` (6 Kuhn tetrahedra per hex), `tet-perturbed`
//! (`tet:perturb=0.4`), `prism` (2 prisms per hex, 26.6° non-orthogonal).
//! Perturbed meshes use one seed for all levels; they are not nested.
//!
//! Schemes ([`Scheme`]): `Gauss linear uncorrected`; `Gauss linear corrected`
//! with `Gauss linear` gradients (OpenFOAM's default); `corrected` with
//! `leastSquares` gradients for the non-orthogonal correction; and
//! `Gauss linear boundaryCorrected` with `leastSquares` gradients
//! ([`SnGradScheme::BoundaryCorrected`]: the correction on fixed-value boundary
//! faces too). On these meshes OpenFOAM's default is first order at best: its
//! wall flux Δ_b(T_b − T_P) ignores the tangential offset of the cell centre
//! from the face normal (an O(1) flux error in wall cells of tets, prisms and
//! perturbed cells), and on skewed tets its Gauss gradient is inconsistent
//! too; least-squares gradients alone do not help while the wall error
//! dominates. `boundaryCorrected` + `leastSquares` is exact for linear T and
//! second order on every family.
//!
//! Norms: L2 = sqrt(Σ V e² / Σ V), Linf = max |e| over the cell centroids,
//! h = (Σ V / N)^(1/3); observed order p = ln(e₁/e₂) / ln(h₁/h₂) between
//! successive levels.
//!
//! # Expected results (checked by [`expectations`])
//!
//! Thresholds are the orders and ratios measured with `--quick` and the
//! default sizes, less a margin:
//! - `hex`, every scheme and solution: L2 order ≥ 1.8 between the two finest
//!   levels (measured 1.97–2.00);
//! - every other family: largest non-orthogonality at least 30° (hex-perturbed,
//!   measured 30.1–32.4°), 26° (prism, 26.57°), 35° (tets, 35.26–50°);
//!   `boundaryCorrected+LS` L2 order ≥ 1.7 for all three solutions (measured
//!   1.89–2.00); finest-level L2 error of `uncorrected` ≥ 1.5× that of
//!   `corrected` (poisson; measured 2.5–7.2×); and of `corrected` (OpenFOAM's
//!   default) ≥ 2× that of `boundaryCorrected+LS` (quadratic; measured 3.2×
//!   (quick) to 12× on perturbed hexes, 14–28× on prisms, 50–119× on tets).
//!
//! Any failed expectation makes [`Report::failures`] non-empty (the CLI then
//! exits with code 1).

use crate::fvm::ErrorNorms;
use crate::fvm::{
    BoundaryCondition, CellField, FvmError, GammaInterpolation, GradScheme, LaplacianProblem,
    LaplacianSystem, PatchValues, Schemes, SnGradScheme,
};
use crate::mesh::generate::BoxSpec;
use crate::mesh::{Geometry, Mesh, MeshError, Vec3};
use crate::solve::{solve_pcg, PreconditionerKind, SolveError, SolverControls};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What can stop a validation run.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("{0}")]
    Invalid(String),
    #[error("mesh {spec}: {source}")]
    Mesh {
        spec: String,
        #[source]
        source: MeshError,
    },
    #[error("{what}: {source}")]
    Fvm {
        what: String,
        #[source]
        source: FvmError,
    },
    #[error("{what}: {source}")]
    Solve {
        what: String,
        #[source]
        source: SolveError,
    },
    #[error("{0}")]
    Plot(String),
}

/// A mesh family: a box spec refined over levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Hex,
    HexPerturbed,
    Tet,
    TetPerturbed,
    Prism,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Hex,
        Family::HexPerturbed,
        Family::Tet,
        Family::TetPerturbed,
        Family::Prism,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Hex => "hex",
            Self::HexPerturbed => "hex-perturbed",
            Self::Tet => "tet",
            Self::TetPerturbed => "tet-perturbed",
            Self::Prism => "prism",
        }
    }

    /// Parses a comma-separated list of family names.
    pub fn parse_list(list: &str) -> Result<Vec<Family>, ValidateError> {
        list.split(',')
            .map(|word| {
                let word = word.trim();
                Self::ALL
                    .into_iter()
                    .find(|f| f.name() == word)
                    .ok_or_else(|| {
                        ValidateError::Invalid(format!(
                            "unknown mesh family '{word}' (expected a comma-separated list of {})",
                            Self::ALL.map(Family::name).join(", ")
                        ))
                    })
            })
            .collect()
    }

    /// The box spec with `n` hexes along each side.
    pub fn spec(self, n: usize) -> String {
        let options = match self {
            Self::Hex => "",
            Self::HexPerturbed => ":perturb=0.3:seed=3",
            Self::Tet => ":tet",
            Self::TetPerturbed => ":tet:perturb=0.4:seed=3",
            Self::Prism => ":prism",
        };
        format!("box:{n}x{n}x{n}{options}")
    }

    /// Hexes along each side, per level (cells: n³, 6n³ tets, 2n³ prisms).
    pub fn levels(self, quick: bool) -> &'static [usize] {
        match (self, quick) {
            (Self::Hex | Self::HexPerturbed, true) => &[6, 12, 24],
            (Self::Tet | Self::TetPerturbed, true) => &[4, 8, 16],
            (Self::Prism, true) => &[5, 10, 20],
            (Self::Hex, false) => &[8, 16, 32, 64],
            (Self::HexPerturbed, false) => &[8, 16, 32, 44],
            (Self::Tet | Self::TetPerturbed, false) => &[5, 10, 20, 28],
            (Self::Prism, false) => &[8, 16, 32, 40],
        }
    }

    /// Whether the family's meshes are orthogonal (all schemes coincide: the
    /// plot draws one line).
    fn orthogonal(self) -> bool {
        self == Self::Hex
    }
}

/// The discretisation being verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `laplacianSchemes Gauss linear uncorrected`.
    Uncorrected,
    /// `Gauss linear corrected` with `gradSchemes Gauss linear` (OpenFOAM's default).
    Corrected,
    /// `Gauss linear corrected` with `gradSchemes leastSquares`.
    CorrectedLeastSquares,
    /// `Gauss linear boundaryCorrected` with `gradSchemes leastSquares`.
    BoundaryCorrectedLeastSquares,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [
        Scheme::Uncorrected,
        Scheme::Corrected,
        Scheme::CorrectedLeastSquares,
        Scheme::BoundaryCorrectedLeastSquares,
    ];

    /// Short name, as in the table and the plot legend.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uncorrected => "uncorrected",
            Self::Corrected => "corrected",
            Self::CorrectedLeastSquares => "corrected+LS",
            Self::BoundaryCorrectedLeastSquares => "boundaryCorrected+LS",
        }
    }

    /// OpenFOAM `fvSchemes` wording.
    pub fn foam_description(self) -> &'static str {
        match self {
            Self::Uncorrected => "laplacian Gauss linear uncorrected",
            Self::Corrected => "laplacian Gauss linear corrected, grad Gauss linear",
            Self::CorrectedLeastSquares => "laplacian Gauss linear corrected, grad leastSquares",
            Self::BoundaryCorrectedLeastSquares => {
                "laplacian Gauss linear boundaryCorrected, grad leastSquares"
            }
        }
    }

    pub fn schemes(self) -> Schemes {
        let (sn_grad, grad) = match self {
            Self::Uncorrected => (SnGradScheme::Uncorrected, GradScheme::GaussLinear),
            Self::Corrected => (SnGradScheme::Corrected, GradScheme::GaussLinear),
            Self::CorrectedLeastSquares => (SnGradScheme::Corrected, GradScheme::LeastSquares),
            Self::BoundaryCorrectedLeastSquares => {
                (SnGradScheme::BoundaryCorrected, GradScheme::LeastSquares)
            }
        };
        Schemes {
            sn_grad,
            grad,
            gamma_interpolation: GammaInterpolation::Linear,
        }
    }
}

/// A manufactured solution with its boundary conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solution {
    Poisson,
    PoissonMixed,
    Quadratic,
}

/// q = −∇²T of every solution.
const SOURCE: f64 = 6.0;

/// Patches that get `fixedGradient` in [`Solution::PoissonMixed`].
const NEUMANN_PATCHES: [&str; 3] = ["xmax", "ymin", "zmax"];

impl Solution {
    pub const ALL: [Solution; 3] = [
        Solution::Poisson,
        Solution::PoissonMixed,
        Solution::Quadratic,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Poisson => "poisson",
            Self::PoissonMixed => "poisson-mixed",
            Self::Quadratic => "quadratic",
        }
    }

    pub fn exact(self, x: Vec3) -> f64 {
        match self {
            Self::Poisson | Self::PoissonMixed => {
                (x.x + x.y).exp() * (2f64.sqrt() * x.z).cos() - x.norm_squared()
            }
            Self::Quadratic => 1.0 - x.norm_squared(),
        }
    }

    pub fn gradient(self, x: Vec3) -> Vec3 {
        let r2 = std::f64::consts::SQRT_2;
        match self {
            Self::Poisson | Self::PoissonMixed => {
                let e = (x.x + x.y).exp();
                let (s, c) = (r2 * x.z).sin_cos();
                Vec3::new(e * c, e * c, -r2 * e * s) - 2.0 * x
            }
            Self::Quadratic => -2.0 * x,
        }
    }

    /// One condition per patch: exact values, or exact normal gradients on
    /// [`NEUMANN_PATCHES`] for the mixed problem.
    fn boundary(self, mesh: &Mesh, geometry: &Geometry) -> Vec<BoundaryCondition> {
        let first = mesh.n_internal_faces();
        mesh.patches()
            .iter()
            .map(|patch| {
                let faces = patch.faces().map(|f| {
                    (
                        geometry.boundary_face_centres[f - first],
                        geometry.face_area_vectors[f].normalize(),
                    )
                });
                if self == Self::PoissonMixed && NEUMANN_PATCHES.contains(&patch.name.as_str()) {
                    BoundaryCondition::FixedGradient(PatchValues::PerFace(
                        faces.map(|(c, n)| self.gradient(c).dot(&n)).collect(),
                    ))
                } else {
                    BoundaryCondition::FixedValue(PatchValues::PerFace(
                        faces.map(|(c, _)| self.exact(c)).collect(),
                    ))
                }
            })
            .collect()
    }
}

/// Errors of one solve.
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    pub cells: usize,
    pub h: f64,
    pub l2: f64,
    pub linf: f64,
    /// Largest non-orthogonality of the mesh, degrees.
    pub max_non_orth: f64,
    /// Non-orthogonal corrector passes until the solution stopped changing.
    pub passes: usize,
}

/// One family × scheme × solution over the refinement levels.
#[derive(Clone, Debug)]
pub struct Series {
    pub family: Family,
    pub scheme: Scheme,
    pub solution: Solution,
    pub levels: Vec<Level>,
}

impl Series {
    /// Observed (L2, Linf) orders between successive levels.
    pub fn orders(&self) -> Vec<(f64, f64)> {
        self.levels
            .windows(2)
            .map(|w| {
                let ratio = (w[0].h / w[1].h).ln();
                (
                    (w[0].l2 / w[1].l2).ln() / ratio,
                    (w[0].linf / w[1].linf).ln() / ratio,
                )
            })
            .collect()
    }

    /// L2 order between the two finest levels.
    pub fn final_order(&self) -> Option<f64> {
        self.orders().last().map(|o| o.0)
    }

    pub fn finest(&self) -> Option<&Level> {
        self.levels.last()
    }
}

/// What a family must show; see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub enum Expectation {
    /// L2 order between the two finest levels at least `min`.
    MinOrder {
        family: Family,
        scheme: Scheme,
        solution: Solution,
        min: f64,
    },
    /// On the finest level, `worse`'s L2 error at least `factor` × `better`'s.
    Beats {
        family: Family,
        solution: Solution,
        better: Scheme,
        worse: Scheme,
        factor: f64,
    },
    /// The finest mesh's largest non-orthogonality at least `min_degrees`.
    MinNonOrthogonality { family: Family, min_degrees: f64 },
}

/// The expectations for the given families (module documentation).
pub fn expectations(families: &[Family]) -> Vec<Expectation> {
    use Expectation::*;
    use Scheme::*;
    let mut out = Vec::new();
    for &family in families {
        let order = |scheme, solution, min| MinOrder {
            family,
            scheme,
            solution,
            min,
        };
        let beats = |solution, better, worse, factor| Beats {
            family,
            solution,
            better,
            worse,
            factor,
        };
        match family {
            Family::Hex => {
                for scheme in Scheme::ALL {
                    for solution in Solution::ALL {
                        out.push(order(scheme, solution, 1.8));
                    }
                }
            }
            Family::HexPerturbed | Family::Prism | Family::Tet | Family::TetPerturbed => {
                let min_degrees = match family {
                    Family::HexPerturbed => 30.0,
                    Family::Prism => 26.0,
                    _ => 35.0,
                };
                out.push(MinNonOrthogonality {
                    family,
                    min_degrees,
                });
                for solution in Solution::ALL {
                    out.push(order(BoundaryCorrectedLeastSquares, solution, 1.7));
                }
                out.push(beats(Solution::Poisson, Corrected, Uncorrected, 1.5));
                out.push(beats(
                    Solution::Quadratic,
                    BoundaryCorrectedLeastSquares,
                    Corrected,
                    2.0,
                ));
            }
        }
    }
    out
}

/// An expectation with what was measured.
#[derive(Clone, Debug)]
pub struct Check {
    pub expectation: Expectation,
    /// The measured value (order, error ratio or degrees); `None` when the
    /// series was not run (too few levels).
    pub measured: Option<f64>,
    pub passed: bool,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.passed { "ok  " } else { "FAIL" };
        let measured = self
            .measured
            .map_or_else(|| "not measured".to_string(), |m| format!("{m:.2}"));
        match &self.expectation {
            Expectation::MinOrder {
                family,
                scheme,
                solution,
                min,
            } => write!(
                f,
                "{status} {} {} {}: L2 order {measured} >= {min}",
                family.name(),
                scheme.name(),
                solution.name()
            ),
            Expectation::Beats {
                family,
                solution,
                better,
                worse,
                factor,
            } => write!(
                f,
                "{status} {} {}: L2 error {} / {} = {measured} >= {factor}",
                family.name(),
                solution.name(),
                worse.name(),
                better.name()
            ),
            Expectation::MinNonOrthogonality {
                family,
                min_degrees,
            } => write!(
                f,
                "{status} {}: max non-orthogonality {measured} >= {min_degrees} degrees",
                family.name()
            ),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Small meshes (seconds) instead of the default sizes (up to ~250k cells).
    pub quick: bool,
    pub families: Vec<Family>,
}

/// All series and the checked expectations.
#[derive(Clone, Debug)]
pub struct Report {
    pub series: Vec<Series>,
    pub checks: Vec<Check>,
}

impl Report {
    /// A report of `series` with the [`expectations`] of `families` checked.
    pub fn checked(series: Vec<Series>, families: &[Family]) -> Self {
        let mut report = Self {
            series,
            checks: Vec::new(),
        };
        report.checks = expectations(families)
            .into_iter()
            .map(|e| report.check(e))
            .collect();
        report
    }

    pub fn find(&self, family: Family, scheme: Scheme, solution: Solution) -> Option<&Series> {
        self.series
            .iter()
            .find(|s| s.family == family && s.scheme == scheme && s.solution == solution)
    }

    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.passed).collect()
    }

    fn check(&self, expectation: Expectation) -> Check {
        let measured = match &expectation {
            Expectation::MinOrder {
                family,
                scheme,
                solution,
                ..
            } => self
                .find(*family, *scheme, *solution)
                .and_then(Series::final_order),
            Expectation::Beats {
                family,
                solution,
                better,
                worse,
                ..
            } => {
                let finest = |scheme| {
                    self.find(*family, scheme, *solution)
                        .and_then(Series::finest)
                        .map(|l| l.l2)
                };
                finest(*worse).zip(finest(*better)).map(|(w, b)| w / b)
            }
            Expectation::MinNonOrthogonality { family, .. } => self
                .series
                .iter()
                .find(|s| s.family == *family)
                .and_then(Series::finest)
                .map(|l| l.max_non_orth),
        };
        let threshold = match expectation {
            Expectation::MinOrder { min, .. } => min,
            Expectation::Beats { factor, .. } => factor,
            Expectation::MinNonOrthogonality { min_degrees, .. } => min_degrees,
        };
        Check {
            passed: measured.is_some_and(|m| m >= threshold),
            measured,
            expectation,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<14} {:<20} {:<14} {:>8} {:>9} {:>9} {:>9} {:>6} {:>6} {:>8} {:>6}",
            "family",
            "scheme",
            "solution",
            "cells",
            "h",
            "L2",
            "Linf",
            "p(L2)",
            "p(Linf)",
            "nonorth",
            "passes"
        )?;
        for s in &self.series {
            let orders = s.orders();
            for (i, l) in s.levels.iter().enumerate() {
                let (p2, pinf) = match i.checked_sub(1).map(|j| orders[j]) {
                    Some((a, b)) => (format!("{a:.2}"), format!("{b:.2}")),
                    None => ("-".into(), "-".into()),
                };
                writeln!(
                    f,
                    "{:<14} {:<20} {:<14} {:>8} {:>9.3e} {:>9.3e} {:>9.3e} {:>6} {:>6} {:>8.1} {:>6}",
                    s.family.name(),
                    s.scheme.name(),
                    s.solution.name(),
                    l.cells,
                    l.h,
                    l.l2,
                    l.linf,
                    p2,
                    pinf,
                    l.max_non_orth,
                    l.passes
                )?;
            }
        }
        writeln!(f)?;
        for c in &self.checks {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// PCG stopping rule of a solve (OpenFOAM-normalised residual).
const LINEAR_CONTROLS: SolverControls = SolverControls {
    tolerance: 1e-11,
    rel_tol: 0.0,
    max_iter: 20_000,
    min_iter: 0,
};

/// Inside the corrector loop each pass only needs to be much more accurate
/// than the right-hand side is: the passes themselves converge the solve.
const CORRECTOR_CONTROLS: SolverControls = SolverControls {
    rel_tol: 1e-3,
    ..LINEAR_CONTROLS
};

/// The non-orthogonal corrector loop stops when no cell value changes by more
/// than this in a pass: far below the discretisation errors measured (> 1e-5).
const PASS_CHANGE_TOLERANCE: f64 = 1e-8;

/// Corrector passes allowed before the loop counts as diverged.
const MAX_PASSES: usize = 200;

/// Runs every family × scheme × solution over the levels and checks the
/// expectations. `progress` gets one line per mesh.
pub fn run(config: &Config, mut progress: impl FnMut(&str)) -> Result<Report, ValidateError> {
    if config.families.is_empty() {
        return Err(ValidateError::Invalid(
            "no mesh family to validate".to_string(),
        ));
    }
    let mut series = Vec::new();
    for &family in &config.families {
        let first = series.len();
        for solution in Solution::ALL {
            for scheme in Scheme::ALL {
                series.push(Series {
                    family,
                    scheme,
                    solution,
                    levels: Vec::new(),
                });
            }
        }
        for &n in family.levels(config.quick) {
            let spec = family.spec(n);
            let start = Instant::now();
            let mesh_error = |source| ValidateError::Mesh {
                spec: spec.clone(),
                source,
            };
            let mesh = spec
                .parse::<BoxSpec>()
                .and_then(|s| s.generate())
                .map_err(mesh_error)?;
            let geometry = mesh.geometry().map_err(mesh_error)?;
            let max_non_orth = (0..mesh.n_internal_faces())
                .map(|f| geometry.non_orthogonality(&mesh, f))
                .fold(0.0, f64::max);
            for s in &mut series[first..] {
                let what = format!(
                    "{} on {spec} ({})",
                    s.solution.name(),
                    s.scheme.foam_description()
                );
                let (l2, linf, passes) = solve_and_measure(&mesh, &geometry, s, &what)?;
                s.levels.push(Level {
                    cells: mesh.n_cells(),
                    h: (geometry.cell_volumes.iter().sum::<f64>() / mesh.n_cells() as f64).cbrt(),
                    l2,
                    linf,
                    max_non_orth,
                    passes,
                });
            }
            progress(&format!(
                "{spec}: {} cells, max non-orthogonality {max_non_orth:.1} degrees, {:.2} s",
                mesh.n_cells(),
                start.elapsed().as_secs_f64()
            ));
        }
    }
    Ok(Report::checked(series, &config.families))
}

/// Solves one manufactured problem with laplacianFoam's corrector loop until
/// converged; returns (L2, Linf, passes).
fn solve_and_measure(
    mesh: &Mesh,
    geometry: &Geometry,
    series: &Series,
    what: &str,
) -> Result<(f64, f64, usize), ValidateError> {
    let fvm_error = |source| ValidateError::Fvm {
        what: what.to_string(),
        source,
    };
    let problem = LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::Uniform(SOURCE),
        series.solution.boundary(mesh, geometry),
    );
    let mut system = LaplacianSystem::new(mesh, geometry, series.scheme.schemes(), &problem)
        .map_err(fvm_error)?;
    let corrected = series.scheme.schemes().sn_grad.is_corrected();
    let mut t = vec![0.0; mesh.n_cells()];
    let mut previous = t.clone();
    let mut passes = 0;
    loop {
        passes += 1;
        system.update_rhs(&t, None).map_err(fvm_error)?;
        let perf = solve_pcg(
            &system.matrix,
            PreconditionerKind::Dic,
            &system.rhs,
            &mut t,
            if corrected {
                &CORRECTOR_CONTROLS
            } else {
                &LINEAR_CONTROLS
            },
            "T",
        )
        .map_err(|source| ValidateError::Solve {
            what: what.to_string(),
            source,
        })?;
        if !perf.converged {
            return Err(ValidateError::Invalid(format!(
                "{what}: PCG did not converge in {} iterations (residual {:e})",
                perf.iterations, perf.final_residual
            )));
        }
        let change = t
            .iter()
            .zip(&previous)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        if !corrected || change < PASS_CHANGE_TOLERANCE {
            break;
        }
        if passes == MAX_PASSES || !change.is_finite() {
            return Err(ValidateError::Invalid(format!(
                "{what}: the non-orthogonal correction did not converge in {passes} passes \
                 (last change {change:e})"
            )));
        }
        previous.copy_from_slice(&t);
    }
    let error: Vec<f64> = t
        .iter()
        .zip(&geometry.cell_centres)
        .map(|(&value, &centre)| value - series.solution.exact(centre))
        .collect();
    let norms = ErrorNorms::new(&error, &geometry.cell_volumes);
    Ok((norms.l2, norms.linf, passes))
}

/// Where the plot's font may be, tried in order unless `$FVPOISSON_FONT`
/// names the one font to use.
pub const FONT_CANDIDATES: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Plot size in pixels.
const PLOT_SIZE: (u32, u32) = (1800, 800);

/// Whether the plot has text.
#[derive(Clone, Debug, PartialEq)]
pub enum PlotText {
    /// Labels drawn with the font at this path.
    Font(PathBuf),
    /// No usable font found: lines only, no labels or legend.
    NoFont,
}

/// Loads the first readable font (`$FVPOISSON_FONT` if set, else
/// [`FONT_CANDIDATES`]) and registers it as plotters' `sans-serif`, once per
/// process.
fn plot_font() -> &'static PlotText {
    static FONT: std::sync::OnceLock<PlotText> = std::sync::OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = match std::env::var_os("FVPOISSON_FONT") {
            Some(path) => vec![PathBuf::from(path)],
            None => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
        };
        for path in candidates {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            // plotters keeps fonts for the whole process: leaking one file is intended.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(
                "sans-serif",
                plotters::style::FontStyle::Normal,
                bytes,
            )
            .is_ok()
            {
                return PlotText::Font(path);
            }
        }
        PlotText::NoFont
    })
}

/// Writes the convergence plot (L2 error against h, log-log; one panel per
/// Dirichlet solution, one line per family and scheme, slopes 1 and 2 for
/// reference) as a PNG, atomically. Without a font the plot has no text; the
/// result says so.
pub fn write_plot(report: &Report, path: &Path) -> Result<PlotText, ValidateError> {
    write_png(path, PLOT_SIZE, |pixels, labels| {
        draw_plot(report, pixels, labels)
    })
}

/// Draws a `size` RGB plot with `draw` (told whether a font is there for
/// labels) and writes it as a PNG at `path`, atomically.
pub(crate) fn write_png(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&mut [u8], bool) -> DrawResult,
) -> Result<PlotText, ValidateError> {
    let text = plot_font().clone();
    let (w, h) = size;
    let mut pixels = vec![255u8; (w * h * 3) as usize];
    draw(&mut pixels, text != PlotText::NoFont)
        .map_err(|e| ValidateError::Plot(format!("drawing {}: {e}", path.display())))?;
    crate::io::write_atomic(path, |out| {
        let mut encoder = png::Encoder::new(out, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(std::io::Error::other)?;
        writer
            .write_image_data(&pixels)
            .map_err(std::io::Error::other)?;
        writer.finish().map_err(std::io::Error::other)
    })
    .map_err(|e| ValidateError::Plot(format!("cannot write the plot: {e}")))?;
    Ok(text)
}

/// Colour of a family's lines.
fn family_colour(family: Family) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    match family {
        Family::Hex => RGBColor(0, 0, 0),
        Family::HexPerturbed => RGBColor(31, 119, 180),
        Family::Tet => RGBColor(214, 39, 40),
        Family::TetPerturbed => RGBColor(255, 127, 14),
        Family::Prism => RGBColor(44, 160, 44),
    }
}

/// Line width of a scheme: the more accurate, the thicker.
fn scheme_width(scheme: Scheme) -> u32 {
    match scheme {
        Scheme::Uncorrected => 1,
        Scheme::Corrected => 2,
        Scheme::CorrectedLeastSquares => 2,
        Scheme::BoundaryCorrectedLeastSquares => 4,
    }
}

/// Legend wording of a scheme.
fn scheme_legend(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Uncorrected => "Gauss linear uncorrected",
        Scheme::Corrected => "Gauss linear corrected (default)",
        Scheme::CorrectedLeastSquares => "corrected, leastSquares grad",
        Scheme::BoundaryCorrectedLeastSquares => "boundaryCorrected, leastSquares grad",
    }
}

pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws the legend of a chart's labelled series (top right, framed, on a
/// light background), as the flow plots show it.
pub(crate) fn draw_series_labels<'a, DB, CT>(
    chart: &mut plotters::chart::ChartContext<'a, DB, CT>,
) -> DrawResult
where
    DB: plotters::prelude::DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate,
{
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 17))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

/// Draws a chart's grid and axes: with `descriptions` (x, y), the axis
/// descriptions in the plots' fonts and what `style` sets besides (label
/// formatters); without, no tick labels either.
pub(crate) fn draw_axes<'a, 'b, DB, X, Y>(
    chart: &'b mut plotters::chart::ChartContext<
        'a,
        DB,
        plotters::coord::cartesian::Cartesian2d<X, Y>,
    >,
    descriptions: Option<(&str, &str)>,
    style: impl FnOnce(&mut plotters::chart::MeshStyle<'a, 'b, X, Y, DB>),
) -> DrawResult
where
    DB: plotters::prelude::DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: plotters::coord::ranged1d::Ranged
        + plotters::coord::ranged1d::ValueFormatter<
            <X as plotters::coord::ranged1d::Ranged>::ValueType,
        >,
    Y: plotters::coord::ranged1d::Ranged
        + plotters::coord::ranged1d::ValueFormatter<
            <Y as plotters::coord::ranged1d::Ranged>::ValueType,
        >,
{
    let mut mesh = chart.configure_mesh();
    match descriptions {
        Some((x_desc, y_desc)) => {
            mesh.x_desc(x_desc)
                .y_desc(y_desc)
                .label_style(("sans-serif", 17))
                .axis_desc_style(("sans-serif", 19));
            style(&mut mesh);
        }
        None => {
            mesh.x_labels(0).y_labels(0);
        }
    }
    mesh.draw()?;
    Ok(())
}

/// Draws a scheme's marker at `p` (any coordinate system).
fn draw_markers<DB, CT>(
    chart: &mut plotters::chart::ChartContext<'_, DB, CT>,
    scheme: Scheme,
    points: impl Iterator<Item = CT::From>,
    style: plotters::style::ShapeStyle,
) -> DrawResult
where
    DB: plotters::prelude::DrawingBackend,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate,
    CT::From: Clone + 'static,
{
    use plotters::prelude::*;
    match scheme {
        Scheme::Uncorrected => {
            chart.draw_series(points.map(|p| Cross::new(p, 6, style)))?;
        }
        Scheme::Corrected => {
            chart.draw_series(points.map(|p| Circle::new(p, 5, style.filled())))?;
        }
        Scheme::CorrectedLeastSquares => {
            chart.draw_series(points.map(|p| TriangleMarker::new(p, 7, style)))?;
        }
        Scheme::BoundaryCorrectedLeastSquares => {
            chart.draw_series(points.map(|p| {
                EmptyElement::at(p) + Rectangle::new([(-5, -5), (5, 5)], style.filled())
            }))?;
        }
    }
    Ok(())
}

/// Draws both panels and, with `labels`, a legend strip into an RGB buffer
/// of [`PLOT_SIZE`].
fn draw_plot(report: &Report, pixels: &mut [u8], labels: bool) -> DrawResult {
    use plotters::prelude::*;
    let grey = RGBColor(110, 110, 110);
    let root = BitMapBackend::with_buffer(pixels, PLOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (plots, legend) = root.split_horizontally(PLOT_SIZE.0 - 380);
    let panels = plots.split_evenly((1, 2));
    for (panel, solution) in panels.iter().zip([Solution::Poisson, Solution::Quadratic]) {
        let series: Vec<&Series> = report
            .series
            .iter()
            .filter(|s| s.solution == solution && s.levels.len() > 1)
            .filter(|s| !(s.family.orthogonal() && s.scheme != Scheme::Corrected))
            .collect();
        let points = series.iter().flat_map(|s| &s.levels);
        let (mut h_min, mut h_max, mut e_min, mut e_max) = (f64::MAX, 0.0f64, f64::MAX, 0.0f64);
        for l in points {
            h_min = h_min.min(l.h);
            h_max = h_max.max(l.h);
            e_min = e_min.min(l.l2);
            e_max = e_max.max(l.l2);
        }
        if series.is_empty() || !(e_min > 0.0 && e_max.is_finite()) {
            continue;
        }
        let x_range = (h_min / 1.3)..(h_max * 1.3);
        let y_range = (e_min / 4.0)..(e_max * 2.0);
        let mut builder = ChartBuilder::on(panel);
        builder.margin(20);
        if labels {
            let title = match solution {
                Solution::Quadratic => "quadratic T = 1 − r², L2 error",
                _ => "poisson T = exp(x+y)cos(√2z) − r², L2 error",
            };
            builder
                .caption(title, ("sans-serif", 24))
                .x_label_area_size(50)
                .y_label_area_size(70);
        }
        // Ticks at 1, 2 and 5 per decade: the h range spans about one decade.
        let ticks: Vec<f64> = (-4..=1)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
            .filter(|t| x_range.contains(t))
            .collect();
        let mut chart = builder.build_cartesian_2d(
            x_range.log_scale().with_key_points(ticks),
            y_range.log_scale(),
        )?;
        let descriptions = labels.then_some(("h = (ΣV/N)^(1/3)", "L2 error"));
        draw_axes(&mut chart, descriptions, |mesh| {
            mesh.x_label_formatter(&|v| format!("{v}"))
                .y_label_formatter(&|v| format!("{v:.0e}"));
        })?;
        // Reference slopes from the bottom-left corner, labelled at their ends.
        for slope in [1.0, 2.0] {
            let (x0, y0) = (h_min, e_min / 2.0);
            let x1 = h_max;
            let y1 = y0 * (x1 / x0).powf(slope);
            chart.draw_series(DashedLineSeries::new(
                [(x0, y0), (x1, y1)],
                8,
                6,
                ShapeStyle::from(&grey).stroke_width(2),
            ))?;
            if labels {
                chart.draw_series([Text::new(
                    format!("slope {slope}"),
                    (x1 / 1.25, y1),
                    ("sans-serif", 17).into_font().color(&grey),
                )])?;
            }
        }
        for s in series {
            let style =
                ShapeStyle::from(&family_colour(s.family)).stroke_width(scheme_width(s.scheme));
            let data: Vec<(f64, f64)> = s.levels.iter().map(|l| (l.h, l.l2)).collect();
            draw_markers(&mut chart, s.scheme, data.iter().copied(), style)?;
            chart.draw_series(LineSeries::new(data, style))?;
        }
    }
    if labels {
        draw_legend(report, &legend)?;
    }
    root.present()?;
    Ok(())
}

/// The legend strip: colour = family, marker and width = scheme.
fn draw_legend<DB>(
    report: &Report,
    area: &plotters::drawing::DrawingArea<DB, plotters::coord::Shift>,
) -> DrawResult
where
    DB: plotters::prelude::DrawingBackend,
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    let font = ("sans-serif", 17).into_font();
    let mut chart = ChartBuilder::on(area)
        .margin_top(70)
        .build_cartesian_2d(0i32..380, 0i32..700)?;
    let mut y = 690;
    let line = |chart: &mut ChartContext<'_, DB, _>, y: &mut i32, text: &str, bold: bool| {
        let style = if bold {
            ("sans-serif", 19).into_font().style(FontStyle::Bold)
        } else {
            font.clone()
        };
        let at = *y;
        *y -= 30;
        chart
            .draw_series([Text::new(text.to_string(), (60, at), style)])
            .map(|_| at - 8)
    };
    line(&mut chart, &mut y, "mesh family (colour)", true)?;
    let families: Vec<Family> = Family::ALL
        .into_iter()
        .filter(|f| report.series.iter().any(|s| s.family == *f))
        .collect();
    for family in families {
        let name = if family.orthogonal() {
            format!("{} (all schemes agree)", family.name())
        } else {
            family.name().to_string()
        };
        let at = line(&mut chart, &mut y, &name, false)?;
        chart.draw_series(LineSeries::new(
            [(5, at), (50, at)],
            ShapeStyle::from(&family_colour(family)).stroke_width(4),
        ))?;
    }
    y -= 20;
    line(&mut chart, &mut y, "scheme (marker, width)", true)?;
    for scheme in Scheme::ALL {
        let at = line(&mut chart, &mut y, scheme_legend(scheme), false)?;
        let style = ShapeStyle::from(&BLACK).stroke_width(scheme_width(scheme));
        chart.draw_series(LineSeries::new([(5, at), (50, at)], style))?;
        draw_markers(&mut chart, scheme, [(27, at)].into_iter(), style)?;
    }
    y -= 20;
    line(&mut chart, &mut y, "dashed grey: slopes 1 and 2", false)?;
    line(&mut chart, &mut y, "perturbed meshes: one seed,", false)?;
    line(&mut chart, &mut y, "not nested", false)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_gradients_match_finite_differences() {
        let x = Vec3::new(0.3, 0.7, 0.45);
        let eps = 1e-6;
        for solution in Solution::ALL {
            let g = solution.gradient(x);
            for axis in 0..3 {
                let mut dx = Vec3::zeros();
                dx[axis] = eps;
                let fd = (solution.exact(x + dx) - solution.exact(x - dx)) / (2.0 * eps);
                assert!((fd - g[axis]).abs() < 1e-8, "{solution:?} axis {axis}");
            }
            // −∇²T = 6 by second differences.
            let lap: f64 = (0..3)
                .map(|axis| {
                    let mut dx = Vec3::zeros();
                    dx[axis] = 1e-4;
                    (solution.exact(x + dx) - 2.0 * solution.exact(x) + solution.exact(x - dx))
                        / 1e-8
                })
                .sum();
            assert!((-lap - SOURCE).abs() < 1e-5, "{solution:?}: {lap}");
        }
    }

    #[test]
    fn families_parse_and_bad_names_are_named() {
        assert_eq!(
            Family::parse_list("hex,tet-perturbed").unwrap(),
            [Family::Hex, Family::TetPerturbed]
        );
        let err = Family::parse_list("hex,polyhedra").unwrap_err().to_string();
        assert!(
            err.contains("'polyhedra'") && err.contains("prism"),
            "{err}"
        );
    }

    /// The plot without a font: lines only, still a drawing.
    #[test]
    fn plot_without_labels_draws_lines() {
        let level = |h: f64| Level {
            cells: 1,
            h,
            l2: h * h,
            linf: h,
            max_non_orth: 0.0,
            passes: 1,
        };
        let report = Report {
            series: vec![Series {
                family: Family::Tet,
                scheme: Scheme::Corrected,
                solution: Solution::Poisson,
                levels: vec![level(0.1), level(0.05)],
            }],
            checks: Vec::new(),
        };
        let (w, h) = PLOT_SIZE;
        let mut pixels = vec![255u8; (w * h * 3) as usize];
        draw_plot(&report, &mut pixels, false).unwrap();
        let red = pixels
            .chunks(3)
            .filter(|p| p[0] > 150 && p[1] < 80 && p[2] < 80)
            .count();
        assert!(red > 100, "tet line drawn: {red} red pixels");
    }
}
