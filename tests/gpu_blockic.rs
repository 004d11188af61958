//! Block-IC on the GPU (`gpu::block_jacobi::DeviceBlockIc`, `kernels/block_ic.cu`)
//! against the CPU reference (`solve::block_jacobi::BlockIc`): the same
//! matrix in block Jacobi's grown-block order and the same block size, so the
//! factors, the applications and the smoother sweeps must agree bit for bit in
//! f64, the mixed-precision application must equal a CPU f32 evaluation of the
//! same operations, and PCG must take the same iterations (mixed precision:
//! the same tolerance). Also the device Gershgorin bound against the host's.
//! Prints `skipped: no CUDA device` without a GPU (unless FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::block_jacobi::DeviceBlockIc;
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{GpuSolveOptions, GpuSolver};
use fvpoisson::gpu::polynomial::device_gershgorin;
use fvpoisson::gpu::test_device;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::block_jacobi::{BlockIc, BlockJacobi};
use fvpoisson::solve::polynomial::gershgorin_bound;
use fvpoisson::solve::Smoother;
use fvpoisson::solve::{
    solve_pcg_scaled, EquilibrationKind, InnerSolver, LinearOperator, Precision, Preconditioner,
    SmootherSettings, SolveError, SolverControls,
};
use fvpoisson::sparse::blocks::block_diagonal;
use fvpoisson::sparse::testing::random_vector;
use fvpoisson::sparse::{Csr, ModSell};

const MESHES: [&str; 3] = [
    "box:16x16x16",
    "box:14x14x14:tet:perturb=0.2:renumber",
    "meshes/foam/polydual",
];

fn block_ic(name: &str, h: usize) -> SmootherSettings {
    let mut s = SmootherSettings::named(name).unwrap();
    s.block.block_size = h;
    s
}

/// Each mesh's Poisson matrix in block-IC's grown-block order for `h`.
fn systems(h: usize) -> Vec<(String, Csr)> {
    MESHES
        .iter()
        .map(|spec| {
            let (a, _) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            let p = block_ic("blockIC", h).ordering(&a).expect("block order");
            (spec.to_string(), p.apply_symmetric(&a))
        })
        .collect()
}

fn upload(gpu: &Gpu, a: &Csr, h: usize) -> DeviceModSell {
    DeviceModSell::upload(gpu, &ModSell::from_csr(a, h).unwrap()).unwrap()
}

fn differing(a: &[f64], b: &[f64]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn factors_applications_and_sweeps_equal_the_cpu_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    // 96: a slice height that is not a power of two.
    for h in [64, 96, 256] {
        for (name, a) in systems(h) {
            let n = a.n_rows();
            let m = upload(&gpu, &a, h);
            let r = random_vector(n, 3);
            let x0 = random_vector(n, 4);
            for inner in [InnerSolver::Dic, InnerSolver::Ic0] {
                let cpu = BlockIc::new(&a, inner, h).unwrap();
                let dev = DeviceBlockIc::new(&gpu, &a, &m, inner, Precision::Double).unwrap();
                let factor = dev.download_factor(&gpu, &a, &m).unwrap();
                let factor_diffs = differing(&factor, &cpu.factor());
                // Application z = M⁻¹ r.
                let r_dev = gpu.upload(&r).unwrap();
                let z_dev = gpu.zeros::<f64>(n).unwrap();
                dev.sweep(&gpu, &m, &r_dev, None, &z_dev, None).unwrap();
                let mut z_cpu = vec![0.0; n];
                cpu.apply(&r, &mut z_cpu);
                let z_diffs = differing(&gpu.download(&z_dev).unwrap(), &z_cpu);
                // Smoother sweep x + M⁻¹ (b − A x) from a nonzero x.
                let settings = {
                    let mut s = block_ic("blockIC", h);
                    s.block.inner = inner;
                    s.block
                };
                let mut x_cpu = x0.clone();
                BlockJacobi::new(&a, settings, 1.0)
                    .unwrap()
                    .smooth(&r, &mut x_cpu, 1);
                let x_dev = gpu.upload(&x0).unwrap();
                let out = gpu.zeros::<f64>(n).unwrap();
                dev.sweep(&gpu, &m, &r_dev, Some(&x_dev), &out, None)
                    .unwrap();
                let sweep_diffs = differing(&gpu.download(&out).unwrap(), &x_cpu);
                let (fw, bw) = dev.levels();
                println!(
                    "{name}, {h}-row blocks, {inner:?}: {fw}/{bw} levels per block; differing: \
                     factor {factor_diffs}, application {z_diffs}, sweep {sweep_diffs} (n = {n})"
                );
                assert_eq!(factor_diffs, 0, "{name} {inner:?} factor");
                assert_eq!(z_diffs, 0, "{name} {inner:?} application");
                assert_eq!(sweep_diffs, 0, "{name} {inner:?} sweep");
            }
        }
    }
}

/// The mixed-precision application on the host: the CPU's f64 factor and
/// A's values rounded to f32, the sweeps in f32 in the kernel's order.
fn f32_application(a: &Csr, inner: InnerSolver, h: usize, r: &[f64]) -> Vec<f64> {
    let n = a.n_rows();
    let blocks = block_diagonal(a, h);
    let factor = BlockIc::new(a, inner, h).unwrap().factor();
    let (rp, cols) = (blocks.row_ptr(), blocks.cols());
    let mut w = vec![0f32; n];
    let ic0 = inner == InnerSolver::Ic0;
    // DIC: d = 1/d*, off = A; IC(0): d = l_tt, off = L (lower slots).
    let d: Vec<f32> = match ic0 {
        true => factor[blocks.nnz()..].iter().map(|&v| v as f32).collect(),
        false => factor.iter().map(|&v| v as f32).collect(),
    };
    let off: Vec<f32> = match ic0 {
        true => factor[..blocks.nnz()].iter().map(|&v| v as f32).collect(),
        false => blocks.values().iter().map(|&v| v as f32).collect(),
    };
    for i in 0..n {
        let ri = r[i] as f32;
        let lower = (rp[i]..rp[i + 1]).filter(|&s| (cols[s] as usize) < i);
        w[i] = if ic0 {
            let sum = lower.fold(0f32, |acc, s| acc + off[s] * w[cols[s] as usize]);
            (ri - sum) / d[i]
        } else {
            lower.fold(d[i] * ri, |acc, s| {
                acc - (d[i] * off[s]) * w[cols[s] as usize]
            })
        };
    }
    for k in (0..n).rev() {
        let upper = (rp[k]..rp[k + 1]).rev().filter(|&s| cols[s] as usize > k);
        w[k] = if ic0 {
            // l_ik at the transposed slot (i, k) of the block diagonal.
            let acc = upper.fold(w[k], |acc, s| {
                let i = cols[s] as usize;
                acc - off[blocks.slot(i, k).unwrap()] * w[i]
            });
            acc / d[k]
        } else {
            upper.fold(w[k], |acc, s| acc - (d[k] * off[s]) * w[cols[s] as usize])
        };
    }
    w.iter().map(|&v| v as f64).collect()
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_precision_application_equals_an_f32_evaluation() {
    let Some(gpu) = test_device() else { return };
    let h = 256;
    for (name, a) in systems(h) {
        let n = a.n_rows();
        let m = upload(&gpu, &a, h);
        let r = random_vector(n, 5);
        for inner in [InnerSolver::Dic, InnerSolver::Ic0] {
            let dev = DeviceBlockIc::new(&gpu, &a, &m, inner, Precision::Mixed).unwrap();
            // IC(0) keeps its factor in f32 alone: there is no f64 one to read.
            assert_eq!(
                dev.download_factor(&gpu, &a, &m).is_err(),
                inner == InnerSolver::Ic0,
                "{name} {inner:?}"
            );
            let r_dev = gpu.upload(&r).unwrap();
            let z_dev = gpu.zeros::<f64>(n).unwrap();
            dev.sweep(&gpu, &m, &r_dev, None, &z_dev, None).unwrap();
            let z = gpu.download(&z_dev).unwrap();
            let expected = f32_application(&a, inner, h, &r);
            let scale = expected.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            let worst = z
                .iter()
                .zip(&expected)
                .fold(0.0f64, |s, (g, c)| s.max((g - c).abs()));
            println!(
                "{name} {inner:?} mixed: max |GPU - f32 host| / max |z| = {:.2e}, {} entries \
                 differ",
                worst / scale,
                differing(&z, &expected)
            );
            assert!(
                worst <= 1e-6 * scale,
                "{name} {inner:?}: {worst} vs {scale}"
            );
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_block_ic_takes_the_cpu_iterations_and_mixed_reaches_the_tolerance() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-9, 2000);
    let none = EquilibrationKind::None;
    for spec in MESHES {
        let (a, b) = poisson_system(spec).unwrap();
        let n = a.n_rows();
        for name in ["blockDIC", "blockIC"] {
            let settings = block_ic(name, 256);
            let p = Preconditioner::Smoother(settings);
            let mut x_cpu = vec![0.0; n];
            let cpu = solve_pcg_scaled(&a, p, &none, &b, &mut x_cpu, &controls, "p").unwrap();
            let mut solver = GpuSolver::new(&gpu);
            let options = GpuSolveOptions::default();
            let mut x_gpu = vec![0.0; n];
            let dev = solver
                .solve_with(
                    &p,
                    DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options)
                        .equilibrated(&none)
                        .named("p"),
                )
                .unwrap();
            let mut mixed_settings = settings;
            mixed_settings.polynomial.precision = Precision::Mixed;
            let mixed = Preconditioner::Smoother(mixed_settings);
            let mut x_mixed = vec![0.0; n];
            let mixed_perf = solver
                .solve_with(
                    &mixed,
                    DeviceSolve::new(&a, &b, &mut x_mixed, &controls, &options)
                        .equilibrated(&none)
                        .named("p"),
                )
                .unwrap();
            println!(
                "{spec} {name}: CPU {} iterations ({:.3e}), GPU {} ({:.3e}), GPU mixed {} \
                 ({:.3e})",
                cpu.iterations,
                cpu.final_residual,
                dev.iterations,
                dev.final_residual,
                mixed_perf.iterations,
                mixed_perf.final_residual
            );
            assert!(
                cpu.converged && dev.converged && mixed_perf.converged,
                "{spec} {name}"
            );
            assert!(
                cpu.iterations.abs_diff(dev.iterations) <= 1,
                "{spec} {name}: CPU {} GPU {}",
                cpu.iterations,
                dev.iterations
            );
            assert!(
                mixed_perf.final_residual <= controls.tolerance,
                "{spec} {name}"
            );
            assert!(
                mixed_perf.iterations <= dev.iterations + dev.iterations / 10 + 2,
                "{spec} {name}: mixed {} f64 {}",
                mixed_perf.iterations,
                dev.iterations
            );
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_gershgorin_equals_the_host_bound() {
    let Some(gpu) = test_device() else { return };
    for (name, a) in systems(256) {
        let m = upload(&gpu, &a, 256);
        let host = gershgorin_bound(&a).unwrap();
        let device = device_gershgorin(&gpu, &m).unwrap();
        println!("{name}: Gershgorin host {host}, device {device}");
        assert_eq!(host.to_bits(), device.to_bits(), "{name}");
    }
    // A non-positive diagonal is the CPU's error, same row.
    let a = Csr::new(2, vec![0, 1, 3], vec![0, 0, 1], vec![1.0, 0.5, -3.0]).unwrap();
    let err = device_gershgorin(&gpu, &upload(&gpu, &a, 32)).unwrap_err();
    assert_eq!(err, gershgorin_bound(&a).unwrap_err());
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn block_ic_breakdown_is_the_cpu_error() {
    let Some(gpu) = test_device() else { return };
    // [2 -3; -3 2]: positive diagonal, indefinite; one block.
    let a = Csr::new(
        2,
        vec![0, 2, 4],
        vec![0, 1, 0, 1],
        vec![2.0, -3.0, -3.0, 2.0],
    )
    .unwrap();
    let m = upload(&gpu, &a, 32);
    for inner in [InnerSolver::Dic, InnerSolver::Ic0] {
        let err = DeviceBlockIc::new(&gpu, &a, &m, inner, Precision::Double)
            .err()
            .expect("indefinite");
        println!("{inner:?}: {err}");
        assert!(
            matches!(err, SolveError::FactorizationBreakdown { row: 1, .. }),
            "{err}"
        );
        assert_eq!(Some(err), BlockIc::new(&a, inner, 32).err());
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_level_scheduled_ic_equals_an_f32_evaluation_and_converges() {
    use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
    use fvpoisson::gpu::pcg::GpuCgBackend;
    use fvpoisson::gpu::smooth::DevicePreconditioner;
    use fvpoisson::solve::pcg;
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-9, 2000);
    for (name, a) in systems(256) {
        let n = a.n_rows();
        // One block holding every row: block-IC's factor is DIC's / IC(0)'s.
        let whole = n.next_multiple_of(32);
        let r = random_vector(n, 6);
        for (kind, inner) in [
            (IcKind::Dic, InnerSolver::Dic),
            (IcKind::Ic0, InnerSolver::Ic0),
        ] {
            let ic =
                DeviceIncompleteCholesky::with_precision(&gpu, &a, kind, Precision::Mixed).unwrap();
            let r_dev = gpu.upload(&r).unwrap();
            let z_dev = gpu.zeros::<f64>(n).unwrap();
            ic.apply(&r_dev, &z_dev).unwrap();
            let z = gpu.download(&z_dev).unwrap();
            let expected = f32_application(&a, inner, whole, &r);
            let scale = expected.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            let worst = z
                .iter()
                .zip(&expected)
                .fold(0.0f64, |s, (g, c)| s.max((g - c).abs()));
            // PCG (f64) with the f32 sweeps against the f64 ones.
            let b = random_vector(n, 8);
            let solve = |precision| {
                let mut backend =
                    GpuCgBackend::new(&gpu, &a, false, None, &GpuSolveOptions::default()).unwrap();
                let p =
                    DeviceIncompleteCholesky::with_precision(&gpu, &a, kind, precision).unwrap();
                backend.set_preconditioner(Box::new(p));
                let b_dev = backend.upload(&b).unwrap();
                let mut x = backend.upload(&vec![0.0; n]).unwrap();
                pcg(&backend, &b_dev, &mut x, &controls, "p").unwrap()
            };
            let (double, mixed) = (solve(Precision::Double), solve(Precision::Mixed));
            println!(
                "{name} {kind:?} mixed: max |GPU - f32 host| / max |z| = {:.2e}; PCG f64 {} \
                 iterations, mixed {} ({:.3e})",
                worst / scale,
                double.iterations,
                mixed.iterations,
                mixed.final_residual
            );
            assert!(worst <= 1e-6 * scale, "{name} {kind:?}: {worst} vs {scale}");
            assert!(mixed.converged && mixed.final_residual <= controls.tolerance);
            assert!(mixed.iterations <= double.iterations + double.iterations / 10 + 2);
        }
    }
}

/// CPU only: block-IC preconditions PCG on real meshes (fewer iterations
/// than Jacobi, more than the full DIC/IC(0) it approximates block by block).
#[test]
fn cpu_block_ic_pcg_lies_between_jacobi_and_full_incomplete_cholesky() {
    use fvpoisson::solve::PreconditionerKind;
    let controls = SolverControls::absolute(1e-9, 5000);
    let none = EquilibrationKind::None;
    for spec in MESHES {
        let (a, b) = poisson_system(spec).unwrap();
        let iterations = |p: Preconditioner| {
            let mut x = vec![0.0; a.n_rows()];
            let perf = solve_pcg_scaled(&a, p, &none, &b, &mut x, &controls, "p").unwrap();
            assert!(perf.converged, "{spec} {p}");
            perf.iterations
        };
        let jacobi = iterations(PreconditionerKind::Jacobi.into());
        for (name, full) in [
            ("blockDIC", PreconditionerKind::Dic),
            ("blockIC", PreconditionerKind::Ic0),
        ] {
            let blocks = iterations(Preconditioner::Smoother(block_ic(name, 256)));
            let whole = iterations(full.into());
            println!("{spec}: Jacobi {jacobi}, {name} (256-row blocks) {blocks}, {full} {whole}");
            assert!(
                blocks < jacobi,
                "{spec} {name}: {blocks} vs Jacobi {jacobi}"
            );
            assert!(
                whole <= blocks + 2,
                "{spec} {name}: {blocks} vs {full} {whole}"
            );
        }
    }
}

/// Mixed-precision weighted and L1 Jacobi as PCG preconditioners: the f32
/// sweeps equal a host f32 evaluation, PCG reaches the same tolerance.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_jacobi_preconditioners_equal_an_f32_evaluation_and_converge() {
    use fvpoisson::gpu::smooth::{
        DevicePreconditioner, DeviceSmoother, DeviceSmootherPreconditioner,
    };
    use fvpoisson::solve::smoother::{l1_jacobi_scale, PointJacobi};
    use fvpoisson::solve::SmootherKind;
    use std::rc::Rc;
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-9, 5000);
    let none = EquilibrationKind::None;
    for spec in MESHES {
        let (a, b) = poisson_system(spec).unwrap();
        let n = a.n_rows();
        for kind in [SmootherKind::Jacobi, SmootherKind::L1Jacobi] {
            let mut s = SmootherSettings::new(kind);
            s.sweeps = 2;
            s.omega = 0.8;
            s.polynomial.precision = Precision::Mixed;
            // Two sweeps from zero on the host in f32, the kernel's order.
            let scale: Vec<f32> = match kind {
                SmootherKind::Jacobi => PointJacobi::weighted(&a, 0.8).unwrap().scale().to_vec(),
                _ => l1_jacobi_scale(&a).unwrap(),
            }
            .iter()
            .map(|&v| v as f32)
            .collect();
            let r = random_vector(n, 9);
            let r32: Vec<f32> = r.iter().map(|&v| v as f32).collect();
            let x1: Vec<f32> = (0..n).map(|i| scale[i] * r32[i]).collect();
            let x2: Vec<f64> = (0..n)
                .map(|i| {
                    let (cols, vals) = a.row(i);
                    let d = a.slot(i, i).map_or(0.0, |s| a.values()[s]) as f32;
                    let mut res = r32[i] - d * x1[i];
                    for (&c, &v) in cols.iter().zip(vals) {
                        if c as usize != i {
                            res -= (v as f32) * x1[c as usize];
                        }
                    }
                    (x1[i] + scale[i] * res) as f64
                })
                .collect();
            let m = Rc::new(upload(&gpu, &a, 256));
            let smoother = DeviceSmoother::new(&gpu, &a, Rc::clone(&m), &s).unwrap();
            let p = DeviceSmootherPreconditioner::new(smoother, &s);
            let r_dev = gpu.upload(&r).unwrap();
            let z_dev = gpu.zeros::<f64>(n).unwrap();
            p.apply(&r_dev, &z_dev).unwrap();
            let z = gpu.download(&z_dev).unwrap();
            let scale_z = x2.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            let worst = z
                .iter()
                .zip(&x2)
                .fold(0.0f64, |s, (g, c)| s.max((g - c).abs()));
            // PCG, f64 and mixed.
            let mut solver = GpuSolver::new(&gpu);
            let options = GpuSolveOptions::default();
            let mut double_settings = s;
            double_settings.polynomial.precision = Precision::Double;
            let mut solve = |s: SmootherSettings| {
                let mut x = vec![0.0; n];
                let p = Preconditioner::Smoother(s);
                solver
                    .solve_with(
                        &p,
                        DeviceSolve::new(&a, &b, &mut x, &controls, &options)
                            .equilibrated(&none)
                            .named("p"),
                    )
                    .unwrap()
            };
            let (double, mixed) = (solve(double_settings), solve(s));
            println!(
                "{spec} {kind:?} mixed: max |GPU - f32 host| / max |z| = {:.2e}; PCG f64 {} \
                 iterations, mixed {} ({:.3e})",
                worst / scale_z,
                double.iterations,
                mixed.iterations,
                mixed.final_residual
            );
            assert!(worst <= 1e-6 * scale_z, "{spec} {kind:?}: {worst}");
            assert!(mixed.converged && mixed.final_residual <= controls.tolerance);
            assert!(mixed.iterations <= double.iterations + double.iterations / 10 + 2);
        }
    }
}

/// Mixed-precision multicolour symmetric Gauss–Seidel as a PCG
/// preconditioner: equal to a host f32 evaluation with the same colouring,
/// PCG reaches the same tolerance.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_multicolour_gauss_seidel_equals_an_f32_evaluation_and_converges() {
    use fvpoisson::gpu::smooth::{
        DevicePreconditioner, DeviceSmoother, DeviceSmootherPreconditioner,
    };
    use fvpoisson::solve::smoother::sweep_order;
    use fvpoisson::solve::{ColouringKind, SmootherKind, Sweep};
    use std::rc::Rc;
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-9, 5000);
    let none = EquilibrationKind::None;
    for spec in MESHES {
        let (a, b) = poisson_system(spec).unwrap();
        let n = a.n_rows();
        let mut s = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric));
        s.colouring = ColouringKind::JonesPlassmann;
        s.polynomial.precision = Precision::Mixed;
        let m = Rc::new(upload(&gpu, &a, 256));
        let smoother = DeviceSmoother::new(&gpu, &a, Rc::clone(&m), &s).unwrap();
        let colouring = smoother.colouring().unwrap().clone();
        let p = DeviceSmootherPreconditioner::new(smoother, &s);
        let r = random_vector(n, 10);
        let r_dev = gpu.upload(&r).unwrap();
        let z_dev = gpu.zeros::<f64>(n).unwrap();
        p.apply(&r_dev, &z_dev).unwrap();
        let z = gpu.download(&z_dev).unwrap();
        let mut x = vec![0f32; n];
        for k in sweep_order(Sweep::Symmetric, colouring.n_colours()) {
            for &row in colouring.rows_of(k) {
                let i = row as usize;
                let (cols, vals) = a.row(i);
                let mut acc = r[i] as f32;
                let mut d = 0f32;
                for (&c, &v) in cols.iter().zip(vals) {
                    if c as usize == i {
                        d = v as f32;
                    } else {
                        acc -= (v as f32) * x[c as usize];
                    }
                }
                x[i] = acc / d;
            }
        }
        let expected: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let scale = expected.iter().fold(0.0f64, |s, v| s.max(v.abs()));
        let worst = z
            .iter()
            .zip(&expected)
            .fold(0.0f64, |s, (g, c)| s.max((g - c).abs()));
        let mut solver = GpuSolver::new(&gpu);
        let options = GpuSolveOptions::default();
        let mut double_settings = s;
        double_settings.polynomial.precision = Precision::Double;
        let mut solve = |s: SmootherSettings| {
            let mut x = vec![0.0; n];
            let p = Preconditioner::Smoother(s);
            solver
                .solve_with(
                    &p,
                    DeviceSolve::new(&a, &b, &mut x, &controls, &options)
                        .equilibrated(&none)
                        .named("p"),
                )
                .unwrap()
        };
        let (double, mixed) = (solve(double_settings), solve(s));
        println!(
            "{spec} MC-SGS mixed ({} colours): max |GPU - f32 host| / max |z| = {:.2e}; PCG f64 \
             {} iterations, mixed {} ({:.3e})",
            colouring.n_colours(),
            worst / scale,
            double.iterations,
            mixed.iterations,
            mixed.final_residual
        );
        assert!(worst <= 1e-6 * scale, "{spec}: {worst}");
        assert!(mixed.converged && mixed.final_residual <= controls.tolerance);
        assert!(mixed.iterations <= double.iterations + double.iterations / 10 + 2);
    }
}
