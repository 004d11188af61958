//! Spectrum estimates of the preconditioned operator from the PCG
//! coefficients (the Lanczos connection: Saad, "Iterative Methods for Sparse
//! Linear Systems", §6.7.3), as Gupta et al. 2011, §3.4 reports condition numbers
//! (Table 1).
//!
//! With α_j = (r·z)_j / (p·Ap)_j and β_j = (r·z)_{j+1} / (r·z)_j, the m × m
//! tridiagonal T_m with
//!
//!   T_jj = 1/α_j + β_{j−1}/α_{j−1} (β_{−1} = 0),  T_{j,j+1} = √β_j / α_j
//!
//! is the Lanczos matrix of M⁻¹A on the Krylov space of PCG; its extreme
//! eigenvalues (Sturm bisection) converge to those of M⁻¹A from inside. Valid
//! for a fixed SPD preconditioner (Fletcher–Reeves β, not flexible PCG). Under
//! deflation (`deflation`) the operator is M⁻¹PA: T_m then estimates the
//! effective condition number, PA's zero eigenvalues excluded.
//!
//! [`Recorded`] is a `CgBackend` adapter that keeps the records of every
//! iteration of the wrapped backend, whatever loop (host steps or a fused
//! device loop) produced them.

use std::cell::RefCell;

use super::executor::vectors_and_reductions_of;
use super::pcg::cg_steps_of;
use super::{
    CgBackend, CgVectors, Executor, InitialNorms, IterationRecord, LoopState, SolveError, StopRule,
};

/// Extreme eigenvalues of a Lanczos matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpectrumEstimate {
    pub min: f64,
    pub max: f64,
    /// Iterations (size of T) it comes from.
    pub steps: usize,
}

impl SpectrumEstimate {
    /// λ_max / λ_min.
    pub fn condition(&self) -> f64 {
        self.max / self.min
    }
}

/// The extreme eigenvalues of T_m built from the completed iterations of
/// `records` (those with a finite p · Ap), or `None` with no completed
/// iteration or coefficients that are not positive.
pub fn spectrum_from_cg(records: &[IterationRecord]) -> Option<SpectrumEstimate> {
    let done: Vec<&IterationRecord> = records
        .iter()
        .take_while(|r| r.p_q.is_finite() && r.r_z.is_finite())
        .collect();
    if done.is_empty() || done.iter().any(|r| r.p_q <= 0.0 || r.r_z <= 0.0) {
        return None;
    }
    let alpha: Vec<f64> = done.iter().map(|r| r.r_z / r.p_q).collect();
    let beta: Vec<f64> = done.windows(2).map(|w| w[1].r_z / w[0].r_z).collect();
    let diag: Vec<f64> = (0..alpha.len())
        .map(|j| {
            let previous = if j == 0 {
                0.0
            } else {
                beta[j - 1] / alpha[j - 1]
            };
            1.0 / alpha[j] + previous
        })
        .collect();
    let off: Vec<f64> = beta.iter().zip(&alpha).map(|(b, a)| b.sqrt() / a).collect();
    let (min, max) = extreme_eigenvalues(&diag, &off);
    Some(SpectrumEstimate {
        min,
        max,
        steps: alpha.len(),
    })
}

/// Number of eigenvalues below `x` of the symmetric tridiagonal matrix with
/// diagonal `d` and off-diagonal `e` (Sturm sequence of the LDLᵀ pivots).
fn count_below(d: &[f64], e: &[f64], x: f64) -> usize {
    let mut count = 0;
    let mut pivot = 1.0;
    for (i, &di) in d.iter().enumerate() {
        let coupling = if i == 0 { 0.0 } else { e[i - 1] * e[i - 1] };
        pivot = di - x - coupling / pivot;
        if pivot == 0.0 {
            // Perturb an exact zero pivot: the count is that of x + ε.
            pivot = -f64::EPSILON * (di.abs() + x.abs()).max(f64::MIN_POSITIVE);
        }
        if pivot < 0.0 {
            count += 1;
        }
    }
    count
}

/// Smallest and largest eigenvalues by bisection inside the Gershgorin bounds.
fn extreme_eigenvalues(d: &[f64], e: &[f64]) -> (f64, f64) {
    let radius = |i: usize| {
        let left = if i == 0 { 0.0 } else { e[i - 1].abs() };
        left + e.get(i).map_or(0.0, |v| v.abs())
    };
    let lo = (0..d.len())
        .map(|i| d[i] - radius(i))
        .fold(f64::MAX, f64::min);
    let hi = (0..d.len())
        .map(|i| d[i] + radius(i))
        .fold(f64::MIN, f64::max);
    // The k-th smallest eigenvalue (k = 1 or n): the smallest x with
    // count_below(x) ≥ k is found by halving [lo, hi] to round-off.
    let kth = |k: usize| {
        let (mut a, mut b) = (lo, hi);
        for _ in 0..2100 {
            let mid = 0.5 * (a + b);
            if mid <= a || mid >= b {
                break;
            }
            if count_below(d, e, mid) >= k {
                b = mid;
            } else {
                a = mid;
            }
        }
        0.5 * (a + b)
    };
    (kth(1), kth(d.len()))
}

/// A `CgBackend` that forwards to `inner` and keeps every iteration record.
pub struct Recorded<'a, B: CgBackend> {
    inner: &'a B,
    records: RefCell<Vec<IterationRecord>>,
}

impl<'a, B: CgBackend> Recorded<'a, B> {
    pub fn new(inner: &'a B) -> Self {
        Self {
            inner,
            records: RefCell::new(Vec::new()),
        }
    }

    /// The records of every iteration started so far, in order.
    pub fn records(&self) -> Vec<IterationRecord> {
        self.records.borrow().clone()
    }

    /// [`spectrum_from_cg`] of the records so far.
    pub fn spectrum(&self) -> Option<SpectrumEstimate> {
        spectrum_from_cg(&self.records.borrow())
    }
}

/// The inner executor's; a new initial residual starts a new record.
impl<B: CgBackend> Executor for Recorded<'_, B> {
    type Vector = B::Vector;
    vectors_and_reductions_of!(inner);
    fn initialize(&self, b: &B::Vector, x: &B::Vector, r: &mut B::Vector) -> InitialNorms {
        self.records.borrow_mut().clear();
        self.inner.initialize(b, x, r)
    }
    fn device_status(&self) -> Result<(), SolveError> {
        self.inner.device_status()
    }
}

impl<B: CgBackend> CgBackend for Recorded<'_, B> {
    cg_steps_of!(inner);
    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, B::Vector>,
    ) -> Vec<IterationRecord> {
        let records = self.inner.iterate(rule, state, count, v);
        self.records.borrow_mut().extend_from_slice(&records);
        records
    }
    fn flexible_term(&self, z: &B::Vector, q: &B::Vector) -> Option<f64> {
        self.inner.flexible_term(z, q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::{pcg, CpuBackend, PreconditionerKind, SolverControls};
    use crate::sparse::testing::{dense, random_symmetric};
    use nalgebra::DMatrix;

    #[test]
    fn sturm_bisection_finds_the_extremes_of_a_tridiagonal_matrix() {
        // 1-D Laplacian [-1 2 -1] of size 20: λ_k = 2 − 2 cos(kπ/21).
        let (d, e) = (vec![2.0; 20], vec![-1.0; 19]);
        let (min, max) = extreme_eigenvalues(&d, &e);
        let exact = |k: f64| 2.0 - 2.0 * (k * std::f64::consts::PI / 21.0).cos();
        assert!((min - exact(1.0)).abs() < 1e-13, "{min}");
        assert!((max - exact(20.0)).abs() < 1e-13, "{max}");
        // λ_k < 0.9 for k ≤ 6 (λ_6 = 0.73, λ_7 = 1).
        assert_eq!(count_below(&d, &e, 0.9), 6);
    }

    #[test]
    fn cg_coefficients_give_the_extreme_eigenvalues_of_the_preconditioned_matrix() {
        let n = 120;
        let a = random_symmetric(n, 6, 5);
        let full = dense(&a);
        for kind in [PreconditionerKind::None, PreconditionerKind::Jacobi] {
            // M⁻¹A is similar to M^-1/2 A M^-1/2.
            let s = match kind {
                PreconditionerKind::Jacobi => full.diagonal().map(|d| 1.0 / d.sqrt()),
                _ => full.diagonal().map(|_| 1.0),
            };
            let s = DMatrix::from_diagonal(&s);
            let eig = (&s * &full * &s).symmetric_eigenvalues();
            let precond = kind.build(&a).unwrap();
            let backend = CpuBackend::new(&a, precond.as_ref());
            let recorded = Recorded::new(&backend);
            let b: Vec<f64> = (0..n).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
            let mut x = vec![0.0; n];
            let controls = SolverControls::absolute(1e-14, 500);
            let perf = pcg(&recorded, &b, &mut x, &controls, "x").unwrap();
            let estimate = recorded.spectrum().unwrap();
            assert_eq!(estimate.steps, perf.iterations);
            assert!(
                (estimate.min / eig.min() - 1.0).abs() < 1e-6,
                "{kind}: {} vs {}",
                estimate.min,
                eig.min()
            );
            assert!(
                (estimate.max / eig.max() - 1.0).abs() < 1e-6,
                "{kind}: {} vs {}",
                estimate.max,
                eig.max()
            );
        }
    }

    #[test]
    fn no_completed_iteration_gives_no_estimate() {
        let nan = IterationRecord::preconditioned(1.0);
        assert_eq!(spectrum_from_cg(&[nan]), None);
        assert_eq!(spectrum_from_cg(&[]), None);
    }
}
