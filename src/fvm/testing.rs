//! Boundary conditions, schemes, Γ, sources and fields for tests and
//! benchmarks (deterministic from a seed).

use super::{
    BoundaryCondition, CellField, FvmError, GammaInterpolation, GradScheme, LaplacianProblem,
    LaplacianSystem, PatchValues, Reference, Schemes, SingularPolicy, SnGradScheme, TimeScheme,
};
use crate::mesh::{Geometry, Mesh, PatchKind};
use crate::sparse::testing::SplitMix;
use crate::sparse::Csr;

/// One condition per patch: over the non-empty patches in turn fixedValue,
/// zeroGradient, fixedGradient and mixed (starting at kind `seed % 4`), with
/// per-face values in [−1, 1) drawn from `seed` (mixed: value fractions in
/// [0, 1] with the first face 0 and the second 1); `empty` on empty patches.
pub fn mixed_conditions(mesh: &Mesh, seed: u64) -> Vec<BoundaryCondition> {
    let mut rng = SplitMix(seed);
    let mut kind = seed as usize % 4;
    mesh.patches()
        .iter()
        .map(|patch| {
            if patch.kind == PatchKind::Empty {
                return BoundaryCondition::Empty;
            }
            let mut values = |fraction: bool| {
                PatchValues::PerFace(
                    (0..patch.size)
                        .map(|i| match (fraction, i) {
                            (true, 0) => 0.0,
                            (true, 1) => 1.0,
                            (true, _) => rng.next_f64(),
                            (false, _) => 2.0 * rng.next_f64() - 1.0,
                        })
                        .collect(),
                )
            };
            kind += 1;
            match (kind - 1) % 4 {
                0 => BoundaryCondition::FixedValue(values(false)),
                1 => BoundaryCondition::ZeroGradient,
                2 => BoundaryCondition::FixedGradient(values(false)),
                _ => BoundaryCondition::Mixed {
                    ref_value: values(false),
                    ref_gradient: values(false),
                    value_fraction: values(true),
                },
            }
        })
        .collect()
}

/// `sn_grad` and `grad` with harmonic (else linear) interpolation of Γ.
pub fn schemes(sn_grad: SnGradScheme, grad: GradScheme, harmonic: bool) -> Schemes {
    Schemes {
        sn_grad,
        grad,
        gamma_interpolation: if harmonic {
            GammaInterpolation::Harmonic
        } else {
            GammaInterpolation::Linear
        },
    }
}

/// A smooth Γ that varies by a factor of about three over the unit box.
pub fn varying_gamma() -> CellField {
    CellField::function(|c| 1.0 + 0.5 * (3.0 * c.x).sin() + c.y * c.z)
}

/// A smooth source term that changes sign over the unit box.
pub fn source() -> CellField {
    CellField::function(|c| 1.0 + c.x - 2.0 * c.y * c.z)
}

/// Two different problems on `mesh` for tests of re-assembly: Γ = 2 with
/// [`source`] and conditions of seed 3, then [`varying_gamma`] with q = −1
/// and conditions of seed 6.
pub fn two_problems(mesh: &Mesh) -> (LaplacianProblem, LaplacianProblem) {
    let first =
        LaplacianProblem::steady(CellField::Uniform(2.0), source(), mixed_conditions(mesh, 3));
    let second = LaplacianProblem::steady(
        varying_gamma(),
        CellField::Uniform(-1.0),
        mixed_conditions(mesh, 6),
    );
    (first, second)
}

/// `n` values uniform in [−1, 1) drawn from `seed`.
pub fn random_field(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect()
}

/// The singular problem: zeroGradient on every patch with [`varying_gamma`]
/// and [`source`], projected onto the range and fixed by `reference`.
pub fn all_neumann_problem(mesh: &Mesh, reference: Reference) -> LaplacianProblem {
    let neumann = vec![BoundaryCondition::ZeroGradient; mesh.patches().len()];
    let mut problem = LaplacianProblem::steady(varying_gamma(), source(), neumann);
    problem.singular = SingularPolicy {
        reference,
        project: true,
        tolerance: 1e-9,
    };
    problem
}

/// The problems of one mesh that the assembly tests compare, named by their
/// Γ: [`varying_gamma`] and a uniform 0.7, each with [`source`] and
/// [`mixed_conditions`] of `seed`; Euler with Δt = 0.05 if `euler`, else steady.
pub fn varying_and_uniform_gamma(
    mesh: &Mesh,
    seed: u64,
    euler: bool,
) -> [(&'static str, LaplacianProblem); 2] {
    [
        ("varying", varying_gamma()),
        ("uniform", CellField::Uniform(0.7)),
    ]
    .map(|(what, gamma)| {
        let mut problem = LaplacianProblem::steady(gamma, source(), mixed_conditions(mesh, seed));
        if euler {
            problem.time = TimeScheme::Euler { dt: 0.05 };
        }
        (what, problem)
    })
}

/// Nonsymmetric test systems (name, A, x*, b = A x*): steady convection–
/// diffusion (`convection::convection_diffusion`, swirling flow, cell Péclet
/// numbers above 2) on a hex box, a perturbed renumbered tet box, the
/// polyhedral OpenFOAM mesh and a Gmsh prism mesh (paths relative to the
/// repository root), with a random manufactured solution x*.
pub fn convection_diffusion_systems() -> Vec<(String, Csr, Vec<f64>, Vec<f64>)> {
    [
        ("box:12x12x12", 0.005),
        ("box:7x6x5:tet:perturb=0.2:renumber", 0.01),
        ("meshes/foam/polydual", 0.01),
        ("meshes/gmsh/prism_wedge.v22.msh", 0.01),
    ]
    .into_iter()
    .map(|(spec, gamma)| convection_diffusion_system(spec, gamma))
    .collect()
}

/// One system of [`convection_diffusion_systems`]: the mesh `spec`, Γ = `gamma`.
pub fn convection_diffusion_system(spec: &str, gamma: f64) -> (String, Csr, Vec<f64>, Vec<f64>) {
    let mesh = crate::mesh::source::load(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let geometry = mesh.geometry().unwrap();
    let (a, _) = super::convection::convection_diffusion(
        &mesh,
        &geometry,
        gamma,
        super::convection::swirl(1.0),
    )
    .unwrap();
    let x_true = crate::sparse::testing::random_vector(a.n_rows(), 11);
    let mut b = vec![0.0; a.n_rows()];
    a.spmv(&x_true, &mut b);
    (spec.to_string(), a, x_true, b)
}

/// −∇·(Γ∇p) = 1 + x·y with p = 0 on every patch (empty patches stay empty).
pub fn poisson_problem(mesh: &Mesh, gamma: CellField) -> LaplacianProblem {
    let boundary = BoundaryCondition::on_every_patch(
        mesh,
        BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
    );
    LaplacianProblem::steady(gamma, CellField::function(|c| 1.0 + c.x * c.y), boundary)
}

/// The matrix and right-hand side of [`poisson_problem`] with Γ = 1 on a mesh.
pub fn poisson_system_on(mesh: &Mesh, geometry: &Geometry) -> Result<(Csr, Vec<f64>), FvmError> {
    let problem = poisson_problem(mesh, CellField::Uniform(1.0));
    let system = LaplacianSystem::new(mesh, geometry, Schemes::default(), &problem)?;
    Ok((system.matrix, system.rhs))
}

/// The matrix and right-hand side of [`poisson_problem`] with Γ = 1 on the
/// mesh a source names (`box:8x8x8:tet`, a case directory, a Gmsh file; see
/// `mesh::source`): the CPU tests' Poisson systems.
pub fn poisson_system(source: &str) -> anyhow::Result<(Csr, Vec<f64>)> {
    let mesh = crate::mesh::source::load(source)?;
    let geometry = mesh.geometry()?;
    Ok(poisson_system_on(&mesh, &geometry)?)
}
