//! SGS-PCG by Eisenstat's trick on the GPU (`gpu::eisenstat`) against its
//! CPU reference (`solve::eisenstat`) on the same colour-contiguous order, and
//! against multicolour symGS-PCG through `solve_with`. Each test prints its
//! measured differences and `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::fvm::testing::random_field;
use fvpoisson::gpu::eisenstat::DeviceEisenstat;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuSolveOptions};
use fvpoisson::gpu::smooth::solve_pcg_gpu_with;
use fvpoisson::gpu::test_device;
use fvpoisson::solve::colouring::Colouring;
use fvpoisson::solve::cpu::CpuBackend;
use fvpoisson::solve::eisenstat::{eisenstat_cg, CpuEisenstat, ResidualCheck};
use fvpoisson::solve::precond::Identity;
use fvpoisson::solve::{
    EquilibrationKind, Executor, Preconditioner, PreconditionerKind, SmootherSettings, SolveError,
    SolverControls,
};
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::random_symmetric;
use fvpoisson::sparse::Csr;

/// Real FVM systems (perturbed tets, a hex box, a 2-D box, a polyhedral
/// OpenFOAM mesh, a Gmsh prism mesh) and a random SPD matrix, each with a
/// random right-hand side.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    let mut all: Vec<(String, Csr, Vec<f64>)> = [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:20x20x20",
        "box:80x80x1:2d",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ]
    .into_iter()
    .map(|spec| {
        let (a, _) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let b = random_field(a.n_rows(), 5);
        (spec.to_string(), a, b)
    })
    .collect();
    let a = random_symmetric(3000, 6, 8);
    let b = random_field(3000, 6);
    all.push(("random 3000".into(), a, b));
    all
}

/// `a` in RCM order renumbered colour by colour (Jones–Plassmann, computed
/// on the host: the GPU computes the same colours), its colouring and b.
fn colour_contiguous(a: &Csr, b: &[f64]) -> (Csr, Colouring, Vec<f64>) {
    let rcm = reverse_cuthill_mckee(a);
    let a_rcm = rcm.apply_symmetric(a);
    let (p, colouring) = Colouring::jones_plassmann(&a_rcm).contiguous();
    (
        p.apply_symmetric(&a_rcm),
        colouring,
        p.to_new(&rcm.to_new(b)),
    )
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn eisenstat_sgs_matches_the_cpu_on_the_same_colouring() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-8, 2000);
    for (name, a, b) in systems() {
        let (a, colouring, b) = colour_contiguous(&a, &b);
        let n = a.n_rows();
        let x0: Vec<f64> = (0..n).map(|i| ((i * 7) % 13) as f64 * 0.01).collect();
        let every = ResidualCheck::EveryIteration;
        let cpu_backend = CpuEisenstat::new(&a).unwrap();
        let mut x_cpu = x0.clone();
        let cpu = eisenstat_cg(&cpu_backend, &b, &mut x_cpu, &controls, every, "p").unwrap();
        let x_cpu_every = x_cpu.clone();
        let options = GpuSolveOptions::default();
        let cg = GpuCgBackend::new(&gpu, &a, false, None, &options).unwrap();
        let eis = DeviceEisenstat::new(&gpu, &cg, &a, &colouring).unwrap();
        let b_dev = cg.upload(&b).unwrap();
        let mut x_dev = cg.upload(&x0).unwrap();
        let dev = eisenstat_cg(&eis, &b_dev, &mut x_dev, &controls, every, "p").unwrap();
        let x_gpu = cg.download(&x_dev).unwrap();
        let history = max_rel_diff(&dev.history, &cpu.history);
        let dx = max_rel_diff(&x_gpu, &x_cpu);
        println!(
            "{name}: {} colours, {} iterations (CPU {}), residual history max rel diff \
             {history:.2e}, x {dx:.2e}",
            colouring.n_colours(),
            dev.iterations,
            cpu.iterations
        );
        assert!(cpu.converged && dev.converged, "{name}");
        assert!(dev.iterations.abs_diff(cpu.iterations) <= 1, "{name}");
        let k = dev.history.len().min(cpu.history.len());
        for i in 0..k {
            let (g, c) = (dev.history[i], cpu.history[i]);
            // Round-off grows with the iterations; relative to the start.
            assert!(
                (g - c).abs() <= 1e-9 * cpu.history[0],
                "{name} iteration {i}: {g} vs {c}"
            );
        }
        assert!(dx < 1e-7, "{name}: x {dx}");
        // The carried residual is the true residual of the returned x (with
        // OpenFOAM's normFactor of the initial x).
        let identity = Identity(n);
        let cpu_cg = CpuBackend::new(&a, &identity);
        let mut r = vec![0.0; n];
        let norm_factor = cpu_cg.initialize(&b, &x0, &mut r).norm_factor;
        let true_residual =
            |x: &Vec<f64>, r: &mut Vec<f64>| cpu_cg.initialize(&b, x, r).residual_sum / norm_factor;
        let t = true_residual(&x_gpu, &mut r);
        println!(
            "{name}: final residual {:.3e}, true {t:.3e}",
            dev.final_residual
        );
        assert!(
            (t - dev.final_residual).abs() <= 1e-3 * dev.final_residual + 1e-10 * dev.history[0],
            "{name}: {t} vs {}",
            dev.final_residual
        );
        // Predicted checks: converged on the true residual, a few iterations more at most.
        let predicted = ResidualCheck::Predicted { max_interval: 10 };
        let mut x_dev = cg.upload(&x0).unwrap();
        let dev_p = eisenstat_cg(&eis, &b_dev, &mut x_dev, &controls, predicted, "p").unwrap();
        let mut x_cpu = x0.clone();
        let cpu_p = eisenstat_cg(&cpu_backend, &b, &mut x_cpu, &controls, predicted, "p").unwrap();
        println!(
            "{name}: predicted checks: {} iterations, {} checks (CPU {} iterations)",
            dev_p.iterations,
            dev_p.history.len() - 1,
            cpu_p.iterations
        );
        assert!(dev_p.converged, "{name}");
        assert!(
            dev_p.iterations >= dev.iterations && dev_p.iterations <= dev.iterations + 10,
            "{name}"
        );
        let x_gpu = cg.download(&x_dev).unwrap();
        let t = true_residual(&x_gpu, &mut r);
        let close = |t: f64, f: f64| (t - f).abs() <= 1e-3 * f + 1e-10 * dev.history[0];
        assert!(close(t, dev_p.final_residual), "{name}: true residual {t}");
        // Chains of up to 8 iterations on the device (β there too) against
        // the CPU's chunked loop.
        let mut chained = DeviceEisenstat::new(&gpu, &cg, &a, &colouring).unwrap();
        chained.set_max_chunk(8);
        let mut x_dev = cg.upload(&x0).unwrap();
        let dev_c = eisenstat_cg(&chained, &b_dev, &mut x_dev, &controls, predicted, "p").unwrap();
        let cpu_chunked = CpuEisenstat::new(&a).unwrap().with_max_chunk(8);
        let mut x_cpu = x0.clone();
        let cpu_c = eisenstat_cg(&cpu_chunked, &b, &mut x_cpu, &controls, predicted, "p").unwrap();
        let x_gpu = cg.download(&x_dev).unwrap();
        let dx = max_rel_diff(&x_gpu, &x_cpu);
        println!(
            "{name}: chains of up to 8: {} iterations, {} checks (CPU {} iterations), x {dx:.2e}",
            dev_c.iterations,
            dev_c.history.len() - 1,
            cpu_c.iterations
        );
        assert!(dev_c.converged, "{name}");
        assert!(
            dev_c.iterations >= dev.iterations && dev_c.iterations <= dev.iterations + 8,
            "{name}"
        );
        if dev_c.iterations == cpu_c.iterations {
            assert!(dx < 1e-7, "{name}: x {dx}");
        }
        let t = true_residual(&x_gpu, &mut r);
        assert!(close(t, dev_c.final_residual), "{name}: true residual {t}");
        // Rows sorted by length inside the colours (x and r in a's order):
        // the same preconditioner, iterates equal to round-off.
        let sorted = DeviceEisenstat::with_sorted_rows(&gpu, &cg, &a, &colouring, 256).unwrap();
        let mut x_dev = cg.upload(&x0).unwrap();
        let dev_s = eisenstat_cg(&sorted, &b_dev, &mut x_dev, &controls, every, "p").unwrap();
        let x_gpu = cg.download(&x_dev).unwrap();
        let dx = max_rel_diff(&x_gpu, &x_cpu_every);
        println!(
            "{name}: sorted rows: {} iterations (colour order {}), x {dx:.2e}",
            dev_s.iterations, dev.iterations
        );
        assert!(dev_s.converged, "{name}");
        assert!(dev_s.iterations.abs_diff(dev.iterations) <= 1, "{name}");
        if dev_s.iterations == dev.iterations {
            assert!(dx < 1e-7, "{name}: x {dx}");
        }
        let t = true_residual(&x_gpu, &mut r);
        assert!(
            (t - dev_s.final_residual).abs()
                <= 1e-3 * dev_s.final_residual + 1e-10 * dev_s.history[0],
            "{name}: sorted rows: true {t} vs {}",
            dev_s.final_residual
        );
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn solve_with_eisenstat_sgs_takes_multicolour_symgs_iterations() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-8, 2000);
    let options = GpuSolveOptions::default();
    let eisenstat: Preconditioner = "eisenstatSGS".parse().unwrap();
    assert_eq!(eisenstat, PreconditionerKind::EisenstatSgs);
    let symgs =
        Preconditioner::Smoother(SmootherSettings::named("multicolourSymGaussSeidel").unwrap());
    for (name, a, b) in systems() {
        let n = a.n_rows();
        let none = EquilibrationKind::None;
        let mut x_eis = vec![0.0; n];
        let eis = solve_pcg_gpu_with(
            &gpu,
            &eisenstat,
            DeviceSolve::new(&a, &b, &mut x_eis, &controls, &options)
                .equilibrated(&none)
                .named("p"),
        )
        .unwrap();
        let mut x_sgs = vec![0.0; n];
        let sgs = solve_pcg_gpu_with(
            &gpu,
            &symgs,
            DeviceSolve::new(&a, &b, &mut x_sgs, &controls, &options)
                .equilibrated(&none)
                .named("p"),
        )
        .unwrap();
        let dx = max_rel_diff(&x_eis, &x_sgs);
        println!(
            "{name}: Eisenstat {} iterations, multicolour symGS {} iterations, x max rel diff {dx:.2e}",
            eis.iterations, sgs.iterations
        );
        // The default checks the true residual when predicted converged: the
        // same iteration as the carried residual up to round-off (one less)
        // or a few more where the prediction is late.
        assert!(eis.converged, "{name}");
        assert!(
            eis.iterations + 1 >= sgs.iterations && eis.iterations <= sgs.iterations + 5,
            "{name}"
        );
        if eis.iterations == sgs.iterations {
            assert!(dx < 1e-6, "{name}: {dx}");
        }
        let mut r = vec![0.0; n];
        let identity = Identity(n);
        let cpu_cg = CpuBackend::new(&a, &identity);
        let norm_factor = cpu_cg.initialize(&b, &vec![0.0; n], &mut r).norm_factor;
        let t = cpu_cg.initialize(&b, &x_eis, &mut r).residual_sum / norm_factor;
        assert!(
            (t - eis.final_residual).abs() <= 1e-3 * eis.final_residual + 1e-10 * eis.history[0],
            "{name}: true residual {t} vs {}",
            eis.final_residual
        );
        // Equilibrated: the multicolour symGS preconditioner (the same M) runs.
        let mut x_eq = vec![0.0; n];
        let eq = solve_pcg_gpu_with(
            &gpu,
            &eisenstat,
            DeviceSolve::new(&a, &b, &mut x_eq, &controls, &options)
                .equilibrated(&EquilibrationKind::Jacobi)
                .named("p"),
        )
        .unwrap();
        assert!(eq.converged, "{name} equilibrated");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn bad_diagonals_are_errors_on_the_gpu() {
    let Some(gpu) = test_device() else { return };
    // Symmetric, row 1's diagonal negative.
    let a = Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![2., -1., -1., -3.]).unwrap();
    let mut x = vec![0.0; 2];
    let err = solve_pcg_gpu_with(
        &gpu,
        &PreconditionerKind::EisenstatSgs.into(),
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
    println!("{err}");
    assert!(
        matches!(err, SolveError::NonPositiveDiagonal { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("row"), "{err}");
}
