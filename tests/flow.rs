//! SIMPLE validation at small sizes: lid-driven cavity against Ghia et al.
//! (1982), plane Poiseuille flow against the analytic profile and pressure
//! drop (full channel and half channel with a symmetry plane).

use fvpoisson::flow::validation::{run, FlowCase, FlowValidation};
use fvpoisson::flow::SimpleSettings;
use fvpoisson::solve::{solve_pcg, PreconditionerKind, SolverControls};

fn cpu_validation(case: FlowCase, adjust: impl Fn(&mut SimpleSettings)) -> FlowValidation {
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.01,
        ..SolverControls::default()
    };
    let mut solve = |a: &_, b: &[f64], x: &mut [f64], _last: bool| {
        solve_pcg(a, PreconditionerKind::Dic, b, x, &controls, "p")
    };
    let v = run(case, 3000, adjust, &mut solve).unwrap();
    println!("{v}");
    v
}

#[test]
fn cavity_re100_matches_ghia() {
    let v = cpu_validation(
        FlowCase::Cavity {
            reynolds: 100,
            n: 32,
        },
        |s| {
            s.consistent = true;
            s.relaxation_u = 0.9;
            s.relaxation_p = 1.0;
        },
    );
    assert!(v.passed(), "{v}");
}

#[test]
fn poiseuille_profile_and_pressure_drop() {
    for half in [false, true] {
        let v = cpu_validation(FlowCase::Poiseuille { n: 10, half }, |_| {});
        assert!(v.passed(), "{v}");
    }
}
