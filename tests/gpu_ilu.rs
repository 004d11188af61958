//! Level-scheduled ILU(k), DILU and Schwarz on the GPU (`gpu::ilu`,
//! `gpu::schwarz`, `gpu::ic` DILU) against the CPU (`solve::ilu`,
//! `solve::schwarz`): same matrix, same row order, so the factors and the
//! applications must agree bit for bit (the number of differing values is
//! printed and must be 0), and the solves must take the CPU's iterations.
//! Prints `skipped: no CUDA device` without a GPU (unless
//! FVPOISSON_REQUIRE_GPU=1).

use fvpoisson::fvm::convection::{convection_diffusion, swirl};
use fvpoisson::fvm::testing::poisson_system;
use fvpoisson::gpu::ic::{DeviceIncompleteCholesky, IcKind};
use fvpoisson::gpu::ilu::DeviceIlu;
use fvpoisson::gpu::pcg::DeviceSolve;
use fvpoisson::gpu::pcg::{GpuSolveOptions, GpuSolver};
use fvpoisson::gpu::schwarz::DeviceSchwarz;
use fvpoisson::gpu::smooth::DevicePreconditioner;
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::solve::ilu::{dilu, Ilu};
use fvpoisson::solve::precond::Ic0;
use fvpoisson::solve::schwarz::{Schwarz, SchwarzKind, SchwarzSettings};
use fvpoisson::solve::{
    solve_pcg_scaled, EquilibrationKind, LinearOperator, Preconditioner, SolveError, SolverControls,
};
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::testing::{grid_laplacian, random_nonsymmetric, random_vector, SplitMix};
use fvpoisson::sparse::{Csr, RowOrdering};

/// `a` with every off-diagonal scaled by its own factor in [0.5, 1): a
/// nonsymmetric matrix on a mesh's pattern, strictly diagonally dominant (so
/// no pivot vanishes, and its symmetric part is positive definite for AS).
fn skewed(mut a: Csr, seed: u64) -> Csr {
    let mut rng = SplitMix(seed);
    let (row_ptr, cols) = (a.row_ptr().to_vec(), a.cols().to_vec());
    let values = a.values_mut();
    for r in 0..row_ptr.len() - 1 {
        for s in row_ptr[r]..row_ptr[r + 1] {
            if cols[s] as usize != r {
                values[s] *= 0.5 + 0.5 * rng.next_f64();
            }
        }
    }
    a
}

/// Nonsymmetric random matrices, a 3-D grid and nonsymmetric matrices on
/// real meshes (tet and hex boxes, polyhedra), natural and RCM order, with a
/// random vector.
fn systems() -> Vec<(String, Csr, Vec<f64>)> {
    let random = |n: usize, seed: u64| random_vector(n, seed ^ 0x5eed);
    let mut all: Vec<(String, Csr, Vec<f64>)> = [(1usize, 1u64), (1000, 2), (30_011, 3)]
        .into_iter()
        .map(|(n, seed)| {
            (
                format!("random nonsymmetric n = {n}"),
                random_nonsymmetric(n, 8, seed),
                random(n, seed),
            )
        })
        .collect();
    all.push((
        "grid 20x20x20".into(),
        grid_laplacian(20, 20, 20),
        random(8000, 4),
    ));
    for spec in [
        "box:14x14x14:tet:perturb=0.2:renumber",
        "box:24x20x16",
        "meshes/foam/polydual",
    ] {
        let (a, _) = poisson_system(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let a = skewed(a, 11);
        let (cd, _) = convection_diffusion_system(spec);
        all.push((
            format!("{spec} convection-diffusion"),
            cd.clone(),
            random(cd.n_rows(), 9),
        ));
        let p = reverse_cuthill_mckee(&cd);
        all.push((
            format!("{spec} convection-diffusion RCM"),
            p.apply_symmetric(&cd),
            p.to_new(&random(cd.n_rows(), 9)),
        ));
        let name = spec.rsplit('/').next().unwrap();
        let r = random(a.n_rows(), 7);
        let p = reverse_cuthill_mckee(&a);
        all.push((format!("{name} RCM"), p.apply_symmetric(&a), p.to_new(&r)));
        all.push((name.to_string(), a, r));
    }
    all
}

/// Convection–diffusion on a mesh (swirling upwind flow, cell Péclet
/// number above 2) and its right-hand side.
fn convection_diffusion_system(spec: &str) -> (Csr, Vec<f64>) {
    let mesh = fvpoisson::mesh::source::load(spec).unwrap();
    let geometry = mesh.geometry().unwrap();
    convection_diffusion(&mesh, &geometry, 0.002, swirl(1.0)).unwrap()
}

/// z = M r on the device.
fn apply_device(gpu: &Gpu, m: &dyn DevicePreconditioner, r: &[f64]) -> Vec<f64> {
    let r_dev = gpu.upload(r).unwrap();
    let z_dev = gpu.zeros::<f64>(r.len()).unwrap();
    m.apply(&r_dev, &z_dev).unwrap();
    gpu.download(&z_dev).unwrap()
}

fn apply_host(m: &dyn LinearOperator, r: &[f64]) -> Vec<f64> {
    let mut z = vec![0.0; r.len()];
    m.apply(r, &mut z);
    z
}

fn differing(a: &[f64], b: &[f64]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn ilu_factors_and_sweeps_equal_the_cpu_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    for (name, a, r) in systems() {
        for k in [0, 1, 2] {
            let cpu = Ilu::new(&a, k).unwrap();
            let dev = DeviceIlu::new(&gpu, &a, k).unwrap();
            let factor_diffs = differing(&dev.download_factors().unwrap(), cpu.factors().values());
            let z_diffs = differing(&apply_device(&gpu, &dev, &r), &apply_host(&cpu, &r));
            let (fw, bw) = dev.levels();
            println!(
                "{name}: ILU({k}): {} fill, {fw}/{bw} levels (CPU {:?}); factor values \
                 differing {factor_diffs} of {}, z differing {z_diffs} of {}",
                cpu.n_fill(),
                cpu.levels(),
                cpu.factors().nnz(),
                a.n_rows()
            );
            assert_eq!((fw, bw), cpu.levels());
            assert_eq!(factor_diffs, 0, "{name} ILU({k}) factor");
            assert_eq!(z_diffs, 0, "{name} ILU({k}) application");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn dilu_equals_the_cpu_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    for (name, a, r) in systems() {
        let cpu = dilu(&a).unwrap();
        let dev = DeviceIncompleteCholesky::new(&gpu, &a, IcKind::Dilu).unwrap();
        let factor_diffs = differing(&dev.download_factor().unwrap(), cpu.reciprocal_diagonal());
        let z_diffs = differing(&apply_device(&gpu, &dev, &r), &apply_host(&cpu, &r));
        println!("{name}: DILU: rD differing {factor_diffs}, z differing {z_diffs}");
        assert_eq!(factor_diffs, 0, "{name} DILU factor");
        assert_eq!(z_diffs, 0, "{name} DILU application");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn schwarz_equals_the_cpu_bit_for_bit() {
    let Some(gpu) = test_device() else { return };
    let specs = [
        "ras:subdomains=8:overlap=1:fill=0",
        "ras:subdomains=8:overlap=2:fill=1",
        "ras:subdomains=4:overlap=1:fill=0:nested=8:inner-overlap=1",
        "as:subdomains=8:overlap=1",
        "as:subdomains=8:overlap=0:nested=4",
    ];
    for (name, a, r) in systems().into_iter().filter(|(_, a, _)| a.n_rows() > 100) {
        for spec in specs {
            let s: SchwarzSettings = spec.parse().unwrap();
            // AS needs SPD blocks: the symmetric part of the diagonally
            // dominant skewed matrices (convection–diffusion's need not be
            // positive definite at outflow boundaries).
            if s.kind == SchwarzKind::Additive && name.contains("convection") {
                continue;
            }
            let a = if s.kind == SchwarzKind::Additive {
                symmetrised(&a)
            } else {
                a.clone()
            };
            let cpu = Schwarz::new(&a, &s).unwrap();
            let dev = DeviceSchwarz::new(&gpu, &a, &s).unwrap();
            let cpu_factor = match cpu.ilu() {
                Some(f) => f.factors().values().to_vec(),
                None => Ic0::new(&cpu.decomposition().matrix).unwrap().factor(),
            };
            let factor_diffs = differing(&dev.download_factors().unwrap(), &cpu_factor);
            let z_diffs = differing(&apply_device(&gpu, &dev, &r), &apply_host(&cpu, &r));
            println!(
                "{name}: {}: levels GPU {:?}; factor differing {factor_diffs}, z differing \
                 {z_diffs}",
                cpu.describe(),
                dev.levels()
            );
            assert_eq!(dev.levels(), cpu.levels(), "{name} {spec}");
            assert_eq!(factor_diffs, 0, "{name} {spec} factor");
            assert_eq!(z_diffs, 0, "{name} {spec} application");
        }
    }
}

/// (A + Aᵀ) / 2 on A's (symmetric) pattern.
fn symmetrised(a: &Csr) -> Csr {
    let mut s = a.clone();
    for r in 0..a.n_rows() {
        let (cols, vals) = a.row(r);
        for (&c, &v) in cols.iter().zip(vals) {
            let t = a.values()[a.slot(c as usize, r).unwrap()];
            let slot = a.slot(r, c as usize).unwrap();
            s.values_mut()[slot] = 0.5 * (v + t);
        }
    }
    s
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn zero_pivots_name_the_cpus_row() {
    let Some(gpu) = test_device() else { return };
    let a = Csr::new(
        3,
        vec![0, 1, 3, 5],
        vec![0, 1, 2, 1, 2],
        vec![1.0, 1.0, 1.0, 1.0, 1.0],
    )
    .unwrap();
    let cpu = Ilu::new(&a, 0).unwrap_err();
    let dev = DeviceIlu::new(&gpu, &a, 0).err().unwrap();
    println!("CPU: {cpu}\nGPU: {dev}");
    assert_eq!(cpu, dev);
    let c = Csr::new(2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1.0, 1.0, 1.0, 1.0]).unwrap();
    let cpu = dilu(&c).err().unwrap();
    let dev = DeviceIncompleteCholesky::new(&gpu, &c, IcKind::Dilu)
        .err()
        .unwrap();
    assert_eq!(cpu, dev);
    assert!(matches!(dev, SolveError::ZeroPivot { row: 1, .. }), "{dev}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn pcg_with_device_ilu_and_as_takes_the_cpu_iterations() {
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls::absolute(1e-10, 2000);
    let mut solver = GpuSolver::new(&gpu);
    for spec in ["box:14x14x14:tet:perturb=0.2:renumber", "box:24x20x16"] {
        let (a, b) = poisson_system(spec).unwrap();
        for p in ["ilu0", "ilu1", "as:subdomains=8:overlap=1", "dilu"] {
            let p: Preconditioner = p.parse().unwrap();
            let mut x_cpu = vec![0.0; a.n_rows()];
            let cpu = solve_pcg_scaled(
                &a,
                p,
                &EquilibrationKind::None,
                &b,
                &mut x_cpu,
                &controls,
                "p",
            )
            .unwrap();
            let mut x_gpu = vec![0.0; a.n_rows()];
            let options = GpuSolveOptions {
                ordering: RowOrdering::Natural,
                ..GpuSolveOptions::default()
            };
            let perf = solver
                .solve_with(
                    &p,
                    DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options).named("p"),
                )
                .unwrap();
            println!(
                "{spec}: PCG {p}: CPU {} iterations, GPU {}",
                cpu.iterations, perf.iterations
            );
            assert!(perf.converged, "{spec} {p}");
            assert!(cpu.iterations.abs_diff(perf.iterations) <= 1, "{spec} {p}");
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gmres_and_bicgstab_with_device_ilu_converge_like_the_cpu() {
    use fvpoisson::solve::krylov::{solve_krylov, GmresSettings, KrylovMethod};
    let Some(gpu) = test_device() else { return };
    let controls = SolverControls {
        tolerance: 1e-10,
        rel_tol: 0.0,
        max_iter: 3000,
        ..SolverControls::default()
    };
    let mut solver = GpuSolver::new(&gpu);
    for spec in ["box:14x14x14:tet:perturb=0.2:renumber", "box:24x20x16"] {
        let (a, b) = convection_diffusion_system(spec);
        for method in [
            KrylovMethod::Gmres(GmresSettings::default()),
            KrylovMethod::BiCgStab,
        ] {
            for p in [
                "ilu0",
                "ilu1",
                "dilu",
                "ras:subdomains=8:overlap=1",
                "ras:subdomains=4:overlap=1:nested=8",
            ] {
                let p: Preconditioner = p.parse().unwrap();
                let mut x_cpu = vec![0.0; a.n_rows()];
                let cpu = solve_krylov(&a, &method, p, &b, &mut x_cpu, &controls, "U").unwrap();
                let mut x_gpu = vec![0.0; a.n_rows()];
                let options = GpuSolveOptions {
                    ordering: RowOrdering::Natural,
                    ..GpuSolveOptions::default()
                };
                let perf = solver
                    .solve_krylov_preconditioned(
                        &method,
                        &p,
                        DeviceSolve::new(&a, &b, &mut x_gpu, &controls, &options).named("U"),
                    )
                    .unwrap();
                let diff = x_cpu
                    .iter()
                    .zip(&x_gpu)
                    .map(|(c, g)| (c - g).abs())
                    .fold(0.0, f64::max);
                let scale = x_cpu.iter().map(|v| v.abs()).fold(0.0, f64::max);
                println!(
                    "{spec}: {method} {p}: CPU {} iterations, GPU {}; max |x_cpu - x_gpu| = \
                     {diff:.2e} (max |x| {scale:.2e})",
                    cpu.iterations, perf.iterations
                );
                assert!(perf.converged, "{spec} {method} {p}");
                assert!(
                    cpu.iterations.abs_diff(perf.iterations) <= 2,
                    "{spec} {method} {p}: CPU {} GPU {}",
                    cpu.iterations,
                    perf.iterations
                );
                assert!(diff <= 1e-6 * scale, "{spec} {method} {p}");
            }
        }
    }
}
