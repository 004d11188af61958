//! Potential flow with the semantics of OpenFOAM v1912's potentialFoam.
//!
//! The flux starts as that of the initial velocity with its interior set to
//! zero: zero on internal faces, U_b·S_b on the boundary faces of patches
//! whose velocity is fixed, zero elsewhere. The velocity potential Φ then
//! solves ∇²Φ = ∇·φ (`fvm::laplacian(1, Phi) == fvc::div(phi)`, the `Phi`
//! solver, `nNonOrthogonalCorrectors + 1` solves, a reference cell where no
//! patch fixes Φ), the flux becomes φ − (the equation's face flux) and the
//! velocity is `fvc::reconstruct(φ)`. Φ is fixed (at 0) on the patches where
//! the pressure is fixed and zero-gradient elsewhere.
//!
//! `-writep`'s approximate pressure solves ∇²p = −∇·(F·∇·(φU)) with the
//! flow-direction filter F = UU/(|U|² + ε) ([`approximate_pressure`]).

use super::simple::{divergence, flux_poisson, reconstruct, FluxPoisson, PressureSolve};
use super::{solved_components, FlowError};
use crate::fvm::{
    BoundaryCondition, CellField, LaplacianProblem, LaplacianSystem, Reference, Schemes,
    SingularPolicy,
};
use crate::mesh::{Geometry, Mesh, Vec3};
use crate::solve::SolverPerformance;

/// The `potentialFlow` dictionary and the schemes of the Φ equation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PotentialSettings {
    /// `laplacian(1,Phi)` and `grad(Phi)`.
    pub schemes: Schemes,
    pub n_non_orth_correctors: usize,
    /// `PhiRefCell`, `PhiRefValue`: Φ's level where no patch fixes it.
    pub reference_cell: usize,
    pub reference_value: f64,
}

/// What potentialFoam computes.
#[derive(Clone, Debug)]
pub struct PotentialFlow {
    /// Φ per cell.
    pub potential: Vec<f64>,
    /// Φ on every boundary face (0 on empty faces).
    pub potential_boundary: Vec<f64>,
    /// The conservative flux φ on every face (0 on empty faces).
    pub phi: Vec<f64>,
    /// `fvc::reconstruct(φ)` per cell.
    pub u: Vec<Vec3>,
    /// Every Φ solve (one per corrector).
    pub solves: Vec<SolverPerformance>,
    /// Volume-weighted mean of |∇·φ| (`Continuity error`).
    pub continuity_error: f64,
    /// √Σ(U_f·S_f − φ_f)² / Σ|S_f| over the internal faces, U_f the linear
    /// interpolate of the reconstructed U (`Interpolated velocity error`).
    pub interpolated_velocity_error: f64,
}

/// Solves for the potential flow of `boundary_flux` (the initial flux on
/// every boundary face, 0 on empty faces and where the velocity is not
/// fixed) with Φ's `conditions` (one per patch) from the initial Φ
/// `potential`; `solve` solves each Φ system.
pub fn potential_flow(
    mesh: &Mesh,
    geometry: &Geometry,
    settings: &PotentialSettings,
    conditions: Vec<BoundaryCondition>,
    boundary_flux: &[f64],
    mut potential: Vec<f64>,
    solve: &mut PressureSolve<'_>,
) -> Result<PotentialFlow, FlowError> {
    let n = mesh.n_cells();
    let first = mesh.n_internal_faces();
    if boundary_flux.len() != mesh.n_faces() - first || potential.len() != n {
        return Err(FlowError::invalid(format!(
            "potential flow: {} boundary fluxes and {} potentials given for {} boundary faces \
             and {n} cells",
            boundary_flux.len(),
            potential.len(),
            mesh.n_faces() - first
        )));
    }
    if settings.reference_cell >= n || !settings.reference_value.is_finite() {
        return Err(FlowError::invalid(format!(
            "PhiRefCell {} with PhiRefValue {}: the cell must be below {n} and the value finite",
            settings.reference_cell, settings.reference_value
        )));
    }
    let mut problem = LaplacianProblem {
        singular: SingularPolicy {
            reference: Reference::Cell {
                cell: settings.reference_cell,
                value: settings.reference_value,
            },
            ..SingularPolicy::default()
        },
        ..LaplacianProblem::steady(CellField::Uniform(1.0), CellField::Uniform(0.0), conditions)
    };
    let mut system = LaplacianSystem::new(mesh, geometry, settings.schemes, &problem)?;
    let mut phi_initial = vec![0.0; mesh.n_faces()];
    phi_initial[first..].copy_from_slice(boundary_flux);
    let (solves, phi) = flux_poisson(
        &mut system,
        &mut problem,
        FluxPoisson {
            gamma: &vec![1.0; n],
            phi_pre: &phi_initial,
            n_correctors: settings.n_non_orth_correctors,
            field: "Phi",
        },
        &mut potential,
        solve,
    )?;
    let total_volume: f64 = geometry.cell_volumes.iter().sum();
    let continuity_error =
        divergence(mesh, &phi).iter().map(|d| d.abs()).sum::<f64>() / total_volume;
    log::info!(
        "Continuity error = {}",
        crate::foam::write::format_g(continuity_error)
    );
    let components = solved_components(mesh, geometry)?;
    let bc = system.boundary_coeffs();
    let u = reconstruct(mesh, geometry, &components, &bc.active, &phi);
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let (mut squares, mut area) = (0.0, 0.0);
    for f in 0..first {
        let w = geometry.weights[f];
        let face = w * u[owner[f] as usize] + (1.0 - w) * u[neighbour[f] as usize];
        let s = &geometry.face_area_vectors[f];
        squares += (face.dot(s) - phi[f]).powi(2);
        area += s.norm();
    }
    let interpolated_velocity_error = squares.sqrt() / area;
    log::info!(
        "Interpolated velocity error = {}",
        crate::foam::write::format_g(interpolated_velocity_error)
    );
    let potential_boundary = bc.face_values(mesh, &potential);
    Ok(PotentialFlow {
        potential,
        potential_boundary,
        phi,
        u,
        solves,
        continuity_error,
        interpolated_velocity_error,
    })
}
