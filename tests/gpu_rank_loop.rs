//! GPU ranks of a distributed run (`MultiGpuBackend::for_rank`, one rank per
//! thread as `run -np N --device gpu` runs them): the NCCL device loop where
//! every rank has a device of its own and NCCL loads, else the host-driven
//! steps, both against the CPU's serial PCG on real meshes with random
//! right-hand sides, twice per run (the second solve reusing the NCCL
//! communicators, bit for bit the first); and a rank that fails (an injected failure at each step
//! of PCG) makes every rank return an error instead of hanging.
//! `skipped: no CUDA device` without a GPU (unless FVPOISSON_REQUIRE_GPU=1);
//! the NCCL runs need two or more devices.

use std::sync::Arc;
use std::time::Duration;

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::multi::{nccl_available, release_kept_comms, MultiGpuBackend, MultiGpuOptions};
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::parallel::threads::run_threads_within;
use fvpoisson::parallel::Communicator;
use fvpoisson::solve::{solve_pcg, PreconditionerKind, SolveError, SolverControls};
use fvpoisson::sparse::distribute::Decomposition;
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::SplitMix;
use fvpoisson::sparse::Csr;

fn random_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut g = SplitMix(seed);
    (0..n).map(|_| g.next_f64() - 0.5).collect()
}

fn controls() -> SolverControls {
    SolverControls::absolute(1e-10, 2000)
}

/// What one rank saw: the loop its PCG ran and the solve's outcome (the
/// iterations and the whole solution).
type RankResult = (String, Result<(usize, Vec<f64>), SolveError>);

/// PCG with Jacobi of `a x = b` on `ranks` thread ranks split by `d`, rank r
/// on device `devices[r % len]`; `fail`: (rank, steps) of an injected
/// failure. Without one, each rank solves twice (a backend per solve, as a
/// run's solves do; the second reuses the NCCL communicators) and the
/// second solve must repeat the first bit for bit.
fn solve_on_ranks(
    a: &Arc<Csr>,
    d: &Arc<Decomposition>,
    b: &Arc<Vec<f64>>,
    devices: Vec<usize>,
    options: MultiGpuOptions,
    fail: Option<(usize, usize)>,
) -> Vec<RankResult> {
    let (a, d, b) = (Arc::clone(a), Arc::clone(d), Arc::clone(b));
    run_threads_within(d.n_ranks(), Duration::from_secs(120), move |comm| {
        let gpu = Gpu::on_device(devices[comm.rank() % devices.len()]).unwrap();
        let solve = || -> RankResult {
            let backend = MultiGpuBackend::for_rank(&gpu, &a, &d, comm, &options).unwrap();
            if let Some((rank, steps)) = fail {
                if rank == comm.rank() {
                    backend.fail_after(steps);
                }
            }
            let b_dev = backend.upload(&b).unwrap();
            let mut x_dev = backend.upload(&vec![0.0; b.len()]).unwrap();
            let solved = backend
                .solve_agreed(None, &b_dev, &mut x_dev, &controls(), "x")
                .map(|(perf, x)| (perf.iterations, x));
            (backend.pcg_loop().to_string(), solved)
        };
        let first = solve();
        if fail.is_none() {
            let (pcg_loop, again) = solve();
            assert_eq!(
                pcg_loop,
                first.0,
                "rank {}: the second solve's loop",
                comm.rank()
            );
            let (Ok(one), Ok(two)) = (&first.1, &again) else {
                panic!("rank {}: {:?} then {:?}", comm.rank(), first.1, again);
            };
            assert!(one == two, "rank {}: the second solve differs", comm.rank());
        }
        release_kept_comms();
        first
    })
    .unwrap()
}

/// The loop `ranks` thread ranks on `devices` (ordinals, rank r on entry
/// r % len) must run: NCCL with a device per rank.
fn expected_loop(ranks: usize, devices: &[usize]) -> &'static str {
    let distinct = ranks <= devices.len();
    match (distinct, nccl_available()) {
        (true, Ok(())) => "NCCL device loop",
        _ => "host-driven steps",
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_ranks_run_the_nccl_device_loop_and_match_the_serial_solve() {
    let Some(_gpu) = test_device() else { return };
    let count = Gpu::device_count().unwrap();
    let all: Vec<usize> = (0..count).collect();
    for spec in ["box:16x12x10", "box:14x14x14:tet:perturb=0.2:renumber"] {
        let (a, _) = poisson_system(spec).unwrap();
        let b = random_vector(a.n_rows(), 11);
        let mut expected = vec![0.0; b.len()];
        let cpu = solve_pcg(
            &a,
            PreconditionerKind::Jacobi,
            &b,
            &mut expected,
            &controls(),
            "x",
        )
        .unwrap();
        let (a, b) = (Arc::new(a), Arc::new(b));
        // 2 and 4 ranks on the devices present (NCCL where there are as
        // many), 3 ranks on device 0 (host-driven); short chunks of the
        // device loop, and the host-driven steps asked for.
        let runs: [(usize, Vec<usize>, usize, bool); 4] = [
            (2, all.clone(), 50, true),
            (4, all.clone(), 7, true),
            (3, vec![0], 50, true),
            (2, all.clone(), 50, false),
        ];
        for (ranks, devices, check_interval, device_loop) in runs {
            let d = Arc::new(Decomposition::metis(&a, ranks).unwrap());
            let options = MultiGpuOptions {
                check_interval,
                device_loop,
                ..MultiGpuOptions::default()
            };
            let want = match device_loop {
                true => expected_loop(ranks, &devices),
                false => "host-driven steps",
            };
            let results = solve_on_ranks(&a, &d, &b, devices, options, None);
            let (_, Ok((iterations, x0))) = &results[0] else {
                panic!("{spec} on {ranks} ranks: {:?}", results[0].1);
            };
            let diff = max_rel_diff(x0, &expected);
            println!(
                "{spec}, {ranks} ranks, {want}: {iterations} iterations (CPU {}), max rel diff \
                 {diff:.1e}",
                cpu.iterations
            );
            assert!(diff < 1e-6, "{spec} {ranks} ranks: {diff}");
            assert!(
                iterations.abs_diff(cpu.iterations) <= 2,
                "{spec}: {iterations} vs {}",
                cpu.iterations
            );
            for (rank, (pcg_loop, solved)) in results.iter().enumerate() {
                assert_eq!(pcg_loop, want, "{spec} {ranks} ranks, rank {rank}");
                let (it, x) = solved.as_ref().unwrap();
                assert_eq!((it, x), (iterations, x0), "rank {rank} differs from rank 0");
            }
        }
    }
}

/// An injected failure on rank 1 at each step of PCG (set-up, precondition,
/// direction, A p, update, ...; in the device loop: after a chunk): every
/// rank returns an error naming rank 1, within the time limit, on ranks
/// sharing device 0 (host-driven steps) and, with two or more devices, one
/// device each (NCCL device loop where NCCL loads).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_failing_gpu_rank_fails_every_rank_without_hanging() {
    let Some(_gpu) = test_device() else { return };
    let count = Gpu::device_count().unwrap();
    let (a, _) = poisson_system("box:12x10x8").unwrap();
    let b = Arc::new(random_vector(a.n_rows(), 3));
    let d = Arc::new(Decomposition::metis(&a, 2).unwrap());
    let a = Arc::new(a);
    let mut layouts = vec![vec![0]];
    if count >= 2 {
        layouts.push(vec![0, 1]);
    }
    for devices in layouts {
        let want = expected_loop(2, &devices);
        for steps in 0..8 {
            let options = MultiGpuOptions {
                check_interval: 3,
                ..MultiGpuOptions::default()
            };
            let results = solve_on_ranks(&a, &d, &b, devices.clone(), options, Some((1, steps)));
            for (rank, (pcg_loop, solved)) in results.iter().enumerate() {
                assert_eq!(pcg_loop, want);
                let e = solved.as_ref().expect_err("rank 1 failed").to_string();
                assert!(
                    e.contains("failure injected on rank 1"),
                    "{want}, failure after {steps} steps, rank {rank}: {e}"
                );
                if rank == 0 {
                    assert!(e.contains("rank 1 failed"), "{e}");
                }
            }
        }
        println!("{want}: every rank failed at each of 8 failure points");
    }
}
