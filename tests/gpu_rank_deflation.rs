//! Subdomain deflation on GPU ranks (`gpu::multi::MultiGpuDeflation`, one
//! deflation vector per rank) against the CPU ranks'
//! (`solve::distributed::solve_pcg_distributed`): thread ranks 2, 3
//! and 4 (METIS) on a hex box and a perturbed tet box with random
//! right-hand sides, each rank on the one device (`MultiGpuBackend::for_rank`,
//! host-driven steps), and all ranks in one process (`MultiGpuBackend::new`,
//! host-staged halos). Jacobi and no preconditioner are the same on both:
//! the same iterations ±1 and the same solution to the solver tolerance, and
//! fewer iterations than without deflation on 4 ranks; the deflation steps
//! alone (P v, x + s Z a, sums) match to round-off. A singular matrix
//! (E not positive definite) is an error on every rank. `skipped: no CUDA
//! device` without a GPU (unless FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::multi::{
    pcg_over_ranks, MultiGpuBackend, MultiGpuDeflation, MultiGpuOptions, Transport,
};
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::parallel::threads::run_threads;
use fvpoisson::parallel::{gather_global, Communicator};
use fvpoisson::solve::deflation::DeflationOps;
use fvpoisson::solve::distributed::{
    solve_pcg_distributed, Deflation, DistributedBackend, RankDeflation,
};
use fvpoisson::solve::jacobi::Identity;
use fvpoisson::solve::{
    Executor, PreconditionerKind, SolveError, SolverControls, SolverPerformance,
};
use fvpoisson::sparse::distribute::Decomposition;
use fvpoisson::sparse::testing::random_vector;
use fvpoisson::sparse::Csr;

fn controls() -> SolverControls {
    SolverControls::absolute(1e-10, 3000)
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

fn max_abs(x: &[f64]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

/// PCG (deflated or not) on `backend` from x = 0; the whole x back.
fn solve_on(
    backend: &MultiGpuBackend,
    a: &Csr,
    d: &Decomposition,
    b: &[f64],
    deflation: Deflation,
) -> Result<(Vec<f64>, SolverPerformance), SolveError> {
    let device = |e: fvpoisson::gpu::GpuError| SolveError::Device(e.to_string());
    let b_dev = backend.upload(b).map_err(device)?;
    let mut x_dev = backend.upload(&vec![0.0; b.len()]).map_err(device)?;
    let ops = MultiGpuDeflation::of_setting(backend, a, d, deflation)?;
    let perf = pcg_over_ranks(backend, ops.as_ref(), &b_dev, &mut x_dev, &controls(), "p")?;
    Ok((backend.download(&x_dev).map_err(device)?, perf))
}

/// Thread ranks, each on the one device through its communicator: (whole
/// x, iterations) as every rank sees it (all ranks agree).
fn gpu_ranks(
    a: &Csr,
    b: &[f64],
    d: &Decomposition,
    jacobi: bool,
    deflation: Deflation,
) -> Result<(Vec<f64>, usize), Vec<SolveError>> {
    let options = MultiGpuOptions {
        jacobi,
        ..MultiGpuOptions::default()
    };
    let results = run_threads(d.n_ranks(), |comm| {
        let gpu = Gpu::on_device(0).unwrap();
        let backend = MultiGpuBackend::for_rank(&gpu, a, d, comm, &options).unwrap();
        solve_on(&backend, a, d, b, deflation).map(|(mut x, perf)| {
            // Each rank holds its rows: merge them into the whole x.
            comm.merge(&mut x);
            (x, perf.iterations)
        })
    });
    let (ok, errors): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    if !errors.is_empty() {
        assert!(ok.is_empty(), "some ranks failed, others did not");
        return Err(errors.into_iter().map(|e| e.unwrap_err()).collect());
    }
    let ok: Vec<_> = ok.into_iter().map(Result::unwrap).collect();
    for r in &ok[1..] {
        assert_eq!(r.1, ok[0].1, "GPU ranks disagree on the iterations");
        assert_eq!(r.0, ok[0].0, "GPU ranks disagree on x");
    }
    Ok(ok.into_iter().next().unwrap())
}

/// CPU ranks: (whole x, iterations).
fn cpu_ranks(
    a: &Csr,
    b: &[f64],
    d: &Decomposition,
    precond: PreconditionerKind,
    deflation: Deflation,
) -> (Vec<f64>, usize) {
    let mut results = run_threads(d.n_ranks(), |comm| {
        let local = d.local(a, comm.rank()).unwrap();
        let bl = local.scatter(b);
        let mut xl = vec![0.0; local.n_owned];
        let perf = solve_pcg_distributed(
            &local,
            comm,
            precond,
            deflation,
            &bl,
            &mut xl,
            &controls(),
            "p",
        )
        .unwrap();
        (gather_global(comm, &local, &xl), perf.iterations)
    });
    results.swap_remove(0)
}

fn meshes() -> Vec<(&'static str, Csr, Vec<f64>)> {
    ["box:12x10x8", "box:10x10x10:tet:perturb=0.2"]
        .into_iter()
        .enumerate()
        .map(|(k, spec)| {
            let (a, _) = poisson_system(spec).unwrap();
            let b = random_vector(a.n_rows(), 17 + k as u64);
            (spec, a, b)
        })
        .collect()
}

/// One projection P v, the prolongation x += s Z a, a dot product and Σ|v|
/// on GPU ranks against the CPU ranks' `RankDeflation` on the same random
/// vectors: equal to round-off (the sums are added in another order).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn deflation_steps_on_gpu_ranks_match_the_cpu_ranks() {
    let Some(_gpu) = test_device() else { return };
    for (name, a, _) in meshes() {
        for ranks in [2, 3, 4] {
            let d = Decomposition::metis(&a, ranks).unwrap();
            let n = a.n_rows();
            let (v, x) = (random_vector(n, 5), random_vector(n, 6));
            let results = run_threads(ranks, |comm| {
                let local = d.local(&a, comm.rank()).unwrap();
                let cpu = RankDeflation::new(&local, comm).unwrap();
                let (mut v_cpu, mut x_cpu) = (local.scatter(&v), local.scatter(&x));
                cpu.project(&mut v_cpu);
                cpu.prolong_add(0.5, &mut x_cpu);
                // The sums deflated PCG takes from the rank's executor.
                let identity = Identity(local.n_owned);
                let cpu_executor = DistributedBackend::new(&local, comm, &identity);
                let cpu_sums = [
                    cpu_executor.dot(&v_cpu, &x_cpu),
                    cpu_executor.sum_abs(&v_cpu),
                ];
                let gpu = Gpu::on_device(0).unwrap();
                let options = MultiGpuOptions::default();
                let backend = MultiGpuBackend::for_rank(&gpu, &a, &d, comm, &options).unwrap();
                let ops = MultiGpuDeflation::new(&backend, &a, &d).unwrap();
                let (mut v_dev, mut x_dev) =
                    (backend.upload(&v).unwrap(), backend.upload(&x).unwrap());
                ops.project(&mut v_dev);
                ops.prolong_add(0.5, &mut x_dev);
                let gpu_sums = [backend.dot(&v_dev, &x_dev), backend.sum_abs(&v_dev)];
                backend.device_status().unwrap();
                let mut v_gpu = backend.download(&v_dev).unwrap();
                let mut x_gpu = backend.download(&x_dev).unwrap();
                comm.merge(&mut v_gpu);
                comm.merge(&mut x_gpu);
                (
                    gather_global(comm, &local, &v_cpu),
                    gather_global(comm, &local, &x_cpu),
                    cpu_sums,
                    v_gpu,
                    x_gpu,
                    gpu_sums,
                )
            });
            let (v_cpu, x_cpu, cpu_sums, v_gpu, x_gpu, gpu_sums) = &results[0];
            let dv = max_diff(v_gpu, v_cpu) / max_abs(&v);
            let dx = max_diff(x_gpu, x_cpu) / max_abs(x_cpu);
            let ds = (0..2).map(|i| (gpu_sums[i] / cpu_sums[i] - 1.0).abs());
            let ds = ds.fold(0.0, f64::max);
            println!(
                "{name} | {ranks} ranks | P v {dv:.1e}, x + s Z a {dx:.1e}, dot and sum |v| \
                 {ds:.1e} (relative to the CPU ranks)"
            );
            assert!(
                dv < 1e-12 && dx < 1e-12 && ds < 1e-12,
                "{name}, {ranks} ranks"
            );
            // P v is orthogonal to Z: each rank's sum of P v is ~0.
            let owner = d.owners();
            let mut sums = vec![0.0; ranks];
            for (i, value) in v_gpu.iter().enumerate() {
                sums[owner[i] as usize] += value;
            }
            let scale: f64 = v.iter().map(|x| x.abs()).sum();
            assert!(
                sums.iter().all(|s| s.abs() < 1e-10 * scale),
                "{name}: {sums:?}"
            );
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn deflation_on_gpu_ranks_matches_the_cpu_ranks() {
    let Some(_gpu) = test_device() else { return };
    for (name, a, b) in meshes() {
        for (precond, jacobi) in [
            (PreconditionerKind::Jacobi, true),
            (PreconditionerKind::None, false),
        ] {
            for ranks in [2, 3, 4] {
                let d = Decomposition::metis(&a, ranks).unwrap();
                let (x_cpu, it_cpu) = cpu_ranks(&a, &b, &d, precond, Deflation::Subdomains);
                let (x_gpu, it_gpu) = gpu_ranks(&a, &b, &d, jacobi, Deflation::Subdomains)
                    .unwrap_or_else(|e| panic!("{name}, {ranks} ranks: {e:?}"));
                let (_, it_plain) = gpu_ranks(&a, &b, &d, jacobi, Deflation::None)
                    .unwrap_or_else(|e| panic!("{name}, {ranks} ranks: {e:?}"));
                let diff = max_diff(&x_gpu, &x_cpu) / max_abs(&x_cpu);
                println!(
                    "{name} | {precond} | {ranks} GPU ranks | deflated {it_gpu} iterations \
                     (CPU ranks {it_cpu}), not deflated {it_plain} | max |x_gpu - x_cpu| / \
                     max |x| = {diff:.1e}"
                );
                assert!(
                    it_gpu.abs_diff(it_cpu) <= 1,
                    "{name}, {precond}, {ranks} ranks: GPU {it_gpu} vs CPU {it_cpu}"
                );
                assert!(diff <= 1e-6, "{name}, {precond}, {ranks} ranks: {diff}");
                if ranks == 4 {
                    assert!(
                        it_gpu < it_plain,
                        "{name}, {precond}: deflated {it_gpu} vs {it_plain}"
                    );
                }
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn deflation_over_ranks_in_one_process_matches_the_cpu_ranks() {
    let Some(gpu) = test_device() else { return };
    let gpus = [gpu];
    let options = MultiGpuOptions {
        transport: Transport::Host,
        ..MultiGpuOptions::default()
    };
    for (name, a, b) in meshes() {
        for ranks in [2, 3, 4] {
            let d = Decomposition::metis(&a, ranks).unwrap();
            let backend = MultiGpuBackend::new(&gpus, &a, &d, &options).unwrap();
            let (x_gpu, perf) = solve_on(&backend, &a, &d, &b, Deflation::Subdomains).unwrap();
            let (x_cpu, it_cpu) = cpu_ranks(
                &a,
                &b,
                &d,
                PreconditionerKind::Jacobi,
                Deflation::Subdomains,
            );
            let diff = max_diff(&x_gpu, &x_cpu) / max_abs(&x_cpu);
            println!(
                "{name} | {ranks} ranks on one GPU, one process | deflated {} iterations (CPU \
                 ranks {it_cpu}) | max |x_gpu - x_cpu| / max |x| = {diff:.1e}",
                perf.iterations
            );
            assert!(perf.converged, "{name}, {ranks} ranks: {perf:?}");
            assert!(
                perf.iterations.abs_diff(it_cpu) <= 1,
                "{name}, {ranks} ranks: {} vs {it_cpu}",
                perf.iterations
            );
            assert!(diff <= 1e-6, "{name}, {ranks} ranks: {diff}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_singular_coarse_matrix_is_an_error_on_every_gpu_rank() {
    let Some(_gpu) = test_device() else { return };
    // The 1-D Laplacian with Neumann ends: singular, and so is E.
    let n = 40;
    let (mut ptr, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for i in 0..n {
        if i > 0 {
            cols.push(i as u32 - 1);
            vals.push(-1.0);
        }
        cols.push(i as u32);
        vals.push(if i == 0 || i == n - 1 { 1.0 } else { 2.0 });
        if i + 1 < n {
            cols.push(i as u32 + 1);
            vals.push(-1.0);
        }
        ptr.push(cols.len());
    }
    let a = Csr::new(n, ptr, cols, vals).unwrap();
    let b = random_vector(n, 3);
    let d = Decomposition::metis(&a, 2).unwrap();
    let errors = gpu_ranks(&a, &b, &d, true, Deflation::Subdomains).unwrap_err();
    assert_eq!(errors.len(), 2);
    for e in errors {
        assert!(e.to_string().contains("not positive definite"), "{e}");
    }
}
