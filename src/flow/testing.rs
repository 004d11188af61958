//! The lid-driven cavity for tests and benchmarks: its boundary conditions
//! on a box mesh and a SIMPLE loop on it from rest.

use super::{Simple, SimpleSettings, VectorValues, VelocityCondition};
use crate::fvm::BoundaryCondition;
use crate::mesh::{Geometry, Mesh, Vec3};

/// The lid-driven cavity's conditions on `mesh`, per patch: the lid `ymax`
/// moving at (1, 0, 0), `frontAndBack` empty, walls elsewhere; pressure
/// zero-gradient.
pub fn cavity_conditions(mesh: &Mesh) -> (Vec<VelocityCondition>, Vec<BoundaryCondition>) {
    let wall = VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::zeros()));
    let lid = VelocityCondition::FixedValue(VectorValues::Uniform(Vec3::new(1.0, 0.0, 0.0)));
    mesh.patches()
        .iter()
        .map(|p| match p.name.as_str() {
            "ymax" => (lid.clone(), BoundaryCondition::ZeroGradient),
            "frontAndBack" => (VelocityCondition::Empty, BoundaryCondition::Empty),
            _ => (wall.clone(), BoundaryCondition::ZeroGradient),
        })
        .unzip()
}

/// The SIMPLE loop of the lid-driven cavity ([`cavity_conditions`]) on
/// `mesh` with `settings`, from rest (U = 0, p = 0).
///
/// # Panics
/// If `settings` do not fit the mesh (a test's mistake).
pub fn lid_driven_cavity<'m>(
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    settings: SimpleSettings,
) -> Simple<'m> {
    let (velocity, pressure) = cavity_conditions(mesh);
    let n = mesh.n_cells();
    Simple::new(
        mesh,
        geometry,
        settings,
        &velocity,
        pressure,
        vec![Vec3::zeros(); n],
        vec![0.0; n],
    )
    .expect("the lid-driven cavity's settings fit its mesh")
}
