//! The GPU assembly (`gpu::assembly`) against the CPU assembly on real
//! meshes: matrix (every entry), explicit right-hand side, `update_rhs` with a
//! random field, cell gradients, re-assembly, all-Neumann problems, solves
//! with the resident matrix, and whole runs. Each test prints its largest
//! differences, and `skipped: no CUDA device` where there is no GPU (unless
//! FVPOISSON_REQUIRE_GPU=1). Meshes are read relative to the working directory
//! (the repository root), so the test binary runs on a machine without cargo.

mod common;

use std::path::{Path, PathBuf};
use std::rc::Rc;

use fvpoisson::case::{
    host_assembly_reason, read_case_dir, run_case, CaseSetup, Device, OutputFormat, RunSummary,
};
use fvpoisson::fvm::testing::{
    all_neumann_problem, mixed_conditions, random_field, schemes, source, two_problems,
    varying_and_uniform_gamma, varying_gamma,
};
use fvpoisson::fvm::testing::{poisson_system, poisson_system_on};
use fvpoisson::fvm::{
    BoundaryCondition, CellField, FvmError, GradScheme, LaplacianProblem, LaplacianSystem,
    Reference, Schemes, SnGradScheme, TimeScheme,
};
use fvpoisson::gpu::amg::DeviceAmg;
use fvpoisson::gpu::assembly::{AssemblyError, AssemblyMap, DeviceLaplacian};
use fvpoisson::gpu::krylov::DevicePreconditioner;
use fvpoisson::gpu::matrix::DeviceModSell;
use fvpoisson::gpu::pcg::{GpuCgBackend, GpuSolveOptions, GpuVector, LaunchMode};
use fvpoisson::gpu::polynomial::DevicePolynomial;
use fvpoisson::gpu::{test_device, Gpu};
use fvpoisson::mesh::{Mesh, Vec3};
use fvpoisson::solve::amg::AmgSettings;
use fvpoisson::solve::polynomial::{PolynomialKind, PolynomialSettings};
use fvpoisson::solve::scalar::Precision;
use fvpoisson::solve::{pcg, solve_pcg, PreconditionerKind, SolverControls};
use fvpoisson::sparse::ordering::reverse_cuthill_mckee;
use fvpoisson::sparse::{Csr, ModSell, Permutation};

/// A repository path: relative to the working directory when it is there
/// (the device machine runs the binary in the repository root), else to the
/// crate this was built from.
fn repo(rel: &str) -> PathBuf {
    let here = Path::new(rel);
    if here.exists() {
        here.to_path_buf()
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
    }
}

fn load(spec: &str) -> Mesh {
    let spec = if spec.starts_with("box:") {
        spec.to_string()
    } else {
        repo(spec).to_string_lossy().into_owned()
    };
    fvpoisson::mesh::load(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Largest |a − b| / |b| over the entries (same pattern required; an entry
/// with b = 0 counts |a|), and whether all are bit for bit equal.
fn matrix_difference(a: &Csr, b: &Csr) -> (f64, bool) {
    assert_eq!(a.row_ptr(), b.row_ptr(), "pattern (row pointers)");
    assert_eq!(a.cols(), b.cols(), "pattern (columns)");
    let d = a
        .values()
        .iter()
        .zip(b.values())
        .map(|(x, y)| relative(*x, *y, y.abs()))
        .fold(0.0, f64::max);
    (d, a.values() == b.values())
}

/// |x − y| / scale, infinite for a non-finite x (an unwritten value).
fn relative(x: f64, y: f64, scale: f64) -> f64 {
    if !x.is_finite() {
        f64::INFINITY
    } else if scale == 0.0 {
        x.abs()
    } else {
        (x - y).abs() / scale
    }
}

/// max_i |a_i − b_i| / max_i |b_i|, and whether all are bit for bit equal.
fn vector_difference(a: &[f64], b: &[f64]) -> (f64, bool) {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| relative(*x, *y, scale))
        .fold(0.0, f64::max);
    (d, a == b)
}

fn gradient_difference(a: &[Vec3], b: &[Vec3]) -> (f64, bool) {
    let flat = |v: &[Vec3]| v.iter().flat_map(|g| [g.x, g.y, g.z]).collect::<Vec<_>>();
    vector_difference(&flat(a), &flat(b))
}

/// The brief's bound: the device assembly equals the CPU's to 1e-14 relative.
const TOLERANCE: f64 = 1e-14;

/// Assembles `problem` on the CPU and on the device (rows in `ordering`, or
/// RCM), then compares matrix, explicit rhs, `update_rhs` with a random field
/// (and old-time field for Euler) and the gradient of that field.
fn compare(
    gpu: &Gpu,
    name: &str,
    system: &mut LaplacianSystem,
    device: &mut DeviceLaplacian,
    problem: &LaplacianProblem,
) {
    let n = system.mesh().n_cells();
    let (dm, bits_m) = matrix_difference(&device.download_matrix().unwrap(), &system.matrix);
    let (de, _) = vector_difference(
        &device.download_explicit_rhs().unwrap(),
        system.explicit_rhs(),
    );
    let p = random_field(n, 11);
    let old = random_field(n, 12);
    let euler = matches!(problem.time, TimeScheme::Euler { .. });
    system
        .update_rhs(&p, euler.then_some(old.as_slice()))
        .unwrap();
    let p_dev = device.to_device_order(&p).unwrap();
    let old_dev = device.to_device_order(&old).unwrap();
    device
        .update_rhs(&p_dev, euler.then_some(&old_dev))
        .unwrap();
    let (dr, bits_r) = vector_difference(&device.download_rhs().unwrap(), &system.rhs);
    device.gradient(&p_dev).unwrap();
    let (dg, _) = gradient_difference(&device.download_gradient().unwrap(), &system.gradient(&p));
    println!(
        "{name} ({n} cells, {}): matrix {dm:.1e}, explicit rhs {de:.1e}, rhs after update_rhs \
         {dr:.1e}, gradient {dg:.1e}; bit for bit: matrix {bits_m}, rhs {bits_r}",
        gpu.name()
    );
    for (what, d) in [
        ("matrix", dm),
        ("explicit rhs", de),
        ("rhs", dr),
        ("gradient", dg),
    ] {
        assert!(d <= TOLERANCE, "{name}: {what} differs by {d:e}");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_assembly_equals_cpu_assembly_on_real_meshes() {
    let Some(gpu) = test_device() else { return };
    use GradScheme::{GaussLinear as Gauss, LeastSquares as Ls};
    use SnGradScheme::*;
    // (mesh, snGrad, gradient, harmonic Γ, Euler, slice height, RCM)
    let cases: [(&str, SnGradScheme, GradScheme, bool, bool, usize, bool); 12] = [
        (
            "box:20x20x20:tet:perturb=0.2:renumber",
            Corrected,
            Gauss,
            true,
            false,
            512,
            true,
        ),
        (
            "box:20x20x20:tet:perturb=0.2:renumber",
            Limited(0.33),
            Ls,
            false,
            true,
            256,
            true,
        ),
        (
            "box:20x20x20:tet:perturb=0.2:renumber",
            BoundaryCorrected,
            Ls,
            true,
            false,
            32,
            false,
        ),
        ("meshes/foam/warped", Corrected, Ls, true, true, 512, true),
        (
            "meshes/foam/warped",
            BoundaryCorrected,
            Gauss,
            false,
            false,
            1024,
            true,
        ),
        (
            "meshes/foam/polydual",
            Corrected,
            Gauss,
            true,
            false,
            64,
            true,
        ),
        (
            "meshes/foam/polydual",
            BoundaryCorrected,
            Ls,
            true,
            true,
            512,
            false,
        ),
        (
            "meshes/gmsh/tet_cube.v41.msh",
            Corrected,
            Gauss,
            true,
            false,
            512,
            true,
        ),
        (
            "meshes/gmsh/tet_cube.v41.msh",
            Uncorrected,
            Ls,
            false,
            true,
            128,
            true,
        ),
        (
            "box:24x20x1:2d:perturb=0.3",
            Corrected,
            Ls,
            true,
            false,
            512,
            true,
        ),
        (
            "box:24x20x1:2d:perturb=0.3",
            Orthogonal,
            Gauss,
            true,
            true,
            96,
            true,
        ),
        (
            "meshes/foam/cavity",
            Corrected,
            Gauss,
            false,
            false,
            512,
            true,
        ),
    ];
    for (i, (spec, sn_grad, grad, harmonic, euler, h, rcm)) in cases.into_iter().enumerate() {
        let mesh = load(spec);
        let geometry = mesh.geometry().unwrap();
        for (what, mut problem) in varying_and_uniform_gamma(&mesh, i as u64, euler) {
            // Some seeds leave a steady case with no fixed value (polydual:
            // zeroGradient + fixedGradient): make its right-hand side consistent.
            problem.singular.project = true;
            let schemes = schemes(sn_grad, grad, harmonic);
            let mut system = LaplacianSystem::new(&mesh, &geometry, schemes, &problem).unwrap();
            let mut device = if rcm {
                DeviceLaplacian::new(&gpu, &system, &problem, h)
            } else {
                let identity = Permutation::identity(mesh.n_cells());
                DeviceLaplacian::with_ordering(&gpu, &system, &problem, identity, h)
            }
            .unwrap();
            let name = format!(
                "{spec} {sn_grad:?} {grad:?} Γ {what}{} H {h}{}",
                if euler { " Euler" } else { "" },
                if rcm { " RCM" } else { " as numbered" }
            );
            compare(&gpu, &name, &mut system, &mut device, &problem);
        }
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_re_assembly_with_new_gamma_conditions_and_time_step() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("box:12x12x12:tet:perturb=0.2:renumber");
    let geometry = mesh.geometry().unwrap();
    let schemes = schemes(
        SnGradScheme::BoundaryCorrected,
        GradScheme::LeastSquares,
        true,
    );
    let (first, mut second) = two_problems(&mesh);
    let mut system = LaplacianSystem::new(&mesh, &geometry, schemes, &first).unwrap();
    let mut device = DeviceLaplacian::new(&gpu, &system, &first, 512).unwrap();
    compare(&gpu, "first", &mut system, &mut device, &first);
    // A solve in between: the backend must give the matrix back to re-assemble.
    device.solver(true, &GpuSolveOptions::default()).unwrap();
    second.time = TimeScheme::Euler { dt: 0.3 };
    system.reassemble(&second).unwrap();
    device.reassemble(&system, &second).unwrap();
    compare(&gpu, "re-assembled", &mut system, &mut device, &second);
    system.reassemble(&first).unwrap();
    device.reassemble(&system, &first).unwrap();
    compare(&gpu, "back to the first", &mut system, &mut device, &first);
}

/// A re-assembly of the source alone (PISO's correctors after the first keep
/// rAU) gives the matrix, explicit right-hand side and `update_rhs` of a full
/// re-assembly with the same Γ, bit for bit, and leaves the AMG preconditioner
/// lent to the held solver (no re-set-up); the solves are the same bits.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_source_only_re_assembly_equals_a_full_one_with_the_same_gamma() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("box:12x12x12:tet:perturb=0.2:renumber");
    let geometry = mesh.geometry().unwrap();
    let n = mesh.n_cells();
    let (first, _) = two_problems(&mesh);
    let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &first).unwrap();
    let gamma: Vec<f64> = random_field(n, 21).iter().map(|v| 0.5 + v.abs()).collect();
    let sources = [random_field(n, 22), random_field(n, 23)];
    let p = random_field(n, 24);
    // The full re-assembly's value update factors the coarsest matrix again,
    // so that its hierarchy keeps the set-up's bits (refined, the inverse
    // would equal them to rounding only).
    let amg_settings = AmgSettings {
        coarsest_rows: 40,
        refine_coarsest: false,
        ..AmgSettings::default()
    };
    let mut full = DeviceLaplacian::new(&gpu, &system, &first, 512).unwrap();
    let mut kept = DeviceLaplacian::new(&gpu, &system, &first, 512).unwrap();
    let mut amgs = Vec::new();
    for device in [&mut full, &mut kept] {
        let g = device.to_device_order(&gamma).unwrap();
        let q = device.to_device_order(&sources[0]).unwrap();
        device.reassemble_from_device(&g, &q).unwrap();
        let matrix = device.shared_matrix().unwrap();
        amgs.push(Rc::new(
            DeviceAmg::new(&gpu, matrix, &amg_settings).unwrap(),
        ));
    }
    let mut amg_full = amgs.remove(0);
    let amg_kept = amgs.remove(0);
    fn solve_amg<'g>(
        device: &mut DeviceLaplacian<'g>,
        amg: &Rc<DeviceAmg<'g>>,
        p: &[f64],
    ) -> (fvpoisson::solve::SolverPerformance, Vec<f64>) {
        let p_dev = device.to_device_order(p).unwrap();
        device.update_rhs(&p_dev, None).unwrap();
        let (backend, b) = device
            .preconditioned_solver(amg, &GpuSolveOptions::default())
            .unwrap();
        let mut x = backend.upload(&vec![0.0; p.len()]).unwrap();
        let controls = SolverControls::absolute(1e-9, 500);
        let perf = pcg(backend, b, &mut x, &controls, "p").unwrap();
        (perf, backend.download(&x).unwrap())
    }
    // Both solve the first source: the AMGs are now lent to the solvers.
    solve_amg(&mut full, &amg_full, &p);
    solve_amg(&mut kept, &amg_kept, &p);
    let g = full.to_device_order(&gamma).unwrap();
    let q = full.to_device_order(&sources[1]).unwrap();
    full.reassemble_from_device(&g, &q).unwrap();
    Rc::get_mut(&mut amg_full)
        .expect("a full re-assembly takes the AMG back")
        .update_values(full.shared_matrix().unwrap())
        .unwrap();
    let q = kept.to_device_order(&sources[1]).unwrap();
    kept.reassemble_source_from_device(&q).unwrap();
    assert_eq!(
        Rc::strong_count(&amg_kept),
        2,
        "a source-only re-assembly leaves the AMG lent to the solver"
    );
    let bits = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let (m_full, m_kept) = (
        full.download_matrix().unwrap(),
        kept.download_matrix().unwrap(),
    );
    assert_eq!(m_full.cols(), m_kept.cols());
    assert!(bits(m_full.values(), m_kept.values()), "matrix");
    assert!(
        bits(
            &full.download_explicit_rhs().unwrap(),
            &kept.download_explicit_rhs().unwrap()
        ),
        "explicit right-hand side"
    );
    let (perf_full, x_full) = solve_amg(&mut full, &amg_full, &p);
    let (perf_kept, x_kept) = solve_amg(&mut kept, &amg_kept, &p);
    assert!(
        bits(&full.download_rhs().unwrap(), &kept.download_rhs().unwrap()),
        "right-hand side after update_rhs"
    );
    println!(
        "source-only re-assembly: {} iterations, the full re-assembly's {}",
        perf_kept.iterations, perf_full.iterations
    );
    assert!(perf_kept.converged);
    assert_eq!(perf_kept, perf_full);
    assert!(bits(&x_kept, &x_full), "solution");
}

/// Gauss linear: the systems of a mesh share the gradient vectors;
/// boundaryCorrected least squares: each problem brings vectors of its own.
const SHARED_AND_OWN_GRADIENTS: [(SnGradScheme, GradScheme); 2] = [
    (SnGradScheme::Corrected, GradScheme::GaussLinear),
    (SnGradScheme::BoundaryCorrected, GradScheme::LeastSquares),
];

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_systems_sharing_a_set_up_assemble_as_systems_of_their_own() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("box:10x9x8:perturb=0.25");
    let geometry = mesh.geometry().unwrap();
    for (sn_grad, grad) in SHARED_AND_OWN_GRADIENTS {
        let schemes = schemes(sn_grad, grad, false);
        let (first, second) = two_problems(&mesh);
        let mut first_system = LaplacianSystem::new(&mesh, &geometry, schemes, &first).unwrap();
        let mut second_system = first_system.with_structure_of(&second).unwrap();
        assert!(second_system
            .matrix
            .shares_pattern_with(&first_system.matrix));
        let mut first_device = DeviceLaplacian::new(&gpu, &first_system, &first, 512).unwrap();
        let mut second_device =
            DeviceLaplacian::sharing_set_up_of(&first_device, &second_system, &second).unwrap();
        assert!(second_device.shares_set_up_with(&first_device));
        let name = format!("{sn_grad:?}/{grad:?}");
        compare(
            &gpu,
            &format!("{name}: sharing"),
            &mut second_system,
            &mut second_device,
            &second,
        );
        // The first system's vectors are untouched by the second's.
        compare(
            &gpu,
            &format!("{name}: shared"),
            &mut first_system,
            &mut first_device,
            &first,
        );
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_systems_from_the_values_deferred_systems_kept_equal_those_from_the_problems() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("box:10x9x8:perturb=0.25");
    let geometry = mesh.geometry().unwrap();
    for (sn_grad, grad) in SHARED_AND_OWN_GRADIENTS {
        let name = format!("{sn_grad:?}/{grad:?}");
        let schemes = schemes(sn_grad, grad, false);
        let (first, second) = two_problems(&mesh);
        // As a flow case sets up: deferred host systems, their kept values
        // taken for the device's first assembly.
        let mut first_deferred =
            LaplacianSystem::deferred(&mesh, &geometry, schemes, &first).unwrap();
        let mut second_deferred = first_deferred.deferred_with_structure_of(&second).unwrap();
        let ordering = reverse_cuthill_mckee(&first_deferred.matrix);
        let map = AssemblyMap::new(&mesh, &ordering, 512).unwrap();
        let values = first_deferred.take_evaluated().unwrap();
        let first_device = DeviceLaplacian::with_map_evaluated(
            &gpu,
            &first_deferred,
            values,
            ordering.clone(),
            &map,
        )
        .unwrap();
        let values = second_deferred.take_evaluated().unwrap();
        let mut second_device =
            DeviceLaplacian::sharing_set_up_evaluated(&first_device, &second_deferred, values)
                .unwrap();
        // The same systems from the problems, evaluated by the constructors.
        let first_system = LaplacianSystem::new(&mesh, &geometry, schemes, &first).unwrap();
        let mut second_system = first_system.with_structure_of(&second).unwrap();
        let first_reference =
            DeviceLaplacian::with_map(&gpu, &first_system, &first, ordering, &map).unwrap();
        let second_reference =
            DeviceLaplacian::sharing_set_up_of(&first_reference, &second_system, &second).unwrap();
        for (what, device, reference) in [
            ("first", &first_device, &first_reference),
            ("second", &second_device, &second_reference),
        ] {
            assert_eq!(
                device.download_matrix().unwrap(),
                reference.download_matrix().unwrap(),
                "{name}: {what} matrix"
            );
            assert_eq!(
                device.download_explicit_rhs().unwrap(),
                reference.download_explicit_rhs().unwrap(),
                "{name}: {what} explicit right-hand side"
            );
        }
        compare(
            &gpu,
            &format!("{name}: from kept values"),
            &mut second_system,
            &mut second_device,
            &second,
        );
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_all_neumann_problems_project_pin_and_refuse_as_the_cpu() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("box:10x9x8:perturb=0.25");
    let geometry = mesh.geometry().unwrap();
    for reference in [
        Reference::ZeroMean,
        Reference::Cell {
            cell: 123,
            value: 0.3,
        },
    ] {
        let problem = all_neumann_problem(&mesh, reference);
        let mut system =
            LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
        let mut device = DeviceLaplacian::new(&gpu, &system, &problem, 512).unwrap();
        assert!(device.is_singular());
        // The projection sums in another order: compared to 1e-14 of max |b|.
        compare(
            &gpu,
            &format!("all-Neumann {reference:?}"),
            &mut system,
            &mut device,
            &problem,
        );
        // The zero-mean shift after a solve.
        let x = random_field(mesh.n_cells(), 5);
        let x_dev = device.to_device_order(&x).unwrap();
        device.shift_to_zero_mean(&x_dev).unwrap();
        let total: f64 = geometry.cell_volumes.iter().sum();
        let mean = x
            .iter()
            .zip(&geometry.cell_volumes)
            .map(|(p, v)| p * v)
            .sum::<f64>()
            / total;
        let shifted: Vec<f64> = x.iter().map(|v| v - mean).collect();
        let (d, _) = vector_difference(&device.to_mesh_order(&x_dev).unwrap(), &shifted);
        println!("zero-mean shift: {d:.1e}");
        assert!(d < 1e-13, "{d}");
    }
    // Unbalanced and not projected: the CPU's error, from the device.
    let neumann = vec![BoundaryCondition::ZeroGradient; mesh.patches().len()];
    let mut problem = LaplacianProblem::steady(CellField::Uniform(1.0), source(), neumann);
    problem.singular.project = false;
    let mut system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
    let mut device = DeviceLaplacian::new(&gpu, &system, &problem, 512).unwrap();
    let p = vec![0.0; mesh.n_cells()];
    let cpu = system.update_rhs(&p, None).unwrap_err();
    let gpu_err = device
        .update_rhs(&device.to_device_order(&p).unwrap(), None)
        .unwrap_err();
    println!("inconsistent: CPU '{cpu}', GPU '{gpu_err}'");
    assert!(matches!(cpu, FvmError::InconsistentRhs { .. }));
    assert!(matches!(
        gpu_err,
        AssemblyError::Fvm(FvmError::InconsistentRhs { .. })
    ));
    // Deferred: the update returns at once, the check after it reports the
    // same error once, and the right-hand side has the bits of a checked
    // update of a consistent problem.
    let p_dev = device.to_device_order(&p).unwrap();
    device.update_rhs_deferred(&p_dev, None).unwrap();
    let deferred = device.deferred_consistency().unwrap_err();
    assert_eq!(deferred.to_string(), gpu_err.to_string());
    device.deferred_consistency().unwrap();
    // Consistent: no source, so Σb is the non-orthogonal correction's
    // fluxes, which cancel face by face.
    let neumann = vec![BoundaryCondition::ZeroGradient; mesh.patches().len()];
    let mut balanced =
        LaplacianProblem::steady(CellField::Uniform(1.0), CellField::Uniform(0.0), neumann);
    balanced.singular.project = false;
    balanced.singular.reference = Reference::Cell {
        cell: 7,
        value: -0.2,
    };
    let system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &balanced).unwrap();
    let mut device = DeviceLaplacian::new(&gpu, &system, &balanced, 512).unwrap();
    let x = device
        .to_device_order(&random_field(mesh.n_cells(), 9))
        .unwrap();
    device.update_rhs(&x, None).unwrap();
    let checked = device.download_rhs().unwrap();
    device.update_rhs_deferred(&x, None).unwrap();
    let deferred = device.download_rhs().unwrap();
    device.deferred_consistency().unwrap();
    assert_eq!(checked, deferred);
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_implicit_source_and_explicit_product_match_the_cpu_arithmetic() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("meshes/foam/warped");
    let geometry = mesh.geometry().unwrap();
    let problem = LaplacianProblem::steady(varying_gamma(), source(), mixed_conditions(&mesh, 1));
    let mut system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
    let mut device = DeviceLaplacian::new(&gpu, &system, &problem, 512).unwrap();
    let n = mesh.n_cells();
    let (add, s, x) = (random_field(n, 1), random_field(n, 2), random_field(n, 3));
    device.add_to_diagonal(&add).unwrap();
    let diagonal = system.slots().diagonal.clone();
    for (&slot, a) in diagonal.iter().zip(&add) {
        system.matrix.values_mut()[slot as usize] += a;
    }
    let (dm, _) = matrix_difference(&device.download_matrix().unwrap(), &system.matrix);
    device
        .add_product_to_rhs(
            &device.to_device_order(&s).unwrap(),
            &device.to_device_order(&x).unwrap(),
        )
        .unwrap();
    let expected: Vec<f64> = system
        .rhs
        .iter()
        .zip(&s)
        .zip(&x)
        .map(|((b, s), x)| b + s * x)
        .collect();
    let (dr, _) = vector_difference(&device.download_rhs().unwrap(), &expected);
    println!("implicit source: matrix {dm:.1e}; explicit product: rhs {dr:.1e}");
    assert!(dm <= TOLERANCE && dr <= TOLERANCE, "{dm} {dr}");
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_solve_on_the_resident_matrix_matches_the_cpu_solve() {
    let Some(gpu) = test_device() else { return };
    let mesh = load("box:16x16x16:tet:perturb=0.2:renumber");
    let geometry = mesh.geometry().unwrap();
    let problem = LaplacianProblem::steady(varying_gamma(), source(), mixed_conditions(&mesh, 2));
    let mut system = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &problem).unwrap();
    let mut device = DeviceLaplacian::new(&gpu, &system, &problem, 512).unwrap();
    let n = mesh.n_cells();
    let p = random_field(n, 4);
    system.update_rhs(&p, None).unwrap();
    device
        .update_rhs(&device.to_device_order(&p).unwrap(), None)
        .unwrap();
    let controls = SolverControls::absolute(1e-10, 5000);
    for jacobi in [true, false] {
        let kind = if jacobi {
            PreconditionerKind::Jacobi
        } else {
            PreconditionerKind::None
        };
        let mut x_cpu = vec![0.0; n];
        let cpu = solve_pcg(
            &system.matrix,
            kind,
            &system.rhs,
            &mut x_cpu,
            &controls,
            "T",
        )
        .unwrap();
        let mut x_dev = GpuVector::from(gpu.zeros(n).unwrap());
        let (backend, b) = device.solver(jacobi, &GpuSolveOptions::default()).unwrap();
        let first: *const _ = backend;
        let perf = pcg(backend, b, &mut x_dev, &controls, "T").unwrap();
        let (again, _) = device.solver(jacobi, &GpuSolveOptions::default()).unwrap();
        assert!(
            std::ptr::eq(first, again),
            "the backend is kept while the matrix stays"
        );
        let x = device.to_mesh_order(x_dev.dev().unwrap()).unwrap();
        let (d, _) = vector_difference(&x, &x_cpu);
        println!(
            "{kind}: CPU {} iterations, resident GPU {} iterations, initial residuals {:.6e} / \
             {:.6e}, solution difference {d:.1e}",
            cpu.iterations, perf.iterations, cpu.initial_residual, perf.initial_residual
        );
        assert!(perf.converged);
        assert!(perf.iterations.abs_diff(cpu.iterations) <= 2);
        assert!((perf.initial_residual / cpu.initial_residual - 1.0).abs() < 1e-12);
        assert!(d < 1e-6, "{d}");
    }
}

/// A preconditioner its owner keeps between re-assemblies and lends to the
/// system's PCG backend.
enum Kept<'g> {
    Jacobi,
    Amg(Option<Rc<DeviceAmg<'g>>>),
    Chebyshev(Option<Rc<DevicePolynomial<'g>>>, Precision),
}

/// The PCG backend a device system keeps through re-assemblies
/// (`DeviceLaplacian::solver`, `preconditioned_solver`): after each
/// re-assembly with new values its solve equals, bit for bit, that of a
/// backend built afresh on the re-assembled matrix, with Jacobi (its row sums
/// and inverse diagonal refreshed in place) and with an AMG hierarchy or a
/// Chebyshev polynomial (f64 and mixed) whose values are re-set-up between
/// solves (taken back from the backend and lent again); and a re-assembly
/// costs no new CUDA graph.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn a_solver_kept_through_re_assemblies_equals_a_fresh_one() {
    let Some(gpu) = test_device() else { return };
    if gpu.syncs_each_launch() {
        println!("skipped: FVPOISSON_GPU_SYNC=1 (no graph capture)");
        return;
    }
    let mesh = load("box:12x12x12:tet:perturb=0.2:renumber");
    let geometry = mesh.geometry().unwrap();
    let n = mesh.n_cells();
    let (first, second) = two_problems(&mesh);
    let options = GpuSolveOptions {
        check_interval: 10,
        launches: LaunchMode::Graph,
        ..GpuSolveOptions::default()
    };
    let controls = SolverControls::absolute(1e-9, 500);
    let p = random_field(n, 8);
    let amg_settings = AmgSettings {
        coarsest_rows: 40,
        ..AmgSettings::default()
    };
    let variants = [
        Kept::Jacobi,
        Kept::Amg(None),
        Kept::Chebyshev(None, Precision::Double),
        Kept::Chebyshev(None, Precision::Mixed),
    ];
    for mut kept in variants {
        let name = match &kept {
            Kept::Jacobi => "Jacobi".to_string(),
            Kept::Amg(_) => "AMG".to_string(),
            Kept::Chebyshev(_, precision) => format!("Chebyshev(4) {precision:?}"),
        };
        let mut system =
            LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &first).unwrap();
        let mut device = DeviceLaplacian::new(&gpu, &system, &first, 512).unwrap();
        let mut captures = Vec::new();
        // One x for every step, as a flow keeps its p: the graphs hold its
        // address.
        let mut x = GpuVector::from(gpu.zeros(n).unwrap());
        for (step, problem) in [&first, &second, &second, &second].into_iter().enumerate() {
            system.reassemble(problem).unwrap();
            device.reassemble(&system, problem).unwrap();
            let matrix = device.shared_matrix().unwrap();
            let taken_back = "the re-assembly took the preconditioner back from the backend";
            match &mut kept {
                Kept::Jacobi => {}
                Kept::Amg(Some(amg)) => Rc::get_mut(amg)
                    .expect(taken_back)
                    .update_values(Rc::clone(&matrix))
                    .unwrap(),
                Kept::Amg(amg) => {
                    let built = DeviceAmg::new(&gpu, Rc::clone(&matrix), &amg_settings).unwrap();
                    *amg = Some(Rc::new(built));
                }
                Kept::Chebyshev(Some(polynomial), _) => Rc::get_mut(polynomial)
                    .expect(taken_back)
                    .update_values(Rc::clone(&matrix))
                    .unwrap(),
                Kept::Chebyshev(polynomial, precision) => {
                    let settings = PolynomialSettings {
                        precision: *precision,
                        ..PolynomialSettings::new(PolynomialKind::Chebyshev, 4)
                    };
                    let built =
                        DevicePolynomial::on_device(&gpu, Rc::clone(&matrix), &settings).unwrap();
                    *polynomial = Some(Rc::new(built));
                }
            }
            device
                .update_rhs(&device.to_device_order(&p).unwrap(), None)
                .unwrap();
            let lent: Option<Box<dyn DevicePreconditioner>> = match &kept {
                Kept::Jacobi => None,
                Kept::Amg(amg) => amg.clone().map(|a| Box::new(a) as _),
                Kept::Chebyshev(polynomial, _) => polynomial.clone().map(|p| Box::new(p) as _),
            };
            let (backend, b) = match &kept {
                Kept::Jacobi => device.solver(true, &options).unwrap(),
                Kept::Amg(amg) => device
                    .preconditioned_solver(amg.as_ref().unwrap(), &options)
                    .unwrap(),
                Kept::Chebyshev(polynomial, _) => device
                    .preconditioned_solver(polynomial.as_ref().unwrap(), &options)
                    .unwrap(),
            };
            let b_host = backend.download(b).unwrap();
            backend.write(&mut x, &vec![0.0; n]).unwrap();
            let kept_perf = pcg(backend, b, &mut x, &controls, "p").unwrap();
            let x_kept = backend.download(&x).unwrap();
            captures.push(backend.graph_captures());
            assert_eq!(
                backend.launch_mode(),
                LaunchMode::Graph,
                "capture fell back"
            );
            let mut fresh =
                GpuCgBackend::from_shared_resident(&gpu, matrix, lent.is_none(), &options).unwrap();
            if let Some(lent) = lent {
                fresh.set_preconditioner(lent);
            }
            let b_fresh = fresh.upload(&b_host).unwrap();
            let mut x_fresh = fresh.upload(&vec![0.0; n]).unwrap();
            let fresh_perf = pcg(&fresh, &b_fresh, &mut x_fresh, &controls, "p").unwrap();
            let x_fresh = fresh.download(&x_fresh).unwrap();
            drop(fresh);
            println!(
                "{name}, step {step}: kept {} iterations, fresh {}; graphs captured by the kept \
                 backend {}",
                kept_perf.iterations, fresh_perf.iterations, captures[step]
            );
            assert!(kept_perf.converged, "{name}, step {step}");
            assert_eq!(kept_perf, fresh_perf, "{name}, step {step}");
            let same = x_kept
                .iter()
                .zip(&x_fresh)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{name}, step {step}: the kept solver's x differs");
        }
        // Steps 2 and 3 solve the same system from the same start: the chunks
        // and graphs of step 2 serve step 3.
        assert_eq!(captures[3], captures[2], "{name}: {captures:?}");
    }
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn backend_on_a_resident_matrix_equals_the_uploaded_backend() {
    let Some(gpu) = test_device() else { return };
    let (a, b) = poisson_system("box:10x11x12:tet:perturb=0.2").unwrap();
    let n = a.n_rows();
    let controls = SolverControls::absolute(1e-9, 2000);
    let options = GpuSolveOptions {
        slice_height: 64,
        check_interval: 10,
        ..GpuSolveOptions::default()
    };
    for jacobi in [true, false] {
        let uploaded = GpuCgBackend::new(&gpu, &a, jacobi, None, &options).unwrap();
        let matrix = DeviceModSell::upload(&gpu, &ModSell::from_csr(&a, 64).unwrap()).unwrap();
        let resident = GpuCgBackend::from_resident(&gpu, matrix, jacobi, &options).unwrap();
        let mut results = Vec::new();
        for backend in [&uploaded, &resident] {
            let b_dev = backend.upload(&b).unwrap();
            let mut x = backend.upload(&vec![0.0; n]).unwrap();
            let perf = pcg(backend, &b_dev, &mut x, &controls, "p").unwrap();
            results.push((perf, backend.download(&x).unwrap()));
        }
        println!(
            "jacobi {jacobi}: uploaded {} iterations, resident {} iterations",
            results[0].0.iterations, results[1].0.iterations
        );
        // Row sums and inverse diagonal computed on the device, in the host's order.
        assert_eq!(results[0], results[1]);
    }
}

/// The assembly map built on the device is the host's map, array for
/// array: meshes of hex, tet, polyhedral and 2-D cells (empty patches), rows
/// in mesh and RCM order, slice heights that do and do not divide the rows.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn the_device_builds_the_hosts_assembly_map() {
    let Some(gpu) = test_device() else { return };
    for spec in [
        "meshes/foam/polydual",
        "meshes/foam/warped",
        "box:9x7x5:tet:perturb=0.2:renumber",
        "box:30x20x1:2d:perturb=0.3",
        "box:40x30x20:renumber",
        // No internal face; one row of two cells.
        "box:1x1x1",
        "box:2x1x1",
    ] {
        let mesh = load(spec);
        let (matrix, _) = poisson_system_on(&mesh, &mesh.geometry().unwrap()).unwrap();
        let n = mesh.n_cells();
        for (name, ordering) in [
            ("rcm", reverse_cuthill_mckee(&matrix)),
            ("mesh order", Permutation::identity(n)),
        ] {
            for h in [32, 96, 512] {
                let host = AssemblyMap::new(&mesh, &ordering, h).unwrap();
                let device = AssemblyMap::built_on_device(&gpu, &mesh, &ordering, h).unwrap();
                let at = format!("{spec}, {name}, slices of {h}");
                assert_eq!(device.pattern, host.pattern, "{at}: pattern");
                assert_eq!(device.face_codes, host.face_codes, "{at}: face codes");
                assert_eq!(device.face_slots, host.face_slots, "{at}: face slots");
                assert_eq!(device.device_faces, host.device_faces, "{at}: device faces");
                assert_eq!(
                    device.boundary_ptr, host.boundary_ptr,
                    "{at}: boundary pointers"
                );
                assert_eq!(
                    device.device_boundary, host.device_boundary,
                    "{at}: boundary faces"
                );
            }
        }
        println!("{spec}: {n} cells, the device's map equals the host's");
    }
    // The sizes are refused as the host refuses them.
    let mesh = load("box:4x4x4");
    let short = Permutation::identity(10);
    let host = AssemblyMap::new(&mesh, &short, 32).unwrap_err().to_string();
    let device = AssemblyMap::built_on_device(&gpu, &mesh, &short, 32)
        .expect_err("an ordering of another mesh is refused")
        .to_string();
    assert_eq!(device, host);
}

/// A shipped case with Jacobi everywhere (the GPU's preconditioner, so both
/// devices run the same algorithm), VTK output into a scratch directory and
/// no OpenFOAM time directories (they would go into the case).
fn run_shipped(name: &str, device: Device, tag: &str) -> RunSummary {
    let mut setup = read_case_dir(&repo(&format!("cases/{name}"))).unwrap();
    setup.solver.regular.preconditioner = PreconditionerKind::Jacobi.into();
    if let Some(last) = &mut setup.solver.final_corrector {
        last.preconditioner = PreconditionerKind::Jacobi.into();
    }
    run_setup(setup, name, device, tag)
}

/// `setup` run on `device` with VTK output only, into a scratch directory.
fn run_setup(mut setup: CaseSetup, name: &str, device: Device, tag: &str) -> RunSummary {
    setup.output.formats.retain(|f| *f == OutputFormat::Vtk);
    setup.output.directory =
        common::unique_temp_dir(&format!("fvpoisson_gpu_assembly_{name}_{tag}"));
    let summary = run_case(&setup, device).unwrap_or_else(|e| panic!("{name} on {tag}: {e}"));
    let _ = std::fs::remove_dir_all(&setup.output.directory);
    summary
}

#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gpu_runs_of_the_shipped_cases_match_the_cpu_runs() {
    let Some(gpu) = test_device() else { return };
    for name in [
        "mms_cube",
        "nonorth_tet",
        "neumann_box",
        "two_material",
        "laplacian_foam_skew",
        "laplacian_foam_source",
        "laplacian_foam_steady",
    ] {
        let cpu = run_shipped(name, Device::Cpu, "cpu");
        let on_gpu = run_shipped(name, Device::Gpu(&gpu), "gpu");
        let d = common::range_difference(&cpu.field, &on_gpu.field);
        println!(
            "{name}: {} cells, steps CPU {} / GPU {}, converged {} / {}, max |T_gpu - T_cpu| / \
             range {d:.1e}, L2 error CPU {:?} / GPU {:?}",
            cpu.n_cells,
            cpu.steps,
            on_gpu.steps,
            cpu.converged,
            on_gpu.converged,
            cpu.error.map(|e| e.l2),
            on_gpu.error.map(|e| e.l2)
        );
        // The same algorithm in another order of summation: steady runs may
        // stop one iteration apart at the residual control.
        assert!(cpu.steps.abs_diff(on_gpu.steps) <= 1, "{name}");
        assert_eq!(cpu.converged, on_gpu.converged, "{name}");
        assert!(d < 1e-5, "{name}: fields differ by {d:e} of their range");
    }
}

/// GAMG in a laplacian case: the GPU assembles the system itself and sets
/// its AMG-PCG up from the resident matrix (no host assembly), and the field
/// is the CPU's field of the case as shipped (DIC-PCG) to the solvers'
/// tolerance.
#[test]
#[cfg_attr(not(gpu_tests), ignore = "needs a CUDA device")]
fn gamg_runs_assemble_on_the_device_and_match_the_cpu_runs() {
    use fvpoisson::solve::gamg::GamgSettings;
    let Some(gpu) = test_device() else { return };
    for name in [
        "mms_cube",
        "nonorth_tet",
        "two_material",
        "neumann_box",
        "laplacian_foam_steady",
        "laplacian_foam_skew",
    ] {
        let shipped = read_case_dir(&repo(&format!("cases/{name}"))).unwrap();
        let mut setup = shipped.clone();
        let solvers = [&mut setup.solver.regular]
            .into_iter()
            .chain(setup.solver.final_corrector.as_mut());
        for solver in solvers {
            solver.gamg = Some(GamgSettings::default());
            solver.smoother = None;
            solver.krylov = None;
            solver.gpu_keys_given = false;
        }
        assert_eq!(
            host_assembly_reason(&setup, Device::Gpu(&gpu)),
            None,
            "{name}"
        );
        let cpu = run_setup(shipped, name, Device::Cpu, "shipped_cpu");
        let on_gpu = run_setup(setup, name, Device::Gpu(&gpu), "gamg_gpu");
        let d = common::range_difference(&cpu.field, &on_gpu.field);
        println!(
            "{name} GAMG: {} cells, steps CPU {} / GPU {}, converged {} / {}, max |T_gpu - \
             T_cpu| / range {d:.1e}",
            cpu.n_cells, cpu.steps, on_gpu.steps, cpu.converged, on_gpu.converged
        );
        assert!(cpu.steps.abs_diff(on_gpu.steps) <= 1, "{name}");
        assert_eq!(cpu.converged, on_gpu.converged, "{name}");
        assert!(d < 1e-5, "{name}: fields differ by {d:e} of their range");
    }
}
