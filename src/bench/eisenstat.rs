//! `fvpoisson bench --eisenstat [MESHES]`: PCG time to solution on the device
//! with Jacobi (the fused loop, RCM order: the baseline), multicolour
//! symmetric Gauss–Seidel (a `DevicePreconditioner` in the fused loop) and
//! the same SGS by Eisenstat's trick (`gpu::eisenstat`), both on the RCM
//! order renumbered colour by colour, from x = 0 to the bench tolerance
//! (OpenFOAM-normalised 1e-6), each timed after a warm-up solve; the ratios
//! are Jacobi-PCG's solve time over the row's, measured in the same run.
//! The set-ups (the colouring, the split) are given in the notes. The same
//! Eisenstat row is in `--preconditioners` and in `--smoothers`' PCG table.

use super::smooth::{solve_warm, Ordered};
use super::tables::{controls, convergence_mark, poisson_system, rcm_system, JacobiBaseline, Row};
use std::time::Instant;

use fvpoisson::gpu::eisenstat::{
    layout_settings, DeviceEisenstat, EisenstatOptions, DEFAULT_OPTIONS,
};
use fvpoisson::gpu::pcg::GpuSolveOptions;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuVector};
use fvpoisson::gpu::setup::{collect_phases, SetupPhase};
use fvpoisson::gpu::smooth::{colour_layout, DeviceSmootherPreconditioner};
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::colouring::Colouring;
use fvpoisson::solve::eisenstat::eisenstat_cg;
use fvpoisson::solve::eisenstat::ResidualCheck;
use fvpoisson::solve::SolverControls;
use fvpoisson::solve::{SolveError, SolverPerformance};
use fvpoisson::sparse::Csr;

/// The Eisenstat rows: the residual carried every iteration, or checked
/// when predicted converged (at least every 50 iterations: on the CPU the
/// prediction alone stops at the right iteration, `solve::eisenstat` docs),
/// each iteration read back or up to 8 chained on the device, rows in colour
/// order or sorted by length in 256-row windows.
const ROWS: [(&str, EisenstatOptions); 5] = [
    (
        "Eisenstat SGS, residual every iteration",
        EisenstatOptions {
            check: ResidualCheck::EveryIteration,
            ..ONE_BY_ONE
        },
    ),
    ("Eisenstat SGS, predicted checks", ONE_BY_ONE),
    (
        "Eisenstat SGS, chains of up to 8",
        EisenstatOptions {
            max_chunk: 8,
            ..ONE_BY_ONE
        },
    ),
    (
        "Eisenstat SGS, sorted rows",
        EisenstatOptions {
            sort_window: 256,
            ..ONE_BY_ONE
        },
    ),
    (
        "Eisenstat SGS, chains of up to 8, sorted rows (the default)",
        DEFAULT_OPTIONS,
    ),
];

/// Predicted checks, every iteration read back, rows in colour order.
const ONE_BY_ONE: EisenstatOptions = EisenstatOptions {
    max_chunk: 1,
    sort_window: 0,
    ..DEFAULT_OPTIONS
};

/// The default case: the 8M-cell perturbed tet box of the preconditioner benchmarks.
pub const DEFAULT_CASE: &str = "box:110x110x110:tet:perturb=0.2:renumber";

/// The rows of `cases` and a markdown table for the README.
pub fn run(gpu: &Gpu, cases: &[String], slice_height: usize) -> anyhow::Result<(Vec<Row>, String)> {
    let mut rows = Vec::new();
    let mut markdown = String::from(
        "| case | PCG preconditioner | iterations | solve ms | ms/iteration | vs Jacobi-PCG |\n\
         |---|---|---|---|---|---|\n",
    );
    let controls = controls();
    let copy = gpu.copy_bandwidth(1 << 30)?;
    eprintln!("copy bandwidth {copy:.0} GB/s");
    let options = GpuSolveOptions {
        slice_height,
        ..GpuSolveOptions::default()
    };
    for case in cases {
        let (a, b) = poisson_system(case)?;
        let size = (a.n_rows(), a.nnz());
        let (a_rcm, b_rcm) = rcm_system(&a, &b);
        let by_rcm = Ordered::new(gpu, ("rcm", "RCM".into()), a_rcm, &b_rcm, &options)?;
        let t = std::time::Instant::now();
        let (p, a_colour, colouring) = colour_layout(gpu, &by_rcm.a, slice_height)?;
        let colour_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut by_colour = Ordered::colours(
            gpu,
            "RCM, colour-contiguous".into(),
            (p, a_colour, colouring.clone()),
            &b_rcm,
            &options,
        )?;
        let baseline = JacobiBaseline::measure(gpu, &by_rcm.a, &by_rcm.b, &options)?;
        let base_ms = baseline.ms;
        let mut add = |what: &str,
                       ordering: &str,
                       ms: f64,
                       result: Result<SolverPerformance, SolveError>,
                       detail: String| {
            let (iterations, note) = match &result {
                Ok(perf) => (
                    perf.iterations.to_string(),
                    format!(
                        "{} iterations, {:.4} ms/iteration, final residual {:.3e}{}, x{:.2} of \
                         Jacobi-PCG ({detail})",
                        perf.iterations,
                        ms / perf.iterations.max(1) as f64,
                        perf.final_residual,
                        convergence_mark(perf.converged),
                        base_ms / ms
                    ),
                ),
                Err(e) => ("-".into(), format!("failed: {e} ({detail})")),
            };
            let per_iteration = result
                .as_ref()
                .map_or(f64::NAN, |p| ms / p.iterations.max(1) as f64);
            eprintln!("{case}: {what}: {ms:.1} ms; {note}");
            markdown += &format!(
                "| {case} | {what} | {iterations} | {ms:.1} | {per_iteration:.3} | {:.2}x |\n",
                base_ms / ms
            );
            rows.push(Row::timing(case, ordering, what.into(), size, ms, note));
        };
        add(
            "Jacobi",
            "rcm",
            base_ms,
            Ok(baseline_perf(&baseline)),
            baseline.note(""),
        );
        let s = layout_settings();
        let (smoother, setup_ms) = by_colour.smoother(gpu, &s)?;
        let n_colours = colouring.n_colours();
        let preconditioner = Box::new(DeviceSmootherPreconditioner::new(smoother, &s));
        let (ms, result) = solve_warm(&mut by_colour, preconditioner, &controls)?;
        add(
            "multicolour symGS",
            "rcm+col",
            ms,
            result,
            format!(
                "{n_colours} colours, colouring {colour_ms:.0} ms, set-up {setup_ms:.0} ms, fused \
                 loop"
            ),
        );
        for (what, eisenstat) in ROWS {
            let bench = bench_solve(
                gpu,
                &by_colour.backend,
                &by_colour.a,
                &colouring,
                &by_colour.b,
                &controls,
                eisenstat,
            )?;
            let detail = format!(
                "{n_colours} colours, set-up {:.0} ms, host-driven loop; {}",
                bench.setup_ms,
                bench.phases(Some(copy))
            );
            add(what, "rcm+col", bench.solve_ms, bench.result, detail);
        }
    }
    Ok((rows, markdown))
}

/// The baseline's iterations and residual as a performance record.
fn baseline_perf(baseline: &JacobiBaseline) -> SolverPerformance {
    baseline.performance().clone()
}

/// One Eisenstat row of the benches.
pub struct EisenstatBench {
    /// The split, the scaling and the uploads.
    pub setup_ms: f64,
    /// The set-up's phases (`gpu::setup::collect_phases`: each device
    /// phase synchronised at its end).
    pub setup_phases: Vec<SetupPhase>,
    /// The timed solve (after a warm-up solve).
    pub solve_ms: f64,
    pub result: Result<SolverPerformance, SolveError>,
    /// Backward sweep, forward sweep, update ([`DeviceEisenstat::phase_ms`]).
    pub phases_ms: [f64; 3],
    /// Their bytes ([`DeviceEisenstat::phase_bytes`]).
    pub phase_bytes: [f64; 3],
}

impl EisenstatBench {
    /// The phase times in words, for the notes; with the device's copy
    /// bandwidth (GB/s), each phase's time over its floor (bytes / bandwidth).
    pub fn phases(&self, copy_gb_s: Option<f64>) -> String {
        let names = ["backward sweep", "forward sweep", "update"];
        let floor = |bytes: f64| copy_gb_s.map(|bw| bytes / (bw * 1e9) * 1e3);
        let mut parts: Vec<String> = (0..3)
            .map(|k| {
                let (ms, bytes) = (self.phases_ms[k], self.phase_bytes[k]);
                match floor(bytes) {
                    Some(f) => format!(
                        "{} {ms:.3} ms ({:.0} MB, x{:.2} of its floor)",
                        names[k],
                        bytes / 1e6,
                        ms / f
                    ),
                    None => format!("{} {ms:.3} ms ({:.0} MB)", names[k], bytes / 1e6),
                }
            })
            .collect();
        let (ms, bytes): (f64, f64) = (self.phases_ms.iter().sum(), self.phase_bytes.iter().sum());
        if let Some(f) = floor(bytes) {
            parts.push(format!(
                "phases together {ms:.3} ms per iteration, floor {f:.3} ms (x{:.2})",
                ms / f
            ));
        }
        parts.join(", ")
    }
}

/// What `bench --preconditioners`, `--smoothers` and `--eisenstat` measure:
/// the set-up on `cg`'s matrix `a` (colour-contiguous by `colouring`), then a
/// warm-up solve from x = 0 and the timed one, residuals checked as `check`
/// says, up to `max_chunk` iterations between read-backs, rows sorted in
/// `sort_window`s, and the phases' times.
pub fn bench_solve(
    gpu: &Gpu,
    cg: &GpuCgBackend<'_>,
    a: &Csr,
    colouring: &Colouring,
    b: &GpuVector,
    controls: &SolverControls,
    options: EisenstatOptions,
) -> anyhow::Result<EisenstatBench> {
    let EisenstatOptions {
        check,
        max_chunk,
        sort_window,
    } = options;
    gpu.synchronize()?;
    let t = Instant::now();
    let (eisenstat, setup_phases) =
        collect_phases(|| DeviceEisenstat::with_sorted_rows(gpu, cg, a, colouring, sort_window));
    let mut eisenstat = eisenstat?;
    eisenstat.set_max_chunk(max_chunk);
    gpu.synchronize()?;
    let setup_ms = t.elapsed().as_secs_f64() * 1e3;
    let zeros = vec![0.0; a.n_rows()];
    let mut x = cg.upload(&zeros)?;
    let _ = eisenstat_cg(&eisenstat, b, &mut x, controls, check, "p");
    cg.write(&mut x, &zeros)?;
    let t = Instant::now();
    let result = eisenstat_cg(&eisenstat, b, &mut x, controls, check, "p");
    gpu.synchronize()?;
    let solve_ms = t.elapsed().as_secs_f64() * 1e3;
    let carried = check == ResidualCheck::EveryIteration;
    let phases_ms = eisenstat.phase_ms(carried, 20)?;
    Ok(EisenstatBench {
        setup_ms,
        setup_phases,
        solve_ms,
        result,
        phases_ms,
        phase_bytes: eisenstat.phase_bytes(carried),
    })
}
