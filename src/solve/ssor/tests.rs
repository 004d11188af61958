use nalgebra::DMatrix;

use super::*;
use crate::solve::colouring::Colouring;
use crate::solve::{Preconditioner, PreconditionerKind};
use crate::sparse::testing::{dense, random_symmetric};

/// M = ω/(2 − ω) (D/ω + L)(D/ω)⁻¹(D/ω + U), with L (U) the entries before
/// (after) each row in `order`, from the dense matrix.
fn dense_ssor(a: &Csr, omega: f64, order: &[u32]) -> DMatrix<f64> {
    let n = a.n_rows();
    let full = dense(a);
    let mut rank = vec![0; n];
    for (k, &i) in order.iter().enumerate() {
        rank[i as usize] = k;
    }
    let mut lower = DMatrix::zeros(n, n);
    let mut upper = DMatrix::zeros(n, n);
    let mut d = DMatrix::zeros(n, n);
    for i in 0..n {
        for j in 0..n {
            match rank[j].cmp(&rank[i]) {
                std::cmp::Ordering::Less => lower[(i, j)] = full[(i, j)],
                std::cmp::Ordering::Greater => upper[(i, j)] = full[(i, j)],
                std::cmp::Ordering::Equal => d[(i, j)] = full[(i, j)] / omega,
            }
        }
    }
    let d_inv = d.clone().try_inverse().unwrap();
    (&d + lower) * d_inv * (&d + upper) * (omega / (2.0 - omega))
}

fn residual_of_inverse(m: &DMatrix<f64>, op: &Ssor, n: usize) -> f64 {
    let r: Vec<f64> = (0..n).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
    let mut z = vec![0.0; n];
    op.apply(&r, &mut z);
    let mz = m * DMatrix::from_column_slice(n, 1, &z);
    let r = DMatrix::from_column_slice(n, 1, &r);
    (mz - &r).norm() / r.norm()
}

#[test]
fn inverts_the_dense_ssor_matrix_in_natural_and_colour_order() {
    for (seed, omega) in [(1, 0.6), (2, 1.0), (3, 1.4), (4, 1.9)] {
        let a = random_symmetric(40, 5, seed);
        let natural = Ssor::new(&a, omega).unwrap();
        let m = dense_ssor(&a, omega, natural.order());
        assert!(residual_of_inverse(&m, &natural, 40) < 1e-12, "seed {seed}");
        // The device's order: colour by colour.
        let colouring = Colouring::jones_plassmann(&a);
        let coloured = Ssor::in_colours(&a, omega, &colouring).unwrap();
        let m = dense_ssor(&a, omega, coloured.order());
        assert!(
            residual_of_inverse(&m, &coloured, 40) < 1e-12,
            "seed {seed}"
        );
        // Symmetric positive definite, as PCG needs.
        assert!((&m - m.transpose()).norm() < 1e-10 * m.norm());
        assert!(m.symmetric_eigenvalues().min() > 0.0, "seed {seed}");
    }
}

#[test]
fn omega_one_is_symmetric_gauss_seidel() {
    let a = random_symmetric(60, 6, 9);
    let ssor = SsorSettings { omega: 1.0 }.build_cpu(&a).unwrap();
    let sgs = Preconditioner::Kind(PreconditionerKind::SymGaussSeidel)
        .build(&a)
        .unwrap();
    let r: Vec<f64> = (0..60).map(|i| (i as f64).sin()).collect();
    let (mut z1, mut z2) = (vec![0.0; 60], vec![0.0; 60]);
    ssor.apply(&r, &mut z1);
    sgs.apply(&r, &mut z2);
    for (x, y) in z1.iter().zip(&z2) {
        assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{x} vs {y}");
    }
}

#[test]
fn parses_through_the_registry_and_refuses_bad_input() {
    let p: Preconditioner = "SSOR:omega=1.3".parse().unwrap();
    assert_eq!(
        p,
        Preconditioner::Registered(SsorSettings { omega: 1.3 }.into())
    );
    assert_eq!(p.to_string().parse::<Preconditioner>(), Ok(p));
    assert!(!p.is_flexible() && p.check().is_ok());
    crate::test_support::assert_parse_refused::<Preconditioner>(&[
        ("SSOR:omega=2", "omega must be in (0, 2)"),
        ("SSOR:omega=x", "omega must be a number, got 'x'"),
        (
            "SSOR:sweeps=2",
            "unknown SSOR key 'sweeps' (valid keys: omega)",
        ),
    ]);
    let mut a = random_symmetric(10, 3, 1);
    let diagonal = a.row(4).0.iter().position(|&c| c == 4).unwrap();
    let start = a.row_ptr()[4];
    a.values_mut()[start + diagonal] = 0.0;
    let err = Ssor::new(&a, 1.0).err().unwrap().to_string();
    assert!(err.contains("row 4 has 0"), "{err}");
}
