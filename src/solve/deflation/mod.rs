//! Subdomain deflation: two-level PCG (Gupta et al. 2011, §4–§6, Algorithm 1).
//!
//! Z holds one piecewise-constant vector per subdomain (1 on its rows, 0
//! elsewhere), E = Zᵀ A Z (k × k), Q = Z E⁻¹ Zᵀ and P = I − A Q. Deflated
//! PCG solves P A x̂ = P b with any SPD preconditioner M and returns
//! x = Q b + Pᵀ x̂. Here the loop is `solve::pcg` itself, run over the
//! [`Deflated`] adapter of any `CgBackend` (CPU or GPU), which
//!
//! - projects A p: q = A p, a = E⁻¹ Zᵀ q, q ← q − (AZ) a (the note: P is
//!   applied to A p, not to p), and returns p · P A p;
//! - moves x by α Pᵀ p = α (p − Z a) instead of α p, so that x is the solution
//!   of A x = b at every iteration (Pᵀ p = p − Z E⁻¹ Zᵀ A p reuses a), and
//!   the residual the loop tests, b − A x = P (b − A x̂), is the true one;
//! - starts from x₀ = x + Q (b − A x) ([`Deflated::correct_initial_guess`],
//!   Q b + Pᵀ x in Gupta et al.'s (2011) terms), whose residual P (b − A x) needs no
//!   correction at the end.
//!
//! Both are Gupta et al.'s iteration in exact arithmetic (same α, β, z, and
//! x_j = Q b + Pᵀ x̂_j); its final step x = Q b + Pᵀ x̂ is spread over the
//! iterations. What deflation adds to an executor (`executor::Executor`,
//! whose dot products and sums it uses) is [`DeflationOps`]: Zᵀ v as
//! per-subdomain sums (subdomains are contiguous row ranges, so on the GPU a
//! segmented block reduction, deterministic), E⁻¹ as an explicit dense
//! inverse from a host Cholesky factorisation (Gupta et al.'s fast GPU variant,
//! §6: a dense mat-vec per iteration, no host round trip), AZ stored by rows.

use std::ops::Range;

use nalgebra::DMatrix;
use rayon::prelude::*;

use super::amg::galerkin::sum_by_column_group;
use super::checks::on_copies;
use super::executor::vectors_and_reductions_of;
use super::lanczos::{Recorded, SpectrumEstimate};
use super::{
    pcg, CgBackend, CpuBackend, Executor, InitialNorms, Preconditioner, SolveError, SolverControls,
    SolverPerformance,
};
use crate::sparse::partition::slice_partition_order;
use crate::sparse::{Csr, Permutation};

mod cpu;

pub use cpu::CpuDeflation;

/// At most this many subdomains: E and its inverse are dense k × k (128 MiB
/// each at this size) and the inverse costs k³ flops on the host.
pub const MAX_SUBDOMAINS: usize = 4096;

/// Subdomains as contiguous row ranges: subdomain p is rows
/// `offsets[p]..offsets[p + 1]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subdomains {
    offsets: Vec<usize>,
}

impl Subdomains {
    /// Subdomains from their first rows (and the row count last): starts at 0,
    /// strictly increasing, 1 to [`MAX_SUBDOMAINS`] subdomains.
    pub fn from_offsets(offsets: Vec<usize>) -> Result<Self, SolveError> {
        let k = offsets.len().saturating_sub(1);
        if k == 0 || offsets[0] != 0 {
            return Err(SolveError::Deflation(
                "subdomain offsets must start at row 0 and name at least one subdomain".into(),
            ));
        }
        if let Some(p) = offsets.windows(2).position(|w| w[1] <= w[0]) {
            return Err(SolveError::Deflation(format!(
                "subdomain {p} is empty (rows {}..{}); every subdomain needs a row",
                offsets[p],
                offsets[p + 1]
            )));
        }
        if k > MAX_SUBDOMAINS {
            return Err(SolveError::Deflation(format!(
                "{k} subdomains: at most {MAX_SUBDOMAINS} (E = ZᵀAZ is dense); use fewer"
            )));
        }
        Ok(Self { offsets })
    }

    /// `k` blocks of consecutive rows whose sizes differ by at most one (block
    /// p starts at row ⌊p n / k⌋): on a structured grid numbered row by row,
    /// Gupta et al.'s (2011) stripes (2n stripes of half a grid line on an n × n grid).
    pub fn stripes(n: usize, k: usize) -> Result<Self, SolveError> {
        if k == 0 || k > n {
            return Err(SolveError::Deflation(format!(
                "{k} stripes on {n} rows: choose between 1 and {n}"
            )));
        }
        Self::from_offsets((0..=k).map(|p| p * n / k).collect())
    }

    /// About `k` compact subdomains of ⌈n/k⌉ rows cut by METIS (the slices of
    /// `sparse::partition`'s ordering): the row ordering that makes each one
    /// contiguous, and the subdomains in that ordering.
    pub fn metis(a: &Csr, k: usize) -> Result<(Permutation, Self), SolveError> {
        let n = a.n_rows();
        if k == 0 || k > n {
            return Err(SolveError::Deflation(format!(
                "{k} METIS subdomains on {n} rows: choose between 1 and {n}"
            )));
        }
        let size = n.div_ceil(k);
        let order = slice_partition_order(a, size).map_err(SolveError::Deflation)?;
        let offsets = (0..n.div_ceil(size)).map(|p| p * size).chain([n]).collect();
        Ok((order, Self::from_offsets(offsets)?))
    }

    /// Number of subdomains k.
    pub fn count(&self) -> usize {
        self.offsets.len() - 1
    }
    /// Rows covered.
    pub fn n_rows(&self) -> usize {
        self.offsets[self.count()]
    }
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }
    pub fn rows(&self, p: usize) -> Range<usize> {
        self.offsets[p]..self.offsets[p + 1]
    }
    /// The subdomain of each row.
    pub fn row_subdomains(&self) -> Vec<u32> {
        let mut part = vec![0; self.n_rows()];
        for p in 0..self.count() {
            part[self.rows(p)].fill(p as u32);
        }
        part
    }
}

/// AZ (n × k) by rows: row i holds Σ_{j in q} a_ij for each subdomain q that
/// row i of A touches, subdomains ascending, each sum in A's column order.
pub fn deflated_columns(a: &Csr, subdomains: &Subdomains) -> Result<Csr, SolveError> {
    if a.n_rows() != subdomains.n_rows() || a.n_cols() != a.n_rows() {
        return Err(SolveError::Deflation(format!(
            "the subdomains cover {} rows, the matrix is {} x {}",
            subdomains.n_rows(),
            a.n_rows(),
            a.n_cols()
        )));
    }
    let part = subdomains.row_subdomains();
    let rows: Vec<Vec<(u32, f64)>> = (0..a.n_rows())
        .into_par_iter()
        .map(|i| {
            let mut sums = Vec::new();
            sum_by_column_group(a, &part, &[i as u32], &mut sums);
            sums
        })
        .collect();
    Csr::from_rows(subdomains.count(), rows).map_err(SolveError::Deflation)
}

/// E = Zᵀ (AZ): E_pq = Σ_{i in p} (AZ)_iq, rows of p ascending.
pub fn galerkin_matrix(az: &Csr, subdomains: &Subdomains) -> DMatrix<f64> {
    let k = subdomains.count();
    let mut e = DMatrix::zeros(k, k);
    for p in 0..k {
        for i in subdomains.rows(p) {
            let (cols, vals) = az.row(i);
            for (&q, &v) in cols.iter().zip(vals) {
                e[(p, q as usize)] += v;
            }
        }
    }
    e
}

/// E⁻¹ of the symmetric part of `e` by Cholesky (Gupta et al. 2011, §6: the explicit
/// inverse, applied as a dense mat-vec); an error when E is not positive
/// definite (A singular, e.g. an all-Neumann problem without a reference).
pub fn coarse_inverse(e: &DMatrix<f64>) -> Result<DMatrix<f64>, SolveError> {
    let k = e.nrows();
    let symmetric = (e + e.transpose()) * 0.5;
    let chol = nalgebra::Cholesky::new(symmetric).ok_or_else(|| {
        SolveError::Deflation(format!(
            "the coarse matrix E = ZᵀAZ ({k} x {k}) is not positive definite: the matrix is \
             singular (fix the level with a reference value or a fixedValue boundary) or not SPD"
        ))
    })?;
    let inverse = chol.inverse();
    if let Some(bad) = inverse.iter().find(|v| !v.is_finite()) {
        return Err(SolveError::Deflation(format!(
            "the inverse of E = ZᵀAZ has a non-finite entry ({bad}): E is too ill-conditioned"
        )));
    }
    Ok(inverse)
}

/// The deflation steps on the vectors `V` of one executor (`Executor`),
/// used by [`Deflated`]; dot products and Σ|v| are the executor's. The
/// coarse correction a = E⁻¹ Zᵀ v of the last [`Self::project`] is kept
/// for [`Self::prolong_add`].
pub trait DeflationOps<V> {
    /// a = E⁻¹ Zᵀ v, then v ← v − (AZ) a = P v.
    fn project(&self, v: &mut V);
    /// x ← x + s Z a with a of the last `project`.
    fn prolong_add(&self, s: f64, x: &mut V);
    /// A failure of these steps on the device since the last call (the
    /// executor's own is its `device_status`).
    fn device_status(&self) -> Result<(), SolveError> {
        Ok(())
    }
}

/// Any `CgBackend` deflated by `ops` (module documentation): run `solve::pcg`
/// on it after [`Self::correct_initial_guess`], or call [`deflated_pcg`].
pub struct Deflated<'a, B, D> {
    inner: &'a B,
    ops: &'a D,
}

impl<'a, B, D> Deflated<'a, B, D>
where
    B: CgBackend,
    D: DeflationOps<B::Vector>,
{
    pub fn new(inner: &'a B, ops: &'a D) -> Self {
        Self { inner, ops }
    }

    /// x ← x + Q (b − A x) = Q b + Pᵀ x, whose residual lies in range(P).
    /// A device failure shows at the solve's first status check (`pcg`
    /// checks after its initial residual, through [`Executor::device_status`]
    /// of this adapter), not here: the ranks of a distributed solve then all
    /// make the same collectives before one leaves.
    pub fn correct_initial_guess(&self, b: &B::Vector, x: &mut B::Vector) {
        let mut r = self.inner.new_vector();
        self.inner.initialize(b, x, &mut r);
        self.ops.project(&mut r);
        self.ops.prolong_add(1.0, x);
    }
}

/// The inner executor's, with the initial residual projected and the
/// deflation's device status added.
impl<B, D> Executor for Deflated<'_, B, D>
where
    B: CgBackend,
    D: DeflationOps<B::Vector>,
{
    type Vector = B::Vector;
    vectors_and_reductions_of!(inner);

    /// r = P (b − A x) (= b − A x after `correct_initial_guess`, to round-off);
    /// normFactor as the inner backend computes it for x.
    fn initialize(&self, b: &B::Vector, x: &B::Vector, r: &mut B::Vector) -> InitialNorms {
        let norms = self.inner.initialize(b, x, r);
        self.ops.project(r);
        InitialNorms {
            residual_sum: self.inner.sum_abs(r),
            norm_factor: norms.norm_factor,
        }
    }
    fn device_status(&self) -> Result<(), SolveError> {
        self.inner.device_status()?;
        self.ops.device_status()
    }
}

impl<B, D> CgBackend for Deflated<'_, B, D>
where
    B: CgBackend,
    D: DeflationOps<B::Vector>,
{
    fn precondition(&self, r: &B::Vector, z: &mut B::Vector) -> f64 {
        self.inner.precondition(r, z)
    }
    fn update_direction(&self, beta: f64, z: &B::Vector, p: &mut B::Vector) {
        self.inner.update_direction(beta, z, p)
    }
    /// q = P A p; returns p · P A p.
    fn apply_operator(&self, p: &B::Vector, q: &mut B::Vector) -> f64 {
        self.inner.apply_operator(p, q);
        self.ops.project(q);
        self.inner.dot(p, q)
    }
    /// x += α Pᵀ p = α (p − Z a), r −= α P A p.
    fn update_solution(
        &self,
        alpha: f64,
        p: &B::Vector,
        q: &B::Vector,
        x: &mut B::Vector,
        r: &mut B::Vector,
    ) -> f64 {
        let residual = self.inner.update_solution(alpha, p, q, x, r);
        self.ops.prolong_add(-alpha, x);
        residual
    }
    fn flexible_term(&self, z: &B::Vector, q: &B::Vector) -> Option<f64> {
        self.inner.flexible_term(z, q)
    }
}

/// Deflated PCG on `backend` from the initial guess in `x` (corrected first),
/// with the Lanczos estimate of M⁻¹PA's spectrum from its coefficients.
pub fn deflated_pcg<B, D>(
    backend: &B,
    ops: &D,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    field: &str,
) -> Result<(SolverPerformance, Option<SpectrumEstimate>), SolveError>
where
    B: CgBackend,
    D: DeflationOps<B::Vector>,
{
    let deflated = Deflated::new(backend, ops);
    deflated.correct_initial_guess(b, x);
    let recorded = Recorded::new(&deflated);
    let perf = pcg(&recorded, b, x, controls, field)?;
    Ok((perf, recorded.spectrum()))
}

/// PCG on the CPU with `preconditioner` (built on `a`; Gupta et al.'s
/// (2011) DPCG takes none, Jacobi or the truncated Neumann `neu1` / `neu2`,
/// any symmetric one works), deflated by `subdomains` when given (rows of
/// `a` in the subdomains' order), with the Lanczos spectrum estimate of the
/// preconditioned (deflated) operator.
pub fn solve_pcg_deflated(
    a: &Csr,
    preconditioner: &Preconditioner,
    subdomains: Option<&Subdomains>,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
) -> Result<(SolverPerformance, Option<SpectrumEstimate>), SolveError> {
    super::checks::check_system(a, b, x, controls)?;
    preconditioner.check()?;
    let precond = preconditioner.build(a)?;
    let backend = CpuBackend::new(a, precond.as_ref());
    on_copies(b, x, |b, x| match subdomains {
        Some(s) => {
            let ops = CpuDeflation::new(a, s.clone())?;
            deflated_pcg(&backend, &ops, b, x, controls, "x")
        }
        None => {
            let recorded = Recorded::new(&backend);
            pcg(&recorded, b, x, controls, "x").map(|perf| (perf, recorded.spectrum()))
        }
    })
}

#[cfg(test)]
mod tests;
