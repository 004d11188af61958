//! `fvpoisson bench --eisenstat [MESHES]`: PCG time to solution on the device
//! with Jacobi (the fused loop, RCM order: the baseline), multicolour
//! symmetric Gauss–Seidel (a `DevicePreconditioner` in the fused loop) and
//! the same SGS by Eisenstat's trick (`gpu::eisenstat`), both on the RCM
//! order renumbered colour by colour, from x = 0 to the bench tolerance
//! (OpenFOAM-normalised 1e-6), each timed after a warm-up solve; the ratios
//! are Jacobi-PCG's solve time over the row's, measured in the same run.
//! The set-ups (the colouring, the split) are given in the notes. The same
//! Eisenstat row is in `--preconditioners` and in `--smoothers`' PCG table.

use super::bench::{controls, copy_bandwidth, poisson_system, JacobiBaseline, Row};
use super::eisenstat::{bench_solve, layout_settings, EisenstatOptions, DEFAULT_OPTIONS};
use super::pcg::GpuSolveOptions;
use super::smooth::{colour_layout, DeviceSmootherPreconditioner};
use super::smooth_bench::{solve_warm, Ordered};
use super::Gpu;
use crate::solve::eisenstat::ResidualCheck;
use crate::solve::{SolveError, SolverPerformance};
use crate::sparse::ordering::reverse_cuthill_mckee;

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
    let copy = copy_bandwidth(gpu, 1 << 30)?;
    eprintln!("copy bandwidth {copy:.0} GB/s");
    let options = GpuSolveOptions {
        slice_height,
        ..GpuSolveOptions::default()
    };
    for case in cases {
        let (a, b) = poisson_system(case)?;
        let size = (a.n_rows(), a.nnz());
        let rcm = reverse_cuthill_mckee(&a);
        let b_rcm = rcm.to_new(&b);
        let by_rcm = Ordered::new(
            gpu,
            ("rcm", "RCM".into()),
            rcm.apply_symmetric(&a),
            &b_rcm,
            &options,
        )?;
        let t = std::time::Instant::now();
        let (p, a_colour, colouring) = colour_layout(gpu, &by_rcm.a, slice_height)?;
        let colour_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut by_colour = Ordered::new(
            gpu,
            ("rcm+col", "RCM, colour-contiguous".into()),
            a_colour,
            &p.to_new(&b_rcm),
            &options,
        )?;
        by_colour.colouring = Some(colouring.clone());
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
                        if perf.converged { "" } else { " NOT CONVERGED" },
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
