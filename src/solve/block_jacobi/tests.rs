use super::*;
use crate::sparse::testing::random_symmetric;
use nalgebra::{DMatrix, DVector};

fn dense_block(a: &Csr, rows: std::ops::Range<usize>) -> DMatrix<f64> {
    let first = rows.start;
    let m = rows.len();
    let mut d = DMatrix::zeros(m, m);
    for r in rows.clone() {
        let (cols, vals) = a.row(r);
        for (&c, &v) in cols.iter().zip(vals) {
            if rows.contains(&(c as usize)) {
                d[(r - first, c as usize - first)] = v;
            }
        }
    }
    d
}

fn settings(inner: InnerSolver, tol: f64, steps: usize) -> BlockJacobiSettings {
    BlockJacobiSettings {
        block_size: 64,
        inner,
        inner_tolerance: tol,
        inner_max_iter: steps,
        asynchronous: false,
    }
}

/// x + A_ll⁻¹ (b − A x)_l on every block, with dense block solves.
fn exact_block_jacobi(a: &Csr, b: &[f64], x: &[f64], h: usize) -> Vec<f64> {
    let n = a.n_rows();
    let mut ax = vec![0.0; n];
    a.spmv(x, &mut ax);
    let mut out = x.to_vec();
    for first in (0..n).step_by(h) {
        let rows = first..(first + h).min(n);
        let res = DVector::from_iterator(rows.len(), rows.clone().map(|r| b[r] - ax[r]));
        let y = dense_block(a, rows.clone()).lu().solve(&res).unwrap();
        for r in rows {
            out[r] += y[r - first];
        }
    }
    out
}

#[test]
fn converged_inner_solves_give_exact_block_jacobi() {
    let n = 300; // the last block is partial
    let a = random_symmetric(n, 6, 3);
    let b: Vec<f64> = (0..n).map(|i| (i % 9) as f64 - 4.0).collect();
    let x: Vec<f64> = (0..n).map(|i| (i % 5) as f64 * 0.3).collect();
    let expected = exact_block_jacobi(&a, &b, &x, 64);
    for inner in InnerSolver::ALL
        .into_iter()
        .filter(|i| !i.is_factorisation())
    {
        let bj = BlockJacobi::new(&a, settings(inner, 1e-13, 500), 1.0).unwrap();
        let mut y = x.clone();
        bj.smooth(&b, &mut y, 1);
        for i in 0..n {
            assert!(
                (y[i] - expected[i]).abs() < 1e-10 * (1.0 + expected[i].abs()),
                "{inner:?} row {i}: {} vs {}",
                y[i],
                expected[i]
            );
        }
    }
}

#[test]
fn fixed_inner_steps_follow_their_formulas() {
    // One block of 64 rows = two warps: check the step formulas densely.
    let a = random_symmetric(64, 6, 8);
    let m = dense_block(&a, 0..64);
    let d = DMatrix::from_diagonal(&m.diagonal());
    let b: Vec<f64> = (0..64).map(|i| (i % 7) as f64 - 3.0).collect();
    let bv = DVector::from_column_slice(&b);
    let run_damped = |inner, steps, omega| {
        let mut y = vec![0.0; 64];
        BlockJacobi::new(&a, settings(inner, 0.0, steps), omega)
            .unwrap()
            .smooth(&b, &mut y, 1);
        DVector::from_column_slice(&y)
    };
    let run = |inner, steps| run_damped(inner, steps, 1.0);
    // Jacobi damped by 0.7, 3 steps from 0.
    let d_inv = d.clone().try_inverse().unwrap();
    let mut y = DVector::zeros(64);
    for _ in 0..3 {
        y = &y + &d_inv * (&bv - &m * &y) * 0.7;
    }
    assert!((run_damped(InnerSolver::Jacobi, 3, 0.7) - &y).amax() < 1e-12);
    // Warp-serialised GS: M = D + (entries of earlier warps), Jacobi in a warp.
    let lower_warps =
        DMatrix::from_fn(64, 64, |i, j| if j / 32 < i / 32 { m[(i, j)] } else { 0.0 });
    let upper_warps = lower_warps.transpose();
    let fwd = (&d + &lower_warps).lu().solve(&bv).unwrap();
    assert!((run(InnerSolver::GaussSeidel, 1) - &fwd).amax() < 1e-12);
    let sym = (&d + &upper_warps)
        .lu()
        .solve(&(&bv - &(&m - &d - &upper_warps) * &fwd))
        .unwrap();
    assert!((run(InnerSolver::SymGaussSeidel, 1) - &sym).amax() < 1e-12);
}

/// Rows `rows` of `a` restricted to those columns, renumbered from 0.
fn sub_matrix(a: &Csr, rows: std::ops::Range<usize>) -> Csr {
    let first = rows.start;
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (vec![], vec![]);
    for r in rows.clone() {
        let (c, v) = a.row(r);
        for (&c, &v) in c.iter().zip(v) {
            if rows.contains(&(c as usize)) {
                cols.push(c - first as u32);
                vals.push(v);
            }
        }
        row_ptr.push(cols.len());
    }
    Csr::new(rows.len(), row_ptr, cols, vals).unwrap()
}

#[test]
fn block_ic_is_the_incomplete_cholesky_of_each_block() {
    use crate::solve::precond::{Dic, Ic0};
    let n = 300; // the last block is partial
    let a = random_symmetric(n, 6, 11);
    let r: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 2.5).collect();
    for inner in [InnerSolver::Dic, InnerSolver::Ic0] {
        let bj = BlockJacobi::new(&a, settings(inner, 1e-8, 100), 1.0).unwrap();
        let mut z = vec![0.0; n];
        bj.smooth(&r, &mut z, 1);
        let factor = bj.block_ic().unwrap().factor();
        for first in (0..n).step_by(64) {
            let rows = first..(first + 64).min(n);
            let block = sub_matrix(&a, rows.clone());
            let (op, f): (Box<dyn LinearOperator>, Vec<f64>) = match inner {
                InnerSolver::Dic => {
                    let d = Dic::new(&block).unwrap();
                    let f = d.reciprocal_diagonal().to_vec();
                    (Box::new(Dic::owned(block.clone(), "DIC").unwrap()), f)
                }
                _ => (
                    Box::new(Ic0::owned(block.clone(), "IC(0)").unwrap()),
                    vec![],
                ),
            };
            let mut zb = vec![0.0; rows.len()];
            op.apply(&r[rows.clone()], &mut zb);
            // The same operations in the same order: equal bits.
            assert_eq!(&z[rows.clone()], &zb[..], "{inner:?} block at {first}");
            if inner == InnerSolver::Dic {
                assert_eq!(&factor[rows.clone()], &f[..]);
            }
        }
        // Symmetric: r1 · M⁻¹ r2 = r2 · M⁻¹ r1.
        let r2: Vec<f64> = (0..n).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
        let mut z2 = vec![0.0; n];
        bj.smooth(&r2, &mut z2, 1);
        let dot = |u: &[f64], v: &[f64]| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
        let (d12, d21) = (dot(&r, &z2), dot(&r2, &z));
        assert!(
            (d12 - d21).abs() < 1e-12 * d12.abs().max(1.0),
            "{d12} vs {d21}"
        );
    }
}

#[test]
fn f32_sweeps_from_zero_follow_the_f64_ones_to_single_precision() {
    let n = 300; // the last block is partial
    let a = random_symmetric(n, 6, 5);
    let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 17) as f64 - 8.0).collect();
    for inner in [
        InnerSolver::Jacobi,
        InnerSolver::SymGaussSeidel,
        InnerSolver::Cg,
    ] {
        let bj = BlockJacobi::new(&a, settings(inner, 0.0, 4), 0.8).unwrap();
        // In f64 the same sweeps as the smoother's, bit for bit.
        let x64 = bj.sweeps_from_zero::<f64>(&b, 2).unwrap();
        let mut x = vec![0.0; n];
        bj.smooth(&b, &mut x, 2);
        assert_eq!(x64, x, "{inner:?}");
        let x32 = bj.sweeps_from_zero::<f32>(&b, 2).unwrap();
        let scale = x64.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let err = x32
            .iter()
            .zip(&x64)
            .fold(0.0f64, |m, (&s, &d)| m.max((s as f64 - d).abs()));
        println!("{inner:?}: max |f32 - f64| / max |x| = {:.2e}", err / scale);
        assert!(err <= 1e-5 * scale, "{inner:?}: {err} vs scale {scale}");
        // Not computed in f64 after all.
        assert!(err > 0.0, "{inner:?}: f32 sweeps equal the f64 ones");
    }
    let bic = BlockJacobi::new(&a, settings(InnerSolver::Dic, 0.0, 1), 1.0).unwrap();
    assert!(bic.sweeps_from_zero::<f32>(&b, 1).is_err());
}

#[test]
fn asynchronous_sweeps_are_block_gauss_seidel() {
    let n = 256;
    let a = random_symmetric(n, 6, 4);
    let b: Vec<f64> = (0..n).map(|i| (i % 3) as f64).collect();
    let mut s = settings(InnerSolver::Cg, 1e-14, 200);
    s.asynchronous = true;
    let mut x = vec![0.0; n];
    BlockJacobi::new(&a, s, 1.0).unwrap().smooth(&b, &mut x, 1);
    // Block GS with exact block solves, block by block.
    let mut expected = vec![0.0; n];
    for first in (0..n).step_by(64) {
        expected = {
            let mut ax = vec![0.0; n];
            a.spmv(&expected, &mut ax);
            let rows = first..first + 64;
            let res = DVector::from_iterator(64, rows.clone().map(|r| b[r] - ax[r]));
            let y = dense_block(&a, rows.clone()).lu().solve(&res).unwrap();
            let mut e = expected.clone();
            for r in rows {
                e[r] += y[r - first];
            }
            e
        };
    }
    for i in 0..n {
        assert!((x[i] - expected[i]).abs() < 1e-10, "row {i}");
    }
}
