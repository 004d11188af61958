//! Cell gradients for the non-orthogonal correction: OpenFOAM's `gaussGrad`
//! with linear interpolation, and `leastSquaresGrad` with `leastSquaresVectors`.

use super::{boundary::BoundaryCoeffs, FvmError, GradScheme};
use crate::mesh::{Geometry, Mesh, Vec3};
use nalgebra::Matrix3;

/// What a gradient needs beyond the field: fixed per mesh and scheme.
#[derive(Clone, Debug)]
pub enum CellGradient {
    GaussLinear,
    /// Least-squares vectors: owner and neighbour vector of each internal face,
    /// and the owner vector of each boundary face.
    LeastSquares {
        owner: Vec<Vec3>,
        neighbour: Vec<Vec3>,
        boundary: Vec<Vec3>,
    },
}

impl CellGradient {
    /// Prepares the scheme; `active` marks non-empty boundary faces and
    /// `patch_deltas` are the boundary deltas (`fvPatch::delta`).
    pub fn new(
        scheme: GradScheme,
        mesh: &Mesh,
        geometry: &Geometry,
        patch_deltas: &[Vec3],
        active: &[bool],
    ) -> Result<Self, FvmError> {
        match scheme {
            GradScheme::GaussLinear => Ok(Self::GaussLinear),
            GradScheme::LeastSquares => least_squares_vectors(mesh, geometry, patch_deltas, active),
        }
    }

    /// Gradient of `p` in every cell, boundary face values from `bc`.
    pub fn compute(
        &self,
        mesh: &Mesh,
        geometry: &Geometry,
        bc: &BoundaryCoeffs,
        p: &[f64],
    ) -> Vec<Vec3> {
        let owner = mesh.owner();
        let neighbour = mesh.neighbour();
        let n_internal = mesh.n_internal_faces();
        let face_values = bc.face_values(mesh, p);
        let mut grad = vec![Vec3::zeros(); mesh.n_cells()];
        match self {
            Self::GaussLinear => {
                let sf = &geometry.face_area_vectors;
                for f in 0..n_internal {
                    let (o, n) = (owner[f] as usize, neighbour[f] as usize);
                    let w = geometry.weights[f];
                    let flux = sf[f] * (w * (p[o] - p[n]) + p[n]);
                    grad[o] += flux;
                    grad[n] -= flux;
                }
                for (b, &value) in face_values.iter().enumerate() {
                    if bc.active[b] {
                        grad[owner[n_internal + b] as usize] += sf[n_internal + b] * value;
                    }
                }
                for (g, v) in grad.iter_mut().zip(&geometry.cell_volumes) {
                    *g /= *v;
                }
            }
            Self::LeastSquares {
                owner: own_ls,
                neighbour: nei_ls,
                boundary: bnd_ls,
            } => {
                for f in 0..n_internal {
                    let (o, n) = (owner[f] as usize, neighbour[f] as usize);
                    let dp = p[n] - p[o];
                    grad[o] += own_ls[f] * dp;
                    grad[n] -= nei_ls[f] * dp;
                }
                for (b, &value) in face_values.iter().enumerate() {
                    if bc.active[b] {
                        let o = owner[n_internal + b] as usize;
                        grad[o] += bnd_ls[b] * (value - p[o]);
                    }
                }
            }
        }
        grad
    }
}

/// OpenFOAM `leastSquaresVectors`: dd = Σ d dᵀ/|d|² per cell over internal and
/// non-empty boundary faces; face vectors dd⁻¹ d/|d|² (owner) and −dd⁻¹_N d/|d|²
/// (neighbour).
fn least_squares_vectors(
    mesh: &Mesh,
    geometry: &Geometry,
    patch_deltas: &[Vec3],
    active: &[bool],
) -> Result<CellGradient, FvmError> {
    let owner = mesh.owner();
    let neighbour = mesh.neighbour();
    let n_internal = mesh.n_internal_faces();
    let centres = &geometry.cell_centres;
    let mut dd = vec![Matrix3::zeros(); mesh.n_cells()];
    for f in 0..n_internal {
        let d = centres[neighbour[f] as usize] - centres[owner[f] as usize];
        let wdd = d * d.transpose() / d.norm_squared();
        dd[owner[f] as usize] += wdd;
        dd[neighbour[f] as usize] += wdd;
    }
    for (b, d) in patch_deltas.iter().enumerate() {
        if active[b] {
            dd[owner[n_internal + b] as usize] += d * d.transpose() / d.norm_squared();
        }
    }
    let inv = invert_fill_missing(&dd)?;
    let mut own_ls = Vec::with_capacity(n_internal);
    let mut nei_ls = Vec::with_capacity(n_internal);
    for f in 0..n_internal {
        let d = centres[neighbour[f] as usize] - centres[owner[f] as usize];
        let w = 1.0 / d.norm_squared();
        own_ls.push(w * (inv[owner[f] as usize] * d));
        nei_ls.push(-w * (inv[neighbour[f] as usize] * d));
    }
    let bnd_ls = patch_deltas
        .iter()
        .enumerate()
        .map(|(b, d)| (inv[owner[n_internal + b] as usize] * d) / d.norm_squared())
        .collect();
    Ok(CellGradient::LeastSquares {
        owner: own_ls,
        neighbour: nei_ls,
        boundary: bnd_ls,
    })
}

/// Inverts every tensor. As OpenFOAM's `inv(symmTensorField)`: a direction
/// absent from the first tensor (a 2-D mesh's empty direction) gets 1 added to
/// its diagonal before and subtracted after the inversion, giving a zero
/// gradient component instead of a singular tensor.
fn invert_fill_missing(tensors: &[Matrix3<f64>]) -> Result<Vec<Matrix3<f64>>, FvmError> {
    let Some(first) = tensors.first() else {
        return Ok(Vec::new());
    };
    let scale = first.norm_squared();
    let fill = Matrix3::from_diagonal(&Vec3::from_fn(|i, _| {
        if first[(i, i)].powi(2) / scale < 1e-15 {
            1.0
        } else {
            0.0
        }
    }));
    tensors
        .iter()
        .enumerate()
        .map(|(c, t)| {
            (t + fill)
                .try_inverse()
                .map(|inv| inv - fill)
                .ok_or_else(|| {
                    FvmError::invalid(format!(
                        "cell {c}: the least-squares gradient is undefined (its neighbours' directions \
                         span less than the mesh dimension); use the Gauss linear gradient"
                    ))
                })
        })
        .collect()
}
