//! Cell gradients for the non-orthogonal correction: OpenFOAM's `gaussGrad`
//! with linear interpolation, and `leastSquaresGrad` with `leastSquaresVectors`.

use super::{boundary::BoundaryCoeffs, FvmError, GradScheme};
use crate::mesh::{split_by_parts, Geometry, Mesh, PartSides, Vec3};
use nalgebra::Matrix3;
use rayon::prelude::*;

/// What a gradient needs beyond the field: fixed per mesh and scheme.
#[derive(Clone, Debug, PartialEq)]
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
    ///
    /// The cells are summed in parallel over the mesh's cell parts
    /// (`PartSides`), each part adding its cells' face sides in face order,
    /// the internal faces before the boundary ones: the bits of the serial
    /// face loop (OpenFOAM's) on any number of threads.
    pub fn compute(
        &self,
        mesh: &Mesh,
        geometry: &Geometry,
        bc: &BoundaryCoeffs,
        p: &[f64],
    ) -> Vec<Vec3> {
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let n_internal = mesh.n_internal_faces();
        let face_values = bc.face_values(mesh, p);
        let sf = |f: usize| geometry.area_vector(mesh, f);
        // What face f's side adds to its cell c (the neighbour side of an
        // internal face subtracts it), as the serial loops compute it.
        let side = |f: usize, c: usize| -> Option<Vec3> {
            if f >= n_internal {
                let b = f - n_internal;
                return bc.active[b].then(|| match self {
                    Self::GaussLinear => sf(f) * face_values[b],
                    Self::LeastSquares { boundary, .. } => boundary[b] * (face_values[b] - p[c]),
                });
            }
            let (o, n) = (owner[f] as usize, neighbour[f] as usize);
            Some(match self {
                Self::GaussLinear => {
                    let w = geometry.weight(mesh, f);
                    sf(f) * (w * (p[o] - p[n]) + p[n])
                }
                Self::LeastSquares {
                    owner: own_ls,
                    neighbour: nei_ls,
                    ..
                } => match c == o {
                    true => own_ls[f] * (p[n] - p[o]),
                    false => nei_ls[f] * (p[n] - p[o]),
                },
            })
        };
        let mut grad = vec![Vec3::zeros(); mesh.n_cells()];
        let sides = PartSides::new(mesh);
        let parts = sides.parts();
        split_by_parts(&mut grad, parts)
            .into_par_iter()
            .zip(parts)
            .enumerate()
            .for_each(|(part, (grad, cells))| {
                sides.for_each(mesh, part, |f, c, is_owner| {
                    if let Some(v) = side(f, c) {
                        let g = &mut grad[c - cells.start];
                        match is_owner || f >= n_internal {
                            true => *g += v,
                            false => *g -= v,
                        }
                    }
                });
                if let Self::GaussLinear = self {
                    for (g, v) in grad.iter_mut().zip(&geometry.cell_volumes[cells.clone()]) {
                        *g /= *v;
                    }
                }
            });
        grad
    }
}

/// OpenFOAM (ESI) `leastSquaresVectors`: face weights |S_f|/|d|², split on
/// internal faces by the interpolation weight w (owner side 1 − w, neighbour
/// side w, so the nearer cell's face counts more); dd = Σ weight·d dᵀ per cell
/// over internal and non-empty boundary faces (boundary d the patch-normal
/// delta); face vectors weight·dd⁻¹ d (owner) and −weight·dd⁻¹_N d (neighbour).
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
    // (owner-side weight, neighbour-side weight, d) of every internal face.
    let internal: Vec<(f64, f64, Vec3)> = (0..n_internal)
        .map(|f| {
            let d = centres[neighbour[f] as usize] - centres[owner[f] as usize];
            let area_by_d2 = geometry.area_vector(mesh, f).norm() / d.norm_squared();
            let w = geometry.weight(mesh, f);
            ((1.0 - w) * area_by_d2, w * area_by_d2, d)
        })
        .collect();
    let boundary_weight = |b: usize| {
        geometry.area_vector(mesh, n_internal + b).norm() / patch_deltas[b].norm_squared()
    };
    let mut dd = vec![Matrix3::zeros(); mesh.n_cells()];
    for (f, &(w_own, w_nei, d)) in internal.iter().enumerate() {
        let ddt = d * d.transpose();
        dd[owner[f] as usize] += w_own * ddt;
        dd[neighbour[f] as usize] += w_nei * ddt;
    }
    for (b, d) in patch_deltas.iter().enumerate() {
        if active[b] {
            dd[owner[n_internal + b] as usize] += boundary_weight(b) * (d * d.transpose());
        }
    }
    let inv = invert_fill_missing(&dd)?;
    let (own_ls, nei_ls) = internal
        .iter()
        .enumerate()
        .map(|(f, &(w_own, w_nei, d))| {
            (
                w_own * (inv[owner[f] as usize] * d),
                -w_nei * (inv[neighbour[f] as usize] * d),
            )
        })
        .unzip();
    let bnd_ls = patch_deltas
        .iter()
        .enumerate()
        .map(|(b, d)| boundary_weight(b) * (inv[owner[n_internal + b] as usize] * d))
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
