//! PCG with every preconditioner against dense nalgebra solves, OpenFOAM
//! convergence semantics, determinism across thread counts, and failures.

use fvpoisson::solve::{solve_pcg, Preconditioner, PreconditionerKind, SolveError, SolverControls};
use fvpoisson::sparse::testing::bits;
use fvpoisson::sparse::Csr;
use nalgebra::{DMatrix, DVector};

/// Finite-difference Laplacian (2·dim on the diagonal, −1 to each neighbour,
/// Dirichlet walls) on an `n`^dim grid, rows in lexicographic order.
fn poisson(dim: u32, n: usize) -> Csr {
    let size = n.pow(dim);
    let mut t = Vec::new();
    for r in 0..size {
        t.push((r as u32, r as u32, 2.0 * dim as f64));
        let mut stride = 1;
        for _ in 0..dim {
            let i = (r / stride) % n;
            if i > 0 {
                t.push((r as u32, (r - stride) as u32, -1.0));
            }
            if i + 1 < n {
                t.push((r as u32, (r + stride) as u32, -1.0));
            }
            stride *= n;
        }
    }
    Csr::from_triplets(size, size, t).unwrap()
}

/// xorshift64: reproducible test data without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// Random sparse symmetric matrix made SPD by strict diagonal dominance.
fn random_spd(n: usize, per_row: usize, seed: u64) -> Csr {
    let mut rng = Rng(seed);
    let mut t = Vec::new();
    let mut diag = vec![0.0; n];
    for r in 0..n {
        for _ in 0..per_row {
            let c = (rng.next() % n as u64) as usize;
            if c != r {
                let v = rng.unit();
                t.push((r as u32, c as u32, v));
                t.push((c as u32, r as u32, v));
                diag[r] += v.abs();
                diag[c] += v.abs();
            }
        }
    }
    for (r, d) in diag.iter().enumerate() {
        t.push((r as u32, r as u32, d + 0.5 + rng.unit().abs()));
    }
    Csr::from_triplets(n, n, t).unwrap()
}

fn random_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.unit()).collect()
}

fn dense_solve(a: &Csr, b: &[f64]) -> Vec<f64> {
    let mut m = DMatrix::zeros(a.n_rows(), a.n_cols());
    for r in 0..a.n_rows() {
        let (cols, vals) = a.row(r);
        for (&c, &v) in cols.iter().zip(vals) {
            m[(r, c as usize)] = v;
        }
    }
    let x = m
        .cholesky()
        .expect("test matrix is SPD")
        .solve(&DVector::from_column_slice(b));
    x.as_slice().to_vec()
}

fn tight() -> SolverControls {
    SolverControls {
        tolerance: 1e-14,
        ..Default::default()
    }
}

fn assert_close_to_dense(a: &Csr, b: &[f64], kind: Preconditioner, label: &str) -> usize {
    let mut x = vec![0.0; a.n_rows()];
    let perf = solve_pcg(a, kind, b, &mut x, &tight(), "x").unwrap();
    assert!(perf.converged, "{label} {kind}: {perf:?}");
    let exact = dense_solve(a, b);
    let err: f64 = x
        .iter()
        .zip(&exact)
        .map(|(x, e)| (x - e).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = exact.iter().map(|e| e * e).sum::<f64>().sqrt();
    assert!(
        err <= 1e-10 * norm,
        "{label} {kind}: relative error {}",
        err / norm
    );
    // The reported final residual is OpenFOAM's normalised residual of the returned x.
    assert!(perf.final_residual < 1e-14 && perf.history.len() == perf.iterations + 1);
    perf.iterations
}

#[test]
fn every_preconditioner_solves_poisson_and_random_spd_like_a_dense_solver() {
    let systems = [
        ("1-D Poisson", poisson(1, 40)),
        ("2-D Poisson", poisson(2, 12)),
        ("3-D Poisson", poisson(3, 7)),
        ("random SPD", random_spd(300, 4, 42)),
        ("random SPD 2", random_spd(97, 7, 7)),
    ];
    for (label, a) in &systems {
        let b = random_vector(a.n_rows(), 3);
        // Every kind, and the truncated Neumann series (a registered algorithm).
        let registered = ["neu1", "neu2", "neu:3"].map(|s| s.parse().unwrap());
        for kind in PreconditionerKind::ALL
            .map(Preconditioner::Kind)
            .into_iter()
            .chain(registered)
        {
            assert_close_to_dense(a, &b, kind, label);
        }
    }
    // On a tridiagonal matrix DIC and IC(0) are the exact Cholesky factorisation.
    let a = &systems[0].1;
    let b = random_vector(a.n_rows(), 5);
    for kind in [PreconditionerKind::Dic, PreconditionerKind::Ic0] {
        assert_eq!(
            assert_close_to_dense(a, &b, kind.into(), "1-D"),
            1,
            "{kind}"
        );
    }
}

#[test]
fn dic_and_sgs_need_fewer_iterations_than_jacobi_on_3d_poisson() {
    let a = poisson(3, 12);
    let b = random_vector(a.n_rows(), 11);
    let iterations = |kind| {
        let mut x = vec![0.0; a.n_rows()];
        let controls = SolverControls {
            tolerance: 1e-10,
            ..Default::default()
        };
        let perf = solve_pcg(&a, kind, &b, &mut x, &controls, "p").unwrap();
        assert!(perf.converged);
        perf.iterations
    };
    let jacobi = iterations(PreconditionerKind::Jacobi);
    let none = iterations(PreconditionerKind::None);
    let dic = iterations(PreconditionerKind::Dic);
    let ic0 = iterations(PreconditionerKind::Ic0);
    let sgs = iterations(PreconditionerKind::SymGaussSeidel);
    // Constant diagonal: Jacobi is plain CG scaled, same iteration count.
    assert_eq!(jacobi, none);
    assert!(
        dic < jacobi && sgs < jacobi && ic0 < jacobi,
        "{dic} {sgs} {ic0} vs {jacobi}"
    );
}

#[test]
fn results_are_bitwise_identical_for_one_and_two_threads() {
    // 8000 rows: several reduction chunks.
    let a = poisson(3, 20);
    let b = random_vector(a.n_rows(), 17);
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut x = vec![0.0; a.n_rows()];
            let perf = solve_pcg(
                &a,
                PreconditionerKind::Jacobi,
                &b,
                &mut x,
                &SolverControls::default(),
                "p",
            )
            .unwrap();
            (bits(&x), bits(&perf.history))
        })
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(1));
}

#[test]
fn openfoam_stopping_rules() {
    let a = poisson(2, 10);
    let b = random_vector(a.n_rows(), 23);
    let solve = |controls: SolverControls| {
        let mut x = vec![0.0; a.n_rows()];
        solve_pcg(&a, PreconditionerKind::Dic, &b, &mut x, &controls, "p").unwrap()
    };
    // relTol: stops at the first residual below relTol × initial.
    let perf = solve(SolverControls {
        tolerance: 0.0,
        rel_tol: 0.05,
        ..Default::default()
    });
    let limit = 0.05 * perf.initial_residual;
    assert!(perf.converged && perf.final_residual < limit);
    assert!(perf.history[..perf.iterations].iter().all(|&r| r >= limit));
    // Converged before starting: no iteration unless minIter asks for some.
    let loose = SolverControls {
        tolerance: 1e3,
        ..Default::default()
    };
    assert_eq!(solve(loose).iterations, 0);
    assert_eq!(
        solve(SolverControls {
            min_iter: 3,
            ..loose
        })
        .iterations,
        3
    );
    // maxIter reached: not an error, converged = false.
    let capped = solve(SolverControls {
        tolerance: 1e-12,
        max_iter: 2,
        ..Default::default()
    });
    assert_eq!((capped.iterations, capped.converged), (2, false));
    // Exact initial guess (b = 0, x = 0): zero residual, done at once even with minIter.
    let zeros = vec![0.0; a.n_rows()];
    let mut x = zeros.clone();
    let controls = SolverControls {
        min_iter: 2,
        ..Default::default()
    };
    let perf = solve_pcg(&a, PreconditionerKind::Dic, &zeros, &mut x, &controls, "p").unwrap();
    assert_eq!((perf.initial_residual, perf.iterations), (0.0, 0));
    assert!(perf.converged && x == zeros);
}

#[test]
fn failures_are_reported_clearly() {
    let controls = SolverControls::default();
    // Symmetric with positive diagonal but indefinite: eigenvalues 3 and -1.
    let a = Csr::from_triplets(
        2,
        2,
        vec![(0, 0, 1.0), (0, 1, 2.0), (1, 0, 2.0), (1, 1, 1.0)],
    )
    .unwrap();
    let mut x = vec![0.0; 2];
    let err = solve_pcg(
        &a,
        PreconditionerKind::Jacobi,
        &[1.0, -1.0],
        &mut x,
        &controls,
        "p",
    )
    .unwrap_err();
    assert!(matches!(err, SolveError::Breakdown { iteration: 1, p_ap } if p_ap == -2.0));
    assert_eq!(
        err.to_string(),
        "matrix is not positive definite (p.Ap = -2 at iteration 1)"
    );
    let err = solve_pcg(
        &a,
        PreconditionerKind::Dic,
        &[1.0, -1.0],
        &mut x,
        &controls,
        "p",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("DIC factorization broke down in row 1"),
        "{err}"
    );

    let a = poisson(1, 5);
    let mut x = vec![0.0; 5];
    let b = [1.0, 1.0, f64::NAN, 1.0, 1.0];
    let err = solve_pcg(&a, PreconditionerKind::Dic, &b, &mut x, &controls, "p").unwrap_err();
    assert_eq!(
        err.to_string(),
        "right-hand side b has a non-finite value (NaN) in row 2"
    );
    let err = solve_pcg(
        &a,
        PreconditionerKind::Dic,
        &[1.0; 4],
        &mut x,
        &controls,
        "p",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("has 4 entries but the matrix has 5 rows"),
        "{err}"
    );

    let mut bad = a.clone();
    bad.values_mut()[4] = f64::INFINITY; // row 1 (rows hold 2, 3, 3, ... entries)
    let err = solve_pcg(
        &bad,
        PreconditionerKind::None,
        &[1.0; 5],
        &mut x,
        &controls,
        "p",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "matrix has a non-finite value (inf) in row 1"
    );

    let mut unsymmetric = a.clone();
    unsymmetric.values_mut()[1] = -0.5;
    let err = solve_pcg(
        &unsymmetric,
        PreconditionerKind::None,
        &[1.0; 5],
        &mut x,
        &controls,
        "p",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("matrix is not symmetric: A(0,1) = -0.5"),
        "{err}"
    );

    let mut negative = a.clone();
    negative.values_mut()[0] = -2.0;
    let err = solve_pcg(
        &negative,
        PreconditionerKind::Jacobi,
        &[1.0; 5],
        &mut x,
        &controls,
        "p",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("diagonal entry in row 0 is -2"),
        "{err}"
    );
}

#[test]
fn an_empty_system_is_refused() {
    let a = Csr::new(0, vec![0], vec![], vec![]).unwrap();
    let err = solve_pcg(&a, PreconditionerKind::Jacobi, &[], &mut [], &tight(), "p").unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}
