//! Polynomial preconditioners on the CPU on real FVM systems: the eigenvalue
//! bounds are safe, PCG converges to the DIC-PCG solution in fewer iterations
//! than Jacobi-PCG, and mixed precision reaches the same accuracy as f64.
//! Each test prints a compact table.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::solve::polynomial::{gershgorin_bound, lanczos_bound};
use fvpoisson::solve::{
    solve_pcg, EigenBound, PolynomialKind, PolynomialSettings, Precision, Preconditioner,
    PreconditionerKind, SolverControls, SolverPerformance,
};
use fvpoisson::sparse::testing::dense;
use fvpoisson::sparse::testing::{max_rel_diff, relative_residual};
use fvpoisson::sparse::Csr;
use nalgebra::{DMatrix, SymmetricEigen};

const MESHES: [&str; 4] = [
    "box:12x12x12:tet:perturb=0.2:renumber",
    "box:40x40x1:2d",
    "meshes/foam/polydual",
    "meshes/gmsh/prism_wedge.v22.msh",
];

fn system(spec: &str) -> (Csr, Vec<f64>) {
    poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// PCG from x = 0 to an absolute residual of 1e-12.
fn pcg_from_zero(
    a: &Csr,
    b: &[f64],
    preconditioner: impl Into<Preconditioner>,
) -> (SolverPerformance, Vec<f64>) {
    let mut x = vec![0.0; a.n_rows()];
    let controls = SolverControls::absolute(1e-12, 20_000);
    let perf = solve_pcg(a, preconditioner, b, &mut x, &controls, "p").unwrap();
    (perf, x)
}

/// λ_max of D^-½ A D^-½, densely.
fn exact_lambda_max(a: &Csr) -> f64 {
    let m = dense(a);
    let s = m.diagonal().map(|d| 1.0 / d.sqrt());
    let n = m.nrows();
    SymmetricEigen::new(DMatrix::from_fn(n, n, |i, j| s[i] * m[(i, j)] * s[j]))
        .eigenvalues
        .max()
}

#[test]
fn eigenvalue_bounds_are_safe_on_fvm_matrices() {
    println!("mesh | n | exact λmax | Gershgorin | Lanczos 5 | Lanczos 10 | Lanczos 20");
    for spec in [
        "box:6x6x6:tet:perturb=0.3:renumber",
        "box:8x8x8:perturb=0.3",
        "box:24x24x1:2d:perturb=0.25",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ] {
        let (a, _) = system(spec);
        if a.n_rows() > 2500 {
            println!(
                "{spec}: {} rows, too many for the dense reference",
                a.n_rows()
            );
            continue;
        }
        let exact = exact_lambda_max(&a);
        let g = gershgorin_bound(&a).unwrap();
        let l: Vec<f64> = [5, 10, 20]
            .iter()
            .map(|&k| lanczos_bound(&a, k).unwrap())
            .collect();
        println!(
            "{spec} | {} | {exact:.6} | {g:.6} | {:.6} | {:.6} | {:.6}",
            a.n_rows(),
            l[0],
            l[1],
            l[2]
        );
        assert!(
            g >= exact * (1.0 - 1e-14),
            "{spec}: Gershgorin {g} < {exact}"
        );
        for (k, l) in [5, 10, 20].iter().zip(&l) {
            assert!(*l >= exact, "{spec}: {k}-step Lanczos {l} < {exact}");
        }
        // Twenty steps on these spectra land within 25 % of λ_max.
        assert!(l[2] < 1.25 * exact, "{spec}: {} vs {exact}", l[2]);
    }
}

#[test]
fn polynomials_reduce_pcg_iterations_and_reach_the_dic_solution() {
    println!("mesh | preconditioner | iterations | Jacobi | difference to DIC-PCG");
    for spec in MESHES {
        let (a, b) = system(spec);
        let (_, reference) = pcg_from_zero(&a, &b, PreconditionerKind::Dic);
        let (jacobi, _) = pcg_from_zero(&a, &b, PreconditionerKind::Jacobi);
        let mut previous_ls = usize::MAX;
        for degree in [2, 4, 8] {
            for kind in PolynomialKind::ALL {
                for bound in [EigenBound::Gershgorin, EigenBound::Lanczos { steps: 10 }] {
                    let mut s = PolynomialSettings::new(kind, degree);
                    s.bound = bound;
                    let p = Preconditioner::Polynomial(s);
                    let (perf, x) = pcg_from_zero(&a, &b, p);
                    let d = max_rel_diff(&x, &reference);
                    println!(
                        "{spec} | {p} | {} | {} | {d:.1e}",
                        perf.iterations, jacobi.iterations
                    );
                    assert!(perf.converged, "{spec} {p}");
                    assert!(d < 1e-8, "{spec} {p}: {d}");
                    assert!(perf.iterations < jacobi.iterations, "{spec} {p}");
                    if kind == PolynomialKind::LeastSquares && bound == EigenBound::Gershgorin {
                        // L-S iterations fall with the degree (Zhang and Zhang 2013, Table 3).
                        assert!(perf.iterations < previous_ls, "{spec} {p}");
                        previous_ls = perf.iterations;
                    }
                }
            }
        }
    }
}

#[test]
fn mixed_precision_reaches_the_accuracy_of_double() {
    println!(
        "mesh | preconditioner | f64 iterations | mixed iterations | f64 residual | mixed residual"
    );
    for spec in MESHES {
        let (a, b) = system(spec);
        for kind in PolynomialKind::ALL {
            for degree in [2, 8] {
                let s = PolynomialSettings::new(kind, degree);
                let mixed = PolynomialSettings {
                    precision: Precision::Mixed,
                    ..s
                };
                let (pd, xd) = pcg_from_zero(&a, &b, Preconditioner::Polynomial(s));
                let (pm, xm) = pcg_from_zero(&a, &b, Preconditioner::Polynomial(mixed));
                let (rd, rm) = (
                    relative_residual(&a, &b, &xd),
                    relative_residual(&a, &b, &xm),
                );
                println!(
                    "{spec} | {s} | {} | {} | {rd:.2e} | {rm:.2e}",
                    pd.iterations, pm.iterations
                );
                assert!(pm.converged, "{spec} {mixed}");
                // Same stopping test, so the same accuracy; f32 rounding costs a few iterations.
                assert!(rm < 10.0 * rd.max(1e-14), "{spec} {mixed}: {rm} vs {rd}");
                assert!(
                    pm.iterations <= pd.iterations + pd.iterations / 5 + 2,
                    "{spec} {mixed}: {} vs {}",
                    pm.iterations,
                    pd.iterations
                );
            }
        }
    }
}

#[test]
fn mixed_precision_apply_stays_close_to_double() {
    // The Chebyshev-basis recurrence in f32 (Zhang and Zhang 2013, §2.5: ~1e-6 in scalar tests).
    use fvpoisson::solve::polynomial::{lanczos_start, PolynomialPreconditioner};
    use fvpoisson::solve::LinearOperator;
    println!("mesh | kind | degree | max |z_f32 − z_f64| / max |z_f64|");
    for spec in MESHES {
        let (a, _) = system(spec);
        let r = lanczos_start(a.n_rows());
        for kind in PolynomialKind::ALL {
            for degree in [1, 4, 8, 16] {
                let s = PolynomialSettings::new(kind, degree);
                let mixed = PolynomialSettings {
                    precision: Precision::Mixed,
                    ..s
                };
                let (mut zd, mut zm) = (vec![0.0; a.n_rows()], vec![0.0; a.n_rows()]);
                PolynomialPreconditioner::new(&a, &s)
                    .unwrap()
                    .apply(&r, &mut zd);
                PolynomialPreconditioner::new(&a, &mixed)
                    .unwrap()
                    .apply(&r, &mut zm);
                let d = max_rel_diff(&zm, &zd);
                println!("{spec} | {} | {degree} | {d:.1e}", kind.name());
                assert!(d > 0.0 && d < 1e-5, "{spec} {kind:?} {degree}: {d:e}");
            }
        }
    }
}
