//! The coarsest level's exact solve: a dense Cholesky factor of A_L.
//!
//! A singular A_L (all-Neumann problems: every row sums to zero, so the
//! constant vector e spans the null space) is solved on the complement of e:
//! A_L + c e eᵀ / n (c = mean diagonal) is positive definite with the same
//! eigenvectors, and its inverse maps e to e / c; projecting the result to
//! zero mean, Π (A_L + c e eᵀ/n)⁻¹ with Π = I − e eᵀ/n is the pseudo-inverse
//! A_L⁺ (symmetric, so the cycle stays symmetric).

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

use super::super::SolveError;
use crate::sparse::testing::dense;
use crate::sparse::Csr;

/// Σ_i |row sum_i| ≤ SINGULAR · Σ_i a_ii: the rows sum to zero up to
/// rounding, so A_L is singular with the constants as null space.
const SINGULAR: f64 = 1e-10;

/// Whether `a`'s rows sum to zero up to rounding (Σ_i |row sum_i| ≤
/// SINGULAR · Σ_i a_ii): `a` is singular with the constants as its null
/// space, as an all-Neumann problem's matrix and its Galerkin operators are.
pub(crate) fn rows_sum_to_zero(a: &Csr) -> bool {
    let (mut diag_sum, mut row_sum_abs) = (0.0, 0.0);
    for i in 0..a.n_rows() {
        let (cols, values) = a.row(i);
        for (&c, &v) in cols.iter().zip(values) {
            if c as usize == i {
                diag_sum += v;
            }
        }
        row_sum_abs += values.iter().sum::<f64>().abs();
    }
    row_sum_abs <= SINGULAR * diag_sum
}

/// A_L⁻¹ (or A_L⁺ when A_L is singular), factored.
pub struct CoarsestSolver {
    factor: Cholesky<f64, Dyn>,
    /// A_L's rows sum to zero: results are projected to zero mean.
    singular: bool,
}

impl CoarsestSolver {
    pub fn new(a: &Csr) -> Result<Self, SolveError> {
        let n = a.n_rows();
        let mut m = dense(a);
        let singular = rows_sum_to_zero(a);
        if singular {
            let diag_sum: f64 = m.diagonal().iter().sum();
            let shift = diag_sum / (n as f64 * n as f64);
            m.add_scalar_mut(shift);
        }
        // Symmetrise: coarse products sum a_IJ and a_JI in different orders.
        let m = (&m + m.transpose()) * 0.5;
        let factor = Cholesky::new(m).ok_or_else(|| {
            SolveError::InvalidControls(format!(
                "AMG: the coarsest matrix ({n} rows) is not positive definite, so it has no \
                 Cholesky factor (is the matrix symmetric positive definite, or singular only \
                 through constants as in an all-Neumann problem?)"
            ))
        })?;
        Ok(Self { factor, singular })
    }

    pub fn n(&self) -> usize {
        self.factor.l_dirty().nrows()
    }

    /// Whether A_L was singular (results have zero mean).
    pub fn singular(&self) -> bool {
        self.singular
    }

    /// x = A_L⁻¹ b (A_L⁺ b when singular).
    pub fn solve(&self, b: &[f64], x: &mut [f64]) {
        let y = self.factor.solve(&DVector::from_column_slice(b));
        x.copy_from_slice(y.as_slice());
        if self.singular {
            project_zero_mean(x);
        }
    }

    /// The operator of [`Self::solve`] as a dense row-major matrix (for a
    /// device that applies it as a matrix-vector product): A_L⁻¹, or
    /// Π (A_L + c e eᵀ/n)⁻¹ = A_L⁺ when singular.
    pub fn inverse(&self) -> Vec<f64> {
        let n = self.n();
        let mut inv: DMatrix<f64> = self.factor.inverse();
        if self.singular {
            for mut col in inv.column_iter_mut() {
                let mean = col.sum() / n as f64;
                col.add_scalar_mut(-mean);
            }
        }
        inv.transpose().as_slice().to_vec()
    }
}

/// x ← x − mean(x).
pub(crate) fn project_zero_mean(x: &mut [f64]) {
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    x.iter_mut().for_each(|v| *v -= mean);
}
