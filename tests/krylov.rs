//! GMRES(m) and PBiCGStab (`solve::gmres`, `solve::bicgstab`) on the CPU
//! reference backend: nonsymmetric convection–diffusion systems of a hex
//! box, a perturbed tet box and shipped meshes (`fvm::convection`), with a
//! manufactured solution x* (b = A x*), so that every variant must find x*;
//! GMRES's residual history must not increase; breakdowns and bad settings
//! must be errors, not panics.

use std::sync::atomic::{AtomicUsize, Ordering};

use fvpoisson::fvm::testing::convection_diffusion_systems;
use fvpoisson::solve::precond::{Identity, Jacobi};
use fvpoisson::solve::{
    solve_krylov, solve_krylov_with, GmresSettings, KrylovMethod, LinearOperator,
    Orthogonalization, PreconditionerKind, PreconditioningSide, SolveError, SolverControls,
    SolverPerformance,
};
use fvpoisson::sparse::Csr;

fn systems() -> Vec<(String, Csr, Vec<f64>, Vec<f64>)> {
    convection_diffusion_systems()
}

fn max_rel_error(x: &[f64], x_true: &[f64]) -> f64 {
    let scale = x_true.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    x.iter()
        .zip(x_true)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

fn tight() -> SolverControls {
    SolverControls::absolute(1e-12, 2000)
}

fn gmres(
    restart: usize,
    ortho: Orthogonalization,
    side: PreconditioningSide,
    flexible: bool,
) -> KrylovMethod {
    KrylovMethod::Gmres(GmresSettings {
        restart,
        orthogonalization: ortho,
        side,
        flexible,
    })
}

fn assert_monotone(name: &str, perf: &SolverPerformance) {
    for (k, w) in perf.history.windows(2).enumerate() {
        assert!(
            w[1] <= w[0] * (1.0 + 1e-8),
            "{name}: residual rose at iteration {}: {:e} -> {:e}",
            k + 1,
            w[0],
            w[1]
        );
    }
}

#[test]
fn every_gmres_variant_finds_the_true_solution_with_a_monotone_history() {
    use Orthogonalization::*;
    use PreconditioningSide::*;
    for (name, a, x_true, b) in systems() {
        let mut counts = Vec::new();
        for (ortho, side, flexible) in [
            (Mgs, Right, false),
            (Cgs2, Right, false),
            (Mgs, Left, false),
            (Cgs2, Left, false),
            (Mgs, Right, true),
            (Cgs2, Right, true),
        ] {
            let method = gmres(20, ortho, side, flexible);
            let mut x = vec![0.0; a.n_rows()];
            let perf = solve_krylov(
                &a,
                &method,
                PreconditionerKind::Jacobi,
                &b,
                &mut x,
                &tight(),
                "u",
            )
            .unwrap_or_else(|e| panic!("{name} {method}: {e}"));
            let err = max_rel_error(&x, &x_true);
            println!(
                "{name} {method}: {} iterations, residual {:e}, error {err:e}",
                perf.iterations, perf.final_residual
            );
            assert!(perf.converged, "{name} {method}: {perf:?}");
            assert!(err < 1e-7, "{name} {method}: error {err:e}");
            assert_monotone(&format!("{name} {method}"), &perf);
            assert!(
                perf.iterations > 20,
                "{name} {method}: restarts must be exercised"
            );
            counts.push(perf.iterations);
        }
        // MGS and CGS2 build the same space: the same iterations (±1).
        for pair in counts.chunks(2) {
            assert!(pair[0].abs_diff(pair[1]) <= 1, "{name}: {counts:?}");
        }
        // Flexible GMRES with a fixed preconditioner is right-preconditioned GMRES.
        assert!(counts[4].abs_diff(counts[0]) <= 1, "{name}: {counts:?}");
    }
}

#[test]
fn bicgstab_finds_the_true_solution_with_and_without_jacobi() {
    for (name, a, x_true, b) in systems() {
        for kind in [PreconditionerKind::Jacobi, PreconditionerKind::None] {
            let mut x = vec![0.0; a.n_rows()];
            let perf = solve_krylov(&a, &KrylovMethod::BiCgStab, kind, &b, &mut x, &tight(), "u")
                .unwrap_or_else(|e| panic!("{name} {kind}: {e}"));
            let err = max_rel_error(&x, &x_true);
            println!(
                "{name} PBiCGStab {kind}: {} iterations, residual {:e}, error {err:e}",
                perf.iterations, perf.final_residual
            );
            assert!(
                perf.converged && err < 1e-7,
                "{name} {kind}: {err:e} {perf:?}"
            );
            assert!(perf.final_residual < 1e-12);
            assert_eq!(perf.history.len(), perf.iterations + 1);
        }
    }
}

#[test]
fn gmres_with_a_full_restart_equals_the_unrestarted_minimum_and_restarts_cost_iterations() {
    let (name, a, _, b) = systems().swap_remove(1);
    let controls = SolverControls::absolute(1e-10, 5000);
    let run = |m| {
        let mut x = vec![0.0; a.n_rows()];
        solve_krylov(
            &a,
            &gmres(
                m,
                Orthogonalization::Cgs2,
                PreconditioningSide::Right,
                false,
            ),
            PreconditionerKind::Jacobi,
            &b,
            &mut x,
            &controls,
            "u",
        )
        .unwrap()
        .iterations
    };
    let (full, short) = (run(400), run(5));
    println!("{name}: GMRES(400) {full}, GMRES(5) {short} iterations");
    assert!(full < short, "{full} vs {short}");
}

/// Jacobi on odd applications, nothing on even ones: not a fixed linear map.
struct Alternating<'a> {
    jacobi: Jacobi,
    n: usize,
    calls: AtomicUsize,
    _a: &'a Csr,
}

impl LinearOperator for Alternating<'_> {
    fn n(&self) -> usize {
        self.n
    }
    fn apply(&self, x: &[f64], y: &mut [f64]) {
        if self.calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            self.jacobi.apply(x, y);
        } else {
            y.copy_from_slice(x);
        }
    }
}

#[test]
fn flexible_gmres_converges_with_a_variable_preconditioner() {
    let (name, a, x_true, b) = systems().swap_remove(0);
    let m = Alternating {
        jacobi: Jacobi::new(&a).unwrap(),
        n: a.n_rows(),
        calls: AtomicUsize::new(0),
        _a: &a,
    };
    let method = gmres(10, Orthogonalization::Mgs, PreconditioningSide::Right, true);
    let mut x = vec![0.0; a.n_rows()];
    let perf = solve_krylov_with(&a, &method, &m, &b, &mut x, &tight(), "u").unwrap();
    let err = max_rel_error(&x, &x_true);
    println!(
        "{name} FGMRES(10), alternating: {} iterations, error {err:e}",
        perf.iterations
    );
    assert!(perf.converged && err < 1e-7, "{err:e} {perf:?}");
    assert_monotone(name.as_str(), &perf);
}

fn csr(n: usize, entries: &[(usize, usize, f64)]) -> Csr {
    let mut row_ptr = vec![0; n + 1];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for r in 0..n {
        for &(i, j, v) in entries.iter().filter(|e| e.0 == r) {
            let _ = i;
            cols.push(j as u32);
            vals.push(v);
        }
        row_ptr[r + 1] = cols.len();
    }
    Csr::new(n, row_ptr, cols, vals).unwrap()
}

#[test]
fn breakdowns_and_bad_input_are_errors() {
    let controls = SolverControls::absolute(1e-12, 100);
    let none = Identity(2);
    // BiCGStab: r0 · A r0 = 0 for the swap matrix from b = e0.
    let swap = csr(2, &[(0, 1, 1.0), (1, 0, 1.0)]);
    let mut x = vec![0.0; 2];
    let err = solve_krylov_with(
        &swap,
        &KrylovMethod::BiCgStab,
        &none,
        &[1.0, 0.0],
        &mut x,
        &controls,
        "u",
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            SolveError::KrylovBreakdown {
                method: "PBiCGStab",
                iteration: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("broke down at iteration 1"),
        "{err}"
    );
    // GMRES: A v = 0 on a singular matrix.
    let singular = csr(2, &[(0, 0, 1.0), (0, 1, 1.0), (1, 0, 1.0), (1, 1, 1.0)]);
    let mut x = vec![0.0; 2];
    let err = solve_krylov_with(
        &singular,
        &gmres(5, Orthogonalization::Mgs, PreconditioningSide::Right, false),
        &none,
        &[1.0, -1.0],
        &mut x,
        &controls,
        "u",
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            SolveError::KrylovBreakdown {
                method: "GMRES",
                iteration: 1,
                ..
            }
        ),
        "{err}"
    );
    // GMRES on the swap matrix: the lucky breakdown after 2 steps is the exact solution.
    for ortho in [Orthogonalization::Mgs, Orthogonalization::Cgs2] {
        let mut x = vec![0.0; 2];
        let perf = solve_krylov_with(
            &swap,
            &gmres(5, ortho, PreconditioningSide::Left, false),
            &none,
            &[1.0, 2.0],
            &mut x,
            &controls,
            "u",
        )
        .unwrap();
        assert_eq!((perf.iterations, perf.converged), (2, true), "{perf:?}");
        assert!(
            (x[0] - 2.0).abs() < 1e-14 && (x[1] - 1.0).abs() < 1e-14,
            "{x:?}"
        );
    }
    // A preconditioner that returns NaN.
    struct Poison;
    impl LinearOperator for Poison {
        fn n(&self) -> usize {
            2
        }
        fn apply(&self, _: &[f64], y: &mut [f64]) {
            y.fill(f64::NAN);
        }
    }
    let diag = csr(2, &[(0, 0, 2.0), (1, 1, 3.0)]);
    for method in [
        KrylovMethod::BiCgStab,
        KrylovMethod::Gmres(GmresSettings::default()),
    ] {
        let mut x = vec![0.0; 2];
        let err = solve_krylov_with(&diag, &method, &Poison, &[1.0, 1.0], &mut x, &controls, "u")
            .unwrap_err();
        assert!(
            matches!(
                err,
                SolveError::KrylovBreakdown { .. } | SolveError::NonFiniteResidual { .. }
            ),
            "{method}: {err}"
        );
    }
    // Bad input and settings.
    let mut x = vec![0.0; 2];
    let err = solve_krylov_with(
        &diag,
        &KrylovMethod::BiCgStab,
        &none,
        &[f64::NAN, 1.0],
        &mut x,
        &controls,
        "u",
    )
    .unwrap_err();
    assert!(matches!(err, SolveError::NonFinite { row: 0, .. }), "{err}");
    for (settings, needle) in [
        (
            GmresSettings {
                restart: 0,
                ..Default::default()
            },
            "between 1 and",
        ),
        (
            GmresSettings {
                flexible: true,
                side: PreconditioningSide::Left,
                ..Default::default()
            },
            "flexible",
        ),
    ] {
        let err = solve_krylov_with(
            &diag,
            &KrylovMethod::Gmres(settings),
            &none,
            &[1.0, 1.0],
            &mut x,
            &controls,
            "u",
        )
        .unwrap_err();
        assert!(
            matches!(&err, SolveError::InvalidControls(m) if m.contains(needle)),
            "{err}"
        );
    }
    let err = solve_krylov_with(
        &diag,
        &KrylovMethod::BiCgStab,
        &Identity(3),
        &[1.0, 1.0],
        &mut x,
        &controls,
        "u",
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            SolveError::SizeMismatch {
                what: "preconditioner",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn openfoam_controls_max_min_iterations_and_exact_initial_guesses() {
    let (_, a, x_true, b) = systems().swap_remove(2);
    for method in [
        KrylovMethod::BiCgStab,
        KrylovMethod::Gmres(GmresSettings::default()),
    ] {
        // maxIter 0: nothing done.
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_krylov(
            &a,
            &method,
            PreconditionerKind::Jacobi,
            &b,
            &mut x,
            &SolverControls::absolute(1e-12, 0),
            "u",
        )
        .unwrap();
        assert_eq!((perf.iterations, perf.converged), (0, false));
        assert!(x.iter().all(|&v| v == 0.0));
        // maxIter 3 stops after 3.
        let perf = solve_krylov(
            &a,
            &method,
            PreconditionerKind::Jacobi,
            &b,
            &mut x,
            &SolverControls::absolute(1e-12, 3),
            "u",
        )
        .unwrap();
        assert_eq!((perf.iterations, perf.converged), (3, false), "{method}");
        // relTol: stops below relTol × initial.
        let mut x = vec![0.0; a.n_rows()];
        let controls = SolverControls {
            tolerance: 0.0,
            rel_tol: 1e-3,
            max_iter: 1000,
            min_iter: 0,
        };
        let perf = solve_krylov(
            &a,
            &method,
            PreconditionerKind::Jacobi,
            &b,
            &mut x,
            &controls,
            "u",
        )
        .unwrap();
        assert!(
            perf.converged && perf.final_residual < 1e-3 * perf.initial_residual,
            "{method}: {perf:?}"
        );
        assert!(
            perf.history[perf.history.len() - 2] >= 1e-3 * perf.initial_residual * 0.999,
            "{method}: ran on too long"
        );
        // The exact solution converges at once; minIter still iterates.
        let mut x = x_true.clone();
        let perf = solve_krylov(
            &a,
            &method,
            PreconditionerKind::Jacobi,
            &b,
            &mut x,
            &SolverControls::absolute(1e-6, 100),
            "u",
        )
        .unwrap();
        assert_eq!((perf.iterations, perf.converged), (0, true), "{method}");
        let mut x = vec![0.0; a.n_rows()];
        let controls = SolverControls {
            tolerance: 1.0,
            rel_tol: 0.0,
            max_iter: 100,
            min_iter: 4,
        };
        let perf = solve_krylov(
            &a,
            &method,
            PreconditionerKind::Jacobi,
            &b,
            &mut x,
            &controls,
            "u",
        )
        .unwrap();
        assert_eq!(perf.iterations, 4, "{method}");
    }
}

#[test]
fn a_symmetric_row_permutation_changes_nothing_but_rounding() {
    use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
    let controls = SolverControls::absolute(1e-10, 3000);
    for (name, a, _, b) in systems() {
        let p = reverse_cuthill_mckee(&a);
        let (ap, bp) = (p.apply_symmetric(&a), p.to_new(&b));
        for method in [
            gmres(
                20,
                Orthogonalization::Mgs,
                PreconditioningSide::Right,
                false,
            ),
            gmres(
                20,
                Orthogonalization::Cgs2,
                PreconditioningSide::Left,
                false,
            ),
            KrylovMethod::BiCgStab,
        ] {
            for kind in [PreconditionerKind::Jacobi, PreconditionerKind::None] {
                let mut x = vec![0.0; a.n_rows()];
                let natural = solve_krylov(&a, &method, kind, &b, &mut x, &controls, "u").unwrap();
                let mut xp = vec![0.0; a.n_rows()];
                let rcm = solve_krylov(&ap, &method, kind, &bp, &mut xp, &controls, "u").unwrap();
                println!(
                    "{name} {method} {kind}: natural {} RCM {} iterations",
                    natural.iterations, rcm.iterations
                );
                assert!(
                    natural.iterations.abs_diff(rcm.iterations) <= 1,
                    "{name} {method} {kind}"
                );
                let err = max_rel_error(&p.to_old(&xp), &x);
                assert!(err < 1e-7, "{name} {method} {kind}: {err:e}");
            }
        }
    }
}

#[test]
fn a_variable_preconditioner_runs_flexible_gmres_and_is_refused_by_bicgstab() {
    use fvpoisson::solve::{InnerSolver, Preconditioner, SmootherKind, SmootherSettings};
    let (name, a, x_true, b) = systems().swap_remove(0);
    let mut block = SmootherSettings::new(SmootherKind::BlockJacobi);
    block.block.inner = InnerSolver::SymGaussSeidel;
    block.block.inner_tolerance = 1e-2;
    block.block.block_size = 64;
    let p = Preconditioner::Smoother(block);
    assert!(p.is_flexible());
    let mut x = vec![0.0; a.n_rows()];
    let method = gmres(20, Orthogonalization::Mgs, PreconditioningSide::Left, false);
    let perf = solve_krylov(&a, &method, p, &b, &mut x, &tight(), "u").unwrap();
    let err = max_rel_error(&x, &x_true);
    println!(
        "{name} GMRES + block Jacobi with an inner tolerance: {} iterations, error {err:e}",
        perf.iterations
    );
    assert!(perf.converged && err < 1e-7, "{err:e}");
    let err = solve_krylov(&a, &KrylovMethod::BiCgStab, p, &b, &mut x, &tight(), "u").unwrap_err();
    assert!(
        matches!(&err, SolveError::InvalidControls(m) if m.contains("fixed")),
        "{err}"
    );
}
