//! The FSAI set-up on the GPU (`gpu::fsai_setup`) against the CPU reference
//! (`solve::fsai::fsai_setup`): the same pattern and, in f64, the same bits
//! (count of differing values expected 0, max relative difference ≤ 1e-12),
//! for adaptive patterns (both stop rules, step sizes 1 and 2, with and
//! without the postfilter) and static ones (power 1 and 2), on real meshes
//! and a random SPD matrix; Gᵀ is G's transpose; the f32 set-up matches the
//! CPU's f32 reference to 1e-6; a tiny work budget (many batches) gives the
//! same G; the set-up from the resident device matrix gives the host path's
//! G. Prints `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::fsai_setup::{fsai_setup_gpu, fsai_setup_gpu_budget, fsai_setup_gpu_resident};
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::fsai::{fsai_setup, AdaptivePattern, FsaiPattern, FsaiSettings, FsaiStop};
use fvpoisson::solve::{Precision, SolveError};
use fvpoisson::sparse::testing::random_symmetric;
use fvpoisson::sparse::{Csr, ModSell};

/// Real FVM systems (hex box, perturbed renumbered tets, a shipped polyhedral
/// mesh) and a random SPD matrix.
fn systems() -> Vec<(String, Csr)> {
    let mut all: Vec<(String, Csr)> = [
        "box:24x24x24",
        "box:20x20x20:tet:perturb=0.2:renumber",
        "meshes/foam/polydual",
    ]
    .into_iter()
    .map(|spec| {
        let (a, _) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        (spec.rsplit('/').next().unwrap().to_string(), a)
    })
    .collect();
    all.push(("random n = 5000".into(), random_symmetric(5000, 8, 11)));
    all
}

fn adaptive(steps: usize, step_size: usize, epsilon: f64, stop: FsaiStop) -> FsaiPattern {
    FsaiPattern::Adaptive(AdaptivePattern {
        steps,
        step_size,
        epsilon,
        stop,
    })
}

/// The f64 settings compared: adaptive (both stop rules, s = 1 and 2, with
/// and without the postfilter) and static (power 1 and 2).
fn double_settings() -> Vec<FsaiSettings> {
    let with = |pattern, postfilter| FsaiSettings {
        pattern,
        postfilter,
        precision: Precision::Double,
    };
    vec![
        with(FsaiPattern::ADAPTIVE, 0.0),
        with(adaptive(10, 1, 0.005, FsaiStop::Stagnation), 0.05),
        with(adaptive(8, 2, 0.01, FsaiStop::Stagnation), 0.02),
        with(adaptive(12, 1, 0.3, FsaiStop::Reduction), 0.0),
        with(adaptive(6, 2, 0.5, FsaiStop::Reduction), 0.05),
        with(FsaiPattern::STATIC, 0.0),
        with(
            FsaiPattern::Static {
                power: 2,
                prefilter: 0.0,
            },
            0.0,
        ),
        with(
            FsaiPattern::Static {
                power: 2,
                prefilter: 0.1,
            },
            0.05,
        ),
    ]
}

/// G (downloaded) against the CPU's: same pattern (asserted), then the count
/// of differing values and the max relative difference.
fn compare(what: &str, gpu: &Csr, cpu: &Csr) -> (usize, f64) {
    assert_eq!(gpu.row_ptr(), cpu.row_ptr(), "{what}: row lengths differ");
    assert_eq!(gpu.cols(), cpu.cols(), "{what}: columns differ");
    let mut differing = 0;
    let mut worst: f64 = 0.0;
    for (g, c) in gpu.values().iter().zip(cpu.values()) {
        if g != c {
            differing += 1;
            worst = worst.max((g - c).abs() / c.abs().max(f64::MIN_POSITIVE));
        }
    }
    (differing, worst)
}

/// Runs the device set-up and checks G, Gᵀ and the statistics against the
/// CPU reference; returns (differing values, max relative difference).
fn check(gpu: &Gpu, name: &str, a: &Csr, s: &FsaiSettings, budget: Option<usize>) -> (usize, f64) {
    let what = format!("{name}, {s}");
    let cpu = fsai_setup(a, s).unwrap_or_else(|e| panic!("{what}: CPU: {e}"));
    let (g, gt, stats) = match budget {
        Some(b) => fsai_setup_gpu_budget(gpu, a, s, b),
        None => fsai_setup_gpu(gpu, a, s),
    }
    .unwrap_or_else(|e| panic!("{what}: GPU: {e}"));
    let g = g.download(gpu).unwrap();
    let gt = gt.download(gpu).unwrap();
    assert_eq!(gt, g.transpose(), "{what}: Gᵀ is not G's transpose");
    let (differing, worst) = compare(&what, &g, &cpu.g);
    assert_eq!(stats.rows_by_steps, cpu.stats.rows_by_steps, "{what}");
    assert_eq!(stats.fallback_rows, cpu.stats.fallback_rows, "{what}");
    assert_eq!(stats.density, cpu.stats.density, "{what}");
    assert_eq!(
        stats.density_before_postfilter, cpu.stats.density_before_postfilter,
        "{what}"
    );
    println!(
        "{what:<90} nnz(G) {:>8} differing {differing:>3} max rel {worst:.1e} | {}",
        g.nnz(),
        stats.describe()
    );
    (differing, worst)
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn double_setup_equals_the_cpu_reference() {
    let Some(gpu) = test_device() else { return };
    for (name, a) in systems() {
        for s in double_settings() {
            let (differing, worst) = check(&gpu, &name, &a, &s, None);
            assert!(worst <= 1e-12, "{name}, {s}: max rel {worst:.2e}");
            assert_eq!(differing, 0, "{name}, {s}: values differ from the CPU's");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn mixed_setup_matches_the_cpu_f32_reference() {
    let Some(gpu) = test_device() else { return };
    for (name, a) in systems() {
        for pattern in [
            FsaiPattern::ADAPTIVE,
            adaptive(8, 2, 0.01, FsaiStop::Stagnation),
            FsaiPattern::STATIC,
        ] {
            let s = FsaiSettings {
                pattern,
                postfilter: 0.0,
                precision: Precision::Mixed,
            };
            let (_, worst) = check(&gpu, &name, &a, &s, None);
            assert!(worst <= 1e-6, "{name}, {s}: max rel {worst:.2e}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn batches_give_the_same_g() {
    let Some(gpu) = test_device() else { return };
    let (a, _) = poisson_system("box:12x12x12:tet:perturb=0.2:renumber").unwrap();
    for s in double_settings() {
        let whole = fsai_setup_gpu(&gpu, &a, &s)
            .unwrap()
            .0
            .download(&gpu)
            .unwrap();
        // About 40 rows' state per batch: hundreds of batches.
        let (g, _, stats) = fsai_setup_gpu_budget(&gpu, &a, &s, 40 * 1024).unwrap();
        assert!(stats.batches > 50, "{s}: {} batches", stats.batches);
        assert_eq!(g.download(&gpu).unwrap(), whole, "{s}");
        check(&gpu, "tet box, tiny budget", &a, &s, Some(40 * 1024));
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn bad_settings_and_matrices_are_errors() {
    let Some(gpu) = test_device() else { return };
    let (a, _) = poisson_system("box:6x6x6").unwrap();
    let s = FsaiSettings {
        pattern: adaptive(16, 2, 0.01, FsaiStop::Stagnation),
        ..FsaiSettings::default()
    };
    match fsai_setup_gpu(&gpu, &a, &s) {
        Err(SolveError::InvalidControls(m)) => assert!(m.contains("at most 31"), "{m}"),
        other => panic!("steps * stepSize = 32 accepted: {:?}", other.map(|r| r.2)),
    }
    let mut bad = a.clone();
    let d = bad.slot(5, 5).unwrap();
    bad.values_mut()[d] = -1.0;
    match fsai_setup_gpu(&gpu, &bad, &FsaiSettings::default()) {
        Err(SolveError::NonPositiveDiagonal { row: 5, .. }) => {}
        other => panic!("negative diagonal accepted: {:?}", other.map(|r| r.2)),
    }
}

/// The set-up from the matrix resident on the device (its CSR built there,
/// its diagonal checked there) gives the host path's G and Gᵀ bit for bit
/// (adaptive patterns, f64 and mixed, slice heights that do not divide n),
/// takes the host path for static patterns, and names the same row for a
/// diagonal entry that is not positive.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn resident_setup_equals_the_host_setup() {
    let Some(gpu) = test_device() else { return };
    let mut settings = double_settings();
    settings.push(FsaiSettings {
        precision: Precision::Mixed,
        ..FsaiSettings::default()
    });
    for (name, a) in systems() {
        for h in [32, 64] {
            let m = DeviceModSell::upload(&gpu, &ModSell::from_csr(&a, h).unwrap()).unwrap();
            for s in &settings {
                let what = format!("{name}, H = {h}, {s}");
                let (g, gt, stats) = fsai_setup_gpu(&gpu, &a, s).unwrap();
                let (rg, rgt, rstats) = fsai_setup_gpu_resident(&gpu, &a, &m, s)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(
                    rg.download(&gpu).unwrap(),
                    g.download(&gpu).unwrap(),
                    "{what}: G"
                );
                assert_eq!(
                    rgt.download(&gpu).unwrap(),
                    gt.download(&gpu).unwrap(),
                    "{what}: Gᵀ"
                );
                assert_eq!(rstats.rows_by_steps, stats.rows_by_steps, "{what}");
            }
        }
    }
    let (a, _) = poisson_system("box:6x6x6").unwrap();
    let mut bad = a.clone();
    let d = bad.slot(5, 5).unwrap();
    bad.values_mut()[d] = -1.0;
    let m = DeviceModSell::upload(&gpu, &ModSell::from_csr(&bad, 32).unwrap()).unwrap();
    match fsai_setup_gpu_resident(&gpu, &bad, &m, &FsaiSettings::default()) {
        Err(SolveError::NonPositiveDiagonal { row: 5, .. }) => {}
        other => panic!("negative diagonal accepted: {:?}", other.map(|r| r.2)),
    }
}
