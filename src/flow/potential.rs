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
//! `-writep`'s approximate pressure ([`approximate_pressure`]) is the
//! pressure of the Euler equations for that U, filtered along the flow: with
//! D = `fvc::div(phi,U)` (the `div(phi,U)` scheme, explicit) and the
//! flow-direction filter F = UU/(|U|² + ε), ε = `SMALL`·mean(|U|²) (SMALL =
//! 10⁻¹⁵ in double precision, the mean over the cells unweighted), p solves
//! `laplacian(p) + div(F·D) == 0` (`div(div(phi,U))`, Gauss linear) with the
//! `p` solver, `nNonOrthogonalCorrectors + 1` solves, `0/p`'s conditions and
//! `pRefCell`/`pRefValue` where no patch fixes p. The filter keeps only the
//! component of the convective acceleration along U, which gives a more
//! reasonable pressure where the velocity varies fast across the flow.

use super::piso::TransientConvection;
use super::simple::{
    check_reference, divergence, flux_poisson, reconstruct, referenced_poisson, Convection,
    FluxPoisson, PressureSolve,
};
use super::{solved_components, FlowError};
use crate::fvm::{BoundaryCondition, LaplacianProblem, LaplacianSystem, Schemes};
use crate::mesh::{Geometry, Mesh, PatchKind, Vec3};
use crate::solve::SolverPerformance;

/// OpenFOAM's `SMALL` (double precision), the guard of the flow-direction
/// filter's denominator relative to the mean of |U|².
const SMALL: f64 = 1e-15;

/// One of potentialFoam's Poisson equations (Φ, or `-writep`'s p): its
/// schemes and the `potentialFlow` dictionary's correctors and reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PotentialSettings {
    /// `laplacian(1,Phi)` and `grad(Phi)` (p: `laplacian(p)`, `grad(p)`).
    pub schemes: Schemes,
    pub n_non_orth_correctors: usize,
    /// `PhiRefCell`, `PhiRefValue` (p: `pRefCell`, `pRefValue`): the level
    /// where no patch fixes the field.
    pub reference_cell: usize,
    pub reference_value: f64,
}

impl PotentialSettings {
    /// The steady problem ∇·∇x = q of `field` with its `conditions` and
    /// reference cell (Γ = 1; the source is set per solve).
    fn problem(
        &self,
        field: &str,
        n_cells: usize,
        conditions: Vec<BoundaryCondition>,
    ) -> Result<LaplacianProblem, FlowError> {
        let reference = (self.reference_cell, self.reference_value);
        check_reference(field, reference, n_cells)?;
        Ok(referenced_poisson(conditions, reference))
    }
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
    let mut problem = settings.problem("Phi", n, conditions)?;
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

/// `div(phi,U)` of the approximate pressure, evaluated explicitly
/// (`fvc::div`): Gauss with linear or upwind face values; `bounded`
/// subtracts (∇·φ)U.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VelocityConvection {
    /// `Gauss upwind` (else `Gauss linear`).
    pub upwind: bool,
    pub bounded: bool,
}

impl VelocityConvection {
    /// Parses `Gauss linear` or `Gauss upwind`, optionally `bounded`.
    pub fn from_foam(text: &str) -> Result<Self, FlowError> {
        let unsupported = || {
            FlowError::invalid(format!(
                "div(phi,U) scheme '{text}' is not supported for the approximate pressure \
                 (Gauss linear or Gauss upwind, optionally bounded)"
            ))
        };
        let parsed = TransientConvection::from_foam(text).map_err(|_| unsupported())?;
        let upwind = match parsed.scheme {
            None => false,
            Some(Convection::Upwind) => true,
            Some(Convection::LinearUpwind | Convection::LimitedLinear(_)) => {
                return Err(unsupported())
            }
        };
        Ok(Self {
            upwind,
            bounded: parsed.bounded,
        })
    }
}

/// A velocity field: cell values and the value on every boundary face (index
/// face − nInternalFaces; 0 on empty faces), as its conditions give them.
#[derive(Clone, Copy, Debug)]
pub struct VelocityField<'a> {
    pub cells: &'a [Vec3],
    pub boundary: &'a [Vec3],
}

/// What `-writep` computes.
#[derive(Clone, Debug)]
pub struct ApproximatePressure {
    /// p per cell.
    pub p: Vec<f64>,
    /// p on every boundary face (0 on empty faces).
    pub p_boundary: Vec<f64>,
    /// Every p solve (one per corrector).
    pub solves: Vec<SolverPerformance>,
}

/// potentialFoam's `-writep` (see the module documentation): the approximate
/// pressure of the velocity `u` and the flux `phi` (on every face, 0 on
/// empty faces) with p's `conditions` (one per patch), from the initial p
/// `pressure`; `settings` holds `laplacian(p)`, `grad(p)`, the correctors and
/// `pRefCell`/`pRefValue`, `convection` the `div(phi,U)` scheme; `solve`
/// solves each p system.
#[allow(clippy::too_many_arguments)]
pub fn approximate_pressure(
    mesh: &Mesh,
    geometry: &Geometry,
    settings: &PotentialSettings,
    convection: VelocityConvection,
    conditions: Vec<BoundaryCondition>,
    u: VelocityField<'_>,
    phi: &[f64],
    mut pressure: Vec<f64>,
    solve: &mut PressureSolve<'_>,
) -> Result<ApproximatePressure, FlowError> {
    let n = mesh.n_cells();
    let first = mesh.n_internal_faces();
    let n_boundary = mesh.n_faces() - first;
    if u.cells.len() != n
        || u.boundary.len() != n_boundary
        || phi.len() != mesh.n_faces()
        || pressure.len() != n
    {
        return Err(FlowError::invalid(format!(
            "approximate pressure: {} cell and {} boundary velocities, {} fluxes and {} \
             pressures given for {n} cells, {n_boundary} boundary faces and {} faces",
            u.cells.len(),
            u.boundary.len(),
            phi.len(),
            pressure.len(),
            mesh.n_faces()
        )));
    }
    let mut problem = settings.problem("p", n, conditions)?;
    // setReference regularises the system whatever the sum of its right-hand
    // side: over a region no patch fixes, ∇·ψ sums to the boundary flux of ψ,
    // zero only by chance.
    problem.singular.tolerance = f64::INFINITY;
    let mut system = LaplacianSystem::new(mesh, geometry, settings.schemes, &problem)?;
    let active = system.boundary_coeffs().active.clone();
    let filtered = filtered_convection(mesh, geometry, convection, &active, u, phi);
    // laplacian(p) + div(ψ) = 0 is the flux equation ∇·∇p = ∇·(−ψ).
    let phi_pre: Vec<f64> = filtered.iter().map(|f| -f).collect();
    let (solves, _) = flux_poisson(
        &mut system,
        &mut problem,
        FluxPoisson {
            gamma: &vec![1.0; n],
            phi_pre: &phi_pre,
            n_correctors: settings.n_non_orth_correctors,
            field: "p",
        },
        &mut pressure,
        solve,
    )?;
    let p_boundary = system.boundary_coeffs().face_values(mesh, &pressure);
    Ok(ApproximatePressure {
        p: pressure,
        p_boundary,
        solves,
    })
}

/// ψ_f = S_f·(F·D)_f on every face (0 on inactive boundary faces), whose
/// divergence is `div(div(phi,U))` (Gauss linear): D = `fvc::div(phi,U)`, F
/// the flow-direction filter UU/(|U|² + ε).
fn filtered_convection(
    mesh: &Mesh,
    geometry: &Geometry,
    convection: VelocityConvection,
    active: &[bool],
    u: VelocityField<'_>,
    phi: &[f64],
) -> Vec<f64> {
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let first = mesh.n_internal_faces();
    let volumes = &geometry.cell_volumes;
    // D per cell: Σ_f φ_f U_f / V, U_f linear or upwind inside, the boundary value outside.
    let mut d = vec![Vec3::zeros(); mesh.n_cells()];
    for f in 0..first {
        let (o, nb) = (owner[f] as usize, neighbour[f] as usize);
        let face = if !convection.upwind {
            let w = geometry.weights[f];
            w * u.cells[o] + (1.0 - w) * u.cells[nb]
        } else if phi[f] >= 0.0 {
            u.cells[o]
        } else {
            u.cells[nb]
        };
        let flux = phi[f] * face;
        d[o] += flux;
        d[nb] -= flux;
    }
    for b in (0..active.len()).filter(|&b| active[b]) {
        d[owner[first + b] as usize] += phi[first + b] * u.boundary[b];
    }
    let flux_divergence: Vec<f64> = divergence(mesh, phi)
        .iter()
        .zip(volumes)
        .map(|(s, v)| s / v)
        .collect();
    for (c, d) in d.iter_mut().enumerate() {
        *d /= volumes[c];
        if convection.bounded {
            *d -= flux_divergence[c] * u.cells[c];
        }
    }
    // D's boundary values: the cell's (`extrapolatedCalculated`), its
    // tangential part on symmetry patches (their constraint condition), and
    // for the bounded form minus (∇·φ)_P U_b.
    let mut d_boundary = vec![Vec3::zeros(); active.len()];
    for patch in mesh.patches() {
        let symmetry = matches!(patch.kind, PatchKind::Symmetry | PatchKind::SymmetryPlane);
        for f in patch.faces() {
            let b = f - first;
            if !active[b] {
                continue;
            }
            let o = owner[f] as usize;
            let mut cell = d[o];
            if convection.bounded {
                // The cell's Gauss part: D_P + (∇·φ)_P U_P.
                cell += flux_divergence[o] * u.cells[o];
            }
            if symmetry {
                let normal = geometry.face_area_vectors[f].normalize();
                cell -= normal * normal.dot(&cell);
            }
            d_boundary[b] = cell;
            if convection.bounded {
                d_boundary[b] -= flux_divergence[o] * u.boundary[b];
            }
        }
    }
    let mean_mag_sqr =
        u.cells.iter().map(|v| v.norm_squared()).sum::<f64>() / u.cells.len().max(1) as f64;
    let guard = SMALL * mean_mag_sqr;
    // F·D = U (U·D)/(|U|² + ε); 0 where U and ε are (a flow at rest).
    let filter = |u: &Vec3, d: &Vec3| {
        let denominator = u.norm_squared() + guard;
        match denominator > 0.0 {
            true => *u * (u.dot(d) / denominator),
            false => Vec3::zeros(),
        }
    };
    let g: Vec<Vec3> = u.cells.iter().zip(&d).map(|(u, d)| filter(u, d)).collect();
    let mut psi = vec![0.0; mesh.n_faces()];
    for f in 0..first {
        let w = geometry.weights[f];
        let face = w * g[owner[f] as usize] + (1.0 - w) * g[neighbour[f] as usize];
        psi[f] = geometry.face_area_vectors[f].dot(&face);
    }
    for b in (0..active.len()).filter(|&b| active[b]) {
        let face = filter(&u.boundary[b], &d_boundary[b]);
        psi[first + b] = geometry.face_area_vectors[first + b].dot(&face);
    }
    psi
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fvm::PatchValues;
    use crate::solve::{solve_pcg, PreconditionerKind, SolverControls};

    /// p of a uniform velocity (1, 0.5, −0.25) with a flux that is not
    /// divergence-free, p fixed at 0 on every patch.
    fn pressure_of_uniform_velocity(convection: VelocityConvection) -> Vec<f64> {
        let mesh = crate::mesh::load("box:5x4x3").unwrap();
        let geometry = mesh.geometry().unwrap();
        let velocity = Vec3::new(1.0, 0.5, -0.25);
        let first = mesh.n_internal_faces();
        let cells = vec![velocity; mesh.n_cells()];
        let boundary = vec![velocity; mesh.n_faces() - first];
        let phi: Vec<f64> = (0..mesh.n_faces())
            .map(|f| 0.01 * (f as f64).sin())
            .collect();
        let settings = PotentialSettings {
            schemes: Schemes::default(),
            n_non_orth_correctors: 0,
            reference_cell: 0,
            reference_value: 0.0,
        };
        let conditions = BoundaryCondition::on_every_patch(
            &mesh,
            BoundaryCondition::FixedValue(PatchValues::Uniform(0.0)),
        );
        let controls = SolverControls {
            tolerance: 1e-14,
            ..SolverControls::default()
        };
        let mut solve = |a: &crate::sparse::Csr, b: &[f64], x: &mut [f64], _last: bool| {
            solve_pcg(a, PreconditionerKind::Jacobi, b, x, &controls, "p")
        };
        approximate_pressure(
            &mesh,
            &geometry,
            &settings,
            convection,
            conditions,
            VelocityField {
                cells: &cells,
                boundary: &boundary,
            },
            &phi,
            vec![0.0; mesh.n_cells()],
            &mut solve,
        )
        .unwrap()
        .p
    }

    #[test]
    fn bounded_convection_of_a_uniform_velocity_has_no_pressure() {
        for upwind in [false, true] {
            // Unbounded: ∇·(φU) = (∇·φ) U drives a pressure; bounded takes
            // (∇·φ) U off and leaves none.
            let unbounded = pressure_of_uniform_velocity(VelocityConvection {
                upwind,
                bounded: false,
            });
            let bounded = pressure_of_uniform_velocity(VelocityConvection {
                upwind,
                bounded: true,
            });
            let largest = |p: &[f64]| p.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            assert!(largest(&unbounded) > 1e-4, "{}", largest(&unbounded));
            assert!(largest(&bounded) < 1e-12, "{}", largest(&bounded));
        }
    }

    #[test]
    fn only_gauss_linear_and_upwind_convection_is_taken() {
        let parse = VelocityConvection::from_foam;
        assert_eq!(
            parse("bounded Gauss linear").unwrap(),
            VelocityConvection {
                upwind: false,
                bounded: true
            }
        );
        assert_eq!(
            parse("Gauss upwind").unwrap(),
            VelocityConvection {
                upwind: true,
                bounded: false
            }
        );
        for text in [
            "Gauss linearUpwind grad(U)",
            "bounded Gauss limitedLinear 1",
            "Gauss cubic",
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(text) && err.contains("not supported"), "{err}");
        }
    }
}
