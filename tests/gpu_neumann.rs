//! The truncated Neumann preconditioner on the GPU against its CPU reference
//! (`solve::neumann`): the applications agree to rounding on random
//! matrices and real meshes for Neu1, Neu2 and a higher order, the
//! application captures into a CUDA graph, and PCG with `neu1` / `neu2` on
//! the device (through the registry, as a case runs it) converges to the
//! CPU's solution in the CPU's iterations. Prints `skipped: no CUDA device`
//! without a GPU (unless FVPOISSON_REQUIRE_GPU=1).

use std::rc::Rc;

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::neumann::DeviceNeumann;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::smooth::{solve_pcg_gpu_with, DevicePreconditioner};
use fvpoisson::gpu::test_device;
use fvpoisson::solve::neumann::{NeumannSettings, TruncatedNeumann};
use fvpoisson::solve::{
    solve_pcg_scaled, EquilibrationKind, LinearOperator, Preconditioner, SolverControls,
};
use fvpoisson::sparse::ordering::RowOrdering;
use fvpoisson::sparse::testing::{max_rel_diff, random_symmetric, random_vector};
use fvpoisson::sparse::{Csr, ModSell};

fn systems() -> Vec<(&'static str, Csr)> {
    vec![
        (
            "tets",
            poisson_system("box:12x12x12:tet:perturb=0.2:renumber")
                .unwrap()
                .0,
        ),
        ("hex", poisson_system("box:16x16x16").unwrap().0),
        (
            "polyhedra",
            poisson_system("meshes/foam/polydual").unwrap().0,
        ),
        ("random", random_symmetric(3000, 8, 17)),
    ]
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn applications_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    println!("system | order | GPU vs CPU");
    for (name, a) in systems() {
        let m = ModSell::from_csr(&a, 256).unwrap();
        let matrix = Rc::new(DeviceModSell::upload(&gpu, &m).unwrap());
        let r = random_vector(a.n_rows(), 3);
        let r_dev = gpu.upload(&r).unwrap();
        for order in [1, 2, 5] {
            let settings = NeumannSettings { order };
            let cpu = TruncatedNeumann::new(&a, &settings).unwrap();
            let mut z = vec![0.0; a.n_rows()];
            cpu.apply(&r, &mut z);
            let dev = DeviceNeumann::new(&gpu, &a, Rc::clone(&matrix), &settings).unwrap();
            assert_eq!(dev.order(), order);
            let z_dev = gpu.zeros::<f64>(a.n_rows()).unwrap();
            dev.apply(&r_dev, &z_dev).unwrap();
            let diff = max_rel_diff(&gpu.download(&z_dev).unwrap(), &z);
            println!("{name} | {order} | {diff:.2e}");
            assert!(diff < 1e-12, "{name} {settings}: {diff}");
            // Only kernels on the stream: the application can be captured
            // (not while FVPOISSON_GPU_SYNC=1 synchronises every launch).
            if !gpu.syncs_each_launch() {
                gpu.capture(|| dev.apply(&r_dev, &z_dev))
                    .unwrap_or_else(|e| panic!("{name} {settings}: capture failed: {e}"));
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn bad_settings_and_matrices_are_refused_as_on_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let a = random_symmetric(50, 4, 2);
    let m = ModSell::from_csr(&a, 32).unwrap();
    let matrix = Rc::new(DeviceModSell::upload(&gpu, &m).unwrap());
    let zero = NeumannSettings { order: 0 };
    let cpu = TruncatedNeumann::new(&a, &zero).err().unwrap().to_string();
    let dev = DeviceNeumann::new(&gpu, &a, Rc::clone(&matrix), &zero)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(dev, cpu);
    // A matrix of another size than the resident one.
    let other = random_symmetric(40, 4, 2);
    let err = DeviceNeumann::new(&gpu, &other, matrix, &NeumannSettings::NEU1)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("40 rows"), "{err}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_neu1_and_neu2_converges_to_the_cpu_solution() {
    let Some(gpu) = test_device() else { return };
    let (a, b) = poisson_system("box:20x20x20:tet:perturb=0.2:renumber").unwrap();
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.0,
        max_iter: 1000,
        min_iter: 0,
    };
    let none = EquilibrationKind::None;
    for spec in ["neu1", "neu2", "truncatedNeumann:order=3"] {
        let p: Preconditioner = spec.parse().unwrap();
        let mut x_cpu = vec![0.0; a.n_rows()];
        let cpu = solve_pcg_scaled(&a, p, &none, &b, &mut x_cpu, &controls, "p").unwrap();
        assert!(cpu.converged, "{spec}");
        // In the CPU's row order M is the CPU's: the same iterations up to
        // rounding. In the default (RCM) order L, and so M, differ.
        for ordering in [RowOrdering::Natural, RowOrdering::default()] {
            let options = GpuSolveOptions {
                ordering,
                ..GpuSolveOptions::default()
            };
            let mut x_gpu = vec![0.0; a.n_rows()];
            let dev = solve_pcg_gpu_with(
                &gpu,
                &p,
                DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options)
                    .equilibrated(&none)
                    .named("p"),
            )
            .unwrap();
            println!(
                "PCG {p}, {ordering:?} rows: CPU {} iterations, GPU {}",
                cpu.iterations, dev.iterations
            );
            assert!(dev.converged, "{spec} {ordering:?}");
            assert!(max_rel_diff(&x_gpu, &x_cpu) < 1e-6, "{spec} {ordering:?}");
            if ordering == RowOrdering::Natural {
                assert!(
                    dev.iterations.abs_diff(cpu.iterations) <= 2,
                    "{spec}: {} vs {}",
                    dev.iterations,
                    cpu.iterations
                );
            }
        }
    }
}
