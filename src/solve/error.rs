use crate::foam::write::format_g;

/// Why a linear solve could not produce an answer. Each message names the row,
/// entry or iteration where the problem showed and what it means; running out
/// of iterations is not an error (see `SolverPerformance::converged`).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SolveError {
    #[error("GPU solver failed: {0}")]
    Device(String),
    #[error("{what} has a non-finite value ({value}) in row {row}")]
    NonFinite {
        what: &'static str,
        row: usize,
        value: f64,
    },
    #[error("the matrix must be square, it is {rows} x {cols}")]
    NotSquare { rows: usize, cols: usize },
    #[error("the system is empty (0 x 0): there is nothing to solve")]
    Empty,
    #[error("{what} has {found} entries but the matrix has {expected} rows")]
    SizeMismatch {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error(
        "matrix is not symmetric: A({row},{col}) = {upper} but A({col},{row}) = {lower}; \
         CG needs a symmetric positive definite matrix"
    )]
    NotSymmetric {
        row: usize,
        col: usize,
        upper: f64,
        lower: f64,
    },
    #[error(
        "{precond} preconditioner: diagonal entry in row {row} is {value}, it must be positive \
         (the matrix is not symmetric positive definite)"
    )]
    NonPositiveDiagonal {
        precond: &'static str,
        row: usize,
        value: f64,
    },
    #[error(
        "{precond} factorization broke down in row {row}: pivot {value} is not positive \
         (the matrix is not positive definite, or too far from diagonally dominant for {precond})"
    )]
    FactorizationBreakdown {
        precond: &'static str,
        row: usize,
        value: f64,
    },
    #[error("matrix is not positive definite (p.Ap = {} at iteration {iteration})", format_g(*p_ap))]
    Breakdown { p_ap: f64, iteration: usize },
    #[error(
        "preconditioner is not positive definite (r.Mr = {} at iteration {iteration})",
        format_g(*r_z)
    )]
    PreconditionerNotPositive { r_z: f64, iteration: usize },
    #[error(
        "solver diverged: residual {} at iteration {iteration} is more than {} times the \
         best residual {}",
        format_g(*residual),
        format_g(*factor),
        format_g(*best)
    )]
    Diverged {
        iteration: usize,
        residual: f64,
        best: f64,
        factor: f64,
    },
    #[error(
        "residual became {residual} at iteration {iteration} (overflow or invalid arithmetic)"
    )]
    NonFiniteResidual { iteration: usize, residual: f64 },
    #[error("invalid solver controls: {0}")]
    InvalidControls(String),
    /// Subdomain deflation cannot be set up (`solve::deflation`).
    #[error("deflation: {0}")]
    Deflation(String),
    /// A nonsymmetric Krylov method cannot continue (`solve::gmres`, `solve::bicgstab`).
    #[error(
        "{method} broke down at iteration {iteration}: {quantity} = {} (the method cannot \
         continue; the matrix or the preconditioner may be singular, or try another solver \
         or preconditioner)",
        format_g(*value)
    )]
    KrylovBreakdown {
        method: &'static str,
        quantity: &'static str,
        iteration: usize,
        value: f64,
    },
    /// An incomplete LU met a zero or tiny pivot (`solve::ilu`).
    #[error(
        "{precond} factorization: pivot {value} in row {row} is zero or tiny against the row's \
         largest entry (ILU does not pivot: reorder the rows, raise the fill level, or use a \
         matrix with a stronger diagonal)"
    )]
    ZeroPivot {
        precond: &'static str,
        row: usize,
        value: f64,
    },
}

/// The first non-finite entry of `values`, as an error naming `what` and the row.
pub fn check_finite(what: &'static str, values: &[f64]) -> Result<(), SolveError> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(row) => Err(SolveError::NonFinite {
            what,
            row,
            value: values[row],
        }),
        None => Ok(()),
    }
}

/// A linear solve's failure with the field it was solving for: what the
/// flow computations and the cases report ([`SolveError::solving`]).
#[derive(Debug, thiserror::Error)]
#[error("solving for {field}: {source}")]
pub struct FieldSolveError {
    pub field: String,
    #[source]
    pub source: SolveError,
}

impl SolveError {
    /// This error as the failure of the solve for `field`.
    pub fn solving(self, field: impl Into<String>) -> FieldSolveError {
        FieldSolveError {
            field: field.into(),
            source: self,
        }
    }
}

/// The matrix with a non-positive diagonal that the preconditioners' and
/// the scalings' tests give, and the refusal they expect of it.
#[cfg(test)]
pub(crate) mod non_positive {
    use super::SolveError;
    use crate::sparse::Csr;

    /// [1 0; 0.5 −3]: row 1's diagonal is −3.
    pub(crate) fn matrix() -> Csr {
        Csr::new(2, vec![0, 1, 3], vec![0, 0, 1], vec![1., 0.5, -3.]).unwrap()
    }

    /// Asserts that `err` is the refusal of [`matrix`]'s row 1 (`what`:
    /// what refused it, for the message).
    pub(crate) fn assert_refused(err: &SolveError, what: &str) {
        assert!(
            matches!(
                err,
                SolveError::NonPositiveDiagonal {
                    row: 1,
                    value: -3.0,
                    ..
                }
            ),
            "{what}: {err}"
        );
    }
}
