//! Boundary conditions as OpenFOAM expresses them (`fvPatchField`): the face
//! value is `valueInternalCoeffs·p_P + valueBoundaryCoeffs` and the face-normal
//! gradient is `gradientInternalCoeffs·p_P + gradientBoundaryCoeffs`, with the
//! patch `deltaCoeffs` Δ_b = 1/|n·(C_f − C_P)| (see [`super::schemes`]).
//!
//! | condition | valueInternal | valueBoundary | gradientInternal | gradientBoundary |
//! |---|---|---|---|---|
//! | fixedValue v | 0 | v | −Δ_b | Δ_b·v |
//! | zeroGradient | 1 | 0 | 0 | 0 |
//! | fixedGradient g | 1 | g/Δ_b | 0 | g |
//! | mixed (v, g, f) | 1 − f | f·v + (1 − f)·g/Δ_b | −f·Δ_b | f·Δ_b·v + (1 − f)·g |
//!
//! The Laplacian takes, per face, −Γ_b|S_b|·gradientInternal onto the diagonal
//! and Γ_b|S_b|·gradientBoundary onto the right-hand side. These are OpenFOAM's
//! `gaussLaplacianScheme` `internalCoeffs` and `boundaryCoeffs` negated, because
//! our matrix is the negated (positive-diagonal) `fvm::laplacian`. `empty`
//! patches contribute nothing, to the matrix or to gradients (2-D meshes).

use super::{check_values, FvmError};
use crate::mesh::{Mesh, PatchKind};

/// Values on a patch: one for all faces, or one per face in patch order.
#[derive(Clone, Debug, PartialEq)]
pub enum PatchValues {
    Uniform(f64),
    PerFace(Vec<f64>),
}

impl PatchValues {
    /// Value on face `i` of the patch (checked lengths: see [`BoundaryCondition::check`]).
    fn at(&self, i: usize) -> f64 {
        match self {
            Self::Uniform(v) => *v,
            Self::PerFace(v) => v[i],
        }
    }

    fn check(&self, size: usize, what: &str, patch: &str) -> Result<(), FvmError> {
        match self {
            Self::PerFace(v) if v.len() != size => Err(FvmError::invalid(format!(
                "patch '{patch}': {what} has {} values but the patch has {size} faces",
                v.len()
            ))),
            Self::PerFace(v) => {
                check_values(v, false, |i| format!("patch '{patch}': {what} on face {i}"))
            }
            Self::Uniform(v) => check_values(&[*v], false, |_| format!("patch '{patch}': {what}")),
        }
    }
}

/// Boundary condition of one patch (OpenFOAM semantics, see the module table),
/// with its values as `V`: [`PatchValues`] here; the case set-up's
/// [`BoundarySpec`](crate::case::BoundarySpec) holds functions of position and time.
#[derive(Clone, Debug, PartialEq)]
pub enum BoundaryCondition<V = PatchValues> {
    FixedValue(V),
    ZeroGradient,
    /// Outward face-normal gradient ∂p/∂n.
    FixedGradient(V),
    /// `mixed`: value_fraction·ref_value Dirichlet blended with
    /// (1 − value_fraction)·ref_gradient Neumann.
    Mixed {
        ref_value: V,
        ref_gradient: V,
        value_fraction: V,
    },
    /// For patches of kind `empty` only (front and back of 2-D meshes).
    Empty,
}

impl<V> BoundaryCondition<V> {
    /// OpenFOAM's name of the condition.
    pub fn foam_name(&self) -> &'static str {
        match self {
            Self::FixedValue(_) => "fixedValue",
            Self::ZeroGradient => "zeroGradient",
            Self::FixedGradient(_) => "fixedGradient",
            Self::Mixed { .. } => "mixed",
            Self::Empty => "empty",
        }
    }

    /// `condition` on every patch of `mesh` but the empty ones, which are
    /// `Empty`: one per patch, in patch order.
    pub fn on_every_patch(mesh: &Mesh, condition: Self) -> Vec<Self>
    where
        V: Clone,
    {
        mesh.patches()
            .iter()
            .map(|p| match p.kind {
                PatchKind::Empty => Self::Empty,
                _ => condition.clone(),
            })
            .collect()
    }
}

impl BoundaryCondition {
    /// Checks one condition per patch, in patch order: value counts, finite
    /// values, value fractions in [0, 1], `empty` exactly on empty patches.
    pub fn check(conditions: &[Self], mesh: &Mesh) -> Result<(), FvmError> {
        let patches = mesh.patches();
        if conditions.len() != patches.len() {
            return Err(FvmError::invalid(format!(
                "{} boundary conditions given for {} patches ({}); give one per patch, in order",
                conditions.len(),
                patches.len(),
                patches
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        for (bc, patch) in conditions.iter().zip(patches) {
            let (name, size) = (patch.name.as_str(), patch.size);
            let is_empty_patch = patch.kind == PatchKind::Empty;
            if is_empty_patch != (*bc == Self::Empty) {
                return Err(FvmError::invalid(format!(
                    "patch '{name}' is of type {} but has boundary condition {}; empty patches need \
                     the empty condition and only they may have it",
                    patch.kind.foam_name(),
                    bc.foam_name()
                )));
            }
            match bc {
                Self::FixedValue(v) => v.check(size, "value", name)?,
                Self::FixedGradient(g) => g.check(size, "gradient", name)?,
                Self::Mixed {
                    ref_value,
                    ref_gradient,
                    value_fraction,
                } => {
                    ref_value.check(size, "refValue", name)?;
                    ref_gradient.check(size, "refGradient", name)?;
                    value_fraction.check(size, "valueFraction", name)?;
                    if let Some(i) =
                        (0..size).find(|&i| !(0.0..=1.0).contains(&value_fraction.at(i)))
                    {
                        return Err(FvmError::invalid(format!(
                            "patch '{name}': valueFraction on face {i} is {}; it must be between 0 and 1",
                            value_fraction.at(i)
                        )));
                    }
                }
                Self::ZeroGradient | Self::Empty => {}
            }
        }
        Ok(())
    }

    /// Looks conditions up by patch name: every patch must be named exactly once.
    pub fn by_name(mesh: &Mesh, named: Vec<(&str, Self)>) -> Result<Vec<Self>, FvmError> {
        let mut out: Vec<Option<Self>> = vec![None; mesh.patches().len()];
        for (name, bc) in named {
            let i = mesh
                .patches()
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| {
                    FvmError::invalid(format!("boundary condition for unknown patch '{name}'"))
                })?;
            if out[i].replace(bc).is_some() {
                return Err(FvmError::invalid(format!(
                    "patch '{name}' has two boundary conditions"
                )));
            }
        }
        out.into_iter()
            .zip(mesh.patches())
            .map(|(bc, p)| {
                bc.ok_or_else(|| {
                    FvmError::invalid(format!("patch '{}' has no boundary condition", p.name))
                })
            })
            .collect()
    }
}

/// The four OpenFOAM coefficients of every boundary face, indexed by
/// `face − n_internal_faces`; `active` is false on empty-patch faces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BoundaryCoeffs {
    pub value_internal: Vec<f64>,
    pub value_boundary: Vec<f64>,
    pub gradient_internal: Vec<f64>,
    pub gradient_boundary: Vec<f64>,
    pub active: Vec<bool>,
}

impl BoundaryCoeffs {
    /// Coefficients of checked conditions, `patch_delta_coeffs` per boundary face.
    pub fn new(conditions: &[BoundaryCondition], mesh: &Mesh, patch_delta_coeffs: &[f64]) -> Self {
        let n = patch_delta_coeffs.len();
        let mut c = Self {
            value_internal: vec![0.0; n],
            value_boundary: vec![0.0; n],
            gradient_internal: vec![0.0; n],
            gradient_boundary: vec![0.0; n],
            active: vec![true; n],
        };
        let first = mesh.n_internal_faces();
        for (bc, patch) in conditions.iter().zip(mesh.patches()) {
            for i in 0..patch.size {
                let b = patch.start + i - first;
                let delta = patch_delta_coeffs[b];
                let (vi, vb, gi, gb) = match bc {
                    BoundaryCondition::FixedValue(v) => (0.0, v.at(i), -delta, delta * v.at(i)),
                    BoundaryCondition::ZeroGradient => (1.0, 0.0, 0.0, 0.0),
                    BoundaryCondition::FixedGradient(g) => (1.0, g.at(i) / delta, 0.0, g.at(i)),
                    BoundaryCondition::Mixed {
                        ref_value,
                        ref_gradient,
                        value_fraction,
                    } => {
                        let (v, g, f) = (ref_value.at(i), ref_gradient.at(i), value_fraction.at(i));
                        (
                            1.0 - f,
                            f * v + (1.0 - f) * g / delta,
                            -f * delta,
                            f * delta * v + (1.0 - f) * g,
                        )
                    }
                    BoundaryCondition::Empty => {
                        c.active[b] = false;
                        (0.0, 0.0, 0.0, 0.0)
                    }
                };
                c.value_internal[b] = vi;
                c.value_boundary[b] = vb;
                c.gradient_internal[b] = gi;
                c.gradient_boundary[b] = gb;
            }
        }
        c
    }

    /// Face values of `p` on the boundary faces (0 on empty faces, never read).
    pub fn face_values(&self, mesh: &Mesh, p: &[f64]) -> Vec<f64> {
        use rayon::prelude::*;
        let first = mesh.n_internal_faces();
        (0..self.active.len())
            .into_par_iter()
            .with_min_len(1 << 14)
            .map(|b| {
                let owner = mesh.owner()[first + b] as usize;
                self.value_internal[b] * p[owner] + self.value_boundary[b]
            })
            .collect()
    }
}
