use super::*;
use crate::solve::PreconditionerKind;
use crate::sparse::testing::{dense, random_symmetric};
use nalgebra::DVector;

#[test]
fn galerkin_matrix_equals_dense_z_transpose_a_z() {
    let a = random_symmetric(50, 5, 3);
    let s = Subdomains::from_offsets(vec![0, 7, 20, 21, 38, 50]).unwrap();
    let d = CpuDeflation::new(&a, s.clone()).unwrap();
    let mut z = DMatrix::zeros(50, 5);
    for p in 0..5 {
        for i in s.rows(p) {
            z[(i, p)] = 1.0;
        }
    }
    let full = dense(&a);
    let e = z.transpose() * &full * &z;
    assert!((d.coarse_matrix() - &e).amax() < 1e-12 * e.amax());
    assert!((dense(d.deflated_columns()) - &full * &z).amax() < 1e-12 * full.amax());
    let identity = d.coarse_inverse() * &e;
    assert!((identity - DMatrix::identity(5, 5)).amax() < 1e-10);
    // P v is A-orthogonal... i.e. Zᵀ P v = 0.
    let mut v: Vec<f64> = (0..50).map(|i| (i as f64).cos()).collect();
    d.project(&mut v);
    let zt_pv = z.transpose() * DVector::from_column_slice(&v);
    assert!(zt_pv.amax() < 1e-12, "{zt_pv}");
}

#[test]
fn deflated_pcg_reaches_the_plain_solution() {
    let n = 300;
    let a = random_symmetric(n, 6, 9);
    let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let controls = SolverControls::absolute(1e-12, 1000);
    let stripes = Subdomains::stripes(n, 12).unwrap();
    for spec in ["none", "jacobi", "dic", "neu1", "neu2"] {
        let kind: Preconditioner = spec.parse().unwrap();
        let mut plain = vec![0.0; n];
        let (p_perf, _) = solve_pcg_deflated(&a, &kind, None, &b, &mut plain, &controls).unwrap();
        let mut deflated = vec![0.0; n];
        let (d_perf, spectrum) =
            solve_pcg_deflated(&a, &kind, Some(&stripes), &b, &mut deflated, &controls).unwrap();
        assert!(p_perf.converged && d_perf.converged, "{kind}");
        let diff = plain
            .iter()
            .zip(&deflated)
            .map(|(p, d)| (p - d).abs())
            .fold(0.0, f64::max);
        let scale = plain.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(diff < 1e-9 * scale, "{kind}: {diff}");
        // The loop's residual is the true one: b − A x.
        let mut ax = vec![0.0; n];
        a.spmv(&deflated, &mut ax);
        let true_sum: f64 = b.iter().zip(&ax).map(|(b, ax)| (b - ax).abs()).sum();
        let norm: f64 = b.iter().map(|v| v.abs()).sum();
        assert!(true_sum / norm < 2e-12, "{kind}: {}", true_sum / norm);
        assert!(spectrum.unwrap().condition() >= 1.0);
    }
}

#[test]
fn lanczos_estimate_of_the_deflated_operator_matches_its_dense_spectrum() {
    let n = 150;
    let a = random_symmetric(n, 6, 21);
    let full = dense(&a);
    let s = Subdomains::stripes(n, 10).unwrap();
    let d = CpuDeflation::new(&a, s.clone()).unwrap();
    let mut z = DMatrix::zeros(n, 10);
    for p in 0..10 {
        for i in s.rows(p) {
            z[(i, p)] = 1.0;
        }
    }
    let projector = DMatrix::identity(n, n) - &full * &z * d.coarse_inverse() * z.transpose();
    let b: Vec<f64> = (0..n).map(|i| (i as f64).cos()).collect();
    let controls = SolverControls::absolute(1e-15, 1000);
    for kind in [PreconditionerKind::None, PreconditionerKind::Jacobi] {
        // M⁻¹PA is similar to M^-1/2 PA M^-1/2; PA's k zero eigenvalues left out.
        let m = match kind {
            PreconditionerKind::Jacobi => full.diagonal().map(|v| 1.0 / v.sqrt()),
            _ => full.diagonal().map(|_| 1.0),
        };
        let m = DMatrix::from_diagonal(&m);
        let deflated = (&m * &projector * &full * &m).symmetric_eigenvalues();
        let mut eig: Vec<f64> = deflated.iter().copied().collect();
        eig.sort_by(f64::total_cmp);
        let (min, max) = (eig[10], eig[n - 1]);
        assert!(eig[9].abs() < 1e-10 * max, "{kind}: {:?}", &eig[..11]);
        let plain = (&m * &full * &m).symmetric_eigenvalues();
        assert!(
            max / min <= plain.max() / plain.min() * (1.0 + 1e-12),
            "{kind}"
        );
        let mut x = vec![0.0; n];
        let (_, spectrum) =
            solve_pcg_deflated(&a, &kind.into(), Some(&s), &b, &mut x, &controls).unwrap();
        let spectrum = spectrum.unwrap();
        // Lanczos converges to the extremes from inside.
        assert!(
            spectrum.min >= min * (1.0 - 1e-9) && spectrum.min / min - 1.0 < 1e-3,
            "{kind}: {} vs {min}",
            spectrum.min
        );
        assert!(
            spectrum.max <= max * (1.0 + 1e-9) && 1.0 - spectrum.max / max < 1e-3,
            "{kind}: {} vs {max}",
            spectrum.max
        );
    }
}

#[test]
fn bad_subdomains_and_singular_coarse_matrices_are_named() {
    assert!(Subdomains::from_offsets(vec![0, 3, 3, 5]).is_err());
    assert!(Subdomains::from_offsets(vec![1, 3]).is_err());
    assert!(Subdomains::stripes(4, 5).is_err());
    let a = random_symmetric(10, 3, 1);
    let err = CpuDeflation::new(&a, Subdomains::stripes(9, 3).unwrap())
        .err()
        .unwrap();
    assert!(err.to_string().contains("9 rows"), "{err}");
    // The 1-D Neumann Laplacian is singular: so is E.
    let neumann = Csr::new(
        3,
        vec![0, 2, 5, 7],
        vec![0, 1, 0, 1, 2, 1, 2],
        vec![1., -1., -1., 2., -1., -1., 1.],
    )
    .unwrap();
    let err = CpuDeflation::new(&neumann, Subdomains::stripes(3, 3).unwrap())
        .err()
        .unwrap();
    assert!(err.to_string().contains("not positive definite"), "{err}");
}
