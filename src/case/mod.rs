//! Cases: what to solve on which mesh, how, and what to write
//! ([`CaseSetup`]), read from a native `case.toml` ([`case_toml`]) and run on the
//! CPU ([`run`]).

pub mod case_toml;
pub mod expr;
pub mod openfoam;
pub mod run;
pub mod setup;

pub use run::{run_case, Device, ErrorNorms, RunSummary};
pub use setup::{
    BoundarySpec, CaseSetup, LinearSolver, OutputFormat, OutputSettings, PatchCondition, Physics,
    Scalar, SolverSettings, SourceSplit, SpaceTimeFn, TimeControl,
};

use crate::fvm::FvmError;
use crate::io::OutputError;
use crate::mesh::MeshError;
use crate::solve::SolveError;
use std::path::PathBuf;

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
    #[error("solving for {field}: {source}")]
    Solve {
        field: String,
        #[source]
        source: SolveError,
    },
    #[error(transparent)]
    Output(#[from] OutputError),
}

impl CaseError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }
}

/// Reads the case in `case_dir`: its `case.toml`, or an OpenFOAM case
/// (`system/controlDict`).
pub fn read_case_dir(case_dir: &std::path::Path) -> Result<CaseSetup, CaseError> {
    if case_dir.join(case_toml::CASE_FILE).is_file() {
        return case_toml::read_case(case_dir);
    }
    if case_dir.join("system").join("controlDict").is_file() {
        return Ok(openfoam::read_case(case_dir)?.setup);
    }
    Err(CaseError::invalid(format!(
        "{}: not a case directory: it has neither {} nor system/controlDict",
        case_dir.display(),
        case_toml::CASE_FILE
    )))
}
