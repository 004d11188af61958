//! [`CaseSetup`]: everything a run needs, independent of the file it came from
//! (native `case.toml` or an OpenFOAM case directory).
//!
//! Scalars given over space (Γ, sources, boundary values, the initial field,
//! the exact solution) are [`Scalar`]s: a number, one value per cell or face,
//! or a function of position and time. They become `fvm` inputs at a given
//! time with [`Scalar::cell_field`] and [`BoundarySpec::resolve`].

use crate::foam::write::format_g;
use crate::fvm::{BoundaryCondition, CellField, PatchValues, Schemes, SingularPolicy};
use crate::io::foam_field::FoamWriteOptions;
use crate::mesh::{Geometry, Mesh, MeshSource, Patch, PatchKind, Vec3};
use crate::solve::distributed::Deflation;
use crate::solve::gamg::GamgSettings;
use crate::solve::{
    EquilibrationKind, KrylovMethod, Preconditioner, PreconditionerKind, SmootherSettings,
    SolverControls,
};
use crate::sparse::RowOrdering;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::CaseError;

/// A scalar function of position and time, with the text it was given as
/// (an expression, or a description) for logs and errors.
#[derive(Clone)]
pub struct SpaceTimeFn {
    pub text: String,
    f: Arc<dyn Fn(Vec3, f64) -> f64 + Send + Sync>,
}

impl SpaceTimeFn {
    pub fn new(
        text: impl Into<String>,
        f: impl Fn(Vec3, f64) -> f64 + Send + Sync + 'static,
    ) -> Self {
        Self {
            text: text.into(),
            f: Arc::new(f),
        }
    }

    pub fn eval(&self, position: Vec3, time: f64) -> f64 {
        (self.f)(position, time)
    }
}

impl fmt::Debug for SpaceTimeFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpaceTimeFn({})", self.text)
    }
}

/// A scalar over cells or over the faces of one patch.
#[derive(Clone, Debug)]
pub enum Scalar {
    Uniform(f64),
    /// One value per cell (fields) or per patch face (boundary values).
    Values(Vec<f64>),
    Function(SpaceTimeFn),
}

impl Scalar {
    /// The scalar at `time` as an `fvm` cell field (functions are evaluated at
    /// cell centres, and for Γ also at boundary face centres).
    pub fn cell_field(&self, time: f64) -> CellField {
        match self {
            Self::Uniform(v) => CellField::Uniform(*v),
            Self::Values(v) => CellField::PerCell(v.clone()),
            Self::Function(f) => {
                let f = f.clone();
                CellField::function(move |x| f.eval(x, time))
            }
        }
    }

    /// Values at `points` (cell or face centres) at `time`; `what` names the
    /// scalar in the error when a value list has the wrong length.
    pub fn values_at(&self, points: &[Vec3], time: f64, what: &str) -> Result<Vec<f64>, CaseError> {
        match self {
            Self::Uniform(v) => Ok(crate::fvm::uniform_values(*v, points.len())),
            Self::Values(v) if v.len() != points.len() => Err(CaseError::invalid(format!(
                "{what} has {} values but {} are needed",
                v.len(),
                points.len()
            ))),
            Self::Values(v) => Ok(v.clone()),
            Self::Function(f) => Ok(crate::fvm::evaluate_at(points, |x| f.eval(x, time))),
        }
    }

    /// The scalar at `points` (cell centres) at `time` as a VTK field named
    /// `name`: uniform and per-cell values are written as they are, with no
    /// per-cell copy; a function is evaluated into `storage`.
    pub fn vtk_field<'a>(
        &'a self,
        name: &'a str,
        points: &[Vec3],
        time: f64,
        storage: &'a mut Vec<f64>,
    ) -> Result<crate::io::vtk::Field<'a>, CaseError> {
        use crate::io::vtk::Field;
        match self {
            Self::Uniform(v) => Ok(Field::uniform(name, *v, points.len())),
            Self::Values(v) if v.len() == points.len() => Ok(Field::scalar(name, v)),
            _ => {
                *storage = self.values_at(points, time, name)?;
                let storage: &'a Vec<f64> = storage;
                Ok(Field::scalar(name, storage))
            }
        }
    }

    /// Whether the scalar changes with time (a function may; values do not).
    pub fn is_function(&self) -> bool {
        matches!(self, Self::Function(_))
    }

    /// The patch values on `faces` (the patch's face centres) at `time`.
    fn patch_values(
        &self,
        faces: &[Vec3],
        time: f64,
        what: &str,
    ) -> Result<PatchValues, CaseError> {
        Ok(match self {
            Self::Uniform(v) => PatchValues::Uniform(*v),
            _ => PatchValues::PerFace(self.values_at(faces, time, what)?),
        })
    }
}

/// A boundary condition whose values may be functions of position and time,
/// resolved to an [`fvm::BoundaryCondition`](BoundaryCondition) at the patch's
/// face centres.
pub type BoundarySpec = BoundaryCondition<Scalar>;

impl BoundarySpec {
    /// Whether any value of the condition is a function (re-evaluated each time step).
    pub fn is_time_dependent(&self) -> bool {
        match self {
            Self::FixedValue(v) | Self::FixedGradient(v) => v.is_function(),
            Self::Mixed {
                ref_value,
                ref_gradient,
                value_fraction,
            } => {
                ref_value.is_function()
                    || ref_gradient.is_function()
                    || value_fraction.is_function()
            }
            Self::ZeroGradient | Self::Empty => false,
        }
    }

    /// The condition on `patch` at `time`; `face_centres` are the patch's face centres.
    pub fn resolve(
        &self,
        patch: &Patch,
        face_centres: &[Vec3],
        time: f64,
    ) -> Result<BoundaryCondition, CaseError> {
        let values = |s: &Scalar, what: &str| {
            s.patch_values(
                face_centres,
                time,
                &format!("patch '{}': {what}", patch.name),
            )
        };
        Ok(match self {
            Self::FixedValue(v) => BoundaryCondition::FixedValue(values(v, "value")?),
            Self::ZeroGradient => BoundaryCondition::ZeroGradient,
            Self::FixedGradient(g) => BoundaryCondition::FixedGradient(values(g, "gradient")?),
            Self::Mixed {
                ref_value,
                ref_gradient,
                value_fraction,
            } => BoundaryCondition::Mixed {
                ref_value: values(ref_value, "refValue")?,
                ref_gradient: values(ref_gradient, "refGradient")?,
                value_fraction: values(value_fraction, "valueFraction")?,
            },
            Self::Empty => BoundaryCondition::Empty,
        })
    }
}

/// The equation solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Physics {
    /// laplacianFoam: ∂T/∂t − ∇·(Γ∇T) = Su + Sp·T (steady: without ∂T/∂t).
    Laplacian,
}

/// Outer loop: steady iterations or implicit Euler time steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeControl {
    /// simpleFoam-style iterations (each: the non-orthogonal corrector loop);
    /// stop when the first solve's initial residual of an iteration is below
    /// `residual_tolerance` (OpenFOAM `residualControl`; 0: never), or after
    /// `max_iterations`.
    Steady {
        max_iterations: usize,
        residual_tolerance: f64,
    },
    /// Implicit Euler from t = 0 to `end_time` by `delta_t` (the last step is
    /// shortened to end exactly at `end_time`).
    Euler { delta_t: f64, end_time: f64 },
}

/// More time steps (or steady iterations) than any sensible run takes: a
/// larger count is a typo in deltaT or endTime, refused rather than run for days.
pub const MAX_TIME_STEPS: f64 = 1e7;

/// `Err` with a message naming the count when `steps` exceeds [`MAX_TIME_STEPS`].
pub fn check_step_count(steps: f64, delta_t: f64, span: f64) -> Result<(), String> {
    check_steps_of("deltaT", delta_t, span, steps, "")
}

/// `Err` naming `key` when stepping `span` by `step` takes `steps`, more
/// than [`MAX_TIME_STEPS`]; `bound` qualifies the count ("at least " where
/// `step` is the largest step, as pimpleFoam's `maxDeltaT`).
pub fn check_steps_of(
    key: &str,
    step: f64,
    span: f64,
    steps: f64,
    bound: &str,
) -> Result<(), String> {
    if steps <= MAX_TIME_STEPS {
        return Ok(());
    }
    Err(format!(
        "{key} {} over {} of time makes {bound}{} steps, more than the {} allowed: check {key} \
         and endTime",
        format_g(step),
        format_g(span),
        format_g(steps),
        format_g(MAX_TIME_STEPS)
    ))
}

/// More non-orthogonal correctors than any mesh needs (each is a full linear
/// solve per time step; two or three settle the worst meshes): a larger count
/// is a typo, refused before the run starts rather than run for days.
pub const MAX_NON_ORTH_CORRECTORS: usize = 1000;

/// `Err` naming `nNonOrthogonalCorrectors` when `n` exceeds
/// [`MAX_NON_ORTH_CORRECTORS`].
pub fn check_non_orth_correctors(n: usize) -> Result<usize, String> {
    if n <= MAX_NON_ORTH_CORRECTORS {
        return Ok(n);
    }
    Err(format!(
        "nNonOrthogonalCorrectors {n} is more than the {MAX_NON_ORTH_CORRECTORS} allowed (each \
         corrector is a full linear solve per time step; 0 to 3 is usual)"
    ))
}

/// The linear solver of one field (OpenFOAM `fvSolution` `solvers { T {...} }`):
/// PCG with its preconditioner and the equilibration of the system it is
/// applied to (fvpoisson's own setting), or OpenFOAM's smoothSolver with a
/// smoother; the stopping rules, and the row ordering of its GPU solves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearSolver {
    /// PCG's preconditioner (unused by smoothSolver).
    pub preconditioner: Preconditioner,
    /// `Some`: smoothSolver with this smoother (`nSweeps` in its `sweeps`) instead of PCG.
    pub smoother: Option<SmootherSettings>,
    /// `Some`: OpenFOAM's GAMG solver (`solve::gamg::solve_gamg`) instead of
    /// PCG on the CPU; the GPU and distributed runs take its `amg` as PCG's
    /// preconditioner (PCG with AMG is `preconditioner` `Preconditioner::Amg`).
    pub gamg: Option<GamgSettings>,
    /// PCG's equilibration (smoothSolver takes none).
    pub equilibration: EquilibrationKind,
    pub controls: SolverControls,
    /// Row ordering of the GPU's mod-SELL matrix (the CPU solves in the
    /// mesh's cell order, as OpenFOAM does). Multicolour Gauss–Seidel then
    /// groups the rows by colour; block Jacobi uses its own block ordering.
    pub ordering: RowOrdering,
    /// `Some`: GMRES or PBiCGStab (`solve::krylov`) with `preconditioner`
    /// instead of PCG.
    pub krylov: Option<KrylovMethod>,
    /// Distributed runs' coarse space over the ranks (PCG and GAMG; a serial
    /// run has one subdomain and ignores it).
    pub deflation: Deflation,
    /// The preconditioner (GAMG: its AMG) was given with keys that tune it
    /// for the GPU (`precision` of DIC / IC(0); GAMG's `cycle`, `precision`,
    /// `passes`, ...: `solve::registry::GpuDefault::explicit_keys`): the GPU
    /// runs it as given. False: the GPU runs its measured default
    /// (`solve::registry::GPU_DEFAULTS`). The CPU ignores it.
    pub gpu_keys_given: bool,
}

impl LinearSolver {
    /// Whether the solve is PCG: no Krylov method, smoother or GAMG in its
    /// place (preconditioner, equilibration and deflation not looked at).
    pub fn is_pcg(&self) -> bool {
        self.krylov.is_none() && self.smoother.is_none() && self.gamg.is_none()
    }

    /// The preconditioner of PCG where this solver runs as PCG (on a GPU,
    /// over the ranks of a distributed run): GAMG's AMG for GAMG, else the
    /// preconditioner.
    pub fn pcg_preconditioner(&self) -> Preconditioner {
        match self.gamg {
            Some(s) => Preconditioner::Amg(s.amg),
            None => self.preconditioner,
        }
    }
}

impl Default for LinearSolver {
    fn default() -> Self {
        Self {
            preconditioner: PreconditionerKind::Dic.into(),
            smoother: None,
            gamg: None,
            equilibration: EquilibrationKind::None,
            controls: SolverControls::default(),
            ordering: RowOrdering::default(),
            krylov: None,
            deflation: Deflation::None,
            gpu_keys_given: false,
        }
    }
}

/// Solver settings of the field and, like OpenFOAM's `pFinal`, of the last
/// non-orthogonal corrector of each iteration or time step (`finalInnerIter`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct SolverSettings {
    pub regular: LinearSolver,
    pub final_corrector: Option<LinearSolver>,
}

impl SolverSettings {
    /// Sets the GPU row ordering of every solver (the command line's `--ordering`).
    pub fn set_ordering(&mut self, ordering: RowOrdering) {
        self.regular.ordering = ordering;
        if let Some(last) = &mut self.final_corrector {
            last.ordering = ordering;
        }
    }

    /// The solver of corrector `corrector` out of `n_correctors + 1` solves.
    pub fn for_corrector(&self, corrector: usize, n_correctors: usize) -> &LinearSolver {
        match &self.final_corrector {
            Some(last) if corrector == n_correctors => last,
            _ => &self.regular,
        }
    }
}

/// Result file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// ParaView series (`io::vtk::VtkSeries`).
    Vtk,
    /// OpenFOAM time directories.
    Foam,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OutputSettings {
    pub formats: Vec<OutputFormat>,
    /// Write every `interval`-th iteration or time step; the last is always written.
    pub interval: usize,
    /// Where VTK files go (relative paths are relative to the case directory).
    /// OpenFOAM time directories always go in the case directory itself.
    pub directory: PathBuf,
    /// How OpenFOAM time directories are written (format, `writePrecision`,
    /// compression, time names, the field's dimensions).
    pub foam: FoamWriteOptions,
    /// How VTK data arrays are stored (raw binary, zlib, ascii).
    pub vtk_encoding: crate::io::vtk::VtkEncoding,
}

impl Default for OutputSettings {
    fn default() -> Self {
        Self {
            formats: vec![OutputFormat::Vtk],
            interval: 1,
            directory: PathBuf::from("results"),
            foam: FoamWriteOptions::default(),
            vtk_encoding: crate::io::vtk::VtkEncoding::default(),
        }
    }
}

/// How the implicit source Sp·T is split between the matrix and the
/// right-hand side; both reach the same converged solution, but differ after a
/// fixed number of non-orthogonal correctors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SourceSplit {
    /// Sp < 0 onto the diagonal (keeps the matrix positive definite for any
    /// Sp ≤ 0), Sp > 0 explicit with the current T: `fvm::SuSp` on the side
    /// of the unknowns.
    #[default]
    Stable,
    /// laplacianFoam's: `== fvOptions(T)` subtracts the source matrix, in which
    /// `scalarSemiImplicitSource` put `fvm::SuSp(Sp, T)`, so Sp > 0 goes onto
    /// the diagonal (reducing it) and Sp < 0 stays explicit with the current T.
    OpenFoam,
}

/// The condition a case gives for one patch.
#[derive(Clone, Debug)]
pub struct PatchCondition {
    pub patch: String,
    pub spec: BoundarySpec,
    /// Where it was given (`case.toml:12:1`, `0/T`), for errors.
    pub origin: String,
}

/// Everything a run needs, whatever the case format.
#[derive(Clone, Debug)]
pub struct CaseSetup {
    /// The case file (`case.toml`, `system/controlDict`), named in errors.
    pub origin: String,
    /// The case directory: relative output paths start here.
    pub case_dir: PathBuf,
    pub mesh: MeshSource,
    pub physics: Physics,
    /// Name of the solved field (`T`, `p`): log lines, file and field names.
    pub field: String,
    /// Diffusivity Γ > 0.
    pub gamma: Scalar,
    /// Explicit source Su (right-hand side, per unit volume).
    pub source: Scalar,
    /// Implicit source coefficient Sp (OpenFOAM `scalarSemiImplicitSource`):
    /// the equation gains Sp·T on its source side; Sp ≤ 0 keeps it positive definite.
    pub implicit_source: Option<Scalar>,
    /// Which part of Sp·T goes into the matrix.
    pub source_split: SourceSplit,
    /// Condition of each named patch; patches not named use `default_boundary`.
    pub boundary: Vec<PatchCondition>,
    pub default_boundary: Option<BoundarySpec>,
    /// Initial field (steady: the first iterate; Euler: T at t = 0).
    pub initial: Scalar,
    pub schemes: Schemes,
    pub n_non_orth_correctors: usize,
    pub time: TimeControl,
    /// Level of all-Neumann steady problems.
    pub singular: SingularPolicy,
    pub solver: SolverSettings,
    pub output: OutputSettings,
    /// Exact solution of manufactured cases: error norms are reported, the
    /// error is written as a field.
    pub exact: Option<Scalar>,
}

impl CaseSetup {
    /// One condition per mesh patch, in patch order, at `time`. Patches of kind
    /// `empty` default to `empty` (not to `default_boundary`). A patch with neither its own condition nor a
    /// default is an error naming it and the case file; so is a condition
    /// naming a patch the mesh lacks (named with where it was given).
    pub fn boundary_conditions(
        &self,
        mesh: &Mesh,
        geometry: &Geometry,
        time: f64,
    ) -> Result<Vec<BoundaryCondition>, CaseError> {
        let patches = mesh.patches();
        for given in &self.boundary {
            if mesh.patch(&given.patch).is_none() {
                return Err(CaseError::invalid(format!(
                    "{}: boundary condition for patch '{}', but the mesh has no such patch \
                     (its patches: {})",
                    given.origin,
                    given.patch,
                    patch_names(patches)
                )));
            }
        }
        patches
            .iter()
            .map(|patch| {
                let spec = self
                    .boundary
                    .iter()
                    .find(|given| given.patch == patch.name)
                    .map(|given| &given.spec)
                    .or((patch.kind == PatchKind::Empty).then_some(&BoundarySpec::Empty))
                    .or(self.default_boundary.as_ref())
                    .ok_or_else(|| {
                        CaseError::invalid(format!(
                            "{}: patch '{}' has no boundary condition; give one for it \
                             or a default",
                            self.origin, patch.name
                        ))
                    })?;
                let first = patch.start - mesh.n_internal_faces();
                let centres = &geometry.boundary_face_centres[first..first + patch.size];
                spec.resolve(patch, centres, time)
            })
            .collect()
    }

    /// Whether some boundary value is re-evaluated at each time.
    pub fn boundary_is_time_dependent(&self) -> bool {
        self.boundary
            .iter()
            .map(|given| &given.spec)
            .chain(&self.default_boundary)
            .any(BoundarySpec::is_time_dependent)
    }
}

fn patch_names(patches: &[Patch]) -> String {
    patches
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
