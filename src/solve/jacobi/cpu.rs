//! The diagonal preconditioners on the CPU: the identity (no
//! preconditioning) and Jacobi (see the module docs of `solve::jacobi`).

use rayon::prelude::*;

use crate::solve::triangles::Triangles;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// M = I.
pub struct Identity(pub usize);

impl LinearOperator for Identity {
    fn n(&self) -> usize {
        self.0
    }
    fn apply(&self, x: &[f64], y: &mut [f64]) {
        y.copy_from_slice(x);
    }
}

/// M = diag(A), applied as OpenFOAM's `diagonalPreconditioner` (multiplies by 1/a_ii).
pub struct Jacobi {
    reciprocal_diag: Vec<f64>,
}

impl Jacobi {
    pub fn new(a: &Csr) -> Result<Self, SolveError> {
        let t = Triangles::new(a, "Jacobi")?;
        Ok(Self {
            reciprocal_diag: (0..t.n()).map(|r| 1.0 / t.diag(r)).collect(),
        })
    }

    /// 1 / a_ii per row.
    pub fn reciprocal_diagonal(&self) -> &[f64] {
        &self.reciprocal_diag
    }
}

impl LinearOperator for Jacobi {
    fn n(&self) -> usize {
        self.reciprocal_diag.len()
    }
    fn apply(&self, x: &[f64], y: &mut [f64]) {
        y.par_iter_mut()
            .zip(x.par_iter().zip(&self.reciprocal_diag))
            .for_each(|(y, (x, rd))| *y = rd * x);
    }
}
