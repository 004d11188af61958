//! Level-scheduled incomplete Cholesky on the GPU (`gpu::ic`) against the CPU
//! (`solve::precond::{Dic, Ic0}`): same matrix, same row order, so the factors
//! and the applications must agree bit for bit, and PCG must take the same
//! iterations. Prints `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{solve_pcg_gpu, GpuSolveOptions};
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::test_device;
use fvpoisson::solve::precond::{Dic, Ic0};
use fvpoisson::solve::{
    solve_pcg, EquilibrationKind, LinearOperator, PreconditionerKind, SolveError, SolverControls,
};
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::{random_symmetric, random_vector};
use fvpoisson::sparse::{Csr, RowOrdering};

/// Random SPD matrices and real FVM systems (natural and RCM order) with a
/// random vector.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    let random = |n: usize, seed: u64| random_vector(n, seed ^ 0x5eed);
    let mut all: Vec<(String, Csr, Vec<f64>)> = [(1usize, 1u64), (1000, 2), (30_011, 3)]
        .into_iter()
        .map(|(n, seed)| {
            (
                format!("random n = {n}"),
                random_symmetric(n, 8, seed),
                random(n, seed),
            )
        })
        .collect();
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:40x30x1:2d",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ] {
        let (a, _) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let name = spec.rsplit('/').next().unwrap();
        let r = random(a.n_rows(), 7);
        let p = reverse_cuthill_mckee(&a);
        all.push((format!("{name} RCM"), p.apply_symmetric(&a), p.to_new(&r)));
        all.push((name.to_string(), a, r));
    }
    all
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn factors_and_applications_equal_the_cpu_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    for (name, a, r) in systems() {
        let n = a.n_rows();
        let dic = Dic::new(&a).unwrap();
        let ic0 = Ic0::new(&a).unwrap();
        for (kind, cpu_factor, cpu) in [
            (
                IcKind::Dic,
                dic.reciprocal_diagonal().to_vec(),
                &dic as &dyn LinearOperator,
            ),
            (IcKind::Ic0, ic0.factor(), &ic0 as &dyn LinearOperator),
        ] {
            let m = DeviceIncompleteCholesky::new(&gpu, &a, kind).unwrap();
            let (forward, backward) = m.levels();
            let factor = m.download_factor().unwrap();
            let factor_diffs = factor
                .iter()
                .zip(&cpu_factor)
                .filter(|(g, c)| g != c)
                .count();
            let r_dev = gpu.upload(&r).unwrap();
            let z_dev = gpu.zeros::<f64>(n).unwrap();
            m.apply(&r_dev, &z_dev).unwrap();
            let z_gpu = gpu.download(&z_dev).unwrap();
            let mut z_cpu = vec![0.0; n];
            cpu.apply(&r, &mut z_cpu);
            let z_diffs = z_gpu.iter().zip(&z_cpu).filter(|(g, c)| g != c).count();
            println!(
                "{name}: {kind:?}: {forward} forward / {backward} backward levels; factor \
                 entries differing {factor_diffs}, z entries differing {z_diffs} (of {n})"
            );
            assert_eq!(factor.len(), cpu_factor.len());
            assert_eq!(factor_diffs, 0, "{name} {kind:?} factor");
            assert_eq!(z_diffs, 0, "{name} {kind:?} application");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_gpu_incomplete_cholesky_takes_the_cpu_iterations() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-10, 2000);
    for (name, a, b) in systems().into_iter().filter(|(_, a, _)| a.n_rows() > 1) {
        for kind in [PreconditionerKind::Dic, PreconditionerKind::Ic0] {
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_pcg(&a, kind, &b, &mut x_cpu, &controls, "p").unwrap();
            let mut x_gpu = vec![0.0; a.n_rows()];
            let options = GpuSolveOptions {
                ordering: RowOrdering::Natural,
                ..GpuSolveOptions::default()
            };
            let none = EquilibrationKind::None;
            let gpu_perf = solve_pcg_gpu(
                &gpu,
                kind,
                DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options)
                    .equilibrated(&none)
                    .named("p"),
            )
            .unwrap();
            println!(
                "{name}: PCG {kind}: CPU {} iterations (residual {:.3e}), GPU {} ({:.3e})",
                cpu.iterations, cpu.final_residual, gpu_perf.iterations, gpu_perf.final_residual
            );
            assert!(gpu_perf.converged, "{name} {kind}");
            assert!(
                cpu.iterations.abs_diff(gpu_perf.iterations) <= 1,
                "{name} {kind}: CPU {} GPU {}",
                cpu.iterations,
                gpu_perf.iterations
            );
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn breakdown_names_the_row_in_the_callers_order() {
    let Some(gpu) = test_device() else { return };
    // [2 -3; -3 2] is symmetric with a positive diagonal but indefinite: the
    // second pivot 2 − 9/2 is negative.
    let a = Csr::new(
        2,
        vec![0, 2, 4],
        vec![0, 1, 0, 1],
        vec![2.0, -3.0, -3.0, 2.0],
    )
    .unwrap();
    for kind in [IcKind::Dic, IcKind::Ic0] {
        let err = DeviceIncompleteCholesky::new(&gpu, &a, kind)
            .err()
            .expect("indefinite matrix");
        println!("{kind:?}: {err}");
        assert!(
            matches!(err, SolveError::FactorizationBreakdown { row: 1, .. }),
            "{err}"
        );
    }
    let mut x = vec![0.0; 2];
    let err = solve_pcg_gpu(
        &gpu,
        PreconditionerKind::Dic,
        DeviceSolve::new(
            &a,
            &[1.0, 1.0],
            &mut x,
            &SolverControls::default(),
            &GpuSolveOptions::default(),
        )
        .named("p"),
    )
    .unwrap_err();
    assert!(
        matches!(err, SolveError::FactorizationBreakdown { .. }),
        "{err}"
    );
}

/// `precision mixed` on DIC / IC(0) (`Preconditioner::MixedIc`, parsed from
/// `dic:precision=mixed` as `solve-matrix --precond` takes it) reaches the
/// device's f32 sweeps through `GpuSolver::solve_with` (the case and CLI
/// route): PCG reaches the f64 tolerance in about the f64 iterations, with
/// iterates that are not the f64 path's bits.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_precision_dic_and_ic0_settings_reach_the_f32_sweeps() {
    use fvpoisson::gpu::smooth::solve_pcg_gpu_with;
    use fvpoisson::solve::Preconditioner;
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-9, 2000);
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "meshes/foam/polydual",
    ] {
        let (a, b) = poisson_system(spec).unwrap();
        for name in ["dic", "ic0"] {
            let double: Preconditioner = name.parse().unwrap();
            let mixed: Preconditioner = format!("{name}:precision=mixed").parse().unwrap();
            assert!(matches!(mixed, Preconditioner::MixedIc(_)), "{mixed}");
            let solve = |p: &Preconditioner| {
                let mut x = vec![0.0; a.n_rows()];
                let perf = solve_pcg_gpu_with(
                    &gpu,
                    p,
                    DeviceSolve::new(&a, &b, &mut x, &controls, &GpuSolveOptions::default())
                        .named("p"),
                )
                .unwrap();
                (perf, x)
            };
            let ((f64_perf, x64), (mixed_perf, x32)) = (solve(&double), solve(&mixed));
            let differing = x64.iter().zip(&x32).filter(|(u, v)| u != v).count();
            println!(
                "{spec} {mixed}: PCG f64 {} iterations, mixed {} ({:.3e}); {differing} of {} \
                 entries differ from the f64 solve",
                f64_perf.iterations,
                mixed_perf.iterations,
                mixed_perf.final_residual,
                x64.len()
            );
            assert!(mixed_perf.converged && mixed_perf.final_residual <= controls.tolerance);
            assert!(
                mixed_perf.iterations <= f64_perf.iterations + f64_perf.iterations / 10 + 2,
                "{spec} {mixed}"
            );
            assert!(differing > 0, "{spec} {mixed}: the f64 path ran");
        }
    }
}
