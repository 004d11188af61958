//! `fvpoisson bench --multi-gpu`: strong and weak scaling of Jacobi-PCG over
//! 1, 2, 4 … GPUs ([`fvpoisson::gpu::multi`]) on 7-point boxes split in z-slabs.
//!
//! Cases: strong scaling on each `--multi-strong` box (N³ cells; default 256³
//! = 16.8 M and 320³ = 32.8 M) and weak scaling with `--multi-weak`³ cells
//! per GPU (default 200³ = 8 M: 200×200×200 on one GPU, 200×200×400 on two,
//! 200×200×800 on four). The matrix is the 7-point Laplacian with Dirichlet
//! boundaries (`sparse::testing::grid_laplacian`, the FVM matrix of a uniform
//! hex box up to the factor h), assembled once per box and split by rows on
//! one host thread per rank; b = 1.
//!
//! Per case and GPU count: time per PCG iteration (median-free: the mean over
//! `--multi-iterations` iterations after a warm-up, host-timed: the reductions
//! read back each iteration), the same without the halo transfer (the
//! communication share is 1 − that / the full time; the reductions are in
//! both), time to solution (OpenFOAM residual 1e-6 from x = 0) and parallel
//! efficiency (strong: t₁ / (g·t_g) per iteration; weak: t₁ / t_g). The
//! single-GPU fused Jacobi-PCG (`gpu::pcg`, CUDA graph or separate launches)
//! on the same box is the baseline measured in the same run.
//!
//! The host-driven steps above ("host loop") and the device loop (one host
//! thread per GPU, scalars on the device, peer stores or NCCL all-reduces,
//! PCG in its single-reduction form unless `--multi-two-reductions`; module
//! documentation of [`fvpoisson::gpu::multi`]) are both measured: the device loop's
//! ms/iteration is the difference of two solves run to a fixed iteration
//! count (tolerance 0), so set-up and the initial residual cancel, with and
//! without the halo transfer. Its efficiency is given against the device
//! loop on the smallest GPU count ("vs multi 1 GPU") and against the
//! single-GPU fused loop ("vs fused 1 GPU": t_fused / (g·t_g) strong,
//! t_fused / t_g weak).

use std::time::Instant;

use super::tables::{controls, JacobiBaseline, Report, Row};
use fvpoisson::gpu::multi::{
    box_slabs, MultiGpuBackend, MultiGpuOptions, MultiVector, Reduction, Transport,
};
use fvpoisson::gpu::pcg::{GpuSolveOptions, GpuVector};
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::{pcg, CgBackend, Executor, SolverControls};
use fvpoisson::sparse::testing::grid_laplacian;
use fvpoisson::sparse::{Csr, RowOrdering};

/// What `--multi-gpu` measures.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiBenchSettings {
    /// GPU counts (each at most the devices present; larger ones are skipped
    /// with a note).
    pub gpus: Vec<usize>,
    /// Cells per side of the strong-scaling boxes.
    pub strong: Vec<usize>,
    /// Cells per side per GPU of the weak-scaling box (0: none).
    pub weak: usize,
    /// Timed PCG iterations per measurement.
    pub iterations: usize,
    pub transport: Transport,
    pub slice_height: usize,
    /// The device loop's PCG form (`MultiGpuOptions::single_reduction`).
    pub single_reduction: bool,
}

impl MultiBenchSettings {
    /// The backend options these settings give (the others at their defaults).
    pub fn options(&self) -> MultiGpuOptions {
        MultiGpuOptions {
            slice_height: self.slice_height,
            transport: self.transport,
            single_reduction: self.single_reduction,
            ..MultiGpuOptions::default()
        }
    }
}

/// One case at one GPU count.
struct Point {
    gpus: usize,
    ms_per_iteration: f64,
    ms_no_exchange: f64,
    /// With the reductions by NCCL all-reduce (NCCL transport, 2+ GPUs).
    ms_nccl_reduce: Option<f64>,
    solve_ms: f64,
    iterations: usize,
    setup_ms: f64,
    transport: Transport,
    halo: usize,
    /// The device loop (where it applies: 1 GPU or NCCL).
    device: Option<DevicePoint>,
}

/// The device loop's measurements.
struct DevicePoint {
    ms_per_iteration: f64,
    ms_no_exchange: f64,
    solve_ms: f64,
    iterations: usize,
}

/// Mean ms per iteration: solves of `warmup` and `warmup + count`
/// iterations (tolerance 0) from x = 0, the difference over `count`. Their
/// "not converged" warnings are not logged (fixed-count timings).
pub(super) fn time_fixed_counts(
    backend: &MultiGpuBackend<'_>,
    b: &MultiVector,
    warmup: usize,
    count: usize,
) -> anyhow::Result<f64> {
    let solve = |iterations: usize| -> anyhow::Result<f64> {
        let mut x = backend.upload(&vec![0.0; backend.n()])?;
        let controls = SolverControls::absolute(0.0, iterations);
        backend.synchronize()?;
        let t = Instant::now();
        pcg(backend, b, &mut x, &controls, "p")?;
        backend.synchronize()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Error);
    let ms = (|| -> anyhow::Result<f64> {
        solve(warmup)?;
        let short = solve(warmup)?;
        let long = solve(warmup + count)?;
        Ok((long - short).max(0.0) / count.max(1) as f64)
    })();
    log::set_max_level(level);
    ms
}

/// The device loop's measurements on `backend` (None where it does not apply).
fn measure_device_loop(
    backend: &MultiGpuBackend<'_>,
    b: &MultiVector,
    warmup: usize,
    count: usize,
) -> anyhow::Result<Option<DevicePoint>> {
    backend.set_device_loop(true);
    if !backend.device_loop() {
        return Ok(None);
    }
    let ms_per_iteration = time_fixed_counts(backend, b, warmup, count)?;
    backend.set_exchange(false)?;
    let ms_no_exchange = time_fixed_counts(backend, b, warmup, count);
    backend.set_exchange(true)?;
    // Only the communication share is lost when this timing fails.
    let ms_no_exchange = ms_no_exchange.unwrap_or_else(|e| {
        eprintln!("device loop without the halo transfer: {e:#}");
        f64::NAN
    });
    let mut x = backend.upload(&vec![0.0; backend.n()])?;
    let t = Instant::now();
    let perf = pcg(backend, b, &mut x, &controls(), "p")?;
    let solve_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(Some(DevicePoint {
        ms_per_iteration,
        ms_no_exchange,
        solve_ms,
        iterations: perf.iterations,
    }))
}

/// Mean wall time (ms) of one PCG iteration over `count` iterations (the
/// backend's steps in PCG's order, no stopping test) after `warmup`.
fn time_iterations(
    backend: &MultiGpuBackend<'_>,
    b: &MultiVector,
    warmup: usize,
    count: usize,
) -> anyhow::Result<f64> {
    let mut x = backend.upload(&vec![0.0; backend.n()])?;
    let [mut r, mut z, mut p, mut q] = std::array::from_fn(|_| backend.new_vector());
    backend.initialize(b, &x, &mut r);
    let mut step = |first: bool, rz_old: f64| -> f64 {
        let rz = backend.precondition(&r, &mut z);
        let beta = if first { 0.0 } else { rz / rz_old };
        backend.update_direction(beta, &z, &mut p);
        let pq = backend.apply_operator(&p, &mut q);
        backend.update_solution(rz / pq, &p, &q, &mut x, &mut r);
        rz
    };
    let mut rz = step(true, 0.0);
    for _ in 1..warmup {
        rz = step(false, rz);
    }
    backend.synchronize()?;
    let t = Instant::now();
    for _ in 0..count {
        rz = step(false, rz);
    }
    backend.synchronize()?;
    backend.device_status()?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / count.max(1) as f64)
}

/// The measurements of `a` (an nx × ny × nz box) on the first `g` GPUs.
fn measure(
    gpus: &[Gpu],
    a: &Csr,
    b: &[f64],
    (nx, ny, nz): (usize, usize, usize),
    settings: &MultiBenchSettings,
) -> anyhow::Result<Point> {
    let g = gpus.len();
    let t = Instant::now();
    let d = box_slabs(nx, ny, nz, g).map_err(anyhow::Error::msg)?;
    let options = settings.options();
    let backend = MultiGpuBackend::new(gpus, a, &d, &options)?;
    let b_dev = backend.upload(b)?;
    backend.synchronize()?;
    let setup_ms = t.elapsed().as_secs_f64() * 1e3;
    let warmup = 10;
    let ms_per_iteration = time_iterations(&backend, &b_dev, warmup, settings.iterations)?;
    backend.set_exchange(false)?;
    let ms_no_exchange = time_iterations(&backend, &b_dev, warmup, settings.iterations)?;
    backend.set_exchange(true)?;
    let ms_nccl_reduce = match (backend.transport(), g > 1) {
        (Transport::Nccl, true) => {
            backend.set_reduction(Reduction::NcclAllReduce);
            let ms = time_iterations(&backend, &b_dev, warmup, settings.iterations)?;
            backend.set_reduction(Reduction::HostRead);
            Some(ms)
        }
        _ => None,
    };
    backend.set_device_loop(false);
    let mut x = backend.upload(&vec![0.0; a.n_rows()])?;
    let t = Instant::now();
    let perf = pcg(&backend, &b_dev, &mut x, &controls(), "p")?;
    let solve_ms = t.elapsed().as_secs_f64() * 1e3;
    let device = measure_device_loop(&backend, &b_dev, warmup, settings.iterations)?;
    Ok(Point {
        gpus: g,
        ms_per_iteration,
        ms_no_exchange,
        ms_nccl_reduce,
        solve_ms,
        iterations: perf.iterations,
        setup_ms,
        transport: backend.transport(),
        halo: backend.halo_values(),
        device,
    })
}

/// The GPU counts of `requested` from `least` up to the devices present, the
/// devices the largest needs (opened), and a note for each count skipped
/// (`why` says what a count below `least` lacks).
pub(super) fn gpu_counts(
    requested: &[usize],
    least: usize,
    why: &str,
) -> anyhow::Result<(Vec<usize>, Vec<Gpu>, Vec<String>)> {
    let available = Gpu::device_count()?;
    let mut notes = Vec::new();
    let counts: Vec<usize> = requested
        .iter()
        .copied()
        .filter(|&g| {
            let ok = (least.max(1)..=available).contains(&g);
            if !ok {
                notes.push(format!("{g} GPUs skipped: {why}{available} present"));
            }
            ok
        })
        .collect();
    let most = counts.iter().copied().max().unwrap_or(0);
    let devices = (0..most).map(Gpu::on_device).collect::<Result<_, _>>()?;
    Ok((counts, devices, notes))
}

/// The `--multi-gpu` rows, and the summary table printed last (markdown).
pub fn run(settings: &MultiBenchSettings) -> anyhow::Result<(Report, String)> {
    let (counts, devices, notes) = gpu_counts(&settings.gpus, 1, "")?;
    let mut rows = Vec::new();
    let mut table = String::from(
        "| scaling | cells | GPUs | host loop ms/it. | efficiency | comm. share | ms/it. NCCL \
         all-reduce | device loop ms/it. | eff. vs multi 1 GPU | eff. vs fused 1 GPU | comm. \
         share | iterations | solve ms host / device | transport |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    // (scaling, cells per side): strong N³ whatever the GPUs, weak N×N×(N·g).
    let mut cases: Vec<(&str, usize)> = settings.strong.iter().map(|&n| ("strong", n)).collect();
    if settings.weak > 0 {
        cases.push(("weak", settings.weak));
    }
    for &(scaling, side) in &cases {
        let dims = |g: usize| match scaling {
            "strong" => (side, side, side),
            _ => (side, side, side * g),
        };
        // (GPUs, ms per iteration) of the smallest count: the efficiencies' base.
        let mut first: Option<(usize, f64)> = None;
        // The same for the device loop, and the single-GPU fused loop's on
        // the first box (weak scaling: one GPU's share).
        let mut first_device: Option<(usize, f64)> = None;
        let mut fused_ms: Option<f64> = None;
        let mut built: Option<((usize, usize, usize), Csr)> = None;
        for &g in &counts {
            let (nx, ny, nz) = dims(g);
            let spec = format!("box:{nx}x{ny}x{nz}");
            if built.as_ref().map(|b| b.0) != Some((nx, ny, nz)) {
                drop(built.take()); // free the last box first
                let t = Instant::now();
                let a = grid_laplacian(nx, ny, nz);
                eprintln!("{spec}: assembled in {:.1} s", t.elapsed().as_secs_f64());
                built = Some(((nx, ny, nz), a));
                let (_, a) = built.as_ref().expect("just built");
                let (row, ms) = baseline_row(&devices[0], &spec, a, settings)?;
                rows.push(row);
                fused_ms.get_or_insert(ms);
            }
            let (_, a) = built.as_ref().expect("built above");
            let (n, nnz) = (a.n_rows(), a.nnz());
            let b = vec![1.0; n];
            // The point's row (its note printed as it is measured).
            let slab_row = |ms: f64, note: String| {
                eprintln!("{spec} on {g} GPUs: {note}");
                let what = format!("multi-GPU PCG Jacobi, {g} GPUs");
                Row::timing(&spec, "slabs", what, (n, nnz), ms, note)
            };
            let p = match measure(&devices[..g], a, &b, (nx, ny, nz), settings) {
                Ok(p) => p,
                Err(e) => {
                    rows.push(slab_row(0.0, format!("failed: {e:#}")));
                    continue;
                }
            };
            let (g1, t1) = *first.get_or_insert((p.gpus, p.ms_per_iteration));
            let scale = |(g1, t1): (usize, f64), t: f64| match scaling {
                "strong" => (g1 as f64 * t1) / (g as f64 * t),
                _ => t1 / t,
            };
            let efficiency = scale((g1, t1), p.ms_per_iteration);
            let share = 1.0 - p.ms_no_exchange / p.ms_per_iteration;
            let all_reduce = match p.ms_nccl_reduce {
                Some(ms) => format!(", {ms:.4} ms/iteration with NCCL all-reduce reductions"),
                None => String::new(),
            };
            let note = format!(
                "{scaling} scaling: {:.4} ms/iteration ({:.4} without the halo transfer: \
                 communication share {:.0}%{all_reduce}), efficiency {:.0}%, {} iterations to \
                 1e-6 in {:.1} ms, host+upload set-up {:.1} s, {} halo values per exchange, \
                 {:?}",
                p.ms_per_iteration,
                p.ms_no_exchange,
                100.0 * share,
                100.0 * efficiency,
                p.iterations,
                p.solve_ms,
                p.setup_ms / 1e3,
                p.halo,
                p.transport
            );
            rows.push(slab_row(p.ms_per_iteration, note));
            let mut device_cells = "- | - | - | -".to_string();
            let mut iterations = p.iterations.to_string();
            let mut device_solve = "-".to_string();
            if let Some(d) = &p.device {
                let base = *first_device.get_or_insert((g, d.ms_per_iteration));
                let (vs_multi, vs_fused) = (
                    scale(base, d.ms_per_iteration),
                    scale((1, fused_ms.unwrap_or(f64::NAN)), d.ms_per_iteration),
                );
                let share = 1.0 - d.ms_no_exchange / d.ms_per_iteration;
                let form = match settings.single_reduction {
                    true => "single-reduction PCG",
                    false => "two-reduction PCG",
                };
                let note = format!(
                    "{scaling} scaling, device loop ({form}): {:.4} ms/iteration ({:.4} without the halo \
                     transfer: communication share {:.0}%), efficiency {:.0}% vs the device loop \
                     on {} GPU(s), {:.0}% vs the single-GPU fused loop, {} iterations to 1e-6 in \
                     {:.1} ms",
                    d.ms_per_iteration,
                    d.ms_no_exchange,
                    100.0 * share,
                    100.0 * vs_multi,
                    base.0,
                    100.0 * vs_fused,
                    d.iterations,
                    d.solve_ms
                );
                eprintln!("{spec} on {g} GPUs: {note}");
                rows.push(Row::timing(
                    &spec,
                    "slabs",
                    format!("multi-GPU PCG Jacobi device loop, {g} GPUs"),
                    (n, nnz),
                    d.ms_per_iteration,
                    note,
                ));
                device_cells = format!(
                    "{:.3} | {:.0}% | {:.0}% | {:.0}%",
                    d.ms_per_iteration,
                    100.0 * vs_multi,
                    100.0 * vs_fused,
                    100.0 * share
                );
                iterations = format!("{} / {}", p.iterations, d.iterations);
                device_solve = format!("{:.0}", d.solve_ms);
            }
            table.push_str(&format!(
                "| {scaling} | {nx}x{ny}x{nz} ({:.1} M) | {g} | {:.3} | {:.0}% | {:.0}% | {} | \
                 {device_cells} | {iterations} | {:.0} / {device_solve} | {:?} |\n",
                n as f64 / 1e6,
                p.ms_per_iteration,
                100.0 * efficiency,
                100.0 * share,
                p.ms_nccl_reduce
                    .map_or("-".to_string(), |ms| format!("{ms:.3}")),
                p.solve_ms,
                p.transport
            ));
        }
    }
    Ok((Report { rows, notes }, table))
}

/// The single-GPU fused Jacobi-PCG on the same box (natural order): its row
/// and ms per iteration.
fn baseline_row(
    gpu: &Gpu,
    spec: &str,
    a: &Csr,
    settings: &MultiBenchSettings,
) -> anyhow::Result<(Row, f64)> {
    let options = GpuSolveOptions {
        slice_height: settings.slice_height,
        ordering: RowOrdering::Natural,
        ..GpuSolveOptions::default()
    };
    let b = GpuVector::from(gpu.upload(&vec![1.0; a.n_rows()])?);
    let base = JacobiBaseline::measure(gpu, a, &b, &options)?;
    let note = base.note("; the single-GPU baseline");
    eprintln!("{spec}: 1 GPU fused: {note}");
    let ms = base.ms / base.iterations().max(1) as f64;
    let row = Row::timing(
        spec,
        "natural",
        "PCG Jacobi, 1 GPU fused loop".into(),
        (a.n_rows(), a.nnz()),
        ms,
        note,
    );
    Ok((row, ms))
}
