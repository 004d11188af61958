//! Smoothers on the CPU on real FVM systems: as OpenFOAM smoothSolvers, as PCG
//! preconditioners (flexible PCG for the non-linear ones), colour counts.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::solve::colouring::Colouring;
use fvpoisson::solve::{
    pcg, solve_pcg, solve_smooth, ColouringKind, CpuBackend, InnerSolver, Preconditioner,
    PreconditionerKind, SmootherKind, SmootherSettings, SolverControls, SolverPerformance, Sweep,
};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::Csr;

const MESHES: [&str; 4] = [
    "box:12x12x12:tet:perturb=0.2:renumber",
    "box:40x40x1:2d",
    "meshes/foam/polydual",
    "meshes/gmsh/prism_wedge.v22.msh",
];

/// The Poisson system on a mesh (files relative to the repository root, the
/// working directory of `cargo test`).
fn system(spec: &str) -> (Csr, Vec<f64>) {
    poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Block Jacobi on blocks of 64 rows.
fn block(inner: InnerSolver, tolerance: f64, steps: usize) -> SmootherSettings {
    SmootherSettings::block_jacobi(inner, tolerance, steps, 64)
}

/// The symmetric smoothers PCG can use.
fn preconditioners() -> Vec<SmootherSettings> {
    let mut jacobi = SmootherSettings::new(SmootherKind::Jacobi);
    jacobi.omega = 0.8;
    jacobi.sweeps = 2;
    let mut mc = SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric));
    mc.colouring = ColouringKind::JonesPlassmann;
    vec![
        jacobi,
        SmootherSettings::new(SmootherKind::L1Jacobi),
        SmootherSettings::new(SmootherKind::GaussSeidel(Sweep::Symmetric)),
        mc,
        block(InnerSolver::Jacobi, 0.0, 4),
        block(InnerSolver::SymGaussSeidel, 0.0, 2),
        block(InnerSolver::Cg, 1e-3, 50),
        block(InnerSolver::Jacobi, 1e-2, 20),
    ]
}

/// PCG with `preconditioner` from x = 0 to an absolute residual of 1e-12.
fn pcg_from_zero(
    a: &Csr,
    b: &[f64],
    preconditioner: impl Into<Preconditioner>,
) -> (SolverPerformance, Vec<f64>) {
    let mut x = vec![0.0; a.n_rows()];
    let controls = SolverControls::absolute(1e-12, 5000);
    let perf = solve_pcg(a, preconditioner, b, &mut x, &controls, "p").unwrap();
    (perf, x)
}

#[test]
fn every_symmetric_smoother_preconditions_pcg_to_the_solution() {
    for spec in MESHES {
        let (a, b) = system(spec);
        let (dic, reference) = pcg_from_zero(&a, &b, PreconditionerKind::Dic);
        let (jacobi, _) = pcg_from_zero(&a, &b, PreconditionerKind::Jacobi);
        for s in preconditioners() {
            let p = Preconditioner::Smoother(s);
            let (perf, x) = pcg_from_zero(&a, &b, p);
            let d = max_rel_diff(&x, &reference);
            println!(
                "{spec}: {p}: {} iterations (Jacobi {}, DIC {}), flexible {}, difference {d:.1e}",
                perf.iterations,
                jacobi.iterations,
                dic.iterations,
                p.is_flexible()
            );
            assert!(perf.converged, "{spec} {p}");
            assert!(d < 1e-8, "{spec} {p}: {d}");
            // Symmetric Gauss-Seidel and (near-)exact block solves beat point Jacobi.
            if matches!(s.kind, SmootherKind::GaussSeidel(_))
                || (s.kind == SmootherKind::BlockJacobi && s.block.inner == InnerSolver::Cg)
            {
                assert!(perf.iterations < jacobi.iterations, "{spec} {p}");
            }
        }
    }
}

#[test]
fn flexible_pcg_with_a_linear_preconditioner_follows_standard_pcg() {
    let (a, b) = system(MESHES[0]);
    let sgs = PreconditionerKind::SymGaussSeidel.build(&a).unwrap();
    let run = |flexible: bool| {
        let backend = CpuBackend::new(&a, sgs.as_ref()).flexible(flexible);
        let mut x = vec![0.0; a.n_rows()];
        let perf = pcg(
            &backend,
            &b,
            &mut x,
            &SolverControls::absolute(1e-10, 1000),
            "p",
        )
        .unwrap();
        (perf, x)
    };
    let (standard, x_standard) = run(false);
    let (flexible, x_flexible) = run(true);
    println!(
        "standard {} iterations, flexible {}",
        standard.iterations, flexible.iterations
    );
    assert!(standard.iterations.abs_diff(flexible.iterations) <= 1);
    // The residual histories agree while round-off has not yet built up.
    for (s, f) in standard.history.iter().zip(&flexible.history).take(20) {
        assert!((s - f).abs() <= 1e-8 * s, "{s} vs {f}");
    }
    assert!(max_rel_diff(&x_flexible, &x_standard) < 1e-8);
}

#[test]
fn every_smoother_solves_as_a_smooth_solver() {
    let (a, b) = system(MESHES[1]);
    let (_, reference) = pcg_from_zero(&a, &b, PreconditionerKind::Dic);
    let mut all: Vec<SmootherSettings> = [
        "Jacobi",
        "L1Jacobi",
        "GaussSeidel",
        "backwardGaussSeidel",
        "symGaussSeidel",
        "multicolourGaussSeidel",
        "multicolourSymGaussSeidel",
        "DIC",
        "DICGaussSeidel",
    ]
    .iter()
    .map(|name| SmootherSettings::named(name).unwrap())
    .collect();
    for inner in [
        InnerSolver::Jacobi,
        InnerSolver::GaussSeidel,
        InnerSolver::Cg,
    ] {
        for asynchronous in [false, true] {
            let mut s = block(inner, 1e-6, 100);
            s.block.asynchronous = asynchronous;
            all.push(s);
        }
    }
    let mut sweeps = Vec::new();
    for s in all {
        let mut x = vec![0.0; a.n_rows()];
        let perf = solve_smooth(
            &a,
            &s,
            &b,
            &mut x,
            &SolverControls::absolute(1e-8, 200_000),
            "p",
        )
        .unwrap();
        println!("{s}: {} sweeps", perf.iterations);
        assert!(perf.converged, "{s}");
        assert!(max_rel_diff(&x, &reference) < 1e-5, "{s}");
        sweeps.push((s, perf.iterations));
    }
    // Gauss-Seidel needs about half the sweeps of Jacobi; block Jacobi with
    // exact 64-row block solves fewer than point Jacobi.
    let count = |name: &str| {
        let s = SmootherSettings::named(name).unwrap();
        sweeps.iter().find(|e| e.0 == s).unwrap().1
    };
    assert!(count("GaussSeidel") < count("Jacobi") * 7 / 10);
    let exact_blocks = sweeps
        .iter()
        .find(|e| e.0 == block(InnerSolver::Cg, 1e-6, 100))
        .unwrap()
        .1;
    assert!(exact_blocks < count("Jacobi"));
}

#[test]
fn colour_counts_on_real_meshes() {
    for spec in MESHES {
        let (a, _) = system(spec);
        let jp = Colouring::jones_plassmann(&a);
        let greedy = Colouring::greedy(&a);
        let max_degree = (0..a.n_rows()).map(|r| a.row(r).0.len() - 1).max().unwrap();
        println!(
            "{spec}: {} rows, max degree {max_degree}: Jones-Plassmann {} colours, greedy {}",
            a.n_rows(),
            jp.n_colours(),
            greedy.n_colours()
        );
        for c in [&jp, &greedy] {
            assert!(c.conflict(&a).is_none());
            assert!(c.n_colours() >= 2 && c.n_colours() <= max_degree + 1);
        }
    }
}
