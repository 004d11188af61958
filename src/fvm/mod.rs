//! Cell-centred finite-volume Laplacian: −∇·(Γ∇p) = q, and laplacianFoam's
//! ∂p/∂t − ∇·(Γ∇p) = q, discretised with OpenFOAM v1912 semantics.
//!
//! The matrix is the symmetric positive (semi-)definite form: positive diagonal,
//! off-diagonals −Γ_f|S_f|Δ_f on internal faces. It is the negation of
//! OpenFOAM's `fvm::laplacian` matrix, so OpenFOAM's `internalCoeffs` go on the
//! diagonal and `boundaryCoeffs` on the right-hand side with our sign (see
//! [`boundary`]). Everything explicit (sources, boundary values, the
//! non-orthogonal correction, the old time level) is on the right-hand side.
//!
//! Pieces, each after the OpenFOAM class it follows:
//! - [`schemes`] follows `surfaceInterpolation::makeDeltaCoeffs`/`makeNonOrthDeltaCoeffs`/
//!   `makeNonOrthCorrectionVectors`, `fvPatch::delta`, the snGrad schemes (and
//!   fvpoisson's `boundaryCorrected`, second order on tets: see `crate::validate`);
//! - [`boundary`] expresses `fixedValue`, `zeroGradient`, `fixedGradient`, `mixed`, `empty`
//!   as value/gradient internal and boundary coefficients;
//! - [`gradient`] follows `gaussGrad` (linear) and `leastSquaresGrad`;
//! - [`system`] follows `gaussLaplacianScheme`, `EulerDdtScheme`, `fvMatrix::setReference`,
//!   the non-orthogonal corrector loop of laplacianFoam.

pub mod boundary;
pub mod convection;
pub mod error_norms;
pub mod gradient;
pub mod schemes;
pub mod system;
pub mod testing;

pub use boundary::{BoundaryCoeffs, BoundaryCondition, PatchValues};
pub use error_norms::ErrorNorms;
pub use gradient::CellGradient;
pub use schemes::{
    BoundaryFaceGeometry, FaceGeometry, GammaInterpolation, GradScheme, InternalFace, Schemes,
    SnGradScheme, TimeScheme,
};
pub use system::{
    LaplacianProblem, LaplacianSystem, ProblemValues, Reference, SingularPolicy, SlotMap,
};

use crate::mesh::Vec3;
use std::fmt;
use std::sync::Arc;

/// Everything that can be wrong with a discretisation request. Messages name
/// the patch, face or cell and say what to change.
#[derive(Debug, thiserror::Error)]
pub enum FvmError {
    #[error("{0}")]
    Invalid(String),
    /// All-Neumann steady problem whose right-hand side does not sum to zero:
    /// it has no solution.
    #[error(
        "inconsistent right-hand side for an all-Neumann problem: the sources and boundary \
         fluxes sum to {sum:e} (relative to their total magnitude {scale:e}, tolerance {tolerance:e}); \
         fix the sources/gradients so they balance, or ask for projection (SingularPolicy::project)"
    )]
    InconsistentRhs {
        sum: f64,
        scale: f64,
        tolerance: f64,
    },
}

impl FvmError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }
}

/// A scalar given over the domain: one value, one value per cell, or a function
/// of position (evaluated at cell centres, and at boundary face centres where a
/// boundary value is needed).
#[derive(Clone)]
pub enum CellField {
    Uniform(f64),
    PerCell(Vec<f64>),
    Function(Arc<dyn Fn(Vec3) -> f64 + Send + Sync>),
}

impl CellField {
    /// A field given by a function of position (e.g. piecewise densities).
    pub fn function(f: impl Fn(Vec3) -> f64 + Send + Sync + 'static) -> Self {
        Self::Function(Arc::new(f))
    }

    /// Values at the given cell centres; `what` names the field in errors.
    pub(crate) fn cell_values(&self, centres: &[Vec3], what: &str) -> Result<Vec<f64>, FvmError> {
        match self {
            Self::Uniform(v) => Ok(uniform_values(*v, centres.len())),
            Self::PerCell(v) if v.len() != centres.len() => Err(FvmError::invalid(format!(
                "{what} has {} values but the mesh has {} cells",
                v.len(),
                centres.len()
            ))),
            Self::PerCell(v) => Ok(v.clone()),
            Self::Function(f) => Ok(evaluate_at(centres, |c| f(c))),
        }
    }
}

/// `f` at every point of `points` (cell or face centres), evaluated in
/// parallel: an expression per cell is the costliest host step of setting up
/// a large case. Each value is `f`'s alone, so the result does not depend on
/// the number of threads.
pub fn evaluate_at(points: &[Vec3], f: impl Fn(Vec3) -> f64 + Sync) -> Vec<f64> {
    use rayon::prelude::*;
    points
        .par_iter()
        .with_min_len(1024)
        .map(|&x| f(x))
        .collect()
}

/// `n` copies of `value`, written by every thread (a serial fill of a
/// large array is a pass over the mesh on one core).
pub fn uniform_values(value: f64, n: usize) -> Vec<f64> {
    use rayon::prelude::*;
    // An indexed collect writes each value once into fresh memory, on
    // every core (a zeroed vector filled afterwards writes it twice).
    rayon::iter::repeat_n(value, n).collect()
}

impl fmt::Debug for CellField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Uniform(v) => write!(f, "Uniform({v})"),
            Self::PerCell(v) => write!(f, "PerCell({} values)", v.len()),
            Self::Function(_) => write!(f, "Function(..)"),
        }
    }
}

/// Refuses a non-finite value, or a non-positive one when `positive`, naming it.
pub(crate) fn check_values(
    values: &[f64],
    positive: bool,
    what: impl Fn(usize) -> String,
) -> Result<(), FvmError> {
    use rayon::prelude::*;
    let bad = |v: f64| !v.is_finite() || (positive && v <= 0.0);
    // The first bad value, as a serial scan finds it.
    match values
        .par_iter()
        .with_min_len(1 << 16)
        .position_first(|&v| bad(v))
    {
        None => Ok(()),
        Some(i) => Err(FvmError::invalid(format!(
            "{} is {}; it must be finite{}",
            what(i),
            values[i],
            if positive { " and positive" } else { "" }
        ))),
    }
}
