//! Cases: what to solve on which mesh, how, and what to write
//! ([`CaseSetup`]), read from a native `case.toml` ([`case_toml`]) and run on the
//! CPU ([`run`]).

pub mod case_toml;
pub mod expr;
pub mod run;
pub mod setup;

pub use run::{run_case, ErrorNorms, RunSummary};
pub use setup::{
    BoundarySpec, CaseSetup, LinearSolver, OutputFormat, OutputSettings, PatchCondition, Physics,
    Scalar, SolverSettings, SpaceTimeFn, TimeControl,
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
