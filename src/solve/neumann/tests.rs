use nalgebra::{DMatrix, DVector};

use super::*;
use crate::solve::algorithms::Registered;
use crate::solve::pcg::pcg;
use crate::solve::{CpuBackend, Preconditioner, SolverControls};
use crate::sparse::testing::{dense, random_symmetric};

/// Gupta et al.'s (2011) form on the scaled matrix: D^-1/2 K̃ᵀ K̃ D^-1/2 with
/// K̃ = Σ_{j ≤ order} (−L̃)^j, from the dense matrix.
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

/// z = M⁻¹ r by the dense matrix: the reference PCG is preconditioned with.
struct DenseInverse(DMatrix<f64>);

impl LinearOperator for DenseInverse {
    fn n(&self) -> usize {
        self.0.nrows()
    }

    fn apply(&self, r: &[f64], z: &mut [f64]) {
        z.copy_from_slice((&self.0 * DVector::from_column_slice(r)).as_slice());
    }
}

#[test]
fn every_order_equals_the_seed_form_on_the_scaled_matrix() {
    let a = random_symmetric(40, 5, 11);
    let r: Vec<f64> = (0..40).map(|i| (i as f64 * 0.7).sin() + 0.1).collect();
    for order in 1..=4 {
        let m_inv = seed_form(&a, order);
        let neu = TruncatedNeumann::new(&a, &NeumannSettings { order }).unwrap();
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
fn pcg_takes_the_steps_of_the_dense_reference() {
    let n = 200;
    let a = random_symmetric(n, 6, 3);
    let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).cos()).collect();
    let controls = SolverControls::absolute(1e-10, 1000);
    for settings in [NeumannSettings::NEU1, NeumannSettings::NEU2] {
        let mut x = vec![0.0; n];
        let registered = Preconditioner::Registered(settings.into());
        let perf = crate::solve::solve_pcg(&a, registered, &b, &mut x, &controls, "x").unwrap();
        let reference = DenseInverse(seed_form(&a, settings.order));
        let backend = CpuBackend::new(&a, &reference);
        let mut x_ref = vec![0.0; n];
        let expected = pcg(&backend, &b, &mut x_ref, &controls, "x").unwrap();
        assert!(perf.converged && expected.converged, "{settings}");
        assert_eq!(perf.iterations, expected.iterations, "{settings}");
        let diff = x.iter().zip(&x_ref).map(|(u, v)| (u - v).abs());
        let scale = x_ref.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(diff.fold(0.0, f64::max) < 1e-8 * scale, "{settings}");
    }
}

#[test]
fn every_name_and_grammar_gives_the_same_settings() {
    let neu = |order| Ok(Preconditioner::Registered(NeumannSettings { order }.into()));
    for (spec, order) in [
        ("neu1", 1),
        ("neu2", 2),
        ("NEU2", 2),
        ("neu", 1),
        ("neu3", 3),
        ("neu:2", 2),
        ("neu:order=2", 2),
        ("truncatedNeumann", 1),
        ("truncatedNeumann:order=2", 2),
        ("truncated-neumann:Order=4", 4),
    ] {
        assert_eq!(spec.parse::<Preconditioner>(), neu(order), "{spec}");
    }
    for order in 1..=MAX_ORDER {
        let p = Preconditioner::Registered(NeumannSettings { order }.into());
        assert_eq!(p.to_string(), format!("neu{order}"));
        assert_eq!(p.to_string().parse::<Preconditioner>(), Ok(p));
        assert!(!p.is_flexible() && p.check().is_ok());
    }
    assert_eq!(
        Registered::from(NeumannSettings::NEU2).name(),
        "truncatedNeumann"
    );
}

#[test]
fn bad_orders_keys_and_diagonals_are_refused() {
    crate::test_support::assert_parse_refused::<Preconditioner>(&[
        ("neu0", "order must be 1 (Neu1) to 8, got 0"),
        ("neu:order=9", "order must be 1 (Neu1) to 8, got 9"),
        ("neu:order=x", "order must be a whole number, got 'x'"),
        ("neu:order=-1", "order must be a whole number, got '-1'"),
        ("neu2:order=3", "neu2 names its order"),
        (
            "neu:omega=1",
            "unknown truncatedNeumann key 'omega' (valid keys: order)",
        ),
        // `Neumann` is the polynomial preconditioner, which has no order.
        ("Neumann:order=2", "unknown Neumann key 'order'"),
    ]);
    let a = random_symmetric(5, 2, 1);
    let err = TruncatedNeumann::new(&a, &NeumannSettings { order: 0 })
        .err()
        .unwrap();
    assert!(err.to_string().contains("order must be 1"), "{err}");
    let bad = Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, -2.0]).unwrap();
    let err = TruncatedNeumann::new(&bad, &NeumannSettings::NEU1)
        .err()
        .unwrap();
    assert!(
        matches!(err, SolveError::NonPositiveDiagonal { row: 1, .. }),
        "{err}"
    );
}
