//! GPU kernels against the CPU reference. Each test prints
//! `skipped: no CUDA device` and passes where there is no GPU, unless
//! FVPOISSON_REQUIRE_GPU=1.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::cusparse::{Cusparse, CusparseKind, CusparseSpmv, DenseVector};
use fvpoisson::gpu::matrix::{DeviceMatrix, Format};
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{
    solve_pcg_gpu, GpuCgBackend, GpuSolveOptions, GpuSolver, GpuVector, LaunchMode,
};
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::{pcg, solve_pcg, CgBackend, OnExecutor, PreconditionerKind, SolverControls};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::{random_symmetric, random_vector, SplitMix};
use fvpoisson::sparse::{Csr, Reordered, RowOrdering};

/// Taken for reading by every GPU test of this file, for writing by the one
/// that asks the device for more memory than it has.
static DEVICE_MEMORY: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn check_formats(gpu: &Gpu, name: &str, a: &Csr, seed: u64) {
    let n = a.n_rows();
    let mut rng = SplitMix(seed);
    let x: Vec<f64> = (0..n).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let mut reference = vec![0.0; n];
    a.spmv(&x, &mut reference);
    let x_dev = gpu.upload(&x).unwrap();
    for format in Format::ALL {
        for h in [32, 512] {
            let m = DeviceMatrix::upload(gpu, a, format, h).unwrap();
            let y_dev = gpu.upload(&vec![f64::NAN; n]).unwrap();
            m.spmv(gpu, &x_dev, &y_dev).unwrap();
            let y = gpu.download(&y_dev).unwrap();
            let d = max_rel_diff(&y, &reference);
            println!(
                "{name}: {} (H = {h}) max relative difference {d:.2e}",
                format.name()
            );
            assert!(d < 1e-13, "{name} {}: {d}", format.name());
            if format == Format::Csr {
                break; // no slice height
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn spmv_formats_match_csr_on_random_matrices() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    for (n, seed) in [(1, 1), (1000, 2), (100_003, 3)] {
        check_formats(
            &gpu,
            &format!("random n = {n}"),
            &random_symmetric(n, 8, seed),
            seed,
        );
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn spmv_formats_match_csr_on_fvm_matrices() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    for spec in ["box:20x20x20", "box:12x12x12:tet:perturb=0.2:renumber"] {
        let (a, _) = poisson_system(spec).unwrap();
        for (seed, ordering) in RowOrdering::ALL.into_iter().enumerate() {
            let ordered = Reordered::new(&a, ordering, 512).unwrap();
            let name = format!("{spec}, {ordering}");
            check_formats(&gpu, &name, ordered.matrix(), seed as u64 + 5);
        }
    }
}

fn controls() -> SolverControls {
    SolverControls::absolute(1e-8, 2000)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_pcg_matches_cpu_pcg() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    for spec in ["box:16x16x16", "box:10x10x10:tet:perturb=0.2:renumber"] {
        let (a, b) = poisson_system(spec).unwrap();
        for kind in [PreconditionerKind::Jacobi, PreconditionerKind::None] {
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_pcg(&a, kind, &b, &mut x_cpu, &controls(), "p").unwrap();
            let mut runs = Vec::new();
            for check_interval in [1, 7, 50] {
                let options = GpuSolveOptions {
                    check_interval,
                    ..Default::default()
                };
                let mut x = vec![0.0; a.n_rows()];
                let perf = solve_pcg_gpu(
                    &gpu,
                    kind,
                    DeviceSolve::new(&a, &b, &mut x, &controls(), &options).named("p"),
                )
                .unwrap();
                runs.push((perf, x));
            }
            let (gpu_perf, x_gpu) = &runs[0];
            let d = max_rel_diff(x_gpu, &x_cpu);
            println!(
                "{spec} {kind}: CPU {} iterations, GPU {} iterations, final {:.3e} / {:.3e}, \
                 max relative solution difference {d:.2e}",
                cpu.iterations, gpu_perf.iterations, cpu.final_residual, gpu_perf.final_residual
            );
            assert!(gpu_perf.converged);
            assert!(gpu_perf.iterations.abs_diff(cpu.iterations) <= 1);
            assert!((gpu_perf.initial_residual / cpu.initial_residual - 1.0).abs() < 1e-12);
            assert!(d < 1e-5, "solution differs by {d}");
            // Deterministic, and independent of the read-back interval.
            for (perf, x) in &runs[1..] {
                assert_eq!(perf, gpu_perf);
                assert_eq!(x, x_gpu);
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_pcg_in_every_ordering_matches_cpu_pcg() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    for spec in ["box:24x24x24", "box:12x12x12:tet:perturb=0.2:renumber"] {
        let (a, b) = poisson_system(spec).unwrap();
        let kind = PreconditionerKind::Jacobi;
        let mut x_cpu = vec![0.0; a.n_rows()];
        let cpu = solve_pcg(&a, kind, &b, &mut x_cpu, &controls(), "p").unwrap();
        // One solver for all: each ordering computed once, then reused.
        let mut solver = GpuSolver::new(&gpu);
        for ordering in RowOrdering::ALL {
            let options = GpuSolveOptions {
                ordering,
                slice_height: 128,
                ..Default::default()
            };
            let mut runs = Vec::new();
            for _ in 0..2 {
                let mut x = vec![0.0; a.n_rows()];
                let perf = solver
                    .solve(
                        kind,
                        DeviceSolve::new(&a, &b, &mut x, &controls(), &options).named("p"),
                    )
                    .unwrap();
                runs.push((perf, x));
            }
            let (perf, x) = &runs[0];
            let d = max_rel_diff(x, &x_cpu);
            println!(
                "{spec}, {ordering}: CPU {} iterations, GPU {} iterations, max relative \
                 solution difference {d:.2e}",
                cpu.iterations, perf.iterations
            );
            assert!(perf.converged, "{spec} {ordering}");
            assert!(
                perf.iterations.abs_diff(cpu.iterations) <= 1,
                "{spec} {ordering}"
            );
            assert!(d < 1e-5, "{spec} {ordering}: solution differs by {d}");
            // The cached permutation gives the same solve.
            assert_eq!(runs[1].0, *perf, "{spec} {ordering}");
            assert_eq!(runs[1].1, *x, "{spec} {ordering}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn cusparse_spmv_matches_the_cpu() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    let lib = match Cusparse::load(&gpu) {
        Ok(lib) => lib,
        Err(e) => {
            println!("skipped: cuSPARSE not loaded: {e}");
            return;
        }
    };
    println!("cuSPARSE {}", lib.version());
    let mut cases = vec![
        ("random n = 1000".to_string(), random_symmetric(1000, 8, 2)),
        (
            "random n = 100003".to_string(),
            random_symmetric(100_003, 8, 3),
        ),
    ];
    for spec in ["box:20x20x20", "box:12x12x12:tet:perturb=0.2:renumber"] {
        cases.push((spec.to_string(), poisson_system(spec).unwrap().0));
    }
    for (name, a) in &cases {
        let n = a.n_rows();
        let mut rng = SplitMix(n as u64);
        let x: Vec<f64> = (0..n).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
        let mut reference = vec![0.0; n];
        a.spmv(&x, &mut reference);
        let xs = vec![gpu.upload(&x).unwrap()];
        let mut ys = vec![gpu.upload(&vec![f64::NAN; n]).unwrap()];
        let csr = DeviceMatrix::upload(&gpu, a, Format::Csr, 512).unwrap();
        let sell = DeviceMatrix::upload(&gpu, a, Format::Sell, 512).unwrap();
        let dx = DenseVector::all(&lib, &xs).unwrap();
        for kind in CusparseKind::ALL {
            let ours = if kind == CusparseKind::SellAlg1 {
                &sell
            } else {
                &csr
            };
            gpu.write(&vec![f64::NAN; n], &mut ys[0]).unwrap();
            let dy = DenseVector::all(&lib, &ys).unwrap();
            // `new` runs the SpMV once, x → y.
            let spmv = CusparseSpmv::new(&lib, kind, ours, a.nnz(), &dx[0], &dy[0])
                .unwrap_or_else(|e| panic!("{name}, {}: {e}", kind.name()));
            drop(dy);
            let y = gpu.download(&ys[0]).unwrap();
            let d = max_rel_diff(&y, &reference);
            println!(
                "{name}: {} ({}) max relative difference {d:.2e}",
                kind.name(),
                spmv.note
            );
            assert!(d < 1e-12, "{name} {}: {d}", kind.name());
        }
    }
}

/// The GPU backend driven one step at a time (the trait's default `iterate`).
struct StepByStep<'a, 'g>(&'a GpuCgBackend<'g>);

impl<'g> OnExecutor for StepByStep<'_, 'g> {
    type Inner = GpuCgBackend<'g>;
    fn executor(&self) -> &GpuCgBackend<'g> {
        self.0
    }
}

impl CgBackend for StepByStep<'_, '_> {
    fn precondition(&self, r: &GpuVector, z: &mut GpuVector) -> f64 {
        self.0.precondition(r, z)
    }
    fn update_direction(&self, beta: f64, z: &GpuVector, p: &mut GpuVector) {
        self.0.update_direction(beta, z, p)
    }
    fn apply_operator(&self, p: &GpuVector, q: &mut GpuVector) -> f64 {
        self.0.apply_operator(p, q)
    }
    fn update_solution(
        &self,
        alpha: f64,
        p: &GpuVector,
        q: &GpuVector,
        x: &mut GpuVector,
        r: &mut GpuVector,
    ) -> f64 {
        self.0.update_solution(alpha, p, q, x, r)
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_steps_one_at_a_time_match_the_fused_loop() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    let (a, b) = poisson_system("box:8x9x10:tet:perturb=0.1").unwrap();
    let options = GpuSolveOptions {
        slice_height: 64,
        check_interval: 10,
        ..Default::default()
    };
    let backend = GpuCgBackend::new(&gpu, &a, true, None, &options).unwrap();
    let b_dev = backend.upload(&b).unwrap();
    let mut x_fused = backend.upload(&vec![0.0; a.n_rows()]).unwrap();
    let fused = pcg(&backend, &b_dev, &mut x_fused, &controls(), "p").unwrap();
    let mut x_steps = backend.upload(&vec![0.0; a.n_rows()]).unwrap();
    let steps = pcg(
        &StepByStep(&backend),
        &b_dev,
        &mut x_steps,
        &controls(),
        "p",
    )
    .unwrap();
    println!(
        "fused {} iterations, step by step {} iterations",
        fused.iterations, steps.iterations
    );
    assert!(fused.iterations.abs_diff(steps.iterations) <= 1);
    let d = max_rel_diff(
        &backend.download(&x_steps).unwrap(),
        &backend.download(&x_fused).unwrap(),
    );
    assert!(d < 1e-6, "{d}");
}

/// Solves with every launch mode on one backend and checks that they give the
/// same iterates bit for bit (the reductions add the partials in one order
/// whichever block finishes them) and that the graph is captured once and
/// replayed by the later solve.
fn check_launch_modes(
    gpu: &Gpu,
    name: &str,
    a: &Csr,
    b: &[f64],
    jacobi: bool,
    slice_height: usize,
    controls: &SolverControls,
) {
    let zeros = vec![0.0; a.n_rows()];
    let options = GpuSolveOptions {
        check_interval: 7,
        slice_height,
        ..Default::default()
    };
    let backend = GpuCgBackend::new(gpu, a, jacobi, None, &options).unwrap();
    let b_dev = backend.upload(b).unwrap();
    let mut x_dev = backend.upload(&zeros).unwrap();
    let mut runs = Vec::new();
    // Graph twice: the second solve replays the first one's graphs (one per
    // chunk length: `chunk_length` ends the chunks where the solve before
    // ended).
    let modes = [
        LaunchMode::Separate,
        LaunchMode::Folded,
        LaunchMode::Graph,
        LaunchMode::Graph,
    ];
    let mut captures = Vec::new();
    for mode in modes {
        backend.set_launch_mode(mode);
        backend.write(&mut x_dev, &zeros).unwrap();
        let perf = pcg(&backend, &b_dev, &mut x_dev, controls, "p").unwrap();
        let x = backend.download(&x_dev).unwrap();
        runs.push((mode, perf, x));
        captures.push(backend.graph_captures());
    }
    let (_, reference, x_ref) = &runs[0];
    println!(
        "{name}, jacobi {jacobi}, H {slice_height}, {controls:?}: {} iterations, final {:.3e}; \
         launch mode after the run {:?}, graphs captured {}",
        reference.iterations,
        reference.final_residual,
        backend.launch_mode(),
        backend.graph_captures()
    );
    assert_eq!(
        backend.launch_mode(),
        LaunchMode::Graph,
        "capture fell back"
    );
    // At most: the chunk up to the expected end, the short ones after it,
    // one shortened by maxIter.
    assert!(
        (1..=3).contains(&captures[2]),
        "{name}: {} graphs captured by the first graph solve",
        captures[2]
    );
    assert_eq!(
        captures[3], captures[2],
        "{name}: the second solve captured"
    );
    if controls.tolerance == 0.0 {
        assert_eq!(reference.iterations, controls.max_iter);
    }
    assert!(reference.iterations >= controls.min_iter);
    for (mode, perf, x) in &runs[1..] {
        assert_eq!(perf, reference, "{name}: {mode:?}");
        let same = x.iter().zip(x_ref).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "{name}: {mode:?} iterates differ from the separate launches"
        );
    }
}

/// FVM systems with chunks that end early (convergence), on a partial last
/// chunk (maxIter 23, 7 per chunk) and after minIter; a random system with
/// more than 1024 partials per reduction (the last block of a 256- or
/// 32-thread grid adds several per lane, the one-block kernel's order).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn launch_modes_give_the_same_bits() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    let stopping = [
        controls(),
        SolverControls {
            tolerance: 0.0,
            max_iter: 23,
            ..controls()
        },
        SolverControls {
            tolerance: 1e-3,
            min_iter: 30,
            ..controls()
        },
    ];
    for spec in ["box:16x16x16", "box:10x10x10:tet:perturb=0.2:renumber"] {
        let (a, b) = poisson_system(spec).unwrap();
        for jacobi in [true, false] {
            for controls in &stopping {
                check_launch_modes(&gpu, spec, &a, &b, jacobi, 128, controls);
            }
        }
    }
    let n = 300_003;
    let a = random_symmetric(n, 6, 21);
    let b = random_vector(n, 22);
    let fixed = SolverControls {
        tolerance: 0.0,
        max_iter: 20,
        ..controls()
    };
    for slice_height in [32, 512] {
        check_launch_modes(&gpu, "random", &a, &b, true, slice_height, &fixed);
    }
}

/// The first solve of a fresh device in graph mode captures its graph (the
/// chunk's kernels, never launched before, are loaded outside the capture)
/// instead of falling back to direct launches, and gives the bits of the
/// direct launches.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn the_first_solve_of_a_fresh_device_captures_its_graph() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    let (a, b) = poisson_system("box:12x12x12").unwrap();
    let zeros = vec![0.0; a.n_rows()];
    let options = GpuSolveOptions {
        check_interval: 5,
        ..Default::default()
    };
    let backend = GpuCgBackend::new(&gpu, &a, true, None, &options).unwrap();
    let b_dev = backend.upload(&b).unwrap();
    let mut x_dev = backend.upload(&zeros).unwrap();
    backend.set_launch_mode(LaunchMode::Graph);
    let graphed = pcg(&backend, &b_dev, &mut x_dev, &controls(), "p").unwrap();
    let x_graphed = backend.download(&x_dev).unwrap();
    assert_eq!(
        backend.launch_mode(),
        LaunchMode::Graph,
        "capture fell back"
    );
    assert_eq!(backend.graph_captures(), 1);
    backend.set_launch_mode(LaunchMode::Separate);
    backend.write(&mut x_dev, &zeros).unwrap();
    let direct = pcg(&backend, &b_dev, &mut x_dev, &controls(), "p").unwrap();
    assert_eq!(graphed, direct);
    let x_direct = backend.download(&x_dev).unwrap();
    assert!(x_graphed
        .iter()
        .zip(&x_direct)
        .all(|(g, d)| g.to_bits() == d.to_bits()));
}

#[test]
fn device_choice_cpu_needs_no_device_and_auto_never_fails() {
    use fvpoisson::gpu::DeviceChoice;
    assert!(DeviceChoice::Cpu.select().unwrap().is_none());
    assert!(DeviceChoice::Auto.select().is_ok());
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn out_of_memory_is_a_clear_error_and_the_device_still_works() {
    // Alone on the device: while the driver fails the allocation, the memory
    // it tried to reserve is not free for the other tests of this process,
    // nor for other test binaries run beside this one.
    let _device = DEVICE_MEMORY.write().unwrap_or_else(|e| e.into_inner());
    let _alone = fvpoisson::gpu::DeviceAlone::take();
    let Some(gpu) = test_device() else { return };
    let (_, total) = gpu.memory().unwrap();
    let err = gpu.zeros::<f64>(total / 4).unwrap_err();
    assert!(
        matches!(err, fvpoisson::gpu::GpuError::OutOfMemory { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("--device cpu"), "{err}");
    // The failed attempt left nothing reserved in this process's pool for
    // the other processes on the device to miss once this test lets them go.
    let idle = gpu.pool_idle_memory().unwrap();
    println!("pool memory idle after the failed allocation: {idle} bytes of {total}");
    assert!(idle < total / 100, "{idle} bytes of {total} kept");
    let v = gpu.upload(&[1.0f64, 2.0]).unwrap();
    assert_eq!(gpu.download(&v).unwrap(), vec![1.0, 2.0]);
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn side_stream_work_runs_after_the_streams_work_and_before_its_join() {
    let _device = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = test_device() else { return };
    // 128 MB per copy: long enough that a side copy not waiting for the
    // device's stream would read zeros.
    let n = 1 << 24;
    let values: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    let source = gpu.upload(&values).unwrap();
    let mut middle = gpu.zeros::<f64>(n).unwrap();
    let mut last = gpu.zeros::<f64>(n).unwrap();
    gpu.synchronize().unwrap();
    gpu.copy(&source, &mut middle).unwrap();
    let ((), work) = gpu
        .on_side_stream(|| {
            // No side work inside side work.
            assert!(gpu.on_side_stream(|| Ok(())).is_err());
            gpu.copy(&middle, &mut last)
        })
        .unwrap();
    work.join(&gpu).unwrap();
    assert_eq!(gpu.download(&last).unwrap(), values);
    // The device's own stream is back in use after the side work.
    gpu.copy(&source, &mut middle).unwrap();
    assert_eq!(gpu.download(&middle).unwrap(), values);
}
