//! GPU SSOR against its CPU reference (`solve::ssor`): the device's
//! multicolour sweeps equal the CPU's SSOR in the same colouring (the same
//! sums in the same order without FMA contraction: asserted to 1e-14
//! relative), gated by PCG's `done` flag, and PCG with SSOR on the device
//! (through the registry, `SSOR:omega=…`) converges to the CPU's solution.
//! Prints `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::smooth::{solve_pcg_gpu_with, DevicePreconditioner};
use fvpoisson::gpu::ssor::DeviceSsor;
use fvpoisson::gpu::test_device;
use fvpoisson::solve::colouring::Colouring;
use fvpoisson::solve::ssor::{Ssor, SsorSettings};
use fvpoisson::solve::{
    solve_pcg_scaled, EquilibrationKind, LinearOperator, Preconditioner, SolverControls,
};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::{random_symmetric, random_vector};

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn apply_equals_the_cpu_in_the_same_colouring() {
    let Some(gpu) = test_device() else { return };
    let systems = [
        (
            "tets",
            poisson_system("box:12x12x12:tet:perturb=0.2:renumber")
                .unwrap()
                .0,
        ),
        ("hex", poisson_system("box:16x16x16").unwrap().0),
        ("random", random_symmetric(3000, 7, 5)),
    ];
    println!("system | omega | colours | GPU vs CPU | gated off leaves z");
    for (name, a) in systems {
        let r = random_vector(a.n_rows(), 3);
        let colouring = Colouring::jones_plassmann(&a);
        for omega in [0.8, 1.0, 1.6] {
            let s = SsorSettings { omega };
            let device = DeviceSsor::in_colours(&gpu, &a, &s, &colouring).unwrap();
            let cpu = Ssor::in_colours(&a, omega, &colouring).unwrap();
            let mut z_cpu = vec![0.0; r.len()];
            cpu.apply(&r, &mut z_cpu);
            let r_dev = gpu.upload(&r).unwrap();
            let z_dev = gpu.zeros::<f64>(r.len()).unwrap();
            device.apply(&r_dev, &z_dev).unwrap();
            let z_gpu = gpu.download(&z_dev).unwrap();
            let d = max_rel_diff(&z_gpu, &z_cpu);
            let shut = gpu.upload(&[1.0]).unwrap();
            let z_shut = gpu.upload(&vec![5.0; r.len()]).unwrap();
            device.apply_gated(&r_dev, &z_shut, &shut).unwrap();
            let untouched = gpu.download(&z_shut).unwrap().iter().all(|&v| v == 5.0);
            println!(
                "{name} | {omega} | {} | {d:.1e} | {untouched}",
                device.n_colours()
            );
            assert!(d <= 1e-14, "{name} omega {omega}: {d:e}");
            assert!(untouched, "{name} omega {omega}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_ssor_converges_to_the_cpu_solution() {
    let Some(gpu) = test_device() else { return };
    let (a, b) = poisson_system("box:20x20x20:tet:perturb=0.2:renumber").unwrap();
    let p: Preconditioner = "SSOR:omega=1.5".parse().unwrap();
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.0,
        max_iter: 1000,
        min_iter: 0,
    };
    let none = EquilibrationKind::None;
    let mut x_cpu = vec![0.0; a.n_rows()];
    let cpu = solve_pcg_scaled(&a, p, &none, &b, &mut x_cpu, &controls, "p").unwrap();
    let mut x_gpu = vec![0.0; a.n_rows()];
    let options = GpuSolveOptions::default();
    let gpu_perf = solve_pcg_gpu_with(
        &gpu,
        &p,
        DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options)
            .equilibrated(&none)
            .named("p"),
    )
    .unwrap();
    println!(
        "PCG SSOR(1.5): CPU {} iterations, GPU {} (multicolour order)",
        cpu.iterations, gpu_perf.iterations
    );
    assert!(cpu.converged && gpu_perf.converged);
    assert!(max_rel_diff(&x_gpu, &x_cpu) < 1e-6);
    // Within a factor of two of the natural order's iterations.
    assert!(gpu_perf.iterations <= 2 * cpu.iterations + 5);
}
