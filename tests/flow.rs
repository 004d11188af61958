//! SIMPLE validation at small sizes: lid-driven cavity against Ghia et al.
//! (1982), plane Poiseuille flow against the analytic profile and pressure
//! drop (full channel and half channel with a symmetry plane). The full
//! sizes run with `fvpoisson validate-flow`.

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
fn writes_fields_and_residual_plot() {
    let dir = std::env::temp_dir().join(format!("fvpoisson_flow_{}", std::process::id()));
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
