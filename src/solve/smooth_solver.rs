//! OpenFOAM's `smoothSolver` (`smoothSolver.C`), written once over a backend
//! ([`SmoothBackend`]: the sweeps, on an `executor::Executor`'s vectors):
//! the residual is checked after every `nSweeps` sweeps, iterations count
//! sweeps, and the loop runs while
//! `(iterations += nSweeps) < maxIter && !converged || iterations < minIter`.
//! Residuals are OpenFOAM-normalised with the normFactor of the initial x.

use super::checks::{check_inputs, check_symmetric, on_copies};
use super::cpu::CpuBackend;
use super::executor::{Executor, OnExecutor};
use super::pcg::{check_divergence, check_residual, initial_residual};
use super::smoother::{Smoother, SmootherSettings};
use super::{SolveError, SolverControls, SolverPerformance};
use crate::sparse::{Csr, Permutation};

/// What the smoother loop adds to an [`Executor`] (whose `initialize` gives
/// the initial residual and normFactor).
pub trait SmoothBackend: Executor {
    /// r = b − A x; Σ|r| only, with the bits of `initialize`'s (the loop's
    /// residual after each group of sweeps: normFactor is fixed at the start).
    fn residual_sum(&self, b: &Self::Vector, x: &Self::Vector, r: &mut Self::Vector) -> f64 {
        self.initialize(b, x, r).residual_sum
    }
    /// `sweeps` smoother sweeps on x.
    fn smooth(
        &self,
        b: &Self::Vector,
        x: &mut Self::Vector,
        sweeps: usize,
    ) -> Result<(), SolveError>;
}

/// Solves A x = b by smoothing from the x given, OpenFOAM's `smoothSolver::solve`.
pub fn smooth_solve<B: SmoothBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    n_sweeps: usize,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    let perf = smooth_loop(backend, b, x, controls, n_sweeps, field, "smoothSolver")?;
    perf.log("smoothSolver", "sweeps", field, controls);
    Ok(perf)
}

/// [`smooth_solve`]'s loop without the final log line; `solver` names it
/// in the debug lines (GAMG runs its cycles through it, one per "sweep").
pub(crate) fn smooth_loop<B: SmoothBackend>(
    backend: &B,
    b: &B::Vector,
    x: &mut B::Vector,
    controls: &SolverControls,
    n_sweeps: usize,
    field: &str,
    solver: &str,
) -> Result<SolverPerformance, SolveError> {
    controls.validate()?;
    if n_sweeps == 0 {
        return Err(SolveError::InvalidControls(
            "nSweeps must be at least 1".into(),
        ));
    }
    let (mut r, mut perf, run) = initial_residual(backend, b, x, controls)?;
    if let Some((_, rule)) = run {
        let (initial, norm_factor) = (rule.initial, rule.norm_factor);
        let mut best = initial;
        loop {
            backend.smooth(b, x, n_sweeps)?;
            let residual = backend.residual_sum(b, x, &mut r) / norm_factor;
            backend.device_status()?;
            perf.iterations += n_sweeps;
            check_residual(residual, perf.iterations)?;
            check_divergence(residual, perf.iterations, &mut best)?;
            log::debug!(
                "{solver}: {field} sweep {}, residual = {residual:e}",
                perf.iterations
            );
            perf.final_residual = residual;
            perf.history.push(residual);
            perf.converged = controls.converged(initial, residual);
            let again = (perf.iterations < controls.max_iter && !perf.converged)
                || perf.iterations < controls.min_iter;
            if !again {
                break;
            }
        }
    }
    Ok(perf)
}

/// The CPU executor of the smoother loop.
pub struct CpuSmoothing<'a> {
    cg: CpuBackend<'a>,
    smoother: &'a dyn Smoother,
}

impl<'a> CpuSmoothing<'a> {
    /// The smoother's sweeps on `a`, the residuals those of a backend
    /// without a preconditioner.
    pub fn new(a: &'a Csr, smoother: &'a dyn Smoother) -> Self {
        Self {
            cg: CpuBackend::unpreconditioned(a),
            smoother,
        }
    }
}

/// The executor is the PCG backend's.
impl<'a> OnExecutor for CpuSmoothing<'a> {
    type Inner = CpuBackend<'a>;
    fn executor(&self) -> &CpuBackend<'a> {
        &self.cg
    }
}

impl SmoothBackend for CpuSmoothing<'_> {
    fn residual_sum(&self, b: &Vec<f64>, x: &Vec<f64>, r: &mut Vec<f64>) -> f64 {
        self.cg.split().residual(b, x, r)
    }
    fn smooth(&self, b: &Vec<f64>, x: &mut Vec<f64>, sweeps: usize) -> Result<(), SolveError> {
        self.smoother.smooth(b, x, sweeps);
        Ok(())
    }
}

/// Runs `solve` on P A Pᵀ, P b, P x (x copied back in the original order),
/// or on the system as given when there is no permutation.
pub fn in_ordering<T>(
    a: &Csr,
    ordering: Option<Permutation>,
    b: &[f64],
    x: &mut [f64],
    solve: impl FnOnce(&Csr, &[f64], &mut [f64]) -> Result<T, SolveError>,
) -> Result<T, SolveError> {
    match ordering {
        None => solve(a, b, x),
        Some(p) => {
            let mut x_new = p.to_new(x);
            let out = solve(&p.apply_symmetric(a), &p.to_new(b), &mut x_new)?;
            x.copy_from_slice(&p.to_old(&x_new));
            Ok(out)
        }
    }
}

/// Solves A x = b on the CPU with OpenFOAM's smoothSolver and the given
/// smoother, from the x given, after PCG's input checks (symmetry only where
/// the smoother needs it: [`SmootherSettings::needs_symmetric_matrix`], so
/// that Jacobi and Gauss–Seidel solve nonsymmetric systems, as OpenFOAM's
/// smoothSolver does for momentum). Block Jacobi runs on its block ordering
/// ([`SmootherSettings::ordering`]).
pub fn solve_smooth(
    a: &Csr,
    settings: &SmootherSettings,
    b: &[f64],
    x: &mut [f64],
    controls: &SolverControls,
    field: &str,
) -> Result<SolverPerformance, SolveError> {
    check_inputs(a, b, x, controls)?;
    if settings.needs_symmetric_matrix() {
        check_symmetric(a)?;
    }
    settings.validate().map_err(SolveError::InvalidControls)?;
    in_ordering(a, settings.ordering(a), b, x, |a, b, x| {
        let smoother = settings.build(a)?;
        let backend = CpuSmoothing::new(a, smoother.as_ref());
        on_copies(b, x, |b, x| {
            smooth_solve(&backend, b, x, controls, settings.sweeps, field)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::smoother::{SmootherKind, Sweep};
    use crate::sparse::testing::random_symmetric;

    fn controls(tolerance: f64, max_iter: usize, min_iter: usize) -> SolverControls {
        SolverControls {
            tolerance,
            rel_tol: 0.0,
            max_iter,
            min_iter,
        }
    }

    #[test]
    fn iterations_count_sweeps_and_stop_like_openfoam() {
        let a = random_symmetric(400, 5, 2);
        let b: Vec<f64> = (0..400).map(|i| (i % 10) as f64).collect();
        let mut s = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric));
        s.sweeps = 3;
        let mut x = vec![0.0; 400];
        let perf = solve_smooth(&a, &s, &b, &mut x, &controls(1e-10, 1000, 0), "p").unwrap();
        assert!(perf.converged && perf.final_residual < 1e-10);
        assert_eq!(perf.iterations % 3, 0);
        assert_eq!(perf.history.len(), perf.iterations / 3 + 1);
        // The check before the last found it not converged.
        assert!(perf.history[perf.history.len() - 2] >= 1e-10);
        // maxIter stops at the first multiple of nSweeps reaching it.
        let mut x = vec![0.0; 400];
        let perf = solve_smooth(&a, &s, &b, &mut x, &controls(0.0, 7, 0), "p").unwrap();
        assert_eq!((perf.iterations, perf.converged), (9, false));
        // minIter forces sweeps on a converged start; maxIter 0 does none.
        let perf = solve_smooth(&a, &s, &b, &mut x, &controls(1e30, 0, 4), "p").unwrap();
        assert_eq!(perf.iterations, 6);
        let perf = solve_smooth(&a, &s, &b, &mut x, &controls(0.0, 0, 0), "p").unwrap();
        assert_eq!(perf.iterations, 0);
    }

    /// Upwind convection–diffusion in 1-D: diagonally dominant, nonsymmetric.
    fn convection_diffusion(n: usize) -> Csr {
        let (mut row_ptr, mut cols, mut values) = (vec![0], Vec::new(), Vec::new());
        for i in 0..n {
            for (j, v) in [(i.wrapping_sub(1), -2.0), (i, 3.0), (i + 1, -0.5)] {
                if j < n {
                    cols.push(j as u32);
                    values.push(v);
                }
            }
            row_ptr.push(cols.len());
        }
        Csr::new(n, row_ptr, cols, values).unwrap()
    }

    #[test]
    fn gauss_seidel_solves_nonsymmetric_systems_and_dic_refuses_them() {
        let a = convection_diffusion(200);
        let x_exact: Vec<f64> = (0..200).map(|i| (i as f64 * 0.1).sin()).collect();
        let mut b = vec![0.0; 200];
        a.spmv(&x_exact, &mut b);
        for sweep in [Sweep::Forward, Sweep::Symmetric] {
            let s = SmootherSettings::new(SmootherKind::GaussSeidel(sweep));
            let mut x = vec![0.0; 200];
            let perf = solve_smooth(&a, &s, &b, &mut x, &controls(1e-12, 5000, 0), "U").unwrap();
            assert!(perf.converged, "{sweep:?}: {perf:?}");
            let err = x
                .iter()
                .zip(&x_exact)
                .map(|(x, e)| (x - e).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-9, "{sweep:?}: max error {err:e}");
        }
        let dic = SmootherSettings::new(SmootherKind::Dic);
        let err = solve_smooth(
            &a,
            &dic,
            &b,
            &mut vec![0.0; 200],
            &controls(1e-8, 10, 0),
            "U",
        )
        .unwrap_err();
        assert!(matches!(err, SolveError::NotSymmetric { .. }), "{err}");
    }

    #[test]
    fn bad_settings_and_divergence_are_errors() {
        let a = random_symmetric(50, 5, 3);
        let b = vec![1.0; 50];
        let mut x = vec![0.0; 50];
        let mut s = SmootherSettings::new(SmootherKind::Jacobi);
        s.sweeps = 0;
        let err = solve_smooth(&a, &s, &b, &mut x, &controls(1e-8, 10, 0), "p").unwrap_err();
        assert!(err.to_string().contains("nSweeps"), "{err}");
        // Jacobi on an SPD matrix where 2D − A is indefinite (all off-diagonals
        // 0.9, unit diagonal: D⁻¹(L + U) has the eigenvalue 1.8) diverges.
        let bad = Csr::new(
            3,
            vec![0, 3, 6, 9],
            vec![0, 1, 2, 0, 1, 2, 0, 1, 2],
            vec![1., 0.9, 0.9, 0.9, 1., 0.9, 0.9, 0.9, 1.],
        )
        .unwrap();
        let s = SmootherSettings::new(SmootherKind::Jacobi);
        let mut x = vec![0.0; 3];
        let err = solve_smooth(
            &bad,
            &s,
            &[1.0, 0.0, 0.0],
            &mut x,
            &controls(0.0, 5000, 0),
            "p",
        )
        .unwrap_err();
        assert!(matches!(err, SolveError::Diverged { .. }), "{err}");
    }
}
