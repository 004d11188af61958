use super::*;
use crate::solve::LinearOperator;
use crate::sparse::testing::{dense, random_symmetric};
use nalgebra::DVector;

/// D⁻¹A and D⁻¹ densely.
fn scaled(a: &Csr) -> (DMatrix<f64>, DMatrix<f64>) {
    let m = dense(a);
    let dinv = DMatrix::from_diagonal(&m.diagonal().map(|d| 1.0 / d));
    (&dinv * &m, dinv)
}

fn max_rel_diff(x: &[f64], y: &DVector<f64>) -> f64 {
    let scale = y.amax();
    x.iter()
        .zip(y.iter())
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0, f64::max)
}

/// Saad's table of the least-squares polynomials on [0, 4] (Saad ch. 12.3).
const LS_TABLE: [&[f64]; 4] = [
    &[14., -7., 1.],
    &[55., -77., 44., -11., 1.],
    &[140., -378., 450., -275., 90., -15., 1.],
    &[285., -1254., 2508., -2717., 1729., -665., 152., -19., 1.],
];

#[test]
fn each_polynomial_equals_its_dense_definition() {
    let a = random_symmetric(60, 5, 3);
    let (x, dinv) = scaled(&a);
    let r: Vec<f64> = (0..60).map(|i| ((i * 29) % 13) as f64 - 6.0).collect();
    let w = &dinv * DVector::from_column_slice(&r);
    let id = DMatrix::<f64>::identity(60, 60);
    for m in [2usize, 4, 6, 8] {
        for kind in PolynomialKind::ALL {
            let s = PolynomialSettings::new(kind, m);
            let p = PolynomialPreconditioner::new(&a, &s).unwrap();
            let b = p.recurrence().hi;
            let expected = match kind {
                // ω Σ_{k≤m} (I − ωX)^k w.
                PolynomialKind::Neumann => {
                    let g = &id - &x / b;
                    let mut term = &w / b;
                    let mut sum = term.clone();
                    for _ in 0..m {
                        term = &g * term;
                        sum += &term;
                    }
                    sum
                }
                // Saad Alg. 12.1 (Zhang & Zhang 2013, §2.4): m+1 Chebyshev steps on X z = w from 0.
                PolynomialKind::Chebyshev => {
                    let (lo, hi) = s.interval(b);
                    let (theta, delta) = ((hi + lo) / 2.0, (hi - lo) / 2.0);
                    let sigma = theta / delta;
                    let mut rho_prev = 1.0 / sigma;
                    let mut d = &w / theta;
                    let mut z = d.clone();
                    let mut res = &w - &x * &d;
                    for k in 1..=m {
                        let rho = 1.0 / (2.0 * sigma - rho_prev);
                        d = &d * (rho * rho_prev) + &res * (2.0 * rho / delta);
                        z += &d;
                        if k < m {
                            res -= &x * &d;
                        }
                        rho_prev = rho;
                    }
                    z
                }
                // (4/b)/(2m+3) Σ c_i (4X/b)^i w, the monomial table.
                PolynomialKind::LeastSquares => {
                    let c = LS_TABLE[m / 2 - 1];
                    let tau = &x * (4.0 / b);
                    let mut acc = &w * c[m];
                    for i in (0..m).rev() {
                        acc = &tau * acc + &w * c[i];
                    }
                    acc * (4.0 / b / (2 * m + 3) as f64)
                }
            };
            let mut z = vec![0.0; 60];
            p.apply(&r, &mut z);
            let diff = max_rel_diff(&z, &expected);
            assert!(diff < 1e-11, "{kind:?} degree {m}: {diff:e}");
        }
    }
}

#[test]
fn least_squares_closed_form_equals_interpolation() {
    for m in 1..=12 {
        let d = least_squares_coefficients(m, 2.0);
        let table_free =
            chebyshev_coefficients(m, 0.0, 2.0, |t| Recurrence::new(0.0, 2.0, &d).eval(t));
        for (a, b) in d.iter().zip(&table_free) {
            assert!((a - b).abs() < 1e-12 * d[0].abs(), "m {m}: {a} vs {b}");
        }
        // t s(t) ≤ 1.25 on [0, b] (1.25 at m = 1, ~1.22 above) and s(0) = (4/b)(m+1)(m+2)/6 (§2.5).
        let r = Recurrence::new(0.0, 2.0, &d);
        let s0 = 2.0 * ((m + 1) * (m + 2)) as f64 / 6.0;
        assert!((r.eval(0.0) - s0).abs() < 1e-10 * s0, "m {m}");
        let peak = (0..=1000)
            .map(|i| 2.0 * i as f64 / 1000.0)
            .map(|t| t * r.eval(t))
            .fold(0.0, f64::max);
        assert!(peak > 1.0 && peak <= 1.25 + 1e-12, "m {m}: peak {peak}");
    }
}

#[test]
fn every_kind_is_positive_on_its_interval() {
    // M⁻¹ SPD needs s > 0 on (0, b]; the PCG tests rely on it.
    for kind in PolynomialKind::ALL {
        for m in 1..=16 {
            let r = PolynomialSettings::new(kind, m).recurrence(2.0);
            for i in 1..=400 {
                let t = 2.0 * i as f64 / 400.0;
                assert!(r.eval(t) > 0.0, "{kind:?} m {m} t {t}: {}", r.eval(t));
            }
        }
    }
}

#[test]
fn lanczos_and_gershgorin_bounds_are_safe() {
    for seed in 0..6 {
        let a = random_symmetric(200, 6, seed);
        // λ_max(D⁻¹A) = λ_max(D^-½ A D^-½), symmetric.
        let m = dense(&a);
        let s = m.diagonal().map(|d| 1.0 / d.sqrt());
        let sym = DMatrix::from_fn(200, 200, |i, j| s[i] * m[(i, j)] * s[j]);
        let exact = SymmetricEigen::new(sym).eigenvalues.max();
        let g = gershgorin_bound(&a).unwrap();
        for steps in [3, 5, 10, 20] {
            let l = lanczos_bound(&a, steps).unwrap();
            assert!(l >= exact, "seed {seed}, {steps} steps: {l} < {exact}");
        }
        assert!(g >= exact);
    }
}

#[test]
fn mixed_precision_is_the_f32_polynomial() {
    let a = random_symmetric(300, 5, 9);
    let r: Vec<f64> = lanczos_start(300);
    for kind in PolynomialKind::ALL {
        let s = PolynomialSettings::new(kind, 6);
        let mut mixed = s;
        mixed.precision = Precision::Mixed;
        let (pd, pm) = (
            PolynomialPreconditioner::new(&a, &s).unwrap(),
            PolynomialPreconditioner::new(&a, &mixed).unwrap(),
        );
        let (mut zd, mut zm) = (vec![0.0; 300], vec![0.0; 300]);
        pd.apply(&r, &mut zd);
        pm.apply(&r, &mut zm);
        let diff = max_rel_diff(&zm, &DVector::from_column_slice(&zd));
        assert!(diff > 0.0 && diff < 1e-5, "{kind:?}: {diff:e}");
    }
}

#[test]
fn settings_are_checked() {
    let mut s = PolynomialSettings::new(PolynomialKind::Chebyshev, 0);
    assert!(s.validate().unwrap_err().contains("degree"));
    s.degree = 4;
    s.eigen_ratio = 1.0;
    assert!(s.validate().unwrap_err().contains("eigenRatio"));
    s.eigen_ratio = 20.0;
    s.bound = EigenBound::Lanczos { steps: 0 };
    assert!(s.validate().unwrap_err().contains("lanczosSteps"));
    assert_eq!("lanczos".parse(), Ok(EigenBound::Lanczos { steps: 10 }));
    assert!("power"
        .parse::<EigenBound>()
        .unwrap_err()
        .contains("Gershgorin"));
    assert_eq!("Mixed".parse(), Ok(Precision::Mixed));
    assert_eq!(
        PolynomialSettings::named("leastsquares").map(|s| s.kind),
        Some(PolynomialKind::LeastSquares)
    );
    let bad = Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, -1.0]).unwrap();
    assert!(matches!(
        PolynomialPreconditioner::new(&bad, &PolynomialSettings::new(PolynomialKind::Neumann, 2)),
        Err(SolveError::NonPositiveDiagonal { row: 1, .. })
    ));
}
