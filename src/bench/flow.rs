//! `fvpoisson bench --device-simple [CASES]`: the SIMPLE loop on the device
//! ([`fvpoisson::gpu::simple::DeviceSimple`]) of flow cases (default
//! `cases/cavity_3d`, 4.1 M cells), once with the case's p solver as the GPU
//! runs it (PCG with DIC → Jacobi-PCG: the baseline) and once per AMG
//! setting with p solved by AMG-PCG (GAMG: the hierarchy set up on the
//! resident matrix at the first iteration, values re-set-up after each
//! re-assembly), all in the same process on the same loaded mesh. Each row
//! is the time per outer iteration (device phases, each synchronised; the
//! AMG's one set-up apart) with its split; the ratios are the baseline's
//! over the row's, total and pressure solves.

use std::path::Path;
use std::time::Instant;

use super::tables::Row;
use fvpoisson::case::flow_case::{read_flow_case, run_flow_case_with_mesh, FlowRunSummary};
use fvpoisson::case::run::Device;
use fvpoisson::case::setup::LinearSolver;
use fvpoisson::gpu::simple::DevicePhaseSeconds;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::amg::{AmgSettings, CycleKind};
use fvpoisson::solve::Preconditioner;

/// The case measured by default.
pub const DEFAULT_CASE: &str = "cases/cavity_3d";

/// The AMG settings measured by default: the K-cycle (the default) and the
/// V-cycle.
pub fn default_amg() -> Vec<AmgSettings> {
    vec![
        AmgSettings::default(),
        AmgSettings {
            cycle: CycleKind::V,
            ..AmgSettings::default()
        },
    ]
}

/// One run's device time per outer iteration (ms): the loop's parts, the
/// preconditioner's set-up excluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerIteration {
    pub momentum: f64,
    pub fluxes: f64,
    pub assembly: f64,
    pub preconditioner_update: f64,
    pub solve: f64,
    pub corrections: f64,
    pub total: f64,
    /// The AMG or polynomial preconditioner's set-up (once, ms).
    pub preconditioner_setup: f64,
}

impl PerIteration {
    /// `t` over `iterations` outer iterations; the value re-set-ups over
    /// the iterations after the first (the first sets the hierarchy up).
    pub fn new(t: &DevicePhaseSeconds, iterations: usize) -> Self {
        let per = |s: f64| 1e3 * s / iterations.max(1) as f64;
        let preconditioner_update =
            1e3 * t.preconditioner_update / iterations.saturating_sub(1).max(1) as f64;
        let momentum = per(t.momentum_assembly + t.momentum_solve + t.upload);
        let fluxes = per(t.fluxes);
        let assembly = per(t.assembly);
        let solve = per(t.solve);
        let corrections = per(t.corrections + t.download);
        Self {
            momentum,
            fluxes,
            assembly,
            preconditioner_update,
            solve,
            corrections,
            total: momentum + fluxes + assembly + preconditioner_update + solve + corrections,
            preconditioner_setup: 1e3 * t.preconditioner_setup,
        }
    }
}

/// The rows of `cases` (flow case directories) and a markdown table.
pub fn run(gpu: &Gpu, cases: &[String], amg: &[AmgSettings]) -> anyhow::Result<(Vec<Row>, String)> {
    let mut rows = Vec::new();
    let mut markdown = String::from(
        "| case | p solver | ms / outer iteration | momentum | Rhie-Chow | p assembly | \
         preconditioner re-set-up | p solves | corrections | p iterations / outer | vs \
         Jacobi-PCG (total, p solves) |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for case in cases {
        let dir = Path::new(case);
        let mut setup = read_flow_case(dir)?;
        setup.vtk = false;
        setup.foam_output = None;
        setup.validation = None;
        setup.output_dir = std::env::temp_dir().join(format!(
            "fvpoisson_device_simple_bench_{}",
            std::process::id()
        ));
        let mesh = setup.mesh.load()?;
        let n = mesh.n_cells();
        let baseline = setup.pressure_solver;
        let mut runs: Vec<(String, LinearSolver)> = vec![("Jacobi-PCG".into(), baseline)];
        for s in amg {
            runs.push((
                format!("AMG-PCG, {s}"),
                LinearSolver {
                    preconditioner: Preconditioner::Amg(*s),
                    gamg: None,
                    // The variant measured, not the GPU default.
                    gpu_keys_given: true,
                    ..baseline
                },
            ));
        }
        let mut base: Option<PerIteration> = None;
        for (what, solver) in runs {
            setup.pressure_solver = solver;
            eprintln!("{case}: device SIMPLE, p {what}");
            let clock = Instant::now();
            let summary: FlowRunSummary =
                run_flow_case_with_mesh(&setup, &mesh, Device::Gpu(gpu), clock)?;
            let phases = summary.device_phases.ok_or_else(|| {
                anyhow::anyhow!("{case}: the p solver {what} did not run in the device loop")
            })?;
            let t = PerIteration::new(&phases, summary.iterations);
            let p_iterations = summary.p_iterations as f64 / summary.iterations.max(1) as f64;
            let b = *base.get_or_insert(t);
            let ratio = format!("x{:.2}, x{:.2}", b.total / t.total, b.solve / t.solve);
            let preconditioner = summary.device_preconditioner.unwrap_or("preconditioner");
            let setup_note = if t.preconditioner_setup > 0.0 {
                format!(
                    "; {preconditioner} set-up once {:.1} ms",
                    t.preconditioner_setup
                )
            } else {
                String::new()
            };
            let note = format!(
                "{} outer iterations; per outer iteration: momentum {:.2} + Rhie-Chow {:.2} + p \
                 assembly {:.2} + {preconditioner} re-set-up {:.2} + p solves {:.2} ({:.1} PCG \
                 iterations) + corrections {:.2} ms; vs Jacobi-PCG {ratio} (total, p \
                 solves){setup_note}",
                summary.iterations,
                t.momentum,
                t.fluxes,
                t.assembly,
                t.preconditioner_update,
                t.solve,
                p_iterations,
                t.corrections
            );
            markdown += &format!(
                "| {case} ({n} cells) | {what} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | \
                 {:.2} | {p_iterations:.1} | {ratio} |\n",
                t.total,
                t.momentum,
                t.fluxes,
                t.assembly,
                t.preconditioner_update,
                t.solve,
                t.corrections
            );
            rows.push(Row {
                case: case.clone(),
                ordering: "rcm".into(),
                what: format!("device SIMPLE, p {what}"),
                n,
                nnz: 0,
                bytes: 0.0,
                ms: t.total,
                gb_s: 0.0,
                of_copy: 0.0,
                note,
            });
        }
        let _ = std::fs::remove_dir_all(&setup.output_dir);
    }
    Ok((rows, markdown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_iteration_splits_the_phases_and_keeps_the_amg_set_up_apart() {
        let t = DevicePhaseSeconds {
            upload: 0.0,
            momentum_assembly: 0.010,
            momentum_solve: 0.020,
            fluxes: 0.005,
            assembly: 0.015,
            preconditioner_setup: 0.050,
            preconditioner_update: 0.004,
            solve: 0.100,
            corrections: 0.005,
            download: 0.001,
        };
        let p = PerIteration::new(&t, 5);
        assert!((p.momentum - 6.0).abs() < 1e-12);
        assert!((p.solve - 20.0).abs() < 1e-12);
        // 4 ms over the 4 iterations after the first.
        assert!((p.preconditioner_update - 1.0).abs() < 1e-12);
        assert!((p.corrections - 1.2).abs() < 1e-12);
        assert!((p.total - (6.0 + 1.0 + 3.0 + 1.0 + 20.0 + 1.2)).abs() < 1e-12);
        assert!((p.preconditioner_setup - 50.0).abs() < 1e-12);
    }
}
