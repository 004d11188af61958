//! Multi-GPU PCG (`gpu::multi`) against the single-GPU and the CPU solves:
//! the distributed product y = A x (halo exchange) against the CPU's on
//! random x, and Jacobi- and block-DIC-PCG on real meshes (hex and perturbed
//! tet boxes, a polyhedral OpenFOAM mesh) and a random SPD matrix with random
//! right-hand sides, split in 1, 2 and 3 ranks (METIS and slabs). On one
//! device the ranks share it (host-staged halos); with two or more devices
//! the same runs go through NCCL and through peer stores (`gpu::peer`), one
//! rank per device. `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::multi::{
    box_slabs, nccl_available, solve_pcg_multi, solve_pcg_with, MultiGpuBackend, MultiGpuOptions,
    Reduction, Transport,
};
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{solve_pcg_gpu, GpuSolveOptions};
use fvpoisson::gpu::peer::{self, all_peers};
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::single_reduction::solve_pcg_single_reduction;
use fvpoisson::solve::{pcg, solve_pcg, Preconditioner, PreconditionerKind, SolverControls};
use fvpoisson::sparse::distribute::Decomposition;
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::{random_symmetric, SplitMix};
use fvpoisson::sparse::Csr;
use fvpoisson::sparse::RowOrdering;

fn random_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut g = SplitMix(seed);
    (0..n).map(|_| g.next_f64() - 0.5).collect()
}

/// Named decompositions of one matrix.
type Splits = Vec<(String, Decomposition)>;

/// (name, matrix, decompositions to try).
fn cases() -> Vec<(String, Csr, Splits)> {
    let mut all = Vec::new();
    for spec in [
        "box:16x12x10",
        "box:14x14x14:tet:perturb=0.2:renumber",
        "meshes/foam/polydual",
    ] {
        let (a, _) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let mut splits = Vec::new();
        for ranks in [1, 2, 3] {
            splits.push((
                format!("metis{ranks}"),
                Decomposition::metis(&a, ranks).unwrap(),
            ));
        }
        if spec == "box:16x12x10" {
            splits.push(("slabs3".into(), box_slabs(16, 12, 10, 3).unwrap()));
        }
        all.push((spec.to_string(), a, splits));
    }
    let r = random_symmetric(700, 6, 5);
    let splits = vec![("metis3".into(), Decomposition::metis(&r, 3).unwrap())];
    all.push(("random700".into(), r, splits));
    all
}

/// Held by each test of this file for its whole run: one test at a time
/// drives the devices. Two tests' NCCL communicators on the same GPUs, or one
/// test's spinning peer-exchange kernels beside another's collectives, can
/// wait on each other for ever once their launches interleave (NCCL orders
/// the operations of one communicator only); the tests then hang side by
/// side while each passes alone.
fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static DEVICES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DEVICES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every device when there are two or more (the NCCL and peer runs), else
/// none.
fn all_devices() -> Vec<Gpu> {
    let count = Gpu::device_count().unwrap_or(0);
    if count < 2 {
        println!("one device: the NCCL and peer runs are skipped");
        return Vec::new();
    }
    (0..count).map(|i| Gpu::on_device(i).unwrap()).collect()
}

/// The transports of one rank per device on `devices`: NCCL, and peer
/// stores where every pair has peer access.
fn device_transports(devices: &[Gpu]) -> Vec<Transport> {
    let refs: Vec<&Gpu> = devices.iter().collect();
    let mut transports = vec![Transport::Nccl];
    match all_peers(&refs).unwrap() {
        true => transports.push(Transport::Peer),
        false => println!("no peer access between the devices: the peer runs are skipped"),
    }
    transports
}

/// The GPUs and transports to run decomposition `d` on: its ranks on `one`
/// GPU through the host, and, where there are GPUs enough for one rank
/// each, on `many` through each transport they have.
fn split_runs<'a>(
    one: &'a [Gpu],
    many: &'a [Gpu],
    d: &Decomposition,
) -> Vec<(&'a [Gpu], Transport)> {
    let mut runs: Vec<(&[Gpu], Transport)> = vec![(one, Transport::Host)];
    if many.len() >= d.n_ranks() && d.n_ranks() > 1 {
        runs.extend(device_transports(many).into_iter().map(|t| (many, t)));
    }
    runs
}

fn controls() -> SolverControls {
    SolverControls::absolute(1e-10, 2000)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn distributed_product_equals_the_cpu_product() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let one = [gpu];
    let many = all_devices();
    for (name, a, splits) in cases() {
        let x = random_vector(a.n_rows(), 17);
        let mut expected = vec![0.0; a.n_rows()];
        a.spmv(&x, &mut expected);
        for (split, d) in &splits {
            let runs = split_runs(&one, &many, d);
            for (gpus, transport) in runs {
                let options = MultiGpuOptions {
                    transport,
                    ..Default::default()
                };
                let backend = MultiGpuBackend::new(gpus, &a, d, &options).unwrap();
                assert_eq!(backend.transport(), transport);
                let xd = backend.upload(&x).unwrap();
                let yd = backend.upload(&vec![f64::NAN; a.n_rows()]).unwrap();
                backend.product(&xd, &yd).unwrap();
                let y = backend.download(&yd).unwrap();
                let diff = max_rel_diff(&y, &expected);
                println!("{name:<40} {split:<8} {transport:?}: max rel diff {diff:.1e}");
                assert!(diff < 1e-12, "{name} {split} {transport:?}: {diff}");
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn multi_gpu_pcg_matches_single_gpu_and_cpu() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let one = [gpu];
    let many = all_devices();
    let c = controls();
    for (name, a, splits) in cases() {
        let b = random_vector(a.n_rows(), 3);
        let mut x_cpu = vec![0.0; a.n_rows()];
        let jacobi = Preconditioner::from(PreconditionerKind::Jacobi);
        let cpu = solve_pcg(&a, jacobi, &b, &mut x_cpu, &c, "p").unwrap();
        let mut x_gpu = vec![0.0; a.n_rows()];
        let options = GpuSolveOptions {
            ordering: RowOrdering::Natural,
            ..Default::default()
        };
        let single = solve_pcg_gpu(
            &one[0],
            PreconditionerKind::Jacobi,
            DeviceSolve::new(&a, &b, &mut x_gpu, &c, &options).named("p"),
        )
        .unwrap();
        assert!(cpu.converged && single.converged);
        for (split, d) in &splits {
            let runs = split_runs(&one, &many, d);
            for (gpus, transport) in runs {
                let options = MultiGpuOptions {
                    transport,
                    ..Default::default()
                };
                let mut x = vec![0.0; a.n_rows()];
                let perf = solve_pcg_multi(gpus, &a, d, &b, &mut x, &c, "p", &options).unwrap();
                let (d_cpu, d_gpu) = (max_rel_diff(&x, &x_cpu), max_rel_diff(&x, &x_gpu));
                println!(
                    "{name:<40} {split:<8} {transport:?}: {} it (1 GPU {}, CPU {}), initial \
                     residual {:.6e} vs {:.6e}, x vs CPU {d_cpu:.1e}, vs 1 GPU {d_gpu:.1e}",
                    perf.iterations,
                    single.iterations,
                    cpu.iterations,
                    perf.initial_residual,
                    cpu.initial_residual
                );
                assert!(perf.converged, "{name} {split}");
                assert!(
                    perf.iterations.abs_diff(single.iterations) <= 2,
                    "{name} {split}: {} vs {}",
                    perf.iterations,
                    single.iterations
                );
                let rel =
                    (perf.initial_residual - cpu.initial_residual).abs() / cpu.initial_residual;
                assert!(rel < 1e-12, "{name} {split}: initial residual {rel:e}");
                assert!(d_cpu < 1e-6 && d_gpu < 1e-6, "{name} {split}");
            }
        }
    }
}

/// A split system kept between solves takes a later system's values in
/// place (`refresh_values`): the solve gives the same bits as a split system
/// set up fresh for the new values, on one GPU (host transport) and, where
/// present, one rank per GPU; a system of another pattern is refused.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn refreshed_values_solve_as_a_fresh_set_up() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let one = [gpu];
    let many = all_devices();
    let c = controls();
    for (name, a, splits) in cases() {
        // The same pattern, other values: each off-diagonal pair scaled by
        // a factor of its two rows (the matrix stays symmetric) and the
        // diagonal kept dominant.
        let factor = |r: usize, c: usize| 0.5 + ((r * c + r + c) % 97) as f64 / 97.0;
        let mut values = a.values().to_vec();
        for r in 0..a.n_rows() {
            let (cols, _) = a.row(r);
            let range = a.row_ptr()[r]..a.row_ptr()[r + 1];
            let mut off = 0.0;
            for (k, &col) in range.clone().zip(cols) {
                if col as usize != r {
                    values[k] *= factor(r, col as usize);
                    off += values[k].abs();
                }
            }
            for (k, &col) in range.zip(cols) {
                if col as usize == r {
                    values[k] = values[k].max(off) * 1.01;
                }
            }
        }
        let a2 = a.with_values(values);
        let b = random_vector(a.n_rows(), 41);
        for (split, d) in &splits {
            let runs = split_runs(&one, &many, d);
            for (gpus, transport) in runs {
                let options = MultiGpuOptions {
                    transport,
                    ..Default::default()
                };
                let mut kept = MultiGpuBackend::new(gpus, &a, d, &options).unwrap();
                let mut x_first = vec![0.0; a.n_rows()];
                solve_pcg_with(&kept, &b, &mut x_first, &c, "p").unwrap();
                kept.refresh_values(&a2, d, &options).unwrap();
                let mut x_kept = vec![0.0; a.n_rows()];
                let kept_perf = solve_pcg_with(&kept, &b, &mut x_kept, &c, "p").unwrap();
                let mut x_fresh = vec![0.0; a.n_rows()];
                let fresh_perf =
                    solve_pcg_multi(gpus, &a2, d, &b, &mut x_fresh, &c, "p", &options).unwrap();
                println!(
                    "{name:<40} {split:<8} {transport:?}: kept {} it, fresh {} it",
                    kept_perf.iterations, fresh_perf.iterations
                );
                assert!(fresh_perf.converged, "{name} {split}");
                assert_eq!(
                    kept_perf.iterations, fresh_perf.iterations,
                    "{name} {split}"
                );
                assert_eq!(kept_perf.final_residual, fresh_perf.final_residual);
                assert_eq!(x_kept, x_fresh, "{name} {split} {transport:?}");
                assert_ne!(
                    x_kept, x_first,
                    "{name} {split}: the new values were not used"
                );
            }
        }
        // Another pattern (another matrix's) is refused, not solved wrongly.
        let (other, _) = poisson_system("box:5x4x3").unwrap();
        let d = Decomposition::metis(&other, 1).unwrap();
        let options = MultiGpuOptions::default();
        let mut kept =
            MultiGpuBackend::new(&one, &a, &Decomposition::metis(&a, 1).unwrap(), &options)
                .unwrap();
        let refused = kept
            .refresh_values(&other, &d, &options)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("pattern"), "{name}: {refused}");
    }
}

/// Block Jacobi over the ranks with the level-scheduled DIC on each rank's
/// block: on one rank it is DIC-PCG; on more ranks it converges to the CPU
/// solution in fewer iterations than Jacobi (the blocks' orderings differ from
/// the global one, so the count against one-rank DIC is printed, not tested).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn block_dic_over_ranks_converges_between_dic_and_jacobi() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let one = [gpu];
    let c = controls();
    let spec = "box:14x14x14:tet:perturb=0.2:renumber";
    let (a, _) = poisson_system(spec).unwrap();
    let b = random_vector(a.n_rows(), 9);
    let mut x_cpu = vec![0.0; a.n_rows()];
    let dic = Preconditioner::from(PreconditionerKind::Dic);
    let cpu_dic = solve_pcg(&a, dic, &b, &mut x_cpu, &c, "p").unwrap();
    let mut x_jac = vec![0.0; a.n_rows()];
    let jacobi = Preconditioner::from(PreconditionerKind::Jacobi);
    let cpu_jacobi = solve_pcg(&a, jacobi, &b, &mut x_jac, &c, "p").unwrap();
    for ranks in [1, 2, 3] {
        let d = Decomposition::metis(&a, ranks).unwrap();
        let options = MultiGpuOptions {
            transport: Transport::Host,
            jacobi: false,
            ..Default::default()
        };
        let mut backend = MultiGpuBackend::new(&one, &a, &d, &options).unwrap();
        backend
            .set_preconditioners(&a, &d, |gpu, a_oo| {
                let p = DeviceIncompleteCholesky::new(gpu, a_oo, IcKind::Dic)?;
                Ok(Box::new(p) as Box<dyn DevicePreconditioner>)
            })
            .unwrap();
        let bd = backend.upload(&b).unwrap();
        let mut xd = backend.upload(&vec![0.0; a.n_rows()]).unwrap();
        let perf = pcg(&backend, &bd, &mut xd, &c, "p").unwrap();
        let x = backend.download(&xd).unwrap();
        let diff = max_rel_diff(&x, &x_cpu);
        println!(
            "block DIC over {ranks} ranks: {} it (CPU DIC {}, Jacobi {}), x vs CPU {diff:.1e}",
            perf.iterations, cpu_dic.iterations, cpu_jacobi.iterations
        );
        assert!(perf.converged && diff < 1e-6);
        if ranks == 1 {
            assert!(perf.iterations.abs_diff(cpu_dic.iterations) <= 2);
        } else {
            assert!(perf.iterations < cpu_jacobi.iterations);
        }
    }
}

/// NCCL with two ranks on one device is refused with what to do.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn nccl_needs_a_device_per_rank() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let one = [gpu];
    let (a, _) = poisson_system("box:8x8x8").unwrap();
    let d = Decomposition::metis(&a, 2).unwrap();
    let options = MultiGpuOptions {
        transport: Transport::Nccl,
        ..Default::default()
    };
    let e = MultiGpuBackend::new(&one, &a, &d, &options).err().unwrap();
    assert!(e.to_string().contains("one GPU per rank"), "{e}");
}

/// With two or more devices: PCG with the reductions by NCCL all-reduce
/// stops at the iteration of the host-read reductions with the same solution
/// to rounding.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn nccl_all_reduce_reductions_match_host_reads() {
    let _devices = one_test_at_a_time();
    let Some(_gpu) = test_device() else { return };
    let many = all_devices();
    if many.is_empty() {
        return;
    }
    let (a, _) = poisson_system("box:14x14x14:tet:perturb=0.2:renumber").unwrap();
    let b = random_vector(a.n_rows(), 21);
    let d = Decomposition::metis(&a, 2).unwrap();
    let options = MultiGpuOptions {
        transport: Transport::Nccl,
        device_loop: false,
        ..Default::default()
    };
    let backend = MultiGpuBackend::new(&many, &a, &d, &options).unwrap();
    assert!(!backend.device_loop());
    let bd = backend.upload(&b).unwrap();
    let mut runs = Vec::new();
    for reduction in [Reduction::HostRead, Reduction::NcclAllReduce] {
        backend.set_reduction(reduction);
        let mut xd = backend.upload(&vec![0.0; a.n_rows()]).unwrap();
        let perf = pcg(&backend, &bd, &mut xd, &controls(), "p").unwrap();
        println!("{reduction:?}: {} iterations", perf.iterations);
        runs.push((perf, backend.download(&xd).unwrap()));
    }
    let (host, nccl) = (&runs[0], &runs[1]);
    assert!(host.0.converged && nccl.0.converged);
    assert!(host.0.iterations.abs_diff(nccl.0.iterations) <= 1);
    assert!(max_rel_diff(&nccl.1, &host.1) < 1e-8);
}

/// PCG through `backend` from x = 0: the performance and the solution.
fn solve_on(
    backend: &MultiGpuBackend<'_>,
    b: &[f64],
    c: &SolverControls,
) -> (fvpoisson::solve::SolverPerformance, Vec<f64>) {
    let bd = backend.upload(b).unwrap();
    let mut xd = backend.upload(&vec![0.0; b.len()]).unwrap();
    let perf = pcg(backend, &bd, &mut xd, c, "p").unwrap();
    (perf, backend.download(&xd).unwrap())
}

/// The device loop (a host thread per GPU, scalars on the device, NCCL
/// all-reduces or peer stores) on 1, 2, 3 and 4 GPUs (counts above the
/// devices present are skipped) against the host-driven steps on the same
/// split and transport and the serial CPU solve: same initial residual,
/// iterations within 2 (the sums are split differently), solutions equal to
/// the solver tolerance. On one rank it is also checked against the
/// single-GPU fused loop. With a check interval of 7 the chunks end
/// mid-solve.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_loop_matches_host_steps_and_the_serial_solve() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let count = Gpu::device_count().unwrap();
    let nccl = nccl_available();
    if let Err(e) = &nccl {
        println!("skipped on 2+ GPUs: {e}");
    }
    let devices: Vec<Gpu> = std::iter::once(gpu)
        .chain((1..count).map(|i| Gpu::on_device(i).unwrap()))
        .collect();
    let c = controls();
    for spec in ["box:20x16x12", "box:14x14x14:tet:perturb=0.2:renumber"] {
        let (a, _) = poisson_system(spec).unwrap();
        let b = random_vector(a.n_rows(), 5);
        let mut x_cpu = vec![0.0; a.n_rows()];
        let jacobi = Preconditioner::from(PreconditionerKind::Jacobi);
        let cpu = solve_pcg(&a, jacobi, &b, &mut x_cpu, &c, "p").unwrap();
        // The single-reduction form's CPU reference (`solve::single_reduction`).
        let mut x_single = vec![0.0; a.n_rows()];
        let cpu_single = solve_pcg_single_reduction(&a, true, &b, &mut x_single, &c, "p").unwrap();
        for ranks in [1, 2, 3, 4] {
            if ranks > count {
                println!("{spec}: {ranks} GPUs skipped ({count} present)");
                continue;
            }
            let mut splits = vec![("metis", Decomposition::metis(&a, ranks).unwrap())];
            if spec == "box:20x16x12" {
                splits.push(("slabs", box_slabs(20, 16, 12, ranks).unwrap()));
            }
            let transports = match ranks {
                1 => vec![Transport::Host],
                _ => device_transports(&devices[..ranks])
                    .into_iter()
                    .filter(|t| *t != Transport::Nccl || nccl.is_ok())
                    .collect(),
            };
            let runs = splits.iter().flat_map(|s| {
                transports
                    .iter()
                    .flat_map(move |t| [true, false].map(move |single| (s, *t, single)))
            });
            for ((split, d), transport, single_reduction) in runs {
                let options = MultiGpuOptions {
                    check_interval: 7,
                    transport,
                    single_reduction,
                    ..Default::default()
                };
                let backend = MultiGpuBackend::new(&devices[..ranks], &a, d, &options).unwrap();
                assert!(backend.device_loop(), "{spec} {split} {ranks}");
                let (dev, x_dev) = solve_on(&backend, &b, &c);
                backend.set_device_loop(false);
                let (host, x_host) = solve_on(&backend, &b, &c);
                let (d_host, d_cpu) = (max_rel_diff(&x_dev, &x_host), max_rel_diff(&x_dev, &x_cpu));
                println!(
                    "{spec:<40} {split} {ranks} GPUs {transport:?} single reduction \
                     {single_reduction}: device loop {} it, host steps {} it, CPU {} it; x vs \
                     host steps {d_host:.1e}, vs CPU {d_cpu:.1e}",
                    dev.iterations, host.iterations, cpu.iterations
                );
                let what = format!("{spec} {split} {ranks} GPUs {transport:?} {single_reduction}");
                assert!(dev.converged && host.converged, "{what}");
                assert_eq!(dev.initial_residual, host.initial_residual, "{what}");
                assert!(dev.iterations.abs_diff(host.iterations) <= 2, "{what}");
                assert!(dev.iterations.abs_diff(cpu.iterations) <= 2, "{what}");
                assert!(dev.final_residual < c.tolerance, "{what}");
                assert!(d_host < 1e-6 && d_cpu < 1e-6, "{spec} {split} {ranks}");
                if single_reduction {
                    // The same recurrence as the CPU reference: its iterations
                    // and residual history (while far above rounding).
                    assert!(
                        dev.iterations.abs_diff(cpu_single.iterations) <= 1,
                        "{what}"
                    );
                    for (h, r) in dev.history.iter().zip(&cpu_single.history) {
                        if *r > 1e-8 {
                            assert!((h - r).abs() <= 1e-6 * r, "{what}: {h} vs {r}");
                        }
                    }
                }
                if ranks == 1 {
                    let mut x1 = vec![0.0; a.n_rows()];
                    let options = GpuSolveOptions {
                        ordering: RowOrdering::Natural,
                        ..Default::default()
                    };
                    let fused = solve_pcg_gpu(
                        &devices[0],
                        PreconditionerKind::Jacobi,
                        DeviceSolve::new(&a, &b, &mut x1, &c, &options).named("p"),
                    )
                    .unwrap();
                    assert!(dev.iterations.abs_diff(fused.iterations) <= 1);
                    assert!(max_rel_diff(&x_dev, &x1) < 1e-6);
                }
            }
        }
    }
}

/// The device loop (both forms) runs the chunk's iterations at most, stops
/// where the host steps stop with minIter and maxIter, and with no
/// preconditioner.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_loop_honours_min_max_iterations_and_no_preconditioner() {
    let _devices = one_test_at_a_time();
    let Some(gpu) = test_device() else { return };
    let one = [gpu];
    let (a, _) = poisson_system("box:12x10x9").unwrap();
    let b = random_vector(a.n_rows(), 8);
    let d = Decomposition::metis(&a, 1).unwrap();
    for (jacobi, single_reduction) in [(true, true), (false, true), (true, false), (false, false)] {
        let options = MultiGpuOptions {
            jacobi,
            check_interval: 5,
            single_reduction,
            ..Default::default()
        };
        let backend = MultiGpuBackend::new(&one, &a, &d, &options).unwrap();
        assert!(backend.device_loop());
        let capped = SolverControls::absolute(1e-12, 13);
        let (perf, _) = solve_on(&backend, &b, &capped);
        assert_eq!(
            perf.iterations, 13,
            "jacobi {jacobi}, single reduction {single_reduction}: {perf:?}"
        );
        assert!(!perf.converged);
        // Converged from the start (the L1 residual may grow above the initial
        // 1 in early iterations, so the tolerance is far above it): minIter
        // alone sets the count.
        let loose = SolverControls {
            tolerance: 1e30,
            min_iter: 9,
            ..SolverControls::default()
        };
        let (perf, _) = solve_on(&backend, &b, &loose);
        assert_eq!(
            perf.iterations, 9,
            "jacobi {jacobi}, single reduction {single_reduction}: {perf:?}"
        );
        let (dev, x_dev) = solve_on(&backend, &b, &controls());
        backend.set_device_loop(false);
        let (host, x_host) = solve_on(&backend, &b, &controls());
        // The history holds the initial residual, then one per iteration.
        assert_eq!(dev.history.len(), dev.iterations + 1);
        assert_eq!(host.history.len(), host.iterations + 1);
        assert!(
            dev.iterations.abs_diff(host.iterations) <= 1,
            "jacobi {jacobi}, single reduction {single_reduction}: {} vs {}",
            dev.iterations,
            host.iterations
        );
        assert!(max_rel_diff(&x_dev, &x_host) < 1e-6);
    }
}

/// The peer transport's all-reduce on two devices: every rank gets the sum of
/// the ranks' partial sums in rank order; a rank whose peer never publishes
/// gives up after the time-out, names that rank and marks its chunk done
/// (no hang).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn peer_reduction_sums_in_rank_order_and_gives_up_on_a_silent_rank() {
    let _devices = one_test_at_a_time();
    let Some(_gpu) = test_device() else { return };
    let many = all_devices();
    if many.len() < 2 {
        return;
    }
    let pair = [&many[0], &many[1]];
    if !all_peers(&pair).unwrap() {
        println!("no peer access between devices 0 and 1: skipped");
        return;
    }
    let empty = fvpoisson::gpu::multi::ExchangePlan {
        idx: Vec::new(),
        sends: Vec::new(),
        recvs: Vec::new(),
    };
    let plans = [empty.clone(), empty];
    let partials = [[0.25, 1.5, -3.0], [1e-3, 2.0, 7.0]];
    let expected: f64 = partials.iter().map(|p| p.iter().sum::<f64>()).sum();
    // Both ranks publish, then finish: the same sum on both.
    let links = peer::link(&pair, &plans, &[0, 0]).unwrap();
    let mut finished = Vec::new();
    for (k, (gpu, link)) in pair.iter().zip(&links).enumerate() {
        let p = gpu.upload(&partials[k]).unwrap();
        let st = gpu.zeros::<f64>(16).unwrap();
        link.publish(gpu, None, Some((&p, 3)), &st).unwrap();
        finished.push((p, st));
    }
    for ((gpu, link), (_, st)) in pair.iter().zip(&links).zip(&finished) {
        let sums = gpu.zeros::<f64>(2).unwrap();
        let records = gpu.zeros::<f64>(3).unwrap();
        link.finish(gpu, "peer_finish_operator", &sums, st, &records, 0, None)
            .unwrap();
        let got = gpu.download(&sums).unwrap()[0];
        assert_eq!(link.failure(gpu).unwrap(), None);
        assert!(
            (got - expected).abs() <= 1e-15 * expected.abs(),
            "{got} vs {expected}"
        );
        assert_eq!(gpu.download(&records).unwrap()[1], got);
    }
    // Rank 1 stays silent: rank 0 gives up on it.
    let mut links = peer::link(&pair, &plans, &[0, 0]).unwrap();
    links[0].set_timeout(std::time::Duration::from_millis(200));
    let gpu = pair[0];
    let p = gpu.upload(&partials[0]).unwrap();
    let st = gpu.zeros::<f64>(16).unwrap();
    let (sums, records) = (gpu.zeros::<f64>(2).unwrap(), gpu.zeros::<f64>(3).unwrap());
    let t = std::time::Instant::now();
    links[0].publish(gpu, None, Some((&p, 3)), &st).unwrap();
    links[0]
        .finish(gpu, "peer_finish_operator", &sums, &st, &records, 0, None)
        .unwrap();
    assert_eq!(links[0].failure(gpu).unwrap(), Some(1));
    assert_eq!(
        gpu.download(&st).unwrap()[0],
        1.0,
        "the chunk is marked done"
    );
    println!("gave up after {:.2} s", t.elapsed().as_secs_f64());
    assert!(t.elapsed().as_secs_f64() < 10.0);
}
