//! The transient step on the device (`gpu::simple::piso::DevicePiso`) against
//! the CPU step (`flow::piso::Piso`) from the same state, step by step over
//! 10 steps: icoFoam's PISO (Euler, Gauss linear) and PIMPLE with backward,
//! upwind-based convection (bounded and not), the explicit laminar stress,
//! relaxation and UFinal on a perturbed tetrahedral box (non-orthogonal
//! correctors); the cavity tutorial (`cases/cavity_ico`) and a laminar
//! pimpleFoam cavity, stepped and run whole (`run_transient_case` on the
//! GPU takes the device step). Both sides solve p by Jacobi-PCG and U by
//! Jacobi-PBiCGStab converged to 1e-11 (relTol 0).
//!
//! The bound: U, p and φ agree to [`FIELD_BOUND`] = 1e-8 relative (max|Δ| /
//! max|CPU|) after every step, and every solve takes the same number of
//! iterations ±1. The assembly, fluxes and corrections equal the CPU's bit for
//! bit for the same inputs; the Krylov and PCG reductions (tree sums), the
//! relaxation's and HbyA's sums (column order) differ in round-off (~1e-16
//! relative), which the solves carry to ~1e-13 over 10 steps on these meshes
//! while the iteration counts agree. A solve that stops one iteration earlier
//! or later (its residual crossing 1e-11 within round-off) moves its field
//! by about that residual times the matrix's condition (≲ 1e3 here): 1e-8
//! bounds that too. Skips without a CUDA device (`FVPOISSON_REQUIRE_GPU=1`
//! makes that a failure).

mod common;

use std::path::{Path, PathBuf};

use fvpoisson::case::ico_foam::{read_transient_case, run_transient_case, transient_state};
use fvpoisson::case::Device;
use fvpoisson::flow::piso::{DdtScheme, Piso, StepReport, TransientConvection, TransientSettings};
use fvpoisson::flow::simple::{MomentumSolver, PressureSolve};
use fvpoisson::flow::{Convection, SimpleSettings};
use fvpoisson::gpu::amg::gpu_amg_settings;
use fvpoisson::gpu::simple::piso::DevicePiso;
use fvpoisson::gpu::simple::DevicePressureSolver;
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::mesh::{source::load, Geometry, Mesh, Vec3};
use fvpoisson::solve::amg::AmgSettings;
use fvpoisson::solve::{solve_pcg, KrylovMethod, PreconditionerKind, SolverControls};

/// Largest relative difference of U, p and φ allowed after a step (see the
/// module documentation).
const FIELD_BOUND: f64 = 1e-8;

/// The tet box: 6³ hexahedra cut into tetrahedra, points moved by 20 %.
const TET_BOX: &str = "box:6x6x6:tet:perturb=0.2";

fn tight() -> SolverControls {
    SolverControls {
        tolerance: 1e-11,
        rel_tol: 0.0,
        max_iter: 5000,
        min_iter: 0,
    }
}

/// Jacobi-PBiCGStab to 1e-11, as both sides run it.
fn bicgstab() -> MomentumSolver {
    MomentumSolver {
        krylov: Some(KrylovMethod::BiCgStab),
        preconditioner: PreconditionerKind::Jacobi.into(),
        controls: tight(),
        ..MomentumSolver::default()
    }
}

/// max |a − b| / max |a|.
fn relative(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

fn components(u: &[Vec3]) -> Vec<f64> {
    u.iter().flat_map(|v| [v.x, v.y, v.z]).collect()
}

/// A lid-driven cavity on `mesh` (lid `ymax` moving in x, walls elsewhere,
/// zero-gradient pressure), from rest.
fn cavity<'m>(
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    settings: SimpleSettings,
    transient: TransientSettings,
    dt: f64,
) -> Piso<'m> {
    let (velocity, pressure) = fvpoisson::flow::testing::cavity_conditions(mesh);
    let n = mesh.n_cells();
    Piso::new(
        mesh,
        geometry,
        settings,
        transient,
        &velocity,
        pressure,
        (vec![Vec3::zeros(); n], vec![0.0; n], None),
        dt,
    )
    .unwrap()
}

/// Iteration counts equal within one.
fn assert_iterations(what: &str, step: usize, cpu: usize, gpu: usize) {
    assert!(
        cpu.abs_diff(gpu) <= 1,
        "step {step}: {what} iterations CPU {cpu} GPU {gpu}"
    );
}

/// `p_alike`: the same pressure preconditioner on both sides (else the p
/// iteration counts are not compared).
fn compare_reports(a: &StepReport, b: &StepReport, p_alike: bool) {
    let step = a.step;
    assert_eq!(a.step, b.step);
    assert_eq!(a.time, b.time);
    assert_eq!(a.outer_correctors, b.outer_correctors, "step {step}");
    assert_eq!(a.p_solves.len(), b.p_solves.len(), "step {step}");
    assert_eq!(a.u_solves.len(), b.u_solves.len(), "step {step}");
    for (x, y) in a.p_solves.iter().zip(&b.p_solves) {
        if p_alike {
            assert_iterations("p", step, x.iterations, y.iterations);
        }
        assert!(
            y.converged,
            "step {step}: a device p solve did not converge"
        );
    }
    for ((name, x), (other, y)) in a.u_solves.iter().zip(&b.u_solves) {
        assert_eq!(name, other);
        assert_iterations(name, step, x.iterations, y.iterations);
        assert!(
            (x.initial_residual - y.initial_residual).abs()
                <= 1e-6 * x.initial_residual.abs() + 1e-14,
            "step {step}: {name} initial residual CPU {} GPU {}",
            x.initial_residual,
            y.initial_residual
        );
    }
    // The Courant number: the max is exact for equal fluxes, the mean a
    // tree sum on the device.
    for (x, y) in [(a.courant.0, b.courant.0), (a.courant.1, b.courant.1)] {
        assert!(
            (x - y).abs() <= FIELD_BOUND * x.abs() + 1e-300,
            "step {step}: Courant CPU {:?} GPU {:?}",
            a.courant,
            b.courant
        );
    }
    assert!(
        b.continuity.iter().all(|c| c.is_finite()),
        "{:?}",
        b.continuity
    );
}

/// `steps` steps of `cpu` (Jacobi-PCG with `p` and `p_final`) and of
/// `on_gpu` on the device, both from the same state; the largest relative
/// difference of U, p, φ over the steps, each step checked against
/// [`FIELD_BOUND`] and its iteration counts compared.
fn compare_steps(
    gpu: &Gpu,
    cpu: &mut Piso,
    on_gpu: &mut Piso,
    steps: usize,
    controls: (SolverControls, SolverControls),
) -> f64 {
    let jacobi = DevicePressureSolver {
        jacobi: true,
        controls: controls.0,
        amg: None,
        polynomial: None,
    };
    let p = PreconditionerKind::Jacobi;
    compare_steps_with(gpu, cpu, on_gpu, steps, controls, p, jacobi)
}

/// [`compare_steps`] with p solved on the CPU by PCG with `cpu_p` and on the
/// device by `device_p` (its controls replaced by `p`'s); iteration counts
/// of p compared where both are Jacobi.
fn compare_steps_with(
    gpu: &Gpu,
    cpu: &mut Piso,
    on_gpu: &mut Piso,
    steps: usize,
    (p, p_final): (SolverControls, SolverControls),
    cpu_p: PreconditionerKind,
    device_p: DevicePressureSolver,
) -> f64 {
    let pressure = DevicePressureSolver {
        controls: p,
        ..device_p
    };
    let p_alike = cpu_p == PreconditionerKind::Jacobi && pressure.jacobi;
    let mut device = DevicePiso::new(gpu, on_gpu, pressure, p_final).unwrap();
    step_both(
        cpu,
        on_gpu,
        &mut device,
        steps,
        (p, p_final),
        cpu_p,
        p_alike,
    )
}

/// `steps` steps of `cpu` (p by PCG with `cpu_p`) and of `device` (the
/// device step of `on_gpu`), compared as [`compare_steps`] does (p's
/// iteration counts where `p_alike`); the largest relative difference.
fn step_both(
    cpu: &mut Piso,
    on_gpu: &mut Piso,
    device: &mut DevicePiso,
    steps: usize,
    (p, p_final): (SolverControls, SolverControls),
    cpu_p: PreconditionerKind,
    p_alike: bool,
) -> f64 {
    let solve: &mut PressureSolve<'_> = &mut |a, b, x, last| {
        let controls = if last { &p_final } else { &p };
        solve_pcg(a, cpu_p, b, x, controls, "p")
    };
    let mut worst = 0.0f64;
    for _ in 0..steps {
        let a = cpu.step(solve).unwrap();
        let b = device.step(on_gpu).unwrap();
        device.download_fields(on_gpu).unwrap();
        compare_reports(&a, &b, p_alike);
        let d = [
            relative(&components(&cpu.simple.u), &components(&on_gpu.simple.u)),
            relative(&cpu.simple.p, &on_gpu.simple.p),
            relative(&cpu.simple.phi, &on_gpu.simple.phi),
        ];
        println!(
            "step {}: relative differences U {:.2e} p {:.2e} phi {:.2e}; Courant max CPU {:e} \
             GPU {:e}; p iterations CPU {:?} GPU {:?}",
            a.step,
            d[0],
            d[1],
            d[2],
            a.courant.1,
            b.courant.1,
            a.p_solves.iter().map(|p| p.iterations).collect::<Vec<_>>(),
            b.p_solves.iter().map(|p| p.iterations).collect::<Vec<_>>()
        );
        assert!(
            d.iter().all(|&x| x <= FIELD_BOUND),
            "step {}: U {:e} p {:e} phi {:e}",
            a.step,
            d[0],
            d[1],
            d[2]
        );
        worst = worst.max(d.into_iter().fold(0.0, f64::max));
    }
    assert_eq!(cpu.time, on_gpu.time);
    println!("device time by part: {:?}", device.seconds());
    worst
}

/// icoFoam-like PISO on the tet box with `transient` changes.
fn tet_box_steps(adjust: impl Fn(&mut SimpleSettings, &mut TransientSettings)) -> f64 {
    let (mut cpu, mut on_gpu) = tet_box_cavities(adjust);
    let gpu = test_device().expect("checked by the caller");
    compare_steps(&gpu, &mut cpu, &mut on_gpu, 10, (tight(), tight()))
}

/// Two copies of the icoFoam-like PISO cavity on the tet box with
/// `transient` changes.
fn tet_box_cavities(
    adjust: impl Fn(&mut SimpleSettings, &mut TransientSettings),
) -> (Piso<'static>, Piso<'static>) {
    let mesh = load(TET_BOX).unwrap();
    let geometry = Geometry::compute(&mesh);
    let mut settings = SimpleSettings::new(0.01);
    settings.explicit_stress = false;
    settings.n_non_orth_correctors = 1;
    settings.momentum = bicgstab();
    let convection = TransientConvection {
        scheme: None,
        bounded: false,
    };
    let mut transient = TransientSettings::piso(2, convection, bicgstab());
    adjust(&mut settings, &mut transient);
    let dt = 0.02;
    // The mesh lives as long as the test process (two small tet boxes).
    let mesh: &'static Mesh = Box::leak(Box::new(mesh));
    let geometry: &'static Geometry = Box::leak(Box::new(geometry));
    (
        cavity(mesh, geometry, settings, transient, dt),
        cavity(mesh, geometry, settings, transient, dt),
    )
}

/// p by `PCG` with `DIC`, unchanged, on the device step: the GPU runs its
/// default, AMG-PCG (`case::SolveTarget::adapt`), set up on the device from
/// the resident pressure matrix and its values re-set-up after each
/// re-assembly; 10 PISO steps equal the CPU's DIC-PCG steps to the solvers'
/// tolerance (both to 1e-14; p iteration counts not compared: the
/// preconditioners differ).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn dic_pressure_runs_its_gpu_default_on_the_device_step_and_gives_the_cpu_steps() {
    let Some(gpu) = test_device() else {
        return;
    };
    let (mut cpu, mut on_gpu) = tet_box_cavities(|_, _| {});
    let device_p = common::dic_as_the_gpu_runs_it(tight());
    let amg = device_p.amg.expect("DIC runs AMG-PCG on the GPU");
    let worst = compare_steps_with(
        &gpu,
        &mut cpu,
        &mut on_gpu,
        10,
        (tight(), tight()),
        PreconditionerKind::Dic,
        device_p,
    );
    println!("PISO, p DIC on the CPU, {amg} on the GPU: worst {worst:e}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_piso_step_gives_the_cpu_steps_on_a_perturbed_tet_box() {
    if test_device().is_none() {
        return;
    }
    let worst = tet_box_steps(|_, _| {});
    println!("PISO, Euler, Gauss linear: worst {worst:e}");
}

/// p by AMG-PCG on the device step (the GPU AMG V-cycle, set up on the
/// resident pressure matrix at the first solve): with 2 PISO correctors and
/// a non-orthogonal corrector (4 pressure solves per outer corrector) its
/// values are re-set-up once per outer corrector, since only the first
/// corrector's re-assembly changes the matrix (the later correctors and the
/// non-orthogonal correctors change the right-hand side alone; Issa 1986);
/// and 5 steps equal the CPU's Jacobi-PCG steps to the solvers' tolerance
/// (p iteration counts not compared: the preconditioners differ).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn amg_pressure_is_re_set_up_once_per_outer_corrector_on_the_device_step() {
    let Some(gpu) = test_device() else {
        return;
    };
    let steps = 5;
    for outer in [1, 2] {
        let (mut cpu, mut on_gpu) = tet_box_cavities(|_, t| t.n_outer_correctors = outer);
        let amg = gpu_amg_settings(&AmgSettings {
            coarsest_rows: 40,
            ..AmgSettings::default()
        });
        let pressure = DevicePressureSolver {
            jacobi: false,
            controls: tight(),
            amg: Some(amg),
            polynomial: None,
        };
        let mut device = DevicePiso::new(&gpu, &mut on_gpu, pressure, tight()).unwrap();
        let controls = (tight(), tight());
        let jacobi = PreconditionerKind::Jacobi;
        let worst = step_both(
            &mut cpu,
            &mut on_gpu,
            &mut device,
            steps,
            controls,
            jacobi,
            false,
        );
        let updates = device.preconditioner_updates();
        println!(
            "{outer} outer corrector(s), p AMG-PCG on the GPU: {updates} value re-set-ups in \
             {steps} steps, worst {worst:e}"
        );
        // The first outer corrector of the first step sets the hierarchy up.
        assert_eq!(updates, steps * outer - 1, "{outer} outer corrector(s)");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_pimple_step_with_backward_stress_and_relaxation_gives_the_cpu_steps() {
    if test_device().is_none() {
        return;
    }
    let variants = [
        (Some(Convection::LinearUpwind), false),
        (Some(Convection::LimitedLinear(1.0)), true),
        (Some(Convection::Upwind), true),
        (None, true),
    ];
    for (scheme, bounded) in variants {
        let worst = tet_box_steps(|s, t| {
            s.explicit_stress = true;
            t.ddt = DdtScheme::Backward;
            t.convection = TransientConvection { scheme, bounded };
            t.n_outer_correctors = 2;
            t.relaxation_u = 0.8;
            t.relaxation_p = 0.7;
            // UFinal: GMRES, so the final outer corrector's solver is used.
            t.momentum_final = MomentumSolver {
                krylov: Some(KrylovMethod::Gmres(Default::default())),
                ..bicgstab()
            };
        });
        println!("PIMPLE, backward, {scheme:?} bounded {bounded}: worst {worst:e}");
    }
}

/// A scratch copy of `cases/cavity_ico` named by `tag`, 10 steps written at
/// the end with 17 digits, p and U solved as both sides run them (PCG and
/// PBiCGStab with the diagonal preconditioner, 1e-11, relTol 0).
fn cavity_case(tag: &str, application: &str, algorithm: &str) -> PathBuf {
    let dir = common::case_inputs_copy("cases/cavity_ico", tag);
    let control = dir.join("system/controlDict");
    let text = std::fs::read_to_string(&control).unwrap();
    let text: Vec<String> = text
        .lines()
        .map(|line| match line.split_whitespace().next() {
            Some("application") => format!("application {application};"),
            Some("endTime") => "endTime 0.05;".into(),
            Some("writeInterval") => "writeInterval 10;".into(),
            Some("writePrecision") => "writePrecision 17;".into(),
            _ => line.to_string(),
        })
        .collect();
    std::fs::write(&control, text.join("\n")).unwrap();
    let solvers = "FoamFile { version 2.0; format ascii; class dictionary; object fvSolution; }\n\
         solvers\n{\n    p { solver PCG; preconditioner diagonal; tolerance 1e-11; relTol 0; }\n    \
         pFinal { $p; }\n    \
         \"(U|UFinal)\" { solver PBiCGStab; preconditioner diagonal; tolerance 1e-11; relTol 0; }\n}\n";
    std::fs::write(
        dir.join("system/fvSolution"),
        format!("{solvers}{algorithm}\n"),
    )
    .unwrap();
    dir
}

/// The cavity as a laminar pimpleFoam case: 2 outer correctors, relaxed.
fn pimple_cavity(tag: &str) -> PathBuf {
    let dir = cavity_case(
        tag,
        "pimpleFoam",
        "PIMPLE\n{\n    nOuterCorrectors 2;\n    nCorrectors 2;\n    nNonOrthogonalCorrectors 0;\n    \
         pRefCell 0;\n    pRefValue 0;\n}\n\
         relaxationFactors\n{\n    equations { U 0.9; UFinal 1; }\n    fields { p 0.7; pFinal 1; }\n}\n",
    );
    common::make_pimple_foam(&dir, "laminar");
    dir
}

fn ico_cavity(tag: &str) -> PathBuf {
    cavity_case(
        tag,
        "icoFoam",
        "PISO\n{\n    nCorrectors 2;\n    nNonOrthogonalCorrectors 0;\n    pRefCell 0;\n    \
         pRefValue 0;\n}\n",
    )
}

/// The case in `dir` stepped 10 times on the CPU and the device (step by
/// step), then run whole by `run_transient_case` on each.
fn case_on_both(dir: &Path) {
    let gpu = test_device().expect("checked by the caller");
    let case = read_transient_case(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert!(case.warnings.is_empty(), "{:?}", case.warnings);
    let setup = &case.setup;
    let geometry = case.mesh.geometry().unwrap();
    let mut cpu = transient_state(setup, &case.mesh, &geometry).unwrap();
    let mut on_gpu = transient_state(setup, &case.mesh, &geometry).unwrap();
    let controls = (
        setup.pressure_solver.controls,
        setup.pressure_final.controls,
    );
    let worst = compare_steps(&gpu, &mut cpu, &mut on_gpu, 10, controls);
    println!("{}: stepped, worst {worst:e}", dir.display());

    let host = run_transient_case(setup, &case.mesh, Device::Cpu).unwrap();
    let device = run_transient_case(setup, &case.mesh, Device::Gpu(&gpu)).unwrap();
    assert!(!host.device_step);
    assert!(
        device.device_step,
        "the GPU run did not take the device step"
    );
    assert_eq!((host.steps, device.steps), (10, 10));
    let d = [
        relative(&components(&host.u), &components(&device.u)),
        relative(&host.p, &device.p),
        relative(&host.phi, &device.phi),
    ];
    println!(
        "{}: run, relative differences {d:?}; p iterations CPU {} GPU {}; GPU {}",
        dir.display(),
        host.p_iterations,
        device.p_iterations,
        device.timing
    );
    assert!(d.iter().all(|&x| x <= FIELD_BOUND), "{d:?}");
    // ±1 per pressure solve: 10 steps, outer × 2 correctors.
    let solves = 10 * setup.transient.n_outer_correctors * setup.transient.n_correctors;
    assert!(host.p_iterations.abs_diff(device.p_iterations) <= solves);
    // The fields written at the end are the device's, downloaded.
    let written = common::flow_fields(&dir.join("0.05"), device.p.len());
    assert_eq!(written.1.len(), device.p.len());
    assert!(relative(&device.p, &written.1) <= 1e-15);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn cavity_tutorial_on_the_device_gives_the_cpu_steps() {
    if test_device().is_none() {
        return;
    }
    case_on_both(&ico_cavity("ico"));
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pimple_foam_cavity_on_the_device_gives_the_cpu_steps() {
    if test_device().is_none() {
        return;
    }
    case_on_both(&pimple_cavity("pimple"));
}

/// A smoothSolver U keeps the step on the host (pressure solves on the GPU):
/// the run says so and still gives the CPU's result.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn smooth_solver_momentum_keeps_the_step_on_the_host() {
    let Some(gpu) = test_device() else {
        return;
    };
    let dir = ico_cavity("smooth");
    let path = dir.join("system/fvSolution");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "solver PBiCGStab; preconditioner diagonal;",
        "solver smoothSolver; smoother symGaussSeidel;",
    );
    std::fs::write(&path, text).unwrap();
    let case = read_transient_case(&dir).unwrap();
    let summary = run_transient_case(&case.setup, &case.mesh, Device::Gpu(&gpu)).unwrap();
    assert!(!summary.device_step);
    assert_eq!(summary.steps, 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// pimpleFoam's `adjustTimeStep yes` on the device: Δt from the device's
/// Courant number (its max is exact for equal fluxes; the fluxes agree to
/// round-off), the same steps and fields as the CPU.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn adjusted_time_steps_on_the_device_give_the_cpu_run() {
    let Some(gpu) = test_device() else {
        return;
    };
    let dir = pimple_cavity("adjust");
    let control = dir.join("system/controlDict");
    let text: Vec<String> = std::fs::read_to_string(&control)
        .unwrap()
        .lines()
        .map(|line| match line.split_whitespace().next() {
            Some("writeControl") => "writeControl adjustableRunTime;".into(),
            Some("writeInterval") => "writeInterval 0.025;".into(),
            _ => line.to_string(),
        })
        .collect();
    let text = text.join("\n") + "\nadjustTimeStep yes;\nmaxCo 0.5;\nmaxDeltaT 0.004;\n";
    std::fs::write(&control, text).unwrap();
    let case = read_transient_case(&dir).unwrap();
    assert!(case.setup.adjust_time_step.is_some());
    let host = run_transient_case(&case.setup, &case.mesh, Device::Cpu).unwrap();
    let device = run_transient_case(&case.setup, &case.mesh, Device::Gpu(&gpu)).unwrap();
    assert!(device.device_step);
    assert_eq!(host.steps, device.steps);
    assert!(host.steps > 10, "{} steps: Δt was not adjusted", host.steps);
    // Δt follows the Courant number of fields equal to round-off.
    assert!(
        (host.time - device.time).abs() <= 1e-12,
        "{} {}",
        host.time,
        device.time
    );
    let d = [
        relative(&components(&host.u), &components(&device.u)),
        relative(&host.p, &device.p),
        relative(&host.phi, &device.phi),
    ];
    println!(
        "adjustTimeStep, {} steps: relative differences {d:?}",
        host.steps
    );
    assert!(d.iter().all(|&x| x <= FIELD_BOUND), "{d:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dir`'s controlDict with the lines of `edits` (first word, whole line).
fn edit_control(dir: &Path, edits: &[(&str, &str)]) {
    let control = dir.join("system/controlDict");
    let text: Vec<String> = std::fs::read_to_string(&control)
        .unwrap()
        .lines()
        .map(|line| {
            let key = line.split_whitespace().next();
            match edits.iter().find(|(k, _)| Some(*k) == key) {
                Some((k, v)) => format!("{k} {v};"),
                None => line.to_string(),
            }
        })
        .collect();
    std::fs::write(&control, text.join("\n")).unwrap();
}

/// A backward run restarted halfway on the device reads the older level it
/// wrote (`U_0`, `phi_0`) and continues the uninterrupted device run's
/// second-order steps; both stay within [`FIELD_BOUND`] of the CPU's run.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_backward_restart_on_the_device_continues_the_device_run() {
    let Some(gpu) = test_device() else {
        return;
    };
    let run = |dir: &Path, device: Device| {
        let case = read_transient_case(dir).unwrap();
        assert!(case.warnings.is_empty(), "{:?}", case.warnings);
        run_transient_case(&case.setup, &case.mesh, device).unwrap()
    };
    let whole = ico_cavity("backward_whole");
    common::backward_time_steps(&whole);
    edit_control(&whole, &[("endTime", "0.1")]);
    let reference = run(&whole, Device::Gpu(&gpu));
    let host = run(&whole, Device::Cpu);
    assert!(reference.device_step);
    assert_eq!((reference.steps, host.steps), (20, 20));

    let halves = ico_cavity("backward_halves");
    common::backward_time_steps(&halves);
    assert_eq!(run(&halves, Device::Gpu(&gpu)).steps, 10);
    for file in ["U_0", "phi_0", "uniform/time"] {
        assert!(halves.join("0.05").join(file).is_file(), "0.05/{file}");
    }
    edit_control(&halves, &[("endTime", "0.1"), ("startFrom", "latestTime")]);
    let restarted = run(&halves, Device::Gpu(&gpu));
    assert!(restarted.device_step);
    assert_eq!(restarted.steps, 10);
    let against = |other: &fvpoisson::case::ico_foam::TransientSummary| {
        [
            relative(&components(&restarted.u), &components(&other.u)),
            relative(&restarted.p, &other.p),
            relative(&restarted.phi, &other.phi),
        ]
    };
    let (d_device, d_host) = (against(&reference), against(&host));
    println!("backward restart on the device: against the device run {d_device:?}, the CPU run {d_host:?}");
    assert!(d_device.iter().all(|&x| x < 1e-12), "{d_device:?}");
    assert!(d_host.iter().all(|&x| x <= FIELD_BOUND), "{d_host:?}");
    for dir in [&whole, &halves] {
        let _ = std::fs::remove_dir_all(dir);
    }
}
