//! Subdomain deflation on the GPU against its CPU reference
//! (`solve::deflation`), with none, Jacobi and the truncated Neumann
//! preconditioners inside (their applications: `tests/gpu_neumann.rs`): AZ
//! and E = ZᵀAZ, the projections, and whole deflated PCG
//! solves, on random matrices and real meshes. Each test prints its measured
//! differences and `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use std::path::Path;

use nalgebra::DMatrix;

use fvpoisson::case::initial_matrix;
use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::deflation::{
    coarse_inverse_on_device, deflated_pcg_device, solve_pcg_deflated_gpu, DeviceDeflation,
    DEFLATED_PCG_PRECONDITIONERS,
};
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::neumann::DeviceNeumann;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuSolveOptions, GpuVector, LaunchMode};
use fvpoisson::gpu::test_device;
use fvpoisson::solve::deflation::{
    coarse_inverse, solve_pcg_deflated, CpuDeflation, DeflationOps, Subdomains,
};
use fvpoisson::solve::neumann::NeumannSettings;
use fvpoisson::solve::reduce::{dot, sum_abs};
use fvpoisson::solve::{Executor, Preconditioner, SolverControls};
use fvpoisson::sparse::testing::max_rel_diff;
use fvpoisson::sparse::testing::random_symmetric;
use fvpoisson::sparse::{Csr, ModSell};

/// Random matrices and real FVM systems (mesh files relative to the
/// repository root, the working directory of `cargo test` and of the device
/// runs), with the subdomains to deflate them by: stripes, and METIS (the
/// matrix renumbered subdomain by subdomain).
fn systems() -> Vec<(String, Csr, Subdomains)> {
    let mut out = Vec::new();
    let mut add = |name: &str, a: Csr| {
        let n = a.n_rows();
        let k = 2 * (n as f64).sqrt().ceil() as usize;
        out.push((
            format!("{name} stripes"),
            a.clone(),
            Subdomains::stripes(n, k).unwrap(),
        ));
        let (order, metis) = Subdomains::metis(&a, k).unwrap();
        out.push((format!("{name} METIS"), order.apply_symmetric(&a), metis));
    };
    add("random 3000", random_symmetric(3000, 8, 17));
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "meshes/foam/polydual",
        "meshes/gmsh/prism_wedge.v22.msh",
    ] {
        add(spec, poisson_system(spec).unwrap().0);
    }
    for case in ["cases/bubbly_stripes_2d", "cases/bubble_tet_3d"] {
        add(case, initial_matrix(Path::new(case)).unwrap());
    }
    out
}

fn device_matrix(gpu: &fvpoisson::gpu::Gpu, a: &Csr) -> DeviceModSell {
    DeviceModSell::upload(gpu, &ModSell::from_csr(a, 256).unwrap()).unwrap()
}

fn test_vector(n: usize, seed: u64) -> Vec<f64> {
    fvpoisson::fvm::testing::random_field(n, seed)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn coarse_matrix_and_projections_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    for (name, a, subdomains) in systems() {
        let n = a.n_rows();
        let cpu = CpuDeflation::new(&a, subdomains.clone()).unwrap();
        let matrix = device_matrix(&gpu, &a);
        let dev = DeviceDeflation::new(&gpu, &matrix, &subdomains).unwrap();
        // AZ row by row (the device lists a row's subdomains by first appearance).
        let az = dev.download_deflated_columns().unwrap();
        let mut az_diff = 0.0f64;
        for (i, mut row) in az.into_iter().enumerate() {
            row.sort_by_key(|e| e.0);
            let (cols, vals) = cpu.deflated_columns().row(i);
            assert_eq!(
                row.iter().map(|e| e.0).collect::<Vec<_>>(),
                cols,
                "{name}: subdomains of AZ row {i}"
            );
            // Relative to the row's largest matrix entry: an AZ entry that
            // cancels to ~1e-17 (an interior row's own subdomain) differs by
            // the summation order alone (the device adds the diagonal first).
            let scale = a.row(i).1.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
            for (e, v) in row.iter().zip(vals) {
                az_diff = az_diff.max((e.1 - v).abs() / scale);
            }
        }
        let e_dev = dev.download_coarse_matrix().unwrap();
        let e_diff = (e_dev - cpu.coarse_matrix()).amax() / cpu.coarse_matrix().amax();
        // E⁻¹ formed on the device (blocked Cholesky, Wᵀ W) against the
        // host's nalgebra Cholesky inverse: equal to rounding, relative to
        // the largest entry (these E have condition numbers up to ~1e4).
        let inverse = dev.download_coarse_inverse().unwrap();
        let inverse_diff = (&inverse - cpu.coarse_inverse()).amax() / cpu.coarse_inverse().amax();
        assert!(
            (&inverse - inverse.transpose()).amax() == 0.0,
            "{name}: E⁻¹ not symmetric"
        );
        // P v and the prolongation x + s Z a.
        let v = test_vector(n, 5);
        let mut v_cpu = v.clone();
        cpu.project(&mut v_cpu);
        let mut v_dev = GpuVector::from(gpu.upload(&v).unwrap());
        dev.project(&mut v_dev);
        let p_diff = max_rel_diff(&gpu.download(v_dev.dev().unwrap()).unwrap(), &v_cpu);
        let x = test_vector(n, 6);
        let mut x_cpu = x.clone();
        cpu.prolong_add(-0.7, &mut x_cpu);
        let mut x_dev = GpuVector::from(gpu.upload(&x).unwrap());
        dev.prolong_add(-0.7, &mut x_dev);
        let x_diff = max_rel_diff(&gpu.download(x_dev.dev().unwrap()).unwrap(), &x_cpu);
        // The reductions deflated PCG takes from its executor, on the
        // projected vector. Relative to |v| |x| (Cauchy–Schwarz): v · x
        // cancels after the projection, so its own relative difference can
        // be ~1e-9.
        let executor =
            GpuCgBackend::new(&gpu, &a, false, None, &GpuSolveOptions::default()).unwrap();
        let norms = (dot(&v_cpu, &v_cpu) * dot(&x_cpu, &x_cpu)).sqrt();
        let dot_diff = (executor.dot(&v_dev, &x_dev) - dot(&v_cpu, &x_cpu)).abs() / norms;
        let abs_diff = (executor.sum_abs(&v_dev) / sum_abs(&v_cpu) - 1.0).abs();
        executor.device_status().unwrap();
        dev.device_status().unwrap();
        println!(
            "{name}: k {}, AZ {az_diff:.1e}, E {e_diff:.1e}, E⁻¹ {inverse_diff:.1e}, P v \
             {p_diff:.1e}, prolong {x_diff:.1e}, dot {dot_diff:.1e}, sum|v| {abs_diff:.1e}",
            subdomains.count()
        );
        // What E⁻¹ enters differs from the host's by E⁻¹'s rounding, up to
        // 1000 ε κ(E) (κ(E) reaches 5.6e6 on the bubbly stripes).
        let after_inverse = inverse_tolerance(cpu.coarse_matrix()).max(1e-10);
        for (what, d, tolerance) in [
            ("AZ", az_diff, 1e-10),
            ("E", e_diff, 1e-10),
            ("E⁻¹", inverse_diff, after_inverse),
            ("P v", p_diff, after_inverse),
            ("prolongation", x_diff, after_inverse),
            ("dot", dot_diff, after_inverse),
            ("sum |v|", abs_diff, after_inverse),
        ] {
            assert!(
                d < tolerance,
                "{name} {what}: {d} (tolerance {tolerance:.1e})"
            );
        }
        // The projection only launches kernels: it can be captured.
        if !gpu.syncs_each_launch() {
            gpu.capture(|| {
                dev.project(&mut v_dev);
                dev.device_status()
                    .map_err(|e| fvpoisson::gpu::GpuError::Invalid(e.to_string()))
            })
            .unwrap_or_else(|e| panic!("{name}: capture failed: {e}"));
        }
    }
}

/// A random SPD k × k matrix (B Bᵀ + k I, B uniform in [-1, 1)), row-major.
fn random_spd(k: usize, seed: u64) -> DMatrix<f64> {
    let b = DMatrix::from_row_slice(k, k, &test_vector(k * k, seed));
    &b * b.transpose() + DMatrix::identity(k, k) * k as f64
}

/// The tolerance of two Cholesky inverses of the SPD `e` computed in
/// different orders, relative to the largest entry: 1000 ε κ(e) (the
/// forward error of a backward-stable inverse is a small multiple of ε κ,
/// growing with the size at worst as k ε κ), at least 1e-12. A wrong tile
/// or pivot gives O(1).
fn inverse_tolerance(e: &DMatrix<f64>) -> f64 {
    let eigen = e.clone().symmetric_eigen().eigenvalues;
    let kappa = eigen.max() / eigen.min();
    (1000.0 * f64::EPSILON * kappa).max(1e-12)
}

/// E⁻¹ on the device ([`coarse_inverse_on_device`], `gpu::amg`'s blocked
/// Cholesky) equals the host's `coarse_inverse` to 1000 ε κ(E) of its
/// largest entry ([`inverse_tolerance`]) on random SPD matrices of sizes
/// around the 32-column panels (one panel, a partial one, many) and on E of
/// a mesh matrix deflated by k = 512 stripes (the bench's size), and an
/// indefinite matrix fails with the pivot named, as the host fails.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn coarse_inverse_on_the_device_matches_the_host() {
    // A mesh matrix in RCM order, 512 stripes (as `bench --preconditioners`).
    let a = poisson_system("box:24x24x24").unwrap().0;
    let order = fvpoisson::sparse::ordering::reverse_cuthill_mckee(&a);
    let a = order.apply_symmetric(&a);
    let stripes = Subdomains::stripes(a.n_rows(), 512).unwrap();
    let cpu = CpuDeflation::new(&a, stripes.clone()).unwrap();
    let tolerance = inverse_tolerance(cpu.coarse_matrix());
    println!("box 24^3, 512 stripes: E tolerance {tolerance:.1e}");
    let Some(gpu) = test_device() else { return };
    let row_major = |m: &DMatrix<f64>| -> Vec<f64> { m.transpose().as_slice().to_vec() };
    for k in [1, 5, 32, 33, 77, 200, 512] {
        let e = random_spd(k, k as u64);
        let host = coarse_inverse(&e).unwrap();
        let dev = coarse_inverse_on_device(&gpu, k, &gpu.upload(&row_major(&e)).unwrap()).unwrap();
        let dev = DMatrix::from_row_slice(k, k, &gpu.download(&dev).unwrap());
        let (diff, bound) = ((&dev - &host).amax() / host.amax(), inverse_tolerance(&e));
        println!("random SPD {k} x {k}: E⁻¹ max rel diff {diff:.2e} (tolerance {bound:.1e})");
        assert!(diff < bound, "random SPD {k}: {diff}");
    }
    let dev = DeviceDeflation::new(&gpu, &device_matrix(&gpu, &a), &stripes).unwrap();
    let inverse = dev.download_coarse_inverse().unwrap();
    let diff = (&inverse - cpu.coarse_inverse()).amax() / cpu.coarse_inverse().amax();
    println!("box 24^3, 512 stripes: E⁻¹ max rel diff {diff:.2e} (tolerance {tolerance:.1e})");
    assert!(diff < tolerance, "mesh E⁻¹: {diff}");
    // Indefinite: row 40's diagonal negative; the host's Cholesky fails too.
    let mut e = random_spd(77, 3);
    e[(40, 40)] = -e[(40, 40)];
    assert!(coarse_inverse(&e).is_err());
    let err = match coarse_inverse_on_device(&gpu, 77, &gpu.upload(&row_major(&e)).unwrap()) {
        Ok(_) => panic!("an indefinite E is accepted"),
        Err(e) => e.to_string(),
    };
    println!("indefinite E: {err}");
    assert!(
        err.contains("not positive definite") && err.contains("pivot 41"),
        "{err}"
    );
}

/// The set-up phases of `DeviceDeflation::new_timed` are kept and name the
/// device E⁻¹; an untimed set-up keeps none; the projection's byte count is
/// the documented formula.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn timed_deflation_set_up_reports_its_phases() {
    let Some(gpu) = test_device() else { return };
    let a = poisson_system("box:12x12x12").unwrap().0;
    let (n, k) = (a.n_rows(), 20);
    let stripes = Subdomains::stripes(n, k).unwrap();
    let matrix = device_matrix(&gpu, &a);
    let timed = DeviceDeflation::new_timed(&gpu, &matrix, &stripes).unwrap();
    let names: Vec<&str> = timed
        .setup_phases()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    println!("phases: {names:?}");
    assert!(names.iter().any(|p| p.starts_with("E⁻¹")), "{names:?}");
    assert!(timed.setup_phases().iter().all(|p| p.ms >= 0.0));
    assert!(DeviceDeflation::new(&gpu, &matrix, &stripes)
        .unwrap()
        .setup_phases()
        .is_empty());
    let w = timed.width();
    let bytes = timed.projection_bytes();
    assert_eq!(
        bytes.total(),
        8 * n + 8 * k * k + 12 * n * w + 16 * n + 20 * n
    );
}

/// 30 iterations exactly (tolerance 0): the iterates and the Lanczos
/// estimates agree to round-off; then whole solves to 1e-6 converge in about
/// the same number of iterations (round-off changes CG's path on these
/// ill-conditioned systems, so the solutions only agree to the accuracy the
/// tolerance gives).
/// The fixed-step comparison's iterations.
const FIXED_STEPS: usize = 10;

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn deflated_iterates_and_solves_match_the_cpu() {
    let Some(gpu) = test_device() else { return };
    // Few enough steps that no system reaches rounding level first (a
    // Neu1-deflated solve with cond 2.5 breaks down at step 25 with
    // p · Ap = −3e-17 on either executor).
    let fixed = SolverControls::absolute(0.0, FIXED_STEPS);
    let converge = SolverControls::absolute(1e-6, 5000);
    let options = GpuSolveOptions::default();
    for (name, a, subdomains) in systems() {
        let n = a.n_rows();
        let b = test_vector(n, 9);
        // Deflated: the device's E⁻¹ differs from the host's by its rounding
        // (`inverse_tolerance`), which the iterates carry.
        let e = CpuDeflation::new(&a, subdomains.clone()).unwrap();
        let deflated_tolerance = inverse_tolerance(e.coarse_matrix()).max(1e-9);
        for kind in &DEFLATED_PCG_PRECONDITIONERS {
            for deflation in [None, Some(&subdomains)] {
                let label = if deflation.is_some() {
                    "deflated"
                } else {
                    "plain"
                };
                let solve_both = |controls: &SolverControls| {
                    let mut x_cpu = vec![0.0; n];
                    let cpu =
                        solve_pcg_deflated(&a, kind, deflation, &b, &mut x_cpu, controls).unwrap();
                    let mut x_gpu = vec![0.0; n];
                    let dev = solve_pcg_deflated_gpu(
                        &gpu, &a, kind, deflation, &b, &mut x_gpu, controls, &options,
                    )
                    .unwrap();
                    (cpu, dev, max_rel_diff(&x_gpu, &x_cpu))
                };
                let ((cpu, cpu_spectrum), (dev, dev_spectrum), diff) = solve_both(&fixed);
                assert_eq!(
                    (cpu.iterations, dev.iterations),
                    (FIXED_STEPS, FIXED_STEPS),
                    "{name} {kind} {label}"
                );
                let (c_cpu, c_dev) = (
                    cpu_spectrum.unwrap().condition(),
                    dev_spectrum.unwrap().condition(),
                );
                let history = max_rel_diff(&dev.history, &cpu.history);
                let ((cpu_full, _), (dev_full, _), full_diff) = solve_both(&converge);
                println!(
                    "{name} {kind} {label}: {FIXED_STEPS} iterations: x {diff:.1e}, residuals \
                     {history:.1e}, cond cpu {c_cpu:.6e} gpu {c_dev:.6e}; to 1e-6: iterations \
                     cpu {} gpu {}, x {full_diff:.1e}",
                    cpu_full.iterations, dev_full.iterations
                );
                // Few steps, before CG reaches rounding level: the executors
                // agree to 1e-12 (H100; after 30 steps on the random matrix
                // plain CG had converged and its iterates drifted to 1e-7).
                let tolerance = match deflation {
                    Some(_) => deflated_tolerance,
                    None => 1e-9,
                };
                assert!(diff < tolerance, "{name} {kind} {label}: x {diff}");
                assert!(
                    history < tolerance,
                    "{name} {kind} {label}: residuals {history}"
                );
                assert!(
                    (c_dev / c_cpu - 1.0).abs() < 1e-6,
                    "{name} {kind} {label}: cond"
                );
                // Both converge, or neither (unpreconditioned CG on the
                // density-contrast bubble needs more than the 5000 steps).
                assert_eq!(
                    cpu_full.converged, dev_full.converged,
                    "{name} {kind} {label}"
                );
                assert!(
                    cpu_full.iterations.abs_diff(dev_full.iterations)
                        <= 3 + cpu_full.iterations / 10,
                    "{name} {kind} {label}: {} vs {} iterations",
                    cpu_full.iterations,
                    dev_full.iterations
                );
            }
        }
    }
}

/// Σ |b − A x|.
fn residual_sum(a: &Csr, b: &[f64], x: &[f64]) -> f64 {
    let mut ax = vec![0.0; b.len()];
    a.spmv(x, &mut ax);
    b.iter().zip(&ax).map(|(b, ax)| (b - ax).abs()).sum()
}

/// Deflated PCG in the fused device loop (projection, coarse solve and
/// prolongation inside each iteration, residuals read back every
/// `check_interval` iterations) on a tetrahedral mesh and on the
/// density-ratio-1000 bubble, METIS and stripe subdomains, Jacobi and Neu1:
/// within one iteration of the CPU's deflated PCG, the true residual of the
/// solution at the tolerance, every launch mode the same bits, and the loop
/// captured into one CUDA graph (a host-driven loop captures none).
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn deflated_device_loop_matches_the_cpu_in_every_launch_mode() {
    let Some(gpu) = test_device() else { return };
    let tolerance = 1e-9;
    let controls = SolverControls::absolute(tolerance, 5000);
    let options = GpuSolveOptions {
        check_interval: 7,
        ..Default::default()
    };
    let wanted = [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "cases/bubble_tet_3d",
    ];
    let systems = systems()
        .into_iter()
        .filter(|(name, _, _)| wanted.iter().any(|w| name.starts_with(w)));
    let mut count = 0;
    for (name, a, subdomains) in systems {
        let n = a.n_rows();
        let b = test_vector(n, 11);
        let zeros = vec![0.0; n];
        let neu1 = Preconditioner::Registered(NeumannSettings::NEU1.into());
        for kind in [
            Preconditioner::Kind(fvpoisson::solve::PreconditionerKind::Jacobi),
            neu1,
        ] {
            count += 1;
            let mut x_cpu = zeros.clone();
            let (cpu, _) =
                solve_pcg_deflated(&a, &kind, Some(&subdomains), &b, &mut x_cpu, &controls)
                    .unwrap();
            assert!(cpu.converged, "{name} {kind}: CPU");
            let jacobi = kind != neu1;
            let mut backend = GpuCgBackend::new(&gpu, &a, jacobi, None, &options).unwrap();
            if kind == neu1 {
                let neumann =
                    DeviceNeumann::new(&gpu, &a, backend.shared_matrix(), &NeumannSettings::NEU1)
                        .unwrap();
                backend.set_preconditioner(Box::new(neumann));
            }
            let ops = DeviceDeflation::new(&gpu, backend.matrix(), &subdomains).unwrap();
            let b_dev = backend.upload(&b).unwrap();
            let mut x_dev = backend.upload(&zeros).unwrap();
            let mut runs = Vec::new();
            // Graph twice: the second solve replays the first one's graph.
            for mode in [
                LaunchMode::Separate,
                LaunchMode::Folded,
                LaunchMode::Graph,
                LaunchMode::Graph,
            ] {
                backend.set_launch_mode(mode);
                backend.write(&mut x_dev, &zeros).unwrap();
                let (perf, spectrum) =
                    deflated_pcg_device(&backend, &ops, &b_dev, &mut x_dev, &controls).unwrap();
                assert!(spectrum.is_some(), "{name} {kind} {mode:?}: no spectrum");
                runs.push((mode, perf, backend.download(&x_dev).unwrap()));
            }
            let (_, dev, x_gpu) = &runs[0];
            // The normalised true residual, with the CPU's normFactor (both
            // start from the same corrected guess).
            let norm_factor = residual_sum(&a, &b, &x_cpu) / cpu.final_residual;
            let true_gpu = residual_sum(&a, &b, x_gpu) / norm_factor;
            println!(
                "{name} {kind}: k {}, iterations cpu {} gpu {}, final residual cpu {:.3e} gpu \
                 {:.3e}, true {true_gpu:.3e}, x {:.1e}; graphs {}",
                subdomains.count(),
                cpu.iterations,
                dev.iterations,
                cpu.final_residual,
                dev.final_residual,
                max_rel_diff(x_gpu, &x_cpu),
                backend.graph_captures()
            );
            assert!(dev.converged, "{name} {kind}: GPU did not converge");
            assert!(
                dev.iterations.abs_diff(cpu.iterations) <= 1,
                "{name} {kind}: {} GPU iterations, {} CPU",
                dev.iterations,
                cpu.iterations
            );
            assert!(
                true_gpu < 2.0 * tolerance,
                "{name} {kind}: true residual {true_gpu:.3e}"
            );
            for (mode, perf, x) in &runs[1..] {
                assert_eq!(perf, dev, "{name} {kind}: {mode:?}");
                let same = x.iter().zip(x_gpu).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{name} {kind}: {mode:?} x differs from separate launches"
                );
            }
            assert_eq!(
                backend.launch_mode(),
                LaunchMode::Graph,
                "capture fell back"
            );
            // One graph per chunk length (`chunk_length`), each captured once.
            assert!(
                (1..=3).contains(&backend.graph_captures()),
                "{name} {kind}: {} graphs",
                backend.graph_captures()
            );
        }
    }
    assert_eq!(count, 8, "systems missing");
}
