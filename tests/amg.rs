//! The aggregation AMG (`solve::amg`) on real FVM systems: as a PCG
//! preconditioner (V, W and the flexible K-cycle) and as OpenFOAM's GAMG
//! solver on its own; iteration counts nearly independent of the mesh size;
//! all-Neumann (singular) systems.

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::fvm::testing::{all_neumann_problem, random_field};
use fvpoisson::fvm::{LaplacianSystem, Reference, Schemes};
use fvpoisson::solve::amg::{solve_amg, AmgSettings, AmgSmootherKind, CycleKind};
use fvpoisson::solve::{solve_pcg, Preconditioner, PreconditionerKind, SolverControls};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::Csr;

const MESHES: [&str; 5] = [
    "box:12x12x12:tet:perturb=0.2:renumber",
    "box:40x40x1:2d",
    "meshes/foam/polydual",
    "meshes/gmsh/prism_wedge.v22.msh",
    "meshes/gmsh/pyramid_hybrid.v22.msh",
];

fn system(spec: &str) -> (Csr, Vec<f64>) {
    poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Relative residual 1e-8 (OpenFOAM-normalised residuals), 500 iterations at most.
fn relative(rel_tol: f64) -> SolverControls {
    SolverControls {
        tolerance: 0.0,
        rel_tol,
        max_iter: 500,
        min_iter: 0,
    }
}

/// PCG iterations to `controls` from x = 0, and the solution.
fn pcg(
    a: &Csr,
    b: &[f64],
    p: impl Into<Preconditioner>,
    controls: &SolverControls,
) -> (usize, Vec<f64>) {
    let mut x = vec![0.0; a.n_rows()];
    let perf = solve_pcg(a, p, b, &mut x, controls, "p").unwrap();
    assert!(perf.converged, "{perf:?}");
    (perf.iterations, x)
}

#[test]
fn amg_preconditions_pcg_to_the_solution_on_every_mesh() {
    let cycles = [
        AmgSettings::default(),
        AmgSettings {
            cycle: CycleKind::V,
            smoother: AmgSmootherKind::L1Jacobi,
            passes: 2,
            ..AmgSettings::default()
        },
        AmgSettings {
            cycle: CycleKind::W,
            smoother: AmgSmootherKind::MulticolourGaussSeidel,
            ..AmgSettings::default()
        },
        AmgSettings {
            cycle: CycleKind::K,
            smoother: AmgSmootherKind::Chebyshev,
            sweeps: 2,
            ..AmgSettings::default()
        },
    ];
    for spec in MESHES {
        let (a, b) = system(spec);
        let tight = SolverControls::absolute(1e-12, 2000);
        let (jacobi, reference) = pcg(&a, &b, PreconditionerKind::Jacobi, &tight);
        for s in cycles {
            // Small coarsest levels so that even these meshes get several levels.
            let s = AmgSettings {
                coarsest_rows: 50,
                ..s
            };
            let (iterations, x) = pcg(&a, &b, Preconditioner::Amg(s), &tight);
            let d = max_rel_diff(&x, &reference);
            println!("{spec}: {s}: {iterations} iterations (Jacobi {jacobi}), difference {d:.1e}");
            assert!(d < 1e-8, "{spec} {s}: {d}");
            assert!(
                iterations < jacobi,
                "{spec} {s}: {iterations} vs Jacobi {jacobi}"
            );
        }
    }
}

#[test]
fn iterations_stay_nearly_flat_under_refinement() {
    for s in [
        AmgSettings::default(),
        AmgSettings {
            cycle: CycleKind::V,
            passes: 2,
            ..AmgSettings::default()
        },
    ] {
        let counts: Vec<usize> = ["box:16x16x16", "box:32x32x32", "box:64x64x64"]
            .iter()
            .map(|spec| {
                let (a, _) = system(spec);
                let b = random_field(a.n_rows(), 3);
                pcg(&a, &b, Preconditioner::Amg(s), &relative(1e-8)).0
            })
            .collect();
        println!("{s}: iterations {counts:?} on 16³, 32³, 64³");
        assert!(
            2 * counts[2] <= 3 * counts[1] && 2 * counts[1] <= 3 * counts[0],
            "{s}: {counts:?}"
        );
        // Jacobi-PCG doubles its count per refinement; AMG must be far below.
        assert!(counts[2] < 40, "{s}: {counts:?}");
    }
}

#[test]
fn all_neumann_systems_converge_with_amg() {
    for spec in ["box:20x20x20", "meshes/gmsh/tet_cube.v22.msh"] {
        let mesh = fvpoisson::mesh::source::load(spec).unwrap();
        let g = mesh.geometry().unwrap();
        let problem = all_neumann_problem(&mesh, Reference::ZeroMean);
        let sys = LaplacianSystem::new(&mesh, &g, Schemes::default(), &problem).unwrap();
        // The range of A is the zero-sum vectors: project the assembled source.
        let a = &sys.matrix;
        let mean = sys.rhs.iter().sum::<f64>() / a.n_rows() as f64;
        let b: &Vec<f64> = &sys.rhs.iter().map(|v| v - mean).collect();
        let s = AmgSettings {
            coarsest_rows: 100,
            ..AmgSettings::default()
        };
        let controls = relative(1e-10);
        let (amg, x) = pcg(a, b, Preconditioner::Amg(s), &controls);
        let (jacobi, reference) = pcg(a, b, PreconditionerKind::Jacobi, &controls);
        // Solutions differ by a constant only.
        let shift = |x: &[f64]| {
            let mean = x.iter().sum::<f64>() / x.len() as f64;
            x.iter().map(|v| v - mean).collect::<Vec<_>>()
        };
        let d = max_rel_diff(&shift(&x), &shift(&reference));
        println!("{spec} all-Neumann: AMG {amg} iterations, Jacobi {jacobi}, difference {d:.1e}");
        assert!(d < 1e-7, "{spec}: {d}");
        assert!(2 * amg < jacobi, "{spec}: {amg} vs {jacobi}");
    }
}

#[test]
fn amg_cycles_alone_solve_like_openfoam_gamg() {
    let (a, b) = system("box:24x24x24:tet:perturb=0.2:renumber");
    let (_, reference) = pcg(
        &a,
        &b,
        PreconditionerKind::Dic,
        &SolverControls::absolute(1e-12, 2000),
    );
    for s in [
        AmgSettings::default(),
        AmgSettings {
            cycle: CycleKind::V,
            smoother: AmgSmootherKind::MulticolourGaussSeidel,
            sweeps: 2,
            ..AmgSettings::default()
        },
    ] {
        let mut x = vec![0.0; a.n_rows()];
        let controls = relative(1e-9);
        let perf = solve_amg(&a, &s, &b, &mut x, &controls, "p").unwrap();
        let d = max_rel_diff(&x, &reference);
        println!("GAMG {s}: {} cycles, difference {d:.1e}", perf.iterations);
        assert!(perf.converged, "{s}: {perf:?}");
        assert!(d < 1e-6, "{s}: {d}");
        // A multigrid rate: well below Jacobi-PCG's iteration count (≈ 300 here).
        assert!(perf.iterations < 150, "{s}: {} cycles", perf.iterations);
    }
}

#[test]
fn amg_pcg_converges_on_the_density_contrast_case_on_a_hex_box() {
    // cases/bubble_tet_3d's problem on a 20³ hex box: Γ jumps by 1000 across
    // the bubble, unlike the Poisson case.
    let mesh = fvpoisson::mesh::source::load("box:20x20x20").unwrap();
    let case = std::path::Path::new("cases/bubble_tet_3d");
    let hex = fvpoisson::case::initial_matrix_on(case, Some(mesh)).unwrap();
    let (poisson, _) = system("box:20x20x20");
    assert_eq!(hex.n_rows(), 8000);
    let ratio = |m: &Csr| {
        let d: Vec<f64> = (0..m.n_rows())
            .map(|r| m.values()[m.slot(r, r).unwrap()])
            .collect();
        d.iter().cloned().fold(0.0, f64::max) / d.iter().cloned().fold(f64::INFINITY, f64::min)
    };
    println!(
        "diagonal ratio: bubble {:.0}, Poisson {:.1}",
        ratio(&hex),
        ratio(&poisson)
    );
    assert!(ratio(&hex) > 100.0 && ratio(&poisson) < 10.0);
    let s = AmgSettings {
        coarsest_rows: 50,
        ..AmgSettings::default()
    };
    let (iterations, _) = pcg(
        &hex,
        &random_field(8000, 2),
        Preconditioner::Amg(s),
        &relative(1e-8),
    );
    println!("bubble 20^3: {iterations} AMG-PCG iterations");
}
