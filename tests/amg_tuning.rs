//! AMG defaults by measurement (README "AMG tuning"): PCG + AMG iterations to
//! a relative residual of 1e-8 from x = 0 with a random right-hand side, and
//! the work per iteration in fine-matrix products. Run with
//! `cargo test --release --test amg_tuning -- --ignored --nocapture`
//! (`AMG_TUNING_MESHES` overrides the meshes, comma-separated;
//! `AMG_TUNING_FILTER` keeps the settings whose description contains one of
//! its `|`-separated parts).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::fvm::testing::random_field;
use fvpoisson::solve::amg::{Amg, AmgSettings, AmgSmootherKind, CycleKind};
use fvpoisson::solve::{pcg, CpuBackend, SolverControls};
use std::time::Instant;

/// One PCG iteration's own work in fine-matrix products (SpMV + vector updates).
const PCG_WORK: f64 = 2.1;

fn configs() -> Vec<(String, AmgSettings)> {
    let d = AmgSettings::default();
    let mut out = Vec::new();
    for passes in [2, 3] {
        for cycle in [CycleKind::V, CycleKind::K] {
            for (smoother, sweeps) in [
                (AmgSmootherKind::Jacobi, 1),
                (AmgSmootherKind::Jacobi, 2),
                (AmgSmootherKind::L1Jacobi, 1),
                (AmgSmootherKind::L1Jacobi, 2),
                (AmgSmootherKind::Chebyshev, 2),
                (AmgSmootherKind::MulticolourGaussSeidel, 1),
            ] {
                let thetas: &[f64] = if cycle == CycleKind::V {
                    &[1.0, 1.5, 2.0]
                } else {
                    &[1.0]
                };
                for &over_correction in thetas {
                    let s = AmgSettings {
                        passes,
                        cycle,
                        smoother,
                        sweeps,
                        over_correction,
                        ..d
                    };
                    out.push((s.describe(), s));
                }
            }
        }
    }
    out
}

#[test]
#[ignore]
fn amg_tuning_table() {
    let meshes = std::env::var("AMG_TUNING_MESHES").unwrap_or_else(|_| {
        "box:64x64x64,box:32x32x32:tet:perturb=0.2:renumber,box:128x128x128".into()
    });
    let filter = std::env::var("AMG_TUNING_FILTER").unwrap_or_default();
    for spec in meshes.split(',') {
        let (a, _) = poisson_system(spec).unwrap();
        let b = random_field(a.n_rows(), 7);
        println!("\n{spec}: {} rows, {} nonzeros", a.n_rows(), a.nnz());
        println!("| settings | levels | op. complexity | iterations | work/iteration | total work | setup s | solve s |");
        for (name, s) in configs() {
            if !filter.is_empty() && !filter.split('|').any(|f| name.contains(f)) {
                continue;
            }
            let t = Instant::now();
            let amg = match Amg::new(&a, &s) {
                Ok(amg) => amg,
                Err(e) => {
                    println!("| {name} | setup failed: {e} |");
                    continue;
                }
            };
            let setup = t.elapsed().as_secs_f64();
            let h = amg.hierarchy();
            let backend = CpuBackend::new(&a, &amg).flexible(!s.is_linear());
            let controls = SolverControls {
                tolerance: 0.0,
                rel_tol: 1e-8,
                max_iter: 300,
                min_iter: 0,
            };
            let mut x = vec![0.0; a.n_rows()];
            let t = Instant::now();
            let perf = pcg(&backend, &b, &mut x, &controls, "p");
            let solve = t.elapsed().as_secs_f64();
            let work = PCG_WORK + h.work_per_cycle();
            match perf {
                Ok(p) => println!(
                    "| {name} | {} | {:.2} | {}{} | {work:.1} | {:.0} | {setup:.2} | {solve:.2} |",
                    h.n_levels(),
                    h.operator_complexity(),
                    p.iterations,
                    if p.converged { "" } else { " (not converged)" },
                    work * p.iterations as f64
                ),
                Err(e) => println!(
                    "| {name} | {} | {:.2} | failed: {e} |",
                    h.n_levels(),
                    h.operator_complexity()
                ),
            }
        }
    }
}
