//! `fvpoisson bench --rank-loop`: Jacobi-PCG of a distributed run's GPU
//! ranks (`MultiGpuBackend::for_rank`, one thread rank per GPU, as `run -np
//! N --device gpu` runs them) on the NCCL device loop and on the host-driven
//! steps, against the one-process multi-GPU device loop on the same GPUs
//! (`MultiGpuBackend::new`, the baseline measured in the same run).
//!
//! Cases: the `--multi-strong` boxes (7-point Laplacian, `grid_laplacian`,
//! b = 1) cut in z-slabs for each `--gpus` count of 2 or more (counts above
//! the devices present are skipped with a note). Per point: ms per iteration
//! (the difference of two solves run to a fixed iteration count, tolerance
//! 0, over `--multi-iterations`, so set-up and the initial residual cancel;
//! rank 0's clock), iterations and time to OpenFOAM residual 1e-6 from x = 0
//! (the agreed solve, the solution gathered on every rank included).

use std::time::Instant;

use super::multi::{time_fixed_counts, MultiBenchSettings};
use super::tables::{controls, Report, Row};
use fvpoisson::gpu::multi::{box_slabs, MultiGpuBackend, MultiGpuOptions, MultiVector};
use fvpoisson::gpu::Gpu;
use fvpoisson::parallel::threads::run_threads;
use fvpoisson::parallel::Communicator;
use fvpoisson::solve::{pcg, SolveError, SolverPerformance};
use fvpoisson::sparse::distribute::Decomposition;
use fvpoisson::sparse::testing::grid_laplacian;
use fvpoisson::sparse::Csr;

/// One loop's measurements.
struct Timing {
    /// The loop that ran (`MultiGpuBackend::pcg_loop`).
    pcg_loop: &'static str,
    ms_per_iteration: f64,
    solve_ms: f64,
    iterations: usize,
}

/// Iterations before the timed ones.
const WARMUP: usize = 10;

/// One point's system, the same for every loop measured on it: `a x = b`
/// split by `d` over `gpus`, `count` timed iterations.
struct Point<'a> {
    gpus: &'a [Gpu],
    a: &'a Csr,
    d: &'a Decomposition,
    b: &'a [f64],
    count: usize,
}

/// The one-process device loop on the point's GPUs.
fn one_process(p: &Point<'_>, options: &MultiGpuOptions) -> anyhow::Result<Timing> {
    let backend = MultiGpuBackend::new(p.gpus, p.a, p.d, options)?;
    timed(&backend, p.b, p.count, |b, x| {
        pcg(&backend, b, x, &controls(), "p")
    })
}

/// `count` iterations after a warm-up timed on `backend` for `b`, then one
/// timed `solve` from x = 0.
fn timed(
    backend: &MultiGpuBackend<'_>,
    b: &[f64],
    count: usize,
    solve: impl FnOnce(&MultiVector, &mut MultiVector) -> Result<SolverPerformance, SolveError>,
) -> anyhow::Result<Timing> {
    let b_dev = backend.upload(b)?;
    let ms_per_iteration = time_fixed_counts(backend, &b_dev, WARMUP, count)?;
    let mut x = backend.upload(&vec![0.0; b.len()])?;
    backend.synchronize()?;
    let t = Instant::now();
    let perf = solve(&b_dev, &mut x)?;
    Ok(Timing {
        pcg_loop: backend.pcg_loop(),
        ms_per_iteration,
        solve_ms: t.elapsed().as_secs_f64() * 1e3,
        iterations: perf.iterations,
    })
}

/// One thread rank per GPU of the point, rank r on `gpus[r]`, with or
/// without the device loop; rank 0's timings.
fn on_ranks(p: &Point<'_>, options: &MultiGpuOptions) -> anyhow::Result<Timing> {
    let results = run_threads(p.gpus.len(), |comm| -> Result<Timing, String> {
        let gpu = &p.gpus[comm.rank()];
        let run = || -> anyhow::Result<Timing> {
            let backend = MultiGpuBackend::for_rank(gpu, p.a, p.d, comm, options)?;
            timed(&backend, p.b, p.count, |b, x| {
                let (perf, _) = backend.solve_agreed(None, b, x, &controls(), "p")?;
                Ok(perf)
            })
        };
        let timing = run().map_err(|e| format!("{e:#}"));
        fvpoisson::gpu::multi::release_kept_comms();
        timing
    });
    results
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no rank"))?
        .map_err(anyhow::Error::msg)
}

/// The `--rank-loop` rows, and the summary table printed last (markdown).
pub fn run(settings: &MultiBenchSettings) -> anyhow::Result<(Report, String)> {
    let (counts, devices, notes) =
        super::multi::gpu_counts(&settings.gpus, 2, "ranks need 2 or more, ")?;
    let mut rows = Vec::new();
    let mut table = String::from(
        "| cells | GPUs | one process ms/it. | ranks NCCL loop ms/it. | vs one process | ranks \
         host-driven ms/it. | NCCL loop speed-up | iterations | solve ms (one process / NCCL \
         / host) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    // The fixed-count solves' "not converged" warnings stay out of the log.
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Error);
    for &side in &settings.strong {
        let spec = format!("box:{side}x{side}x{side}");
        if counts.is_empty() {
            break;
        }
        let a = grid_laplacian(side, side, side);
        let (n, nnz) = (a.n_rows(), a.nnz());
        let b = vec![1.0; n];
        for &g in &counts {
            let d = box_slabs(side, side, side, g).map_err(anyhow::Error::msg)?;
            let options = settings.options();
            let host_options = MultiGpuOptions {
                device_loop: false,
                ..options
            };
            let point = Point {
                gpus: &devices[..g],
                a: &a,
                d: &d,
                b: &b,
                count: settings.iterations,
            };
            let measured = one_process(&point, &options).and_then(|base| {
                let nccl = on_ranks(&point, &options)?;
                let host = on_ranks(&point, &host_options)?;
                Ok((base, nccl, host))
            });
            let (base, nccl, host) = match measured {
                Ok(m) => m,
                Err(e) => {
                    let note = format!("failed: {e:#}");
                    eprintln!("{spec} on {g} GPU ranks: {note}");
                    rows.push(Row::timing(
                        &spec,
                        "slabs",
                        format!("GPU ranks PCG Jacobi, {g} GPUs"),
                        (n, nnz),
                        0.0,
                        note,
                    ));
                    continue;
                }
            };
            let versus = base.ms_per_iteration / nccl.ms_per_iteration;
            let speedup = host.ms_per_iteration / nccl.ms_per_iteration;
            for (what, t, note) in [
                (
                    format!(
                        "multi-GPU PCG Jacobi one process ({}), {g} GPUs",
                        base.pcg_loop
                    ),
                    &base,
                    "the baseline".to_string(),
                ),
                (
                    format!("GPU ranks PCG Jacobi ({}), {g} GPUs", nccl.pcg_loop),
                    &nccl,
                    format!(
                        "{:.0}% of the one-process device loop's speed",
                        100.0 * versus
                    ),
                ),
                (
                    format!("GPU ranks PCG Jacobi ({}), {g} GPUs", host.pcg_loop),
                    &host,
                    format!("the NCCL device loop is {speedup:.2}x faster per iteration"),
                ),
            ] {
                let note = format!(
                    "{:.4} ms/iteration, {} iterations to 1e-6 in {:.1} ms; {note}",
                    t.ms_per_iteration, t.iterations, t.solve_ms
                );
                eprintln!("{spec}, {what}: {note}");
                rows.push(Row::timing(
                    &spec,
                    "slabs",
                    what,
                    (n, nnz),
                    t.ms_per_iteration,
                    note,
                ));
            }
            table.push_str(&format!(
                "| {spec} ({:.1} M) | {g} | {:.3} | {:.3} | {:.0}% | {:.3} | {speedup:.2}x | \
                 {} / {} / {} | {:.0} / {:.0} / {:.0} |\n",
                n as f64 / 1e6,
                base.ms_per_iteration,
                nccl.ms_per_iteration,
                100.0 * versus,
                host.ms_per_iteration,
                base.iterations,
                nccl.iterations,
                host.iterations,
                base.solve_ms,
                nccl.solve_ms,
                host.solve_ms
            ));
        }
    }
    log::set_max_level(level);
    Ok((Report { rows, notes }, table))
}
