//! The SIMPLE cavity with the pressure equation solved on the GPU (fused
//! Jacobi-PCG, warm-started from the current p) against the same run with the
//! CPU's PCG: the converged fields agree to the solver tolerance. Skips
//! without a CUDA device (`FVPOISSON_REQUIRE_GPU=1` makes that a failure).

use fvpoisson::flow::validation::{run, FlowCase, PressureDevice, PressureSolver};
use fvpoisson::flow::{ResidualControl, SimpleSettings};
use fvpoisson::gpu::test_device;
use fvpoisson::solve::SolverControls;

#[test]
fn gpu_pressure_solve_gives_the_cpu_cavity() {
    let Some(gpu) = test_device() else {
        return;
    };
    let controls = SolverControls {
        tolerance: 1e-12,
        rel_tol: 0.0,
        ..SolverControls::default()
    };
    let adjust = |s: &mut SimpleSettings| {
        s.consistent = true;
        s.relaxation_u = 0.9;
        s.relaxation_p = 1.0;
        s.residual_control = ResidualControl { u: 1e-9, p: 1e-9 };
    };
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
    let du = on_cpu
        .u
        .iter()
        .zip(&on_gpu.u)
        .map(|(a, b)| (a - b).norm())
        .fold(0.0, f64::max);
    let dp = on_cpu
        .p
        .iter()
        .zip(&on_gpu.p)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
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
