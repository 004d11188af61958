//! Building a polyMesh-ordered [`Mesh`] from volume elements given as point lists
//! (tetrahedra, hexahedra, prisms, pyramids), as mesh generators such as Gmsh write them.
//!
//! Node ordering is Gmsh's (reference manual, file formats chapter, "Node ordering"),
//! with the reference element's nodes at:
//! - tetrahedron: 0 (0,0,0), 1 (1,0,0), 2 (0,1,0), 3 (0,0,1);
//! - hexahedron: 0..3 the bottom quad (0,0,0) (1,0,0) (1,1,0) (0,1,0), 4..7 the same at z = 1;
//! - prism (wedge): 0..2 the bottom triangle (0,0,0) (1,0,0) (0,1,0), 3..5 the same at z = 1;
//! - pyramid: 0..3 the base quad (0,0,0) (1,0,0) (1,1,0) (0,1,0), 4 the apex above it.
//!
//! Elements whose nodes are ordered with negative volume (mirror images of the
//! reference element, as some writers produce) are reordered by the mirror
//! permutation and accepted, with a warning; elements of zero volume are refused.
//! Cell `i` of the mesh is element `i` of the list: the file's element order.
//!
//! Faces are matched between elements by their sorted point labels (one parallel
//! sort of all element faces; about a second for a million tetrahedra). A face
//! shared by more than two elements, two elements on the same side of a face, and
//! non-conformal interfaces (hanging nodes, a quad face against two triangles
//! without a pyramid between) are refused naming the elements.

use super::geometry::face_centre_and_area;
use super::{
    mesh_from_unordered_faces, FaceList, FaceSide, Label, Mesh, MeshError, PatchKind, Vec3,
};
use rayon::prelude::*;

/// Volume element shapes, with Gmsh's node ordering (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementShape {
    Tetrahedron,
    Hexahedron,
    Prism,
    Pyramid,
}

impl ElementShape {
    pub fn n_nodes(self) -> usize {
        self.mirror().len()
    }

    /// Local node lists of the faces, ordered so that the right-hand normal points
    /// out of the reference element.
    fn faces(self) -> &'static [&'static [usize]] {
        match self {
            Self::Tetrahedron => &[&[0, 2, 1], &[0, 1, 3], &[0, 3, 2], &[1, 2, 3]],
            Self::Hexahedron => &[
                &[0, 3, 2, 1],
                &[4, 5, 6, 7],
                &[0, 1, 5, 4],
                &[2, 3, 7, 6],
                &[0, 4, 7, 3],
                &[1, 2, 6, 5],
            ],
            Self::Prism => &[
                &[0, 2, 1],
                &[3, 4, 5],
                &[0, 1, 4, 3],
                &[0, 3, 5, 2],
                &[1, 2, 5, 4],
            ],
            Self::Pyramid => &[
                &[0, 3, 2, 1],
                &[0, 1, 4],
                &[1, 2, 4],
                &[2, 3, 4],
                &[3, 0, 4],
            ],
        }
    }

    /// Node permutation that mirrors the element (turns a negative-volume ordering
    /// into a positive one).
    fn mirror(self) -> &'static [usize] {
        match self {
            Self::Tetrahedron => &[0, 2, 1, 3],
            Self::Hexahedron => &[0, 3, 2, 1, 4, 7, 6, 5],
            Self::Prism => &[0, 2, 1, 3, 5, 4],
            Self::Pyramid => &[0, 3, 2, 1, 4],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Tetrahedron => "tetrahedron",
            Self::Hexahedron => "hexahedron",
            Self::Prism => "prism",
            Self::Pyramid => "pyramid",
        }
    }
}

/// Elements as compact point lists, each with a kind (`ElementShape` for cells, a
/// patch index for boundary faces) and the tag the source file gives it (for messages).
#[derive(Clone, Debug, Default)]
pub struct ElementList<K> {
    kinds: Vec<K>,
    tags: Vec<u64>,
    offsets: Vec<usize>,
    nodes: Vec<Label>,
}

impl<K: Copy> ElementList<K> {
    pub fn new() -> Self {
        Self {
            kinds: Vec::new(),
            tags: Vec::new(),
            offsets: vec![0],
            nodes: Vec::new(),
        }
    }

    pub fn push(&mut self, kind: K, tag: u64, nodes: &[Label]) {
        self.kinds.push(kind);
        self.tags.push(tag);
        self.nodes.extend_from_slice(nodes);
        self.offsets.push(self.nodes.len());
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    pub fn kind(&self, e: usize) -> K {
        self.kinds[e]
    }

    pub fn tag(&self, e: usize) -> u64 {
        self.tags[e]
    }

    pub fn nodes(&self, e: usize) -> &[Label] {
        &self.nodes[self.offsets[e]..self.offsets[e + 1]]
    }
}

/// Name of the patch that receives boundary faces on no tagged surface (as gmshToFoam).
pub const DEFAULT_PATCH: &str = "defaultFaces";

/// Sorted point labels of a face, padded with `Label::MAX`: equal for the faces of
/// two elements that share them.
type FaceKey = [Label; 4];

fn face_key(face: &[Label]) -> FaceKey {
    let mut key = [Label::MAX; 4];
    key[..face.len()].copy_from_slice(face);
    key.sort_unstable();
    key
}

/// Builds a mesh from volume elements (`cells`, in Gmsh node ordering) and tagged
/// boundary polygons (`boundary`: triangles and quads whose kind indexes `patches`).
/// Boundary faces of the cells are put on the patch of the boundary polygon with the
/// same points (the first one where several match); the rest go to a patch
/// [`DEFAULT_PATCH`], with a warning. Boundary polygons that are no boundary face of
/// the cells are ignored with a warning. Points no cell uses are dropped, keeping
/// the order of the others.
pub fn mesh_from_elements(
    points: Vec<Vec3>,
    cells: &ElementList<ElementShape>,
    boundary: &ElementList<u32>,
    mut patches: Vec<(String, PatchKind)>,
) -> Result<Mesh, MeshError> {
    if cells.is_empty() {
        return Err(MeshError::invalid(
            "no volume elements (the mesh has no cells)",
        ));
    }
    let UsedPoints {
        points,
        cell_nodes,
        boundary_nodes,
    } = used_points(points, cells, boundary)?;
    let cells = oriented_cells(&points, cells, cell_nodes)?;
    let faces = CandidateFaces::new(&cells);

    // Runs of equal keys in the sorted candidate list are the copies of one face.
    let mut sorted: Vec<(FaceKey, u32)> = (0..faces.len())
        .into_par_iter()
        .map(|f| (face_key(faces.points(f)), f as u32))
        .collect();
    sorted.par_sort_unstable();
    let mut out = FaceList::default();
    let mut owner = Vec::new();
    let mut side = Vec::new();
    let mut unmatched = Vec::new();
    for run in sorted.chunk_by(|a, b| a.0 == b.0) {
        match run {
            [(_, f)] => unmatched.push(*f as usize),
            [(_, f), (_, g)] => {
                let (f, g) = (*f as usize, *g as usize);
                check_opposite(&points, &faces, f, g)?;
                out.push(faces.points(f))?;
                owner.push(faces.cell[f]);
                side.push(FaceSide::Cell(faces.cell[g]));
            }
            _ => {
                let f = run[0].1 as usize;
                return Err(MeshError::invalid(format!(
                    "non-manifold face at {}: shared by {} elements ({}); a face may \
                     belong to at most two",
                    fmt_point(face_centre_and_area(&points, faces.points(f)).0),
                    run.len(),
                    run.iter()
                        .map(|&(_, g)| format!(
                            "element {}",
                            cells.tag(faces.cell[g as usize] as usize)
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    check_conformal(&points, &faces, &unmatched)?;

    let patch_of = boundary_patches(&boundary_nodes, boundary, &unmatched, &faces, &patches);
    let n_default = patch_of.iter().filter(|p| p.is_none()).count();
    if n_default > 0 {
        log::warn!(
            "{n_default} boundary faces are on no tagged boundary surface; they go to patch '{DEFAULT_PATCH}'"
        );
    }
    let default_patch = patches.len() as u32;
    for (&f, p) in unmatched.iter().zip(patch_of) {
        out.push(faces.points(f))?;
        owner.push(faces.cell[f]);
        side.push(FaceSide::Patch(p.unwrap_or(default_patch)));
    }
    patches.push((DEFAULT_PATCH.to_string(), PatchKind::Patch));
    mesh_from_unordered_faces(points, out, owner, side, patches)
}

/// The points cells use, with the cells' and boundary polygons' node lists renumbered.
struct UsedPoints {
    points: Vec<Vec3>,
    cell_nodes: Vec<Label>,
    /// A boundary node no cell uses is `Label::MAX`, so its polygon matches no face.
    boundary_nodes: Vec<Label>,
}

/// Drops the points no cell uses, keeping the order of the others.
fn used_points(
    points: Vec<Vec3>,
    cells: &ElementList<ElementShape>,
    boundary: &ElementList<u32>,
) -> Result<UsedPoints, MeshError> {
    let n = points.len();
    let check =
        |list_nodes: &[Label], what: &str| match list_nodes.iter().find(|&&p| p as usize >= n) {
            Some(p) => Err(MeshError::invalid(format!(
                "{what} uses point {p} but there are {n} points"
            ))),
            None => Ok(()),
        };
    check(&cells.nodes, "a volume element")?;
    check(&boundary.nodes, "a boundary element")?;
    let mut new_index = vec![Label::MAX; n];
    for &p in &cells.nodes {
        new_index[p as usize] = 0;
    }
    let mut kept = Vec::new();
    for (p, point) in points.into_iter().enumerate() {
        if new_index[p] == 0 {
            new_index[p] = kept.len() as Label;
            kept.push(point);
        }
    }
    let renumber = |nodes: &[Label]| nodes.iter().map(|&p| new_index[p as usize]).collect();
    Ok(UsedPoints {
        points: kept,
        cell_nodes: renumber(&cells.nodes),
        boundary_nodes: renumber(&boundary.nodes),
    })
}

/// The cells with their nodes renumbered and mirrored where their volume is negative.
fn oriented_cells(
    points: &[Vec3],
    cells: &ElementList<ElementShape>,
    nodes: Vec<Label>,
) -> Result<ElementList<ElementShape>, MeshError> {
    let mut out = ElementList {
        kinds: cells.kinds.clone(),
        tags: cells.tags.clone(),
        offsets: cells.offsets.clone(),
        nodes,
    };
    for e in 0..out.len() {
        let (shape, n) = (out.kind(e), out.nodes(e).len());
        if n != shape.n_nodes() {
            return Err(MeshError::invalid(format!(
                "element {}: a {} has {} nodes, not {n}",
                out.tag(e),
                shape.name(),
                shape.n_nodes()
            )));
        }
        let element = out.nodes(e);
        if let Some(i) = (1..n).find(|&i| element[..i].contains(&element[i])) {
            return Err(MeshError::invalid(format!(
                "element {} ({}) lists the point at {} twice (collapsed element)",
                out.tag(e),
                shape.name(),
                fmt_point(points[element[i] as usize])
            )));
        }
    }
    let flips: Vec<bool> = (0..out.len())
        .into_par_iter()
        .map(|e| {
            let element = out.nodes(e);
            let volume = signed_volume(points, out.kind(e), element);
            let size = element
                .iter()
                .map(|&p| (points[p as usize] - points[element[0] as usize]).norm())
                .fold(0.0, f64::max);
            if volume.abs() <= 1e-12 * size.powi(3) {
                Err(MeshError::invalid(format!(
                    "element {} ({}) near {} has zero volume",
                    out.tag(e),
                    out.kind(e).name(),
                    fmt_point(points[element[0] as usize])
                )))
            } else {
                Ok(volume < 0.0)
            }
        })
        .collect::<Result<_, _>>()?;
    let n_flipped = flips.iter().filter(|&&f| f).count();
    if n_flipped > 0 {
        log::warn!(
            "{n_flipped} volume elements had their nodes in mirrored (negative-volume) order; reordered"
        );
        for (e, _) in flips.iter().enumerate().filter(|(_, &f)| f) {
            let range = out.offsets[e]..out.offsets[e + 1];
            let old: Vec<Label> = out.nodes[range.clone()].to_vec();
            for (slot, &m) in out.nodes[range].iter_mut().zip(out.kinds[e].mirror()) {
                *slot = old[m];
            }
        }
    }
    Ok(out)
}

/// Volume of an element by its outward faces, positive for Gmsh's ordering: the sum
/// over faces of the pyramids from the node average (divergence theorem).
fn signed_volume(points: &[Vec3], shape: ElementShape, nodes: &[Label]) -> f64 {
    let centre = nodes.iter().map(|&p| points[p as usize]).sum::<Vec3>() / nodes.len() as f64;
    let mut face = [0 as Label; 4];
    shape
        .faces()
        .iter()
        .map(|local| {
            for (slot, &i) in face.iter_mut().zip(local.iter()) {
                *slot = nodes[i];
            }
            let (c, a) = face_centre_and_area(points, &face[..local.len()]);
            (c - centre).dot(&a) / 3.0
        })
        .sum()
}

/// Every face of every cell, outward from its cell.
struct CandidateFaces<'a> {
    cells: &'a ElementList<ElementShape>,
    /// Cell of each candidate face.
    cell: Vec<Label>,
    /// Local face index within the cell.
    local: Vec<u8>,
    labels: Vec<[Label; 4]>,
}

impl<'a> CandidateFaces<'a> {
    fn new(cells: &'a ElementList<ElementShape>) -> Self {
        let mut cell = Vec::new();
        let mut local = Vec::new();
        for e in 0..cells.len() {
            let n = cells.kind(e).faces().len();
            cell.extend(std::iter::repeat_n(e as Label, n));
            local.extend(0..n as u8);
        }
        let labels = (0..cell.len())
            .into_par_iter()
            .map(|f| {
                let e = cell[f] as usize;
                let nodes = cells.nodes(e);
                let mut out = [Label::MAX; 4];
                for (slot, &i) in out
                    .iter_mut()
                    .zip(cells.kind(e).faces()[local[f] as usize].iter())
                {
                    *slot = nodes[i];
                }
                out
            })
            .collect();
        Self {
            cells,
            cell,
            local,
            labels,
        }
    }

    fn len(&self) -> usize {
        self.cell.len()
    }

    fn points(&self, f: usize) -> &[Label] {
        let e = self.cell[f] as usize;
        let n = self.cells.kind(e).faces()[self.local[f] as usize].len();
        &self.labels[f][..n]
    }

    /// "element T (shape)" for messages.
    fn element(&self, f: usize) -> String {
        let e = self.cell[f] as usize;
        format!(
            "element {} ({})",
            self.cells.tag(e),
            self.cells.kind(e).name()
        )
    }
}

/// Checks that two copies of a face come from cells on opposite sides: their point
/// cycles must be reverses of each other.
fn check_opposite(
    points: &[Vec3],
    faces: &CandidateFaces,
    f: usize,
    g: usize,
) -> Result<(), MeshError> {
    let (a, b) = (faces.points(f), faces.points(g));
    let n = a.len();
    let shift = b.iter().position(|&p| p == a[0]).unwrap_or(0);
    let reversed = (0..n).all(|i| a[i] == b[(shift + n - i) % n]);
    if reversed {
        return Ok(());
    }
    let forward = (0..n).all(|i| a[i] == b[(shift + i) % n]);
    let at = fmt_point(face_centre_and_area(points, a).0);
    let (ef, eg) = (faces.element(f), faces.element(g));
    Err(MeshError::invalid(if forward {
        format!("{ef} and {eg} lie on the same side of their shared face at {at} (overlapping elements)")
    } else {
        format!(
            "{ef} and {eg} share the points of the face at {at} but join them in a different order"
        )
    }))
}

/// Refuses non-conformal interfaces, where unmatched faces are the two sides of an
/// interface inside the mesh rather than boundary:
/// - an unmatched triangle on three corners of an unmatched quad (a quad face meeting
///   triangles without a pyramid between), found by point labels alone;
/// - two unmatched faces that share a point, face opposite ways and overlap in one
///   plane (faces split by hanging nodes; planar interfaces only).
fn check_conformal(
    points: &[Vec3],
    faces: &CandidateFaces,
    unmatched: &[usize],
) -> Result<(), MeshError> {
    let non_conformal = |f: usize, g: usize| {
        MeshError::invalid(format!(
            "non-conformal interface at {}: a face of {} overlaps a face of {} \
             without matching it (hanging nodes, or a quad face against \
             triangles without a pyramid); the mesh must be conformal",
            fmt_point(face_centre_and_area(points, faces.points(f)).0),
            faces.element(f),
            faces.element(g)
        ))
    };
    let mut triangles: Vec<([Label; 3], usize)> = unmatched
        .iter()
        .filter_map(|&f| match *faces.points(f) {
            [a, b, c] => {
                let mut key = [a, b, c];
                key.sort_unstable();
                Some((key, f))
            }
            _ => None,
        })
        .collect();
    triangles.par_sort_unstable();
    for &f in unmatched {
        let quad = faces.points(f);
        if quad.len() != 4 {
            continue;
        }
        for skip in 0..4 {
            let mut key = [0; 3];
            for (slot, i) in key.iter_mut().zip((0..4).filter(|&i| i != skip)) {
                *slot = quad[i];
            }
            key.sort_unstable();
            let at = triangles.partition_point(|t| t.0 < key);
            if let Some(&(k, g)) = triangles.get(at) {
                if k == key {
                    return Err(non_conformal(f, g));
                }
            }
        }
    }

    let geometry: Vec<(Vec3, Vec3)> = unmatched
        .par_iter()
        .map(|&f| face_centre_and_area(points, faces.points(f)))
        .collect();
    // Unmatched faces at each point, as (point, index into `unmatched`) sorted by point.
    let mut at_point: Vec<(Label, u32)> = unmatched
        .iter()
        .enumerate()
        .flat_map(|(i, &f)| faces.points(f).iter().map(move |&p| (p, i as u32)))
        .collect();
    at_point.par_sort_unstable();
    let overlap = |i: usize, j: usize| {
        let ((ci, ai), (cj, aj)) = (geometry[i], geometry[j]);
        let (ni, nj) = (ai.normalize(), aj.normalize());
        let size = ai.norm().sqrt().max(aj.norm().sqrt());
        ni.dot(&nj) < -1.0 + 1e-9
            && (cj - ci).dot(&ni).abs() <= 1e-9 * size
            && (inside(points, faces.points(unmatched[i]), ni, cj)
                || inside(points, faces.points(unmatched[j]), nj, ci))
    };
    for group in at_point.chunk_by(|a, b| a.0 == b.0) {
        for (k, &(_, i)) in group.iter().enumerate() {
            for &(_, j) in &group[k + 1..] {
                if overlap(i as usize, j as usize) {
                    return Err(non_conformal(unmatched[i as usize], unmatched[j as usize]));
                }
            }
        }
    }
    Ok(())
}

/// Whether `p` (in the polygon's plane) lies strictly inside the convex polygon `face`
/// with unit normal `normal`.
fn inside(points: &[Vec3], face: &[Label], normal: Vec3, p: Vec3) -> bool {
    let n = face.len();
    (0..n).all(|i| {
        let a = points[face[i] as usize];
        let b = points[face[(i + 1) % n] as usize];
        (b - a).cross(&(p - a)).dot(&normal) > 1e-12 * (b - a).norm_squared()
    })
}

/// Patch of every unmatched face: that of the first boundary polygon with its points.
fn boundary_patches(
    boundary_nodes: &[Label],
    boundary: &ElementList<u32>,
    unmatched: &[usize],
    faces: &CandidateFaces,
    patches: &[(String, PatchKind)],
) -> Vec<Option<u32>> {
    let mut tagged: Vec<(FaceKey, u32, usize)> = (0..boundary.len())
        .filter_map(|b| {
            let nodes = &boundary_nodes[boundary.offsets[b]..boundary.offsets[b + 1]];
            (3..=4)
                .contains(&nodes.len())
                .then(|| (face_key(nodes), boundary.kind(b), b))
        })
        .collect();
    tagged.par_sort_unstable();
    let mut used = vec![false; tagged.len()];
    let mut n_multiple = 0;
    let patch_of = unmatched
        .iter()
        .map(|&f| {
            let key = face_key(faces.points(f));
            let first = tagged.partition_point(|t| t.0 < key);
            let matches = tagged[first..].iter().take_while(|t| t.0 == key).count();
            used[first..first + matches]
                .iter_mut()
                .for_each(|u| *u = true);
            let distinct = tagged[first..first + matches]
                .iter()
                .filter(|t| t.1 != tagged[first].1)
                .count();
            if distinct > 0 {
                n_multiple += 1;
            }
            (matches > 0).then(|| tagged[first].1)
        })
        .collect();
    if n_multiple > 0 {
        log::warn!("{n_multiple} boundary faces are on more than one tagged surface; each goes to the first");
    }
    let n_unused = used.iter().filter(|&&u| !u).count();
    if n_unused > 0 {
        let b = tagged[used.iter().position(|&u| !u).unwrap_or(0)].2;
        log::warn!(
            "{n_unused} tagged boundary elements (e.g. element {} of patch '{}') are no boundary face of \
             the volume elements; ignored",
            boundary.tag(b),
            patches.get(boundary.kind(b) as usize).map_or("?", |p| p.0.as_str())
        );
    }
    patch_of
}

fn fmt_point(p: Vec3) -> String {
    format!("({}, {}, {})", p.x, p.y, p.z)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(shape: ElementShape) -> Vec<Vec3> {
        let v = |x, y, z| Vec3::new(x, y, z);
        match shape {
            ElementShape::Tetrahedron => {
                vec![v(0., 0., 0.), v(1., 0., 0.), v(0., 1., 0.), v(0., 0., 1.)]
            }
            ElementShape::Hexahedron => vec![
                v(0., 0., 0.),
                v(1., 0., 0.),
                v(1., 1., 0.),
                v(0., 1., 0.),
                v(0., 0., 1.),
                v(1., 0., 1.),
                v(1., 1., 1.),
                v(0., 1., 1.),
            ],
            ElementShape::Prism => vec![
                v(0., 0., 0.),
                v(1., 0., 0.),
                v(0., 1., 0.),
                v(0., 0., 1.),
                v(1., 0., 1.),
                v(0., 1., 1.),
            ],
            ElementShape::Pyramid => {
                vec![
                    v(0., 0., 0.),
                    v(1., 0., 0.),
                    v(1., 1., 0.),
                    v(0., 1., 0.),
                    v(0.5, 0.5, 1.),
                ]
            }
        }
    }

    const SHAPES: [(ElementShape, f64); 4] = [
        (ElementShape::Tetrahedron, 1.0 / 6.0),
        (ElementShape::Hexahedron, 1.0),
        (ElementShape::Prism, 0.5),
        (ElementShape::Pyramid, 1.0 / 3.0),
    ];

    /// Each reference element alone, then mirrored: one outward-oriented cell of the
    /// right volume and shape either way.
    #[test]
    fn single_elements_in_either_orientation() {
        for (shape, volume) in SHAPES {
            let nodes: Vec<Label> = (0..shape.n_nodes() as Label).collect();
            let mirrored: Vec<Label> = shape.mirror().iter().map(|&i| i as Label).collect();
            assert!((signed_volume(&reference(shape), shape, &nodes) - volume).abs() < 1e-15);
            for order in [nodes, mirrored] {
                let mut cells = ElementList::new();
                cells.push(shape, 7, &order);
                let mesh =
                    mesh_from_elements(reference(shape), &cells, &ElementList::new(), vec![])
                        .unwrap();
                let g = mesh.geometry().unwrap();
                assert!((g.cell_volumes[0] - volume).abs() < 1e-15, "{shape:?}");
                assert_eq!(mesh.patches()[0].name, DEFAULT_PATCH);
                assert_eq!(mesh.patches()[0].size, shape.faces().len());
                let total_area: Vec3 = g.face_area_vectors.iter().sum();
                assert!(total_area.norm() < 1e-15, "{shape:?} is not closed");
            }
        }
    }

    /// Unit cube cut into n³ small cubes of six tetrahedra each (Kuhn's
    /// decomposition along the main diagonal, conforming between cubes).
    fn tet_box(n: u32) -> (Vec<Vec3>, ElementList<ElementShape>) {
        let m = n + 1;
        let id = |x: u32, y: u32, z: u32| x + m * (y + m * z);
        let points = (0..m * m * m)
            .map(|i| Vec3::new((i % m) as f64, (i / m % m) as f64, (i / (m * m)) as f64) / n as f64)
            .collect();
        let mut cells = ElementList::new();
        for z in 0..n {
            for y in 0..n {
                for x in 0..n {
                    for path in crate::mesh::generate::kuhn_paths() {
                        let mut c = [x, y, z];
                        let mut tet = vec![id(c[0], c[1], c[2])];
                        for axis in path {
                            c[axis] += 1;
                            tet.push(id(c[0], c[1], c[2]));
                        }
                        cells.push(ElementShape::Tetrahedron, cells.len() as u64 + 1, &tet);
                    }
                }
            }
        }
        (points, cells)
    }

    #[test]
    fn box_of_tetrahedra_with_both_orientations() {
        let n = 4;
        let (points, cells) = tet_box(n);
        // Half the paths give mirrored tetrahedra: they are reordered.
        let mesh = mesh_from_elements(points, &cells, &ElementList::new(), vec![]).unwrap();
        let cubes = (n * n * n) as usize;
        assert_eq!(mesh.n_cells(), 6 * cubes);
        let boundary = 6 * 2 * (n * n) as usize;
        assert_eq!(mesh.n_faces() - mesh.n_internal_faces(), boundary);
        assert_eq!(2 * mesh.n_internal_faces() + boundary, 4 * 6 * cubes);
        let volume: f64 = mesh.geometry().unwrap().cell_volumes.iter().sum();
        assert!((volume - 1.0).abs() < 1e-14);
    }

    /// A unit cube cut into six pyramids from its centre, bases given in the order
    /// of the cube's faces (half of them mirrored), and two patches.
    #[test]
    fn cube_of_pyramids_with_patches() {
        let mut points = reference(ElementShape::Hexahedron);
        points.push(Vec3::new(0.5, 0.5, 0.5));
        let mut cells = ElementList::new();
        let mut boundary = ElementList::new();
        for (i, face) in ElementShape::Hexahedron.faces().iter().enumerate() {
            let mut nodes: Vec<Label> = face.iter().map(|&p| p as Label).collect();
            // Outward cube faces are bases seen from outside: mirrored pyramids.
            boundary.push(u32::from(i >= 4), i as u64, &nodes);
            if i % 2 == 0 {
                nodes.reverse();
            }
            nodes.push(8);
            cells.push(ElementShape::Pyramid, i as u64 + 1, &nodes);
        }
        let patches = vec![
            ("sides".to_string(), PatchKind::Patch),
            ("walls".to_string(), PatchKind::Wall),
        ];
        let mesh = mesh_from_elements(points, &cells, &boundary, patches).unwrap();
        assert_eq!(mesh.n_internal_faces(), 12);
        assert_eq!(mesh.patch("sides").unwrap().size, 4);
        assert_eq!(mesh.patch("walls").unwrap().size, 2);
        assert!(mesh.patch(DEFAULT_PATCH).is_none());
        let g = mesh.geometry().unwrap();
        assert!(g.cell_volumes.iter().all(|v| (v - 1.0 / 6.0).abs() < 1e-15));
    }

    #[test]
    fn degenerate_and_collapsed_elements_are_refused() {
        let mut points = reference(ElementShape::Tetrahedron);
        points[3] = Vec3::new(0.5, 0.5, 0.0);
        let mut cells = ElementList::new();
        cells.push(ElementShape::Tetrahedron, 42, &[0, 1, 2, 3]);
        let err =
            mesh_from_elements(points.clone(), &cells, &ElementList::new(), vec![]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "element 42 (tetrahedron) near (0, 0, 0) has zero volume"
        );
        let mut cells = ElementList::new();
        cells.push(ElementShape::Tetrahedron, 43, &[0, 1, 2, 1]);
        let err = mesh_from_elements(points, &cells, &ElementList::new(), vec![]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "element 43 (tetrahedron) lists the point at (1, 0, 0) twice (collapsed element)"
        );
    }

    type Grid = std::collections::HashMap<[u32; 3], Label>;

    /// Hexahedra given as (lowest corner, edge length) in half units; points are shared
    /// by coordinates and moved up by `lift(corner)`.
    fn hexes(
        blocks: &[([u32; 3], u32)],
        lift: impl Fn([u32; 3]) -> f64,
    ) -> (Vec<Vec3>, ElementList<ElementShape>, Grid) {
        let mut grid = Grid::new();
        let mut points = Vec::new();
        let mut cells = ElementList::new();
        for (e, &([x, y, z], size)) in blocks.iter().enumerate() {
            let nodes: Vec<Label> = reference(ElementShape::Hexahedron)
                .iter()
                .map(|r| {
                    let c = [
                        x + size * r.x as u32,
                        y + size * r.y as u32,
                        z + size * r.z as u32,
                    ];
                    *grid.entry(c).or_insert_with(|| {
                        let p = Vec3::new(c[0] as f64, c[1] as f64, c[2] as f64) / 2.0;
                        points.push(p + Vec3::new(0.0, 0.0, lift(c)));
                        points.len() as Label - 1
                    })
                })
                .collect();
            cells.push(ElementShape::Hexahedron, e as u64 + 1, &nodes);
        }
        (points, cells, grid)
    }

    /// One hexahedron under four of half its size: hanging nodes on a planar interface.
    #[test]
    fn hanging_nodes_are_refused() {
        let small = [
            ([0, 0, 2], 1),
            ([1, 0, 2], 1),
            ([0, 1, 2], 1),
            ([1, 1, 2], 1),
        ];
        let (points, cells, _) = hexes(&small, |_| 0.0);
        let conformal = mesh_from_elements(points, &cells, &ElementList::new(), vec![]).unwrap();
        assert_eq!(conformal.n_internal_faces(), 4);
        let mut blocks = small.to_vec();
        blocks.push(([0, 0, 0], 2));
        let (points, cells, _) = hexes(&blocks, |_| 0.0);
        let err = mesh_from_elements(points, &cells, &ElementList::new(), vec![]).unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with("non-conformal interface at"), "{err}");
        assert!(err.contains("element 5 (hexahedron)"), "{err}");
    }

    /// Two tetrahedra on the warped top quad of a hexahedron, no pyramid between.
    #[test]
    fn quad_against_triangles_is_refused_on_warped_faces() {
        let (mut points, mut cells, grid) =
            hexes(
                &[([0, 0, 0], 2)],
                |c| if c == [2, 2, 2] { 0.2 } else { 0.0 },
            );
        points.push(Vec3::new(0.5, 0.5, 1.6));
        let apex = points.len() as Label - 1;
        let top = |x, y| grid[&[x, y, 2]];
        cells.push(
            ElementShape::Tetrahedron,
            2,
            &[top(0, 0), top(2, 0), top(2, 2), apex],
        );
        cells.push(
            ElementShape::Tetrahedron,
            3,
            &[top(0, 0), top(2, 2), top(0, 2), apex],
        );
        let err = mesh_from_elements(points, &cells, &ElementList::new(), vec![]).unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with("non-conformal interface at"), "{err}");
        assert!(
            err.contains("element 1 (hexahedron)") && err.contains("(tetrahedron)"),
            "{err}"
        );
    }

    /// Timing on a million tetrahedra: `cargo test --lib mesh::cells -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn a_million_tetrahedra_in_seconds() {
        let (points, cells) = tet_box(56);
        let start = std::time::Instant::now();
        let mesh = mesh_from_elements(points, &cells, &ElementList::new(), vec![]).unwrap();
        let elapsed = start.elapsed();
        println!("{} cells in {elapsed:?}", mesh.n_cells());
        assert!(elapsed.as_secs_f64() < 5.0);
    }
}
