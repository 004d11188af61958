//! SIMPLE loops from rest for tests and benchmarks: on any patch conditions,
//! and the lid-driven cavity's on a box mesh.

use super::{Simple, SimpleSettings, VectorValues, VelocityCondition};
use crate::fvm::BoundaryCondition;
use crate::mesh::{Geometry, Mesh, Vec3};

/// The velocity and pressure condition of every patch of a mesh, in patch
/// order.
pub type Conditions = (Vec<VelocityCondition>, Vec<BoundaryCondition>);

/// The lid-driven cavity's conditions on `mesh`, per patch: the lid `ymax`
/// moving at (1, 0, 0), `frontAndBack` empty, walls elsewhere; pressure
/// zero-gradient.
pub fn cavity_conditions(mesh: &Mesh) -> Conditions {
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

/// The SIMPLE loop on `mesh` with `settings` and the patch conditions
/// `conditions`, from rest (U = 0, p = 0).
///
/// # Panics
/// If `settings` or `conditions` do not fit the mesh (a test's mistake).
pub fn simple_from_rest<'m>(
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    settings: SimpleSettings,
    (velocity, pressure): Conditions,
) -> Simple<'m> {
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
    .expect("the test's settings and conditions fit its mesh")
}

/// The SIMPLE loop of the lid-driven cavity ([`cavity_conditions`]) on
/// `mesh` with `settings`, from rest.
pub fn lid_driven_cavity<'m>(
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    settings: SimpleSettings,
) -> Simple<'m> {
    simple_from_rest(mesh, geometry, settings, cavity_conditions(mesh))
}
