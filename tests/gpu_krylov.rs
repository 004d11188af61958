//! GMRES(m) and PBiCGStab on the GPU (`gpu::krylov`) against the CPU
//! reference backend (`solve::krylov::CpuKrylovBackend`) on the nonsymmetric
//! convection–diffusion systems of `fvm::testing`: each fused step on the same
//! random vectors (to ~1e-13), then whole solves (iterations equal ±1, the
//! same solution to the solver tolerance). Prints `skipped: no CUDA device`
//! without a GPU (unless FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::{convection_diffusion_system, convection_diffusion_systems};
use fvpoisson::gpu::krylov::{DeviceDiagonal, GpuKrylovBackend};
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{GpuSolveOptions, GpuSolver, GpuVector};
use fvpoisson::gpu::test_device;
use fvpoisson::solve::precond::Jacobi;
use fvpoisson::solve::{
    solve_krylov, CpuKrylovBackend, Executor, GmresSettings, KrylovBackend, KrylovMethod,
    Orthogonalization, PreconditionerKind, PreconditioningSide, SolverControls,
};
use fvpoisson::sparse::testing::random_vector;
use fvpoisson::sparse::RowOrdering;

/// The CPU tests' systems and a larger one (hundreds of thread blocks per
/// reduction, many mod-SELL slices).
fn systems() -> Vec<(String, fvpoisson::sparse::Csr, Vec<f64>, Vec<f64>)> {
    let mut all = convection_diffusion_systems();
    all.push(convection_diffusion_system(
        "box:40x40x40:perturb=0.1",
        0.002,
    ));
    all
}

fn close(what: &str, gpu: f64, cpu: f64) {
    let tol = 1e-12 * cpu.abs().max(1e-300);
    assert!((gpu - cpu).abs() <= tol, "{what}: GPU {gpu:e} CPU {cpu:e}");
}

fn close_vec(what: &str, gpu: &[f64], cpu: &[f64]) {
    let scale = cpu.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= 1e-13 * scale,
            "{what}[{i}]: GPU {g:e} CPU {c:e}"
        );
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn every_fused_step_matches_the_cpu() {
    let Some(gpu) = test_device() else { return };
    for (name, a, _, b) in systems() {
        let n = a.n_rows();
        let jacobi = Jacobi::new(&a).unwrap();
        let cpu = CpuKrylovBackend::new(&a, &jacobi);
        let dev = GpuKrylovBackend::new(
            &gpu,
            &a,
            Box::new(DeviceDiagonal::jacobi(&gpu, &a).unwrap()),
            GpuSolveOptions::default().slice_height,
        )
        .unwrap();
        let vs: Vec<Vec<f64>> = (0..40).map(|k| random_vector(n, 100 + k)).collect();
        let up = |v: &Vec<f64>| dev.upload(v).unwrap();
        let down = |v: &GpuVector| dev.download(v).unwrap();
        let gv: Vec<_> = vs.iter().map(up).collect();
        let (bc, bg) = (b.clone(), up(&b));
        let (mut rc, mut rg) = (cpu.new_vector(), dev.new_vector());

        let (ni_c, ni_g) = (
            cpu.initialize(&bc, &vs[0], &mut rc),
            dev.initialize(&bg, &gv[0], &mut rg),
        );
        close("Σ|r|", ni_g.residual_sum, ni_c.residual_sum);
        close("normFactor", ni_g.norm_factor, ni_c.norm_factor);
        close_vec("r", &down(&rg), &rc);
        let (c, g) = (
            cpu.residual(&bc, &vs[1], &mut rc),
            dev.residual(&bg, &gv[1], &mut rg),
        );
        close("residual Σ|r|", g.0, c.0);
        close("residual r·r", g.1, c.1);
        cpu.precondition(&vs[2], &mut rc);
        dev.precondition(&gv[2], &mut rg);
        close_vec("M⁻¹ v", &down(&rg), &rc);
        for w in [None, Some(3)] {
            let c = cpu.apply_operator(&vs[2], &mut rc, w.map(|k| &vs[k]));
            let g = dev.apply_operator(&gv[2], &mut rg, w.map(|k| &gv[k]));
            close("A v · w", g.0, c.0);
            close("A v · A v", g.1, c.1);
            close_vec("A v", &down(&rg), &rc);
        }
        close("dot", dev.dot(&gv[4], &gv[5]), cpu.dot(&vs[4], &vs[5]));
        // 40 vectors: two batches of the block kernels.
        let refs_c: Vec<&Vec<f64>> = vs[..37].iter().collect();
        let refs_g: Vec<_> = gv[..37].iter().collect();
        let (dc, dg) = (
            cpu.multi_dot(&refs_c, &vs[39]),
            dev.multi_dot(&refs_g, &gv[39]),
        );
        for (k, (g, c)) in dg.iter().zip(&dc).enumerate() {
            close(&format!("multi_dot {k}"), *g, *c);
        }
        let coeffs: Vec<f64> = (0..37).map(|k| 0.01 * k as f64 - 0.1).collect();
        let (mut yc, mut yg) = (vs[38].clone(), up(&vs[38]));
        close(
            "multi_axpy y·y",
            dev.multi_axpy(&coeffs, &refs_g, &mut yg),
            cpu.multi_axpy(&coeffs, &refs_c, &mut yc),
        );
        close_vec("multi_axpy", &down(&yg), &yc);
        for w in [None, Some(6)] {
            let c = cpu.axpy_dot(-0.3, &vs[7], &mut yc, w.map(|k| &vs[k]));
            let g = dev.axpy_dot(-0.3, &gv[7], &mut yg, w.map(|k| &gv[k]));
            close("axpy_dot", g, c);
        }
        close_vec("axpy", &down(&yg), &yc);
        cpu.scale(0.7, &vs[8], &mut yc);
        dev.scale(0.7, &gv[8], &mut yg);
        close_vec("scale", &down(&yg), &yc);
        for beta in [0.0, 0.4] {
            let (mut pc, mut pg) = (vs[9].clone(), up(&vs[9]));
            cpu.bicg_direction(beta, 0.2, &vs[10], &vs[11], &mut pc);
            dev.bicg_direction(beta, 0.2, &gv[10], &gv[11], &mut pg);
            close_vec("BiCGStab direction", &down(&pg), &pc);
        }
        close(
            "BiCGStab s",
            dev.bicg_half(0.3, &gv[12], &gv[13], &mut yg),
            cpu.bicg_half(0.3, &vs[12], &vs[13], &mut yc),
        );
        close_vec("s", &down(&yg), &yc);
        let (mut xc, mut xg) = (vs[14].clone(), up(&vs[14]));
        let c = cpu.bicg_update(
            0.3, 0.6, &vs[15], &vs[16], &vs[17], &vs[18], &vs[19], &mut xc, &mut rc,
        );
        let g = dev.bicg_update(
            0.3, 0.6, &gv[15], &gv[16], &gv[17], &gv[18], &gv[19], &mut xg, &mut rg,
        );
        close("update Σ|r|", g.0, c.0);
        close("update r0·r", g.1, c.1);
        close_vec("update x", &down(&xg), &xc);
        close_vec("update r", &down(&rg), &rc);
        dev.device_status().unwrap();
        println!("{name}: n = {n}, every step agrees");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_gmres_and_bicgstab_converge_like_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-10, 3000);
    let gmres = |orthogonalization, side, flexible| {
        KrylovMethod::Gmres(GmresSettings {
            restart: 20,
            orthogonalization,
            side,
            flexible,
        })
    };
    let methods = [
        gmres(Orthogonalization::Mgs, PreconditioningSide::Right, false),
        gmres(Orthogonalization::Cgs2, PreconditioningSide::Right, false),
        gmres(Orthogonalization::Mgs, PreconditioningSide::Left, false),
        gmres(Orthogonalization::Cgs2, PreconditioningSide::Right, true),
        KrylovMethod::BiCgStab,
    ];
    let mut solver = GpuSolver::new(&gpu);
    for (name, a, x_true, b) in systems() {
        for ordering in [RowOrdering::Natural, RowOrdering::Rcm] {
            let options = GpuSolveOptions {
                ordering,
                ..Default::default()
            };
            for method in &methods {
                for kind in [PreconditionerKind::Jacobi, PreconditionerKind::None] {
                    let mut x_cpu = vec![0.0; a.n_rows()];
                    let cpu =
                        solve_krylov(&a, method, kind, &b, &mut x_cpu, &controls, "u").unwrap();
                    let mut x_gpu = vec![0.0; a.n_rows()];
                    let dev = solver
                        .solve_krylov(
                            method,
                            kind,
                            DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options).named("u"),
                        )
                        .unwrap_or_else(|e| panic!("{name} {method} {kind}: {e}"));
                    let err = x_gpu
                        .iter()
                        .zip(&x_true)
                        .fold(0.0f64, |m, (g, t)| m.max((g - t).abs()));
                    println!(
                        "{name} {ordering} {method} {kind}: CPU {} GPU {} iterations, GPU error {err:e}",
                        cpu.iterations, dev.iterations
                    );
                    assert!(dev.converged, "{name} {method} {kind}: {dev:?}");
                    assert!(
                        cpu.iterations.abs_diff(dev.iterations) <= 1,
                        "{name} {ordering} {method} {kind}: CPU {} GPU {}",
                        cpu.iterations,
                        dev.iterations
                    );
                    assert!(err < 1e-6, "{name} {method} {kind}: error {err:e}");
                    close_vec(
                        "initial residual",
                        &[dev.initial_residual],
                        &[cpu.initial_residual],
                    );
                }
            }
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_errors_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let (_, a, _, b) = systems().swap_remove(0);
    let mut x = vec![0.0; a.n_rows()];
    let err = GpuSolver::new(&gpu)
        .solve_krylov(
            &KrylovMethod::BiCgStab,
            PreconditionerKind::Dic,
            DeviceSolve::new(
                &a,
                &b,
                &mut x,
                &SolverControls::default(),
                &GpuSolveOptions::default(),
            )
            .named("u"),
        )
        .unwrap_err();
    assert!(err.to_string().contains("jacobi or none"), "{err}");
    let bad = KrylovMethod::Gmres(GmresSettings {
        restart: 0,
        ..Default::default()
    });
    let err = GpuSolver::new(&gpu)
        .solve_krylov(
            &bad,
            PreconditionerKind::Jacobi,
            DeviceSolve::new(
                &a,
                &b,
                &mut x,
                &SolverControls::default(),
                &GpuSolveOptions::default(),
            )
            .named("u"),
        )
        .unwrap_err();
    assert!(err.to_string().contains("between 1 and"), "{err}");
}
