//! Discretisation schemes and the face geometry they need, computed as OpenFOAM
//! v1912 computes it.
//!
//! Internal faces (`surfaceInterpolation`): with d = C_N − C_P and n = S_f/|S_f|,
//! - `deltaCoeffs` = 1/|d| (used by the `orthogonal` snGrad scheme);
//! - `nonOrthDeltaCoeffs` = 1/max(n·d, 0.05|d|) (used by `uncorrected`,
//!   `corrected` and `limited`: the over-relaxed split of Jasak 1996 §3.3.1.3);
//! - `nonOrthCorrectionVectors` k = n − d·nonOrthDeltaCoeffs.
//!
//! Boundary faces (`fvPatch::delta`, v1912): the delta of a non-coupled patch is
//! the patch-normal projection n(n·(C_f − C_P)), so the patch `deltaCoeffs` (which
//! the boundary conditions use, whatever the snGrad scheme) are 1/|n·(C_f − C_P)|,
//! the correction vectors are zero (no non-orthogonal correction on boundary
//! faces), and least squares uses that projected delta too.

use super::FvmError;
use crate::mesh::{Geometry, Mesh, Vec3};
use rayon::prelude::*;

/// Surface-normal gradient scheme of the Laplacian (`laplacianSchemes Gauss <interp> <snGrad>`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SnGradScheme {
    /// `orthogonal`: coefficient |S|/|d|, no correction.
    Orthogonal,
    /// `uncorrected`: coefficient |S|·nonOrthDeltaCoeffs, no correction.
    Uncorrected,
    /// `corrected`: as `uncorrected` plus the explicit correction Γ_f|S|(k·∇p_f).
    Corrected,
    /// `limited ψ` (0 ≤ ψ ≤ 1): the correction scaled per face by
    /// min(ψ|Δ(p_N − p_P)| / ((1 − ψ)|k·∇p_f| + 1e-15), 1) (OpenFOAM `limitedSnGrad`).
    /// ψ = 0 is `uncorrected`; ψ = 1 is `corrected` except on faces where
    /// |Δ(p_N − p_P)| < 1e-15 (OpenFOAM's `SMALL`), exactly as in OpenFOAM.
    Limited(f64),
    /// `boundaryCorrected` (an fvpoisson extension, not in OpenFOAM): as
    /// `corrected`, and boundary faces with an imposed value get the same
    /// explicit correction. OpenFOAM's boundary snGrad Δ_b(p_b − p_P), with
    /// Δ_b = 1/(n·d_b) and d_b = C_f − C_P, misses the tangential part of d_b:
    /// an O(1) flux error wherever the cell centre is not on the face normal
    /// through C_f (tetrahedra, prisms, perturbed cells next to a wall), which
    /// caps the solution at first order. Here a face with value fraction f
    /// (fixedValue 1, mixed f, gradient conditions 0) adds f·Γ_b|S_b|(k_b·∇p_P)
    /// with k_b = n − d_b Δ_b. With `leastSquares`, fixedValue faces then enter
    /// the least-squares fit with the true d_b (their value sits at C_f, not at
    /// the projected point), so the gradient stays consistent in wall cells.
    BoundaryCorrected,
}

impl SnGradScheme {
    /// Parses an OpenFOAM snGrad scheme from its words: `corrected`,
    /// `uncorrected`, `orthogonal`, `limited ψ` or `limited corrected ψ`.
    pub fn from_foam_words(words: &[&str]) -> Result<Self, FvmError> {
        let psi = |w: &str| {
            w.parse::<f64>()
                .ok()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or_else(|| {
                    FvmError::invalid(format!(
                        "limited snGrad coefficient '{w}' must be a number between 0 and 1"
                    ))
                })
        };
        match words {
            ["corrected"] => Ok(Self::Corrected),
            ["boundaryCorrected"] => Ok(Self::BoundaryCorrected),
            ["uncorrected"] => Ok(Self::Uncorrected),
            ["orthogonal"] => Ok(Self::Orthogonal),
            ["limited", w] | ["limited", "corrected", w] => Ok(Self::Limited(psi(w)?)),
            _ => Err(FvmError::invalid(format!(
                "unsupported snGrad scheme '{}' (expected corrected, uncorrected, orthogonal, \
                 limited <0..1>, limited corrected <0..1> or boundaryCorrected)",
                words.join(" ")
            ))),
        }
    }

    /// Whether the scheme adds an explicit non-orthogonal correction.
    pub fn is_corrected(self) -> bool {
        matches!(
            self,
            Self::Corrected | Self::Limited(_) | Self::BoundaryCorrected
        )
    }
}

/// Cell gradient used inside the non-orthogonal correction (`gradSchemes grad(p)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradScheme {
    /// `Gauss linear`: (1/V) Σ S_f p_f with linearly interpolated face values
    /// and boundary values from the boundary conditions.
    GaussLinear,
    /// `leastSquares` (ESI OpenFOAM `leastSquaresVectors`): face weights
    /// |S_f|/|d|², split on internal faces by the interpolation weight (owner
    /// side 1 − w, neighbour side w); boundary faces included with the
    /// patch-normal delta and the boundary-condition face value. Checked
    /// against v1912 laplacianFoam output (plain 1/|d|² weights do not match it).
    LeastSquares,
}

/// Interpolation of Γ from cells to internal faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GammaInterpolation {
    /// OpenFOAM `harmonic`: 1/(w/Γ_P + (1 − w)/Γ_N) with the linear weight w;
    /// exactly Γ where Γ_P = Γ_N. Flux-exact across material jumps on faces of
    /// uniformly spaced meshes.
    Harmonic,
    /// OpenFOAM `linear`: w(Γ_P − Γ_N) + Γ_N (the `Gauss linear` default).
    Linear,
}

impl GammaInterpolation {
    /// Face value from owner and neighbour values, `w` the owner weight.
    pub fn interpolate(self, owner: f64, neighbour: f64, w: f64) -> f64 {
        if owner == neighbour {
            return owner;
        }
        match self {
            Self::Harmonic => 1.0 / (w * (1.0 / owner - 1.0 / neighbour) + 1.0 / neighbour),
            Self::Linear => w * (owner - neighbour) + neighbour,
        }
    }
}

/// Time term (`ddtSchemes`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeScheme {
    SteadyState,
    /// Implicit Euler: diagonal += V/dt, right-hand side += V/dt · p_old.
    Euler {
        dt: f64,
    },
}

/// The schemes fixed when a system is built (they fix the face geometry).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schemes {
    pub sn_grad: SnGradScheme,
    pub grad: GradScheme,
    pub gamma_interpolation: GammaInterpolation,
}

impl Schemes {
    /// Schemes from OpenFOAM `fvSchemes` entries: `laplacianSchemes` (e.g.
    /// `Gauss linear corrected`, `Gauss harmonic limited corrected 0.33`) and
    /// `gradSchemes` (`Gauss linear` or `leastSquares`).
    pub fn from_foam(laplacian: &str, grad: &str) -> Result<Self, FvmError> {
        let words: Vec<&str> = laplacian.split_whitespace().collect();
        let (gamma_interpolation, sn_grad) = match words.as_slice() {
            ["Gauss", interp, rest @ ..] if !rest.is_empty() => {
                let interp = match *interp {
                    "linear" => GammaInterpolation::Linear,
                    "harmonic" => GammaInterpolation::Harmonic,
                    other => {
                        return Err(FvmError::invalid(format!(
                            "laplacian scheme '{laplacian}': unsupported interpolation '{other:.80}' \
                             (expected linear or harmonic)"
                        )))
                    }
                };
                (interp, SnGradScheme::from_foam_words(rest)?)
            }
            _ => {
                return Err(FvmError::invalid(format!(
                    "laplacian scheme '{laplacian}': expected 'Gauss <linear|harmonic> <snGrad scheme>'"
                )))
            }
        };
        let grad = match grad.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["Gauss", "linear"] => GradScheme::GaussLinear,
            ["leastSquares"] => GradScheme::LeastSquares,
            _ => {
                return Err(FvmError::invalid(format!(
                    "gradient scheme '{grad}' is not supported (expected 'Gauss linear' or 'leastSquares')"
                )))
            }
        };
        Ok(Self {
            sn_grad,
            grad,
            gamma_interpolation,
        })
    }
}

impl Default for Schemes {
    /// OpenFOAM's usual `Gauss linear corrected` with `Gauss linear` gradients,
    /// and harmonic Γ (density-contrast problems).
    fn default() -> Self {
        Self {
            sn_grad: SnGradScheme::Corrected,
            grad: GradScheme::GaussLinear,
            gamma_interpolation: GammaInterpolation::Harmonic,
        }
    }
}

/// Face geometry of one snGrad scheme. Boundary arrays are indexed by
/// `face − n_internal_faces`.
#[derive(Clone, Debug, PartialEq)]
pub struct FaceGeometry {
    /// |S_f| of every face.
    pub mag_sf: Vec<f64>,
    /// Internal faces: the implicit coefficient per unit area and Γ
    /// (`deltaCoeffs` for `orthogonal`, `nonOrthDeltaCoeffs` otherwise).
    pub delta_coeffs: Vec<f64>,
    /// Internal faces: k = n − d·nonOrthDeltaCoeffs for corrected schemes,
    /// empty otherwise.
    pub correction_vectors: Vec<Vec3>,
    /// Boundary faces: n(n·(C_f − C_P)) (`fvPatch::delta`).
    pub patch_deltas: Vec<Vec3>,
    /// Boundary faces: 1/|patch delta| (`fvPatch::deltaCoeffs`).
    pub patch_delta_coeffs: Vec<f64>,
    /// Boundary faces, `boundaryCorrected` only (else empty): C_f − C_P.
    pub patch_face_deltas: Vec<Vec3>,
    /// Boundary faces, `boundaryCorrected` only (else empty):
    /// k_b = n − (C_f − C_P)·patch deltaCoeff.
    pub patch_correction_vectors: Vec<Vec3>,
}

/// The boundary faces' part of [`FaceGeometry`], indexed by
/// `face − n_internal_faces`: what the boundary conditions, the singularity
/// check and the gradient scheme read when a system is made. It is a few
/// bytes per cell (the boundary's faces), where the internal faces' part is
/// 40 bytes per internal face (about 120 per hex cell).
#[derive(Clone, Debug, PartialEq)]
pub struct BoundaryFaceGeometry {
    /// |S_b| of every boundary face.
    pub mag_sf: Vec<f64>,
    /// n(n·(C_f − C_P)) (`fvPatch::delta`).
    pub patch_deltas: Vec<Vec3>,
    /// 1/|patch delta| (`fvPatch::deltaCoeffs`).
    pub patch_delta_coeffs: Vec<f64>,
    /// `boundaryCorrected` only (else empty): C_f − C_P.
    pub patch_face_deltas: Vec<Vec3>,
    /// `boundaryCorrected` only (else empty): k_b = n − (C_f − C_P)·patch deltaCoeff.
    pub patch_correction_vectors: Vec<Vec3>,
}

/// One internal face's entries of [`FaceGeometry`]
/// ([`FaceGeometry::internal_face`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InternalFace {
    /// |S_f|.
    pub mag_sf: f64,
    /// The scheme's coefficient per unit area and Γ; NaN where the
    /// non-orthogonal coefficient is not finite (the face is refused).
    pub delta_coeff: f64,
    /// k = n − d·nonOrthDeltaCoeffs (read by corrected schemes only).
    pub correction: Vec3,
}

impl FaceGeometry {
    /// Computes the face geometry, refusing faces whose coefficient is not finite
    /// (coincident cell centres, or a boundary face through its cell centre).
    pub fn new(mesh: &Mesh, geometry: &Geometry, sn_grad: SnGradScheme) -> Result<Self, FvmError> {
        Self::check(mesh, geometry, sn_grad)?;
        let boundary = BoundaryFaceGeometry::new(mesh, geometry, sn_grad)?;
        Ok(Self::of_checked(mesh, geometry, sn_grad, boundary))
    }

    /// Refuses what [`Self::new`] refuses on the internal faces (and a
    /// `limited` coefficient outside [0, 1]) without keeping any array: a
    /// system checks its mesh when it is made and builds the internal faces'
    /// arrays only on their first host use.
    pub fn check(mesh: &Mesh, geometry: &Geometry, sn_grad: SnGradScheme) -> Result<(), FvmError> {
        if let SnGradScheme::Limited(psi) = sn_grad {
            if !(0.0..=1.0).contains(&psi) {
                return Err(FvmError::invalid(format!(
                    "limited snGrad coefficient is {psi}; it must be between 0 and 1"
                )));
            }
        }
        // A face is refused where 1 / max(Ŝ·d, 0.05 |d|) is not finite
        // (`internal_face_of`). max(Ŝ·d, 0.05 |d|) is at least 0.05 |d| (a
        // NaN Ŝ·d gives way to it), so where 1 / (0.05 |d|) is finite the
        // face passes whatever its area vector: the area vector, which a
        // geometry of the cells and boundary computes from the face's
        // points, is evaluated only for a face that does not pass so.
        let bad = (0..mesh.n_internal_faces())
            .into_par_iter()
            .position_first(|f| {
                let d = geometry.delta(mesh, f);
                !(1.0 / (0.05 * d.norm())).is_finite()
                    && !Self::internal_face(mesh, geometry, sn_grad, f)
                        .delta_coeff
                        .is_finite()
            });
        match bad {
            Some(f) => Err(FvmError::invalid(format!(
                "internal face {f} (cells {} and {}): the cell centres coincide or the face has \
                 no area; check the mesh",
                mesh.owner()[f],
                mesh.neighbour()[f]
            ))),
            None => Ok(()),
        }
    }

    /// The entries of internal face `f`: each array of [`Self::new`] holds
    /// these bits, so a consumer that reads some faces only (the device
    /// assembly's upload, in its own face order) computes them per face
    /// instead of keeping the arrays.
    pub fn internal_face(
        mesh: &Mesh,
        geometry: &Geometry,
        sn_grad: SnGradScheme,
        f: usize,
    ) -> InternalFace {
        Self::internal_face_of(
            geometry.area_vector(mesh, f),
            geometry.delta(mesh, f),
            sn_grad,
        )
    }

    /// [`Self::internal_face`] of the face of area vector `sf` whose cell
    /// centres are `d` apart (owner to neighbour).
    pub fn internal_face_of(sf: Vec3, d: Vec3, sn_grad: SnGradScheme) -> InternalFace {
        let mag_sf = sf.norm();
        let unit = sf / mag_sf;
        let non_orth = 1.0 / unit.dot(&d).max(0.05 * d.norm());
        let coeff = match sn_grad {
            SnGradScheme::Orthogonal => 1.0 / d.norm(),
            _ => non_orth,
        };
        InternalFace {
            mag_sf,
            // NaN marks a face refused by `check`.
            delta_coeff: if non_orth.is_finite() {
                coeff
            } else {
                f64::NAN
            },
            correction: unit - d * non_orth,
        }
    }

    /// The face geometry of a mesh [`Self::check`] accepted, with its
    /// boundary part computed already.
    pub fn of_checked(
        mesh: &Mesh,
        geometry: &Geometry,
        sn_grad: SnGradScheme,
        boundary: BoundaryFaceGeometry,
    ) -> Self {
        let n_internal = mesh.n_internal_faces();
        let face = |f: usize| Self::internal_face(mesh, geometry, sn_grad, f);
        // Each face's entries computed once, written to every array. The
        // internal |S_f| come first in an array sized for every face at once
        // (extending one sized to the internal faces would reallocate it to
        // twice their number).
        let mut mag_sf: Vec<f64> = Vec::with_capacity(mesh.n_faces());
        let mut delta_coeffs: Vec<f64> = Vec::with_capacity(n_internal);
        let mut correction_vectors: Vec<Vec3> = Vec::new();
        if sn_grad.is_corrected() {
            mag_sf.resize(n_internal, 0.0);
            delta_coeffs.resize(n_internal, 0.0);
            correction_vectors.resize(n_internal, Vec3::zeros());
            mag_sf
                .par_iter_mut()
                .zip(&mut delta_coeffs)
                .zip(&mut correction_vectors)
                .enumerate()
                .for_each(|(f, ((mag, delta), correction))| {
                    let face = face(f);
                    (*mag, *delta, *correction) = (face.mag_sf, face.delta_coeff, face.correction);
                });
        } else {
            (0..n_internal)
                .into_par_iter()
                .map(|f| {
                    let face = face(f);
                    (face.mag_sf, face.delta_coeff)
                })
                .unzip_into_vecs(&mut mag_sf, &mut delta_coeffs);
        }
        mag_sf.extend_from_slice(&boundary.mag_sf);
        Self {
            mag_sf,
            delta_coeffs,
            correction_vectors,
            patch_deltas: boundary.patch_deltas,
            patch_delta_coeffs: boundary.patch_delta_coeffs,
            patch_face_deltas: boundary.patch_face_deltas,
            patch_correction_vectors: boundary.patch_correction_vectors,
        }
    }

    /// Bytes of its arrays.
    pub fn bytes(&self) -> usize {
        crate::slices::bytes(&self.mag_sf)
            + crate::slices::bytes(&self.delta_coeffs)
            + crate::slices::bytes(&self.correction_vectors)
            + crate::slices::bytes(&self.patch_deltas)
            + crate::slices::bytes(&self.patch_delta_coeffs)
            + crate::slices::bytes(&self.patch_face_deltas)
            + crate::slices::bytes(&self.patch_correction_vectors)
    }
}

impl BoundaryFaceGeometry {
    /// The boundary faces' geometry, refusing a face with no area or through
    /// its cell centre.
    pub fn new(mesh: &Mesh, geometry: &Geometry, sn_grad: SnGradScheme) -> Result<Self, FvmError> {
        let n_internal = mesh.n_internal_faces();
        let n_boundary = mesh.n_faces() - n_internal;
        let mut mag_sf = Vec::with_capacity(n_boundary);
        let mut patch_deltas = Vec::with_capacity(n_boundary);
        let mut patch_delta_coeffs = Vec::with_capacity(n_boundary);
        let mut patch_face_deltas = Vec::new();
        let mut patch_correction_vectors = Vec::new();
        for f in n_internal..mesh.n_faces() {
            let sf_f = geometry.area_vector(mesh, f);
            let mag = sf_f.norm();
            let unit = sf_f / mag;
            let face_delta = geometry.delta(mesh, f);
            let delta = unit * unit.dot(&face_delta);
            let coeff = 1.0 / delta.norm();
            if !coeff.is_finite() {
                return Err(FvmError::invalid(format!(
                    "boundary face {f} (cell {}): the face has no area or passes through its cell \
                     centre; check the mesh",
                    mesh.owner()[f]
                )));
            }
            mag_sf.push(mag);
            patch_deltas.push(delta);
            patch_delta_coeffs.push(coeff);
            if sn_grad == SnGradScheme::BoundaryCorrected {
                patch_face_deltas.push(face_delta);
                patch_correction_vectors.push(unit - face_delta * coeff);
            }
        }
        Ok(Self {
            mag_sf,
            patch_deltas,
            patch_delta_coeffs,
            patch_face_deltas,
            patch_correction_vectors,
        })
    }

    /// Bytes of its arrays.
    pub fn bytes(&self) -> usize {
        crate::slices::bytes(&self.mag_sf)
            + crate::slices::bytes(&self.patch_deltas)
            + crate::slices::bytes(&self.patch_delta_coeffs)
            + crate::slices::bytes(&self.patch_face_deltas)
            + crate::slices::bytes(&self.patch_correction_vectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_parse_from_openfoam_words() {
        let s = Schemes::from_foam("Gauss linear corrected", "Gauss linear").unwrap();
        assert_eq!(s.sn_grad, SnGradScheme::Corrected);
        assert_eq!(s.gamma_interpolation, GammaInterpolation::Linear);
        assert_eq!(s.grad, GradScheme::GaussLinear);
        let s =
            Schemes::from_foam("Gauss harmonic limited corrected 0.33", "leastSquares").unwrap();
        assert_eq!(s.sn_grad, SnGradScheme::Limited(0.33));
        assert_eq!(s.gamma_interpolation, GammaInterpolation::Harmonic);
        assert_eq!(s.grad, GradScheme::LeastSquares);
        let s = Schemes::from_foam("Gauss linear  limited 0.5", "Gauss linear").unwrap();
        assert_eq!(s.sn_grad, SnGradScheme::Limited(0.5));
        let s = Schemes::from_foam("Gauss linear boundaryCorrected", "leastSquares").unwrap();
        assert_eq!(s.sn_grad, SnGradScheme::BoundaryCorrected);
        assert!(s.sn_grad.is_corrected());
        for (lap, grad, msg) in [
            ("Gauss linear limited 2", "Gauss linear", "between 0 and 1"),
            (
                "Gauss upwind corrected",
                "Gauss linear",
                "interpolation 'upwind'",
            ),
            (
                "Gauss linear faceCorrected",
                "Gauss linear",
                "unsupported snGrad",
            ),
            ("linear corrected", "Gauss linear", "expected 'Gauss"),
            (
                "Gauss linear corrected",
                "cellLimited Gauss linear 1",
                "gradient scheme",
            ),
        ] {
            let err = Schemes::from_foam(lap, grad).unwrap_err().to_string();
            assert!(err.contains(msg), "{lap} / {grad}: {err}");
        }
    }

    /// The face check refuses the faces that the face entries mark as
    /// refused, the first of them by number, on either geometry: with cells
    /// moved onto their neighbours, tiny (subnormal) distances and a
    /// non-finite centre among sound faces.
    #[test]
    fn face_check_refuses_the_faces_whose_entries_are_refused() {
        let first_refused = |mesh: &Mesh, geometry: &Geometry, sn_grad| {
            (0..mesh.n_internal_faces()).find(|&f| {
                !FaceGeometry::internal_face(mesh, geometry, sn_grad, f)
                    .delta_coeff
                    .is_finite()
            })
        };
        for spec in ["box:5x4x3:tet:perturb=0.2", "box:4x4x4:perturb=0.2"] {
            let mesh = crate::mesh::load(spec).unwrap();
            for lean in [false, true] {
                let sound = match lean {
                    false => mesh.geometry().unwrap(),
                    true => mesh.geometry_of_cells_and_boundary().unwrap(),
                };
                for sn_grad in [SnGradScheme::Corrected, SnGradScheme::Orthogonal] {
                    assert!(FaceGeometry::check(&mesh, &sound, sn_grad).is_ok());
                    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
                    for (f, moved_by) in [(7, 0.0), (3, 1e-320), (11, f64::NAN)] {
                        let mut geometry = sound.clone();
                        let o = geometry.cell_centres[owner[f] as usize];
                        geometry.cell_centres[neighbour[f] as usize] = o.add_scalar(moved_by);
                        let expected = first_refused(&mesh, &geometry, sn_grad)
                            .unwrap_or_else(|| panic!("{spec}: face {f} passes"));
                        let err = FaceGeometry::check(&mesh, &geometry, sn_grad)
                            .unwrap_err()
                            .to_string();
                        assert!(
                            err.contains(&format!("internal face {expected} ")),
                            "{spec}, lean {lean}, face {f}: {err}"
                        );
                    }
                }
            }
        }
    }
}
