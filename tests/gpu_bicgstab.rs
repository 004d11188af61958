//! PBiCGStab's device loop (`gpu::bicgstab::DeviceBicgstab`) against the
//! generic loop `solve::bicgstab::bicgstab` over the GPU backend
//! (`gpu::krylov::GpuKrylovBackend`, the same kernels' arithmetic and
//! reduction order: the same iterations and residual history, x to 1e-10)
//! and over the CPU reference (`CpuKrylovBackend`: iterations ±1, the same
//! solution to the tolerance), on the nonsymmetric convection–diffusion
//! systems of `fvm::testing` (perturbed tets among them) and random
//! nonsymmetric diagonally dominant matrices; Jacobi and none; the stopping
//! controls; errors; chunk lengths and launch modes (the same bits). Prints
//! `skipped: no CUDA device` without a GPU (unless FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::{convection_diffusion_system, convection_diffusion_systems};
use fvpoisson::gpu::bicgstab::DeviceBicgstab;
use fvpoisson::gpu::krylov::{run_krylov, DeviceDiagonal, DevicePreconditioner, GpuKrylovBackend};
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::{GpuSolveOptions, LaunchMode};
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::bicgstab::bicgstab;
use fvpoisson::solve::jacobi::Identity;
use fvpoisson::solve::precond::Jacobi;
use fvpoisson::solve::{
    CpuKrylovBackend, KrylovMethod, LinearOperator, SolveError, SolverControls, SolverPerformance,
};
use fvpoisson::sparse::testing::{random_nonsymmetric, random_vector};
use fvpoisson::sparse::{Csr, ModSell};

type Solved = Result<(SolverPerformance, Vec<f64>), SolveError>;

/// The convection–diffusion systems, a larger perturbed one (hundreds of
/// blocks per reduction) and random nonsymmetric diagonally dominant ones.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    let mut all: Vec<_> = convection_diffusion_systems()
        .into_iter()
        .map(|(name, a, _, b)| (name, a, b))
        .collect();
    let (name, a, _, b) = convection_diffusion_system("box:24x24x24:tet:perturb=0.2", 0.002);
    all.push((name, a, b));
    for (n, seed) in [(1000, 3), (5000, 8)] {
        let a = random_nonsymmetric(n, 7, seed);
        all.push((format!("random {n}"), a, random_vector(n, seed + 1)));
    }
    all
}

/// The device loop on `a` with `options`, from `x0`.
fn device_loop(
    gpu: &Gpu,
    a: &Csr,
    b: &[f64],
    x0: &[f64],
    jacobi: bool,
    controls: &SolverControls,
    options: &GpuSolveOptions,
) -> Solved {
    let m = ModSell::from_csr(a, options.slice_height).unwrap();
    let matrix = DeviceModSell::upload(gpu, &m).unwrap();
    let solver = DeviceBicgstab::new(gpu, a.n_rows(), options).unwrap();
    let (b_dev, x_dev) = (gpu.upload(b).unwrap(), gpu.upload(x0).unwrap());
    let perf = solver.solve(&matrix, jacobi, &b_dev, &x_dev, controls, "u")?;
    Ok((perf, gpu.download(&x_dev).unwrap()))
}

/// The generic loop over the GPU backend.
fn generic_gpu(
    gpu: &Gpu,
    a: &Csr,
    b: &[f64],
    x0: &[f64],
    jacobi: bool,
    controls: &SolverControls,
) -> Solved {
    let p: Box<dyn DevicePreconditioner> = if jacobi {
        Box::new(DeviceDiagonal::jacobi(gpu, a).unwrap())
    } else {
        Box::new(DeviceDiagonal::identity(gpu, a.n_rows()))
    };
    let height = GpuSolveOptions::default().slice_height;
    let backend = GpuKrylovBackend::new(gpu, a, p, height).unwrap();
    run_krylov(&backend, &KrylovMethod::BiCgStab, b, x0, controls, "u")
}

/// The generic loop on the CPU reference.
fn cpu(a: &Csr, b: &[f64], x0: &[f64], jacobi: bool, controls: &SolverControls) -> Solved {
    let j;
    let identity = Identity(a.n_rows());
    let p: &dyn LinearOperator = if jacobi {
        j = Jacobi::new(a).unwrap();
        &j
    } else {
        &identity
    };
    let backend = CpuKrylovBackend::new(a, p);
    let mut x = x0.to_vec();
    let perf = bicgstab(&backend, &b.to_vec(), &mut x, controls, "u")?;
    Ok((perf, x))
}

/// Same iterations, convergence and history to 1e-10 relative, x to 1e-10
/// of its largest entry.
fn same_solve(what: &str, (dev, x_dev): &(SolverPerformance, Vec<f64>), generic: &Solved) {
    let (gen, x_gen) = generic.as_ref().unwrap();
    assert_eq!(dev.iterations, gen.iterations, "{what}: {dev:?} {gen:?}");
    assert_eq!(dev.converged, gen.converged, "{what}");
    assert_eq!(dev.history.len(), gen.history.len(), "{what}");
    for (k, (d, g)) in dev.history.iter().zip(&gen.history).enumerate() {
        assert!(
            (d - g).abs() <= 1e-10 * g.abs(),
            "{what}: residual {k}: device loop {d:e}, generic {g:e}"
        );
    }
    let scale = x_gen.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    for (i, (d, g)) in x_dev.iter().zip(x_gen).enumerate() {
        assert!(
            (d - g).abs() <= 1e-10 * scale,
            "{what}: x[{i}]: device loop {d:e}, generic {g:e}"
        );
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_loop_matches_the_generic_loop_and_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-10, 3000);
    let options = GpuSolveOptions::default();
    for (name, a, b) in systems() {
        let x0 = vec![0.0; a.n_rows()];
        for jacobi in [true, false] {
            let what = format!("{name}, jacobi {jacobi}");
            let dev = device_loop(&gpu, &a, &b, &x0, jacobi, &controls, &options)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            same_solve(
                &what,
                &dev,
                &generic_gpu(&gpu, &a, &b, &x0, jacobi, &controls),
            );
            let (host, x_host) = cpu(&a, &b, &x0, jacobi, &controls).unwrap();
            assert!(dev.0.converged, "{what}: {:?}", dev.0);
            // Tree sums against the CPU's serial ones: unpreconditioned
            // BiCGStab amplifies the rounding (a 700-row random matrix
            // takes 22 iterations in one order, 23 in the other).
            assert!(
                host.iterations.abs_diff(dev.0.iterations) <= 1 + host.iterations / 10,
                "{what}: CPU {} device loop {}",
                host.iterations,
                dev.0.iterations
            );
            let scale = x_host.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let err = dev
                .1
                .iter()
                .zip(&x_host)
                .fold(0.0f64, |m, (d, h)| m.max((d - h).abs()));
            assert!(
                err <= 1e-5 * scale,
                "{what}: x differs from the CPU's by {err:e}"
            );
            println!(
                "{what}: {} iterations (CPU {}), x within {err:e} of the CPU's",
                dev.0.iterations, host.iterations
            );
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn stopping_controls_match_the_generic_loop() {
    let Some(gpu) = test_device() else { return };
    let (_, a, b) = systems().swap_remove(1);
    let x0 = random_vector(a.n_rows(), 5);
    let controls = [
        // maxIter before convergence: not converged after exactly 5.
        SolverControls::absolute(1e-12, 5),
        // minIter past convergence.
        SolverControls {
            min_iter: 30,
            ..SolverControls::absolute(1e-3, 1000)
        },
        // A loose relTol: the half step on s stops the loop (x += α y).
        SolverControls {
            tolerance: 0.0,
            rel_tol: 0.9,
            max_iter: 1000,
            min_iter: 0,
        },
        // Tolerance and relTol 0: maxIter iterations.
        SolverControls {
            tolerance: 0.0,
            rel_tol: 0.0,
            max_iter: 12,
            min_iter: 0,
        },
        // maxIter 0: no iteration.
        SolverControls::absolute(1e-10, 0),
    ];
    let options = GpuSolveOptions {
        check_interval: 4,
        ..Default::default()
    };
    for c in controls {
        for jacobi in [true, false] {
            let what = format!("{c:?}, jacobi {jacobi}");
            let dev = device_loop(&gpu, &a, &b, &x0, jacobi, &c, &options).unwrap();
            same_solve(&what, &dev, &generic_gpu(&gpu, &a, &b, &x0, jacobi, &c));
            assert!(dev.0.iterations >= c.min_iter, "{what}");
            assert!(dev.0.iterations <= c.max_iter.max(c.min_iter), "{what}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn chunk_lengths_and_launch_modes_give_the_same_bits() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-10, 3000);
    for (name, a, b) in systems().into_iter().skip(3) {
        let x0 = vec![0.0; a.n_rows()];
        for jacobi in [true, false] {
            let mut first: Option<(SolverPerformance, Vec<f64>)> = None;
            for check_interval in [1, 3, 50] {
                for launches in [LaunchMode::Separate, LaunchMode::Folded, LaunchMode::Graph] {
                    let options = GpuSolveOptions {
                        check_interval,
                        launches,
                        ..Default::default()
                    };
                    let what = format!("{name}, jacobi {jacobi}, {check_interval}, {launches:?}");
                    let got = device_loop(&gpu, &a, &b, &x0, jacobi, &controls, &options)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    match &first {
                        None => first = Some(got),
                        Some((perf, x)) => {
                            assert_eq!(got.0.iterations, perf.iterations, "{what}");
                            assert_eq!(bits(&got.0.history), bits(&perf.history), "{what}");
                            assert_eq!(bits(&got.1), bits(x), "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn graphs_are_reused_across_solves_and_matrices() {
    let Some(gpu) = test_device() else { return };
    let (_, a, b) = systems().swap_remove(0);
    let n = a.n_rows();
    let options = GpuSolveOptions {
        launches: LaunchMode::Graph,
        check_interval: 7,
        ..Default::default()
    };
    let solver = DeviceBicgstab::new(&gpu, n, &options).unwrap();
    if solver.launch_mode() != LaunchMode::Graph {
        println!("skipped: FVPOISSON_GPU_SYNC=1 launches directly");
        return;
    }
    let m = ModSell::from_csr(&a, options.slice_height).unwrap();
    let first = DeviceModSell::upload(&gpu, &m).unwrap();
    let second = DeviceModSell::upload(&gpu, &m).unwrap();
    let b_dev = gpu.upload(&b).unwrap();
    let mut x = gpu.upload(&vec![0.0; n]).unwrap();
    let controls = SolverControls::absolute(1e-10, 3000);
    let mut results = Vec::new();
    for (matrix, captures) in [(&first, 1), (&second, 2), (&first, 2), (&second, 2)] {
        // Rewritten in place: x keeps its address.
        gpu.write(&vec![0.0; n], &mut x).unwrap();
        let perf = solver
            .solve(matrix, true, &b_dev, &x, &controls, "u")
            .unwrap();
        assert_eq!(solver.graph_captures(), captures, "one graph per matrix");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        results.push((bits(&perf.history), bits(&gpu.download(&x).unwrap())));
    }
    for r in &results[1..] {
        assert_eq!(r, &results[0]);
    }
}

/// A 2 × 2 skew-symmetric system: r0 · A r0 = 0 at the first iteration.
fn skew() -> Csr {
    Csr::new(
        2,
        vec![0, 2, 4],
        vec![0, 1, 0, 1],
        vec![0.0, 1.0, -1.0, 0.0],
    )
    .unwrap()
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn breakdowns_and_nan_are_the_generic_loops_errors() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-10, 100);
    let options = GpuSolveOptions {
        slice_height: 32,
        ..Default::default()
    };
    // Breakdown r0 · A M⁻¹ p = 0 at iteration 1 (no preconditioner: the
    // diagonal is zero).
    let a = skew();
    let (b, x0) = (vec![1.0, 1.0], vec![0.0; 2]);
    let dev = device_loop(&gpu, &a, &b, &x0, false, &controls, &options).unwrap_err();
    let gen = generic_gpu(&gpu, &a, &b, &x0, false, &controls).unwrap_err();
    assert!(
        matches!(
            dev,
            SolveError::KrylovBreakdown {
                quantity: "r0 · A M⁻¹ p",
                iteration: 1,
                ..
            }
        ),
        "{dev}"
    );
    assert_eq!(dev.to_string(), gen.to_string());
    // A NaN in b: the initial residual is not finite (iteration 0).
    let (_, a, mut b) = systems().swap_remove(0);
    b[7] = f64::NAN;
    let x0 = vec![0.0; a.n_rows()];
    for jacobi in [true, false] {
        let dev = device_loop(&gpu, &a, &b, &x0, jacobi, &controls, &options).unwrap_err();
        let gen = generic_gpu(&gpu, &a, &b, &x0, jacobi, &controls).unwrap_err();
        assert!(
            matches!(dev, SolveError::NonFiniteResidual { iteration: 0, .. }),
            "{dev}"
        );
        assert_eq!(dev.to_string(), gen.to_string());
    }
    // Overflow inside the loop (values near the largest double): whatever
    // the generic loop reports, at the same iteration.
    let (_, a, b) = systems().swap_remove(3);
    let mut huge = a.clone();
    for v in huge.values_mut() {
        *v *= 1e300;
    }
    let b: Vec<f64> = b.iter().map(|v| v * 1e300).collect();
    let x0 = random_vector(a.n_rows(), 2);
    for jacobi in [true, false] {
        let dev = device_loop(&gpu, &huge, &b, &x0, jacobi, &controls, &options);
        let gen = generic_gpu(&gpu, &huge, &b, &x0, jacobi, &controls);
        match (dev, gen) {
            (Err(d), Err(g)) => assert_eq!(d.to_string(), g.to_string()),
            (Ok(d), Ok(g)) => same_solve("overflow", &d, &Ok(g)),
            (d, g) => panic!("device loop {d:?}, generic {g:?}"),
        }
    }
}

/// `a` with its diagonal scaled by `factor`: the lanes' systems share the
/// pattern and off-diagonals, as the momentum components do.
fn with_diagonal_scaled(a: &Csr, factor: f64) -> Csr {
    let mut scaled = a.clone();
    for r in 0..a.n_rows() {
        if let Some(k) = a.slot(r, r) {
            scaled.values_mut()[k] *= factor;
        }
    }
    scaled
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn lanes_are_the_single_solves_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    let all = systems();
    let controls = [
        SolverControls::absolute(1e-10, 3000),
        // The momentum's fixed count: exactly 5 iterations.
        SolverControls {
            tolerance: 0.0,
            rel_tol: 0.0,
            max_iter: 5,
            min_iter: 0,
        },
        // A loose relTol: lanes stop at their half step, at different
        // iterations.
        SolverControls {
            tolerance: 0.0,
            rel_tol: 0.9,
            max_iter: 1000,
            min_iter: 0,
        },
    ];
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut lanes_stopped_apart = false;
    for (name, a, b) in [&all[3], &all[4]] {
        let n = a.n_rows();
        // Lane 0: b from zero; lane 1: a stronger diagonal (fewer
        // iterations), another b and x0; lane 2: x0 the solution (no
        // iteration) or a NaN in b (the lane fails, the others go on).
        let scaled = [1.0, 1.6, 1.2].map(|f| with_diagonal_scaled(a, f));
        let x_exact = random_vector(n, 11);
        let mut b_exact = vec![0.0; n];
        scaled[2].spmv(&x_exact, &mut b_exact);
        let mut b_nan = b.clone();
        b_nan[n / 2] = f64::NAN;
        for (third, third_b, third_x0) in [
            ("solved", &b_exact, &x_exact),
            ("NaN", &b_nan, &vec![0.0; n]),
        ] {
            let rhs = [b.clone(), random_vector(n, 7), third_b.clone()];
            let x0 = [vec![0.0; n], random_vector(n, 9), third_x0.clone()];
            for c in &controls {
                for (check_interval, launches) in [
                    (3, LaunchMode::Separate),
                    (3, LaunchMode::Graph),
                    (50, LaunchMode::Folded),
                ] {
                    let options = GpuSolveOptions {
                        check_interval,
                        launches,
                        ..Default::default()
                    };
                    for k in [3, 2] {
                        let what = format!("{name}, {third}, {c:?}, {launches:?}, {k} lanes");
                        let jacobi = k == 3;
                        let singles: Vec<_> = (0..k)
                            .map(|l| {
                                device_loop(&gpu, &scaled[l], &rhs[l], &x0[l], jacobi, c, &options)
                                    .map(|(perf, x)| (perf, bits(&x)))
                                    .map_err(|e| e.to_string())
                            })
                            .collect();
                        let height = options.slice_height;
                        let upload = |a: &Csr| {
                            DeviceModSell::upload(&gpu, &ModSell::from_csr(a, height).unwrap())
                                .unwrap()
                        };
                        let mut matrix = upload(&scaled[0]);
                        let placeholder = gpu.download(&matrix.diag).unwrap();
                        let mut diagonals: Vec<_> = scaled[..k]
                            .iter()
                            .map(|s| {
                                let d = gpu.download(&upload(s).diag).unwrap();
                                gpu.upload(&d).unwrap()
                            })
                            .collect();
                        let b_dev: Vec<_> =
                            rhs[..k].iter().map(|v| gpu.upload(v).unwrap()).collect();
                        let x_dev: Vec<_> =
                            x0[..k].iter().map(|v| gpu.upload(v).unwrap()).collect();
                        let solver = DeviceBicgstab::with_lanes(&gpu, n, 3, &options).unwrap();
                        let solved = solver.solve_lanes(
                            &mut matrix,
                            &mut diagonals,
                            jacobi,
                            &b_dev.iter().collect::<Vec<_>>(),
                            &x_dev.iter().collect::<Vec<_>>(),
                            c,
                            &["u0", "u1", "u2"][..k],
                        );
                        assert_eq!(solved.len(), k, "{what}");
                        assert_eq!(
                            bits(&gpu.download(&matrix.diag).unwrap()),
                            bits(&placeholder),
                            "{what}: the matrix's diagonal is given back"
                        );
                        let mut iterations = Vec::new();
                        for (l, (got, single)) in solved.into_iter().zip(&singles).enumerate() {
                            let got = got
                                .map(|perf| (perf, bits(&gpu.download(&x_dev[l]).unwrap())))
                                .map_err(|e| e.to_string());
                            assert_eq!(&got, single, "{what}: lane {l}");
                            iterations.push(got.map_or(usize::MAX, |(p, _)| p.iterations));
                        }
                        lanes_stopped_apart |= iterations.iter().any(|&i| i != iterations[0]);
                        println!("{what}: iterations per lane {iterations:?}");
                    }
                }
            }
        }
    }
    assert!(
        lanes_stopped_apart,
        "no case had lanes stop at different iterations"
    );
}
