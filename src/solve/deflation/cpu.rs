//! Deflation on the CPU: AZ by rows, E⁻¹ dense, Zᵀ v by subdomain sums
//! (see the module docs of `solve::deflation`).

use std::sync::Mutex;

use nalgebra::DMatrix;
use rayon::prelude::*;

use super::{coarse_inverse, deflated_columns, galerkin_matrix, DeflationOps, Subdomains};
use crate::solve::SolveError;
use crate::sparse::Csr;

/// The CPU's deflation: AZ by rows, E⁻¹ dense.
pub struct CpuDeflation {
    subdomains: Subdomains,
    part: Vec<u32>,
    az: Csr,
    e: DMatrix<f64>,
    e_inverse: DMatrix<f64>,
    /// a of the last `project`.
    correction: Mutex<Vec<f64>>,
}

impl CpuDeflation {
    /// Deflation of `a` (square, SPD) by `subdomains`.
    pub fn new(a: &Csr, subdomains: Subdomains) -> Result<Self, SolveError> {
        let az = deflated_columns(a, &subdomains)?;
        let e = galerkin_matrix(&az, &subdomains);
        let e_inverse = coarse_inverse(&e)?;
        Ok(Self {
            part: subdomains.row_subdomains(),
            correction: Mutex::new(vec![0.0; subdomains.count()]),
            subdomains,
            az,
            e,
            e_inverse,
        })
    }

    pub fn subdomains(&self) -> &Subdomains {
        &self.subdomains
    }
    /// E = ZᵀAZ as assembled (before symmetrisation).
    pub fn coarse_matrix(&self) -> &DMatrix<f64> {
        &self.e
    }
    pub fn coarse_inverse(&self) -> &DMatrix<f64> {
        &self.e_inverse
    }
    /// AZ by rows ([`deflated_columns`]).
    pub fn deflated_columns(&self) -> &Csr {
        &self.az
    }

    /// Zᵀ v: per-subdomain sums, rows ascending.
    pub fn restrict(&self, v: &[f64]) -> Vec<f64> {
        (0..self.subdomains.count())
            .into_par_iter()
            .map(|p| v[self.subdomains.rows(p)].iter().sum())
            .collect()
    }

    /// E⁻¹ c as the dense product, each row summed by column.
    pub fn coarse_solve(&self, c: &[f64]) -> Vec<f64> {
        let k = c.len();
        (0..k)
            .into_par_iter()
            .map(|p| (0..k).map(|q| self.e_inverse[(p, q)] * c[q]).sum())
            .collect()
    }
}

impl DeflationOps<Vec<f64>> for CpuDeflation {
    fn project(&self, v: &mut Vec<f64>) {
        let a = self.coarse_solve(&self.restrict(v));
        v.par_iter_mut().enumerate().for_each(|(i, vi)| {
            let (cols, vals) = self.az.row(i);
            let sum: f64 = cols
                .iter()
                .zip(vals)
                .map(|(&q, &w)| w * a[q as usize])
                .sum();
            *vi -= sum;
        });
        *self.correction.lock().unwrap_or_else(|e| e.into_inner()) = a;
    }

    fn prolong_add(&self, s: f64, x: &mut Vec<f64>) {
        let a = self.correction.lock().unwrap_or_else(|e| e.into_inner());
        x.par_iter_mut()
            .zip(&self.part)
            .for_each(|(xi, &p)| *xi += s * a[p as usize]);
    }
}
