//! The truncated Neumann preconditioner on the CPU: the Horner steps of the
//! module docs, each row independent (rayon over the rows).

use rayon::prelude::*;

use super::NeumannSettings;
use crate::solve::algorithm::Algorithm;
use crate::solve::triangles::Triangles;
use crate::solve::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// Which triangle of A a Horner step multiplies by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Triangle {
    /// Strictly lower: columns below the row.
    Lower,
    /// Strictly upper: columns above the row.
    Upper,
}

/// M⁻¹ = Kᵀ D⁻¹ K with K the Neumann series of (I + L D⁻¹)⁻¹ truncated after
/// the power m = `order` (1: Neu1, 2: Neu2).
pub struct TruncatedNeumann<'a> {
    t: Triangles<'a>,
    reciprocal_diag: Vec<f64>,
    order: usize,
}

impl<'a> TruncatedNeumann<'a> {
    /// `settings` for `a` (square, symmetric, positive diagonal).
    pub fn new(a: &'a Csr, settings: &NeumannSettings) -> Result<Self, SolveError> {
        settings
            .validate()
            .map_err(|e| SolveError::InvalidControls(format!("truncated Neumann: {e}")))?;
        let t = Triangles::new(a, "truncated Neumann")?;
        let reciprocal_diag = (0..t.n()).map(|r| 1.0 / t.diag(r)).collect();
        Ok(Self {
            t,
            reciprocal_diag,
            order: settings.order,
        })
    }

    /// 1/a_ii (the device copy is uploaded from here).
    pub fn reciprocal_diagonal(&self) -> &[f64] {
        &self.reciprocal_diag
    }

    /// out_i = base_i − (1/a_ii) Σ_{j ∈ T(i)} a_ij g_j, the off-diagonals in
    /// column order (as the mod-SELL kernel `neumann_step` sums them).
    fn step(&self, part: Triangle, base: &[f64], g: &[f64], out: &mut [f64]) {
        out.par_iter_mut().enumerate().for_each(|(i, o)| {
            let slots = match part {
                Triangle::Lower => self.t.lower(i),
                Triangle::Upper => self.t.upper(i),
            };
            let sum: f64 = slots.map(|s| self.t.value(s) * g[self.t.col(s)]).sum();
            *o = base[i] - self.reciprocal_diag[i] * sum;
        });
    }
}

impl LinearOperator for TruncatedNeumann<'_> {
    fn n(&self) -> usize {
        self.t.n()
    }

    fn apply(&self, r: &[f64], z: &mut [f64]) {
        let n = self.t.n();
        let y0: Vec<f64> = r
            .par_iter()
            .zip(&self.reciprocal_diag)
            .map(|(r, rd)| rd * r)
            .collect();
        let mut current = y0.clone();
        let mut next = vec![0.0; n];
        for _ in 0..self.order {
            self.step(Triangle::Lower, &y0, &current, &mut next);
            std::mem::swap(&mut current, &mut next);
        }
        let y = current;
        let mut current = y.clone();
        for _ in 0..self.order {
            self.step(Triangle::Upper, &y, &current, &mut next);
            std::mem::swap(&mut current, &mut next);
        }
        z.copy_from_slice(&current);
    }
}
