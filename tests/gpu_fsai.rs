//! GPU FSAI against its CPU reference (`solve::fsai`): the application
//! z = Gᵀ (G r) of a host-set-up G on the device equals the CPU's (the same
//! sums in the same order, so to rounding-free equality; asserted to 1e-14
//! relative), gated by PCG's `done` flag, and PCG with FSAI takes the CPU's
//! iterations (±1: the device's dot products reduce in another order). Each
//! test prints a compact table, and `skipped: no CUDA device` without a GPU
//! (unless FVPOISSON_REQUIRE_GPU=1).

mod common;

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::amg::DeviceCsr;
use fvpoisson::gpu::fsai::{DeviceFsai, FsaiStorage};
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::smooth::{solve_pcg_gpu_with, DevicePreconditioner};
use fvpoisson::gpu::test_device;
use fvpoisson::solve::fsai::{
    fsai_setup, AdaptivePattern, FsaiPattern, FsaiPreconditioner, FsaiSettings, FsaiStop,
};
use fvpoisson::solve::{
    solve_pcg_scaled, EquilibrationKind, LinearOperator, Precision, Preconditioner, SolverControls,
};
use fvpoisson::sparse::testing::random_vector;
use fvpoisson::sparse::testing::{max_rel_diff, relative_residual};
use fvpoisson::sparse::{Csr, RowOrdering};

/// Real FVM systems (perturbed renumbered tets, a hex box, a 2-D box, a
/// polyhedral OpenFOAM mesh, a Gmsh prism mesh) in RCM order, and random SPD
/// matrices.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    common::random_and_rcm_systems(&[
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:20x20x20",
        "box:80x80x1:2d",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ])
}

fn variants() -> Vec<FsaiSettings> {
    vec![
        FsaiSettings::default(),
        FsaiSettings {
            pattern: FsaiPattern::Adaptive(AdaptivePattern {
                steps: 20,
                step_size: 1,
                epsilon: 1e-3,
                stop: FsaiStop::Stagnation,
            }),
            postfilter: 0.02,
            precision: Precision::Mixed,
        },
        FsaiSettings {
            pattern: FsaiPattern::Static {
                power: 2,
                prefilter: 0.0,
            },
            ..FsaiSettings::default()
        },
    ]
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn apply_equals_the_cpu_reference() {
    let Some(gpu) = test_device() else { return };
    println!("system | settings | mu | GPU vs CPU | SELL vs CPU | gated off leaves z");
    for (name, a, _) in systems() {
        let r = random_vector(a.n_rows(), 7);
        for s in variants() {
            let factor = fsai_setup(&a, &s).unwrap();
            let device = DeviceFsai::from_host(&gpu, &factor).unwrap();
            // G and Gᵀ on the device are the host's.
            assert_eq!(device.g().download(&gpu).unwrap(), factor.g);
            assert_eq!(device.gt().download(&gpu).unwrap(), factor.g.transpose());
            let cpu = FsaiPreconditioner::from_factor(factor.clone());
            let mut z_cpu = vec![0.0; r.len()];
            cpu.apply(&r, &mut z_cpu);
            let r_dev = gpu.upload(&r).unwrap();
            let z_dev = gpu.zeros::<f64>(r.len()).unwrap();
            device.apply(&r_dev, &z_dev).unwrap();
            let z_gpu = gpu.download(&z_dev).unwrap();
            let d = max_rel_diff(&z_gpu, &z_cpu);
            // SELL-32 storage: the same sums in the same order.
            let sell = DeviceFsai::from_host(&gpu, &factor)
                .unwrap()
                .with_storage(FsaiStorage::Sell)
                .unwrap();
            assert_eq!(sell.storage(), FsaiStorage::Sell);
            assert!(sell.stored_slots() >= 2 * factor.g.nnz());
            let z_sell = gpu.zeros::<f64>(r.len()).unwrap();
            sell.apply(&r_dev, &z_sell).unwrap();
            let d_sell = max_rel_diff(&gpu.download(&z_sell).unwrap(), &z_cpu);
            // Gated: done = 0 runs, done = 1 leaves z as it was.
            let open = gpu.upload(&[0.0]).unwrap();
            let shut = gpu.upload(&[1.0]).unwrap();
            let z2 = gpu.zeros::<f64>(r.len()).unwrap();
            device.apply_gated(&r_dev, &z2, &open).unwrap();
            assert_eq!(gpu.download(&z2).unwrap(), z_gpu, "{name} {s}");
            let z3 = gpu.upload(&vec![5.0; r.len()]).unwrap();
            device.apply_gated(&r_dev, &z3, &shut).unwrap();
            let untouched = gpu.download(&z3).unwrap().iter().all(|&v| v == 5.0);
            println!(
                "{name} | {s} | {:.3} | {d:.1e} | {d_sell:.1e} | {untouched}",
                factor.stats.density
            );
            assert!(d <= 1e-14, "{name} {s}: {d:e}");
            assert!(d_sell <= 1e-14, "{name} {s}: SELL {d_sell:e}");
            assert!(untouched, "{name} {s}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn from_device_takes_g_and_its_transpose() {
    let Some(gpu) = test_device() else { return };
    let (a, _) = poisson_system("box:14x14x14:tet:perturb=0.2:renumber").unwrap();
    let factor = fsai_setup(&a, &FsaiSettings::default()).unwrap();
    let g = DeviceCsr::upload(&gpu, &factor.g).unwrap();
    let gt = DeviceCsr::upload(&gpu, &factor.g.transpose()).unwrap();
    let device = DeviceFsai::from_device(&gpu, g, gt).unwrap();
    let r = random_vector(a.n_rows(), 3);
    let (r_dev, z_dev) = (gpu.upload(&r).unwrap(), gpu.zeros::<f64>(r.len()).unwrap());
    device.apply(&r_dev, &z_dev).unwrap();
    let mut z = vec![0.0; r.len()];
    FsaiPreconditioner::from_factor(factor.clone()).apply(&r, &mut z);
    assert_eq!(gpu.download(&z_dev).unwrap(), z);
    // A transpose of another size is refused.
    let other = fsai_setup(
        &poisson_system("box:4x4x4").unwrap().0,
        &FsaiSettings::default(),
    )
    .unwrap();
    let g = DeviceCsr::upload(&gpu, &factor.g).unwrap();
    let gt = DeviceCsr::upload(&gpu, &other.g).unwrap();
    assert!(DeviceFsai::from_device(&gpu, g, gt).is_err());
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    // The CPU's row order: G depends on it.
    let options = GpuSolveOptions {
        ordering: RowOrdering::Natural,
        ..GpuSolveOptions::default()
    };
    let controls = SolverControls::absolute(1e-12, 20_000);
    println!(
        "mesh | preconditioner | CPU iterations | GPU iterations | x difference | GPU ‖b−Ax‖/‖b‖"
    );
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:20x20x20",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ] {
        let (a, b) = poisson_system(spec).unwrap();
        for s in variants() {
            let p = Preconditioner::Fsai(s);
            let eq = EquilibrationKind::None;
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
                "{spec} | {p} | {} | {} | {d:.1e} | {residual:.2e}",
                cpu.iterations, dev.iterations
            );
            assert!(dev.converged, "{spec} {p}");
            assert!(
                dev.iterations.abs_diff(cpu.iterations) <= 1,
                "{spec} {p}: GPU {} vs CPU {} iterations",
                dev.iterations,
                cpu.iterations
            );
            assert!(d < 1e-8, "{spec} {p}: {d:e}");
        }
    }
}

/// Replacing the preconditioner of a backend whose PCG loop was captured into
/// a CUDA graph must drop that graph (it holds the old preconditioner's
/// kernels and buffers): the second solve takes the iterations of a fresh
/// backend with the new preconditioner, not the old one's.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_new_preconditioner_replaces_the_captured_graph() {
    use fvpoisson::gpu::pcg::{GpuCgBackend, LaunchMode};
    use fvpoisson::solve::pcg;
    let Some(gpu) = test_device() else { return };
    let (a, b) = poisson_system("box:16x16x16").unwrap();
    let options = GpuSolveOptions {
        launches: LaunchMode::Graph,
        ..GpuSolveOptions::default()
    };
    let controls = SolverControls::absolute(1e-10, 5_000);
    let weak = FsaiSettings {
        pattern: FsaiPattern::Static {
            power: 1,
            prefilter: 0.0,
        },
        ..FsaiSettings::default()
    };
    let strong = FsaiSettings {
        pattern: FsaiPattern::Static {
            power: 3,
            prefilter: 0.0,
        },
        ..FsaiSettings::default()
    };
    let device_fsai =
        |s: &FsaiSettings| DeviceFsai::from_host(&gpu, &fsai_setup(&a, s).unwrap()).unwrap();
    let solve = |backend: &GpuCgBackend| {
        let rhs = backend.upload(&b).unwrap();
        let mut x = backend.upload(&vec![0.0; a.n_rows()]).unwrap();
        pcg(backend, &rhs, &mut x, &controls, "p")
            .unwrap()
            .iterations
    };
    let mut reused = GpuCgBackend::new(&gpu, &a, false, None, &options).unwrap();
    reused.set_preconditioner(Box::new(device_fsai(&weak)));
    let weak_its = solve(&reused);
    reused.set_preconditioner(Box::new(device_fsai(&strong)));
    let reused_its = solve(&reused);
    let mut fresh = GpuCgBackend::new(&gpu, &a, false, None, &options).unwrap();
    fresh.set_preconditioner(Box::new(device_fsai(&strong)));
    let fresh_its = solve(&fresh);
    println!("power 1: {weak_its}, power 3 reused backend: {reused_its}, fresh: {fresh_its}");
    assert_ne!(
        weak_its, fresh_its,
        "the two preconditioners must differ to test anything"
    );
    assert_eq!(reused_its, fresh_its);
}
