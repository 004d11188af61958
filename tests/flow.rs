//! SIMPLE validation at small sizes: lid-driven cavity against Ghia et al.
//! (1982), plane Poiseuille flow against the analytic profile and pressure
//! drop (full channel and half channel with a symmetry plane). The full
//! sizes run with `fvpoisson validate-flow`.

mod common;

use common::{cavity_case, write_case_toml};
use fvpoisson::flow::validation::{run, FlowCase, FlowValidation, PressureDevice, PressureSolver};
use fvpoisson::flow::{Convection, SimpleSettings};
use fvpoisson::solve::SolverControls;

fn cpu_validation(case: FlowCase, adjust: impl Fn(&mut SimpleSettings)) -> FlowValidation {
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.01,
        ..SolverControls::default()
    };
    let mut pressure = PressureSolver::new(PressureDevice::Cpu, controls);
    let v = run(case, 3000, adjust, &mut pressure, None).unwrap();
    println!("{v}");
    v
}

fn simplec(s: &mut SimpleSettings) {
    s.consistent = true;
    s.relaxation_u = 0.9;
    s.relaxation_p = 1.0;
}

#[test]
fn cavity_re100_matches_ghia_with_simplec_and_simple() {
    let v = cpu_validation(
        FlowCase::Cavity {
            reynolds: 100,
            n: 32,
        },
        simplec,
    );
    assert!(v.passed(), "{v}");
    // SIMPLE (α_U 0.7, α_p 0.3) converges more slowly to nearly the same
    // solution: the Rhie–Chow flux depends on α_U through rAU (as OpenFOAM's
    // does), which moves the converged field by O(h²) (largest at the lid's corners).
    let simple = cpu_validation(
        FlowCase::Cavity {
            reynolds: 100,
            n: 32,
        },
        |_| {},
    );
    assert!(simple.passed(), "{simple}");
    assert!(simple.reports.len() > v.reports.len());
    let diff =
        v.u.iter()
            .zip(&simple.u)
            .map(|(a, b)| (a - b).norm())
            .fold(0.0, f64::max);
    assert!(
        diff > 0.0 && diff < 0.03,
        "SIMPLE and SIMPLEC differ by {diff:e}"
    );
}

#[test]
fn cavity_convection_schemes_rank_as_expected() {
    // Upwind is first order: further from Ghia than linearUpwind and
    // limitedLinear on the same grid, and still within a loose bound.
    let case = FlowCase::Cavity {
        reynolds: 100,
        n: 32,
    };
    let deviation = |convection| {
        let v = cpu_validation(case, |s| {
            simplec(s);
            s.convection = convection;
        });
        assert!(v.converged, "{v}");
        v.max_deviation
    };
    let upwind = deviation(Convection::Upwind);
    let limited = deviation(Convection::LimitedLinear(1.0));
    let linear_upwind = deviation(Convection::LinearUpwind);
    assert!(
        upwind > 1.5 * linear_upwind,
        "upwind {upwind}, linearUpwind {linear_upwind}"
    );
    assert!(upwind > limited, "upwind {upwind}, limitedLinear {limited}");
    assert!(limited < case.tolerance() && upwind < 0.1);
}

#[test]
fn poiseuille_profile_and_pressure_drop() {
    for half in [false, true] {
        let v = cpu_validation(FlowCase::Poiseuille { n: 10, half }, |_| {});
        assert!(v.passed(), "{v}");
    }
}

#[test]
fn potential_flow_around_a_cylinder() {
    // potentialFoam semantics on an O-grid annulus: the speed next to the
    // wall against the analytic potential flow, converging with the mesh.
    let coarse = cpu_validation(FlowCase::Cylinder { n: 24 }, |_| {});
    let fine = cpu_validation(FlowCase::Cylinder { n: 48 }, |_| {});
    assert!(coarse.passed(), "{coarse}");
    assert!(fine.passed(), "{fine}");
    assert!(
        fine.max_deviation < 0.6 * coarse.max_deviation,
        "no convergence: {} then {}",
        coarse.max_deviation,
        fine.max_deviation
    );
}

#[test]
fn writes_fields_and_residual_plot() {
    let dir = common::unique_temp_dir("fvpoisson_flow");
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.01,
        ..SolverControls::default()
    };
    let mut pressure = PressureSolver::new(PressureDevice::Cpu, controls);
    let case = FlowCase::Cavity {
        reynolds: 100,
        n: 8,
    };
    run(case, 20, simplec, &mut pressure, Some(&dir)).unwrap();
    let vtu = std::fs::read(dir.join("cavity_re100_8.vtu")).unwrap();
    for name in ["\"U\"", "\"p\"", "\"div(phi)\""] {
        let name = name.as_bytes();
        assert!(vtu.windows(name.len()).any(|w| w == name), "field missing");
    }
    let png = std::fs::read(dir.join("cavity_re100_8_residuals.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flow_case_toml_runs_and_names_bad_keys() {
    use fvpoisson::case::flow_case::{is_flow_case, read_flow_case, run_flow_case};
    use fvpoisson::case::Device;
    let dir = common::unique_temp_dir("fvpoisson_flow_case");
    let case = cavity_case(
        "box:16x16x1:2d",
        r#"[SIMPLE]
consistent = true
maxIterations = 400
residualControl = { U = 1e-5, p = 1e-5 }
[relaxationFactors]
U = 0.9
p = 1.0
[solver.U]
solver = "smoothSolver"
smoother = "symGaussSeidel"
tolerance = 1e-9
relTol = 0.1
[validation]
case = "cavity"
"#,
    );
    write_case_toml(&dir, &case);
    assert!(is_flow_case(&dir));
    let setup = read_flow_case(&dir).unwrap();
    let summary = run_flow_case(&setup, Device::Cpu).unwrap();
    assert!(summary.converged && summary.iterations < 400, "{summary:?}");
    let (table, passed) = summary.validation.unwrap();
    assert!(table.contains("Ghia") && passed, "{table}");
    // One VTK step of the converged fields, its series, and the residual plot.
    let mut written: Vec<String> = dir
        .join("results")
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written.len(), 4, "{written:?}");
    assert!(written.iter().any(|f| f.ends_with(".pvd")), "{written:?}");
    assert!(
        written.iter().any(|f| f.ends_with("_residuals.png")),
        "{written:?}"
    );

    // A smoother that needs symmetry, an unknown velocity condition, and a
    // value missing or given against a condition's kind are refused with
    // file, line and key.
    let ymax_p = "p = { type = \"zeroGradient\" }";
    for (bad, line, words) in [
        (
            case.replace("smoother = \"symGaussSeidel\"", "smoother = \"DIC\""),
            20,
            "solver.U",
        ),
        (
            case.replace("type = \"noSlip\"", "type = \"slip\""),
            11,
            "boundary.default.U: unknown velocity condition 'slip'",
        ),
        (
            case.replace(", value = [1.0, 0.0, 0.0]", ""),
            8,
            "boundary.ymax.U: fixedValue needs a value",
        ),
        (
            case.replace(
                "type = \"noSlip\"",
                "type = \"noSlip\", value = [0.0, 0.0, 0.0]",
            ),
            11,
            "boundary.default.U: a noSlip condition takes no value",
        ),
        (
            case.replacen(ymax_p, "p = { type = \"fixedValue\" }", 1),
            9,
            "boundary.ymax.p: fixedValue needs a value",
        ),
        (
            case.replacen(ymax_p, "p = { type = \"zeroGradient\", value = 0 }", 1),
            9,
            "boundary.ymax.p: a zeroGradient condition takes no value",
        ),
    ] {
        write_case_toml(&dir, &bad);
        let err = read_flow_case(&dir).unwrap_err().to_string();
        assert!(
            err.contains(&format!("case.toml:{line}:")) && err.contains(words),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shipped_flow_cases_read_and_the_poiseuille_case_passes() {
    use fvpoisson::case::flow_case::{is_flow_case, read_flow_case, run_flow_case};
    use fvpoisson::case::Device;
    let shipped = |name: &str| common::repo(&format!("cases/{name}"));
    // The cavity (129x129, minutes) is read here and run by `fvpoisson run cases/cavity`.
    let cavity = read_flow_case(&shipped("cavity")).unwrap();
    assert!(is_flow_case(&shipped("cavity")) && cavity.settings.consistent);
    assert_eq!(
        FlowCase::from_mesh("cavity", 129 * 129, cavity.settings.nu).unwrap(),
        FlowCase::Cavity {
            reynolds: 100,
            n: 129
        }
    );
    let mut poiseuille = read_flow_case(&shipped("poiseuille")).unwrap();
    poiseuille.output_dir = common::unique_temp_dir("fvpoisson_poiseuille");
    let summary = run_flow_case(&poiseuille, Device::Cpu).unwrap();
    let (table, passed) = summary.validation.unwrap();
    assert!(passed, "{table}");
    std::fs::remove_dir_all(&poiseuille.output_dir).unwrap();
}

#[test]
fn momentum_solved_by_pbicgstab_or_gmres_gives_the_smooth_solver_cavity() {
    use fvpoisson::solve::{GmresSettings, KrylovMethod, PreconditionerKind};
    let case = FlowCase::Cavity {
        reynolds: 100,
        n: 24,
    };
    let reference = cpu_validation(case, simplec);
    for method in [
        KrylovMethod::BiCgStab,
        KrylovMethod::Gmres(GmresSettings::default()),
    ] {
        let v = cpu_validation(case, |s| {
            simplec(s);
            s.momentum.krylov = Some(method);
            s.momentum.preconditioner = PreconditionerKind::Jacobi.into();
        });
        assert!(v.converged, "{method}: {v}");
        let diff =
            v.u.iter()
                .zip(&reference.u)
                .map(|(a, b)| (a - b).norm())
                .fold(0.0, f64::max);
        println!(
            "{method}: {} outer iterations (smoothSolver {}), max |ΔU| {diff:.3e}",
            v.reports.len(),
            reference.reports.len()
        );
        assert!(diff < 1e-5, "{method}: {diff:e}");
    }
}
