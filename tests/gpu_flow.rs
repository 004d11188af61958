//! The SIMPLE cavity with the pressure equation solved on the GPU (fused
//! Jacobi-PCG on the host-assembled matrix, warm-started from the current p)
//! against the same run with the CPU's PCG: the converged fields agree to the
//! solver tolerance. Skips without a CUDA device (`FVPOISSON_REQUIRE_GPU=1`
//! makes that a failure).

mod common;

use fvpoisson::flow::validation::{run, FlowCase, FlowValidation, PressureDevice, PressureSolver};
use fvpoisson::flow::{ResidualControl, SimpleSettings};
use fvpoisson::gpu::test_device;
use fvpoisson::solve::SolverControls;

/// PCG to 1e-12 (absolute) for p.
fn pressure_controls() -> SolverControls {
    SolverControls {
        tolerance: 1e-12,
        rel_tol: 0.0,
        ..SolverControls::default()
    }
}

/// SIMPLEC, U relaxed by 0.9, p not, residual control 1e-9.
fn tight_simplec(s: &mut SimpleSettings) {
    s.consistent = true;
    s.relaxation_u = 0.9;
    s.relaxation_p = 1.0;
    s.residual_control = ResidualControl { u: 1e-9, p: 1e-9 };
}

/// max |U_a − U_b| and max |p_a − p_b|.
fn max_difference(a: &FlowValidation, b: &FlowValidation) -> (f64, f64) {
    let du =
        a.u.iter()
            .zip(&b.u)
            .map(|(x, y)| (x - y).norm())
            .fold(0.0, f64::max);
    let dp =
        a.p.iter()
            .zip(&b.p)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
    (du, dp)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_pressure_solve_gives_the_cpu_cavity() {
    let Some(gpu) = test_device() else {
        return;
    };
    let (controls, adjust) = (pressure_controls(), tight_simplec);
    let case = FlowCase::Cavity {
        reynolds: 100,
        n: 64,
    };
    let mut cpu = PressureSolver::new(PressureDevice::Cpu, controls);
    let on_cpu = run(case, 5000, adjust, &mut cpu, None).unwrap();
    let mut gpu_solver = PressureSolver::new(PressureDevice::Gpu(&gpu), controls);
    let on_gpu = run(case, 5000, adjust, &mut gpu_solver, None).unwrap();
    println!("CPU: {on_cpu}");
    println!("GPU: {on_gpu}");
    let (du, dp) = max_difference(&on_cpu, &on_gpu);
    println!(
        "max |U_cpu - U_gpu| = {du:.3e}, max |p_cpu - p_gpu| = {dp:.3e}; iterations CPU {} GPU {}; \
         ms per outer iteration CPU {:.3} (pressure {:.3}) GPU {:.3} (pressure {:.3})",
        on_cpu.reports.len(),
        on_gpu.reports.len(),
        1e3 * on_cpu.seconds_per_iteration,
        1e3 * on_cpu.pressure_seconds_per_iteration,
        1e3 * on_gpu.seconds_per_iteration,
        1e3 * on_gpu.pressure_seconds_per_iteration
    );
    assert!(on_cpu.passed() && on_gpu.passed());
    assert!(
        du < 1e-7 && dp < 1e-7,
        "CPU and GPU differ: U {du:e}, p {dp:e}"
    );
}

/// The shipped Poiseuille case with the momentum equations solved by
/// PBiCGStab (Jacobi) on the GPU (`Simple::set_momentum_solve`) against the
/// same run on the CPU: both pass the validation and take the same number of outer
/// iterations (±5).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_momentum_pbicgstab_gives_the_cpu_poiseuille_flow() {
    use fvpoisson::case::flow_case::{read_flow_case, run_flow_case};
    use fvpoisson::case::Device;
    use fvpoisson::solve::{KrylovMethod, PreconditionerKind};
    let Some(gpu) = test_device() else {
        return;
    };
    let dir = common::repo("cases/poiseuille");
    let mut setup = read_flow_case(&dir).unwrap();
    setup.settings.momentum.krylov = Some(KrylovMethod::BiCgStab);
    setup.settings.momentum.preconditioner = PreconditionerKind::Jacobi.into();
    let mut runs = Vec::new();
    for (tag, device) in [("cpu", Device::Cpu), ("gpu", Device::Gpu(&gpu))] {
        setup.output_dir = common::unique_temp_dir(&format!("fvpoisson_pbicg_{tag}"));
        let summary = run_flow_case(&setup, device).unwrap();
        let (table, passed) = summary.validation.clone().unwrap();
        println!("{tag}: {table}");
        assert!(passed, "{tag}: {table}");
        std::fs::remove_dir_all(&setup.output_dir).unwrap();
        runs.push(summary.iterations);
    }
    assert!(
        runs[0].abs_diff(runs[1]) <= 5,
        "outer iterations CPU/GPU {runs:?}"
    );
}

/// `validate-flow --gamg`: p by PCG with the AMG preconditioner, on the CPU
/// and on the GPU (the GPU's AMG-PCG on the host-assembled matrix): both pass
/// Ghia, reach the DIC-PCG run's converged
/// cavity, and the two runs agree to the solver tolerance. The CPU half runs
/// without a device too.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gamg_pressure_solve_gives_the_dic_cavity_on_the_cpu_and_the_gpu() {
    use fvpoisson::solve::amg::AmgSettings;
    let (controls, adjust) = (pressure_controls(), tight_simplec);
    let case = FlowCase::Cavity {
        reynolds: 100,
        n: 32,
    };
    let amg = AmgSettings {
        coarsest_rows: 50,
        ..AmgSettings::default()
    };
    let mut dic = PressureSolver::new(PressureDevice::Cpu, controls);
    let with_dic = run(case, 5000, adjust, &mut dic, None).unwrap();
    let mut cpu = PressureSolver::new(PressureDevice::Cpu, controls).with_amg(amg);
    let on_cpu = run(case, 5000, adjust, &mut cpu, None).unwrap();
    let (du, dp) = max_difference(&with_dic, &on_cpu);
    println!("CPU GAMG-PCG: {on_cpu}\nagainst DIC-PCG: U {du:.3e}, p {dp:.3e}");
    assert!(on_cpu.passed(), "{on_cpu}");
    assert!(du < 1e-7 && dp < 1e-7, "U {du:e}, p {dp:e}");
    let Some(gpu) = test_device() else {
        return;
    };
    let mut device = PressureSolver::new(PressureDevice::Gpu(&gpu), controls).with_amg(amg);
    let on_gpu = run(case, 5000, adjust, &mut device, None).unwrap();
    let (du, dp) = max_difference(&on_cpu, &on_gpu);
    println!(
        "GPU GAMG-PCG: {on_gpu}\nagainst the CPU: U {du:.3e}, p {dp:.3e}; ms per outer \
         iteration CPU {:.3} GPU {:.3}",
        1e3 * on_cpu.seconds_per_iteration,
        1e3 * on_gpu.seconds_per_iteration
    );
    assert!(on_gpu.passed(), "{on_gpu}");
    assert!(du < 1e-7 && dp < 1e-7, "U {du:e}, p {dp:e}");
}
