//! Assembly of the Laplacian system (OpenFOAM `gaussLaplacianScheme`,
//! `EulerDdtScheme`, `fvMatrix::setReference`) and laplacianFoam's
//! non-orthogonal corrector loop.

use super::boundary::{BoundaryCoeffs, BoundaryCondition};
use super::gradient::CellGradient;
use super::schemes::{
    BoundaryFaceGeometry, FaceGeometry, GradScheme, Schemes, SnGradScheme, TimeScheme,
};
use super::{check_values, CellField, FvmError};
use crate::mesh::{split_by_parts, Geometry, Label, Mesh, PartSides, PatchKind, Vec3};
use crate::sparse::ordering::{relative_bandwidth_of_pairs, sorted_rows, Graph};
use crate::sparse::{Csr, Permutation, RowOrdering};
use crate::timings;
use rayon::prelude::*;
use std::sync::{Arc, OnceLock};

/// OpenFOAM's `SMALL` (double precision), used by `limitedSnGrad`.
const SMALL: f64 = 1e-15;

/// How the level of an all-Neumann steady solution is fixed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reference {
    /// The matrix stays singular (symmetric positive semi-definite, null space
    /// the constants); after each solve the solution is shifted to zero
    /// volume-weighted mean.
    ZeroMean,
    /// OpenFOAM `setReference(pRefCell, pRefValue)`: the reference cell's
    /// diagonal is doubled and diag·value added to its right-hand side. The
    /// matrix stays symmetric and becomes positive definite; for a consistent
    /// right-hand side the solution is the singular problem's solution with
    /// p[cell] = value.
    Cell { cell: usize, value: f64 },
}

/// Treatment of all-Neumann steady problems (no fixedValue face, no mixed face
/// with a positive value fraction, no time term).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SingularPolicy {
    pub reference: Reference,
    /// Make the right-hand side consistent by removing its sum as a uniform
    /// source (b_i −= V_i·Σb/ΣV) instead of reporting it.
    pub project: bool,
    /// |Σb| ≤ tolerance·Σ|b_i| counts as consistent.
    pub tolerance: f64,
}

impl Default for SingularPolicy {
    fn default() -> Self {
        Self {
            reference: Reference::ZeroMean,
            project: false,
            tolerance: 1e-9,
        }
    }
}

/// The physical data of a Laplacian problem; may change between re-assemblies.
#[derive(Clone, Debug)]
pub struct LaplacianProblem {
    /// Diffusivity Γ > 0. On boundary faces: the value itself (uniform), the
    /// owner cell's (per cell), or the function at the face centre.
    pub gamma: CellField,
    /// Source q, integrated as q(cell centre)·V.
    pub source: CellField,
    /// One condition per patch, in patch order ([`BoundaryCondition::by_name`]).
    pub boundary: Vec<BoundaryCondition>,
    pub time: TimeScheme,
    pub singular: SingularPolicy,
}

impl LaplacianProblem {
    /// Steady problem with the default singular policy.
    pub fn steady(gamma: CellField, source: CellField, boundary: Vec<BoundaryCondition>) -> Self {
        Self {
            gamma,
            source,
            boundary,
            time: TimeScheme::SteadyState,
            singular: SingularPolicy::default(),
        }
    }
}

/// One problem's values on a system's mesh, checked
/// ([`LaplacianSystem::evaluate`]): everything an assembly consumes besides the
/// fixed geometry.
#[derive(Clone, Debug, PartialEq)]
pub struct ProblemValues {
    /// Γ per cell.
    pub gamma: Vec<f64>,
    /// `Some(Γ)` when the problem gives Γ as one value for the whole mesh
    /// (the device then moves no Γ array).
    pub uniform_gamma: Option<f64>,
    /// Γ per boundary face (index `face − n_internal_faces`).
    pub gamma_boundary: Vec<f64>,
    /// q per cell.
    pub source: Vec<f64>,
    pub bc: BoundaryCoeffs,
    pub time: TimeScheme,
    /// `Some` when the matrix (before any reference) is singular: steady, and
    /// in some region no boundary face puts a positive value on the diagonal.
    pub singular: Option<SingularPolicy>,
    /// Per region of the mesh (cells connected through internal faces):
    /// whether its block of the matrix is singular (a "floating" region).
    pub floating: Vec<bool>,
    /// Gradient data that depends on the conditions (`boundaryCorrected` with
    /// least squares); `None`: the system's own stays.
    pub gradient: Option<CellGradient>,
}

/// What a matrix assembly consumes of one problem's evaluated values besides
/// the conditions the system keeps (boundary coefficients, time scheme,
/// singularity, gradient data).
#[derive(Debug)]
struct AssemblyFields {
    /// Γ per cell.
    gamma: Vec<f64>,
    /// Γ per boundary face.
    gamma_boundary: Vec<f64>,
    /// q per cell.
    source: Vec<f64>,
    uniform_gamma: Option<f64>,
}

/// A deferred system's problem, checked and evaluated but not yet assembled.
#[derive(Debug)]
struct Pending {
    /// Evaluated again by a host assembly once `fields` are taken.
    problem: LaplacianProblem,
    /// The evaluation's Γ and q, kept for the first assembly (on the host or,
    /// taken by [`LaplacianSystem::take_evaluated`], on the device) so that
    /// the problem is evaluated once: 16 bytes per cell and 8 per boundary
    /// face until that assembly frees them.
    fields: Option<AssemblyFields>,
}

/// Where each coefficient goes in the CSR value array: 4 bytes a slot
/// (half of `usize`'s, 28 MB of a 1 M-cell hex mesh's 56 MB), as every
/// matrix of fewer than 2^32 entries needs ([`build_pattern`] refuses more).
#[derive(Clone, Debug, PartialEq)]
pub struct SlotMap {
    /// Slot of (c, c) for every cell.
    pub diagonal: Vec<u32>,
    /// Slot of (owner, neighbour) for every internal face.
    pub upper: Vec<u32>,
    /// Slot of (neighbour, owner) for every internal face.
    pub lower: Vec<u32>,
}

/// What the systems of one mesh and schemes share, built once and never
/// copied: the slot map, the face geometry, the gradient scheme's data and
/// the cell regions (the CSR pattern is shared by the matrices themselves:
/// [`Csr::zeros_like`]).
#[derive(Debug)]
struct SharedStructure {
    /// Built on the first call of [`LaplacianSystem::face_geometry`] (the
    /// flow solvers' host face loops read its arrays), the mesh checked when
    /// the structure is made ([`FaceGeometry::check`]). The system's own
    /// loops (assembly, non-orthogonal correction) and the device upload
    /// compute each face's entries where they read them
    /// ([`FaceGeometry::internal_face`], the arrays' bits), so a Laplacian
    /// run on the CPU or the device never builds these arrays: 40 bytes per
    /// internal face (0.96 GB at 8 M hex cells).
    faces: OnceLock<FaceGeometry>,
    /// The boundary faces' part, read when a problem is evaluated (boundary
    /// coefficients, singularity, gradient data): a few bytes per cell.
    boundary_faces: BoundaryFaceGeometry,
    /// The gradient scheme's data for the mesh (least-squares vectors with
    /// every boundary face at its patch delta).
    gradient: CellGradient,
    /// Built on the first host use ([`LaplacianSystem::slots`]): a run that
    /// assembles on the device never reads it (its assembly map comes from
    /// the mesh), and at 8 M hex cells it costs 224 MB and a binary search
    /// per face side and cell.
    slots: OnceLock<SlotMap>,
    /// Region of every cell ([`crate::mesh::check::cell_regions`]) and their
    /// number: a mesh of disconnected parts has one singular block per part
    /// without a fixed value, each with a level of its own to fix. Empty
    /// when the mesh is one region (every cell in region 0), as most are:
    /// no array of a region number per cell for them.
    regions: Vec<u32>,
    n_regions: usize,
}

impl SharedStructure {
    /// Region of cell `c`.
    fn region(&self, c: usize) -> usize {
        match self.regions.is_empty() {
            true => 0,
            false => self.regions[c] as usize,
        }
    }

    /// The face geometry, built on the first call (see `faces`).
    fn faces(&self, mesh: &Mesh, geometry: &Geometry, sn_grad: SnGradScheme) -> &FaceGeometry {
        self.faces.get_or_init(|| {
            crate::timings::span("face geometry", || {
                FaceGeometry::of_checked(mesh, geometry, sn_grad, self.boundary_faces.clone())
            })
        })
    }
}

/// The assembled linear system A p = b of one problem on one mesh. The CSR
/// pattern (rows sorted by column, diagonal included), the slot map and the
/// face geometry (the last two on their first use) are built once per mesh
/// and shared by the systems of its other problems
/// ([`LaplacianSystem::with_structure_of`]);
/// [`LaplacianSystem::reassemble`] only rewrites values.
///
/// A system made by [`LaplacianSystem::deferred`] or
/// [`LaplacianSystem::deferred_with_structure_of`] has its problem checked
/// and its boundary conditions evaluated (what the device assembly and the
/// host's boundary values use) but its matrix and right-hand side not yet
/// assembled: [`LaplacianSystem::ensure_assembled`] assembles them, and so
/// do `reassemble`, `update_rhs` and `solve`, which every host use of the
/// matrix goes through. Until then `matrix` and `rhs` hold zeros (their
/// memory is allocated zeroed and untouched). The values the check evaluated
/// are kept for that first assembly, or for the device's
/// ([`LaplacianSystem::take_evaluated`]): the problem is evaluated once.
/// [`LaplacianSystem::deferred_without_pattern`] also leaves the CSR pattern
/// unbuilt (`matrix` is 0 × 0 until the first host use builds it, or
/// [`LaplacianSystem::pattern`] does): a system assembled on the device
/// never reads it.
#[derive(Debug)]
pub struct LaplacianSystem<'m> {
    /// Symmetric, positive diagonal, off-diagonals −Γ_f|S_f|Δ_f.
    pub matrix: Csr,
    /// Right-hand side for the field last given to [`LaplacianSystem::update_rhs`]
    /// (before any call: without old-time and non-orthogonal terms).
    pub rhs: Vec<f64>,
    mesh: &'m Mesh,
    geometry: &'m Geometry,
    schemes: Schemes,
    shared: Arc<SharedStructure>,
    /// The gradient data of this problem's conditions where they differ from
    /// the mesh's (`boundaryCorrected` with least squares).
    own_gradient: Option<CellGradient>,
    bc: BoundaryCoeffs,
    gamma_mag_sf: Vec<f64>,
    /// Γ_b|S_b| of every boundary face (`boundaryCorrected` uses it).
    gamma_mag_sf_boundary: Vec<f64>,
    explicit_rhs: Vec<f64>,
    time: TimeScheme,
    /// `Some` when the matrix (before any reference) is singular.
    singular: Option<SingularPolicy>,
    /// Per region: singular (steady, no boundary face fixing the level).
    floating: Vec<bool>,
    /// Cells pinned by `Reference::Cell` (`setReference`): the given cell,
    /// and the lowest cell of every other floating region, each with its
    /// diagonal before doubling and the value.
    references: Vec<(usize, f64, f64)>,
    /// The problem checked but not yet assembled (a deferred system).
    pending: Option<Pending>,
    /// `matrix` is a 0 × 0 stand-in for the pattern, built on the first host
    /// use ([`Self::deferred_without_pattern`]).
    pattern_unbuilt: bool,
}

impl<'m> LaplacianSystem<'m> {
    /// Builds the pattern and face geometry, then assembles `problem`.
    pub fn new(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        schemes: Schemes,
        problem: &LaplacianProblem,
    ) -> Result<Self, FvmError> {
        Self::with_new_structure(mesh, geometry, schemes, true)?.assembled(problem)
    }

    /// [`Self::new`] without the assembly: `problem` is checked and its
    /// boundary conditions evaluated; the matrix and right-hand side are
    /// assembled on the first host use (see the type's documentation).
    pub fn deferred(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        schemes: Schemes,
        problem: &LaplacianProblem,
    ) -> Result<Self, FvmError> {
        Self::with_new_structure(mesh, geometry, schemes, true)?.evaluated(problem)
    }

    /// [`Self::deferred`] without the CSR pattern, for a system the device
    /// assembles from the mesh (`gpu::assembly::AssemblyMap` reads no host
    /// pattern): the pattern is built by the first host use (as the
    /// assembly is) or by [`Self::pattern`]. Such a system shares no
    /// structure ([`Self::with_structure_of`] refuses it) until then.
    pub fn deferred_without_pattern(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        schemes: Schemes,
        problem: &LaplacianProblem,
    ) -> Result<Self, FvmError> {
        Self::with_new_structure(mesh, geometry, schemes, false)?.evaluated(problem)
    }

    /// The matrix's pattern (values as the last assembly left them; zeros
    /// before the first), built here for a system made without it.
    pub fn pattern(&mut self) -> Result<&Csr, FvmError> {
        self.ensure_pattern()?;
        Ok(&self.matrix)
    }

    /// The permutation of the rows that `ordering` gives (`None`: the mesh
    /// order, where RCM keeps an order that is banded already,
    /// `RowOrdering::keeps_banded`). The band is read from the faces; the
    /// pattern is built (a system made without it) only for an ordering
    /// computed from it.
    pub fn row_permutation(
        &mut self,
        ordering: RowOrdering,
        slice_height: usize,
    ) -> Result<Option<Permutation>, String> {
        let mesh = self.mesh;
        let banded = ordering.keeps_banded(|| {
            relative_bandwidth_of_pairs(mesh.n_cells(), mesh.owner(), mesh.neighbour())
        });
        if banded {
            return Ok(None);
        }
        if self.pattern_unbuilt && ordering.of_graph() {
            // Only the ordering would read the pattern (a system assembled
            // on the device): the cells' graph from the faces is the
            // pattern's graph, without the pattern's rows, values and
            // symmetry check.
            let graph = crate::timings::span("cell graph", || cell_graph(mesh));
            return Ok(ordering.permutation_of_graph(graph));
        }
        let pattern = self.pattern().map_err(|e| e.to_string())?;
        ordering.permutation(pattern, slice_height)
    }

    /// Builds the pattern of a system made without it (nothing otherwise).
    fn ensure_pattern(&mut self) -> Result<(), FvmError> {
        if self.pattern_unbuilt {
            self.matrix = crate::timings::span("matrix pattern", || build_pattern(self.mesh))?;
            self.pattern_unbuilt = false;
        }
        Ok(())
    }

    /// A system of another problem on the same mesh with the same schemes:
    /// the pattern, slot map, face geometry, gradient scheme and regions of
    /// `self` are shared, not built again or copied (a flow case's momentum
    /// components and pressure share them), then `problem` is assembled.
    pub fn with_structure_of(&self, problem: &LaplacianProblem) -> Result<Self, FvmError> {
        self.sharing_structure()?.assembled(problem)
    }

    /// [`Self::with_structure_of`] without the assembly ([`Self::deferred`]).
    pub fn deferred_with_structure_of(&self, problem: &LaplacianProblem) -> Result<Self, FvmError> {
        self.sharing_structure()?.evaluated(problem)
    }

    /// Whether the matrix and right-hand side are assembled (not deferred).
    pub fn is_assembled(&self) -> bool {
        self.pending.is_none()
    }

    /// Assembles the matrix and right-hand side of a deferred system's
    /// problem; nothing for an assembled system.
    pub fn ensure_assembled(&mut self) -> Result<(), FvmError> {
        self.ensure_pattern()?;
        match self.pending.take() {
            Some(Pending {
                fields: Some(fields),
                ..
            }) => {
                crate::timings::span("host matrix and right-hand side", || {
                    self.assemble_matrix(fields)
                });
                Ok(())
            }
            Some(Pending {
                problem,
                fields: None,
            }) => self.reassemble(&problem),
            None => Ok(()),
        }
    }

    /// A deferred system's evaluated values, taken for an assembly elsewhere
    /// (`gpu::assembly::DeviceLaplacian`'s constructors take them): their
    /// memory goes with them, and a host assembly that comes later evaluates
    /// the problem again. `None` when the system is assembled or the values
    /// were taken already (then evaluate the problem:
    /// [`Self::take_or_evaluate`]).
    pub fn take_evaluated(&mut self) -> Option<ProblemValues> {
        let fields = self.pending.as_mut()?.fields.take()?;
        Some(ProblemValues {
            gamma: fields.gamma,
            uniform_gamma: fields.uniform_gamma,
            gamma_boundary: fields.gamma_boundary,
            source: fields.source,
            bc: self.bc.clone(),
            time: self.time,
            singular: self.singular,
            floating: self.floating.clone(),
            gradient: self.own_gradient.clone(),
        })
    }

    /// The values of `problem` for an assembly elsewhere: those a deferred
    /// system of `problem` kept ([`Self::take_evaluated`]), else `problem`
    /// evaluated. `problem` must be the one the system was made or last
    /// re-assembled with.
    pub fn take_or_evaluate(
        &mut self,
        problem: &LaplacianProblem,
    ) -> Result<ProblemValues, FvmError> {
        match self.take_evaluated() {
            Some(values) => Ok(values),
            None => self.evaluate(problem),
        }
    }

    /// An empty system (zero values, no conditions) with a new structure.
    fn with_new_structure(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        schemes: Schemes,
        with_pattern: bool,
    ) -> Result<Self, FvmError> {
        // The internal faces are checked here, their arrays built on the
        // first host use (see `SharedStructure`).
        let boundary_faces = crate::timings::span("face geometry check", || {
            FaceGeometry::check(mesh, geometry, schemes.sn_grad)?;
            BoundaryFaceGeometry::new(mesh, geometry, schemes.sn_grad)
        })?;
        let first = mesh.n_internal_faces();
        let mut active = vec![true; mesh.n_faces() - first];
        for patch in mesh.patches().iter().filter(|p| p.kind == PatchKind::Empty) {
            active[patch.boundary_faces(first)].fill(false);
        }
        let gradient = crate::timings::span("cell gradient", || {
            CellGradient::new(
                schemes.grad,
                mesh,
                geometry,
                &boundary_faces.patch_deltas,
                &active,
            )
        })?;
        let matrix = if with_pattern {
            crate::timings::span("matrix pattern", || build_pattern(mesh))?
        } else {
            Csr::empty()
        };
        let (n_regions, regions) =
            crate::timings::span("cell regions", || crate::mesh::check::cell_regions(mesh));
        let regions = match n_regions {
            1 => Vec::new(),
            _ => regions,
        };
        let shared = SharedStructure {
            faces: OnceLock::new(),
            boundary_faces,
            gradient,
            slots: OnceLock::new(),
            regions,
            n_regions,
        };
        let mut system = Self::empty(mesh, geometry, schemes, Arc::new(shared), matrix);
        system.pattern_unbuilt = !with_pattern;
        Ok(system)
    }

    /// An empty system on `self`'s structure, its matrix of the shared pattern.
    fn sharing_structure(&self) -> Result<Self, FvmError> {
        if self.pattern_unbuilt {
            return Err(FvmError::invalid(
                "a system made without its matrix pattern shares its structure only once \
                 the pattern is built (LaplacianSystem::pattern)",
            ));
        }
        Ok(Self::empty(
            self.mesh,
            self.geometry,
            self.schemes,
            Arc::clone(&self.shared),
            self.matrix.zeros_like(),
        ))
    }

    /// A system of zero values and no conditions on `shared`. The vectors
    /// are allocated zeroed: no memory is touched before an assembly writes.
    fn empty(
        mesh: &'m Mesh,
        geometry: &'m Geometry,
        schemes: Schemes,
        shared: Arc<SharedStructure>,
        matrix: Csr,
    ) -> Self {
        let n_cells = mesh.n_cells();
        let first = mesh.n_internal_faces();
        Self {
            matrix,
            rhs: vec![0.0; n_cells],
            mesh,
            geometry,
            schemes,
            shared,
            own_gradient: None,
            bc: BoundaryCoeffs::default(),
            gamma_mag_sf: vec![0.0; first],
            gamma_mag_sf_boundary: vec![0.0; mesh.n_faces() - first],
            explicit_rhs: vec![0.0; n_cells],
            time: TimeScheme::SteadyState,
            singular: None,
            floating: Vec::new(),
            references: Vec::new(),
            pending: None,
            pattern_unbuilt: false,
        }
    }

    /// The system with `problem` checked and its conditions evaluated, the
    /// assembly deferred.
    fn evaluated(mut self, problem: &LaplacianProblem) -> Result<Self, FvmError> {
        let values = self.evaluate(problem)?;
        let fields = self.set_conditions(values);
        self.pending = Some(Pending {
            problem: problem.clone(),
            fields: Some(fields),
        });
        self.log_floating_regions();
        Ok(self)
    }

    /// The system with `problem` assembled (the end of [`Self::new`]).
    fn assembled(mut self, problem: &LaplacianProblem) -> Result<Self, FvmError> {
        self.reassemble(problem)?;
        self.log_floating_regions();
        Ok(self)
    }

    /// Logs a mesh of several regions with floating ones.
    fn log_floating_regions(&self) {
        let n_floating = self.floating.iter().filter(|&&f| f).count();
        let n_regions = self.shared.n_regions;
        if n_regions > 1 && n_floating > 0 {
            log::info!(
                "The mesh has {n_regions} disconnected regions, {n_floating} of them without a \
                 fixed value: the level of each is fixed on its own"
            );
        }
    }

    /// Re-assembles matrix values and the explicit right-hand side for new
    /// physical data (Γ, sources, boundary values, time step); the pattern stays.
    pub fn reassemble(&mut self, problem: &LaplacianProblem) -> Result<(), FvmError> {
        self.ensure_pattern()?;
        self.pending = None;
        let values = self.evaluate(problem)?;
        crate::timings::span("host matrix and right-hand side", || self.assemble(values));
        Ok(())
    }

    /// Checks `problem` and evaluates what an assembly consumes besides the
    /// fixed geometry: Γ and q per cell, Γ per boundary face, the boundary
    /// coefficients, whether the matrix is singular, and (for
    /// `boundaryCorrected` least squares) the gradient data of these
    /// conditions. [`Self::reassemble`] assembles them on the CPU;
    /// `gpu::assembly::DeviceLaplacian` uploads them and assembles on the device.
    pub fn evaluate(&self, problem: &LaplacianProblem) -> Result<ProblemValues, FvmError> {
        let mesh = self.mesh;
        let geometry = self.geometry;
        BoundaryCondition::check(&problem.boundary, mesh)?;
        if let TimeScheme::Euler { dt } = problem.time {
            if !(dt.is_finite() && dt > 0.0) {
                return Err(FvmError::invalid(format!(
                    "time step is {dt}; it must be finite and positive"
                )));
            }
        }
        let policy = problem.singular;
        if let Reference::Cell { cell, value } = policy.reference {
            if cell >= mesh.n_cells() || !value.is_finite() {
                return Err(FvmError::invalid(format!(
                    "reference cell {cell} with value {value}: the cell must be below {} and the value finite",
                    mesh.n_cells()
                )));
            }
        }
        if policy.tolerance.is_nan() || policy.tolerance < 0.0 {
            return Err(FvmError::invalid(
                "singular-problem tolerance must be non-negative",
            ));
        }
        let uniform_gamma = match problem.gamma {
            CellField::Uniform(g) => Some(g),
            _ => None,
        };
        let centres = &geometry.cell_centres;
        let gamma = crate::timings::span("gamma per cell and boundary face", || {
            let gamma = problem.gamma.cell_values(centres, "gamma")?;
            check_values(&gamma, true, |c| format!("gamma in cell {c}"))?;
            let gamma_boundary = self.boundary_gamma(&problem.gamma, &gamma);
            check_values(&gamma_boundary, true, |b| {
                format!("gamma on boundary face {}", mesh.n_internal_faces() + b)
            })?;
            Ok::<_, FvmError>((gamma, gamma_boundary))
        });
        let (gamma, gamma_boundary) = gamma?;
        let source = crate::timings::span("source per cell", || {
            let source = problem.source.cell_values(centres, "source")?;
            check_values(&source, false, |c| format!("source in cell {c}"))?;
            Ok::<_, FvmError>(source)
        })?;
        let bc = crate::timings::span("boundary coefficients", || {
            BoundaryCoeffs::new(
                &problem.boundary,
                mesh,
                &self.shared.boundary_faces.patch_delta_coeffs,
            )
        });
        let gradient = if self.schemes.sn_grad == SnGradScheme::BoundaryCorrected
            && self.schemes.grad == GradScheme::LeastSquares
        {
            // Fixed values sit at the face centre: fit them there (see SnGradScheme).
            let deltas: Vec<Vec3> = (0..bc.active.len())
                .map(|b| {
                    if bc.value_internal[b] == 0.0 {
                        self.shared.boundary_faces.patch_face_deltas[b]
                    } else {
                        self.shared.boundary_faces.patch_deltas[b]
                    }
                })
                .collect();
            Some(CellGradient::new(
                self.schemes.grad,
                mesh,
                geometry,
                &deltas,
                &bc.active,
            )?)
        } else {
            None
        };
        // A boundary face puts −Γ_b|S_b|·gradientInternal on the diagonal
        // (the expression `assemble` adds); without a positive one and without
        // a time term the matrix is singular.
        // Per region: without a time term and without such a face, its block
        // of the matrix is singular.
        let first = mesh.n_internal_faces();
        let mut fixed = vec![problem.time != TimeScheme::SteadyState; self.shared.n_regions];
        for (b, &gamma_b) in gamma_boundary.iter().enumerate() {
            if bc.active[b]
                && -(gamma_b * self.shared.boundary_faces.mag_sf[b]) * bc.gradient_internal[b] > 0.0
            {
                fixed[self.shared.region(mesh.owner()[first + b] as usize)] = true;
            }
        }
        let floating: Vec<bool> = fixed.iter().map(|&f| !f).collect();
        let singular = floating.iter().any(|&f| f).then_some(policy);
        Ok(ProblemValues {
            gamma,
            uniform_gamma,
            gamma_boundary,
            source,
            bc,
            time: problem.time,
            singular,
            floating,
            gradient,
        })
    }

    /// Takes the conditions of evaluated values (boundary coefficients, time
    /// scheme, gradient data, singularity), returns what the matrix
    /// assembly consumes besides them: Γ per cell and per boundary face, q.
    fn set_conditions(&mut self, problem: ProblemValues) -> AssemblyFields {
        let ProblemValues {
            gamma,
            uniform_gamma,
            gamma_boundary,
            source,
            bc,
            time,
            singular,
            floating,
            gradient,
        } = problem;
        self.bc = bc;
        self.time = time;
        if let Some(gradient) = gradient {
            self.own_gradient = Some(gradient);
        }
        self.singular = singular;
        self.floating = floating;
        AssemblyFields {
            gamma,
            gamma_boundary,
            source,
            uniform_gamma,
        }
    }

    /// The CPU assembly of evaluated values (OpenFOAM `gaussLaplacianScheme`,
    /// `EulerDdtScheme`, `setReference`).
    fn assemble(&mut self, problem: ProblemValues) {
        let fields = self.set_conditions(problem);
        self.assemble_matrix(fields);
    }

    /// The matrix and explicit right-hand side of `fields` under the
    /// conditions set ([`Self::set_conditions`]).
    fn assemble_matrix(&mut self, fields: AssemblyFields) {
        let AssemblyFields {
            gamma,
            gamma_boundary,
            source,
            ..
        } = fields;
        let mesh = self.mesh;
        let geometry = self.geometry;
        let owner = mesh.owner();
        let neighbour = mesh.neighbour();
        let volumes = &geometry.cell_volumes;
        let shared = Arc::clone(&self.shared);
        let slots = shared_slots(&shared, &self.matrix, mesh);
        let sn_grad = self.schemes.sn_grad;
        let interpolation = self.schemes.gamma_interpolation;
        // Γ_f|S_f| and the coefficient Γ_f|S_f|Δ_f of internal face f: from
        // the face geometry's arrays where a flow solver had them built (its
        // pressure equation is reassembled every corrector; a norm, a
        // square root and two divisions a face fewer), else with the face's
        // entries computed where they are read, the same bits (see
        // `SharedStructure::faces`).
        let stored = shared.faces.get().filter(|_| geometry.keeps_faces());
        let face_coeffs = |f: usize| {
            let (o, n) = (owner[f] as usize, neighbour[f] as usize);
            let (mag_sf, delta_coeff, w) = match stored {
                Some(faces) => (faces.mag_sf[f], faces.delta_coeffs[f], geometry.weights[f]),
                None => {
                    let (sf, w) = geometry.internal_area_and_weight(mesh, f);
                    let face = FaceGeometry::internal_face_of(sf, geometry.delta(mesh, f), sn_grad);
                    (face.mag_sf, face.delta_coeff, w)
                }
            };
            let gamma_f = interpolation.interpolate(gamma[o], gamma[n], w);
            let gamma_mag_sf = gamma_f * mag_sf;
            (gamma_mag_sf, gamma_mag_sf * delta_coeff)
        };
        let (row_ptr, values) = self.matrix.row_ptr_and_values_mut();
        values.fill(0.0);
        if rayon::current_num_threads() >= PartSides::MIN_PARTS {
            // The faces' coefficients as a parallel map (8 bytes a face for
            // the time of the assembly), then each part of the cells adds
            // its cells' sides into its own rows in face order: the serial
            // loop's bits.
            let coeffs: Vec<f64> = self
                .gamma_mag_sf
                .par_iter_mut()
                .enumerate()
                .map(|(f, g)| {
                    let (gamma_mag_sf, coeff) = face_coeffs(f);
                    *g = gamma_mag_sf;
                    coeff
                })
                .collect();
            let sides = PartSides::new(mesh);
            let parts = sides.parts();
            let row_lengths = parts.iter().map(|p| row_ptr[p.end] - row_ptr[p.start]);
            crate::slices::split_lengths(values, row_lengths)
                .into_par_iter()
                .zip(parts)
                .enumerate()
                .for_each(|(part, (rows, cells))| {
                    let base = row_ptr[cells.start];
                    sides.for_each(mesh, part, |f, c, is_owner| {
                        if let Some(&coeff) = coeffs.get(f) {
                            let off = match is_owner {
                                true => slots.upper[f],
                                false => slots.lower[f],
                            };
                            rows[off as usize - base] -= coeff;
                            rows[slots.diagonal[c] as usize - base] += coeff;
                        }
                    })
                });
        } else {
            for f in 0..mesh.n_internal_faces() {
                let (o, n) = (owner[f] as usize, neighbour[f] as usize);
                let (gamma_mag_sf, coeff) = face_coeffs(f);
                self.gamma_mag_sf[f] = gamma_mag_sf;
                values[slots.upper[f] as usize] -= coeff;
                values[slots.lower[f] as usize] -= coeff;
                values[slots.diagonal[o] as usize] += coeff;
                values[slots.diagonal[n] as usize] += coeff;
            }
        }
        for ((b, q), v) in self.explicit_rhs.iter_mut().zip(&source).zip(volumes) {
            *b = q * v;
        }
        let first = mesh.n_internal_faces();
        for (b, &gamma_b) in gamma_boundary.iter().enumerate() {
            if !self.bc.active[b] {
                continue;
            }
            let o = owner[first + b] as usize;
            let gamma_mag_sf = gamma_b * shared.boundary_faces.mag_sf[b];
            self.gamma_mag_sf_boundary[b] = gamma_mag_sf;
            let diag = -gamma_mag_sf * self.bc.gradient_internal[b];
            values[slots.diagonal[o] as usize] += diag;
            self.explicit_rhs[o] += gamma_mag_sf * self.bc.gradient_boundary[b];
        }
        if let TimeScheme::Euler { dt } = self.time {
            for (c, v) in volumes.iter().enumerate() {
                values[slots.diagonal[c] as usize] += v / dt;
            }
        }
        self.references.clear();
        if let Some(SingularPolicy {
            reference: Reference::Cell { cell, value },
            ..
        }) = self.singular
        {
            // The given cell fixes its region; every other floating region
            // is pinned at its lowest cell to the same value.
            let mut pinned = vec![false; self.shared.n_regions];
            let mut cells = Vec::new();
            for c in std::iter::once(cell).chain(0..mesh.n_cells()) {
                let r = self.shared.region(c);
                if self.floating[r] && !pinned[r] {
                    pinned[r] = true;
                    cells.push(c);
                }
            }
            for c in cells {
                let slot = slots.diagonal[c] as usize;
                let diag = values[slot];
                values[slot] += diag;
                self.references.push((c, diag, value));
            }
        }
        self.rhs.copy_from_slice(&self.explicit_rhs);
    }

    /// Γ on boundary faces: uniform value, owner cell value, or function at the face centre.
    fn boundary_gamma(&self, field: &CellField, cell_gamma: &[f64]) -> Vec<f64> {
        let first = self.mesh.n_internal_faces();
        let owner = self.mesh.owner();
        match field {
            CellField::Function(f) => {
                super::evaluate_at(&self.geometry.boundary_face_centres, |c| f(c))
            }
            _ => owner[first..]
                .par_iter()
                .with_min_len(1 << 14)
                .map(|&c| cell_gamma[c as usize])
                .collect(),
        }
    }

    /// Sets `rhs` for the current field `p` (used by the non-orthogonal
    /// correction) and the old-time field `old` (required by Euler). For an
    /// all-Neumann problem, checks consistency (or projects) and applies the
    /// reference.
    pub fn update_rhs(&mut self, p: &[f64], old: Option<&[f64]>) -> Result<(), FvmError> {
        self.ensure_assembled()?;
        let n_cells = self.mesh.n_cells();
        check_len(p, n_cells, "field")?;
        self.rhs.copy_from_slice(&self.explicit_rhs);
        if let TimeScheme::Euler { dt } = self.time {
            let old = old
                .ok_or_else(|| FvmError::invalid("the Euler time term needs the old-time field"))?;
            check_len(old, n_cells, "old-time field")?;
            for ((b, v), p0) in self
                .rhs
                .iter_mut()
                .zip(&self.geometry.cell_volumes)
                .zip(old)
            {
                *b += v / dt * p0;
            }
        }
        if self.schemes.sn_grad.is_corrected() {
            let grad = timings::span("gradient for the correction", || self.gradient(p));
            let flux = timings::span("non-orthogonal correction", || {
                self.internal_correction(p, &grad)
            });
            let owner = self.mesh.owner();
            // Each cell part adds its cells' sides in face order (the
            // serial loop's bits).
            let sides = PartSides::new(self.mesh);
            let parts = sides.parts();
            split_by_parts(&mut self.rhs, parts)
                .into_par_iter()
                .zip(parts)
                .enumerate()
                .for_each(|(part, (rhs, cells))| {
                    sides.for_each(self.mesh, part, |f, c, is_owner| {
                        if let Some(flux) = flux.get(f) {
                            match is_owner {
                                true => rhs[c - cells.start] += flux,
                                false => rhs[c - cells.start] -= flux,
                            }
                        }
                    })
                });
            if self.schemes.sn_grad == SnGradScheme::BoundaryCorrected {
                let first = self.mesh.n_internal_faces();
                for (b, k) in self
                    .shared
                    .boundary_faces
                    .patch_correction_vectors
                    .iter()
                    .enumerate()
                {
                    // Value fraction f = −gradientInternal/Δ_b (1 fixedValue, 0 gradient BCs).
                    let fraction = -self.bc.gradient_internal[b]
                        / self.shared.boundary_faces.patch_delta_coeffs[b];
                    if self.bc.active[b] && fraction != 0.0 {
                        let o = owner[first + b] as usize;
                        self.rhs[o] += fraction * self.gamma_mag_sf_boundary[b] * k.dot(&grad[o]);
                    }
                }
            }
        }
        if let Some(policy) = self.singular {
            self.make_consistent(policy)?;
            for &(cell, diag, value) in &self.references {
                self.rhs[cell] += diag * value;
            }
        }
        Ok(())
    }

    /// Checks Σb ≈ 0 over each floating region, or removes its sum there as
    /// a uniform source.
    fn make_consistent(&mut self, policy: SingularPolicy) -> Result<(), FvmError> {
        let (sum, scale) = self.region_sums(&self.rhs, |b, _| b, |b, _| b.abs());
        if policy.project {
            let volumes = &self.geometry.cell_volumes;
            let (region_volume, _) = self.region_sums(volumes, |v, _| v, |_, _| 0.0);
            for (c, (b, v)) in self.rhs.iter_mut().zip(volumes).enumerate() {
                let r = self.shared.region(c);
                if self.floating[r] {
                    *b -= v * (sum[r] / region_volume[r]);
                }
            }
            return Ok(());
        }
        for r in (0..self.shared.n_regions).filter(|&r| self.floating[r]) {
            if sum[r].abs() > policy.tolerance * scale[r] {
                return Err(FvmError::InconsistentRhs {
                    sum: sum[r],
                    scale: scale[r],
                    tolerance: policy.tolerance,
                });
            }
        }
        Ok(())
    }

    /// Two sums per region of per-cell terms `first(x_c, V_c)` and
    /// `second(x_c, V_c)`, in cell order (for one region: the plain sums).
    fn region_sums(
        &self,
        x: &[f64],
        first: impl Fn(f64, f64) -> f64,
        second: impl Fn(f64, f64) -> f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let mut a = vec![0.0; self.shared.n_regions];
        let mut b = vec![0.0; self.shared.n_regions];
        for (c, (&x, &v)) in x.iter().zip(&self.geometry.cell_volumes).enumerate() {
            let r = self.shared.region(c);
            a[r] += first(x, v);
            b[r] += second(x, v);
        }
        (a, b)
    }

    /// Shifts `p` to zero volume-weighted mean over each floating region.
    fn shift_floating_to_zero_mean(&self, p: &mut [f64]) {
        let (weighted, volume) = self.region_sums(p, |p, v| p * v, |_, v| v);
        for (c, x) in p.iter_mut().enumerate() {
            let r = self.shared.region(c);
            if self.floating[r] {
                *x -= weighted[r] / volume[r];
            }
        }
    }

    /// Number of regions of the mesh (cells connected through internal faces).
    pub fn n_regions(&self) -> usize {
        self.shared.n_regions
    }

    /// Explicit non-orthogonal correction flux Γ_f|S_f|·λ_f·(k_f·∇p_f) of every
    /// internal face (λ_f the `limited` limiter, else 1); empty for schemes
    /// without correction. It adds to the owner's and subtracts from the
    /// neighbour's right-hand side.
    pub fn non_orth_correction(&self, p: &[f64]) -> Vec<f64> {
        if !self.schemes.sn_grad.is_corrected() {
            return Vec::new();
        }
        self.internal_correction(p, &self.gradient(p))
    }

    /// [`Self::non_orth_correction`] with the cell gradient of `p` given.
    fn internal_correction(&self, p: &[f64], grad: &[Vec3]) -> Vec<f64> {
        let mut flux = self.sn_grad_correction(p, grad);
        flux.par_iter_mut()
            .zip(&self.gamma_mag_sf)
            .for_each(|(correction, g)| *correction *= g);
        flux
    }

    /// The explicit part of the snGrad scheme on every internal face, λ_f
    /// k_f·∇p_f (λ_f the `limited` limiter, else 1) from the cell gradient
    /// `grad` of `p`: what `fvc::snGrad` adds to the orthogonal part
    /// `delta_coeffs`·(p_N − p_P). Empty for schemes without correction.
    pub fn sn_grad_correction(&self, p: &[f64], grad: &[Vec3]) -> Vec<f64> {
        if !self.schemes.sn_grad.is_corrected() {
            return Vec::new();
        }
        let (owner, neighbour) = (self.mesh.owner(), self.mesh.neighbour());
        let (mesh, geometry) = (self.mesh, self.geometry);
        let sn_grad = self.schemes.sn_grad;
        // Each face on its own (a map, the same bits on any number of
        // threads).
        (0..mesh.n_internal_faces())
            .into_par_iter()
            .map(|f| {
                let (o, n) = (owner[f] as usize, neighbour[f] as usize);
                // Computed per face (one evaluation of a face the geometry
                // does not store), as in the assembly.
                let (sf, w) = geometry.internal_area_and_weight(mesh, f);
                let face_grad = w * (grad[o] - grad[n]) + grad[n];
                let face = FaceGeometry::internal_face_of(sf, geometry.delta(mesh, f), sn_grad);
                let mut correction = face.correction.dot(&face_grad);
                if let SnGradScheme::Limited(psi) = self.schemes.sn_grad {
                    let uncorrected = face.delta_coeff * (p[n] - p[o]);
                    let limiter = (psi * uncorrected.abs()
                        / ((1.0 - psi) * correction.abs() + SMALL))
                        .min(1.0);
                    correction *= limiter;
                }
                correction
            })
            .collect()
    }

    /// Cell gradient of `p` by the system's gradient scheme and boundary conditions.
    pub fn gradient(&self, p: &[f64]) -> Vec<Vec3> {
        self.cell_gradient()
            .compute(self.mesh, self.geometry, &self.bc, p)
    }

    /// laplacianFoam's loop: `n_non_orth_correctors + 1` times, update the
    /// right-hand side from the current `p` and solve into `p` (the solver is
    /// called with the matrix, the right-hand side and `p` as initial guess).
    /// `ZeroMean` singular problems are shifted to zero mean after each solve.
    pub fn solve<F>(
        &mut self,
        p: &mut [f64],
        old: Option<&[f64]>,
        n_non_orth_correctors: usize,
        mut solver: F,
    ) -> Result<(), FvmError>
    where
        F: FnMut(&Csr, &[f64], &mut [f64]),
    {
        self.solve_in_place(p, old, n_non_orth_correctors, |a, b, x| solver(a, b, x))
    }

    /// [`Self::solve`] with the matrix lent mutably: the solver may take its
    /// values out while it holds them in a layout of its own
    /// ([`Csr::take_values`], `solve::solve_pcg_in_place`) and puts them
    /// back before it returns.
    pub fn solve_in_place<F>(
        &mut self,
        p: &mut [f64],
        old: Option<&[f64]>,
        n_non_orth_correctors: usize,
        mut solver: F,
    ) -> Result<(), FvmError>
    where
        F: FnMut(&mut Csr, &[f64], &mut [f64]),
    {
        for _ in 0..=n_non_orth_correctors {
            self.update_rhs(p, old)?;
            solver(&mut self.matrix, &self.rhs, p);
            assert_eq!(
                self.matrix.values().len(),
                self.matrix.nnz(),
                "LaplacianSystem::solve_in_place: the solver kept the matrix's values"
            );
            if let Some(SingularPolicy {
                reference: Reference::ZeroMean,
                ..
            }) = self.singular
            {
                self.shift_floating_to_zero_mean(p);
            }
        }
        Ok(())
    }

    /// Whether the matrix without reference is singular (all-Neumann steady problem).
    pub fn is_singular(&self) -> bool {
        self.singular.is_some()
    }
    pub fn mesh(&self) -> &'m Mesh {
        self.mesh
    }
    pub fn geometry(&self) -> &'m Geometry {
        self.geometry
    }
    /// The gradient scheme's data (least-squares vectors) for the conditions
    /// last assembled.
    pub fn cell_gradient(&self) -> &CellGradient {
        self.own_gradient.as_ref().unwrap_or(&self.shared.gradient)
    }
    /// Where each coefficient goes in the matrix's values, built on the
    /// first call (see [`SharedStructure`]'s `slots`).
    pub fn slots(&self) -> &SlotMap {
        assert!(
            !self.pattern_unbuilt,
            "the slot map of a system whose pattern is not built (assemble it first)"
        );
        shared_slots(&self.shared, &self.matrix, self.mesh)
    }
    pub fn schemes(&self) -> Schemes {
        self.schemes
    }
    /// The face geometry of the mesh and scheme, built on the first call
    /// and shared by the systems of the structure (see [`SharedStructure`]'s
    /// `faces`): where only the boundary faces' part is read, take
    /// [`Self::boundary_face_geometry`], and where a few faces' entries are,
    /// [`FaceGeometry::internal_face`].
    pub fn face_geometry(&self) -> &FaceGeometry {
        self.shared
            .faces(self.mesh, self.geometry, self.schemes.sn_grad)
    }
    /// The face geometry if a host use built it already, without building it.
    pub fn built_face_geometry(&self) -> Option<&FaceGeometry> {
        self.shared.faces.get()
    }
    /// The boundary faces' part of the face geometry (always built).
    pub fn boundary_face_geometry(&self) -> &BoundaryFaceGeometry {
        &self.shared.boundary_faces
    }
    /// Heap bytes of the system's parts, by name: its own arrays and those of
    /// the structure it shares (counted by each system that shares it); a
    /// part not built counts 0.
    pub fn memory_account(&self) -> Vec<(&'static str, usize)> {
        use crate::slices::bytes;
        use std::mem::size_of_val;
        let shared = &self.shared;
        vec![
            // The pattern's arrays are shared by the matrices of the
            // structure; their lengths are their capacities.
            ("matrix row pointers", size_of_val(self.matrix.row_ptr())),
            ("matrix columns", size_of_val(self.matrix.cols())),
            ("matrix values", size_of_val(self.matrix.values())),
            (
                "right-hand sides",
                bytes(&self.rhs) + bytes(&self.explicit_rhs),
            ),
            (
                "face coefficients (Γ|S|)",
                bytes(&self.gamma_mag_sf) + bytes(&self.gamma_mag_sf_boundary),
            ),
            (
                "face geometry",
                shared.faces.get().map_or(0, FaceGeometry::bytes),
            ),
            ("boundary face geometry", shared.boundary_faces.bytes()),
            (
                "slot map",
                shared.slots.get().map_or(0, |s| {
                    bytes(&s.diagonal) + bytes(&s.upper) + bytes(&s.lower)
                }),
            ),
            ("cell regions", bytes(&shared.regions)),
        ]
    }
    pub fn boundary_coeffs(&self) -> &BoundaryCoeffs {
        &self.bc
    }
    /// Γ_f|S_f| of every internal face.
    pub fn gamma_mag_sf(&self) -> &[f64] {
        &self.gamma_mag_sf
    }
    /// Right-hand side without old-time, non-orthogonal and reference terms:
    /// q·V plus boundary contributions.
    pub fn explicit_rhs(&self) -> &[f64] {
        &self.explicit_rhs
    }
}

fn check_len(v: &[f64], n: usize, what: &str) -> Result<(), FvmError> {
    if v.len() != n {
        return Err(FvmError::invalid(format!(
            "{what} has {} values but the mesh has {n} cells",
            v.len()
        )));
    }
    Ok(())
}

/// The slot map of `shared`, built from `matrix` (the shared pattern) on the
/// first call.
fn shared_slots<'s>(shared: &'s SharedStructure, matrix: &Csr, mesh: &Mesh) -> &'s SlotMap {
    shared
        .slots
        .get_or_init(|| crate::timings::span("slot map", || build_slots(matrix, mesh)))
}

/// The cells across each cell's internal faces, from the mesh's face
/// lists per cell.
struct CellsAcross<'m> {
    offsets: Vec<u32>,
    cell_faces: Vec<Label>,
    owner: &'m [Label],
    neighbour: &'m [Label],
    n_internal: usize,
}

impl<'m> CellsAcross<'m> {
    fn new(mesh: &'m Mesh) -> Self {
        let (offsets, cell_faces) = mesh.cell_faces();
        Self {
            offsets,
            cell_faces,
            owner: mesh.owner(),
            neighbour: mesh.neighbour(),
            n_internal: mesh.n_internal_faces(),
        }
    }

    /// Pushes onto `list` the cell across each internal face of cell `c`
    /// (a cell twice where two faces join them).
    fn push(&self, c: usize, list: &mut Vec<u32>) {
        let faces = &self.cell_faces[self.offsets[c] as usize..self.offsets[c + 1] as usize];
        for &f in faces {
            let f = f as usize;
            if f < self.n_internal {
                list.push(if self.owner[f] as usize == c {
                    self.neighbour[f]
                } else {
                    self.owner[f]
                });
            }
        }
    }
}

/// The graph of the cells, each joined to the cells across its internal
/// faces: the graph of [`build_pattern`]'s pattern (its rows less the
/// diagonal).
fn cell_graph(mesh: &Mesh) -> Graph {
    let across = CellsAcross::new(mesh);
    Graph::of_neighbours(mesh.n_cells(), |c, list| across.push(c, list))
}

/// CSR pattern of the cell adjacency plus the diagonal (zero values, left
/// untouched until an assembly writes them). Two cells sharing several faces
/// share one entry. Rows are built in parallel over blocks of cells and
/// joined in row order.
fn build_pattern(mesh: &Mesh) -> Result<Csr, FvmError> {
    let across = CellsAcross::new(mesh);
    let n_cells = mesh.n_cells();
    // Each row sorted and deduplicated (two faces may join the same pair of
    // cells).
    let (row_ptr, cols) = sorted_rows(n_cells, |c, row| {
        row.push(c as u32);
        across.push(c, row);
    });
    let nnz = cols.len();
    if u32::try_from(nnz).is_err() {
        return Err(FvmError::invalid(format!(
            "the matrix of {n_cells} cells has {nnz} entries, more than the 2^32 its slot map \
             can number: give a mesh of fewer cells"
        )));
    }
    Csr::new(n_cells, row_ptr, cols, vec![0.0; nnz]).map_err(FvmError::invalid)
}

/// The slot of every face coefficient and diagonal in `matrix`, the pattern
/// [`build_pattern`] built of `mesh`, in parallel.
fn build_slots(matrix: &Csr, mesh: &Mesh) -> SlotMap {
    use rayon::prelude::*;
    let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
    let (n_cells, n_internal) = (matrix.n_rows(), mesh.n_internal_faces());
    let slot = |r: u32, c: u32| {
        matrix
            .slot(r as usize, c as usize)
            .expect("the pattern holds every face") as u32
    };
    SlotMap {
        diagonal: (0..n_cells as u32)
            .into_par_iter()
            .map(|c| slot(c, c))
            .collect(),
        upper: (0..n_internal)
            .into_par_iter()
            .map(|f| slot(owner[f], neighbour[f]))
            .collect(),
        lower: (0..n_internal)
            .into_par_iter()
            .map(|f| slot(neighbour[f], owner[f]))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::bits;

    /// The cells' graph from the faces is the graph of the matrix's pattern,
    /// and a system made without the pattern gets the same Cuthill–McKee
    /// and reverse Cuthill–McKee rows from it as one made with it, on
    /// renumbered tetrahedra (several blocks of vertices), prisms, a
    /// polyhedral mesh and a box of one row of cells.
    #[test]
    fn the_cell_graph_orders_rows_as_the_pattern_does() {
        use crate::fvm::testing::{schemes, two_problems};
        for spec in [
            "box:30x30x30:tet:perturb=0.2:renumber",
            "box:9x8x7:prism:renumber",
            "meshes/foam/polydual",
            "box:9x1x1",
        ] {
            let mesh = crate::mesh::load(spec).unwrap();
            let pattern = build_pattern(&mesh).unwrap();
            assert_eq!(cell_graph(&mesh), Graph::of_matrix(&pattern), "{spec}");
            let geometry = mesh.geometry().unwrap();
            let (problem, _) = two_problems(&mesh);
            let schemes = schemes(SnGradScheme::Corrected, GradScheme::GaussLinear, false);
            for ordering in [RowOrdering::Cm, RowOrdering::Rcm] {
                let mut without =
                    LaplacianSystem::deferred_without_pattern(&mesh, &geometry, schemes, &problem)
                        .unwrap();
                let from_graph = without.row_permutation(ordering, 512).unwrap();
                assert!(without.pattern_unbuilt, "{spec}: the pattern stays unbuilt");
                let mut with =
                    LaplacianSystem::deferred(&mesh, &geometry, schemes, &problem).unwrap();
                let from_pattern = with.row_permutation(ordering, 512).unwrap();
                assert_eq!(from_graph, from_pattern, "{spec} {ordering}");
                // Only a banded order is kept (RCM on the row of cells).
                assert_eq!(
                    from_graph.is_none(),
                    spec == "box:9x1x1" && ordering == RowOrdering::Rcm
                );
            }
        }
    }

    /// The matrix, the gradient and the non-orthogonal correction's
    /// right-hand side, summed over cell parts on 4 threads, have the bits of
    /// the serial face loops (one thread), for both gradient schemes, on a hex box large
    /// enough to be cut into bucketed parts and on perturbed tets.
    #[test]
    fn cell_parts_sum_the_matrix_gradient_and_correction_with_serial_bits() {
        use crate::fvm::testing::{random_field, schemes, two_problems};
        for spec in ["box:72x70x68:perturb=0.1", "box:36x36x36:tet:perturb=0.2"] {
            let mesh = crate::mesh::load(spec).unwrap();
            let geometry = mesh.geometry().unwrap();
            let (problem, _) = two_problems(&mesh);
            let p = random_field(mesh.n_cells(), 5);
            for grad in [GradScheme::GaussLinear, GradScheme::LeastSquares] {
                let schemes = schemes(SnGradScheme::Corrected, grad, false);
                let on = |threads: usize| {
                    crate::test_support::on_threads(threads, || {
                        assert_eq!(PartSides::new(&mesh).parts().len() >= 4, threads == 4);
                        let mut system =
                            LaplacianSystem::deferred(&mesh, &geometry, schemes, &problem).unwrap();
                        system.update_rhs(&p, None).unwrap();
                        let values = system.matrix.values().to_vec();
                        (system.gradient(&p), system.rhs.clone(), values)
                    })
                };
                let (serial, parallel) = (on(1), on(4));
                assert!(serial.1.iter().any(|&b| b != 0.0));
                assert!(serial.0 == parallel.0, "{spec} {grad:?}: gradient");
                assert_eq!(bits(&serial.1), bits(&parallel.1), "{spec} {grad:?}: rhs");
                assert_eq!(
                    bits(&serial.2),
                    bits(&parallel.2),
                    "{spec} {grad:?}: matrix"
                );
            }
        }
    }

    #[test]
    fn deferred_systems_share_the_structure_and_assemble_as_eager_ones() {
        use crate::fvm::testing::{mixed_conditions, random_field, source, two_problems};
        let mesh = crate::mesh::load("box:6x5x4:perturb=0.2").unwrap();
        let geometry = mesh.geometry().unwrap();
        let (first, second) = two_problems(&mesh);
        let eager = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &first).unwrap();
        let mut deferred = eager.deferred_with_structure_of(&second).unwrap();
        let mut reference = eager.with_structure_of(&second).unwrap();
        for system in [&deferred, &reference] {
            assert!(system.matrix.shares_pattern_with(&eager.matrix));
            assert!(Arc::ptr_eq(&system.shared, &eager.shared));
        }
        // Checked and its conditions evaluated (the host's boundary values
        // use them), the matrix not assembled.
        assert!(!deferred.is_assembled() && reference.is_assembled());
        assert_eq!(deferred.boundary_coeffs(), reference.boundary_coeffs());
        assert!(deferred.matrix.values().iter().all(|&v| v == 0.0));
        // The first host use assembles it: the eager system's numbers.
        let p = random_field(mesh.n_cells(), 5);
        deferred.update_rhs(&p, None).unwrap();
        reference.update_rhs(&p, None).unwrap();
        assert!(deferred.is_assembled());
        assert_eq!(deferred.matrix, reference.matrix);
        assert_eq!(deferred.rhs, reference.rhs);
        assert_eq!(deferred.gamma_mag_sf(), reference.gamma_mag_sf());
        // Bad input is refused when the system is made, not at its first use.
        let negative = LaplacianProblem::steady(
            CellField::Uniform(-1.0),
            source(),
            mixed_conditions(&mesh, 3),
        );
        assert!(eager.deferred_with_structure_of(&negative).is_err());
    }

    #[test]
    fn a_system_without_its_pattern_builds_it_at_its_first_host_use() {
        use crate::fvm::testing::{random_field, two_problems};
        let mesh = crate::mesh::load("box:5x4x3:tet:perturb=0.2").unwrap();
        let geometry = mesh.geometry().unwrap();
        let (first, second) = two_problems(&mesh);
        let p = random_field(mesh.n_cells(), 7);
        let mut eager = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &first).unwrap();
        eager.update_rhs(&p, None).unwrap();
        // A device run's host system: no pattern, no structure to share.
        let lazy = || {
            LaplacianSystem::deferred_without_pattern(&mesh, &geometry, Schemes::default(), &first)
                .unwrap()
        };
        let mut by_use = lazy();
        assert_eq!((by_use.matrix.n_rows(), by_use.matrix.nnz()), (0, 0));
        assert!(by_use.with_structure_of(&second).is_err());
        assert!(by_use.deferred_with_structure_of(&second).is_err());
        // The first host use builds and assembles it as the eager system.
        by_use.update_rhs(&p, None).unwrap();
        assert_eq!(by_use.matrix, eager.matrix);
        assert_eq!(by_use.rhs, eager.rhs);
        assert_eq!(by_use.slots(), eager.slots());
        // An ordering's read of the pattern builds it without assembling.
        let mut by_pattern = lazy();
        let pattern = by_pattern.pattern().unwrap();
        assert_eq!(pattern.row_ptr(), eager.matrix.row_ptr());
        assert_eq!(pattern.cols(), eager.matrix.cols());
        assert!(!by_pattern.is_assembled());
        assert!(by_pattern.with_structure_of(&second).is_ok());
        by_pattern.ensure_assembled().unwrap();
        by_pattern.update_rhs(&p, None).unwrap();
        assert_eq!(by_pattern.matrix, eager.matrix);
        // Its values for the device are those of the eager system's problem.
        let mut taken = lazy();
        let values = taken.take_evaluated().unwrap();
        assert_eq!(values.source, eager.evaluate(&first).unwrap().source);
    }

    /// The band an ordering decision reads from the faces is the pattern's.
    #[test]
    fn the_band_of_the_faces_is_the_band_of_the_pattern() {
        use crate::fvm::testing::two_problems;
        use crate::sparse::ordering::{relative_bandwidth, relative_bandwidth_of_pairs};
        for spec in [
            "box:7x5x4",
            "box:6x5x4:tet:perturb=0.2:renumber",
            "box:9x1x1",
        ] {
            let mesh = crate::mesh::load(spec).unwrap();
            let geometry = mesh.geometry().unwrap();
            let (first, _) = two_problems(&mesh);
            let system =
                LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &first).unwrap();
            let of_faces =
                relative_bandwidth_of_pairs(mesh.n_cells(), mesh.owner(), mesh.neighbour());
            assert_eq!(of_faces, relative_bandwidth(&system.matrix), "{spec}");
            assert!(of_faces > 0.0, "{spec}");
        }
    }

    #[test]
    fn the_slot_map_is_built_on_the_first_host_assembly_only() {
        use crate::fvm::testing::{random_field, two_problems};
        let mesh = crate::mesh::load("box:5x4x3:tet:perturb=0.2").unwrap();
        let geometry = mesh.geometry().unwrap();
        let (first, second) = two_problems(&mesh);
        // A device run's host system: checked, never assembled on the host.
        let mut deferred =
            LaplacianSystem::deferred(&mesh, &geometry, Schemes::default(), &first).unwrap();
        let mut sharing = deferred.deferred_with_structure_of(&second).unwrap();
        assert!(deferred.shared.slots.get().is_none());
        assert!(deferred.take_evaluated().is_some());
        assert!(deferred.shared.slots.get().is_none());
        // A host assembly (a fallback) builds it once, for every system of
        // the structure, and assembles as an eager system does.
        let p = random_field(mesh.n_cells(), 3);
        sharing.update_rhs(&p, None).unwrap();
        assert!(deferred.shared.slots.get().is_some());
        let mut eager =
            LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &second).unwrap();
        eager.update_rhs(&p, None).unwrap();
        assert_eq!(sharing.matrix, eager.matrix);
        assert_eq!(sharing.rhs, eager.rhs);
        assert_eq!(deferred.slots(), eager.slots());
    }

    #[test]
    fn host_loops_never_build_the_face_geometry_and_read_its_bits() {
        use crate::fvm::testing::{random_field, schemes, two_problems};
        use GradScheme::{GaussLinear as Gauss, LeastSquares as Ls};
        use SnGradScheme::*;
        for (spec, sn_grad, grad) in [
            ("box:5x4x3:tet:perturb=0.2", Corrected, Gauss),
            ("box:5x4x3:tet:perturb=0.2", Limited(0.4), Ls),
            ("box:5x4x4:perturb=0.2", BoundaryCorrected, Ls),
            ("box:6x5x1:2d:perturb=0.3", Orthogonal, Gauss),
            ("box:4x4x4:perturb=0.2", Uncorrected, Gauss),
        ] {
            let mesh = crate::mesh::load(spec).unwrap();
            let geometry = mesh.geometry().unwrap();
            let schemes = schemes(sn_grad, grad, true);
            let (first, second) = two_problems(&mesh);
            // Made, evaluated, assembled, corrected and re-assembled on the
            // host: the face geometry's arrays are never built.
            let mut system = LaplacianSystem::deferred(&mesh, &geometry, schemes, &first).unwrap();
            let p = random_field(mesh.n_cells(), 9);
            system.update_rhs(&p, None).unwrap();
            system.reassemble(&second).unwrap();
            system.update_rhs(&p, None).unwrap();
            let correction = system.non_orth_correction(&p);
            assert!(system.built_face_geometry().is_none(), "{spec}");
            // What the loops computed per face is what the arrays hold: the
            // coefficients Γ_f|S_f|, each face's off-diagonal entries (one
            // face per pair of cells on these meshes), the correction fluxes.
            let arrays = FaceGeometry::new(&mesh, &geometry, sn_grad).unwrap();
            let values = system.evaluate(&second).unwrap();
            let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
            let grad = system.gradient(&p);
            let slots = system.slots();
            for f in 0..mesh.n_internal_faces() {
                let (o, n) = (owner[f] as usize, neighbour[f] as usize);
                let gamma_f = schemes.gamma_interpolation.interpolate(
                    values.gamma[o],
                    values.gamma[n],
                    geometry.weights[f],
                );
                let gamma_mag_sf = gamma_f * arrays.mag_sf[f];
                assert_eq!(system.gamma_mag_sf()[f].to_bits(), gamma_mag_sf.to_bits());
                let coeff = -(gamma_mag_sf * arrays.delta_coeffs[f]);
                for slot in [slots.upper[f], slots.lower[f]] {
                    assert_eq!(
                        system.matrix.values()[slot as usize].to_bits(),
                        coeff.to_bits()
                    );
                }
                if sn_grad.is_corrected() {
                    let w = geometry.weights[f];
                    let face_grad = w * (grad[o] - grad[n]) + grad[n];
                    let mut k = arrays.correction_vectors[f].dot(&face_grad);
                    if let Limited(psi) = sn_grad {
                        let uncorrected = arrays.delta_coeffs[f] * (p[n] - p[o]);
                        k *= (psi * uncorrected.abs() / ((1.0 - psi) * k.abs() + SMALL)).min(1.0);
                    }
                    assert_eq!(
                        correction[f].to_bits(),
                        (gamma_mag_sf * k).to_bits(),
                        "{spec}"
                    );
                }
            }
            assert_eq!(correction.is_empty(), !sn_grad.is_corrected());
            // The boundary part kept from the start is the arrays' own, and
            // a use of the arrays builds them once, for the structure.
            let boundary = system.boundary_face_geometry();
            let first_boundary = mesh.n_internal_faces();
            assert_eq!(
                bits(&boundary.mag_sf),
                bits(&arrays.mag_sf[first_boundary..])
            );
            assert_eq!(boundary.patch_delta_coeffs, arrays.patch_delta_coeffs);
            assert_eq!(
                boundary.patch_correction_vectors,
                arrays.patch_correction_vectors
            );
            let sharing = system.deferred_with_structure_of(&first).unwrap();
            assert_eq!(system.face_geometry(), &arrays);
            assert!(std::ptr::eq(
                sharing.built_face_geometry().unwrap(),
                system.face_geometry()
            ));
        }
    }

    #[test]
    fn one_region_keeps_no_region_per_cell() {
        use crate::fvm::testing::two_problems;
        let mesh = crate::mesh::load("box:4x3x3").unwrap();
        let geometry = mesh.geometry().unwrap();
        let (first, _) = two_problems(&mesh);
        let system =
            LaplacianSystem::deferred(&mesh, &geometry, Schemes::default(), &first).unwrap();
        assert_eq!(system.n_regions(), 1);
        assert!(system.shared.regions.is_empty());
        assert!((0..mesh.n_cells()).all(|c| system.shared.region(c) == 0));
    }

    /// `problem` with its source a function that counts its calls.
    fn counting_source(
        problem: &LaplacianProblem,
    ) -> (LaplacianProblem, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let inner = problem.source.clone();
        let source = CellField::function(move |c| {
            counter.fetch_add(1, Ordering::Relaxed);
            match &inner {
                CellField::Function(f) => f(c),
                CellField::Uniform(v) => *v,
                CellField::PerCell(_) => unreachable!("the test problems' sources are functions"),
            }
        });
        let counted = LaplacianProblem {
            source,
            ..problem.clone()
        };
        (counted, calls)
    }

    #[test]
    fn a_deferred_system_evaluates_its_problem_once() {
        use crate::fvm::testing::{random_field, two_problems};
        use std::sync::atomic::Ordering;
        let mesh = crate::mesh::load("box:6x5x4:perturb=0.2").unwrap();
        let geometry = mesh.geometry().unwrap();
        let n = mesh.n_cells();
        let (first, second) = two_problems(&mesh);
        let eager = LaplacianSystem::new(&mesh, &geometry, Schemes::default(), &first).unwrap();
        let (counted, calls) = counting_source(&second);
        let mut deferred = eager.deferred_with_structure_of(&counted).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), n);
        // The first host assembly uses the values the check evaluated.
        let p = random_field(n, 5);
        deferred.update_rhs(&p, None).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), n);
        let mut reference = eager.with_structure_of(&second).unwrap();
        reference.update_rhs(&p, None).unwrap();
        assert_eq!(deferred.matrix, reference.matrix);
        assert_eq!(deferred.rhs, reference.rhs);
        // An assembled system keeps nothing to take.
        assert!(deferred.take_evaluated().is_none());
        // A uniform Γ is marked so: the device moves no Γ array for it.
        assert_eq!(eager.evaluate(&first).unwrap().uniform_gamma, Some(2.0));
    }

    #[test]
    fn values_taken_from_a_deferred_system_are_its_problem_evaluated() {
        use crate::fvm::testing::{random_field, two_problems};
        use std::sync::atomic::Ordering;
        let mesh = crate::mesh::load("box:5x4x4:perturb=0.2").unwrap();
        let geometry = mesh.geometry().unwrap();
        let n = mesh.n_cells();
        let (_, second) = two_problems(&mesh);
        // boundaryCorrected least squares: the values carry gradient data of
        // their own.
        for schemes in [
            Schemes::default(),
            Schemes {
                sn_grad: SnGradScheme::BoundaryCorrected,
                grad: GradScheme::LeastSquares,
                ..Schemes::default()
            },
        ] {
            let (counted, calls) = counting_source(&second);
            let mut deferred =
                LaplacianSystem::deferred(&mesh, &geometry, schemes, &counted).unwrap();
            let reference = LaplacianSystem::new(&mesh, &geometry, schemes, &second).unwrap();
            let evaluated = reference.evaluate(&second).unwrap();
            assert_eq!(
                evaluated.gradient.is_some(),
                schemes.sn_grad == SnGradScheme::BoundaryCorrected
            );
            let taken = deferred.take_evaluated().unwrap();
            assert_eq!(taken, evaluated);
            // Γ varies: the device moves its array.
            assert_eq!(taken.uniform_gamma, None);
            assert_eq!(calls.load(Ordering::Relaxed), n);
            // Taken once: the next request evaluates the problem again, and so
            // does the host assembly that comes after.
            assert!(deferred.take_evaluated().is_none());
            assert_eq!(deferred.take_or_evaluate(&counted).unwrap(), evaluated);
            assert_eq!(calls.load(Ordering::Relaxed), 2 * n);
            let p = random_field(n, 7);
            let mut reference = reference;
            deferred.update_rhs(&p, None).unwrap();
            reference.update_rhs(&p, None).unwrap();
            assert_eq!(calls.load(Ordering::Relaxed), 3 * n);
            assert_eq!(deferred.matrix, reference.matrix);
            assert_eq!(deferred.rhs, reference.rhs);
        }
    }

    #[test]
    fn the_pattern_built_in_blocks_is_the_cell_adjacency() {
        // 24 000 cells: two blocks of rows.
        let mesh = crate::mesh::load("box:40x30x20:renumber").unwrap();
        let matrix = build_pattern(&mesh).unwrap();
        let slots = build_slots(&matrix, &mesh);
        let mut rows: Vec<Vec<u32>> = (0..mesh.n_cells() as u32).map(|c| vec![c]).collect();
        for (&o, &n) in mesh.owner().iter().zip(mesh.neighbour()) {
            rows[o as usize].push(n);
            rows[n as usize].push(o);
        }
        for (r, row) in rows.iter_mut().enumerate() {
            row.sort_unstable();
            row.dedup();
            assert_eq!(matrix.row(r).0, row.as_slice(), "row {r}");
            let diagonal = matrix.row_ptr()[r] + row.binary_search(&(r as u32)).unwrap();
            assert_eq!(slots.diagonal[r] as usize, diagonal);
        }
        for (f, (&o, &n)) in mesh.owner().iter().zip(mesh.neighbour()).enumerate() {
            assert_eq!(matrix.cols()[slots.upper[f] as usize], n);
            assert_eq!(matrix.cols()[slots.lower[f] as usize], o);
            assert!(
                (matrix.row_ptr()[o as usize]..matrix.row_ptr()[o as usize + 1])
                    .contains(&(slots.upper[f] as usize))
            );
        }
    }
}
