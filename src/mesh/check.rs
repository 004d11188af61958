//! Mesh quality report in the manner of OpenFOAM v1912's `checkMesh`
//! (`primitiveMeshCheck.C`, `primitiveMeshTools.C`, `polyMeshCheck.C`): the same
//! measures, thresholds and pass/fail rules, printed with the same labels.
//!
//! The report is computed from [`Geometry::compute`], which does not refuse
//! inverted cells: a bad mesh is measured and its faults counted.

use super::geometry::{ROOTVSMALL, VSMALL};
use super::{CellShape, Geometry, Label, Mesh, PatchKind, Vec3};
use crate::foam::write::format_g;
use rayon::prelude::*;
use std::fmt;

/// `primitiveMesh::closedThreshold_`: largest relative area-vector sum of a closed cell or boundary.
pub const CLOSED_THRESHOLD: f64 = 1e-6;
/// `primitiveMesh::aspectThreshold_`.
pub const ASPECT_THRESHOLD: f64 = 1000.0;
/// `primitiveMesh::nonOrthThreshold_` in degrees: faces above it are reported, not failed.
pub const NON_ORTH_THRESHOLD: f64 = 70.0;
/// `primitiveMesh::skewThreshold_`.
pub const SKEW_THRESHOLD: f64 = 4.0;
/// OpenFOAM's `SMALL` for double precision: the pyramid volume and orthogonality error limits.
const SMALL: f64 = 1e-15;

/// One boundary patch in the report.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchSummary {
    pub name: String,
    pub kind: PatchKind,
    pub faces: usize,
    /// Distinct points used by the patch's faces.
    pub points: usize,
}

/// Everything `check-mesh` measures. Counts of faulty entities are zero on a good mesh.
#[derive(Clone, Debug, PartialEq)]
pub struct MeshReport {
    pub n_points: usize,
    pub n_faces: usize,
    pub n_internal_faces: usize,
    pub n_cells: usize,
    /// Points used by no face (OpenFOAM `checkPoints`).
    pub n_unused_points: usize,
    /// Sets of cells connected through internal faces (OpenFOAM `regionSplit`);
    /// more than one is reported as checkMesh reports it, a warning.
    pub n_regions: usize,
    /// Points with a coordinate that is not a finite number, and faces and
    /// cells whose area, centre or volume is not (a point at 1e300 overflows
    /// them): any of them fails the check "finite geometry".
    pub n_non_finite_points: usize,
    pub n_non_finite_faces: usize,
    pub n_non_finite_cells: usize,
    /// Number of cells of each shape, in [`CellShape::ALL`] order.
    pub shape_counts: Vec<(CellShape, usize)>,
    pub patches: Vec<PatchSummary>,
    pub bounding_box: (Vec3, Vec3),
    /// Directions normal to no `empty` patch (OpenFOAM `polyMesh::solutionD`).
    pub solution_directions: [bool; 3],
    /// Sum of boundary area vectors over the sum of their magnitudes (`checkClosedBoundary`).
    pub boundary_openness: Vec3,
    /// Largest per-component |Σ Sf| / Σ |Sf| over a cell's faces (`cellClosedness`).
    pub max_cell_openness: f64,
    pub n_open_cells: usize,
    /// Largest cell aspect ratio (`cellClosedness`).
    pub max_aspect_ratio: f64,
    pub n_high_aspect_cells: usize,
    pub min_face_area: f64,
    pub max_face_area: f64,
    pub n_zero_area_faces: usize,
    pub min_volume: f64,
    pub max_volume: f64,
    pub total_volume: f64,
    /// Cells of volume below `VSMALL` (inverted or degenerate).
    pub n_negative_volume_cells: usize,
    /// Largest non-orthogonality of internal faces, degrees; `None` without internal faces.
    pub max_non_orthogonality: Option<f64>,
    /// OpenFOAM's average: the angle of the mean cosine, degrees.
    pub avg_non_orthogonality: Option<f64>,
    /// Internal faces above [`NON_ORTH_THRESHOLD`] degrees (a warning).
    pub n_severely_non_orthogonal: usize,
    /// Internal faces at 90 degrees or more (an error).
    pub n_non_orthogonality_errors: usize,
    /// Owner and neighbour face pyramids of volume below `-SMALL` (`checkFacePyramids`).
    pub n_negative_pyramids: usize,
    pub max_skewness: f64,
    pub n_highly_skew_faces: usize,
}

impl MeshReport {
    /// Measures `mesh`; never fails, whatever the geometry.
    pub fn new(mesh: &Mesh) -> Self {
        Self::with_geometry(mesh, &Geometry::compute(mesh))
    }

    /// Measures `mesh` with its already computed geometry.
    pub fn with_geometry(mesh: &Mesh, geom: &Geometry) -> Self {
        let solution_directions = solution_directions(mesh, geom);
        let cells = cell_stats(mesh, geom, solution_directions);
        let faces = face_stats(mesh, geom);
        let (lo, hi) = bounding_box(mesh.points());
        Self {
            n_points: mesh.n_points(),
            n_faces: mesh.n_faces(),
            n_internal_faces: mesh.n_internal_faces(),
            n_cells: mesh.n_cells(),
            n_unused_points: count_unused_points(mesh),
            n_regions: cell_regions(mesh).0,
            n_non_finite_points: mesh
                .points()
                .iter()
                .filter(|p| !p.iter().all(|x| x.is_finite()))
                .count(),
            n_non_finite_faces: (0..mesh.n_faces())
                .filter(|&f| {
                    let finite = |v: Vec3| v.iter().all(|x| x.is_finite());
                    !finite(geom.face_area_vectors[f]) || !finite(geom.face_centre(mesh, f))
                })
                .count(),
            n_non_finite_cells: (0..mesh.n_cells())
                .filter(|&c| {
                    !geom.cell_volumes[c].is_finite()
                        || !geom.cell_centres[c].iter().all(|x| x.is_finite())
                })
                .count(),
            shape_counts: CellShape::ALL
                .iter()
                .zip(cells.shape_counts)
                .map(|(&s, n)| (s, n))
                .collect(),
            patches: patch_summaries(mesh),
            bounding_box: (lo, hi),
            solution_directions,
            boundary_openness: boundary_openness(mesh, geom),
            max_cell_openness: cells.max_openness,
            n_open_cells: cells.n_open,
            max_aspect_ratio: cells.max_aspect_ratio,
            n_high_aspect_cells: cells.n_high_aspect,
            min_face_area: faces.min_area,
            max_face_area: faces.max_area,
            n_zero_area_faces: faces.n_zero_area,
            min_volume: cells.min_volume,
            max_volume: cells.max_volume,
            total_volume: cells.total_volume,
            n_negative_volume_cells: cells.n_negative_volume,
            max_non_orthogonality: (faces.n_internal > 0).then_some(faces.max_non_orth),
            avg_non_orthogonality: (faces.n_internal > 0)
                .then(|| cos_to_degrees(faces.sum_cos / faces.n_internal as f64)),
            n_severely_non_orthogonal: faces.n_severe_non_orth,
            n_non_orthogonality_errors: faces.n_non_orth_errors,
            n_negative_pyramids: faces.n_negative_pyramids,
            max_skewness: faces.max_skewness,
            n_highly_skew_faces: faces.n_highly_skew,
        }
    }

    /// Average number of faces per cell, as checkMesh prints it.
    pub fn faces_per_cell(&self) -> f64 {
        (self.n_faces + self.n_internal_faces) as f64 / self.n_cells.max(1) as f64
    }

    /// Names of the failed checks (empty for a good mesh), in checkMesh's order.
    pub fn failed_checks(&self) -> Vec<&'static str> {
        let checks = [
            (self.n_unused_points > 0, "point usage"),
            (self.has_non_finite_geometry(), "finite geometry"),
            (self.boundary_is_open(), "closed boundary"),
            (
                self.n_open_cells > 0 || self.n_high_aspect_cells > 0,
                "closed cells / aspect ratio",
            ),
            (self.n_zero_area_faces > 0, "face areas"),
            (self.n_negative_volume_cells > 0, "cell volumes"),
            (self.n_non_orthogonality_errors > 0, "non-orthogonality"),
            (self.n_negative_pyramids > 0, "face pyramids"),
            (self.n_highly_skew_faces > 0, "skewness"),
        ];
        checks.iter().filter(|c| c.0).map(|c| c.1).collect()
    }

    pub fn is_ok(&self) -> bool {
        self.failed_checks().is_empty()
    }

    fn has_non_finite_geometry(&self) -> bool {
        self.n_non_finite_points + self.n_non_finite_faces + self.n_non_finite_cells > 0
    }

    fn boundary_is_open(&self) -> bool {
        self.boundary_openness.amax() > CLOSED_THRESHOLD
    }
}

/// `polyMesh::calcDirections`: a direction is solved unless the `empty` patches'
/// summed |area components| point along it.
fn solution_directions(mesh: &Mesh, geom: &Geometry) -> [bool; 3] {
    let empty: Vec<_> = mesh
        .patches()
        .iter()
        .filter(|p| p.kind == PatchKind::Empty && p.size > 0)
        .collect();
    if empty.is_empty() {
        return [true; 3];
    }
    let sum: Vec3 = empty
        .iter()
        .flat_map(|p| geom.face_area_vectors[p.faces()].iter())
        .map(|s| s.abs())
        .sum();
    let dir = sum / (sum.norm() + VSMALL);
    [dir.x <= 1e-6, dir.y <= 1e-6, dir.z <= 1e-6]
}

fn bounding_box(points: &[Vec3]) -> (Vec3, Vec3) {
    if points.is_empty() {
        return (Vec3::zeros(), Vec3::zeros());
    }
    points
        .par_iter()
        .fold(
            || (Vec3::repeat(f64::INFINITY), Vec3::repeat(f64::NEG_INFINITY)),
            |(lo, hi), p| (lo.inf(p), hi.sup(p)),
        )
        .reduce(
            || (Vec3::repeat(f64::INFINITY), Vec3::repeat(f64::NEG_INFINITY)),
            |a, b| (a.0.inf(&b.0), a.1.sup(&b.1)),
        )
}

/// The connected sets of cells (through internal faces): their number, and
/// the region of each cell, numbered in the order of each region's first
/// cell (4 bytes a cell: the cells are numbered by `u32`).
pub fn cell_regions(mesh: &Mesh) -> (usize, Vec<u32>) {
    connected_regions(mesh.n_cells(), mesh.owner(), mesh.neighbour())
}

/// The connected sets of `n` vertices joined by the edges `(a[i], b[i])`
/// (`b` may be shorter: its length is the number of edges): their number,
/// and the region of each vertex, numbered in the order of each region's
/// lowest vertex.
///
/// A union-find shared by the threads (Anderson & Woll 1991): each edge
/// links the higher of its two roots below the lower one by compare-and-swap,
/// and finds halve their paths; a parent is never above its vertex, so each
/// region's root ends as its lowest vertex whatever order the threads link
/// in. The regions are then numbered by a parallel count of the roots.
fn connected_regions(n: usize, a: &[Label], b: &[Label]) -> (usize, Vec<u32>) {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    const BLOCK: usize = 1 << 16;
    let parent: Vec<AtomicU32> = (0..n as u32).into_par_iter().map(AtomicU32::new).collect();
    let find = |mut v: u32| loop {
        let p = parent[v as usize].load(Relaxed);
        if p == v {
            return v;
        }
        let grand = parent[p as usize].load(Relaxed);
        if grand != p {
            // Halving: any ancestor is as good a parent, and still lower.
            let _ = parent[v as usize].compare_exchange_weak(p, grand, Relaxed, Relaxed);
        }
        v = grand;
    };
    a[..b.len()]
        .par_iter()
        .zip(b)
        .with_min_len(BLOCK)
        .for_each(|(&x, &y)| loop {
            let (x, y) = (find(x), find(y));
            if x == y {
                return;
            }
            let (low, high) = (x.min(y), x.max(y));
            // Fails only where another edge linked `high` meanwhile: retry.
            if parent[high as usize]
                .compare_exchange(high, low, Relaxed, Relaxed)
                .is_ok()
            {
                return;
            }
        });
    let roots: Vec<u32> = (0..n as u32).into_par_iter().map(find).collect();
    drop(parent);
    let is_root = |v: usize| roots[v] as usize == v;
    // Roots per block, then the region number of each root: its rank.
    let counts: Vec<usize> = (0..n.div_ceil(BLOCK))
        .into_par_iter()
        .map(|k| {
            (k * BLOCK..((k + 1) * BLOCK).min(n))
                .filter(|&v| is_root(v))
                .count()
        })
        .collect();
    let n_regions = counts.iter().sum();
    let firsts = crate::slices::starts(counts.iter().copied());
    let mut rank = vec![0u32; n];
    rank.par_chunks_mut(BLOCK)
        .zip(firsts)
        .enumerate()
        .for_each(|(k, (ranks, mut next))| {
            for (i, r) in ranks.iter_mut().enumerate() {
                if is_root(k * BLOCK + i) {
                    *r = next as u32;
                    next += 1;
                }
            }
        });
    let regions = roots.par_iter().map(|&r| rank[r as usize]).collect();
    (n_regions, regions)
}

fn count_unused_points(mesh: &Mesh) -> usize {
    let mut used = vec![false; mesh.n_points()];
    for &p in mesh.faces().labels() {
        used[p as usize] = true;
    }
    used.iter().filter(|&&u| !u).count()
}

fn patch_summaries(mesh: &Mesh) -> Vec<PatchSummary> {
    mesh.patches()
        .par_iter()
        .map(|p| {
            let mut points: Vec<_> = p
                .faces()
                .flat_map(|f| mesh.faces().face(f).iter().copied())
                .collect();
            points.par_sort_unstable();
            points.dedup();
            PatchSummary {
                name: p.name.clone(),
                kind: p.kind,
                faces: p.size,
                points: points.len(),
            }
        })
        .collect()
}

/// `checkClosedBoundary`: Σ Sf / Σ |Sf| over all boundary faces. Summed in face
/// order, like OpenFOAM, so the rounding noise printed for a closed mesh is the same.
fn boundary_openness(mesh: &Mesh, geom: &Geometry) -> Vec3 {
    let boundary = &geom.face_area_vectors[mesh.n_internal_faces()..];
    let (sum, sum_mag) = boundary.iter().fold((Vec3::zeros(), 0.0), |(sum, mag), s| {
        (sum + s, mag + s.norm())
    });
    sum / (sum_mag + VSMALL)
}

/// Per-cell measures, reduced over the mesh.
struct CellStats {
    shape_counts: [usize; CellShape::ALL.len()],
    max_openness: f64,
    n_open: usize,
    max_aspect_ratio: f64,
    n_high_aspect: usize,
    min_volume: f64,
    max_volume: f64,
    total_volume: f64,
    n_negative_volume: usize,
}

impl CellStats {
    fn empty() -> Self {
        Self {
            shape_counts: [0; CellShape::ALL.len()],
            max_openness: 0.0,
            n_open: 0,
            max_aspect_ratio: 0.0,
            n_high_aspect: 0,
            min_volume: f64::INFINITY,
            max_volume: f64::NEG_INFINITY,
            total_volume: 0.0,
            n_negative_volume: 0,
        }
    }

    fn merge(mut self, o: Self) -> Self {
        for (a, b) in self.shape_counts.iter_mut().zip(o.shape_counts) {
            *a += b;
        }
        self.max_openness = self.max_openness.max(o.max_openness);
        self.n_open += o.n_open;
        self.max_aspect_ratio = self.max_aspect_ratio.max(o.max_aspect_ratio);
        self.n_high_aspect += o.n_high_aspect;
        self.min_volume = self.min_volume.min(o.min_volume);
        self.max_volume = self.max_volume.max(o.max_volume);
        self.total_volume += o.total_volume;
        self.n_negative_volume += o.n_negative_volume;
        self
    }
}

/// Shapes, volumes, and `primitiveMeshTools::cellClosedness`: per cell, the
/// signed sum of face area vectors (zero for a closed cell) against the sum of
/// their component magnitudes; the aspect ratio is the largest over smallest
/// of those magnitudes over the solved directions and, in 3-D, at least the
/// hydraulic ratio Σ|Sf| / (6 V^(2/3)) (1 for a cube).
fn cell_stats(mesh: &Mesh, geom: &Geometry, solved: [bool; 3]) -> CellStats {
    let (offsets, cell_faces) = mesh.cell_faces();
    let owner = mesh.owner();
    let areas = &geom.face_area_vectors;
    let three_d = solved.iter().all(|&s| s);
    (0..mesh.n_cells())
        .into_par_iter()
        .fold(CellStats::empty, |mut acc, c| {
            let faces = &cell_faces[offsets[c] as usize..offsets[c + 1] as usize];
            let shape = CellShape::from_face_sizes(
                faces.iter().map(|&f| mesh.faces().face(f as usize).len()),
            );
            // `CellShape::ALL` lists the shapes in declaration order.
            acc.shape_counts[shape as usize] += 1;

            // Owned faces first, then neighbour faces, each in face order: OpenFOAM's
            // summation order, so even the rounding noise of closed cells matches.
            // The area vector points out of the owner and into the neighbour.
            let owned = |&&f: &&Label| owner[f as usize] as usize == c;
            let mut sum = Vec3::zeros();
            let mut sum_mag = Vec3::zeros();
            for &f in faces.iter().filter(owned) {
                sum += areas[f as usize];
                sum_mag += areas[f as usize].abs();
            }
            for &f in faces.iter().filter(|f| !owned(f)) {
                sum -= areas[f as usize];
                sum_mag += areas[f as usize].abs();
            }
            let openness = (0..3)
                .map(|i| sum[i].abs() / (sum_mag[i] + ROOTVSMALL))
                .fold(0.0, f64::max);
            let solved_mag = (0..3).filter(|&i| solved[i]).map(|i| sum_mag[i]);
            let max_mag = solved_mag.clone().fold(f64::NEG_INFINITY, f64::max);
            let min_mag = solved_mag.fold(f64::INFINITY, f64::min);
            let mut aspect = max_mag / (min_mag + ROOTVSMALL);
            let volume = geom.cell_volumes[c];
            if three_d {
                let v = volume.max(ROOTVSMALL);
                aspect = aspect.max(sum_mag.sum() / (6.0 * v.powf(2.0 / 3.0)));
            }

            acc.max_openness = acc.max_openness.max(openness);
            acc.n_open += usize::from(openness > CLOSED_THRESHOLD);
            acc.max_aspect_ratio = acc.max_aspect_ratio.max(aspect);
            acc.n_high_aspect += usize::from(aspect > ASPECT_THRESHOLD);
            acc.min_volume = acc.min_volume.min(volume);
            acc.max_volume = acc.max_volume.max(volume);
            acc.total_volume += volume;
            acc.n_negative_volume += usize::from(volume < VSMALL);
            acc
        })
        .reduce(CellStats::empty, CellStats::merge)
}

/// Per-face measures, reduced over the mesh.
struct FaceStats {
    min_area: f64,
    max_area: f64,
    n_zero_area: usize,
    n_internal: usize,
    /// Largest angle between Sf and the owner-neighbour vector, and the sum of its cosines.
    max_non_orth: f64,
    sum_cos: f64,
    n_severe_non_orth: usize,
    n_non_orth_errors: usize,
    n_negative_pyramids: usize,
    max_skewness: f64,
    n_highly_skew: usize,
}

impl FaceStats {
    fn empty() -> Self {
        Self {
            min_area: f64::INFINITY,
            max_area: f64::NEG_INFINITY,
            n_zero_area: 0,
            n_internal: 0,
            max_non_orth: 0.0,
            sum_cos: 0.0,
            n_severe_non_orth: 0,
            n_non_orth_errors: 0,
            n_negative_pyramids: 0,
            max_skewness: 0.0,
            n_highly_skew: 0,
        }
    }

    fn merge(self, o: Self) -> Self {
        Self {
            min_area: self.min_area.min(o.min_area),
            max_area: self.max_area.max(o.max_area),
            n_zero_area: self.n_zero_area + o.n_zero_area,
            n_internal: self.n_internal + o.n_internal,
            max_non_orth: self.max_non_orth.max(o.max_non_orth),
            sum_cos: self.sum_cos + o.sum_cos,
            n_severe_non_orth: self.n_severe_non_orth + o.n_severe_non_orth,
            n_non_orth_errors: self.n_non_orth_errors + o.n_non_orth_errors,
            n_negative_pyramids: self.n_negative_pyramids + o.n_negative_pyramids,
            max_skewness: self.max_skewness.max(o.max_skewness),
            n_highly_skew: self.n_highly_skew + o.n_highly_skew,
        }
    }
}

/// Face areas (`checkFaceAreas`), orthogonality of internal faces
/// (`checkFaceOrthogonality`), owner/neighbour pyramid volumes
/// (`checkFacePyramids`) and skewness of all faces (`checkFaceSkewness`).
fn face_stats(mesh: &Mesh, geom: &Geometry) -> FaceStats {
    let n_internal = mesh.n_internal_faces();
    let severe_cos = NON_ORTH_THRESHOLD.to_radians().cos();
    (0..mesh.n_faces())
        .into_par_iter()
        .fold(FaceStats::empty, |mut acc, f| {
            let sf = geom.face_area_vectors[f];
            let area = sf.norm();
            acc.min_area = acc.min_area.min(area);
            acc.max_area = acc.max_area.max(area);
            acc.n_zero_area += usize::from(area < VSMALL);

            // Pyramid volumes times 3: positive when the cell centre lies behind the face.
            let cf = geom.face_centre(mesh, f);
            let own = geom.cell_centres[mesh.owner()[f] as usize];
            acc.n_negative_pyramids += usize::from(sf.dot(&(cf - own)) / 3.0 < -SMALL);
            if f < n_internal {
                let nei = geom.cell_centres[mesh.neighbour()[f] as usize];
                acc.n_negative_pyramids += usize::from(sf.dot(&(nei - cf)) / 3.0 < -SMALL);

                let angle = geom.non_orthogonality(mesh, f);
                let cos = angle.to_radians().cos();
                acc.n_internal += 1;
                acc.max_non_orth = acc.max_non_orth.max(angle);
                acc.sum_cos += cos;
                if cos < severe_cos {
                    if cos > SMALL {
                        acc.n_severe_non_orth += 1;
                    } else {
                        acc.n_non_orth_errors += 1;
                    }
                }
            }

            let skew = geom.skewness(mesh, f);
            acc.max_skewness = acc.max_skewness.max(skew);
            acc.n_highly_skew += usize::from(skew > SKEW_THRESHOLD);
            acc
        })
        .reduce(FaceStats::empty, FaceStats::merge)
}

fn cos_to_degrees(cos: f64) -> f64 {
    cos.clamp(-1.0, 1.0).acos().to_degrees()
}

/// A vector as OpenFOAM prints it: `(x y z)`.
pub fn format_vector(v: &Vec3) -> String {
    format!("({} {} {})", format_g(v.x), format_g(v.y), format_g(v.z))
}

fn format_directions(d: [bool; 3]) -> String {
    let n = d.iter().filter(|&&s| s).count();
    let flag = |s: bool| if s { "1" } else { "0" };
    format!(
        "{n} solution (non-empty) directions ({} {} {})",
        flag(d[0]),
        flag(d[1]),
        flag(d[2])
    )
}

/// One check of the report: checkMesh's ` ***` line when it `failed`, its
/// OK line otherwise.
fn check_line(
    out: &mut fmt::Formatter<'_>,
    failed: bool,
    failure: fmt::Arguments<'_>,
    ok: fmt::Arguments<'_>,
) -> fmt::Result {
    writeln!(out, "{}", if failed { failure } else { ok })
}

/// The report in checkMesh's layout and wording.
impl fmt::Display for MeshReport {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = format_g;
        writeln!(out, "Mesh stats")?;
        writeln!(out, "    points:           {}", self.n_points)?;
        writeln!(out, "    faces:            {}", self.n_faces)?;
        writeln!(out, "    internal faces:   {}", self.n_internal_faces)?;
        writeln!(out, "    cells:            {}", self.n_cells)?;
        writeln!(out, "    faces per cell:   {}", g(self.faces_per_cell()))?;
        writeln!(out, "    boundary patches: {}", self.patches.len())?;
        writeln!(out)?;
        writeln!(out, "Overall number of cells of each type:")?;
        for (shape, n) in &self.shape_counts {
            writeln!(out, "    {:<15}{n}", format!("{}:", shape.name()))?;
        }
        writeln!(out)?;

        writeln!(out, "Checking topology...")?;
        check_line(
            out,
            self.n_unused_points > 0,
            format_args!(
                " ***Unused points found in the mesh, number unused by faces: {}",
                self.n_unused_points
            ),
            format_args!("    Point usage OK."),
        )?;
        // `Mesh::new` refuses meshes out of upper-triangular order, so a report exists only for ordered ones.
        writeln!(out, "    Upper triangular ordering OK.")?;
        if self.n_regions <= 1 {
            writeln!(out, "    Number of regions: {} (OK).", self.n_regions)?;
        } else {
            writeln!(out, "   *Number of regions: {}", self.n_regions)?;
            writeln!(
                out,
                "    The mesh has multiple regions which are not connected by any face."
            )?;
        }
        writeln!(out)?;

        writeln!(out, "Checking patches...")?;
        writeln!(out, "    {:<20}{:<9}{:<9}Type", "Patch", "Faces", "Points")?;
        for p in &self.patches {
            writeln!(
                out,
                "    {:<19} {:<8} {:<8} {}",
                p.name,
                p.faces,
                p.points,
                p.kind.foam_name()
            )?;
        }
        writeln!(out)?;

        writeln!(out, "Checking geometry...")?;
        if self.has_non_finite_geometry() {
            writeln!(
                out,
                " ***Non-finite geometry: {} points with a coordinate that is not a finite \
                 number, {} faces and {} cells whose area, centre or volume overflows (a point \
                 far out, e.g. at 1e300, or a NaN)",
                self.n_non_finite_points, self.n_non_finite_faces, self.n_non_finite_cells
            )?;
        }
        let (lo, hi) = &self.bounding_box;
        writeln!(
            out,
            "    Overall domain bounding box {} {}",
            format_vector(lo),
            format_vector(hi)
        )?;
        writeln!(
            out,
            "    Mesh has {}",
            format_directions(self.solution_directions)
        )?;
        check_line(
            out,
            self.boundary_is_open(),
            format_args!(
                " ***Boundary openness {} possible hole in boundary description.",
                format_vector(&self.boundary_openness)
            ),
            format_args!(
                "    Boundary openness {} OK.",
                format_vector(&self.boundary_openness)
            ),
        )?;
        check_line(
            out,
            self.n_open_cells > 0,
            format_args!(
                " ***Open cells found, max cell openness: {}, number of open cells {}",
                g(self.max_cell_openness),
                self.n_open_cells
            ),
            format_args!("    Max cell openness = {} OK.", g(self.max_cell_openness)),
        )?;
        check_line(
            out,
            self.n_high_aspect_cells > 0,
            format_args!(
                " ***High aspect ratio cells found, Max aspect ratio: {}, number of cells {}",
                g(self.max_aspect_ratio),
                self.n_high_aspect_cells
            ),
            format_args!("    Max aspect ratio = {} OK.", g(self.max_aspect_ratio)),
        )?;
        // Failures are worded as checkMesh words them; the count of faulty
        // entities is ours.
        check_line(
            out,
            self.n_zero_area_faces > 0,
            format_args!(
                " ***Zero or negative face area detected.  Minimum area: {}, number of such faces: {}",
                g(self.min_face_area),
                self.n_zero_area_faces
            ),
            format_args!(
                "    Minimum face area = {}. Maximum face area = {}.  Face area magnitudes OK.",
                g(self.min_face_area),
                g(self.max_face_area)
            ),
        )?;
        check_line(
            out,
            self.n_negative_volume_cells > 0,
            format_args!(
                " ***Zero or negative cell volume detected.  Minimum negative volume: {}, \
                 Number of negative volume cells: {}",
                g(self.min_volume),
                self.n_negative_volume_cells
            ),
            format_args!(
                "    Min volume = {}. Max volume = {}.  Total volume = {}.  Cell volumes OK.",
                g(self.min_volume),
                g(self.max_volume),
                g(self.total_volume)
            ),
        )?;
        if let (Some(max), Some(avg)) = (self.max_non_orthogonality, self.avg_non_orthogonality) {
            writeln!(
                out,
                "    Mesh non-orthogonality Max: {} average: {}",
                g(max),
                g(avg)
            )?;
        }
        if self.n_severely_non_orthogonal > 0 {
            writeln!(
                out,
                "   *Number of severely non-orthogonal (> {} degrees) faces: {}.",
                g(NON_ORTH_THRESHOLD),
                self.n_severely_non_orthogonal
            )?;
        }
        check_line(
            out,
            self.n_non_orthogonality_errors > 0,
            format_args!(
                " ***Number of non-orthogonality errors: {}.",
                self.n_non_orthogonality_errors
            ),
            format_args!("    Non-orthogonality check OK."),
        )?;
        check_line(
            out,
            self.n_negative_pyramids > 0,
            format_args!(
                " ***Error in face pyramids: {} faces are incorrectly oriented.",
                self.n_negative_pyramids
            ),
            format_args!("    Face pyramids OK."),
        )?;
        check_line(
            out,
            self.n_highly_skew_faces > 0,
            format_args!(
                " ***Max skewness = {}, {} highly skew faces detected which may impair the quality of the results",
                g(self.max_skewness),
                self.n_highly_skew_faces
            ),
            format_args!("    Max skewness = {} OK.", g(self.max_skewness)),
        )?;
        writeln!(out)?;
        let failed = self.failed_checks();
        if failed.is_empty() {
            writeln!(out, "Mesh OK.")
        } else {
            writeln!(out, "Failed {} mesh checks.", failed.len())
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mesh::{mesh_from_unordered_faces, FaceList, FaceSide};

    /// A block of `n` hexahedra whose corner `(i, j, k)` lies at `point([i, j, k])`.
    /// Patches `xmin, xmax, ymin, ymax, zmin, zmax` get `kinds[..]`.
    pub(crate) fn hex_block(
        n: [usize; 3],
        kinds: [PatchKind; 6],
        point: impl Fn([usize; 3]) -> Vec3,
    ) -> Mesh {
        let np = [n[0] + 1, n[1] + 1, n[2] + 1];
        let pid = |c: [usize; 3]| (c[0] + np[0] * (c[1] + np[1] * c[2])) as Label;
        let cid = |c: [usize; 3]| (c[0] + n[0] * (c[1] + n[1] * c[2])) as Label;
        let mut points = Vec::with_capacity(np[0] * np[1] * np[2]);
        for k in 0..np[2] {
            for j in 0..np[1] {
                for i in 0..np[0] {
                    points.push(point([i, j, k]));
                }
            }
        }
        let (mut faces, mut owner, mut side) = (FaceList::default(), Vec::new(), Vec::new());
        for a in 0..3 {
            let (b, c) = ((a + 1) % 3, (a + 2) % 3);
            for plane in 0..=n[a] {
                for u in 0..n[b] {
                    for v in 0..n[c] {
                        let at = |du: usize, dv: usize| {
                            let mut x = [0; 3];
                            (x[a], x[b], x[c]) = (plane, u + du, v + dv);
                            pid(x)
                        };
                        // Normal along +a, since e_b x e_c = e_a.
                        let mut face = [at(0, 0), at(1, 0), at(1, 1), at(0, 1)];
                        let cell = |p: usize| {
                            let mut x = [0; 3];
                            (x[a], x[b], x[c]) = (p, u, v);
                            cid(x)
                        };
                        let (o, s) = if plane == 0 {
                            face.reverse();
                            (cell(0), FaceSide::Patch(2 * a as u32))
                        } else if plane == n[a] {
                            (cell(plane - 1), FaceSide::Patch(2 * a as u32 + 1))
                        } else {
                            (cell(plane - 1), FaceSide::Cell(cell(plane)))
                        };
                        faces.push(&face).unwrap();
                        owner.push(o);
                        side.push(s);
                    }
                }
            }
        }
        let names = ["xmin", "xmax", "ymin", "ymax", "zmin", "zmax"];
        let patches = names
            .iter()
            .zip(kinds)
            .map(|(n, k)| (n.to_string(), k))
            .collect();
        mesh_from_unordered_faces(points, faces, owner, side, patches).unwrap()
    }

    const WALLS: [PatchKind; 6] = [PatchKind::Wall; 6];

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn shapes_are_listed_in_declaration_order() {
        for (i, s) in CellShape::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }

    /// 2x2x1 cells of 1 x 2 x 0.5: face areas 1 (x), 0.5 (y), 2 (z); per cell the
    /// component sums of |Sf| are (2, 1, 4), so the aspect ratio is 4 in 3-D and
    /// 2 when z is empty; unit volumes.
    #[test]
    fn hex_block_report() {
        let at = |c: [usize; 3]| Vec3::new(c[0] as f64, 2.0 * c[1] as f64, 0.5 * c[2] as f64);
        let r = MeshReport::new(&hex_block([2, 2, 1], WALLS, at));
        assert_eq!(
            (r.n_points, r.n_faces, r.n_internal_faces, r.n_cells),
            (18, 20, 4, 4)
        );
        assert_eq!(r.faces_per_cell(), 6.0);
        assert_eq!(r.shape_counts[0], (CellShape::Hexahedron, 4));
        assert!(r.shape_counts[1..].iter().all(|&(_, n)| n == 0));
        let sizes: Vec<_> = r
            .patches
            .iter()
            .map(|p| (p.name.as_str(), p.faces, p.points))
            .collect();
        assert_eq!(
            sizes,
            [
                ("xmin", 2, 6),
                ("xmax", 2, 6),
                ("ymin", 2, 6),
                ("ymax", 2, 6),
                ("zmin", 4, 9),
                ("zmax", 4, 9)
            ]
        );
        assert_eq!(r.bounding_box, (Vec3::zeros(), Vec3::new(2.0, 4.0, 0.5)));
        assert_eq!(r.solution_directions, [true; 3]);
        assert!(r.boundary_openness.amax() < 1e-15 && r.max_cell_openness < 1e-15);
        assert!(close(r.max_aspect_ratio, 4.0), "{}", r.max_aspect_ratio);
        assert!(close(r.min_face_area, 0.5) && close(r.max_face_area, 2.0));
        assert!(close(r.min_volume, 1.0) && close(r.max_volume, 1.0) && close(r.total_volume, 4.0));
        assert!(r.max_non_orthogonality.unwrap() < 1e-6 && r.avg_non_orthogonality.unwrap() < 1e-6);
        assert!(r.max_skewness < 1e-12);
        assert_eq!(r.n_negative_pyramids + r.n_unused_points, 0);
        assert!(r.is_ok());
        let text = r.to_string();
        assert!(text.contains("    cells:            4\n"), "{text}");
        assert!(text.contains("    hexahedra:     4\n"), "{text}");
        assert!(text.contains("Max aspect ratio = 4 OK."), "{text}");
        assert!(
            text.contains("Min volume = 1. Max volume = 1.  Total volume = 4.  Cell volumes OK.")
        );
        assert!(text.ends_with("\nMesh OK.\n"), "{text}");

        let mut kinds = WALLS;
        kinds[4] = PatchKind::Empty;
        kinds[5] = PatchKind::Empty;
        let r = MeshReport::new(&hex_block([2, 2, 1], kinds, at));
        assert_eq!(r.solution_directions, [true, true, false]);
        assert!(close(r.max_aspect_ratio, 2.0), "{}", r.max_aspect_ratio);
        assert!(r
            .to_string()
            .contains("Mesh has 2 solution (non-empty) directions (1 1 0)"));
    }

    /// Two unit cells stacked in z, the lower one sheared by `s` in x (its top at
    /// x in [s, 1 + s]), the upper one straight: centroids (0.5 + s/2, 0.5, 0.5)
    /// and (0.5 + s, 0.5, 1.5), so the shared face (normal z) is non-orthogonal by
    /// atan(s / 2); the centre line crosses it s/4 from its centre, half-width 0.5.
    fn sheared_pair(s: f64) -> Mesh {
        hex_block([1, 1, 2], WALLS, |c| {
            let shift = if c[2] == 0 { 0.0 } else { s };
            Vec3::new(c[0] as f64 + shift, c[1] as f64, c[2] as f64)
        })
    }

    #[test]
    fn non_orthogonality_and_skewness_of_a_sheared_pair() {
        let mesh = sheared_pair(1.0);
        let r = MeshReport::new(&mesh);
        let angle = 0.5f64.atan().to_degrees();
        assert!(close(r.max_non_orthogonality.unwrap(), angle), "{r:?}");
        assert!(close(r.avg_non_orthogonality.unwrap(), angle));
        assert_eq!(r.n_severely_non_orthogonal, 0);
        let g = Geometry::compute(&mesh);
        assert!(close(g.skewness(&mesh, 0), 0.25 / 0.5));
        let max = (0..mesh.n_faces())
            .map(|f| g.skewness(&mesh, f))
            .fold(0.0, f64::max);
        assert_eq!(r.max_skewness, max);
        assert!(close(r.total_volume, 2.0));
        assert!(r.is_ok(), "{r}");
        assert!(r
            .to_string()
            .contains(&format!("Mesh non-orthogonality Max: {}", format_g(angle))));
    }

    /// Shear 6: atan(3) = 71.6 degrees, above the 70 degree warning, not an error.
    #[test]
    fn severe_non_orthogonality_is_a_warning() {
        let r = MeshReport::new(&sheared_pair(6.0));
        assert!(close(
            r.max_non_orthogonality.unwrap(),
            3f64.atan().to_degrees()
        ));
        assert_eq!(
            (r.n_severely_non_orthogonal, r.n_non_orthogonality_errors),
            (1, 0)
        );
        assert!(!r.failed_checks().contains(&"non-orthogonality"));
        assert!(r
            .to_string()
            .contains("*Number of severely non-orthogonal (> 70 degrees) faces: 1."));
    }

    /// Three cells in a row with the planes x=1 and x=2 swapped: cells [0,2] and
    /// [1,3] are fine, the middle one is inverted (volume -1). Its six faces have
    /// wrong-side pyramids: two internal (its side) and four boundary.
    #[test]
    fn inverted_cell_is_counted_and_fails() {
        let xs = [0.0, 2.0, 1.0, 3.0];
        let mesh = hex_block([3, 1, 1], WALLS, |c| {
            Vec3::new(xs[c[0]], c[1] as f64, c[2] as f64)
        });
        assert!(mesh.geometry().is_err());
        let r = MeshReport::new(&mesh);
        assert_eq!(r.n_negative_volume_cells, 1);
        assert!(
            close(r.min_volume, -1.0) && close(r.max_volume, 2.0) && close(r.total_volume, 3.0)
        );
        assert_eq!(r.n_negative_pyramids, 6);
        assert!(r.n_high_aspect_cells == 1 && r.max_aspect_ratio > 1e99);
        let failed = r.failed_checks();
        assert_eq!(
            failed,
            [
                "closed cells / aspect ratio",
                "cell volumes",
                "face pyramids"
            ]
        );
        let text = r.to_string();
        assert!(
            text.contains("Number of negative volume cells: 1"),
            "{text}"
        );
        assert!(
            text.contains("***Error in face pyramids: 6 faces"),
            "{text}"
        );
        assert!(text.ends_with("\nFailed 3 mesh checks.\n"), "{text}");
    }

    #[test]
    fn unused_points_fail() {
        let (mut points, faces, owner, neighbour, patches) = hex_block([1, 1, 1], WALLS, |c| {
            Vec3::new(c[0] as f64, c[1] as f64, c[2] as f64)
        })
        .into_parts();
        points.push(Vec3::new(5.0, 5.0, 5.0));
        let r = MeshReport::new(&Mesh::new(points, faces, owner, neighbour, patches).unwrap());
        assert_eq!(r.n_unused_points, 1);
        assert_eq!(r.failed_checks(), ["point usage"]);
        // The unused point still counts in the bounding box, as in OpenFOAM.
        assert_eq!(r.bounding_box.1, Vec3::new(5.0, 5.0, 5.0));
    }

    /// Vectors as C++ streams print them (the numbers: `foam::write::format_g`).
    #[test]
    fn vectors_print_like_cpp_streams() {
        assert_eq!(format_vector(&Vec3::new(0.1, 0.0, -2.0)), "(0.1 0 -2)");
    }

    /// Timing on a large block (edge `FVPOISSON_CHECK_EDGE` cells, default 100):
    /// `cargo test --release --lib check::tests::large -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn large_block_timing() {
        let n = std::env::var("FVPOISSON_CHECK_EDGE").map_or(100, |v| v.parse().unwrap());
        let start = std::time::Instant::now();
        let mesh = hex_block([n, n, n], WALLS, |c| {
            let w = (c[0] * 7 + c[1] * 13 + c[2] * 29) % 11;
            Vec3::new(c[0] as f64, c[1] as f64, c[2] as f64) + Vec3::repeat(0.02 * w as f64)
        });
        eprintln!(
            "built {} cells in {:.2} s",
            mesh.n_cells(),
            start.elapsed().as_secs_f64()
        );
        let start = std::time::Instant::now();
        let geom = Geometry::compute(&mesh);
        eprintln!("geometry: {:.2} s", start.elapsed().as_secs_f64());
        let start = std::time::Instant::now();
        let r = MeshReport::with_geometry(&mesh, &geom);
        eprintln!("report: {:.2} s", start.elapsed().as_secs_f64());
        assert!(r.is_ok(), "{r}");
    }

    /// The serial union-find the regions are defined by: the lower root
    /// wins, regions numbered in the order of their first vertex.
    fn regions_one_pass(n: usize, a: &[Label], b: &[Label]) -> (usize, Vec<usize>) {
        fn root(parent: &mut [usize], mut v: usize) -> usize {
            while parent[v] != v {
                v = parent[v];
            }
            v
        }
        let mut parent: Vec<usize> = (0..n).collect();
        for (&x, &y) in a.iter().zip(b) {
            let (x, y) = (root(&mut parent, x as usize), root(&mut parent, y as usize));
            parent[x.max(y)] = x.min(y);
        }
        let mut number = vec![usize::MAX; n];
        let mut n_regions = 0;
        let regions = (0..n)
            .map(|v| {
                let r = root(&mut parent, v);
                if number[r] == usize::MAX {
                    number[r] = n_regions;
                    n_regions += 1;
                }
                number[r]
            })
            .collect();
        (n_regions, regions)
    }

    /// The threads' union-find numbers the regions as the serial one, on
    /// graphs of one to thousands of regions spanning several blocks, on one
    /// and on four threads.
    #[test]
    fn parallel_regions_are_the_serial_ones() {
        // The box generator's SplitMix64 stream.
        use crate::mesh::generate::{mix64, GOLDEN_GAMMA};
        let mut state = 5u64;
        let mut below = |n: usize| {
            state = state.wrapping_add(GOLDEN_GAMMA);
            (mix64(state) % n as u64) as usize
        };
        for (n, n_edges) in [
            (1, 0),
            (10, 0),
            (1000, 3000),
            (200_000, 150_000),
            (200_000, 400_000),
        ] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..n_edges {
                // Mostly near neighbours (many regions), some far apart.
                let x = below(n);
                let y = match below(8) {
                    0 => below(n),
                    _ => (x + 1 + below(3)).min(n - 1),
                };
                a.push(x as Label);
                b.push(y as Label);
            }
            // A longer first list, as the owners of boundary faces follow.
            a.extend([0, (n - 1) as Label]);
            let want = regions_one_pass(n, &a, &b);
            for threads in [1, 4] {
                let (n_got, got) =
                    crate::test_support::on_threads(threads, || connected_regions(n, &a, &b));
                let got = (n_got, got.into_iter().map(|r| r as usize).collect());
                assert_eq!(
                    got, want,
                    "{n} vertices, {n_edges} edges, {threads} threads"
                );
            }
            assert!(want.0 >= 1);
        }
    }
}
