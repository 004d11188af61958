//! Linear solvers: the CPU reference every GPU path is tested against.
//!
//! Layout follows Ginkgo's solvers (Anzt et al. 2022): one executor trait
//! (`executor::Executor`: the vectors, the initial residual, dot products and
//! sums, the device status) and, per method, the fused kernel steps it adds
//! (`CgBackend` for PCG, `KrylovBackend` for GMRES and BiCGStab,
//! `SmoothBackend`, `EisenstatBackend`); each solver is written once over
//! them (`pcg::pcg`, ...), and `cpu::CpuBackend` is the rayon reference. Operators
//! (matrices, preconditioners, smoothers run from zero) implement
//! `LinearOperator`; preconditioners of either family (host operators and
//! `gpu::smooth::DevicePreconditioner`s) are one `precondition::Precondition`
//! of the executor's vectors. OpenFOAM's smoothSolver is written once too
//! (`smooth_solver::smooth_solve` over `SmoothBackend`), with the smoothers of
//! `smoother` (Jacobi, L1-Jacobi, natural and multicolour Gauss–Seidel, block
//! Jacobi, DIC).

pub mod algorithm;
pub mod algorithms;
pub mod amg;
pub mod bicgstab;
pub mod block_jacobi;
pub mod checks;
pub mod colouring;
pub mod cpu;
pub mod deflation;
pub mod distributed;
pub mod eisenstat;
pub mod entry;
pub mod equilibrate;
pub mod error;
pub mod executor;
pub mod fsai;
pub mod gamg;
pub mod gmres;
pub mod ic;
pub mod ilu;
pub mod jacobi;
pub mod krylov;
pub mod lanczos;
pub mod neumann;
pub mod pcg;
pub mod polynomial;
pub mod precond;
pub mod precondition;
pub mod reduce;
pub mod registry;
pub mod row_sums;
pub mod scalar;
pub mod schwarz;
pub mod single_reduction;
pub mod smooth_solver;
pub mod smoother;
pub mod split;
pub mod ssor;
pub mod triangles;

pub use cpu::CpuBackend;
pub use entry::{solve_krylov, solve_krylov_with, solve_pcg, solve_pcg_in_place, solve_pcg_scaled};
pub use equilibrate::{Equilibration, EquilibrationKind, RuizNorm, RuizSettings};
pub use error::{FieldSolveError, SolveError};
pub use executor::{Executor, InitialNorms, OnExecutor};
pub use fsai::{AdaptivePattern, FsaiPattern, FsaiSettings, FsaiStop};
pub use krylov::{
    CpuKrylovBackend, GmresSettings, KrylovBackend, KrylovMethod, Orthogonalization,
    PreconditioningSide,
};
pub use pcg::{
    iterate_steps, pcg, CgBackend, CgVectors, IterationRecord, LoopState, SolverControls,
    SolverPerformance, StopReason, StopRule,
};
pub use polynomial::{EigenBound, PolynomialKind, PolynomialSettings};
pub use precond::{Preconditioner, PreconditionerKind};
pub use precondition::Precondition;
pub use scalar::{Precision, Real};
pub use smooth_solver::{smooth_solve, solve_smooth, SmoothBackend};
pub use smoother::{
    BlockJacobiSettings, ColouringKind, InnerSolver, SmootherKind, SmootherSettings, Sweep,
};

use crate::sparse::Csr;

/// Something that maps a vector x to y = Op x (y is fully overwritten).
pub trait LinearOperator: Sync {
    fn n(&self) -> usize;
    fn apply(&self, x: &[f64], y: &mut [f64]);
    /// y = Op x; returns x · y with [`reduce::dot`]'s bits. An operator
    /// may fuse the product into its own pass (DIC does, into its sweeps).
    fn apply_dot(&self, x: &[f64], y: &mut [f64]) -> f64 {
        self.apply(x, y);
        reduce::dot(x, y)
    }
    /// Whether the operator is the same linear map at every application
    /// (`precondition::Precondition::is_linear`): false for preconditioners
    /// with an inner iteration to a tolerance, which PCG runs flexible.
    fn is_linear(&self) -> bool {
        true
    }
}

/// A stationary iteration on A x = b (the smoothers of `smoother` and
/// `block_jacobi`).
pub trait Smoother: Sync {
    fn n(&self) -> usize;
    /// `sweeps` sweeps of x ← x + M⁻¹(b − A x) from the iterate in x.
    fn smooth(&self, b: &[f64], x: &mut [f64], sweeps: usize);
}

/// A name out of `all` (its `name`, any case); an error naming `what` and
/// the choices otherwise.
pub(crate) fn parse_name<T: Copy>(
    what: &str,
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|k| name(*k).eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<_> = all.iter().map(|k| name(*k)).collect();
            format!("unknown {what} '{s}' (choose one of {})", names.join(", "))
        })
}

/// `impl FromStr` for a kind named by its `name` out of `Self::ALL`
/// ([`parse_name`]; `what` names the kind in the error).
macro_rules! from_str_by_name {
    ($kind:ty, $what:literal) => {
        impl std::str::FromStr for $kind {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $crate::solve::parse_name($what, s, &Self::ALL, Self::name)
            }
        }
    };
}
pub(crate) use from_str_by_name;

impl LinearOperator for Csr {
    fn n(&self) -> usize {
        self.n_rows()
    }
    fn apply(&self, x: &[f64], y: &mut [f64]) {
        self.spmv(x, y);
    }
}
