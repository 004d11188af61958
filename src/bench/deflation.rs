//! `fvpoisson bench --deflation`: time to solution (setup + solve) of PCG
//! with Jacobi, Neu1 and Neu2 on the GPU, each with and without subdomain
//! deflation (`gpu::deflation`), against the CPU's DIC-PCG (Gupta et al. 2011, §6).
//!
//! The rows are in RCM order (the GPU's default) and the subdomains are
//! blocks of consecutive RCM rows (level-set slabs; `--deflation-subdomains`
//! of them, default min(2⌈√N⌉, 512)), which costs nothing to compute on any
//! mesh; METIS subdomains (`fvpoisson preconditioners --partition metis`) are
//! better but take ~6 s per million cells. Each GPU row is one timed call of
//! `solve_pcg_deflated_gpu` after a warm-up: mod-SELL build, upload,
//! preconditioner and deflation setup (AZ and E on the device, E⁻¹ on the
//! host), the solve and the download. Every solve runs the fused device loop
//! (deflated: with the projection inside each iteration, `gpu::deflation`).

use std::time::Instant;

use super::tables::{controls, timed_cpu_pcg, BenchSettings, Row};
use fvpoisson::gpu::deflation::{solve_pcg_deflated_gpu, DEFLATED_PCG_PRECONDITIONERS};
use fvpoisson::gpu::pcg::{GpuSolveOptions, LaunchMode};
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::deflation::Subdomains;
use fvpoisson::solve::PreconditionerKind;
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::{Csr, Reordered, RowOrdering};

/// Subdomains used when none is given: Gupta et al.'s (2011) 2n (2⌈√N⌉), at most 512
/// (E⁻¹ costs k³ flops on the host at setup, ~0.1 s at 512, and 8k² bytes
/// per iteration).
pub fn default_subdomains(n: usize) -> usize {
    (2 * (n as f64).sqrt().ceil() as usize).min(512)
}

/// The deflation rows of one case with the settings' slices and subdomains
/// (the CPU's DIC-PCG row with `cpu_solve`).
pub fn rows(
    gpu: &Gpu,
    spec: &str,
    a: &Csr,
    rhs: &[f64],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    let BenchSettings {
        deflation_subdomains: subdomains,
        slice_height,
        check_interval,
        cpu_solve,
        ..
    } = *settings;
    let t = Instant::now();
    let ordered = Reordered::new(a, RowOrdering::Rcm, slice_height).map_err(anyhow::Error::msg)?;
    let m = ordered.matrix();
    let b = ordered.to_new(rhs);
    let n = m.n_rows();
    let k = subdomains.unwrap_or_else(|| default_subdomains(n));
    let stripes = Subdomains::stripes(n, k)?;
    let order_s = t.elapsed().as_secs_f64();
    let options = GpuSolveOptions {
        slice_height,
        check_interval,
        ordering: RowOrdering::Natural,
        launches: LaunchMode::Auto,
    };
    let controls = controls();
    let row = |what: String, ms: f64, note: String| Row {
        case: spec.to_string(),
        ordering: "rcm".into(),
        what,
        n,
        nnz: m.nnz(),
        bytes: 0.0,
        ms,
        gb_s: 0.0,
        of_copy: 0.0,
        note,
    };
    // The CPU baseline: DIC-PCG, setup + solve.
    let mut rows = Vec::new();
    let mut baseline_cpu = None;
    if cpu_solve {
        let (cpu, x_cpu, cpu_s) = timed_cpu_pcg(m, PreconditionerKind::Dic, &b, &controls)?;
        rows.push(row(
            "DIC-PCG CPU".into(),
            cpu_s * 1e3,
            format!(
                "{} iterations, setup + solve ({} threads); RCM + {k} stripes took {order_s:.2} s",
                cpu.iterations,
                rayon::current_num_threads()
            ),
        ));
        baseline_cpu = Some((cpu_s, x_cpu));
    }
    let mut jacobi_s = None;
    // Jacobi, Neu1 and Neu2 (not unpreconditioned CG).
    for kind in &DEFLATED_PCG_PRECONDITIONERS[1..] {
        for deflation in [None, Some(&stripes)] {
            let solve = |x: &mut [f64]| {
                solve_pcg_deflated_gpu(gpu, m, kind, deflation, &b, x, &controls, &options)
            };
            let mut x = vec![0.0; n];
            solve(&mut x)?;
            x.fill(0.0);
            let t = Instant::now();
            let (perf, _) = solve(&mut x)?;
            let s = t.elapsed().as_secs_f64();
            let baseline = *jacobi_s.get_or_insert(s);
            let what = match deflation {
                Some(_) => format!("DPCG {kind} GPU ({k} subdomains)"),
                None => format!("PCG {kind} GPU"),
            };
            rows.push(row(
                what,
                s * 1e3,
                format!(
                    "{} iterations{}, setup + solve; {:.2}x Jacobi-PCG's time{}",
                    perf.iterations,
                    if perf.converged {
                        ""
                    } else {
                        " (not converged)"
                    },
                    s / baseline,
                    baseline_cpu
                        .as_ref()
                        .map_or(String::new(), |(cpu_s, x_cpu)| format!(
                        "; {:.1}x as fast as DIC-PCG CPU, max |x - x_cpu| / max|x_cpu| = {:.1e}",
                        cpu_s / s,
                        max_rel_diff(&x, x_cpu)
                    ))
                ),
            ));
        }
    }
    Ok(rows)
}
