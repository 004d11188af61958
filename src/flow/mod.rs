//! Steady incompressible laminar flow on the cell-centred mesh, with the
//! semantics of OpenFOAM v1912's simpleFoam ([`simple`]: SIMPLE and SIMPLEC
//! with Rhie–Chow face fluxes) and potentialFoam ([`potential`]), and the
//! published reference data its validation cases compare with ([`reference`]).
//! User documentation: `docs/src/flow.md`.
//!
//! The flow solver is written over the Laplacian pieces of [`crate::fvm`]: each
//! velocity component's viscous term is a [`LaplacianSystem`] with Γ = ν and
//! that component's boundary conditions (matrix, boundary coefficients, the
//! explicit non-orthogonal correction, the cell gradient), convection and
//! under-relaxation are added onto a copy of its matrix, and the pressure
//! equation is a [`LaplacianSystem`] with Γ = 1/a_P per cell, linearly
//! interpolated to the faces, as OpenFOAM's `fvm::laplacian(rAU, p)`.
//!
//! [`LaplacianSystem`]: crate::fvm::LaplacianSystem

pub mod output;
pub mod piso;
pub mod potential;
pub mod reference;
pub mod simple;
pub mod taylor_green;
pub mod testing;
pub mod validation;

pub use simple::{
    Convection, IterationReport, MomentumSolver, Predicted, ResidualControl, Simple, SimpleSettings,
};

use crate::fvm::{BoundaryCondition, FvmError, PatchValues};
use crate::mesh::{Geometry, Mesh, PatchKind, Vec3};
use crate::solve::FieldSolveError;

/// Everything that can stop a flow computation; messages name the patch,
/// field or setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Fvm(#[from] FvmError),
    #[error(transparent)]
    Solve(#[from] FieldSolveError),
}

impl FlowError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(msg.into())
    }
}

/// A velocity on a patch: one vector for all faces, or one per face in patch order.
#[derive(Clone, Debug, PartialEq)]
pub enum VectorValues {
    Uniform(Vec3),
    PerFace(Vec<Vec3>),
}

impl VectorValues {
    /// Component `c` of the values, as the scalar boundary values of that component.
    fn component(&self, c: usize) -> PatchValues {
        match self {
            Self::Uniform(v) => PatchValues::Uniform(v[c]),
            Self::PerFace(v) => PatchValues::PerFace(v.iter().map(|v| v[c]).collect()),
        }
    }
}

/// Velocity boundary condition of one patch (OpenFOAM's `U` patch types).
#[derive(Clone, Debug, PartialEq)]
pub enum VelocityCondition {
    /// `fixedValue`, `noSlip` (zero), `movingWallVelocity` of a wall moving
    /// in its own plane, an inlet: the face velocity and with it the face
    /// flux U_b·S_b are given.
    FixedValue(VectorValues),
    /// `zeroGradient` (outlets).
    ZeroGradient,
    /// `symmetry`/`symmetryPlane`: zero normal component, zero normal
    /// gradient of the tangential ones. Planes normal to a coordinate axis only
    /// (then the condition is exact per component).
    Symmetry,
    /// Front and back of 2-D meshes.
    Empty,
}

impl VelocityCondition {
    /// OpenFOAM's name of the condition.
    pub fn foam_name(&self) -> &'static str {
        match self {
            Self::FixedValue(_) => "fixedValue",
            Self::ZeroGradient => "zeroGradient",
            Self::Symmetry => "symmetry",
            Self::Empty => "empty",
        }
    }
}

/// The scalar boundary conditions of velocity component `c` (0 = x), one per
/// patch, from the vector conditions. A symmetry plane makes its normal
/// component fixed at zero and the others zero-gradient.
pub fn component_conditions(
    conditions: &[VelocityCondition],
    mesh: &Mesh,
    geometry: &Geometry,
    c: usize,
) -> Result<Vec<BoundaryCondition>, FlowError> {
    if conditions.len() != mesh.patches().len() {
        return Err(FlowError::invalid(format!(
            "{} velocity conditions given for {} patches; give one per patch, in order",
            conditions.len(),
            mesh.patches().len()
        )));
    }
    conditions
        .iter()
        .zip(mesh.patches())
        .map(|(bc, patch)| {
            Ok(match bc {
                VelocityCondition::FixedValue(v) => BoundaryCondition::FixedValue(v.component(c)),
                VelocityCondition::ZeroGradient => BoundaryCondition::ZeroGradient,
                VelocityCondition::Empty => BoundaryCondition::Empty,
                VelocityCondition::Symmetry => {
                    if axis_normal(geometry, patch.faces(), &patch.name)? == c {
                        BoundaryCondition::FixedValue(PatchValues::Uniform(0.0))
                    } else {
                        BoundaryCondition::ZeroGradient
                    }
                }
            })
        })
        .collect()
}

/// The coordinate axis every face of `faces` is normal to, or an error naming
/// the patch (`what`) when the faces are not all normal to one axis.
fn axis_normal(
    geometry: &Geometry,
    faces: std::ops::Range<usize>,
    what: &str,
) -> Result<usize, FlowError> {
    const ALIGNED: f64 = 1e-9;
    let mut axis = None;
    for f in faces {
        let n = geometry.face_area_vectors[f].normalize();
        let c = n.iamax();
        if (1.0 - n[c].abs()) > ALIGNED || axis.is_some_and(|a| a != c) {
            return Err(FlowError::invalid(format!(
                "patch '{what}' (face {f}, normal ({:.3}, {:.3}, {:.3})) is not a plane normal \
                 to a coordinate axis; symmetry and empty patches must be (split the patch, or \
                 use a wall or slip-free condition)",
                n.x, n.y, n.z
            )));
        }
        axis = Some(c);
    }
    axis.ok_or_else(|| FlowError::invalid(format!("patch '{what}' has no faces")))
}

/// The velocity components solved for: all three, or on a 2-D mesh (empty
/// patches, all normal to one axis) the two in the plane.
pub fn solved_components(mesh: &Mesh, geometry: &Geometry) -> Result<Vec<usize>, FlowError> {
    let mut normal = None;
    for patch in mesh.patches().iter().filter(|p| p.kind == PatchKind::Empty) {
        if patch.size == 0 {
            continue;
        }
        let axis = axis_normal(geometry, patch.faces(), &patch.name)?;
        if normal.is_some_and(|a| a != axis) {
            return Err(FlowError::invalid(format!(
                "empty patch '{}' is normal to another axis than the other empty patches; \
                 a 2-D mesh has its empty patches on one axis",
                patch.name
            )));
        }
        normal = Some(axis);
    }
    Ok((0..3).filter(|&c| Some(c) != normal).collect())
}
