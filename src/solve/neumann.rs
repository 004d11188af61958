//! Truncated Neumann-series preconditioners Neu1 and Neu2 (Gupta et al. 2011, §3.3): only sparse products, no
//! triangular solves, so every row is independent (the GPU runs them as
//! masked mod-SELL products, `gpu::deflation::DeviceNeumann`).
//!
//! On the Jacobi-scaled matrix Ã = D^-1/2 A D^-1/2 with L̃ its strictly lower
//! part, M̃⁻¹ = K̃ᵀ K̃ with K̃ = Σ_{j=0}^{m} (−L̃)^j (m = 1: Neu1, m = 2: Neu2).
//! Mapped back to A (M⁻¹ = D^-1/2 M̃⁻¹ D^-1/2) that is M⁻¹ = Kᵀ D⁻¹ K with
//! K = Σ_{j=0}^{m} (−L D⁻¹)^j, so the scaled matrix is never formed. Written
//! with the scaled vectors ŷ = D⁻¹ y, both factors are m Horner steps of the
//! same shape, out = base − D⁻¹ T g with T the strictly lower (L) or upper
//! (U = Lᵀ) part of A:
//!
//! - ŷ₀ = D⁻¹ r,  ŷ_{k+1} = ŷ₀ − D⁻¹ L ŷ_k   (ŷ_m = D⁻¹ K r);
//! - û₀ = ŷ_m,    û_{k+1} = ŷ_m − D⁻¹ U û_k  (z = û_m = Kᵀ D⁻¹ K r).
//!
//! M⁻¹ is SPD whenever A has a positive diagonal (K is unit lower triangular).

use rayon::prelude::*;

use super::triangles::Triangles;
use super::{LinearOperator, SolveError};
use crate::sparse::Csr;

/// Which triangle of A a Horner step multiplies by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Triangle {
    /// Strictly lower: columns below the row.
    Lower,
    /// Strictly upper: columns above the row.
    Upper,
}

/// M⁻¹ = Kᵀ D⁻¹ K with K the Neumann series of (I + L D⁻¹)⁻¹ truncated after
/// the power `order` (1: Neu1, 2: Neu2).
pub struct TruncatedNeumann<'a> {
    t: Triangles<'a>,
    reciprocal_diag: Vec<f64>,
    order: usize,
}

impl<'a> TruncatedNeumann<'a> {
    /// Neu`order` for `a` (square, symmetric, positive diagonal); `order` ≥ 1.
    pub fn new(a: &'a Csr, order: usize) -> Result<Self, SolveError> {
        if order == 0 {
            return Err(SolveError::InvalidControls(
                "the truncated Neumann preconditioner needs at least the first power (Neu1)".into(),
            ));
        }
        let t = Triangles::new(a, "truncated Neumann")?;
        let reciprocal_diag = (0..t.n()).map(|r| 1.0 / t.diag(r)).collect();
        Ok(Self {
            t,
            reciprocal_diag,
            order,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{dense, random_symmetric};
    use nalgebra::{DMatrix, DVector};

    /// Gupta et al.'s (2011) form on the scaled matrix: D^-1/2 K̃ᵀ K̃ D^-1/2 with
    /// K̃ = Σ_{j ≤ order} (−L̃)^j.
    fn seed_form(a: &Csr, order: usize) -> DMatrix<f64> {
        let full = dense(a);
        let n = full.nrows();
        let s = DMatrix::from_diagonal(&full.diagonal().map(|d| 1.0 / d.sqrt()));
        let scaled = &s * &full * &s;
        let lower = scaled.lower_triangle() - DMatrix::from_diagonal(&scaled.diagonal());
        let mut k = DMatrix::identity(n, n);
        let mut power = DMatrix::identity(n, n);
        for _ in 0..order {
            power = -&lower * power;
            k += &power;
        }
        &s * k.transpose() * k * &s
    }

    #[test]
    fn neu1_and_neu2_equal_the_seed_form_on_the_scaled_matrix() {
        let a = random_symmetric(40, 5, 11);
        let r: Vec<f64> = (0..40).map(|i| (i as f64 * 0.7).sin() + 0.1).collect();
        for order in [1, 2, 3] {
            let m_inv = seed_form(&a, order);
            let neu = TruncatedNeumann::new(&a, order).unwrap();
            let mut z = vec![0.0; 40];
            neu.apply(&r, &mut z);
            let expected = &m_inv * DVector::from_column_slice(&r);
            let scale = expected.amax();
            for i in 0..40 {
                assert!(
                    (z[i] - expected[i]).abs() < 1e-13 * scale,
                    "order {order} row {i}: {} vs {}",
                    z[i],
                    expected[i]
                );
            }
            // M⁻¹ is symmetric positive definite.
            let sym = (&m_inv - m_inv.transpose()).amax();
            assert!(sym < 1e-13 * m_inv.amax(), "order {order}: asymmetry {sym}");
            let eig = m_inv.symmetric_eigenvalues();
            assert!(eig.min() > 0.0, "order {order}: {}", eig.min());
        }
    }

    #[test]
    fn order_zero_and_bad_diagonals_are_refused() {
        let a = random_symmetric(5, 2, 1);
        assert!(TruncatedNeumann::new(&a, 0).is_err());
        let bad = Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, -2.0]).unwrap();
        let err = TruncatedNeumann::new(&bad, 1).err().unwrap();
        assert!(
            matches!(err, SolveError::NonPositiveDiagonal { row: 1, .. }),
            "{err}"
        );
    }
}
