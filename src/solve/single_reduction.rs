//! PCG in single-reduction form (A. T. Chronopoulos and C. W. Gear, J.
//! Comput. Appl. Math. 25, 1989) on the CPU: the reference of the multi-GPU
//! device loop's default form (`gpu::multi`, kernels/pcg.cu
//! `cg_single_update`, `finish_single`).
//!
//! With u = M r and w = A u, s = A p is carried by s = w + β s, so Σ|r|,
//! r · u and w · u of an iteration come from one reduction and
//! p · Ap = w · u − β² p · Ap_old. In exact arithmetic these are PCG's
//! iterates; in floating point they agree to rounding. [`SingleReduction`]
//! wraps a [`CpuBackend`] and replaces only `iterate`, so `solve::pcg` drives
//! it (initial residual, `StopRule`, records, log lines) as every backend.

use std::cell::RefCell;

use super::checks::{check_system, on_copies};
use super::cpu::CpuBackend;
use super::executor::OnExecutor;
use super::jacobi::{Identity, Jacobi};
use super::pcg::{cg_steps_of, CgBackend, CgVectors, IterationRecord, LoopState, StopRule};
use super::LinearOperator;
use super::{pcg, SolveError, SolverControls, SolverPerformance};
use crate::sparse::Csr;

/// PCG with Jacobi (or no preconditioner) in single-reduction form.
pub struct SingleReduction<'a> {
    cpu: CpuBackend<'a>,
    a: &'a Csr,
    /// 1 / a_ii (Jacobi); None: M = I.
    inv_diag: Option<&'a [f64]>,
    /// w = A u.
    w: RefCell<Vec<f64>>,
}

impl<'a> SingleReduction<'a> {
    /// `precond` is the backend's preconditioner (for the host-driven steps
    /// `solve::pcg` may call); `inv_diag` its 1 / a_ii when it is Jacobi.
    pub fn new(a: &'a Csr, precond: &'a dyn LinearOperator, inv_diag: Option<&'a [f64]>) -> Self {
        Self {
            cpu: CpuBackend::new(a, precond),
            a,
            inv_diag,
            w: RefCell::new(vec![0.0; a.n_rows()]),
        }
    }

    /// u = M r.
    fn precondition_into(&self, r: &[f64], u: &mut [f64]) {
        match self.inv_diag {
            Some(d) => u
                .iter_mut()
                .zip(r.iter().zip(d))
                .for_each(|(u, (r, d))| *u = r * d),
            None => u.copy_from_slice(r),
        }
    }

    /// w = A u and w · u.
    fn product(&self, u: &[f64], w: &mut [f64]) -> f64 {
        self.a.spmv(u, w);
        dot(w, u)
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// The CPU backend's executor.
impl<'a> OnExecutor for SingleReduction<'a> {
    type Inner = CpuBackend<'a>;
    fn executor(&self) -> &CpuBackend<'a> {
        &self.cpu
    }
}

impl CgBackend for SingleReduction<'_> {
    cg_steps_of!(cpu);

    /// Up to `count` iterations: a prologue (u, w, r · u and w · u of the
    /// current r: β, p · Ap and α of the first iteration), then per
    /// iteration the vector step, the product and the one reduction. u is
    /// kept in z, s = A p in q.
    fn iterate(
        &self,
        rule: &StopRule,
        state: &LoopState,
        count: usize,
        v: CgVectors<'_, Vec<f64>>,
    ) -> Vec<IterationRecord> {
        let (u, s) = (v.z, v.q);
        let mut w = self.w.borrow_mut();
        let mut st = *state;
        let mut records = Vec::new();
        self.precondition_into(v.r, u);
        let mut r_u = dot(v.r, u);
        let mut w_u = self.product(u, &mut w);
        for j in 0..count {
            let mut record = IterationRecord::preconditioned(r_u);
            if rule.after_precondition(r_u, st.last_residual).is_some() {
                records.push(record);
                break;
            }
            let beta = if st.iterations == 0 {
                0.0
            } else {
                r_u / st.r_z_old
            };
            record.p_q = if beta == 0.0 {
                w_u
            } else {
                w_u - beta * beta * st.p_q_old
            };
            if rule.after_operator(record.p_q).is_some() {
                records.push(record);
                break;
            }
            let alpha = r_u / record.p_q;
            let mut sum_abs = 0.0;
            let mut next_r_u = 0.0;
            for i in 0..u.len() {
                let ui = u[i];
                let pi = if beta == 0.0 { ui } else { ui + beta * v.p[i] };
                let si = if beta == 0.0 {
                    w[i]
                } else {
                    w[i] + beta * s[i]
                };
                v.p[i] = pi;
                s[i] = si;
                v.x[i] += alpha * pi;
                v.r[i] -= alpha * si;
            }
            self.precondition_into(v.r, u);
            for (r, u) in v.r.iter().zip(u.iter()) {
                sum_abs += r.abs();
                next_r_u += r * u;
            }
            record.residual = sum_abs / rule.norm_factor;
            records.push(record);
            match st.next(rule, &record) {
                Some(next) => st = next,
                None => break,
            }
            if j + 1 < count {
                r_u = next_r_u;
                w_u = self.product(u, &mut w);
            }
        }
        records
    }
}

/// Solves A x = b by Jacobi-PCG (`jacobi`; else no preconditioner) in
/// single-reduction form from the initial guess in `x`, after the CPU
/// path's input checks.
pub fn solve_pcg_single_reduction(
    a: &Csr,
    jacobi: bool,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    check_system(a, b, x, controls)?;
    let identity = Identity(a.n_rows());
    let diagonal = jacobi.then(|| Jacobi::new(a)).transpose()?;
    let (precond, inv_diag): (&dyn LinearOperator, _) = match &diagonal {
        Some(j) => (j, Some(j.reciprocal_diagonal())),
        None => (&identity, None),
    };
    let backend = SingleReduction::new(a, precond, inv_diag);
    on_copies(b, x, |b, x| pcg(&backend, b, x, controls, field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::{solve_pcg, PreconditionerKind};
    use crate::sparse::testing::{grid_laplacian, random_symmetric, SplitMix};

    /// The single-reduction form takes PCG's iterations (±1) to the same
    /// solution, with Jacobi and without, on a 7-point box and a random SPD
    /// matrix, with chunks that end mid-solve (`solve::pcg` asks for 50).
    #[test]
    fn single_reduction_takes_pcg_iterations_to_the_same_solution() {
        for (name, a) in [
            ("box", grid_laplacian(14, 11, 9)),
            ("random", random_symmetric(600, 6, 7)),
        ] {
            let mut g = SplitMix(5);
            let b: Vec<f64> = (0..a.n_rows()).map(|_| g.next_f64() - 0.5).collect();
            let c = SolverControls::absolute(1e-12, 5000);
            for jacobi in [true, false] {
                let kind = match jacobi {
                    true => PreconditionerKind::Jacobi,
                    false => PreconditionerKind::None,
                };
                let mut x_ref = vec![0.0; a.n_rows()];
                let reference = solve_pcg(&a, kind, &b, &mut x_ref, &c, "p").unwrap();
                let mut x = vec![0.0; a.n_rows()];
                let perf = solve_pcg_single_reduction(&a, jacobi, &b, &mut x, &c, "p").unwrap();
                let diff = x
                    .iter()
                    .zip(&x_ref)
                    .map(|(u, v)| (u - v).abs())
                    .fold(0.0, f64::max);
                let scale = x_ref.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                assert!(perf.converged, "{name} {jacobi}");
                assert!(
                    perf.iterations.abs_diff(reference.iterations) <= 1,
                    "{name} {jacobi}: {} vs {}",
                    perf.iterations,
                    reference.iterations
                );
                assert_eq!(perf.initial_residual, reference.initial_residual);
                assert!(diff <= 1e-9 * scale, "{name} {jacobi}: {diff:e}");
                // The residual histories agree while far above rounding.
                for (h, r) in perf.history.iter().zip(&reference.history) {
                    if *r > 1e-8 {
                        assert!((h - r).abs() <= 1e-6 * r, "{name} {jacobi}: {h} vs {r}");
                    }
                }
            }
        }
    }

    /// maxIter and minIter stop it where they stop PCG.
    #[test]
    fn single_reduction_honours_min_and_max_iterations() {
        let a = grid_laplacian(10, 9, 8);
        let b = vec![1.0; a.n_rows()];
        let capped = SolverControls::absolute(1e-14, 13);
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_pcg_single_reduction(&a, true, &b, &mut x, &capped, "p").unwrap();
        assert_eq!(perf.iterations, 13);
        assert!(!perf.converged);
        let loose = SolverControls {
            tolerance: 1e30,
            min_iter: 9,
            ..SolverControls::default()
        };
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_pcg_single_reduction(&a, true, &b, &mut x, &loose, "p").unwrap();
        assert_eq!(perf.iterations, 9);
    }
}
