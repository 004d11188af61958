use nalgebra::DVector;

use super::*;
use crate::solve::cpu::CpuBackend;
use crate::solve::jacobi::Identity;
use crate::solve::{solve_pcg, PreconditionerKind};
use crate::sparse::testing::{dense, random_symmetric};

fn rhs(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect()
}

#[test]
fn same_iterates_as_sgs_pcg() {
    let a = random_symmetric(400, 6, 3);
    let b = rhs(400);
    let controls = SolverControls::absolute(1e-10, 200);
    let x0: Vec<f64> = (0..400).map(|i| (i % 5) as f64 * 0.1).collect();
    let (mut x_sgs, mut x_eis) = (x0.clone(), x0);
    let sgs = solve_pcg(
        &a,
        PreconditionerKind::SymGaussSeidel,
        &b,
        &mut x_sgs,
        &controls,
        "p",
    )
    .unwrap();
    let every = ResidualCheck::EveryIteration;
    let eis = solve_eisenstat_with(&a, &b, &mut x_eis, &controls, every, "p").unwrap();
    assert!(eis.converged && sgs.converged);
    assert_eq!(eis.iterations, sgs.iterations);
    for (k, (e, s)) in eis.history.iter().zip(&sgs.history).enumerate() {
        assert!(
            (e - s).abs() <= 1e-8 * s.abs() + 1e-15,
            "iteration {k}: {e} vs {s}"
        );
    }
    for (e, s) in x_eis.iter().zip(&x_sgs) {
        assert!((e - s).abs() < 1e-9 * (1.0 + s.abs()), "{e} vs {s}");
    }
    // The carried residual is the true one.
    let m = dense(&a);
    let r = DVector::from_column_slice(&b) - &m * DVector::from_column_slice(&x_eis);
    let true_sum: f64 = r.iter().map(|v| v.abs()).sum();
    let mut r0 = vec![0.0; 400];
    let norms = CpuBackend::new(&a, &Identity(400)).initialize(&b, &x_eis, &mut r0);
    assert!((true_sum - norms.residual_sum).abs() < 1e-9 * norms.norm_factor);
}

#[test]
fn predicted_checks_stop_converged_on_the_recursion_residual() {
    // A perturbed tet box: a real FVM matrix, ~60 iterations.
    let (a, _) = crate::fvm::testing::poisson_system("box:10x10x10:tet:perturb=0.2").unwrap();
    let n = a.n_rows();
    let b = crate::fvm::testing::random_field(n, 3);
    let controls = SolverControls::absolute(1e-9, 500);
    let backend = CpuEisenstat::new(&a).unwrap();
    let run = |check| {
        let mut x = vec![0.0; n];
        let perf = eisenstat_cg(&backend, &b, &mut x, &controls, check, "p").unwrap();
        (perf, x)
    };
    let (every, _) = run(ResidualCheck::EveryIteration);
    // Chunks of up to 8 iterations between read-backs: the same solve,
    // checked at a chunk's end.
    let chunked = CpuEisenstat::new(&a).unwrap().with_max_chunk(8);
    let mut x = vec![0.0; n];
    let check = ResidualCheck::Predicted { max_interval: 10 };
    let c = eisenstat_cg(&chunked, &b, &mut x, &controls, check, "p").unwrap();
    println!(
        "chunks of up to 8: {} iterations, {} checks",
        c.iterations,
        c.history.len() - 1
    );
    assert!(c.converged && c.iterations >= every.iterations);
    assert!(c.iterations <= every.iterations + 8, "{}", c.iterations);
    let (predicted, x) = run(ResidualCheck::Predicted { max_interval: 10 });
    assert!(every.converged && predicted.converged);
    assert!(
        predicted.iterations >= every.iterations && predicted.iterations <= every.iterations + 10,
        "{} vs {}",
        predicted.iterations,
        every.iterations
    );
    // Fewer residuals recorded, the last one the true residual of x.
    assert!(predicted.history.len() < every.history.len());
    let mut r = vec![0.0; n];
    let identity = Identity(n);
    let cpu = CpuBackend::new(&a, &identity);
    // OpenFOAM's normFactor is the initial x's (x = 0).
    let norm_factor = cpu.initialize(&b, &vec![0.0; n], &mut r).norm_factor;
    // The checked residual is the recursion's: b − A x to round-off.
    let true_residual = cpu.initialize(&b, &x, &mut r).residual_sum / norm_factor;
    let d = (true_residual - predicted.final_residual).abs();
    assert!(
        d < 1e-3 * true_residual + 1e-10 * predicted.history[0],
        "{d}"
    );
    assert!(predicted.final_residual < controls.tolerance);
    println!(
        "every iteration: {} iterations; predicted: {} iterations, {} checks",
        every.iterations,
        predicted.iterations,
        predicted.history.len() - 1
    );
}

#[test]
fn colour_contiguous_order_gives_multicolour_symgs_iterates() {
    // What the GPU runs: the rows renumbered colour by colour; natural
    // Eisenstat there is multicolour symGS-PCG in the original order.
    use crate::solve::colouring::Colouring;
    use crate::solve::{Preconditioner, SmootherSettings};
    for spec in ["box:10x10x10:tet:perturb=0.2:renumber", "box:12x12x12"] {
        let (a, _) = crate::fvm::testing::poisson_system(spec).unwrap();
        let n = a.n_rows();
        let b = crate::fvm::testing::random_field(n, 7);
        let controls = SolverControls::absolute(1e-8, 500);
        let (p, colouring) = Colouring::jones_plassmann(&a).contiguous();
        let mut x = vec![0.0; n];
        let eis = solve_eisenstat_with(
            &p.apply_symmetric(&a),
            &p.to_new(&b),
            &mut x,
            &controls,
            ResidualCheck::EveryIteration,
            "p",
        )
        .unwrap();
        let mc =
            Preconditioner::Smoother(SmootherSettings::named("multicolourSymGaussSeidel").unwrap());
        let mut x_mc = vec![0.0; n];
        let sgs = solve_pcg(&a, mc, &b, &mut x_mc, &controls, "p").unwrap();
        println!(
            "{spec}: {} colours, Eisenstat {} iterations, multicolour symGS {}",
            colouring.n_colours(),
            eis.iterations,
            sgs.iterations
        );
        assert_eq!(eis.iterations, sgs.iterations, "{spec}");
        let x = p.to_old(&x);
        for (e, s) in x.iter().zip(&x_mc) {
            assert!((e - s).abs() < 1e-7 * (1.0 + s.abs()), "{spec}: {e} vs {s}");
        }
    }
}

#[test]
fn length_sorted_order_keeps_colours_and_iterates() {
    use crate::solve::colouring::Colouring;
    use crate::sparse::{Permutation, Sell};
    let (a, _) = crate::fvm::testing::poisson_system("box:12x12x12:tet:perturb=0.2").unwrap();
    let (p, colouring) = Colouring::jones_plassmann(&a).contiguous();
    let a = p.apply_symmetric(&a);
    let order = length_sorted_order(&a, colouring.colour_ptr(), 256);
    let q = Permutation::from_new_to_old(order.clone()).unwrap();
    let sorted = q.apply_symmetric(&a);
    // A permutation inside each colour: the same colour runs, no coupling inside.
    for (new, &old) in order.iter().enumerate() {
        assert_eq!(colouring.colours()[new], colouring.colours()[old as usize]);
    }
    assert!(colouring.conflict(&sorted).is_none());
    let padding = |m: &Csr| {
        let split = ScaledTriangles::new(m).unwrap();
        let slots = Sell::from_csr(&split.lower, 32).unwrap().cols().len()
            + Sell::from_csr(&split.upper, 32).unwrap().cols().len();
        slots as f64 / (split.lower.nnz() + split.upper.nnz()) as f64
    };
    let (before, after) = (padding(&a), padding(&sorted));
    println!("SELL slots per entry: {before:.3} in colour order, {after:.3} sorted");
    assert!(after < before);
    // The same preconditioner: the same iterations.
    let n = a.n_rows();
    let b = crate::fvm::testing::random_field(n, 2);
    let controls = SolverControls::absolute(1e-8, 500);
    let every = ResidualCheck::EveryIteration;
    let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
    let one = solve_eisenstat_with(&a, &b, &mut x, &controls, every, "p").unwrap();
    let two = solve_eisenstat_with(&sorted, &q.to_new(&b), &mut y, &controls, every, "p").unwrap();
    assert_eq!(one.iterations, two.iterations);
    let y = q.to_old(&y);
    for (x, y) in x.iter().zip(&y) {
        assert!((x - y).abs() < 1e-8 * (1.0 + x.abs()), "{x} vs {y}");
    }
}

#[test]
fn operator_is_the_split_preconditioned_matrix() {
    // t + s = C⁻¹ Â C⁻ᵀ p, and g = Â t, checked densely.
    let a = random_symmetric(60, 5, 9);
    let backend = CpuEisenstat::new(&a).unwrap();
    let sp = backend.split();
    let n = 60;
    let d = DVector::from_column_slice(&sp.inv_sqrt_diag);
    let m = dense(&a);
    let hat = nalgebra::DMatrix::from_fn(n, n, |i, j| m[(i, j)] * d[i] * d[j]);
    let c = nalgebra::DMatrix::from_fn(n, n, |i, j| match i.cmp(&j) {
        std::cmp::Ordering::Greater => hat[(i, j)],
        std::cmp::Ordering::Equal => 1.0,
        std::cmp::Ordering::Less => 0.0,
    });
    let c_inv = c.clone().try_inverse().unwrap();
    let op = &c_inv * &hat * c_inv.transpose();
    let mut vecs: Vec<Vec<f64>> = (0..7).map(|_| vec![0.0; n]).collect();
    let mut v = EisenstatVectors::from_slice(&mut vecs);
    *v.rho = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let p_q = backend.sweeps(0.0, true, &mut v);
    let pv = DVector::from_column_slice(v.rho);
    let expected = &op * &pv;
    for i in 0..n {
        let w = v.t[i] + v.s[i];
        assert!(
            (w - expected[i]).abs() < 1e-12 * (1.0 + expected[i].abs()),
            "row {i}"
        );
    }
    assert!((p_q - pv.dot(&expected)).abs() < 1e-10 * p_q.abs());
    let ghat = &hat * DVector::from_column_slice(v.t);
    for i in 0..n {
        assert!(
            (v.g[i] - ghat[i]).abs() < 1e-12 * (1.0 + ghat[i].abs()),
            "g row {i}"
        );
    }
}

#[test]
fn bad_diagonal_and_asymmetry_are_errors() {
    let a = crate::solve::error::non_positive::matrix();
    let err = CpuEisenstat::new(&a).err().unwrap();
    crate::solve::error::non_positive::assert_refused(&err, "Eisenstat");
    assert!(err.to_string().contains("row 1"), "{err}");
    let a = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![2., -1., 2.]).unwrap();
    let mut x = vec![0.0; 2];
    let err =
        solve_eisenstat(&a, &[1.0, 1.0], &mut x, &SolverControls::default(), "p").unwrap_err();
    assert!(matches!(err, SolveError::NotSymmetric { .. }), "{err}");
}
