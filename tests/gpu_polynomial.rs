//! GPU polynomial preconditioners against their CPU reference
//! (`solve::polynomial`): one application on random vectors (f64 to ~1e-13,
//! mixed precision against the CPU's f32 evaluation to ~1e-6), the same
//! application replayed from a CUDA graph, PCG (iterations equal ±1, the
//! same accuracy in f64 and mixed precision), and the polynomial smoothers
//! (sweeps and OpenFOAM's smoothSolver). Each test prints a compact
//! table, and `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

mod common;

use std::rc::Rc;

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::polynomial::DevicePolynomial;
use fvpoisson::gpu::smooth::{
    solve_pcg_gpu_with, solve_smooth_gpu, DevicePreconditioner, DeviceSmoother,
};
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::polynomial::PolynomialPreconditioner;
use fvpoisson::solve::{
    solve_pcg_scaled, solve_smooth, EigenBound, EquilibrationKind, LinearOperator, PolynomialKind,
    PolynomialSettings, Precision, Preconditioner, SmootherKind, SmootherSettings, SolverControls,
};
use fvpoisson::sparse::testing::SplitMix;
use fvpoisson::sparse::testing::{max_rel_diff, relative_residual};
use fvpoisson::sparse::{Csr, ModSell, RowOrdering};

/// Real FVM systems (perturbed and renumbered tets, a 2-D box, a polyhedral
/// OpenFOAM mesh, a Gmsh prism mesh, a hex box) in RCM order, and random SPD
/// matrices; mesh files relative to the repository root.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    common::random_and_rcm_systems(&[
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:80x80x1:2d",
        "box:24x24x24:perturb=0.2",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ])
}

fn device_matrix(gpu: &Gpu, a: &Csr, h: usize) -> Rc<DeviceModSell> {
    Rc::new(DeviceModSell::upload(gpu, &ModSell::from_csr(a, h).unwrap()).unwrap())
}

fn settings(kind: PolynomialKind, degree: usize, precision: Precision) -> PolynomialSettings {
    PolynomialSettings {
        precision,
        ..PolynomialSettings::new(kind, degree)
    }
}

/// z = M⁻¹ r on the device and with the CPU reference at the device's bound.
fn apply_both(
    gpu: &Gpu,
    a: &Csr,
    matrix: &Rc<DeviceModSell>,
    s: &PolynomialSettings,
    r: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let device = DevicePolynomial::new(gpu, a, Rc::clone(matrix), s).unwrap();
    let cpu = PolynomialPreconditioner::with_upper_bound(a, s, device.recurrence().hi).unwrap();
    assert_eq!(cpu.recurrence(), device.recurrence());
    let r_dev = gpu.upload(r).unwrap();
    let z_dev = gpu.zeros::<f64>(r.len()).unwrap();
    device.apply(&r_dev, &z_dev).unwrap();
    let z_gpu = gpu.download(&z_dev).unwrap();
    let mut z_cpu = vec![0.0; r.len()];
    cpu.apply(r, &mut z_cpu);
    (z_gpu, z_cpu)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn apply_equals_the_cpu_reference() {
    let Some(gpu) = test_device() else { return };
    println!("system | slice | kind | degree | f64 vs CPU | mixed vs CPU f32 | mixed vs f64");
    let (mut worst_f64, mut worst_mixed) = (0.0f64, 0.0f64);
    for (name, a, _) in systems() {
        let mut rng = SplitMix(7);
        let r: Vec<f64> = (0..a.n_rows()).map(|_| rng.next_f64() - 0.5).collect();
        for h in [64, 512] {
            let matrix = device_matrix(&gpu, &a, h);
            for kind in PolynomialKind::ALL {
                for degree in [1, 2, 4, 8] {
                    let (zd, zd_cpu) = apply_both(
                        &gpu,
                        &a,
                        &matrix,
                        &settings(kind, degree, Precision::Double),
                        &r,
                    );
                    let (zm, zm_cpu) = apply_both(
                        &gpu,
                        &a,
                        &matrix,
                        &settings(kind, degree, Precision::Mixed),
                        &r,
                    );
                    let (d64, dmix, dvs) = (
                        max_rel_diff(&zd, &zd_cpu),
                        max_rel_diff(&zm, &zm_cpu),
                        max_rel_diff(&zm, &zd),
                    );
                    println!(
                        "{name} | {h} | {} | {degree} | {d64:.1e} | {dmix:.1e} | {dvs:.1e}",
                        kind.name()
                    );
                    worst_f64 = worst_f64.max(d64);
                    worst_mixed = worst_mixed.max(dmix);
                    assert!(d64 < 1e-12, "{name} {kind:?} {degree}: f64 {d64:e}");
                    assert!(dmix < 1e-5, "{name} {kind:?} {degree}: mixed {dmix:e}");
                    // f32 against f64: rounding only (the Chebyshev basis keeps it small).
                    assert!(dvs < 1e-4, "{name} {kind:?} {degree}: mixed vs f64 {dvs:e}");
                }
            }
        }
    }
    println!("worst: f64 {worst_f64:.1e}, mixed {worst_mixed:.1e}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn apply_replays_from_a_cuda_graph() {
    // apply() only launches kernels, so PCG can capture it into its graph.
    let Some(gpu) = test_device() else { return };
    let (a, _) = poisson_system("box:20x20x20:tet:perturb=0.2").unwrap();
    let matrix = device_matrix(&gpu, &a, 512);
    let mut rng = SplitMix(11);
    let r: Vec<f64> = (0..a.n_rows()).map(|_| rng.next_f64() - 0.5).collect();
    let r_dev = gpu.upload(&r).unwrap();
    for precision in [Precision::Double, Precision::Mixed] {
        let s = settings(PolynomialKind::LeastSquares, 6, precision);
        let p = DevicePolynomial::new(&gpu, &a, Rc::clone(&matrix), &s).unwrap();
        let direct = gpu.zeros::<f64>(a.n_rows()).unwrap();
        let replayed = gpu.zeros::<f64>(a.n_rows()).unwrap();
        p.apply(&r_dev, &direct).unwrap();
        let graph = gpu.capture(|| p.apply(&r_dev, &replayed)).unwrap();
        gpu.launch_graph(&graph).unwrap();
        let (x, y) = (
            gpu.download(&direct).unwrap(),
            gpu.download(&replayed).unwrap(),
        );
        println!(
            "graph replay, {}: max diff {:e}",
            precision.name(),
            max_rel_diff(&y, &x)
        );
        assert_eq!(x, y, "{precision:?}: the replay differs");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    // The CPU's row order, so that the f32 roundings of both are the same.
    let options = GpuSolveOptions {
        ordering: RowOrdering::Natural,
        ..GpuSolveOptions::default()
    };
    let controls = SolverControls::absolute(1e-12, 20_000);
    println!(
        "mesh | preconditioner | equilibration | CPU iterations | GPU iterations | x difference | \
         GPU ‖b−Ax‖/‖b‖"
    );
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:80x80x1:2d",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ] {
        let (a, b) = poisson_system(spec).unwrap();
        let mut cases = Vec::new();
        for kind in PolynomialKind::ALL {
            for precision in [Precision::Double, Precision::Mixed] {
                cases.push((settings(kind, 4, precision), EquilibrationKind::None));
            }
        }
        let mut lanczos = settings(PolynomialKind::LeastSquares, 8, Precision::Mixed);
        lanczos.bound = EigenBound::Lanczos { steps: 10 };
        cases.push((lanczos, EquilibrationKind::None));
        cases.push((
            settings(PolynomialKind::Chebyshev, 2, Precision::Double),
            EquilibrationKind::Jacobi,
        ));
        let mut f64_residual = f64::NAN;
        for (s, eq) in cases {
            let p = Preconditioner::Polynomial(s);
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_pcg_scaled(&a, p, &eq, &b, &mut x_cpu, &controls, "p").unwrap();
            let mut x_gpu = vec![0.0; a.n_rows()];
            let dev = solve_pcg_gpu_with(
                &gpu,
                &p,
                DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options)
                    .equilibrated(&eq)
                    .named("p"),
            )
            .unwrap();
            let d = max_rel_diff(&x_gpu, &x_cpu);
            let residual = relative_residual(&a, &b, &x_gpu);
            println!(
                "{spec} | {p} | {eq} | {} | {} | {d:.1e} | {residual:.2e}",
                cpu.iterations, dev.iterations
            );
            assert!(dev.converged, "{spec} {p}");
            // f64: the CPU's iterations ±1. Mixed precision: the device's f32
            // arithmetic contracts into FMAs where the host rounds twice, so
            // the preconditioners differ by f32 rounding and PCG's iteration
            // count by a few (H100: 42 against 45 on the tet box).
            let slack = match s.precision {
                Precision::Double => 1,
                Precision::Mixed => 2 + cpu.iterations / 10,
            };
            assert!(
                dev.iterations.abs_diff(cpu.iterations) <= slack,
                "{spec} {p}: GPU {} vs CPU {} iterations",
                dev.iterations,
                cpu.iterations
            );
            assert!(d < 1e-8, "{spec} {p}: {d:e}");
            match s.precision {
                Precision::Double => f64_residual = residual,
                // The same stopping test in f64: the same accuracy as the f64
                // preconditioner of the same kind (the case before).
                Precision::Mixed => assert!(
                    residual < 10.0 * f64_residual.max(1e-14),
                    "{spec} {p}: {residual:e} vs f64 {f64_residual:e}"
                ),
            }
        }
    }
}

/// The polynomial smoother (x += M⁻¹ (b − A x), the residual in f64).
fn smoother(kind: PolynomialKind, precision: Precision) -> SmootherSettings {
    let mut s = SmootherSettings::new(SmootherKind::Polynomial(kind));
    s.polynomial.precision = precision;
    s
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn smoother_sweeps_and_smooth_solver_equal_the_cpu() {
    let Some(gpu) = test_device() else { return };
    println!("system | smoother | 3 sweeps, GPU vs CPU");
    for (name, a, b) in systems() {
        let matrix = device_matrix(&gpu, &a, 512);
        let x0: Vec<f64> = (0..a.n_rows())
            .map(|i| ((i * 7) % 13) as f64 * 0.01)
            .collect();
        let b_dev = gpu.upload(&b).unwrap();
        for kind in PolynomialKind::ALL {
            for precision in [Precision::Double, Precision::Mixed] {
                let s = smoother(kind, precision);
                let device = DeviceSmoother::new(&gpu, &a, Rc::clone(&matrix), &s).unwrap();
                let x_dev = gpu.upload(&x0).unwrap();
                device.smooth(&b_dev, &x_dev, 3).unwrap();
                let x_gpu = gpu.download(&x_dev).unwrap();
                let mut x_cpu = x0.clone();
                s.build(&a).unwrap().smooth(&b, &mut x_cpu, 3);
                let d = max_rel_diff(&x_gpu, &x_cpu);
                println!("{name} | {s} | {d:.1e}");
                let limit = match precision {
                    Precision::Double => 1e-12,
                    Precision::Mixed => 1e-5,
                };
                assert!(d < limit, "{name} {s}: {d:e}");
            }
        }
    }
    // OpenFOAM's smoothSolver with a Chebyshev smoother, natural order on both.
    let options = GpuSolveOptions {
        ordering: RowOrdering::Natural,
        ..GpuSolveOptions::default()
    };
    println!("mesh | smoother | CPU iterations | GPU iterations | x difference");
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "meshes/foam/polydual",
    ] {
        let (a, b) = poisson_system(spec).unwrap();
        for precision in [Precision::Double, Precision::Mixed] {
            let s = smoother(PolynomialKind::Chebyshev, precision);
            let controls = SolverControls::absolute(1e-8, 20_000);
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_smooth(&a, &s, &b, &mut x_cpu, &controls, "p").unwrap();
            let mut x_gpu = vec![0.0; a.n_rows()];
            let dev = solve_smooth_gpu(
                &gpu,
                &s,
                DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options).named("p"),
            )
            .unwrap();
            let d = max_rel_diff(&x_gpu, &x_cpu);
            println!(
                "{spec} | {s} | {} | {} | {d:.1e}",
                cpu.iterations, dev.iterations
            );
            assert!(cpu.converged && dev.converged, "{spec} {s}");
            // Hundreds of sweeps: the crossing of the tolerance may move by 1 %.
            assert!(
                dev.iterations.abs_diff(cpu.iterations) <= 1 + cpu.iterations / 100,
                "{spec} {s}: GPU {} vs CPU {}",
                dev.iterations,
                cpu.iterations
            );
            assert!(d < 1e-6, "{spec} {s}: {d:e}");
        }
    }
}

/// The value-only re-set-up (`DevicePolynomial::update_values`, as the
/// device loops run it after each re-assembly of the pressure matrix)
/// equals a fresh device set-up (`DevicePolynomial::on_device`) on the new
/// matrix bit for bit: the same Gershgorin bound and coefficients, and the
/// same z = M⁻¹ r, in f64 and mixed precision; a different pattern is
/// refused.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn value_update_equals_a_fresh_set_up_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    let (a, _) = poisson_system("box:8x8x8:tet:perturb=0.2").unwrap();
    // The same pattern, other values (still SPD): a re-assembly with
    // another Γ and a larger diagonal.
    let mut reassembled = a.clone();
    let mut rng = SplitMix(11);
    for row in 0..a.n_rows() {
        let (start, end) = (a.row_ptr()[row], a.row_ptr()[row + 1]);
        for k in start..end {
            let v = &mut reassembled.values_mut()[k];
            *v *= if a.cols()[k] as usize == row {
                1.5 + rng.next_f64()
            } else {
                0.8
            };
        }
    }
    let mut r = vec![0.0; a.n_rows()];
    for v in &mut r {
        *v = rng.next_f64() - 0.5;
    }
    let r_dev = gpu.upload(&r).unwrap();
    for precision in [Precision::Double, Precision::Mixed] {
        for kind in [PolynomialKind::Chebyshev, PolynomialKind::LeastSquares] {
            let s = settings(kind, 4, precision);
            let mut updated =
                DevicePolynomial::on_device(&gpu, device_matrix(&gpu, &a, 64), &s).unwrap();
            let before = updated.recurrence().hi;
            updated
                .update_values(device_matrix(&gpu, &reassembled, 64))
                .unwrap();
            let fresh =
                DevicePolynomial::on_device(&gpu, device_matrix(&gpu, &reassembled, 64), &s)
                    .unwrap();
            assert_ne!(before, fresh.recurrence().hi, "the bound did not change");
            assert_eq!(updated.recurrence(), fresh.recurrence(), "{s}");
            let z = [&updated, &fresh].map(|p| {
                let z = gpu.zeros::<f64>(a.n_rows()).unwrap();
                p.apply_with(&r_dev, &z, None).unwrap();
                gpu.download(&z).unwrap()
            });
            let differing = z[0]
                .iter()
                .zip(&z[1])
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            println!(
                "{s}: bound {before} -> {}, {differing} values differ",
                fresh.recurrence().hi
            );
            assert_eq!(differing, 0, "{s}");
            // Another pattern (slice height) is refused, naming both.
            let err = updated
                .update_values(device_matrix(&gpu, &reassembled, 32))
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(err.contains("set it up again"), "{err}");
        }
    }
}
