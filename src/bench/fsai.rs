//! `fvpoisson bench --fsai`: PCG with FSAI (`solve::fsai`, `gpu::fsai`)
//! against Jacobi-PCG measured in the same run (Bernaschi et al. 2019, §6.10: the paper
//! claims aFSAI cuts Jacobi's iterations 5–9× on Poisson-like matrices; the
//! question here is whether the total time wins as well).
//!
//! Rows per case, in RCM order (G is lower triangular in the order it is set
//! up in), b as the bench assembles it, the bench's tolerance (OpenFOAM
//! normalised 1e-6 from x = 0):
//! - GPU: Jacobi-PCG (fused loop, after a warm-up solve), then per FSAI
//!   variant the setup at [`SETUP_PLACE`] (G and Gᵀ on the device, wall
//!   time), μ = nnz(G)/nnz(A), μ₀ (before the postfilter), iterations, solve
//!   (after a warm-up solve), total, and total / Jacobi-PCG's solve;
//! - CPU (`settings.cpu_solve`, up to [`CPU_MAX_ROWS`] rows; the only rows
//!   without a GPU): Jacobi-PCG and FSAI-PCG (setup + solve, rayon), the same
//!   columns.
//!
//! Variants: static FSAI (power 1 and 2) and aFSAI over steps {5, 10, 20, 30}
//! × epsilon {1e-3, 5e-3, 5e-2} (stagnation), or those given by
//! `--fsai-variant`; on the GPU each with G and Gᵀ in CSR, and the default
//! settings again in 32-row slices (SELL-32: the storage comparison; the
//! setup then includes reading G back and slicing it on the host).

use std::time::Instant;

use super::tables::{
    controls, convergence_mark, rcm_system, timed_cpu_pcg, BenchSettings, JacobiBaseline, Row,
    TimingRows,
};
use fvpoisson::gpu::fsai::{DeviceFsai, FsaiStorage, SETUP_PLACE};
use fvpoisson::gpu::fsai_setup::FsaiSetupStats;
use fvpoisson::gpu::pcg::GpuCgBackend;
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::Gpu;
use fvpoisson::solve::cpu::CpuBackend;
use fvpoisson::solve::fsai::{FsaiPattern, FsaiPreconditioner, FsaiSettings, FsaiStop};
use fvpoisson::solve::{pcg, PreconditionerKind, SolveError};
use fvpoisson::sparse::Csr;

/// Rows up to which the CPU rows run.
pub const CPU_MAX_ROWS: usize = 2 << 20;

/// The meshes of `bench --fsai --quick`: small versions of the hex box and
/// the perturbed tet box (the density-contrast case is added from
/// `--deflation-case` as in the full run).
pub const QUICK_MESHES: [&str; 2] = ["box:40x40x40", "box:24x24x24:tet:perturb=0.2:renumber"];

/// The default sweep: static power 1 and 2, aFSAI steps × epsilon.
pub fn default_variants() -> Vec<FsaiSettings> {
    let mut v: Vec<FsaiSettings> = [1, 2]
        .into_iter()
        .map(|power| FsaiSettings {
            pattern: FsaiPattern::Static {
                power,
                prefilter: 0.0,
            },
            ..FsaiSettings::default()
        })
        .collect();
    for steps in [5, 10, 20, 30] {
        for epsilon in [1e-3, 5e-3, 5e-2] {
            v.push(FsaiSettings::adaptive(steps, epsilon, FsaiStop::Stagnation));
        }
    }
    v
}

/// Short row label: `sFSAI(p2)`, `aFSAI(10, 0.005)`, with `+post δ`, `mixed`.
fn label(s: &FsaiSettings) -> String {
    let mut l = match s.pattern {
        FsaiPattern::Static { power, prefilter } if prefilter > 0.0 => {
            format!("sFSAI(p{power}, pre {prefilter})")
        }
        FsaiPattern::Static { power, .. } => format!("sFSAI(p{power})"),
        FsaiPattern::Adaptive(growth) => {
            let mut l = format!("aFSAI({}, {}", growth.steps, growth.epsilon);
            if growth.step_size != 1 {
                l += &format!(", s{}", growth.step_size);
            }
            if growth.stop == FsaiStop::Reduction {
                l += ", S1";
            }
            l + ")"
        }
    };
    if s.postfilter > 0.0 {
        l += &format!(" post {}", s.postfilter);
    }
    if s.precision == fvpoisson::solve::Precision::Mixed {
        l += " mixed";
    }
    l
}

/// The device setup's breakdown (Bernaschi et al. 2019, §2.7: gradient ≈ 48–50 %, gather ≈ 30 %,
/// Cholesky ≈ 13.5–15 %), rows per step count and, for the default settings,
/// the CPU reference setup's time (rayon) with the device's speedup over it
/// (the paper: 7.5× over 4 CPU cores).
fn setup_note(a: &Csr, s: &FsaiSettings, stats: &FsaiSetupStats) -> String {
    let mut note = format!(
        "{}; rows by steps {:?}",
        stats.describe(),
        stats.rows_by_steps
    );
    if *s == FsaiSettings::default() {
        let t = Instant::now();
        match fvpoisson::solve::fsai::fsai_setup(a, s) {
            Ok(_) => {
                let host_ms = t.elapsed().as_secs_f64() * 1e3;
                note += &format!(
                    "; CPU reference setup {host_ms:.1} ms ({} threads): device {:.2}x faster",
                    rayon::current_num_threads(),
                    host_ms / stats.total_ms.max(1e-9)
                );
            }
            Err(e) => note += &format!("; CPU reference setup failed: {e}"),
        }
    }
    note
}

/// The rows of one case (`a`, `b` as assembled); `gpu` None: CPU rows only.
pub fn rows(
    gpu: Option<&Gpu>,
    spec: &str,
    a: &Csr,
    b: &[f64],
    settings: &BenchSettings,
) -> anyhow::Result<Vec<Row>> {
    let (n, nnz) = (a.n_rows(), a.nnz());
    let mut rows = TimingRows::new(spec, a);
    let variants = if settings.fsai_variants.is_empty() {
        default_variants()
    } else {
        settings.fsai_variants.clone()
    };
    let controls = controls();
    let (a_rcm, b_rcm) = rcm_system(a, b);
    let zeros = vec![0.0; n];

    if let Some(gpu) = gpu {
        let options = settings.gpu_options();
        let mut backend = GpuCgBackend::new(gpu, &a_rcm, false, None, &options)?;
        let b_dev = backend.upload(&b_rcm)?;
        let baseline = JacobiBaseline::measure(gpu, &a_rcm, &b_dev, &options)?;
        let base_ms = baseline.ms;
        rows.push_baseline(&baseline, "; the baseline of the ratios");
        // Every variant with CSR storage; the default one with SELL-32 too.
        let mut runs: Vec<(FsaiSettings, FsaiStorage)> =
            variants.iter().map(|s| (*s, FsaiStorage::Csr)).collect();
        if variants.contains(&FsaiSettings::default()) {
            runs.push((FsaiSettings::default(), FsaiStorage::Sell));
        }
        for (s, storage) in runs {
            let what = format!("PCG {} {}", label(&s), storage.name());
            let t = Instant::now();
            let setup = DeviceFsai::setup(gpu, &a_rcm, None, &s, SETUP_PLACE).and_then(|(f, r)| {
                f.with_storage(storage)
                    .map(|f| (f, r))
                    .map_err(|e| SolveError::Device(e.to_string()))
            });
            let setup_ms = t.elapsed().as_secs_f64() * 1e3;
            let (fsai, report) = match setup {
                Ok(r) => r,
                Err(e) => {
                    rows.push(what, "rcm", 0.0, format!("failed: {e}"));
                    continue;
                }
            };
            let slots = fsai.stored_slots();
            // One application outside the timing loads the kernel.
            let mut x = backend.upload(&zeros)?;
            fsai.apply(b_dev.dev()?, x.dev()?)?;
            backend.set_preconditioner(Box::new(fsai));
            backend.write(&mut x, &zeros)?;
            let warm = pcg(&backend, &b_dev, &mut x, &controls, "p");
            backend.write(&mut x, &zeros)?;
            let t = Instant::now();
            let result = warm.and_then(|_| pcg(&backend, &b_dev, &mut x, &controls, "p"));
            let solve_ms = t.elapsed().as_secs_f64() * 1e3;
            let total = setup_ms + solve_ms;
            let note = match result {
                Ok(perf) => format!(
                    "setup ({}) {setup_ms:.1} ms + solve {solve_ms:.1} ms: mu {:.3} (mu0 {:.3}), \
                     {} iterations ({:.2}x fewer than Jacobi), {:.4} ms/iteration, total / \
                     Jacobi-PCG {:.2}, final residual {:.3e}, G and G^T {:.2}x nnz(A) slots \
                     stored{}",
                    report.place.name(),
                    report.density,
                    report.density_before_postfilter,
                    perf.iterations,
                    baseline.iterations() as f64 / perf.iterations.max(1) as f64,
                    solve_ms / perf.iterations.max(1) as f64,
                    total / base_ms,
                    perf.final_residual,
                    slots as f64 / nnz as f64,
                    convergence_mark(perf.converged)
                ),
                Err(e) => format!("failed: {e}"),
            };
            rows.push(what, "rcm", total, note);
            if let (Some(stats), FsaiStorage::Csr) = (&report.device, storage) {
                rows.push(
                    format!("setup {}", label(&s)),
                    "rcm",
                    stats.total_ms,
                    setup_note(&a_rcm, &s, stats),
                );
            }
        }
    }

    if !(settings.cpu_solve || gpu.is_none()) {
        return Ok(rows.into_rows());
    }
    if n > CPU_MAX_ROWS {
        rows.push(
            "PCG Jacobi CPU".into(),
            "rcm",
            0.0,
            format!("CPU FSAI rows not run: {n} rows > {CPU_MAX_ROWS}; see a smaller case"),
        );
        return Ok(rows.into_rows());
    }
    let (jacobi, _, base_s) = timed_cpu_pcg(&a_rcm, PreconditionerKind::Jacobi, &b_rcm, &controls)?;
    let base_ms = base_s * 1e3;
    rows.push(
        "PCG Jacobi CPU".into(),
        "rcm",
        base_ms,
        format!(
            "{} iterations, final residual {:.3e}; the baseline of the CPU ratios",
            jacobi.iterations, jacobi.final_residual
        ),
    );
    for s in &variants {
        let t = Instant::now();
        let p = match FsaiPreconditioner::new(&a_rcm, s) {
            Ok(p) => p,
            Err(e) => {
                rows.push(
                    format!("PCG {} CPU", label(s)),
                    "rcm",
                    0.0,
                    format!("failed: {e}"),
                );
                continue;
            }
        };
        let setup_ms = t.elapsed().as_secs_f64() * 1e3;
        let backend = CpuBackend::new(&a_rcm, &p);
        let mut x = zeros.clone();
        let t = Instant::now();
        let result = pcg(&backend, &b_rcm, &mut x, &controls, "p");
        let solve_ms = t.elapsed().as_secs_f64() * 1e3;
        let total = setup_ms + solve_ms;
        let st = &p.factor.stats;
        let note = match result {
            Ok(perf) => format!(
                "setup {setup_ms:.1} ms + solve {solve_ms:.1} ms: mu {:.3} (mu0 {:.3}), {} \
                 iterations ({:.2}x fewer than Jacobi), total / Jacobi-PCG {:.2}, final \
                 residual {:.3e}{}",
                st.density,
                st.density_before_postfilter,
                perf.iterations,
                jacobi.iterations as f64 / perf.iterations.max(1) as f64,
                total / base_ms,
                perf.final_residual,
                convergence_mark(perf.converged)
            ),
            Err(e) => format!("failed: {e}"),
        };
        rows.push(format!("PCG {} CPU", label(s)), "rcm", total, note);
    }
    Ok(rows.into_rows())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU rows of `bench --fsai --quick` (Jacobi-PCG against the FSAI
    /// sweep on the quick meshes and the density-contrast case), printed as the
    /// bench prints them; the README's CPU numbers. Slow-ish (a minute on two
    /// cores): `cargo test --bin fvpoisson cpu_sweep -- --ignored --nocapture`. Other meshes
    /// and variants: `FSAI_MESHES=box:80x80x80 FSAI_VARIANTS='fsai;fsai:pattern=static'`
    /// (no density-contrast case then).
    #[test]
    #[ignore]
    fn cpu_sweep_of_the_quick_bench() {
        use crate::bench::tables::{run_fsai_cpu, table, BenchSettings};
        let meshes = std::env::var("FSAI_MESHES").ok();
        let variants = std::env::var("FSAI_VARIANTS").map_or(vec![], |v| {
            v.split(';').map(|s| s.parse().unwrap()).collect()
        });
        let contrast = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/bubble_tet_3d");
        let settings = BenchSettings {
            deflation_cases: match meshes {
                Some(_) => vec![],
                None => vec![contrast],
            },
            meshes: meshes.map_or(QUICK_MESHES.map(String::from).to_vec(), |m| {
                m.split(',').map(String::from).collect()
            }),
            orderings: vec![],
            slice_height: 512,
            reps: 1,
            pcg: false,
            cpu_solve: true,
            assembly: false,
            check_interval: 50,
            cusparse: false,
            write_mtx: None,
            smoothers: false,
            smoother_sweeps: 0,
            polynomial: false,
            deflation: false,
            deflation_subdomains: None,
            amg: false,
            amg_variants: vec![],
            krylov: false,
            krylov_cd: vec![],
            ilu_grid: None,
            fsai: true,
            fsai_variants: variants,
        };
        let report = run_fsai_cpu(&settings).unwrap();
        print!("{}", table(&report));
        // Every FSAI row converged in fewer iterations than Jacobi-PCG.
        for row in report.rows.iter().filter(|r| r.what.contains("FSAI")) {
            assert!(
                !row.note.contains("NOT CONVERGED") && !row.note.contains("failed"),
                "{row:?}"
            );
            let fewer: f64 = row
                .note
                .split(" iterations (")
                .nth(1)
                .and_then(|s| s.split('x').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{row:?}"));
            assert!(fewer > 1.0, "{row:?}");
        }
    }
}
