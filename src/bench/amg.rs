//! `fvpoisson bench --amg`: the GPU AMG (`gpu::amg`) on each bench case in
//! RCM order with a random right-hand side (seeded), against Jacobi-PCG in
//! the same run, to a relative residual of 1e-8 (OpenFOAM-normalised, from
//! x = 0; the true ‖b − A x‖₂ / ‖b‖₂ reached is printed too).
//!
//! Per cycle (V, W, K with the default settings, or the settings given by
//! `--amg-variant`): the set-up (device events around `DeviceAmg::new`,
//! which includes its few host reads; the first set-up is given in the note,
//! the row reports the second, warm, and the phases of a profiled one), the
//! value-only re-set-up (`update_values`, and the phases of
//! `update_values_profiled`), one cycle (median of `reps` after warm-up, with
//! the bytes it moves per level, `DeviceAmg::cycle_bytes`, and their floor at
//! the copy bandwidth measured in the same run), and PCG
//! with the cycle as preconditioner (the fused device loop, after a warm-up
//! solve): iterations, time, and set-up + solve against Jacobi-PCG's solve.

use super::tables::{convergence_mark, time_median, BenchSettings, Row};
use fvpoisson::gpu::amg::DeviceAmg;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuVector, LaunchMode};
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::{Gpu, GpuError};
use fvpoisson::solve::amg::{AmgSettings, CycleKind};
use fvpoisson::solve::{pcg, SolverControls, SolverPerformance};
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::random_vector;
use fvpoisson::sparse::testing::relative_residual;
use fvpoisson::sparse::Csr;

/// The target: relative residual 1e-8 (tolerance 0).
fn controls() -> SolverControls {
    SolverControls {
        tolerance: 0.0,
        rel_tol: 1e-8,
        max_iter: 5000,
        min_iter: 0,
    }
}

/// A timed solve from x = 0 after a warm-up solve (which captures the CUDA
/// graph where the backend uses one): the performance, device ms, and the
/// true relative residual.
fn timed_solve(
    gpu: &Gpu,
    backend: &GpuCgBackend<'_>,
    a: &Csr,
    b_host: &[f64],
    b: &GpuVector,
) -> anyhow::Result<(SolverPerformance, f64, f64)> {
    let zeros = vec![0.0; a.n_rows()];
    let mut x = backend.upload(&zeros)?;
    pcg(backend, b, &mut x, &controls(), "p")?;
    backend.write(&mut x, &zeros)?;
    let mut result = None;
    let ms = gpu.time_ms(|| {
        result = Some(pcg(backend, b, &mut x, &controls(), "p"));
        Ok(())
    })?;
    let perf = result.expect("the solve ran")?;
    let residual = relative_residual(a, b_host, &backend.download(&x)?);
    Ok((perf, ms, residual))
}

/// Device ms of `work` (set-ups: they read back sizes, so events around
/// them cover the host's part too).
fn timed<T>(gpu: &Gpu, work: impl FnOnce() -> Result<T, GpuError>) -> anyhow::Result<(T, f64)> {
    let mut out = None;
    let ms = gpu.time_ms(|| {
        out = Some(work()?);
        Ok(())
    })?;
    Ok((out.expect("the work ran"), ms))
}

/// The rows of one case (`a` as assembled; reordered here).
pub fn rows(gpu: &Gpu, spec: &str, a: &Csr, settings: &BenchSettings) -> anyhow::Result<Vec<Row>> {
    let p = reverse_cuthill_mckee(a);
    let a = p.apply_symmetric(a);
    let (n, nnz) = (a.n_rows(), a.nnz());
    let b_host = random_vector(n, 1);
    let options = settings.gpu_options();
    let mut rows = Vec::new();
    let mut push = |what: String, ms: f64, note: String| {
        eprintln!("{spec}: {what}: {ms:.2} ms, {note}");
        rows.push(Row::timing(spec, "rcm", what, (n, nnz), ms, note))
    };

    // The copy bandwidth of this run: the cycle's byte floor.
    let copy = gpu.copy_bandwidth(1 << 30)?;
    let jacobi = GpuCgBackend::new(gpu, &a, true, None, &options)?;
    let b = jacobi.upload(&b_host)?;
    let (base, base_ms, base_res) = timed_solve(gpu, &jacobi, &a, &b_host, &b)?;
    drop(jacobi);
    push(
        "PCG Jacobi to 1e-8".into(),
        base_ms,
        format!(
            "{} iterations, {:.4} ms/iteration, |b-Ax|/|b| {base_res:.2e}{}",
            base.iterations,
            base_ms / base.iterations.max(1) as f64,
            convergence_mark(base.converged)
        ),
    );

    let variants = match settings.amg_variants.is_empty() {
        true => CycleKind::ALL
            .iter()
            .map(|&cycle| AmgSettings {
                cycle,
                ..AmgSettings::default()
            })
            .collect(),
        false => settings.amg_variants.clone(),
    };
    for s in variants {
        let name = match settings.amg_variants.is_empty() {
            true => s.cycle.name().to_string(),
            false => s.to_string(),
        };
        let mut backend = GpuCgBackend::new(gpu, &a, false, None, &options)?;
        let (_, cold_ms) = timed(gpu, || DeviceAmg::new(gpu, backend.shared_matrix(), &s))?;
        let (mut amg, setup_ms) = timed(gpu, || DeviceAmg::new(gpu, backend.shared_matrix(), &s))?;
        let (_, phases) = DeviceAmg::new_profiled(gpu, backend.shared_matrix(), &s)?;
        let phases: Vec<String> = phases
            .iter()
            .map(|(phase, ms)| format!("{phase} {ms:.2}"))
            .collect();
        let fine = backend.shared_matrix();
        let (_, resetup_ms) = timed(gpu, || amg.update_values(fine))?;
        let update_phases: Vec<String> = amg
            .update_values_profiled(backend.shared_matrix())?
            .iter()
            .map(|(phase, ms)| format!("{phase} {ms:.2}"))
            .collect();
        let b = backend.upload(&b_host)?;
        let z = gpu.zeros::<f64>(n)?;
        let cycle_ms = time_median(gpu, 3, settings.reps.max(1), |_| amg.apply(b.dev()?, &z))?;
        let level_bytes = amg.cycle_bytes();
        let total_bytes: f64 = level_bytes.iter().sum();
        let floor_ms = |bytes: f64| bytes / (copy * 1e9) * 1e3;
        let per_level: Vec<String> = level_bytes
            .iter()
            .enumerate()
            .map(|(l, &b)| format!("L{l} {:.1} MB {:.3} ms", b / 1e6, floor_ms(b)))
            .collect();
        let hierarchy = format!(
            "{} levels {:?} rows, operator complexity {:.3} ({})",
            amg.level_rows().len(),
            amg.level_rows(),
            amg.operator_complexity(),
            amg.stop_reason()
        );
        push(
            format!("AMG {name} set-up"),
            setup_ms,
            format!(
                "warm (first: {cold_ms:.2} ms); {hierarchy}; {s}; phases (host ms, synchronised): \
                 {}",
                phases.join(", ")
            ),
        );
        push(
            format!("AMG {name} value re-set-up"),
            resetup_ms,
            format!(
                "{:.0}% of the set-up (target <= 40%); phases (host ms, synchronised): {}",
                100.0 * resetup_ms / setup_ms,
                update_phases.join(", ")
            ),
        );
        push(
            format!("AMG {name} cycle"),
            cycle_ms,
            format!(
                "one application, median of {}; {:.1} MB moved, floor {:.3} ms at copy bandwidth \
                 {copy:.0} GB/s = {:.2} of measured; per level (bytes, floor): {}",
                settings.reps.max(1),
                total_bytes / 1e6,
                floor_ms(total_bytes),
                floor_ms(total_bytes) / cycle_ms,
                per_level.join(", ")
            ),
        );
        backend.set_preconditioner(Box::new(amg));
        // Above GRAPH_MAX_ROWS the solve launches separately (Jacobi-PCG's
        // best there); the cycle adds ~5 short launches per coarse level, so
        // the CUDA graph is measured too.
        let auto = backend.launch_mode();
        let modes: &[(LaunchMode, &str)] = if auto == LaunchMode::Graph {
            &[(auto, "")]
        } else {
            &[(auto, ""), (LaunchMode::Graph, ", CUDA graph")]
        };
        for &(mode, label) in modes {
            backend.set_launch_mode(mode);
            let (perf, ms, res) = timed_solve(gpu, &backend, &a, &b_host, &b)?;
            push(
                format!("PCG AMG {name} to 1e-8{label}"),
                ms,
                format!(
                    "{} iterations, {:.4} ms/iteration, |b-Ax|/|b| {res:.2e}{}; set-up + solve \
                     {:.2} ms = {:.2}x Jacobi-PCG's solve ({} launches)",
                    perf.iterations,
                    ms / perf.iterations.max(1) as f64,
                    convergence_mark(perf.converged),
                    setup_ms + ms,
                    (setup_ms + ms) / base_ms,
                    backend.launch_mode().name()
                ),
            );
        }
        backend.set_launch_mode(auto);
    }
    Ok(rows)
}
