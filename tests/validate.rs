//! Manufactured-solution verification (`fvpoisson validate --quick`) through
//! the library and the binary, and the `boundaryCorrected` scheme's exactness
//! for linear fields.

mod common;

use fvpoisson::fvm::{
    BoundaryCondition, CellField, GammaInterpolation, GradScheme, LaplacianProblem,
    LaplacianSystem, PatchValues, Schemes, SnGradScheme,
};
use fvpoisson::mesh::{self, Vec3};
use fvpoisson::solve::{solve_pcg, PreconditionerKind, SolverControls};
use fvpoisson::validate::{self, Config, Family, Report, Scheme, Solution};
use std::process::Command;

/// A fresh empty directory for one test, removed when it passes.
fn scratch(name: &str) -> common::Scratch {
    common::Scratch::new(name)
}

fn finest_l2(report: &Report, family: Family, scheme: Scheme, solution: Solution) -> f64 {
    report
        .find(family, scheme, solution)
        .and_then(|s| s.finest())
        .unwrap_or_else(|| panic!("{family:?} {scheme:?} {solution:?} not run"))
        .l2
}

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The quick validation over every family: the expectations hold, asserted here
/// again directly on the measured numbers, and a changed series makes a check
/// fail.
#[test]
fn quick_validation_meets_the_expected_orders() {
    let config = Config {
        quick: true,
        families: Family::ALL.to_vec(),
    };
    let report = validate::run(&config, |_| {}).unwrap();
    println!("{report}");
    assert!(report.failures().is_empty(), "{report}");
    assert_eq!(
        report.series.len(),
        Family::ALL.len() * Scheme::ALL.len() * Solution::ALL.len()
    );

    // Orthogonal hexahedra: second order for every scheme and solution.
    for s in report.series.iter().filter(|s| s.family == Family::Hex) {
        for (l2, _) in s.orders() {
            assert!((1.8..2.2).contains(&l2), "{s:?}");
        }
    }
    for family in [
        Family::HexPerturbed,
        Family::Tet,
        Family::TetPerturbed,
        Family::Prism,
    ] {
        // The non-orthogonal correction pays off ...
        let uncorrected = finest_l2(&report, family, Scheme::Uncorrected, Solution::Poisson);
        let corrected = finest_l2(&report, family, Scheme::Corrected, Solution::Poisson);
        assert!(uncorrected > 1.5 * corrected, "{family:?}");
        // ... and the boundary correction with least-squares gradients is second
        // order where OpenFOAM's default stalls.
        for solution in Solution::ALL {
            let s = report
                .find(family, Scheme::BoundaryCorrectedLeastSquares, solution)
                .unwrap();
            assert!(s.final_order().unwrap() > 1.7, "{s:?}");
        }
        let default = finest_l2(&report, family, Scheme::Corrected, Solution::Quadratic);
        let improved = finest_l2(
            &report,
            family,
            Scheme::BoundaryCorrectedLeastSquares,
            Solution::Quadratic,
        );
        assert!(
            default > 2.0 * improved,
            "{family:?}: {default} vs {improved}"
        );
    }
    // On tetrahedra by more than an order of magnitude.
    for family in [Family::Tet, Family::TetPerturbed] {
        let default = finest_l2(&report, family, Scheme::Corrected, Solution::Quadratic);
        let improved = finest_l2(
            &report,
            family,
            Scheme::BoundaryCorrectedLeastSquares,
            Solution::Quadratic,
        );
        assert!(
            default > 10.0 * improved,
            "{family:?}: {default} vs {improved}"
        );
    }
    let perturbed = report
        .series
        .iter()
        .find(|s| s.family == Family::HexPerturbed);
    assert!(perturbed.unwrap().finest().unwrap().max_non_orth >= 30.0);

    // The checks can fail: OpenFOAM's default in place of the improved scheme.
    let mut series = report.series.clone();
    let default = report
        .find(Family::Tet, Scheme::Corrected, Solution::Quadratic)
        .unwrap()
        .levels
        .clone();
    for s in &mut series {
        if s.family == Family::Tet
            && s.scheme == Scheme::BoundaryCorrectedLeastSquares
            && s.solution == Solution::Quadratic
        {
            s.levels = default.clone();
        }
    }
    let broken = Report::checked(series, &Family::ALL);
    let failed: Vec<String> = broken.failures().iter().map(|c| c.to_string()).collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(failed[0].starts_with("FAIL tet boundaryCorrected+LS quadratic: L2 order"));

    let dir = scratch("validate_plot");
    let plot = dir.join("convergence.png");
    validate::write_plot(&report, &plot).unwrap();
    let bytes = std::fs::read(&plot).unwrap();
    assert_eq!(bytes[..8], PNG_SIGNATURE);
    assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    assert!(!dir.join("convergence.png.tmp").exists());
}

/// Linear T = 1 + 2x − 3y + z/2 with q = 0: least-squares gradients are exact,
/// so `boundaryCorrected` reproduces it to solver precision, on every family,
/// with fixedValue and fixedGradient patches; OpenFOAM's `corrected` leaves an
/// error at the walls of skewed cells.
#[test]
fn boundary_corrected_is_exact_for_linear_fields() {
    let exact = |x: Vec3| 1.0 + 2.0 * x.x - 3.0 * x.y + 0.5 * x.z;
    let gradient = Vec3::new(2.0, -3.0, 0.5);
    for spec in [
        "box:5x5x5:prism:perturb=0.3:seed=2",
        "box:4x4x4:tet:perturb=0.4:seed=5",
        "box:5x5x5:perturb=0.3:seed=4",
    ] {
        let mesh = mesh::load(spec).unwrap();
        let g = mesh.geometry().unwrap();
        let first = mesh.n_internal_faces();
        let boundary: Vec<BoundaryCondition> = mesh
            .patches()
            .iter()
            .map(|p| {
                if p.name == "ymax" {
                    BoundaryCondition::FixedGradient(PatchValues::PerFace(
                        p.faces()
                            .map(|f| g.face_area_vectors[f].normalize().dot(&gradient))
                            .collect(),
                    ))
                } else {
                    BoundaryCondition::FixedValue(PatchValues::PerFace(
                        p.faces()
                            .map(|f| exact(g.boundary_face_centres[f - first]))
                            .collect(),
                    ))
                }
            })
            .collect();
        let problem =
            LaplacianProblem::steady(CellField::Uniform(1.0), CellField::Uniform(0.0), boundary);
        let error = |sn_grad| {
            let schemes = Schemes {
                sn_grad,
                grad: GradScheme::LeastSquares,
                gamma_interpolation: GammaInterpolation::Linear,
            };
            let mut system = LaplacianSystem::new(&mesh, &g, schemes, &problem).unwrap();
            let mut t = vec![0.0; mesh.n_cells()];
            let controls = SolverControls {
                tolerance: 1e-14,
                max_iter: 5000,
                ..SolverControls::default()
            };
            system
                .solve(&mut t, None, 80, |a, b, x| {
                    solve_pcg(a, PreconditionerKind::Dic, b, x, &controls, "T").unwrap();
                })
                .unwrap();
            t.iter()
                .zip(&g.cell_centres)
                .map(|(t, &c)| (t - exact(c)).abs())
                .fold(0.0, f64::max)
        };
        let improved = error(SnGradScheme::BoundaryCorrected);
        let default = error(SnGradScheme::Corrected);
        assert!(
            improved < 1e-9,
            "{spec}: boundaryCorrected error {improved}"
        );
        assert!(default > 1e-4, "{spec}: corrected error {default}");
    }
}

#[test]
fn cli_validate_prints_the_table_and_writes_the_plot() {
    let dir = scratch("validate_cli");
    let out = Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(["validate", "--quick", "--families", "hex", "--out"])
        .arg(dir.join("out"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("hex            corrected"), "{stdout}");
    assert!(stdout.contains("all 12 expectations met"), "{stdout}");
    let bytes = std::fs::read(dir.join("out").join("validate.png")).unwrap();
    assert_eq!(bytes[..8], PNG_SIGNATURE);

    // No font: the plot is still written, without text, and the user is told.
    let plot = dir.join("sub").join("plain.png");
    let out = Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(["validate", "--quick", "--families", "hex", "--plot"])
        .arg(&plot)
        .env("FVPOISSON_FONT", dir.join("missing.ttf"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("(without labels)"), "{stdout}");
    assert!(stderr.contains("no usable font"), "{stderr}");
    assert_eq!(std::fs::read(&plot).unwrap()[..8], PNG_SIGNATURE);

    // Run in a scratch directory: validate.png goes to the working directory
    // by default, which must not be the repository.
    let refused = dir.join("refused");
    std::fs::create_dir_all(&refused).unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_fvpoisson"))
        .args(["validate", "--quick", "--families", "hex,cubes"])
        .current_dir(&refused)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("unknown mesh family 'cubes'"), "{stderr}");
    assert!(!refused.join("validate.png").exists());
}
