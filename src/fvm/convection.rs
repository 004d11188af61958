//! Implicit `bounded Gauss upwind` convection, ∇·(φ u) − (∇·φ) u, added to an
//! assembled FVM matrix (OpenFOAM's `gaussConvectionScheme` with the upwind
//! weights, and the `bounded` variant steady solvers use). The SIMPLE loop's
//! momentum equations (`flow::simple`) take it with the fluxes of the last
//! iteration; [`convection_diffusion`] builds the nonsymmetric
//! convection–diffusion systems the GMRES/BiCGStab tests and bench solve.
//!
//! Face fluxes φ are given on every face: owner to neighbour on internal
//! faces, outward on boundary faces (0 on empty faces).

use super::{
    BoundaryCoeffs, BoundaryCondition, CellField, FvmError, LaplacianProblem, LaplacianSystem,
    PatchValues, Schemes, SlotMap,
};
use crate::mesh::{Geometry, Mesh, PatchKind, Vec3};
use crate::sparse::Csr;

/// Adds the internal faces' upwind coefficients to the matrix `values`
/// (slots of `slots`): per face with flux F, the owner's diagonal gets
/// max(F, 0) − F and its upper coefficient min(F, 0); the neighbour's diagonal
/// max(−F, 0) + F and its lower coefficient min(−F, 0) (the −F / +F terms are
/// the bounded form's −(∇·φ) u_P).
pub fn add_upwind_internal(mesh: &Mesh, slots: &SlotMap, phi: &[f64], values: &mut [f64]) {
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    for f in 0..mesh.n_internal_faces() {
        let (o, n) = (owner[f] as usize, neighbour[f] as usize);
        let flux = phi[f];
        values[slots.diagonal[o] as usize] += flux.max(0.0) - flux;
        values[slots.upper[f] as usize] += flux.min(0.0);
        values[slots.diagonal[n] as usize] += (-flux).max(0.0) + flux;
        values[slots.lower[f] as usize] += (-flux).min(0.0);
    }
}

/// Adds the boundary faces' upwind terms: F_b (valueInternal u_P +
/// valueBoundary) − F_b u_P, the implicit part on the diagonal, the explicit
/// one on the right-hand side `source` (inactive faces, empty ones, skipped).
pub fn add_upwind_boundary(
    mesh: &Mesh,
    slots: &SlotMap,
    bc: &BoundaryCoeffs,
    phi: &[f64],
    values: &mut [f64],
    source: &mut [f64],
) {
    let first = mesh.n_internal_faces();
    let owner = mesh.owner();
    for b in (0..bc.active.len()).filter(|&b| bc.active[b]) {
        let o = owner[first + b] as usize;
        let flux = phi[first + b];
        values[slots.diagonal[o] as usize] += flux * (bc.value_internal[b] - 1.0);
        source[o] -= flux * bc.value_boundary[b];
    }
}

/// φ_f = U(x_f) · S_f on every face (0 on empty patches' faces).
pub fn face_flux(mesh: &Mesh, geometry: &Geometry, velocity: impl Fn(Vec3) -> Vec3) -> Vec<f64> {
    let mut phi: Vec<f64> = (0..mesh.n_faces())
        .map(|f| velocity(geometry.face_centre(mesh, f)).dot(&geometry.area_vector(mesh, f)))
        .collect();
    for patch in mesh.patches() {
        if patch.kind == PatchKind::Empty {
            phi[patch.start..patch.start + patch.size].fill(0.0);
        }
    }
    phi
}

/// The steady convection–diffusion system ∇·(U u) − (∇·U) u − ∇·(Γ∇u) = q
/// on `mesh`: Γ uniform, bounded upwind convection with the fluxes of
/// `velocity`, u = 0 on every patch that is not empty, q = 1 + x·y. The cell
/// Péclet number is about |U| h / Γ: above 2 the matrix is far from
/// symmetric. Returns the matrix and the right-hand side.
pub fn convection_diffusion(
    mesh: &Mesh,
    geometry: &Geometry,
    gamma: f64,
    velocity: impl Fn(Vec3) -> Vec3,
) -> Result<(Csr, Vec<f64>), FvmError> {
    let boundary = BoundaryCondition::on_every_patch(
        mesh,
        BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
    );
    let problem = LaplacianProblem::steady(
        CellField::Uniform(gamma),
        CellField::function(|c| 1.0 + c.x * c.y),
        boundary,
    );
    let system = LaplacianSystem::new(mesh, geometry, Schemes::default(), &problem)?;
    let phi = face_flux(mesh, geometry, velocity);
    let mut a = system.matrix.clone();
    let mut b = system.rhs.clone();
    add_upwind_internal(mesh, system.slots(), &phi, a.values_mut());
    add_upwind_boundary(
        mesh,
        system.slots(),
        system.boundary_coeffs(),
        &phi,
        a.values_mut(),
        &mut b,
    );
    Ok((a, b))
}

/// The rotating flow U = s (−(y − ½), x − ½, ½) of a unit box, scaled by `s`:
/// swirling, so that no row ordering makes the upwind matrix triangular.
pub fn swirl(s: f64) -> impl Fn(Vec3) -> Vec3 {
    move |c: Vec3| Vec3::new(-(c.y - 0.5), c.x - 0.5, 0.5) * s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_rows_sum_to_zero_off_diagonals_are_negative_and_the_matrix_is_nonsymmetric() {
        // Diffusion rows and the bounded upwind rows of a divergence-free flow
        // sum to zero away from the boundary (A · 1 = 0 there).
        let mesh = crate::mesh::source::load("box:6x5x4:tet:perturb=0.2").unwrap();
        let geometry = mesh.geometry().unwrap();
        let (a, _) = convection_diffusion(&mesh, &geometry, 0.01, swirl(1.0)).unwrap();
        let mut on_boundary = vec![false; a.n_rows()];
        for f in mesh.n_internal_faces()..mesh.n_faces() {
            on_boundary[mesh.owner()[f] as usize] = true;
        }
        let (mut asymmetric, mut interior) = (0, 0);
        for (r, &boundary_row) in on_boundary.iter().enumerate() {
            let (cols, vals) = a.row(r);
            let (mut diag, mut sum) = (0.0, 0.0);
            for (&c, &v) in cols.iter().zip(vals) {
                sum += v;
                if c as usize == r {
                    diag = v;
                    continue;
                }
                assert!(v <= 0.0, "row {r}: off-diagonal {v}");
                let mirror = a.values()[a.slot(c as usize, r).unwrap()];
                if (mirror - v).abs() > 1e-12 * v.abs() {
                    asymmetric += 1;
                }
            }
            assert!(diag > 0.0, "row {r}");
            if !boundary_row {
                interior += 1;
                assert!(
                    sum.abs() < 1e-12 * diag,
                    "row {r}: sum {sum:e}, diagonal {diag}"
                );
            }
        }
        assert!(interior > 0);
        assert!(
            asymmetric > (a.nnz() - a.n_rows()) / 2,
            "{asymmetric} of {}",
            a.nnz()
        );
    }
}
