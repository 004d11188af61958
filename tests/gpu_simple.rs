//! The SIMPLE loop on the device (`gpu::simple::DeviceSimple`) against the CPU
//! `Simple` on the same state, with the momentum predictor on the host
//! (smoothSolver: the pressure half alone on the device) and on the device
//! (PBiCGStab): the same iterates (U, p, φ) to the solvers' round-off on a 2-D
//! cavity and a perturbed tetrahedral 3-D box (non-orthogonal correctors), and
//! the same converged cavity, which passes the Ghia validation. The same with
//! the pressure solved by AMG-PCG on the device (the hierarchy set up on the
//! resident matrix, its values re-set-up after each re-assembly) against the
//! CPU's AMG-PCG, V- and K-cycle, f64 and mixed precision; the loop's
//! hierarchy against the CPU's set up on the first pressure matrix and
//! updated with each later one; GAMG settings of case.toml and fvSolution
//! reaching the device loop. Skips without
//! a CUDA device (`FVPOISSON_REQUIRE_GPU=1` makes that a failure).

mod common;

use fvpoisson::flow::simple::{PressureSolve, Simple};
use fvpoisson::flow::testing::{
    cavity_conditions, lid_driven_cavity, simple_from_rest, Conditions,
};
use fvpoisson::flow::{Convection, ResidualControl, SimpleSettings, VelocityCondition};
use fvpoisson::gpu::amg::gpu_amg_settings;
use fvpoisson::gpu::simple::{DevicePressureSolver, DeviceSimple};
use fvpoisson::gpu::test_device;
use fvpoisson::mesh::{source::load, Geometry, Mesh, Vec3};
use fvpoisson::solve::amg::{AmgSettings, CycleKind, Precision};
use fvpoisson::solve::{
    solve_pcg, KrylovMethod, Preconditioner, PreconditionerKind, SolverControls,
};

/// Tight enough that CPU and GPU PCG agree to ~1e-13 relative.
fn tight() -> SolverControls {
    SolverControls {
        tolerance: 1e-14,
        rel_tol: 0.0,
        max_iter: 5000,
        min_iter: 0,
    }
}

/// max |a − b| / max |a|.
fn relative(a: &[f64], b: &[f64]) -> f64 {
    let scale = a.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

fn velocity_components(u: &[Vec3]) -> Vec<f64> {
    u.iter().flat_map(|v| [v.x, v.y, v.z]).collect()
}

/// The largest relative differences of U, p and φ between two states.
fn field_differences(cpu: &Simple<'_>, on_gpu: &Simple<'_>) -> [f64; 3] {
    [
        relative(
            &velocity_components(&cpu.u),
            &velocity_components(&on_gpu.u),
        ),
        relative(&cpu.p, &on_gpu.p),
        relative(&cpu.phi, &on_gpu.phi),
    ]
}

/// `iterations` outer iterations on the CPU (Jacobi-PCG) and with the
/// device pressure half, both from rest; the largest relative differences
/// of U, p, φ after each iteration.
fn compare(spec: &str, iterations: usize, adjust: impl Fn(&mut SimpleSettings)) -> Vec<[f64; 3]> {
    compare_with(spec, iterations, adjust, None)
}

/// The AMG of the GPU with a small coarsest level (several levels on the
/// test meshes, so that the value re-set-up has Galerkin products to redo).
fn test_amg(cycle: CycleKind, precision: Precision) -> AmgSettings {
    gpu_amg_settings(&AmgSettings {
        cycle,
        precision,
        coarsest_rows: 20,
        ..AmgSettings::default()
    })
}

/// [`compare`] with p solved by PCG with `amg` (`None`: Jacobi) on both.
fn compare_with(
    spec: &str,
    iterations: usize,
    adjust: impl Fn(&mut SimpleSettings),
    amg: Option<AmgSettings>,
) -> Vec<[f64; 3]> {
    compare_on(spec, iterations, adjust, amg, cavity_conditions)
}

/// [`compare_with`] with the conditions `conditions` of the mesh instead of
/// the cavity's.
fn compare_on(
    spec: &str,
    iterations: usize,
    adjust: impl Fn(&mut SimpleSettings),
    amg: Option<AmgSettings>,
    conditions: impl Fn(&Mesh) -> Conditions,
) -> Vec<[f64; 3]> {
    let gpu = test_device().expect("checked by the caller");
    let mesh = load(spec).unwrap();
    let geometry = Geometry::compute(&mesh);
    let mut settings = SimpleSettings::new(0.01);
    settings.momentum.controls.tolerance = 1e-12;
    settings.momentum.controls.rel_tol = 0.0;
    adjust(&mut settings);
    let mut cpu = simple_from_rest(&mesh, &geometry, settings, conditions(&mesh));
    let mut on_gpu = simple_from_rest(&mesh, &geometry, settings, conditions(&mesh));
    let solver = DevicePressureSolver {
        jacobi: amg.is_none(),
        controls: tight(),
        amg,
        polynomial: None,
    };
    let mut device = DeviceSimple::new(&gpu, &mut on_gpu, solver).unwrap();
    assert_eq!(
        device.has_device_momentum(),
        DeviceSimple::momentum_on_device(&on_gpu).is_ok()
    );
    let cpu_preconditioner = match amg {
        Some(s) => Preconditioner::Amg(s),
        None => PreconditionerKind::Jacobi.into(),
    };
    let solve: &mut PressureSolve<'_> =
        &mut |a, b, x, _| solve_pcg(a, cpu_preconditioner, b, x, &tight(), "p");
    let mut out = Vec::new();
    for _ in 0..iterations {
        let a = cpu.iterate(solve).unwrap();
        let b = device.iterate(&mut on_gpu).unwrap();
        device.download_fields(&mut on_gpu).unwrap();
        for ((name, x), (_, y)) in a.u_initial.iter().zip(&b.u_initial) {
            println!("{name} initial residual CPU {x:.6e} GPU {y:.6e}");
        }
        assert_eq!(a.iteration, b.iteration);
        assert_eq!(a.p_solves.len(), b.p_solves.len());
        let d = field_differences(&cpu, &on_gpu);
        println!(
            "{spec} iteration {}: relative differences U {:.2e} p {:.2e} phi {:.2e}; \
             p initial residual CPU {:.6e} GPU {:.6e}; continuity local CPU {:.6e} GPU {:.6e}",
            a.iteration,
            d[0],
            d[1],
            d[2],
            a.p_initial,
            b.p_initial,
            a.continuity[0],
            b.continuity[0]
        );
        assert!(
            (a.p_initial - b.p_initial).abs() <= 1e-9 * a.p_initial.abs().max(1e-300),
            "initial p residuals differ: CPU {} GPU {}",
            a.p_initial,
            b.p_initial
        );
        out.push(d);
    }
    let phases = device.phase_seconds();
    println!("device phases: {phases:?}");
    // AMG: set up once, its values re-set-up in the later iterations.
    assert_eq!(phases.preconditioner_setup > 0.0, amg.is_some());
    assert_eq!(
        phases.preconditioner_update > 0.0,
        amg.is_some() && iterations > 1
    );
    out
}

/// PBiCGStab (Jacobi) for the momentum equations, converged tightly, without
/// the explicit laminar stress (which keeps the momentum predictor on the host).
fn krylov_momentum(s: &mut SimpleSettings) {
    s.explicit_stress = false;
    s.momentum.krylov = Some(KrylovMethod::BiCgStab);
    s.momentum.preconditioner = PreconditionerKind::Jacobi.into();
    s.momentum.controls.tolerance = 1e-13;
    s.momentum.controls.rel_tol = 0.0;
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_pressure_half_gives_the_cpu_iterates_on_a_2d_cavity() {
    if test_device().is_none() {
        return;
    }
    let d = compare("box:24x24x1:2d", 4, |s| {
        s.consistent = true;
        s.relaxation_u = 0.9;
        s.relaxation_p = 1.0;
    });
    assert!(
        d[0].iter().all(|&x| x < 1e-11),
        "first iteration: {:?}",
        d[0]
    );
    assert!(d.iter().flatten().all(|&x| x < 1e-9), "{d:?}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_pressure_half_gives_the_cpu_iterates_on_a_perturbed_tet_box() {
    if test_device().is_none() {
        return;
    }
    let d = compare("box:6x6x6:tet:perturb=0.2", 3, |s| {
        s.n_non_orth_correctors = 2;
        s.relaxation_p = 0.3;
        s.convection = Convection::LimitedLinear(1.0);
    });
    assert!(
        d[0].iter().all(|&x| x < 1e-11),
        "first iteration: {:?}",
        d[0]
    );
    assert!(d.iter().flatten().all(|&x| x < 1e-9), "{d:?}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_momentum_gives_the_cpu_iterates_on_a_2d_cavity() {
    if test_device().is_none() {
        return;
    }
    let d = compare("box:24x24x1:2d", 4, |s| {
        s.consistent = true;
        s.relaxation_u = 0.9;
        s.relaxation_p = 1.0;
        krylov_momentum(s);
    });
    assert!(d.iter().flatten().all(|&x| x < 1e-9), "{d:?}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_momentum_gives_the_cpu_iterates_on_a_perturbed_tet_box() {
    if test_device().is_none() {
        return;
    }
    for convection in [
        Convection::Upwind,
        Convection::LinearUpwind,
        Convection::LimitedLinear(1.0),
    ] {
        let d = compare("box:6x6x6:tet:perturb=0.2", 3, |s| {
            s.n_non_orth_correctors = 2;
            s.relaxation_p = 0.3;
            s.convection = convection;
            krylov_momentum(s);
        });
        assert!(
            d.iter().flatten().all(|&x| x < 1e-9),
            "{convection:?}: {d:?}"
        );
    }
}

/// The device's velocity components share one momentum matrix and keep
/// their own diagonals: with a symmetry plane (U_z fixed at `zmax`, U_x and
/// U_y zero-gradient there) the components' diagonals differ, and the device
/// loop still gives the CPU's iterates.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_momentum_with_a_symmetry_plane_gives_the_cpu_iterates() {
    if test_device().is_none() {
        return;
    }
    let with_symmetry = |mesh: &Mesh| {
        let (mut velocity, pressure) = cavity_conditions(mesh);
        for (v, patch) in velocity.iter_mut().zip(mesh.patches()) {
            if patch.name == "zmax" {
                *v = VelocityCondition::Symmetry;
            }
        }
        (velocity, pressure)
    };
    let d = compare_on(
        "box:8x8x8",
        3,
        |s| {
            s.relaxation_p = 0.3;
            krylov_momentum(s);
        },
        None,
        with_symmetry,
    );
    assert!(d.iter().flatten().all(|&x| x < 1e-9), "{d:?}");
}

/// simpleFoam's explicit laminar stress runs on the device
/// (`simple_stress_faces`, `simple_stress_rows`): the device loop with it
/// gives the CPU's iterates on the tet box, with the momentum on the device;
/// SIMPLEC on a non-orthogonal mesh keeps the predictor on the host.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_loop_with_the_explicit_stress_gives_the_cpu_iterates_on_a_perturbed_tet_box() {
    if test_device().is_none() {
        return;
    }
    for consistent in [false, true] {
        let d = compare("box:6x6x6:tet:perturb=0.2", 3, |s| {
            krylov_momentum(s);
            s.explicit_stress = true;
            s.consistent = consistent;
            s.relaxation_u = 0.9;
            s.n_non_orth_correctors = 1;
        });
        assert!(
            d.iter().flatten().all(|&x| x < 1e-9),
            "consistent {consistent}: {d:?}"
        );
    }
    let mesh = load("box:6x6x6:tet:perturb=0.2").unwrap();
    let geometry = Geometry::compute(&mesh);
    for (stress, consistent, on_device) in [(true, false, true), (false, true, false)] {
        let mut settings = SimpleSettings::new(0.01);
        krylov_momentum(&mut settings);
        settings.explicit_stress = stress;
        settings.consistent = consistent;
        settings.relaxation_u = 0.9;
        let simple = lid_driven_cavity(&mesh, &geometry, settings);
        assert_eq!(
            DeviceSimple::momentum_on_device(&simple).is_ok(),
            on_device,
            "stress {stress}, SIMPLEC {consistent}"
        );
    }
}

/// The shipped simpleFoam cavity (SIMPLEC, linearUpwind, the explicit
/// stress) with U by Jacobi-PBiCGStab and p by Jacobi-PCG: on the GPU the
/// momentum predictor runs on the device, stress included, and 20
/// iterations give the CPU's fields.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn simple_foam_cavity_with_the_stress_runs_its_predictor_on_the_device() {
    use fvpoisson::case::flow_case::run_flow_case_with_mesh;
    use fvpoisson::case::simple_foam::read_simple_foam_case;
    use fvpoisson::case::Device;
    let Some(gpu) = test_device() else {
        return;
    };
    let mut written = Vec::new();
    for device in [Device::Cpu, Device::Gpu(&gpu)] {
        let tag = if matches!(device, Device::Cpu) {
            "cpu"
        } else {
            "gpu"
        };
        let dir = common::case_inputs_copy("cases/cavity_foam", &format!("gpu-stress-{tag}"));
        let solution = dir.join("system/fvSolution");
        let text = std::fs::read_to_string(&solution)
            .unwrap()
            .replace(
                "preconditioner  DIC;\n        tolerance       1e-10;\n        relTol          0.01;",
                "preconditioner  diagonal;\n        tolerance       1e-12;\n        relTol          0;",
            )
            .replace(
                "solver          smoothSolver;\n        smoother        symGaussSeidel;\n        \
                 tolerance       1e-9;\n        relTol          0.1;",
                "solver          PBiCGStab;\n        preconditioner  diagonal;\n        \
                 tolerance       1e-12;\n        relTol          0;",
            );
        assert!(
            text.contains("PBiCGStab") && text.contains("diagonal;\n        tolerance       1e-12"),
            "the cavity's fvSolution changed: {text}"
        );
        std::fs::write(&solution, text).unwrap();
        let control = dir.join("system/controlDict");
        let text: Vec<String> = std::fs::read_to_string(&control)
            .unwrap()
            .lines()
            .map(|line| match line.split_whitespace().next() {
                Some("endTime") => "endTime 20;".into(),
                Some("writeInterval") => "writeInterval 20;".into(),
                Some("writePrecision") => "writePrecision 17;".into(),
                _ => line.to_string(),
            })
            .collect();
        std::fs::write(&control, text.join("\n")).unwrap();
        let case = read_simple_foam_case(&dir).unwrap();
        assert!(case.setup.settings.explicit_stress);
        let summary =
            run_flow_case_with_mesh(&case.setup, &case.mesh, device, std::time::Instant::now())
                .unwrap();
        assert_eq!(summary.iterations, 20);
        if let Some(phases) = summary.device_phases {
            // The predictor ran on the device.
            assert!(
                phases.momentum_solve > 0.0 && phases.upload == 0.0,
                "{phases:?}"
            );
        }
        written.push(common::flow_fields(&dir.join("20"), case.mesh.n_cells()));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let du = relative(
        &velocity_components(&written[0].0),
        &velocity_components(&written[1].0),
    );
    let dp = relative(&written[0].1, &written[1].1);
    println!("simpleFoam cavity, 20 iterations: U {du:e} p {dp:e}");
    assert!(du < 1e-9 && dp < 1e-9, "U {du:e} p {dp:e}");
}

/// Run to convergence, CPU and device (momentum on the device): the
/// converged fields agree to the solver tolerance, and the device run passes
/// Ghia et al.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_cavity_converges_to_the_cpu_cavity_and_passes_ghia() {
    converged_cavity(None);
}

/// [`device_cavity_converges_to_the_cpu_cavity_and_passes_ghia`] with p
/// solved by AMG-PCG (K-cycle) on the device and on the CPU.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_gamg_cavity_converges_to_the_cpu_cavity_and_passes_ghia() {
    converged_cavity(Some(test_amg(CycleKind::K, Precision::Double)));
}

/// The converged 32² cavity, CPU and device, p solved by PCG with `amg`
/// (`None`: Jacobi).
fn converged_cavity(amg: Option<AmgSettings>) {
    use fvpoisson::flow::reference::max_deviation;
    use fvpoisson::flow::validation::{compare as ghia, FlowCase};
    let Some(gpu) = test_device() else {
        return;
    };
    // 197 outer iterations on the CPU (about 1 s).
    let n = 32;
    let mesh = load(&format!("box:{n}x{n}x1:2d")).unwrap();
    let geometry = Geometry::compute(&mesh);
    let mut settings = SimpleSettings::new(0.01);
    settings.momentum.controls.tolerance = 1e-9;
    settings.consistent = true;
    settings.relaxation_u = 0.9;
    settings.relaxation_p = 1.0;
    settings.residual_control = ResidualControl { u: 1e-9, p: 1e-9 };
    settings.momentum.krylov = Some(KrylovMethod::BiCgStab);
    settings.momentum.preconditioner = PreconditionerKind::Jacobi.into();
    settings.momentum.controls.rel_tol = 0.0;
    settings.explicit_stress = false;
    let controls = SolverControls {
        tolerance: 1e-11,
        rel_tol: 0.0,
        ..SolverControls::default()
    };
    let mut cpu = lid_driven_cavity(&mesh, &geometry, settings);
    let cpu_preconditioner = match amg {
        Some(s) => Preconditioner::Amg(s),
        None => PreconditionerKind::Jacobi.into(),
    };
    let solve: &mut PressureSolve<'_> =
        &mut |a, b, x, _| solve_pcg(a, cpu_preconditioner, b, x, &controls, "p");
    let start = std::time::Instant::now();
    let cpu_reports = cpu.run(1000, solve, |_, _| Ok(())).unwrap();
    let cpu_seconds = start.elapsed().as_secs_f64();
    let mut on_gpu = lid_driven_cavity(&mesh, &geometry, settings);
    let solver = DevicePressureSolver {
        jacobi: amg.is_none(),
        controls,
        amg,
        polynomial: None,
    };
    let mut device = DeviceSimple::new(&gpu, &mut on_gpu, solver).unwrap();
    assert!(device.has_device_momentum());
    let start = std::time::Instant::now();
    let gpu_reports = device
        .run(&mut on_gpu, 1000, |_| false, |_, _| Ok(()))
        .unwrap();
    let gpu_seconds = start.elapsed().as_secs_f64();
    let du = relative(
        &velocity_components(&cpu.u),
        &velocity_components(&on_gpu.u),
    );
    let dp = relative(&cpu.p, &on_gpu.p);
    println!(
        "cavity {n}x{n}: iterations CPU {} GPU {}; relative differences U {du:.2e} p {dp:.2e}; \
         ms per iteration CPU {:.3} GPU {:.3}; host phases GPU run {:?}; device phases {:?}",
        cpu_reports.len(),
        gpu_reports.len(),
        1e3 * cpu_seconds / cpu_reports.len() as f64,
        1e3 * gpu_seconds / gpu_reports.len() as f64,
        on_gpu.phase_seconds(),
        device.phase_seconds()
    );
    assert!(cpu_reports.last().unwrap().converged);
    assert!(gpu_reports.last().unwrap().converged);
    assert!(
        cpu_reports.len().abs_diff(gpu_reports.len()) <= 2,
        "outer iterations CPU {} GPU {}",
        cpu_reports.len(),
        gpu_reports.len()
    );
    assert!(du < 1e-6 && dp < 1e-6, "U {du:e} p {dp:e}");
    let case = FlowCase::Cavity { reynolds: 100, n };
    let tables = ghia(case, &on_gpu).unwrap();
    let deviation = tables
        .iter()
        .map(|(_, rows)| max_deviation(rows))
        .fold(0.0, f64::max);
    println!(
        "Ghia deviation on the device path: {deviation:.3e} (tolerance {:.3e})",
        case.tolerance()
    );
    assert!(deviation <= case.tolerance());
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_gamg_pressure_gives_the_cpu_iterates_on_a_2d_cavity() {
    if test_device().is_none() {
        return;
    }
    for amg in [
        test_amg(CycleKind::V, Precision::Double),
        test_amg(CycleKind::K, Precision::Double),
        test_amg(CycleKind::K, Precision::Mixed),
    ] {
        let d = compare_with(
            "box:24x24x1:2d",
            4,
            |s| {
                s.consistent = true;
                s.relaxation_u = 0.9;
                s.relaxation_p = 1.0;
                krylov_momentum(s);
            },
            Some(amg),
        );
        assert!(d.iter().flatten().all(|&x| x < 1e-9), "{amg}: {d:?}");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_gamg_pressure_gives_the_cpu_iterates_on_a_perturbed_tet_box() {
    if test_device().is_none() {
        return;
    }
    // The host momentum predictor (smoothSolver) and the device one.
    for krylov in [false, true] {
        let d = compare_with(
            "box:6x6x6:tet:perturb=0.2",
            3,
            |s| {
                s.n_non_orth_correctors = 2;
                s.relaxation_p = 0.3;
                s.convection = Convection::LinearUpwind;
                if krylov {
                    krylov_momentum(s);
                }
            },
            Some(test_amg(CycleKind::V, Precision::Double)),
        );
        assert!(d.iter().flatten().all(|&x| x < 1e-9), "{d:?}");
    }
}

/// GAMG for p in a case.toml (`solver = "GAMG"` with an `amg` table, and
/// PCG with `preconditioner = "GAMG"`) and in an OpenFOAM fvSolution
/// (`solver GAMG;`): `run --device gpu` solves p by AMG-PCG in the device
/// loop (set up once, values re-set-up in the later iterations), in fewer
/// PCG iterations than the same run with Jacobi-PCG.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gamg_p_of_a_case_runs_as_amg_pcg_in_the_device_loop() {
    use fvpoisson::case::flow_case::{read_flow_case, run_flow_case};
    use fvpoisson::case::Device;
    let toml_case = |tag: &str, p: &str| {
        let dir = common::case_inputs_copy("cases/cavity", tag);
        let file = dir.join("case.toml");
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("box:129x129x1:2d", "box:48x48x1:2d")
            .replace(
                "[solver.p]\nsolver = \"PCG\"\npreconditioner = \"DIC\"\n",
                &format!("[solver.p]\n{p}\n"),
            );
        assert!(text.contains(p), "cases/cavity/case.toml changed");
        std::fs::write(&file, text).unwrap();
        dir
    };
    let foam_case = |tag: &str, p: &str| {
        let dir = common::case_inputs_copy("cases/cavity_foam", tag);
        let file = dir.join("system/fvSolution");
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("solver          PCG;\n        preconditioner  DIC;", p);
        assert!(
            text.contains(p),
            "cases/cavity_foam/system/fvSolution changed"
        );
        std::fs::write(&file, text).unwrap();
        dir
    };
    let cases = [
        (
            "toml_jacobi",
            // Jacobi explicitly: DIC runs its GPU default, a polynomial,
            // whose set-up the phases would count.
            toml_case(
                "toml_jacobi",
                "solver = \"PCG\"\npreconditioner = \"diagonal\"",
            ),
            false,
        ),
        (
            "toml_gamg",
            toml_case(
                "toml_gamg",
                "solver = \"GAMG\"\namg = { cycle = \"V\", coarsestRows = 50 }",
            ),
            true,
        ),
        (
            "toml_pcg_gamg",
            toml_case(
                "toml_pcg_gamg",
                "solver = \"PCG\"\npreconditioner = \"GAMG\"",
            ),
            true,
        ),
        (
            "foam_jacobi",
            foam_case(
                "foam_jacobi",
                "solver          PCG;\n        preconditioner  diagonal;",
            ),
            false,
        ),
        (
            "foam_gamg",
            foam_case(
                "foam_gamg",
                "solver          GAMG;\n        smoother        GaussSeidel;\n        \
                 nCellsInCoarsestLevel 10;",
            ),
            true,
        ),
    ];
    // The settings as read (on the CPU too): GAMG, or PCG with AMG.
    let setups: Vec<_> = cases
        .into_iter()
        .map(|(tag, dir, amg)| {
            let mut setup = read_flow_case(&dir).unwrap();
            let p = setup.pressure_solver;
            assert_eq!(
                p.gamg.is_some() || matches!(p.preconditioner, Preconditioner::Amg(_)),
                amg,
                "{tag}: {p:?}"
            );
            setup.max_iterations = 4;
            setup.output_dir = dir.join("out");
            (tag, dir, amg, setup)
        })
        .collect();
    let Some(gpu) = test_device() else {
        for (_, dir, ..) in setups {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        return;
    };
    let mut jacobi_iterations = 0;
    for (tag, dir, amg, setup) in setups {
        let summary = run_flow_case(&setup, Device::Gpu(&gpu)).unwrap();
        let phases = summary.device_phases.expect("the device loop ran");
        println!(
            "{tag}: {} outer iterations, {} p iterations, device phases {phases:?}",
            summary.iterations, summary.p_iterations
        );
        assert_eq!(summary.iterations, 4, "{tag}");
        assert_eq!(phases.preconditioner_setup > 0.0, amg, "{tag}");
        assert_eq!(phases.preconditioner_update > 0.0, amg, "{tag}");
        if amg {
            assert!(
                summary.p_iterations < jacobi_iterations,
                "{tag}: {} AMG-PCG iterations, Jacobi-PCG {jacobi_iterations}",
                summary.p_iterations
            );
        } else {
            jacobi_iterations = summary.p_iterations;
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The hierarchy inside the device loop follows the re-assembled matrix: set
/// up on the first iteration's pressure matrix, its values re-set-up after
/// each later re-assembly, it equals the CPU hierarchy set up on the first
/// matrix and updated with each later one (same aggregates, coarse matrices
/// to round-off), while the matrix itself changes from iteration to
/// iteration.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn device_gamg_hierarchy_follows_the_reassembled_pressure_matrix() {
    use fvpoisson::solve::amg::Hierarchy;
    let Some(gpu) = test_device() else {
        return;
    };
    let mesh = load("box:6x6x6:tet:perturb=0.2").unwrap();
    let geometry = Geometry::compute(&mesh);
    let mut settings = SimpleSettings::new(0.01);
    settings.relaxation_p = 0.3;
    krylov_momentum(&mut settings);
    let mut simple = lid_driven_cavity(&mesh, &geometry, settings);
    let amg = test_amg(CycleKind::V, Precision::Double);
    let solver = DevicePressureSolver {
        jacobi: false,
        controls: tight(),
        amg: Some(amg),
        polynomial: None,
    };
    let mut device = DeviceSimple::new(&gpu, &mut simple, solver).unwrap();
    assert!(device.pressure_amg().is_none());
    let mut cpu: Option<(Hierarchy, fvpoisson::sparse::Csr)> = None;
    for iteration in 1..=4 {
        device.iterate(&mut simple).unwrap();
        let a = device.pressure_matrix().unwrap();
        let on_gpu = device.pressure_amg().expect("set up by the first solve");
        match &mut cpu {
            None => cpu = Some((Hierarchy::setup(&a, &amg).unwrap(), a.clone())),
            Some((h, _)) => h.update_values(&a).unwrap(),
        }
        let (hierarchy, first) = cpu.as_ref().expect("set above");
        let changed = first
            .values()
            .iter()
            .zip(a.values())
            .filter(|(x, y)| x != y)
            .count();
        assert_eq!(
            on_gpu.matrix(0).unwrap(),
            a,
            "iteration {iteration}: fine level"
        );
        let rows: Vec<usize> = (0..hierarchy.n_levels())
            .map(|l| hierarchy.matrix(&a, l).n_rows())
            .collect();
        assert_eq!(on_gpu.level_rows(), rows, "iteration {iteration}: levels");
        assert!(rows.len() >= 2, "{rows:?}: no coarse level to test");
        let mut worst = 0.0f64;
        for (l, level) in hierarchy.levels.iter().enumerate() {
            assert_eq!(
                on_gpu.aggregate(l).unwrap(),
                level.aggregate,
                "iteration {iteration}: aggregates of level {l}"
            );
            let coarse = on_gpu.matrix(l + 1).unwrap();
            assert_eq!(coarse.row_ptr(), level.coarse.row_ptr());
            assert_eq!(coarse.cols(), level.coarse.cols());
            let scale = level
                .coarse
                .values()
                .iter()
                .fold(0.0f64, |m, v| m.max(v.abs()));
            let d = coarse
                .values()
                .iter()
                .zip(level.coarse.values())
                .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
                / scale;
            worst = worst.max(d);
        }
        println!(
            "iteration {iteration}: levels {rows:?}, {changed} of {} fine values changed since \
             the set-up, coarse levels vs the CPU's update {worst:.1e}",
            a.nnz()
        );
        assert!(worst <= 1e-14, "iteration {iteration}: {worst:e}");
        if iteration > 1 {
            assert!(
                changed > 0,
                "iteration {iteration}: the matrix did not change"
            );
        }
    }
}

/// p by `PCG` with `DIC`, unchanged, in the device loop: the GPU runs its
/// default, AMG-PCG (`case::SolveTarget::adapt`); and p by Chebyshev(4) in
/// mixed precision, the polynomial. Each is set up on the device from the
/// resident pressure matrix and its values re-set up after each
/// re-assembly; the iterates equal the CPU's DIC-PCG ones to the solvers'
/// tolerance (both converged to 1e-14) on the perturbed tet box, with the
/// pressure half and with the whole loop on the device.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn dic_pressure_runs_its_gpu_default_in_the_device_loop_and_gives_the_cpu_iterates() {
    use fvpoisson::solve::polynomial::{PolynomialKind, PolynomialSettings};
    let Some(gpu) = test_device() else {
        return;
    };
    let chebyshev = PolynomialSettings {
        precision: Precision::Mixed,
        ..PolynomialSettings::new(PolynomialKind::Chebyshev, 4)
    };
    let solvers = [
        common::dic_as_the_gpu_runs_it(tight()),
        DevicePressureSolver {
            jacobi: false,
            controls: tight(),
            amg: None,
            polynomial: Some(chebyshev),
        },
    ];
    let mesh = load("box:6x6x6:tet:perturb=0.2").unwrap();
    let geometry = Geometry::compute(&mesh);
    for solver in solvers {
        let what = match (&solver.amg, &solver.polynomial) {
            (Some(amg), _) => format!("{amg}"),
            (None, Some(p)) => format!("{p}"),
            (None, None) => unreachable!("a preconditioner above"),
        };
        for momentum_on_device in [false, true] {
            let mut settings = SimpleSettings::new(0.01);
            settings.momentum.controls.tolerance = 1e-12;
            settings.momentum.controls.rel_tol = 0.0;
            settings.n_non_orth_correctors = 2;
            settings.relaxation_p = 0.3;
            if momentum_on_device {
                krylov_momentum(&mut settings);
            }
            let mut cpu = lid_driven_cavity(&mesh, &geometry, settings);
            let mut on_gpu = lid_driven_cavity(&mesh, &geometry, settings);
            let mut device = DeviceSimple::new(&gpu, &mut on_gpu, solver).unwrap();
            assert_eq!(device.has_device_momentum(), momentum_on_device);
            assert!(device.pressure_polynomial().is_none() && device.pressure_amg().is_none());
            let solve: &mut PressureSolve<'_> =
                &mut |a, b, x, _| solve_pcg(a, PreconditionerKind::Dic, b, x, &tight(), "p");
            for _ in 0..3 {
                let a = cpu.iterate(solve).unwrap();
                let b = device.iterate(&mut on_gpu).unwrap();
                device.download_fields(&mut on_gpu).unwrap();
                assert_eq!(a.p_solves.len(), b.p_solves.len());
                assert!(b.p_solves.iter().all(|p| p.converged), "{:?}", b.p_solves);
                let d = field_differences(&cpu, &on_gpu);
                println!(
                    "{what}, momentum on the device {momentum_on_device}, iteration {}: U \
                     {:.2e} p {:.2e} phi {:.2e}; p iterations CPU DIC {:?} GPU {:?}",
                    a.iteration,
                    d[0],
                    d[1],
                    d[2],
                    a.p_solves.iter().map(|p| p.iterations).collect::<Vec<_>>(),
                    b.p_solves.iter().map(|p| p.iterations).collect::<Vec<_>>()
                );
                assert!(d.iter().all(|&x| x < 1e-9), "{what}: {d:?}");
            }
            match solver.polynomial {
                Some(polynomial) => {
                    let p = device
                        .pressure_polynomial()
                        .expect("set up by the first solve");
                    assert_eq!(p.settings(), &polynomial);
                }
                None => assert!(device.pressure_amg().is_some(), "set up by the first solve"),
            }
            let phases = device.phase_seconds();
            assert!(
                phases.preconditioner_setup > 0.0 && phases.preconditioner_update > 0.0,
                "{what}: {phases:?}"
            );
        }
    }
}
