//! Equilibrated PCG (`solve::equilibrate`, Wikberg 2024, §6.5–6.6): the same
//! answers and the same convergence test as the unscaled solve on FVM systems
//! (Dirichlet and all-Neumann) on the CPU, and on the GPU the same as the CPU.
//! The GPU tests print `skipped: no CUDA device` and pass where there is no
//! GPU, unless FVPOISSON_REQUIRE_GPU=1.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, Schemes, SingularPolicy,
};
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{solve_pcg_gpu, GpuSolveOptions, LaunchMode};
use fvpoisson::gpu::test_device;
use fvpoisson::mesh::generate::BoxSpec;
use fvpoisson::solve::{
    solve_pcg_scaled, EquilibrationKind, PreconditionerKind, RuizNorm, RuizSettings,
    SolverControls, SolverPerformance,
};
use fvpoisson::sparse::testing::random_symmetric;
use fvpoisson::sparse::Csr;

/// −∇²p = sin(3x) + yz on a box with zeroGradient on every patch: the matrix
/// is singular (constants), the right-hand side made consistent by projection.
fn neumann_system(spec: &str) -> (Csr, Vec<f64>) {
    let mesh = spec.parse::<BoxSpec>().unwrap().generate().unwrap();
    let geometry = mesh.geometry().unwrap();
    let boundary = vec![BoundaryCondition::ZeroGradient; mesh.patches().len()];
    let mut problem = LaplacianProblem::steady(
        CellField::Uniform(1.0),
        CellField::function(|c| (3.0 * c.x).sin() + c.y * c.z),
        boundary,
    );
    problem.singular = SingularPolicy {
        project: true,
        ..SingularPolicy::default()
    };
    let mut system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
    assert!(system.is_singular());
    system.update_rhs(&vec![0.0; mesh.n_cells()], None).unwrap();
    (system.matrix.clone(), system.rhs.clone())
}

fn controls() -> SolverControls {
    SolverControls::absolute(1e-10, 3000)
}

fn equilibrations() -> [EquilibrationKind; 3] {
    let ruiz = |norm, tolerance| {
        EquilibrationKind::Ruiz(RuizSettings {
            norm,
            tolerance,
            max_sweeps: 100,
        })
    };
    [
        EquilibrationKind::Jacobi,
        ruiz(RuizNorm::Inf, 1e-6),
        ruiz(RuizNorm::Two, 1e-8),
    ]
}

fn solve(
    a: &Csr,
    b: &[f64],
    kind: PreconditionerKind,
    equilibration: &EquilibrationKind,
) -> (SolverPerformance, Vec<f64>) {
    let mut x = vec![0.0; a.n_rows()];
    let perf = solve_pcg_scaled(a, kind, equilibration, b, &mut x, &controls(), "p").unwrap();
    (perf, x)
}

/// max |a_i − b_i| / max |b_i|, after removing each vector's mean when
/// `modulo_constant` (all-Neumann solutions are defined up to a constant).
fn max_rel_diff(a: &[f64], b: &[f64], modulo_constant: bool) -> f64 {
    let mean = |v: &[f64]| {
        if modulo_constant {
            v.iter().sum::<f64>() / v.len() as f64
        } else {
            0.0
        }
    };
    let (ma, mb) = (mean(a), mean(b));
    let scale = b.iter().fold(0.0f64, |m, v| m.max((v - mb).abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| ((x - ma) - (y - mb)).abs() / scale)
        .fold(0.0, f64::max)
}

/// Σ|b − A x| / Σ|b|: the true residual of the original system.
fn true_residual(a: &Csr, b: &[f64], x: &[f64]) -> f64 {
    let mut ax = vec![0.0; b.len()];
    a.spmv(x, &mut ax);
    let r: f64 = ax.iter().zip(b).map(|(ax, b)| (b - ax).abs()).sum();
    r / b.iter().map(|v| v.abs()).sum::<f64>()
}

fn systems() -> Vec<(String, Csr, Vec<f64>, bool)> {
    let mut out = Vec::new();
    for spec in ["box:12x12x12", "box:8x8x8:tet:perturb=0.2:renumber"] {
        let (a, b) = poisson_system(spec).unwrap();
        out.push((spec.to_string(), a, b, false));
        let (a, b) = neumann_system(spec);
        out.push((format!("{spec} all-Neumann"), a, b, true));
    }
    out
}

#[test]
fn equilibrated_cg_matches_jacobi_pcg_on_fvm_systems() {
    for (name, a, b, neumann) in systems() {
        let (reference, x_ref) =
            solve(&a, &b, PreconditionerKind::Jacobi, &EquilibrationKind::None);
        assert!(reference.converged, "{name}");
        for equilibration in equilibrations() {
            let (perf, x) = solve(&a, &b, PreconditionerKind::None, &equilibration);
            let d = max_rel_diff(&x, &x_ref, neumann);
            let initial = (perf.initial_residual / reference.initial_residual - 1.0).abs();
            println!(
                "{name}, {equilibration}: {} iterations (Jacobi-PCG {}), final {:.3e}, \
                 initial residual differs by {initial:.1e}, solution by {d:.2e}, true residual {:.2e}",
                perf.iterations,
                reference.iterations,
                perf.final_residual,
                true_residual(&a, &b, &x)
            );
            assert!(perf.converged, "{name} {equilibration}");
            // The convergence test is the original system's: the same initial
            // residual, and the solution as accurate as the unscaled one.
            assert!(initial < 1e-12, "{name} {equilibration}: {initial}");
            assert!(d < 1e-7, "{name} {equilibration}: solution differs by {d}");
            assert!(true_residual(&a, &b, &x) < 1e-8, "{name} {equilibration}");
            if equilibration == EquilibrationKind::Jacobi {
                // CG on D^-1/2 A D^-1/2 is Jacobi-PCG on A in exact arithmetic.
                assert!(
                    perf.iterations.abs_diff(reference.iterations) <= 1,
                    "{name}: {} vs {}",
                    perf.iterations,
                    reference.iterations
                );
                for (k, (h, h_ref)) in perf
                    .history
                    .iter()
                    .zip(&reference.history)
                    .take(20)
                    .enumerate()
                {
                    assert!(
                        (h / h_ref - 1.0).abs() < 1e-8,
                        "{name}: residual {k} is {h}, Jacobi-PCG's {h_ref}"
                    );
                }
            }
        }
    }
}

#[test]
fn equilibration_cuts_iterations_on_a_badly_scaled_matrix() {
    // D A D with D from 1e-3 to 1e3 across the rows of a diagonally dominant A.
    let mut a = random_symmetric(2000, 8, 7);
    let d: Vec<f64> = (0..2000)
        .map(|i| 10f64.powf(-3.0 + 6.0 * ((i * 37) % 2000) as f64 / 1999.0))
        .collect();
    let (row_ptr, cols) = (a.row_ptr().to_vec(), a.cols().to_vec());
    for r in 0..2000 {
        for s in row_ptr[r]..row_ptr[r + 1] {
            a.values_mut()[s] *= d[r] * d[cols[s] as usize];
        }
    }
    let b: Vec<f64> = (0..2000).map(|i| ((i % 13) as f64 - 6.0) * d[i]).collect();
    let (plain, x_plain) = solve(&a, &b, PreconditionerKind::None, &EquilibrationKind::None);
    for equilibration in equilibrations() {
        let (perf, x) = solve(&a, &b, PreconditionerKind::None, &equilibration);
        println!(
            "{equilibration}: {} iterations, CG on A: {} (converged {})",
            perf.iterations, plain.iterations, plain.converged
        );
        assert!(perf.converged);
        assert!(perf.iterations * 5 < plain.iterations);
        if plain.converged {
            assert!(max_rel_diff(&x, &x_plain, false) < 1e-6);
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_equilibrated_solves_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let plain = (PreconditionerKind::Jacobi, EquilibrationKind::None);
    let scaled = equilibrations().map(|e| (PreconditionerKind::None, e));
    for (name, a, b, neumann) in systems() {
        for (kind, equilibration) in std::iter::once(plain).chain(scaled) {
            let (cpu, x_cpu) = solve(&a, &b, kind, &equilibration);
            for launches in [LaunchMode::Separate, LaunchMode::Graph] {
                let options = GpuSolveOptions {
                    check_interval: 7,
                    launches,
                    ..Default::default()
                };
                let mut x = vec![0.0; a.n_rows()];
                let perf = solve_pcg_gpu(
                    &gpu,
                    kind,
                    DeviceSolve::new(&a, &b, &mut x, &controls(), &options)
                        .equilibrated(&equilibration)
                        .named("p"),
                )
                .unwrap();
                let d = max_rel_diff(&x, &x_cpu, neumann);
                let initial = (perf.initial_residual / cpu.initial_residual - 1.0).abs();
                println!(
                    "{name}, {kind} on {equilibration}, {}: GPU {} iterations, CPU {}, \
                     final {:.3e} / {:.3e}, initial residual differs by {initial:.1e}, \
                     solution by {d:.2e}",
                    launches.name(),
                    perf.iterations,
                    cpu.iterations,
                    perf.final_residual,
                    cpu.final_residual
                );
                assert!(perf.converged);
                assert!(perf.iterations.abs_diff(cpu.iterations) <= 1);
                assert!(initial < 1e-12, "{initial}");
                assert!(d < 1e-6, "solution differs by {d}");
                assert!(true_residual(&a, &b, &x) < 1e-8);
            }
        }
    }
}
