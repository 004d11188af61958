//! Face-based polyhedral mesh with OpenFOAM polyMesh semantics.
//!
//! A mesh is points, faces (any polygon), the owner cell of every face and the
//! neighbour cell of every internal face. Internal faces come first, in
//! upper-triangular order (sorted by owner, then neighbour, owner < neighbour);
//! boundary faces follow as contiguous per-patch ranges. A face's points are
//! ordered so that its right-hand normal points from owner to neighbour, and
//! out of the domain on the boundary.

pub mod block_mesh;
pub mod cells;
pub mod check;
mod error;
pub mod generate;
pub mod geometry;
pub mod gmsh;
pub mod ordering;
pub mod polymesh;
pub mod source;

pub use cells::{mesh_from_elements, ElementList, ElementShape};
pub use check::MeshReport;
pub use error::MeshError;
pub use geometry::Geometry;
pub use ordering::{mesh_from_unordered_faces, FaceSide};
use rayon::prelude::*;
pub use source::{load, MeshSource};
use std::ops::Range;

/// Index of a point, face or cell. 32 bits, like OpenFOAM's default `label`.
pub type Label = u32;

/// A point or vector in 3-D space.
pub type Vec3 = nalgebra::Vector3<f64>;

/// Faces as one compact list: face `f` has the points
/// `labels[offsets[f]..offsets[f + 1]]` (OpenFOAM's `faceCompactList`).
///
/// A list whose faces all have the same number of points (the hexahedra of a
/// box: 4; tetrahedra: 3) keeps no offsets, since face `f` starts at `k·f`:
/// 4 bytes a face less (97 MB on an 8 M-cell box), the same faces.
#[derive(Clone, Debug, Default)]
pub struct FaceList {
    /// `n_faces + 1` entries, or empty when `uniform` gives them.
    offsets: Vec<u32>,
    /// Points of every face when all have as many; 0 for a list with
    /// offsets.
    uniform: u32,
    labels: Vec<Label>,
}

impl PartialEq for FaceList {
    /// The same faces, however they are stored.
    fn eq(&self, other: &Self) -> bool {
        self.labels == other.labels
            && self.len() == other.len()
            && (0..=self.len()).all(|f| self.start(f) == other.start(f))
    }
}

impl FaceList {
    /// Builds a face list from compact offsets (`n_faces + 1` entries, starting at 0,
    /// non-decreasing) and point labels. Offsets of faces of one size are
    /// not kept.
    pub fn from_compact(offsets: Vec<u32>, labels: Vec<Label>) -> Result<Self, MeshError> {
        if offsets.first() != Some(&0) {
            return Err(MeshError::invalid("face offsets must start with 0"));
        }
        if offsets.windows(2).any(|w| w[1] < w[0]) {
            return Err(MeshError::invalid("face offsets must not decrease"));
        }
        if *offsets.last().unwrap() as usize != labels.len() {
            return Err(MeshError::invalid(format!(
                "face offsets end at {} but there are {} point labels",
                offsets.last().unwrap(),
                labels.len()
            )));
        }
        let k = offsets.get(1).copied().unwrap_or(0);
        if k > 0
            && offsets
                .par_iter()
                .enumerate()
                .all(|(f, &o)| u64::from(o) == f as u64 * u64::from(k))
        {
            return Ok(Self {
                offsets: Vec::new(),
                uniform: k,
                labels,
            });
        }
        Ok(Self {
            offsets,
            uniform: 0,
            labels,
        })
    }

    /// Builds a face list where every face has `k` points.
    pub fn uniform(k: usize, labels: Vec<Label>) -> Result<Self, MeshError> {
        if k == 0 || !labels.len().is_multiple_of(k) {
            return Err(MeshError::invalid(format!(
                "{} point labels do not split into faces of {k} points",
                labels.len()
            )));
        }
        offset_u32(labels.len())?;
        Ok(Self {
            offsets: Vec::new(),
            uniform: offset_u32(k)?,
            labels,
        })
    }

    /// Appends one face. A face of another size than the faces before it
    /// gives the list its offsets.
    pub fn push(&mut self, face: &[Label]) -> Result<(), MeshError> {
        let end = offset_u32(self.labels.len() + face.len())?;
        if self.uniform > 0 && face.len() != self.uniform as usize {
            self.offsets = self.offsets().into_owned();
            self.uniform = 0;
        }
        if self.uniform == 0 {
            if self.offsets.is_empty() && !face.is_empty() {
                // The first face: its size may be every face's.
                self.uniform = face.len() as u32;
            } else {
                if self.offsets.is_empty() {
                    self.offsets.push(0);
                }
                self.offsets.push(end);
            }
        }
        self.labels.extend_from_slice(face);
        Ok(())
    }

    pub fn len(&self) -> usize {
        match self.uniform {
            0 => self.offsets.len().saturating_sub(1),
            k => self.labels.len() / k as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where face `f` starts in [`Self::labels`] (`f` up to the number of
    /// faces: the end of the last one).
    #[inline]
    fn start(&self, f: usize) -> usize {
        match self.uniform {
            0 => self.offsets[f] as usize,
            k => f * k as usize,
        }
    }

    /// The points of face `f`.
    #[inline]
    pub fn face(&self, f: usize) -> &[Label] {
        &self.labels[self.start(f)..self.start(f + 1)]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[Label]> + '_ {
        (0..self.len()).map(move |f| self.face(f))
    }

    /// The compact offsets (`n_faces + 1` entries), made for a list of faces
    /// of one size.
    pub fn offsets(&self) -> std::borrow::Cow<'_, [u32]> {
        match self.uniform {
            0 => std::borrow::Cow::Borrowed(&self.offsets),
            k => (0..=self.len() as u32).map(|f| f * k).collect(),
        }
    }

    pub fn labels(&self) -> &[Label] {
        &self.labels
    }

    /// Heap bytes of the list.
    pub fn heap_bytes(&self) -> usize {
        crate::slices::bytes(&self.offsets) + crate::slices::bytes(&self.labels)
    }

    /// Reorders the faces: face `i` of the result is face `order[i]` of `self`.
    pub fn permuted(&self, order: &[usize]) -> Result<Self, MeshError> {
        let mut out = FaceList {
            offsets: Vec::new(),
            uniform: self.uniform,
            labels: Vec::with_capacity(self.labels.len()),
        };
        if self.uniform == 0 {
            out.offsets.reserve(order.len() + 1);
            out.offsets.push(0);
        }
        for &f in order {
            out.labels.extend_from_slice(self.face(f));
            if self.uniform == 0 {
                out.offsets.push(offset_u32(out.labels.len())?);
            }
        }
        Ok(out)
    }
}

fn offset_u32(n: usize) -> Result<u32, MeshError> {
    u32::try_from(n).map_err(|_| {
        MeshError::invalid("mesh too large: more than 2^32 face-point labels (split the mesh)")
    })
}

/// Boundary patch types of OpenFOAM's `boundary` file that the solver understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PatchKind {
    Patch,
    Wall,
    SymmetryPlane,
    Symmetry,
    /// Front and back of 2-D meshes: no equation is solved across them.
    Empty,
}

impl PatchKind {
    /// Parses an OpenFOAM patch type. Coupled types are refused with a reason.
    pub fn from_foam(name: &str) -> Result<Self, String> {
        Ok(match name {
            "patch" => Self::Patch,
            "wall" => Self::Wall,
            "symmetryPlane" => Self::SymmetryPlane,
            "symmetry" => Self::Symmetry,
            "empty" => Self::Empty,
            "cyclic" | "cyclicAMI" | "cyclicACMI" | "processor" | "processorCyclic" | "wedge" => {
                return Err(format!(
                    "patch type '{name}' is not supported yet (coupled and wedge patches); \
                     convert it to 'patch' or 'wall'"
                ))
            }
            other => {
                return Err(format!(
                    "unknown patch type '{other}' (expected patch, wall, symmetryPlane, symmetry or empty)"
                ))
            }
        })
    }

    pub fn foam_name(self) -> &'static str {
        match self {
            Self::Patch => "patch",
            Self::Wall => "wall",
            Self::SymmetryPlane => "symmetryPlane",
            Self::Symmetry => "symmetry",
            Self::Empty => "empty",
        }
    }
}

/// A named contiguous range of boundary faces.
#[derive(Clone, Debug, PartialEq)]
pub struct Patch {
    pub name: String,
    pub kind: PatchKind,
    /// First face of the patch.
    pub start: usize,
    /// Number of faces.
    pub size: usize,
    /// The groups it is in besides the one its type implies (`inGroups`
    /// of `polyMesh/boundary` or of a blockMeshDict patch): a field's
    /// `boundaryField` entry named by a group applies to its patches.
    pub in_groups: Vec<String>,
}

impl Patch {
    /// A patch in no group beyond its type's.
    pub fn new(name: impl Into<String>, kind: PatchKind, start: usize, size: usize) -> Self {
        Self {
            name: name.into(),
            kind,
            start,
            size,
            in_groups: Vec::new(),
        }
    }

    /// The patch in `groups` too, less the one its type implies (which
    /// OpenFOAM writes, as `inGroups 1(wall)`, and [`Self::groups`] adds).
    pub fn with_groups(mut self, mut groups: Vec<String>) -> Self {
        let kind = self.kind;
        groups.retain(|g| kind == PatchKind::Patch || g != kind.foam_name());
        self.in_groups = groups;
        self
    }

    /// Its groups as OpenFOAM has them: `in_groups`, with the name of its
    /// type added for a wall and for the constraint types (`empty`,
    /// `symmetryPlane`, `symmetry`), once.
    pub fn groups(&self) -> Vec<&str> {
        let mut groups: Vec<&str> = self.in_groups.iter().map(String::as_str).collect();
        let implied = self.kind.foam_name();
        if self.kind != PatchKind::Patch && !groups.contains(&implied) {
            groups.push(implied);
        }
        groups
    }

    pub fn faces(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.size
    }

    /// The patch's faces as indices into per-boundary-face arrays (face −
    /// nInternalFaces), the layout of boundary values and coefficients.
    pub fn boundary_faces(&self, n_internal_faces: usize) -> std::ops::Range<usize> {
        self.start - n_internal_faces..self.start - n_internal_faces + self.size
    }
}

/// Cell shapes, recognised from the number and sizes of a cell's faces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CellShape {
    Hexahedron,
    Prism,
    Pyramid,
    Tetrahedron,
    Polyhedron,
}

impl CellShape {
    pub const ALL: [CellShape; 5] = [
        CellShape::Hexahedron,
        CellShape::Prism,
        CellShape::Pyramid,
        CellShape::Tetrahedron,
        CellShape::Polyhedron,
    ];

    /// Shape from the point counts of a cell's faces.
    pub fn from_face_sizes(sizes: impl Iterator<Item = usize>) -> Self {
        let (mut n, mut tris, mut quads) = (0, 0, 0);
        for s in sizes {
            n += 1;
            match s {
                3 => tris += 1,
                4 => quads += 1,
                _ => return Self::Polyhedron,
            }
        }
        match (n, tris, quads) {
            (6, 0, 6) => Self::Hexahedron,
            (5, 2, 3) => Self::Prism,
            (5, 4, 1) => Self::Pyramid,
            (4, 4, 0) => Self::Tetrahedron,
            _ => Self::Polyhedron,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Hexahedron => "hexahedra",
            Self::Prism => "prisms",
            Self::Pyramid => "pyramids",
            Self::Tetrahedron => "tetrahedra",
            Self::Polyhedron => "polyhedra",
        }
    }
}

/// Unstructured polyhedral mesh (OpenFOAM `polyMesh`).
#[derive(Clone, Debug, PartialEq)]
pub struct Mesh {
    points: Vec<Vec3>,
    faces: FaceList,
    owner: Vec<Label>,
    neighbour: Vec<Label>,
    patches: Vec<Patch>,
    n_cells: usize,
}

impl Mesh {
    /// Builds a mesh from polyMesh arrays, checking every invariant the solver relies on:
    /// indices in range, faces of at least 3 distinct points, owner < neighbour and
    /// upper-triangular order of internal faces, patches covering the boundary faces
    /// contiguously, and every cell having at least 4 faces.
    pub fn new(
        points: Vec<Vec3>,
        faces: FaceList,
        owner: Vec<Label>,
        neighbour: Vec<Label>,
        patches: Vec<Patch>,
    ) -> Result<Self, MeshError> {
        let n_faces = faces.len();
        let n_internal = neighbour.len();
        if owner.len() != n_faces {
            return Err(MeshError::invalid(format!(
                "owner has {} entries but there are {n_faces} faces",
                owner.len()
            )));
        }
        if n_internal > n_faces {
            return Err(MeshError::invalid(format!(
                "neighbour has {n_internal} entries, more than the {n_faces} faces"
            )));
        }
        // The checks run in parallel; `find_first` keeps the reported problem the
        // lowest-numbered one, as a sequential scan would.
        let n_cells = owner
            .par_iter()
            .chain(neighbour.par_iter())
            .map(|&c| c as usize + 1)
            .max()
            .unwrap_or(0);
        if n_cells == 0 {
            return Err(MeshError::invalid("mesh has no cells"));
        }
        let n_points = points.len();
        if let Some(err) = (0..n_faces)
            .into_par_iter()
            .find_map_first(|f| check_face(f, faces.face(f), n_points).err())
        {
            return Err(err);
        }
        let bad_order = (0..n_internal).into_par_iter().find_first(|&f| {
            owner[f] >= neighbour[f]
                || (f > 0 && (owner[f - 1], neighbour[f - 1]) >= (owner[f], neighbour[f]))
        });
        if let Some(f) = bad_order {
            let (o, n) = (owner[f], neighbour[f]);
            if o >= n {
                return Err(MeshError::invalid(format!(
                    "internal face {f}: owner {o} must be less than neighbour {n}"
                )));
            }
            return Err(MeshError::invalid(format!(
                "internal face {f} (owner {o}, neighbour {n}) breaks upper-triangular order \
                 after face {} (owner {}, neighbour {})",
                f - 1,
                owner[f - 1],
                neighbour[f - 1]
            )));
        }
        let mut next = n_internal;
        let mut seen = std::collections::HashMap::with_capacity(patches.len());
        for (i, p) in patches.iter().enumerate() {
            if let Some(first) = seen.insert(p.name.as_str(), i) {
                // Boundary conditions are given by patch name: two patches of one
                // name would silently share (or lose) a condition.
                return Err(MeshError::invalid(format!(
                    "patches {first} and {i} are both named '{}': patch names must be unique",
                    crate::limits::quote(&p.name)
                )));
            }
            if p.start != next {
                return Err(MeshError::invalid(format!(
                    "patch '{}' starts at face {} but the previous patch ends at face {next}",
                    p.name, p.start
                )));
            }
            next += p.size;
        }
        if next != n_faces {
            return Err(MeshError::invalid(format!(
                "patches cover faces up to {next} but the mesh has {n_faces} faces \
                 ({} boundary faces belong to no patch)",
                n_faces.saturating_sub(next)
            )));
        }
        let mut n_cell_faces = vec![0u32; n_cells];
        for &c in owner.iter().chain(neighbour.iter()) {
            n_cell_faces[c as usize] += 1;
        }
        if let Some(c) = n_cell_faces.iter().position(|&n| n < 4) {
            return Err(MeshError::invalid(format!(
                "cell {c} has {} faces; a closed cell needs at least 4",
                n_cell_faces[c]
            )));
        }
        Ok(Self {
            points,
            faces,
            owner,
            neighbour,
            patches,
            n_cells,
        })
    }

    pub fn points(&self) -> &[Vec3] {
        &self.points
    }
    pub fn faces(&self) -> &FaceList {
        &self.faces
    }
    pub fn owner(&self) -> &[Label] {
        &self.owner
    }
    pub fn neighbour(&self) -> &[Label] {
        &self.neighbour
    }
    pub fn patches(&self) -> &[Patch] {
        &self.patches
    }
    pub fn n_cells(&self) -> usize {
        self.n_cells
    }
    pub fn n_faces(&self) -> usize {
        self.faces.len()
    }
    pub fn n_internal_faces(&self) -> usize {
        self.neighbour.len()
    }
    pub fn n_points(&self) -> usize {
        self.points.len()
    }

    /// Looks a patch up by name.
    pub fn patch(&self, name: &str) -> Option<&Patch> {
        self.patches.iter().find(|p| p.name == name)
    }

    /// Faces of every cell as a compact list (`offsets`, `faces`), in increasing face order.
    ///
    /// The face sides are first bucketed by [`cell_parts`] (one per thread)
    /// in face order ([`PartSides`]); each thread then counts and places the
    /// sides of its own cells only, so a cell's list comes out ascending
    /// with no sort, and the threads write disjoint parts of both arrays.
    pub fn cell_faces(&self) -> (Vec<u32>, Vec<Label>) {
        let sides = PartSides::new(self);
        let parts = sides.parts();
        let mut offsets = vec![0u32; self.n_cells + 1];
        split_by_parts(&mut offsets[1..], parts)
            .into_par_iter()
            .enumerate()
            .for_each(|(part, counts)| {
                let first = parts[part].start;
                sides.for_each(self, part, |_, c, _| counts[c - first] += 1);
            });
        for i in 0..self.n_cells {
            offsets[i + 1] += offsets[i];
        }
        let mut faces = vec![0 as Label; offsets[self.n_cells] as usize];
        let lists = crate::slices::split_lengths(
            &mut faces,
            parts
                .iter()
                .map(|p| (offsets[p.end] - offsets[p.start]) as usize),
        );
        lists.into_par_iter().enumerate().for_each(|(part, list)| {
            let cells = &parts[part];
            let base = offsets[cells.start];
            let mut fill: Vec<u32> = offsets[cells.clone()].iter().map(|&o| o - base).collect();
            sides.for_each(self, part, |f, c, _| {
                let slot = &mut fill[c - cells.start];
                list[*slot as usize] = f as Label;
                *slot += 1;
            });
        });
        (offsets, faces)
    }

    /// Calls `visit(face, cell, is_owner)` for each side of every face whose
    /// cell is in `cells`, in face order (owner before neighbour): the order
    /// in which OpenFOAM's face loops add into a cell.
    pub(crate) fn for_each_side_of(
        &self,
        cells: &Range<usize>,
        mut visit: impl FnMut(usize, usize, bool),
    ) {
        for (f, &o) in self.owner.iter().enumerate() {
            if cells.contains(&(o as usize)) {
                visit(f, o as usize, true);
            }
            if let Some(&n) = self.neighbour.get(f) {
                if cells.contains(&(n as usize)) {
                    visit(f, n as usize, false);
                }
            }
        }
    }

    /// Shape of every cell.
    pub fn cell_shapes(&self) -> Vec<CellShape> {
        let (offsets, faces) = self.cell_faces();
        (0..self.n_cells)
            .map(|c| {
                let fs = &faces[offsets[c] as usize..offsets[c + 1] as usize];
                CellShape::from_face_sizes(fs.iter().map(|&f| self.faces.face(f as usize).len()))
            })
            .collect()
    }

    /// Heap bytes of the mesh's arrays, by name.
    pub fn memory_account(&self) -> Vec<(&'static str, usize)> {
        use crate::slices::bytes;
        vec![
            ("mesh points", bytes(&self.points)),
            (
                "mesh faces (offsets, point labels)",
                self.faces.heap_bytes(),
            ),
            ("mesh owner", bytes(&self.owner)),
            ("mesh neighbour", bytes(&self.neighbour)),
        ]
    }

    /// Computes the OpenFOAM geometry of this mesh, refusing inverted cells.
    pub fn geometry(&self) -> Result<Geometry, MeshError> {
        let g = Geometry::compute(self);
        g.check_volumes(self)?;
        Ok(g)
    }

    /// [`Self::geometry`] keeping the cells' and the boundary's only
    /// ([`Geometry::of_cells_and_boundary`]).
    pub fn geometry_of_cells_and_boundary(&self) -> Result<Geometry, MeshError> {
        let g = Geometry::of_cells_and_boundary(self);
        g.check_volumes(self)?;
        Ok(g)
    }

    /// Consumes the mesh, returning its arrays (points, faces, owner, neighbour, patches).
    pub fn into_parts(self) -> (Vec<Vec3>, FaceList, Vec<Label>, Vec<Label>, Vec<Patch>) {
        (
            self.points,
            self.faces,
            self.owner,
            self.neighbour,
            self.patches,
        )
    }
}

fn check_face(f: usize, face: &[Label], n_points: usize) -> Result<(), MeshError> {
    if face.len() < 3 {
        return Err(MeshError::invalid(format!(
            "face {f} has {} points; a face needs at least 3",
            face.len()
        )));
    }
    if let Some(&p) = face.iter().find(|&&p| p as usize >= n_points) {
        return Err(MeshError::invalid(format!(
            "face {f} uses point {p} but the mesh has {n_points} points"
        )));
    }
    let twice = |p: Label| MeshError::invalid(format!("face {f} lists point {p} twice"));
    // Pairwise for the usual small faces; sorted for long ones (a corrupt
    // size would otherwise take quadratic time).
    if face.len() <= 32 {
        for (i, &p) in face.iter().enumerate() {
            if face[i + 1..].contains(&p) {
                return Err(twice(p));
            }
        }
    } else {
        let mut sorted = face.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(twice(w[0]));
        }
    }
    Ok(())
}

/// Contiguous ranges of cells, one per rayon thread (one range on one thread):
/// the parts of a face loop whose per-cell sums run in parallel, each thread
/// adding into its own cells in the serial loop's face order, so the sums have
/// the serial loop's bits.
pub(crate) fn cell_parts(n_cells: usize) -> Vec<Range<usize>> {
    /// Fewer cells than this per part cost more in scans than they save.
    const MIN_CELLS_PER_PART: usize = 1 << 14;
    let n_parts = rayon::current_num_threads()
        .min(n_cells / MIN_CELLS_PER_PART)
        .max(1);
    let per_part = n_cells.div_ceil(n_parts).max(1);
    (0..n_cells.max(1))
        .step_by(per_part)
        .map(|first| first..(first + per_part).min(n_cells))
        .collect()
}

/// The sides of every face (its owner's and, on an internal face, its
/// neighbour's) bucketed by the [`cell_parts`] their cells lie in, each
/// bucket in face order (owner before neighbour): what a thread adding into
/// its own cells in the serial face loop's order reads, without scanning
/// the faces of the other threads' cells.
///
/// Built in two parallel passes over consecutive blocks of faces (one
/// block per part): each block counts its sides per part, then writes them
/// at its place in each bucket (after the blocks before it), so the
/// buckets keep face order. A side is one `u32`, `(face << 1) | 1` for the
/// neighbour side: 4 bytes a side, dropped once the face loops are done.
/// With fewer than [`PartSides::MIN_PARTS`] parts, or more faces than the
/// code holds, nothing is bucketed and each part scans the faces itself.
pub(crate) struct PartSides {
    parts: Vec<Range<usize>>,
    /// Bucket `p` is `sides[starts[p]..starts[p + 1]]`; empty when not bucketed.
    sides: Vec<u32>,
    starts: Vec<usize>,
}

impl PartSides {
    /// The fewest parts that are bucketed: bucketing reads the faces twice
    /// and writes and reads back the sides, so it pays once more than about
    /// three threads would scan every face (on 2 threads, 2 M hex cells,
    /// `Mesh::cell_faces` took about 1.5 times the CPU time bucketed).
    pub(crate) const MIN_PARTS: usize = 4;

    pub(crate) fn new(mesh: &Mesh) -> Self {
        let parts = cell_parts(mesh.n_cells);
        let n_faces = mesh.n_faces();
        if parts.len() < Self::MIN_PARTS || n_faces >= 1 << 31 {
            return Self {
                parts,
                sides: Vec::new(),
                starts: Vec::new(),
            };
        }
        // `cell_parts` cuts equal ranges but for the last.
        let per_part = parts[0].len();
        let n_parts = parts.len();
        let (owner, neighbour) = (&mesh.owner, &mesh.neighbour);
        let per_block = n_faces.div_ceil(n_parts).max(1);
        let blocks: Vec<Range<usize>> = (0..n_faces)
            .step_by(per_block)
            .map(|f| f..(f + per_block).min(n_faces))
            .collect();
        // Visits (part, side code) of each face side in `faces`, in order.
        let for_each_side = |faces: Range<usize>, visit: &mut dyn FnMut(usize, u32)| {
            for f in faces {
                visit(owner[f] as usize / per_part, (f as u32) << 1);
                if let Some(&n) = neighbour.get(f) {
                    visit(n as usize / per_part, ((f as u32) << 1) | 1);
                }
            }
        };
        let counts: Vec<Vec<usize>> = blocks
            .par_iter()
            .map(|faces| {
                let mut counts = vec![0usize; n_parts];
                for_each_side(faces.clone(), &mut |part, _| counts[part] += 1);
                counts
            })
            .collect();
        let totals: Vec<usize> = (0..n_parts)
            .map(|p| counts.iter().map(|c| c[p]).sum())
            .collect();
        let mut starts = crate::slices::starts(totals.iter().copied());
        starts.push(totals.iter().sum());
        let mut sides = vec![0u32; starts[n_parts]];
        // Each block's share of each bucket, as slices the block alone writes.
        let mut shares: Vec<Vec<&mut [u32]>> = (0..blocks.len()).map(|_| Vec::new()).collect();
        for (p, bucket) in crate::slices::split_lengths(&mut sides, totals.iter().copied())
            .into_iter()
            .enumerate()
        {
            let pieces = crate::slices::split_lengths(bucket, counts.iter().map(|c| c[p]));
            for (share, piece) in shares.iter_mut().zip(pieces) {
                share.push(piece);
            }
        }
        shares
            .into_par_iter()
            .zip(&blocks)
            .for_each(|(mut share, faces)| {
                let mut fill = vec![0usize; n_parts];
                for_each_side(faces.clone(), &mut |part, code| {
                    share[part][fill[part]] = code;
                    fill[part] += 1;
                });
            });
        Self {
            parts,
            sides,
            starts,
        }
    }

    /// The cell ranges, one per part.
    pub(crate) fn parts(&self) -> &[Range<usize>] {
        &self.parts
    }

    /// Calls `visit(face, cell, is_owner)` for each side of every face whose
    /// cell is in part `part`, in face order (owner before neighbour).
    pub(crate) fn for_each(
        &self,
        mesh: &Mesh,
        part: usize,
        mut visit: impl FnMut(usize, usize, bool),
    ) {
        if self.starts.is_empty() {
            return mesh.for_each_side_of(&self.parts[part], visit);
        }
        for &code in &self.sides[self.starts[part]..self.starts[part + 1]] {
            let f = (code >> 1) as usize;
            if code & 1 == 0 {
                visit(f, mesh.owner[f] as usize, true);
            } else {
                visit(f, mesh.neighbour[f] as usize, false);
            }
        }
    }
}

/// `data` (one entry per cell) split at the boundaries of `parts`.
pub(crate) fn split_by_parts<'a, T>(data: &'a mut [T], parts: &[Range<usize>]) -> Vec<&'a mut [T]> {
    crate::slices::split_lengths(data, parts.iter().map(|p| p.len()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::test_support::on_threads;

    /// One unit cube cell with all six faces on patch "walls".
    pub(crate) fn unit_cube() -> Mesh {
        let points = vec![
            Vec3::new(0.0, 0.0, 0.0),
            Vec3::new(1.0, 0.0, 0.0),
            Vec3::new(1.0, 1.0, 0.0),
            Vec3::new(0.0, 1.0, 0.0),
            Vec3::new(0.0, 0.0, 1.0),
            Vec3::new(1.0, 0.0, 1.0),
            Vec3::new(1.0, 1.0, 1.0),
            Vec3::new(0.0, 1.0, 1.0),
        ];
        // Outward normals by the right-hand rule.
        let labels = vec![
            0, 3, 2, 1, // z = 0
            4, 5, 6, 7, // z = 1
            0, 1, 5, 4, // y = 0
            3, 7, 6, 2, // y = 1
            0, 4, 7, 3, // x = 0
            1, 2, 6, 5, // x = 1
        ];
        let faces = FaceList::uniform(4, labels).unwrap();
        let patches = vec![Patch::new("walls", PatchKind::Wall, 0, 6)];
        Mesh::new(points, faces, vec![0; 6], vec![], patches).unwrap()
    }

    #[test]
    fn unit_cube_is_a_hexahedron() {
        let m = unit_cube();
        assert_eq!(m.n_cells(), 1);
        assert_eq!(m.cell_shapes(), vec![CellShape::Hexahedron]);
        let (off, faces) = m.cell_faces();
        assert_eq!(off, vec![0, 6]);
        assert_eq!(faces, vec![0, 1, 2, 3, 4, 5]);
    }

    /// Cell → face lists by their definition: one serial pass over the
    /// faces, each appended to its owner's and its neighbour's list.
    fn cell_faces_by_scan(mesh: &Mesh) -> (Vec<u32>, Vec<Label>) {
        let mut lists = vec![Vec::new(); mesh.n_cells()];
        for (f, &o) in mesh.owner().iter().enumerate() {
            lists[o as usize].push(f as Label);
            if let Some(&n) = mesh.neighbour().get(f) {
                lists[n as usize].push(f as Label);
            }
        }
        let mut offsets = vec![0u32];
        for list in &lists {
            offsets.push(offsets.last().unwrap() + list.len() as u32);
        }
        (offsets, lists.concat())
    }

    /// The per-thread parts give the serial scan's lists on every kind of
    /// mesh and any thread count.
    #[test]
    fn cell_faces_are_the_scan_on_any_thread_count() {
        for spec in [
            "box:30x20x10:tet:perturb=0.2:renumber",
            "box:40x30x20",
            // Enough cells for 5 parts (bucketed sides).
            "box:50x40x41:perturb=0.1:renumber",
            "box:50x40x1:2d:renumber",
            "box:10x10x10:prism:renumber",
            "meshes/foam/polydual",
            "meshes/gmsh/pyramid_hybrid.v22.msh",
        ] {
            let mesh = load(spec).unwrap();
            let expected = cell_faces_by_scan(&mesh);
            for threads in [1, 2, 3, 5] {
                assert!(
                    on_threads(threads, || mesh.cell_faces()) == expected,
                    "{spec}, {threads} threads"
                );
            }
        }
    }

    /// Each part's sides, bucketed or scanned, are those a scan of all
    /// faces keeps for the part's cells, in the same order, on 1-5 parts.
    #[test]
    fn part_sides_are_the_scan_of_each_part() {
        let mesh = load("box:24x24x24:tet:perturb=0.2:renumber").unwrap();
        for threads in [1, 2, 3, 5] {
            on_threads(threads, || {
                let sides = PartSides::new(&mesh);
                assert_eq!(sides.parts().len(), threads, "{threads} threads");
                assert_eq!(sides.starts.is_empty(), threads < PartSides::MIN_PARTS);
                let mut total = 0;
                for (part, cells) in sides.parts().iter().enumerate() {
                    let (mut got, mut want) = (Vec::new(), Vec::new());
                    sides.for_each(&mesh, part, |f, c, o| got.push((f, c, o)));
                    mesh.for_each_side_of(cells, |f, c, o| want.push((f, c, o)));
                    assert_eq!(got, want, "{threads} threads, part {part}");
                    total += got.len();
                }
                assert_eq!(total, mesh.n_faces() + mesh.n_internal_faces());
            });
        }
    }

    #[test]
    fn invalid_meshes_are_refused_with_reasons() {
        let (points, faces, owner, _, patches) = unit_cube().into_parts();
        let short = Mesh::new(
            points.clone(),
            faces.clone(),
            vec![0; 5],
            vec![],
            patches.clone(),
        );
        assert!(short
            .unwrap_err()
            .to_string()
            .contains("owner has 5 entries"));
        let mut p2 = patches.clone();
        p2[0].size = 5;
        let err = Mesh::new(points.clone(), faces.clone(), owner.clone(), vec![], p2);
        assert!(err.unwrap_err().to_string().contains("belong to no patch"));
        let bad = FaceList::uniform(4, vec![0, 1, 2, 99]).unwrap();
        let err = Mesh::new(points, bad, vec![0], vec![], vec![]);
        assert!(err.unwrap_err().to_string().contains("uses point 99"));
    }

    #[test]
    fn face_list_checks_offsets() {
        assert!(FaceList::from_compact(vec![0, 3, 2], vec![0, 1, 2]).is_err());
        assert!(FaceList::from_compact(vec![1, 3], vec![0, 1, 2]).is_err());
        let fl = FaceList::from_compact(vec![0, 3, 7], vec![0, 1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(fl.face(1), &[3, 4, 5, 6]);
        let p = fl.permuted(&[1, 0]).unwrap();
        assert_eq!(p.face(0), &[3, 4, 5, 6]);
        assert_eq!(&*p.offsets(), &[0, 4, 7]);
    }

    /// Faces of one size keep no offsets, and give the same faces, offsets
    /// and equality as a list with offsets; a face of another size gives the
    /// list its offsets.
    #[test]
    fn faces_of_one_size_keep_no_offsets() {
        let labels: Vec<Label> = (0..12).collect();
        let uniform = FaceList::uniform(4, labels.clone()).unwrap();
        let compact = FaceList::from_compact(vec![0, 4, 8, 12], labels.clone()).unwrap();
        let mut pushed = FaceList::default();
        for face in labels.chunks(4) {
            pushed.push(face).unwrap();
        }
        for list in [&uniform, &compact, &pushed] {
            // The labels' capacity alone: no offsets.
            assert_eq!(list.heap_bytes(), list.labels.capacity() * 4);
            assert_eq!(list.len(), 3);
            assert_eq!(list.face(2), &[8, 9, 10, 11]);
            assert_eq!(&*list.offsets(), &[0, 4, 8, 12]);
            assert_eq!(list, &uniform);
        }
        let permuted = uniform.permuted(&[2, 0]).unwrap();
        assert!(permuted.offsets.is_empty());
        assert_eq!(permuted.face(0), &[8, 9, 10, 11]);
        let mut mixed = uniform.clone();
        mixed.push(&[20, 21, 22]).unwrap();
        mixed.push(&[23, 24, 25, 26]).unwrap();
        assert_eq!(mixed.len(), 5);
        assert_eq!(&*mixed.offsets(), &[0, 4, 8, 12, 15, 19]);
        assert_eq!(mixed.face(3), &[20, 21, 22]);
        assert_eq!(mixed.face(4), &[23, 24, 25, 26]);
        let offsets = mixed.offsets().into_owned();
        let compact = FaceList::from_compact(offsets, mixed.labels().to_vec()).unwrap();
        assert_eq!(compact, mixed);
        assert_ne!(compact, uniform);
        assert_eq!(FaceList::default().len(), 0);
        assert_eq!(&*FaceList::default().offsets(), &[] as &[u32]);
    }
}
