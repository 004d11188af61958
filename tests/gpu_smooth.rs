//! GPU smoothers against their CPU references (`solve::smoother`,
//! `solve::block_jacobi`, `solve::colouring`): the same colouring or block
//! partition gives the same iterates to round-off. Each test prints its
//! measured differences and `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

mod common;

use std::rc::Rc;

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::smooth::{
    block_layout, colour_layout, jones_plassmann, solve_pcg_gpu_with, solve_smooth_gpu,
    DeviceSmoother,
};
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::colouring::{jp_priority, Colouring};
use fvpoisson::solve::{
    solve_pcg, solve_pcg_scaled, solve_smooth, ColouringKind, EquilibrationKind, InnerSolver,
    Preconditioner, SmootherKind, SmootherSettings, SolverControls, Sweep,
};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::random_symmetric;
use fvpoisson::sparse::{Csr, ModSell, RowOrdering};

/// Real FVM systems: a perturbed tet box (renumbered), a 2-D box, a polyhedral
/// OpenFOAM mesh and a Gmsh prism mesh. Mesh files relative to the repository
/// root, the working directory of `cargo test` and of the device runs.
const FVM_SPECS: [&str; 4] = [
    "box:14x14x14:tet:perturb=0.2:renumber",
    "box:80x80x1:2d",
    "meshes/foam/polydual",
    "meshes/gmsh/prism_wedge.v22.msh",
];

fn fvm_systems() -> Vec<(String, Csr, Vec<f64>)> {
    common::poisson_systems(&FVM_SPECS)
}

/// Random SPD matrices (uneven rows, far columns) and the FVM systems in RCM
/// order, with a random right-hand side.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    common::random_and_rcm_systems(&FVM_SPECS)
}

fn device_matrix(gpu: &Gpu, a: &Csr, h: usize) -> Rc<DeviceModSell> {
    let m = ModSell::from_csr(a, h).unwrap();
    Rc::new(DeviceModSell::upload(gpu, &m).unwrap())
}

/// `sweeps` sweeps of `settings` from x0 on the GPU (matrix slices of `h`) and
/// on the CPU; returns (GPU x, CPU x).
fn both(
    gpu: &Gpu,
    a: &Csr,
    b: &[f64],
    h: usize,
    settings: &SmootherSettings,
    sweeps: usize,
) -> (Vec<f64>, Vec<f64>) {
    let x0: Vec<f64> = (0..a.n_rows())
        .map(|i| ((i * 7) % 13) as f64 * 0.01)
        .collect();
    let smoother = DeviceSmoother::new(gpu, a, device_matrix(gpu, a, h), settings).unwrap();
    let b_dev = gpu.upload(b).unwrap();
    let x_dev = gpu.upload(&x0).unwrap();
    smoother.smooth(&b_dev, &x_dev, sweeps).unwrap();
    let x_gpu = gpu.download(&x_dev).unwrap();
    let mut x_cpu = x0;
    settings.build(a).unwrap().smooth(b, &mut x_cpu, sweeps);
    (x_gpu, x_cpu)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn jones_plassmann_on_the_gpu_gives_the_cpu_colours() {
    let Some(gpu) = test_device() else { return };
    for (name, a, _) in systems() {
        for h in [32, 512] {
            let (colours, rounds) = jones_plassmann(&gpu, &device_matrix(&gpu, &a, h)).unwrap();
            let cpu = Colouring::jones_plassmann(&a);
            println!(
                "{name} (H = {h}): {} colours on the CPU, {} rounds on the GPU",
                cpu.n_colours(),
                rounds
            );
            assert_eq!(colours, cpu.colours(), "{name}");
            // The rounds run in batches between read-backs; the count is
            // still the rounds that coloured rows.
            assert_eq!(rounds, jones_plassmann_rounds(&a), "{name}: rounds");
        }
    }
}

/// The rounds of Jones–Plassmann on `a`, simulated on the host: each round
/// takes the uncoloured rows that outrank (`jp_priority`, ties by larger
/// index) all their uncoloured neighbours.
fn jones_plassmann_rounds(a: &Csr) -> usize {
    let n = a.n_rows();
    let rank = |v: usize| (jp_priority(v as u32), v);
    let mut coloured = vec![false; n];
    let mut rounds = 0;
    while coloured.iter().any(|&c| !c) {
        let picked: Vec<usize> = (0..n)
            .filter(|&v| {
                !coloured[v]
                    && a.row(v).0.iter().all(|&u| {
                        let u = u as usize;
                        u == v || coloured[u] || rank(u) < rank(v)
                    })
            })
            .collect();
        for v in picked {
            coloured[v] = true;
        }
        rounds += 1;
    }
    rounds
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn point_smoothers_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let mut jacobi = SmootherSettings::new(SmootherKind::Jacobi);
    jacobi.omega = 0.7;
    let mut settings = vec![jacobi, SmootherSettings::new(SmootherKind::L1Jacobi)];
    for sweep in [Sweep::Forward, Sweep::Backward, Sweep::Symmetric] {
        for colouring in [ColouringKind::JonesPlassmann, ColouringKind::Greedy] {
            let mut s = SmootherSettings::new(SmootherKind::GaussSeidel(sweep));
            s.colouring = colouring;
            settings.push(s);
        }
    }
    for (name, a, b) in systems() {
        for s in &settings {
            // Even and odd counts: double-buffered sweeps end in x either way.
            for sweeps in [2, 3] {
                let (x_gpu, x_cpu) = both(&gpu, &a, &b, 128, s, sweeps);
                let d = max_rel_diff(&x_gpu, &x_cpu);
                println!("{name}: {s}: {sweeps} sweeps, max relative difference {d:.2e}");
                assert!(d < 1e-12, "{name} {s} {sweeps}: {d}");
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn preconditioner_applications_match_the_cpu() {
    use fvpoisson::gpu::smooth::{DevicePreconditioner, DeviceSmootherPreconditioner};
    let Some(gpu) = test_device() else { return };
    for (name, a, r) in systems() {
        for s in gpu_preconditioners() {
            let p = s.ordering(&a);
            let (a, r) = match &p {
                Some(p) => (p.apply_symmetric(&a), p.to_new(&r)),
                None => (a.clone(), r.clone()),
            };
            let h = s.block.block_size;
            let smoother = DeviceSmoother::new(&gpu, &a, device_matrix(&gpu, &a, h), &s).unwrap();
            let precond = DeviceSmootherPreconditioner::new(smoother, &s);
            // z starts as NaN: the application must not read it.
            let z_dev = gpu.upload(&vec![f64::NAN; a.n_rows()]).unwrap();
            precond.apply(&gpu.upload(&r).unwrap(), &z_dev).unwrap();
            let z_gpu = gpu.download(&z_dev).unwrap();
            let cpu = fvpoisson::solve::Preconditioner::Smoother(s)
                .build(&a)
                .unwrap();
            let mut z_cpu = vec![0.0; a.n_rows()];
            cpu.apply(&r, &mut z_cpu);
            let d = max_rel_diff(&z_gpu, &z_cpu);
            println!("{name}: z = M^-1 r with {s}: max relative difference {d:.2e}");
            let tolerance = if s.is_linear() { 1e-12 } else { 1e-6 };
            assert!(d < tolerance, "{name} {s}: {d}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn colour_contiguous_layout_sweeps_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    for (name, a, b) in systems() {
        let (p, ordered, colouring) = colour_layout(&gpu, &a, 128).unwrap();
        // Colours are contiguous runs, the same classes as the CPU colouring.
        let n = a.n_rows() as u32;
        assert_eq!(
            colouring.rows(),
            (0..n).collect::<Vec<_>>().as_slice(),
            "{name}"
        );
        let cpu_colours = Colouring::jones_plassmann(&a);
        assert_eq!(
            colouring.colours(),
            p.to_new(cpu_colours.colours()).as_slice()
        );
        for sweep in [Sweep::Forward, Sweep::Symmetric] {
            let mut s = SmootherSettings::new(SmootherKind::GaussSeidel(sweep));
            s.colouring = ColouringKind::JonesPlassmann;
            let x0: Vec<f64> = (0..a.n_rows())
                .map(|i| ((i * 7) % 13) as f64 * 0.01)
                .collect();
            let matrix = device_matrix(&gpu, &ordered, 128);
            let smoother =
                DeviceSmoother::with_colouring(&gpu, &ordered, matrix, &s, Some(colouring.clone()))
                    .unwrap();
            let b_dev = gpu.upload(&p.to_new(&b)).unwrap();
            let x_dev = gpu.upload(&p.to_new(&x0)).unwrap();
            smoother.smooth(&b_dev, &x_dev, 3).unwrap();
            let x_gpu = p.to_old(&gpu.download(&x_dev).unwrap());
            let mut x_cpu = x0;
            s.build(&a).unwrap().smooth(&b, &mut x_cpu, 3);
            let d = max_rel_diff(&x_gpu, &x_cpu);
            println!(
                "{name}: colour-contiguous {s}: {} colours, 3 sweeps, max relative difference \
                 {d:.2e}",
                colouring.n_colours()
            );
            assert!(d < 1e-12, "{name} {s}: {d}");
        }
    }
}

/// ‖b − A x‖₂.
fn residual_norm(a: &Csr, b: &[f64], x: &[f64]) -> f64 {
    let mut ax = vec![0.0; a.n_rows()];
    a.spmv(x, &mut ax);
    ax.iter()
        .zip(b)
        .map(|(ax, b)| (b - ax) * (b - ax))
        .sum::<f64>()
        .sqrt()
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn block_jacobi_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    for (name, a, b) in systems() {
        for h in [64, 512] {
            // The blocks as the solves lay them out (grown over RCM).
            let p = SmootherSettings::block_jacobi(InnerSolver::Jacobi, 0.0, 1, h)
                .ordering(&a)
                .unwrap();
            let (a, b) = (p.apply_symmetric(&a), p.to_new(&b));
            for inner in InnerSolver::ALL {
                // A fixed number of inner steps: the same arithmetic (inner
                // Jacobi damped, to cover omega).
                let mut s = SmootherSettings::block_jacobi(inner, 0.0, 3, h);
                if inner == InnerSolver::Jacobi {
                    s.omega = 0.7;
                }
                let (x_gpu, x_cpu) = both(&gpu, &a, &b, h, &s, 2);
                let d = max_rel_diff(&x_gpu, &x_cpu);
                println!("{name} H = {h}: {s}: 2 sweeps, max relative difference {d:.2e}");
                assert!(d < 1e-11, "{name} {s}: {d}");
                // To a tolerance: a block may stop one step apart where its
                // residual sits on the threshold.
                let s = SmootherSettings::block_jacobi(inner, 1e-6, 200, h);
                let (x_gpu, x_cpu) = both(&gpu, &a, &b, h, &s, 2);
                let d = max_rel_diff(&x_gpu, &x_cpu);
                println!("{name} H = {h}: {s}: 2 sweeps, max relative difference {d:.2e}");
                assert!(d < 1e-5, "{name} {s}: {d}");
                // Asynchronous: the GPU's block order is its own, between
                // synchronous block Jacobi and the CPU's block Gauss-Seidel.
                // Block-IC (inner DIC, IC(0)) is synchronous only, and says so.
                let (_, x_sync) = both(&gpu, &a, &b, h, &s, 4);
                let mut s = s;
                s.block.asynchronous = true;
                if matches!(inner, InnerSolver::Dic | InnerSolver::Ic0) {
                    let m = device_matrix(&gpu, &a, h);
                    let err = DeviceSmoother::new(&gpu, &a, m, &s)
                        .err()
                        .map(|e| e.to_string());
                    assert!(
                        err.as_deref()
                            .is_some_and(|e| e.contains("synchronous only")),
                        "{name} {s}: {err:?}"
                    );
                    continue;
                }
                let (x_gpu, x_cpu) = both(&gpu, &a, &b, h, &s, 4);
                let start = residual_norm(&a, &b, &vec![0.0; a.n_rows()]);
                let [r_gpu, r_cpu, r_sync] =
                    [&x_gpu, &x_cpu, &x_sync].map(|x| residual_norm(&a, &b, x));
                println!(
                    "{name} H = {h}: {s}: 4 sweeps, residual GPU {r_gpu:.3e}, CPU {r_cpu:.3e}, \
                     CPU synchronous {r_sync:.3e} (|b| {start:.3e})"
                );
                let floor = 1e-13 * start;
                assert!(
                    r_gpu.is_finite() && r_gpu <= 2.0 * r_sync.max(floor),
                    "{name} {s}"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn block_layout_falls_back_to_smaller_blocks_when_one_does_not_fit() {
    let Some(gpu) = test_device() else { return };
    // Rows with ~80 near-diagonal neighbours: a 1024-row block needs ~1 MB.
    let a = random_symmetric(20_000, 60, 9);
    let b: Vec<f64> = (0..a.n_rows()).map(|i| (i % 5) as f64).collect();
    let (h, p, ordered) = block_layout(&gpu, &a, 1024).unwrap();
    println!("1024-row blocks requested, {h}-row blocks used");
    assert!((32..1024).contains(&h) && h % 32 == 0);
    assert_eq!(p.apply_symmetric(&a), ordered);
    let s = SmootherSettings::block_jacobi(InnerSolver::Cg, 0.0, 5, h);
    let (x_gpu, x_cpu) = both(&gpu, &ordered, &p.to_new(&b), h, &s, 1);
    let d = max_rel_diff(&x_gpu, &x_cpu);
    println!("fallback H = {h}: max relative difference {d:.2e}");
    assert!(d < 1e-11, "{d}");
    // The full solve takes the same route.
    let mut x = vec![0.0; a.n_rows()];
    let perf = solve_smooth_gpu(
        &gpu,
        &SmootherSettings::block_jacobi(InnerSolver::Cg, 1e-8, 100, 1024),
        DeviceSolve::new(
            &a,
            &b,
            &mut x,
            &SolverControls::absolute(1e-8, 500),
            &GpuSolveOptions::default(),
        )
        .named("p"),
    )
    .unwrap();
    assert!(perf.converged, "{perf:?}");
}

/// The preconditioners the GPU runs (all on the same rows as the CPU: block
/// Jacobi orders both the same way; Gauss-Seidel runs unpermuted on both).
fn gpu_preconditioners() -> Vec<SmootherSettings> {
    let mut mc = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric));
    mc.colouring = ColouringKind::JonesPlassmann;
    let mut jacobi = SmootherSettings::new(SmootherKind::Jacobi);
    jacobi.omega = 0.8;
    jacobi.sweeps = 2;
    vec![
        mc,
        jacobi,
        SmootherSettings::new(SmootherKind::L1Jacobi),
        {
            let mut s = SmootherSettings::block_jacobi(InnerSolver::Jacobi, 0.0, 4, 256);
            s.omega = 0.7;
            s
        },
        SmootherSettings::block_jacobi(InnerSolver::SymGaussSeidel, 0.0, 2, 256),
        SmootherSettings::block_jacobi(InnerSolver::Cg, 1e-3, 50, 256),
    ]
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_gpu_smoother_preconditioners_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let unpermuted = GpuSolveOptions {
        ordering: RowOrdering::Natural,
        ..Default::default()
    };
    for (name, a, b) in fvm_systems() {
        for s in gpu_preconditioners() {
            let p = Preconditioner::Smoother(s);
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_pcg(
                &a,
                p,
                &b,
                &mut x_cpu,
                &SolverControls::absolute(1e-10, 3000),
                "p",
            )
            .unwrap();
            let mut x_gpu = vec![0.0; a.n_rows()];
            let gpu_perf = solve_pcg_gpu_with(
                &gpu,
                &p,
                DeviceSolve::new(
                    &a,
                    &b,
                    &mut x_gpu,
                    &SolverControls::absolute(1e-10, 3000),
                    &unpermuted,
                )
                .named("p"),
            )
            .unwrap();
            let d = max_rel_diff(&x_gpu, &x_cpu);
            println!(
                "{name}: PCG + {p}: CPU {} iterations, GPU {} (flexible {}), initial residual \
                 {:.6e} / {:.6e}, max relative difference {d:.2e}",
                cpu.iterations,
                gpu_perf.iterations,
                p.is_flexible(),
                cpu.initial_residual,
                gpu_perf.initial_residual
            );
            assert!(gpu_perf.converged, "{name} {p}");
            // A flexible preconditioner's inner stopping can flip with round-off.
            let slack = if p.is_flexible() {
                2 + cpu.iterations / 20
            } else {
                2
            };
            assert!(
                gpu_perf.iterations.abs_diff(cpu.iterations) <= slack,
                "{name} {p}"
            );
            assert!(d < 1e-7, "{name} {p}: {d}");
            // In RCM order (the default) the colours differ: converged all the same.
            let mut x = vec![0.0; a.n_rows()];
            let rcm = solve_pcg_gpu_with(
                &gpu,
                &p,
                DeviceSolve::new(
                    &a,
                    &b,
                    &mut x,
                    &SolverControls::absolute(1e-10, 3000),
                    &GpuSolveOptions::default(),
                )
                .named("p"),
            )
            .unwrap();
            assert!(
                rcm.converged && max_rel_diff(&x, &x_cpu) < 1e-7,
                "{name} {p} RCM"
            );
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_smoother_preconditioners_on_equilibrated_systems_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let unpermuted = GpuSolveOptions {
        ordering: RowOrdering::Natural,
        ..Default::default()
    };
    let equilibrations: [EquilibrationKind; 2] = ["jacobi", "ruiz"].map(|e| e.parse().unwrap());
    for (name, a, b) in fvm_systems() {
        for s in gpu_preconditioners() {
            let p = Preconditioner::Smoother(s);
            for eq in &equilibrations {
                let c = SolverControls::absolute(1e-10, 3000);
                let mut x_cpu = vec![0.0; a.n_rows()];
                let cpu = solve_pcg_scaled(&a, p, eq, &b, &mut x_cpu, &c, "p").unwrap();
                let mut x_gpu = vec![0.0; a.n_rows()];
                let gpu_perf = solve_pcg_gpu_with(
                    &gpu,
                    &p,
                    DeviceSolve::new(&a, &b, &mut x_gpu, &c, &unpermuted)
                        .equilibrated(eq)
                        .named("p"),
                )
                .unwrap();
                let d = max_rel_diff(&x_gpu, &x_cpu);
                println!(
                    "{name}: PCG + {p}, equilibration {eq}: CPU {} iterations, GPU {}, initial \
                     residual {:.6e} / {:.6e}, max relative difference {d:.2e}",
                    cpu.iterations,
                    gpu_perf.iterations,
                    cpu.initial_residual,
                    gpu_perf.initial_residual
                );
                assert!(gpu_perf.converged, "{name} {p} {eq}");
                // The residuals are the original system's on both.
                let r = (gpu_perf.initial_residual / cpu.initial_residual - 1.0).abs();
                assert!(
                    r < 1e-10,
                    "{name} {p} {eq}: initial residuals {r:.2e} apart"
                );
                let slack = if p.is_flexible() {
                    2 + cpu.iterations / 20
                } else {
                    2
                };
                assert!(
                    gpu_perf.iterations.abs_diff(cpu.iterations) <= slack,
                    "{name} {p} {eq}"
                );
                assert!(d < 1e-7, "{name} {p} {eq}: {d}");
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn smooth_solver_on_the_gpu_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let unpermuted = GpuSolveOptions {
        ordering: RowOrdering::Natural,
        ..Default::default()
    };
    let mut settings = gpu_preconditioners();
    let mut forward = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Forward));
    forward.colouring = ColouringKind::JonesPlassmann;
    forward.sweeps = 3;
    settings.push(forward);
    let mut asynchronous = SmootherSettings::block_jacobi(InnerSolver::Cg, 1e-6, 100, 256);
    asynchronous.block.asynchronous = true;
    for (name, a, b) in fvm_systems().into_iter().skip(1) {
        for s in &settings {
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_smooth(
                &a,
                s,
                &b,
                &mut x_cpu,
                &SolverControls::absolute(1e-7, 100_000),
                "p",
            )
            .unwrap();
            let mut x_gpu = vec![0.0; a.n_rows()];
            let gpu_perf = solve_smooth_gpu(
                &gpu,
                s,
                DeviceSolve::new(
                    &a,
                    &b,
                    &mut x_gpu,
                    &SolverControls::absolute(1e-7, 100_000),
                    &unpermuted,
                )
                .named("p"),
            )
            .unwrap();
            let d = max_rel_diff(&x_gpu, &x_cpu);
            println!(
                "{name}: smoothSolver {s}: CPU {} sweeps, GPU {}, max relative difference {d:.2e}",
                cpu.iterations, gpu_perf.iterations
            );
            assert!(gpu_perf.converged, "{name} {s}");
            assert!(
                gpu_perf.iterations.abs_diff(cpu.iterations) <= s.sweeps,
                "{name} {s}"
            );
            assert!(d < 1e-5, "{name} {s}: {d}");
        }
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_smooth_gpu(
            &gpu,
            &asynchronous,
            DeviceSolve::new(
                &a,
                &b,
                &mut x,
                &SolverControls::absolute(1e-7, 100_000),
                &unpermuted,
            )
            .named("p"),
        )
        .unwrap();
        println!(
            "{name}: smoothSolver {asynchronous}: {} sweeps",
            perf.iterations
        );
        assert!(perf.converged, "{name} asynchronous");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn cases_with_smoothers_run_on_the_gpu_like_on_the_cpu() {
    use fvpoisson::case::case_toml::parse_case;
    use fvpoisson::case::{run_case, Device};
    let Some(gpu) = test_device() else { return };
    let base = r#"
[mesh]
source = "box:12x12x12:tet:perturb=0.1"
[physics]
source = "3*pi^2*sin(pi*x)*sin(pi*y)*sin(pi*z)"
[boundary.default]
type = "fixedValue"
value = 0
[solver.T]
tolerance = 1e-10
maxIter = 20000
[output]
formats = []
"#;
    let dir = common::Scratch::new("gpu_smooth_case");
    for entry in [
        // GaussSeidel runs multicolour on the GPU, natural on the CPU.
        "solver = \"smoothSolver\"\nsmoother = \"symGaussSeidel\"\nnSweeps = 2\n",
        "solver = \"smoothSolver\"\nsmoother = \"blockJacobi\"\nblockSize = 128\n",
        // DIC becomes Jacobi on the GPU, sgs multicolour symmetric Gauss-Seidel.
        "preconditioner = \"sgs\"\n",
        "preconditioner = \"blockJacobi\"\ninner = \"CG\"\ninnerTolerance = 1e-2\n",
        // Equilibrated: host assembly, then the smoother on S A S.
        "preconditioner = \"blockJacobi\"\ninner = \"symGaussSeidel\"\ninnerMaxIter = 2\n\
         innerTolerance = 0\nequilibration = \"ruiz\"\n",
        // Mixed precision: f32 sweeps on the GPU (host assembly), f64 on the CPU.
        "preconditioner = \"blockJacobi\"\ninner = \"symGaussSeidel\"\ninnerMaxIter = 2\n\
         innerTolerance = 0\nprecision = \"mixed\"\n",
        "preconditioner = \"DIC\"\nprecision = \"mixed\"\n",
    ] {
        let text = base.replace("maxIter = 20000\n", &format!("maxIter = 20000\n{entry}"));
        let setup = parse_case(&text, &dir.join("case.toml"), &dir).unwrap();
        let cpu = run_case(&setup, Device::Cpu).unwrap();
        let on_gpu = run_case(&setup, Device::Gpu(&gpu)).unwrap();
        let d = max_rel_diff(&on_gpu.field, &cpu.field);
        println!(
            "case with {}: GPU vs CPU field, max relative difference {d:.2e}",
            entry.trim().replace('\n', ", ")
        );
        assert!(on_gpu.converged && d < 1e-6, "{entry}: {d}");
    }
}

/// Mixed-precision block Jacobi as a PCG preconditioner (`smooth_block_f32`):
/// the application equals the CPU's f32 sweeps from zero
/// (`BlockJacobi::sweeps_from_zero::<f32>`) to f32 round-off, PCG reaches the
/// f64 tolerance in about the f64 iterations, and smoothSolver (sweeps from a
/// nonzero x) refuses it with a clear error.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_block_jacobi_equals_the_cpu_f32_sweeps_and_converges() {
    use fvpoisson::gpu::smooth::{DevicePreconditioner, DeviceSmootherPreconditioner};
    use fvpoisson::solve::block_jacobi::BlockJacobi;
    use fvpoisson::solve::Precision;
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-9, 3000);
    for (name, a, b) in fvm_systems() {
        let n = a.n_rows();
        for (inner, tolerance, steps) in [
            (InnerSolver::Jacobi, 0.0, 4),
            (InnerSolver::SymGaussSeidel, 0.0, 2),
            (InnerSolver::Cg, 0.0, 5),
            (InnerSolver::Cg, 1e-3, 50),
        ] {
            let mut s = SmootherSettings::block_jacobi(inner, tolerance, steps, 256);
            s.sweeps = 2;
            if inner == InnerSolver::Jacobi {
                s.omega = 0.7;
            }
            s.polynomial.precision = Precision::Mixed;
            let p = s.ordering(&a).unwrap();
            let (ap, r) = (p.apply_symmetric(&a), p.to_new(&b));
            let m = device_matrix(&gpu, &ap, 256);
            let smoother = DeviceSmoother::new(&gpu, &ap, m, &s).unwrap();
            let precond = DeviceSmootherPreconditioner::new(smoother, &s);
            // z starts as NaN: the application must not read it.
            let z_dev = gpu.upload(&vec![f64::NAN; n]).unwrap();
            precond.apply(&gpu.upload(&r).unwrap(), &z_dev).unwrap();
            let z = gpu.download(&z_dev).unwrap();
            let cpu = BlockJacobi::new(&ap, s.block, s.omega).unwrap();
            let z32: Vec<f64> = cpu
                .sweeps_from_zero::<f32>(&r, 2)
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect();
            let z64 = cpu.sweeps_from_zero::<f64>(&r, 2).unwrap();
            let scale = z64.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let worst = |u: &[f64], v: &[f64]| {
                u.iter()
                    .zip(v)
                    .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
                    / scale
            };
            let (d32, d64) = (worst(&z, &z32), worst(&z, &z64));
            // PCG, f64 and mixed.
            let mut double = s;
            double.polynomial.precision = Precision::Double;
            let solve = |s: SmootherSettings| {
                let mut x = vec![0.0; n];
                let perf = solve_pcg_gpu_with(
                    &gpu,
                    &Preconditioner::Smoother(s),
                    DeviceSolve::new(&a, &b, &mut x, &controls, &GpuSolveOptions::default())
                        .named("p"),
                )
                .unwrap();
                (perf, residual_norm(&a, &b, &x))
            };
            let ((f64_perf, _), (mixed, mixed_res)) = (solve(double), solve(s));
            println!(
                "{name}: {s}: max |GPU - CPU f32| / max |z| = {d32:.2e} (vs CPU f64 \
                 {d64:.2e}); PCG f64 {} iterations, mixed {} ({:.3e}, |b - Ax| {mixed_res:.3e})",
                f64_perf.iterations, mixed.iterations, mixed.final_residual
            );
            // A tolerance-stopped inner CG may stop a step apart.
            let bound = if tolerance > 0.0 { 1e-2 } else { 1e-4 };
            assert!(d32 <= bound, "{name} {s}: {d32}");
            assert!(mixed.converged && mixed.final_residual <= controls.tolerance);
            let slack = f64_perf.iterations / 10 + 2;
            assert!(
                mixed.iterations <= f64_perf.iterations + slack,
                "{name} {s}: mixed {} f64 {}",
                mixed.iterations,
                f64_perf.iterations
            );
        }
    }
    // smoothSolver sweeps from the current x: mixed precision is refused.
    let (a, b) = poisson_system("box:12x12x12").unwrap();
    let mut s = SmootherSettings::block_jacobi(InnerSolver::Jacobi, 0.0, 2, 256);
    s.polynomial.precision = fvpoisson::solve::Precision::Mixed;
    let mut x = vec![0.0; a.n_rows()];
    let err = solve_smooth_gpu(
        &gpu,
        &s,
        DeviceSolve::new(
            &a,
            &b,
            &mut x,
            &SolverControls::absolute(1e-8, 100),
            &GpuSolveOptions::default(),
        )
        .named("p"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("PCG preconditioner only"), "{err}");
}
