//! Cases: what to solve on which mesh, how, and what to write
//! ([`CaseSetup`]), read from a native `case.toml` ([`case_toml`]) and run on the
//! CPU ([`run`]).

pub mod case_toml;
pub mod cavity_profiles;
pub mod decompose;
pub mod expr;
pub mod flow_case;
pub mod foam_to_vtk;
pub mod function_objects;
pub mod ico_foam;
pub mod openfoam;
pub mod potential_foam;
#[cfg(test)]
mod preconditioner_grammars;
pub mod run;
pub mod setup;
pub mod simple_foam;

pub use run::{
    host_assembly_reason, run_case, run_case_with_mesh, Device, ErrorNorms, GpuSet, RunSummary,
    SolveTarget,
};
pub use setup::{
    BoundarySpec, CaseSetup, LinearSolver, OutputFormat, OutputSettings, PatchCondition, Physics,
    Scalar, SolverSettings, SourceSplit, SpaceTimeFn, TimeControl,
};

use crate::flow::FlowError;
use crate::fvm::FvmError;
use crate::gpu::assembly::AssemblyError;
use crate::gpu::GpuError;
use crate::io::OutputError;
use crate::mesh::{Mesh, MeshError};
use crate::solve::FieldSolveError;
use std::path::{Path, PathBuf};

/// Everything that can stop a case: bad case files (named with line and
/// column), a bad mesh, a discretisation or solver failure, an output failure.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// A case file has a syntax or value error at `line`:`column` (1-based).
    #[error("{}:{line}:{column}: {msg}", file.display())]
    Parse {
        file: PathBuf,
        line: usize,
        column: usize,
        msg: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Mesh(#[from] MeshError),
    #[error(transparent)]
    Fvm(#[from] FvmError),
    #[error(transparent)]
    Solve(#[from] FieldSolveError),
    #[error(transparent)]
    Output(#[from] OutputError),
    /// A GPU failure outside a linear solve (assembly, transfers).
    #[error("GPU: {0}")]
    Device(#[from] GpuError),
}

impl From<AssemblyError> for CaseError {
    fn from(e: AssemblyError) -> Self {
        match e {
            AssemblyError::Fvm(e) => Self::Fvm(e),
            AssemblyError::Gpu(e) => Self::Device(e),
            e @ AssemblyError::Unsupported(_) => Self::Invalid(e.to_string()),
        }
    }
}

impl CaseError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }

    /// A flow computation's error as the case's: an invalid setting's
    /// message prefixed by `origin` (the case file or directory it came
    /// from).
    pub(crate) fn from_flow(origin: impl std::fmt::Display, e: FlowError) -> Self {
        match e {
            FlowError::Fvm(e) => Self::Fvm(e),
            FlowError::Solve(e) => Self::Solve(e),
            FlowError::Invalid(msg) => Self::invalid(format!("{origin}: {msg}")),
        }
    }
}

/// Reads the case in `case_dir`: its `case.toml`, or an OpenFOAM case
/// (`system/controlDict`).
pub fn read_case_dir(case_dir: &Path) -> Result<CaseSetup, CaseError> {
    read_case_dir_with_mesh(case_dir).map(|(setup, _)| setup)
}

/// [`read_case_dir`], plus the mesh where reading the case loaded it (OpenFOAM
/// cases, whose fields are checked against the mesh), for [`run_case_with_mesh`].
pub fn read_case_dir_with_mesh(case_dir: &Path) -> Result<(CaseSetup, Option<Mesh>), CaseError> {
    if !case_dir.is_dir() {
        let what = if case_dir.exists() {
            "not a directory; give the case directory"
        } else {
            "no such directory"
        };
        return Err(CaseError::invalid(format!(
            "{}: {what}",
            case_dir.display()
        )));
    }
    // `exists`, not `is_file`: a case.toml that cannot be read is named as such.
    if case_dir.join(case_toml::CASE_FILE).exists() {
        return Ok((case_toml::read_case(case_dir)?, None));
    }
    if case_dir.join("system").join("controlDict").exists() {
        let case = openfoam::read_case(case_dir)?;
        return Ok((case.setup, Some(case.mesh)));
    }
    Err(CaseError::invalid(format!(
        "{}: not a case directory: it has neither {} nor system/controlDict",
        case_dir.display(),
        case_toml::CASE_FILE
    )))
}

/// [`read_case_dir`] and the case's mesh: the one reading the case loaded
/// (an OpenFOAM case's), else the one its setup names, loaded now.
pub fn read_case_dir_and_mesh(case_dir: &Path) -> Result<(CaseSetup, Mesh), CaseError> {
    let (setup, mesh) = read_case_dir_with_mesh(case_dir)?;
    let mesh = match mesh {
        Some(mesh) => mesh,
        None => setup.mesh.load()?,
    };
    Ok((setup, mesh))
}

/// The matrix of the first linear system of the case in `case_dir` (t = 0,
/// with the case's Γ, boundary conditions and time scheme): the
/// preconditioner study's and the density-contrast benches' systems.
pub fn initial_matrix(case_dir: &Path) -> Result<crate::sparse::Csr, CaseError> {
    initial_matrix_on(case_dir, None)
}

/// [`initial_matrix`] on `mesh` in place of the case's own mesh (its Γ,
/// boundary conditions by patch name and time scheme): a case's problem at
/// other sizes (`bench` cases `bubble:MESH`).
pub fn initial_matrix_on(
    case_dir: &Path,
    mesh: Option<Mesh>,
) -> Result<crate::sparse::Csr, CaseError> {
    use crate::fvm::{LaplacianProblem, LaplacianSystem, TimeScheme};
    let (setup, own) = read_case_dir_with_mesh(case_dir)?;
    let mesh = match mesh.or(own) {
        Some(mesh) => mesh,
        None => setup.mesh.load()?,
    };
    let geometry = mesh.geometry()?;
    let time = match setup.time {
        TimeControl::Steady { .. } => TimeScheme::SteadyState,
        TimeControl::Euler { delta_t, .. } => TimeScheme::Euler { dt: delta_t },
    };
    let problem = LaplacianProblem {
        gamma: setup.gamma.cell_field(0.0),
        source: setup.source.cell_field(0.0),
        boundary: setup.boundary_conditions(&mesh, &geometry, 0.0)?,
        time,
        singular: setup.singular,
    };
    let system = LaplacianSystem::new(&mesh, &geometry, setup.schemes, &problem)
        .map_err(|e| CaseError::Invalid(format!("{}: {e}", setup.origin)))?;
    Ok(system.matrix)
}

/// OpenFOAM's line after each time step or iteration,
/// `ExecutionTime = 0.52 s  ClockTime = 1 s`: the process's CPU time (all
/// threads, as OpenFOAM's `elapsedCpuTime`; the wall time since `start`
/// where the system gives no CPU time) and the whole seconds of wall time
/// since `start` (`elapsedClockTime`): the shape tools that parse OpenFOAM
/// logs expect.
pub(crate) fn log_execution_time(start: std::time::Instant) {
    let wall = start.elapsed().as_secs_f64();
    // OpenFOAM's cpuTime reads std::clock: the process's CPU time, the same.
    let cpu = crate::timings::process_cpu_seconds();
    log::info!(
        "ExecutionTime = {} s  ClockTime = {} s",
        crate::foam::write::format_log(if cpu > 0.0 { cpu } else { wall }),
        wall.floor()
    );
}
