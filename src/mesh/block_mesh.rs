//! OpenFOAM `blockMeshDict` → [`Mesh`], without OpenFOAM: the mesh that
//! OpenFOAM v1912's `blockMesh` writes, with the same point, face and cell
//! numbering and (to round-off) the same point positions.
//!
//! Supported: `hex` blocks (an optional cell-zone name is ignored, with a
//! warning), `simpleGrading` and `edgeGrading` with single expansion ratios or
//! multi-grading sections `((blockFraction nDivFraction expansionRatio) ...)`
//! (`(blockFraction expansionRatio)` takes nDivFraction = blockFraction),
//! `convertToMeters` or `scale`, named patches in the `boundary` list or the
//! old `patches` list, `defaultPatch { name; type; }` (by default
//! `defaultFaces`, `empty`), and blocks that share faces (their points are
//! merged, the faces between them become internal faces). Curved `edges`,
//! `faces` projections, `geometry` and `mergePatchPairs` are refused by name,
//! as are collapsed (degenerate) and inside-out blocks.
//!
//! How the mesh is numbered (facts of OpenFOAM's `blockMesh` and of its
//! `polyMesh` constructor from cell shapes):
//! - **block points**: a block of n_x × n_y × n_z cells has points (i, j, k),
//!   i fastest. Each of its 12 edges (4 per direction) is divided by its
//!   grading into weights λ ∈ [0, 1]; an inner point is the average over the
//!   three directions of the four straight edge points of its direction,
//!   weighted by how close the point is to each edge (a product of the other
//!   directions' edge weights, normalised per direction);
//! - **points**: blocks in order, each block's points in order; a point already
//!   met on a face shared with an earlier block keeps that earlier number (its
//!   position is the last block's), so numbers go by first appearance;
//! - **cells**: blocks in order, within a block i fastest, then j, then k;
//! - **faces**: the hexahedron's faces are x-min (0 4 7 3), x-max (1 2 6 5),
//!   y-min (0 1 5 4), y-max (3 7 6 2), z-min (0 3 2 1), z-max (4 5 6 7) in cell
//!   point numbers. Internal faces: cell by cell, each cell's faces shared with
//!   higher cells in increasing neighbour order, points as the owner sees them.
//!   Boundary faces: patch by patch in dictionary order, each patch's block faces
//!   in the order written, each block face's cells in the order blockMesh walks
//!   them (x faces: k then j; y faces: i then k; z faces: i then j, the last
//!   index fastest). The block faces on no patch and shared with no block make
//!   the default patch, block by block and face by face in the same walk,
//!   appended (only when there are any) after the named ones.

use super::{FaceList, Label, Mesh, MeshError, Patch, PatchKind, Vec3};
use crate::foam::dict::{Dict, EntryValue};
use crate::foam::{FoamDict, Value, ValueKind};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The hexahedron's faces in its point numbers (OpenFOAM's `hex` cell model).
const HEX_FACES: [[usize; 4]; 6] = [
    [0, 4, 7, 3],
    [1, 2, 6, 5],
    [0, 1, 5, 4],
    [3, 7, 6, 2],
    [0, 3, 2, 1],
    [4, 5, 6, 7],
];

/// Corner `(x, y, z)` ∈ {0, 1}³ of a hexahedron's point number.
const HEX_CORNERS: [[usize; 3]; 8] = [
    [0, 0, 0],
    [1, 0, 0],
    [1, 1, 0],
    [0, 1, 0],
    [0, 0, 1],
    [1, 0, 1],
    [1, 1, 1],
    [0, 1, 1],
];

/// The block edge along direction `d` at the corner positions `(a, b)` of the
/// two other directions (in increasing direction order): blockMesh numbers
/// the four edges of a direction (0,0), (1,0), (1,1), (0,1), x-edges 0–3,
/// y-edges 4–7, z-edges 8–11.
fn edge_index(d: usize, a: usize, b: usize) -> usize {
    let along = match (a, b) {
        (0, 0) => 0,
        (1, 0) => 1,
        (1, 1) => 2,
        _ => 3,
    };
    4 * d + along
}

/// The path of the dictionary a case's mesh would be built from, when the case
/// has `system/blockMeshDict` (or the old `constant/polyMesh/blockMeshDict`):
/// whatever it is, so that one that is not a regular file (a FIFO, a
/// device) is refused by name when read, not taken for a missing mesh.
pub fn block_mesh_dict(case_dir: &Path) -> Option<PathBuf> {
    let present = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    [
        case_dir.join("system").join("blockMeshDict"),
        case_dir
            .join("constant")
            .join("polyMesh")
            .join("blockMeshDict"),
    ]
    .into_iter()
    .find(|p| present(p) || present(&crate::foam::gz_path(p)))
}

/// Builds the mesh described by the `blockMeshDict` at `path`.
pub fn read_block_mesh_dict(path: &Path) -> Result<Mesh, MeshError> {
    let dict = FoamDict::read(path)?;
    let description = Description::read(&dict)?;
    description.mesh().map_err(|e| e.in_file(path))
}

/// One section of a graded edge: a fraction of the edge's length, a fraction
/// of its divisions and the ratio of its last to its first cell width.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Section {
    length_fraction: f64,
    division_fraction: f64,
    expansion: f64,
}

/// An edge's grading: sections, fractions normalised to sum to 1.
type Grading = Vec<Section>;

#[derive(Clone, Debug)]
struct Block {
    vertices: [usize; 8],
    cells: [usize; 3],
    /// Per edge (blockMesh's edge numbering).
    grading: [Grading; 12],
}

impl Block {
    fn n_points(&self) -> usize {
        self.cells.iter().map(|n| n + 1).product()
    }

    fn point_index(&self, i: usize, j: usize, k: usize) -> usize {
        let [nx, ny, _] = self.cells;
        i + (nx + 1) * (j + (ny + 1) * k)
    }

    fn cell_index(&self, i: usize, j: usize, k: usize) -> usize {
        let [nx, ny, _] = self.cells;
        i + nx * (j + ny * k)
    }

    /// The block's points, before scaling.
    fn points(&self, vertices: &[Vec3]) -> Vec<Vec3> {
        let corner = |c: [usize; 3]| {
            let v = HEX_CORNERS.iter().position(|&h| h == c).unwrap();
            vertices[self.vertices[v]]
        };
        // Edge e of direction d runs from the corner with coordinate d = 0 to
        // the one with d = 1.
        let mut edge_ends = [(Vec3::zeros(), Vec3::zeros()); 12];
        for d in 0..3 {
            let (o1, o2) = other_directions(d);
            for a in 0..2 {
                for b in 0..2 {
                    let mut c = [0; 3];
                    c[o1] = a;
                    c[o2] = b;
                    let start = corner(c);
                    c[d] = 1;
                    edge_ends[edge_index(d, a, b)] = (start, corner(c));
                }
            }
        }
        let weights: Vec<Vec<f64>> = (0..12)
            .map(|e| divisions(self.cells[e / 4], &self.grading[e]))
            .collect();

        let [nx, ny, _] = self.cells;
        // Each point depends on its own indices only: the k-layers are
        // computed on every core, each point by the same arithmetic as in a
        // sequential loop (so the positions do not depend on the threads).
        let point = |i: usize, j: usize, k: usize| -> Vec3 {
            let index = [i, j, k];
            let at_corner = (0..3).all(|d| index[d] == 0 || index[d] == self.cells[d]);
            if at_corner {
                return corner([0, 1, 2].map(|d| usize::from(index[d] > 0)));
            }
            // λ of edge e at this point (each edge runs along one index).
            let w = |e: usize| weights[e][index[e / 4]];
            let mut sum = Vec3::zeros();
            for d in 0..3 {
                let (o1, o2) = other_directions(d);
                let mut edge_weights = [0.0; 4];
                for (a, b) in [(0, 0), (1, 0), (1, 1), (0, 1)] {
                    let e = edge_index(d, a, b);
                    // Closeness to edge e, from either end of it:
                    // along the edges of the two other directions that
                    // start at that end.
                    let mut closeness = 0.0;
                    for end in 0..2 {
                        let mut pos = [0; 3];
                        pos[d] = end;
                        pos[o1] = a;
                        pos[o2] = b;
                        let along = if end == 0 { 1.0 - w(e) } else { w(e) };
                        let mut f = along;
                        for (o, at) in [(o1, a), (o2, b)] {
                            let (p1, p2) = other_directions(o);
                            let e_o = edge_index(o, pos[p1], pos[p2]);
                            f *= if at == 0 { 1.0 - w(e_o) } else { w(e_o) };
                        }
                        closeness += f;
                    }
                    edge_weights[e - 4 * d] = closeness;
                }
                let total: f64 = edge_weights.iter().sum();
                for (along, weight) in edge_weights.iter().enumerate() {
                    let (start, end) = edge_ends[4 * d + along];
                    let on_edge = start + (end - start) * w(4 * d + along);
                    sum += on_edge * (weight / total);
                }
            }
            sum / 3.0
        };
        let mut points = vec![Vec3::zeros(); self.n_points()];
        points
            .par_chunks_mut((nx + 1) * (ny + 1))
            .enumerate()
            .for_each(|(k, layer)| {
                for (row, j) in layer.chunks_mut(nx + 1).zip(0..) {
                    for (p, i) in row.iter_mut().zip(0..) {
                        *p = point(i, j, k);
                    }
                }
            });
        points
    }

    /// The block's boundary faces on its face `f` (hexahedron face numbering),
    /// as (cell of the block, face) in the order blockMesh walks them.
    fn face_cells(&self, f: usize) -> Vec<usize> {
        let [nx, ny, nz] = self.cells;
        let d = f / 2;
        let at = if f.is_multiple_of(2) {
            0
        } else {
            self.cells[d] - 1
        };
        let mut out = Vec::new();
        match d {
            0 => {
                for k in 0..nz {
                    for j in 0..ny {
                        out.push(self.cell_index(at, j, k));
                    }
                }
            }
            1 => {
                for i in 0..nx {
                    for k in 0..nz {
                        out.push(self.cell_index(i, at, k));
                    }
                }
            }
            _ => {
                for i in 0..nx {
                    for j in 0..ny {
                        out.push(self.cell_index(i, j, at));
                    }
                }
            }
        }
        out
    }

    /// The block's point indices on its face `f`.
    fn face_points(&self, f: usize) -> Vec<usize> {
        let d = f / 2;
        let at = if f.is_multiple_of(2) {
            0
        } else {
            self.cells[d]
        };
        let mut out = Vec::new();
        for k in 0..=self.cells[2] {
            for j in 0..=self.cells[1] {
                for i in 0..=self.cells[0] {
                    if [i, j, k][d] == at {
                        out.push(self.point_index(i, j, k));
                    }
                }
            }
        }
        out
    }
}

/// The two directions other than `d`, in increasing order.
fn other_directions(d: usize) -> (usize, usize) {
    match d {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    }
}

/// The λ ∈ [0, 1] of the n + 1 points dividing a graded edge into n cells
/// (OpenFOAM's `lineDivide`): each section gets round(nDivFraction·n)
/// divisions (the section with the largest fraction takes what rounding left
/// over), spaced geometrically so that its last cell is `expansion` times its
/// first; with fewer divisions than sections the edge is divided uniformly.
fn divisions(n: usize, grading: &[Section]) -> Vec<f64> {
    let mut lambda = vec![0.0; n + 1];
    lambda[n] = 1.0;
    if n < grading.len() || grading.is_empty() {
        for (i, l) in lambda.iter_mut().enumerate().take(n).skip(1) {
            *l = i as f64 / n as f64;
        }
        return lambda;
    }
    let mut counts: Vec<usize> = grading
        .iter()
        .map(|s| (s.division_fraction * n as f64 + 0.5) as usize)
        .collect();
    let largest = (0..grading.len()).fold(0, |best, s| {
        if grading[s].division_fraction > grading[best].division_fraction {
            s
        } else {
            best
        }
    });
    let assigned: usize = counts.iter().sum();
    counts[largest] = (counts[largest] + n).saturating_sub(assigned);

    let mut start = 0.0;
    let mut first = 1;
    for (section, &count) in grading.iter().zip(&counts) {
        let end = (first + count).min(n + 1);
        if section.expansion == 1.0 {
            for (i, l) in lambda.iter_mut().enumerate().take(end).skip(first) {
                *l = start + section.length_fraction * (i - first + 1) as f64 / count as f64;
            }
        } else {
            // Cell widths grow by r per cell, r^(count − 1) = expansion.
            let r = if count > 1 {
                section.expansion.powf(1.0 / (count as f64 - 1.0))
            } else {
                0.0
            };
            for (i, l) in lambda.iter_mut().enumerate().take(end).skip(first) {
                *l = start
                    + section.length_fraction * (1.0 - r.powi((i - first + 1) as i32))
                        / (1.0 - r.powi(count as i32));
            }
        }
        if end > first {
            start = lambda[end - 1];
        }
        first = end;
    }
    lambda
}

/// A patch as the dictionary names it: its faces as block-vertex quads.
#[derive(Clone, Debug)]
struct PatchSpec {
    name: String,
    kind: PatchKind,
    in_groups: Vec<String>,
    faces: Vec<[usize; 4]>,
    /// Line of the patch, for messages.
    line: usize,
}

/// A `blockMeshDict` read.
#[derive(Debug)]
struct Description {
    file: PathBuf,
    scale: f64,
    vertices: Vec<Vec3>,
    blocks: Vec<Block>,
    /// Line of each block, for messages.
    block_lines: Vec<usize>,
    patches: Vec<PatchSpec>,
    default_name: String,
    default_kind: PatchKind,
}

fn parse_err(file: &Path, line: usize, msg: impl Into<String>) -> MeshError {
    MeshError::parse(file, line, msg)
}

/// The one value of a `key value;` entry.
fn single_value<'d>(dict: &'d FoamDict, key: &str) -> Result<Option<&'d Value>, MeshError> {
    match dict.stream_entry(key)? {
        None => Ok(None),
        Some((_, [v])) => Ok(Some(v)),
        Some((e, values)) => Err(e.error(format!(
            "'{key}': expected one list ( ... ), found {} values",
            values.len()
        ))),
    }
}

/// The items of a list value.
fn list_items<'v>(file: &Path, v: &'v Value, what: &str) -> Result<&'v [Value], MeshError> {
    match &v.kind {
        ValueKind::List(items) => Ok(items),
        other => Err(parse_err(
            file,
            v.line,
            format!(
                "{what}: expected a list ( ... ), found {}",
                other.describe()
            ),
        )),
    }
}

fn label_list(file: &Path, v: &Value, n: usize, what: &str) -> Result<Vec<usize>, MeshError> {
    let items = list_items(file, v, what)?;
    let labels: Option<Vec<usize>> = items
        .iter()
        .map(|x| match x.kind {
            ValueKind::Int(i) => usize::try_from(i).ok(),
            _ => None,
        })
        .collect();
    match labels {
        Some(l) if l.len() == n => Ok(l),
        _ => Err(parse_err(
            file,
            v.line,
            format!("{what}: expected {n} non-negative integers ( ... )"),
        )),
    }
}

impl Description {
    fn read(dict: &FoamDict) -> Result<Self, MeshError> {
        let file = dict.file().to_path_buf();
        for key in ["edges", "faces", "mergePatchPairs"] {
            if let Some(v) = single_value(dict, key)? {
                if !list_items(&file, v, key)?.is_empty() {
                    let what = match key {
                        "edges" => "curved edges (arc, spline, polyLine, projected ...)",
                        "faces" => "face projections onto geometry",
                        _ => "merging patch pairs",
                    };
                    return Err(parse_err(
                        &file,
                        v.line,
                        format!(
                            "'{key}': {what} are not supported by fvpoisson's blockMesh; run \
                             OpenFOAM's blockMesh and give its constant/polyMesh instead"
                        ),
                    ));
                }
            }
        }
        if dict.contains("geometry") {
            let e = dict.entry("geometry").unwrap();
            if e.as_dict().is_none_or(|g| g.entries().next().is_some()) {
                return Err(e.error(
                    "'geometry': projection onto geometry is not supported by fvpoisson's \
                     blockMesh; run OpenFOAM's blockMesh and give its constant/polyMesh instead",
                ));
            }
        }
        let scale = match dict.get_opt::<f64>("scale")? {
            Some(s) => s,
            None => dict.get_or("convertToMeters", 1.0)?,
        };
        if !(scale.is_finite() && scale > 0.0) {
            return Err(dict.error(format!(
                "scale (convertToMeters) must be a positive number, found {scale}"
            )));
        }
        let vertices_value =
            single_value(dict, "vertices")?.ok_or_else(|| dict.missing("vertices"))?;
        let vertices = vertices_value.to_vectors(&file)?;
        let blocks_value = single_value(dict, "blocks")?.ok_or_else(|| dict.missing("blocks"))?;
        let (blocks, block_lines) = read_blocks(&file, blocks_value, vertices.len())?;

        let patches = match (
            single_value(dict, "boundary")?,
            single_value(dict, "patches")?,
        ) {
            (Some(b), _) => read_boundary(&file, b)?,
            (None, Some(p)) => read_old_patches(&file, p)?,
            (None, None) => Vec::new(),
        };
        for p in &patches {
            if let Some(f) = p.faces.iter().flatten().find(|&&v| v >= vertices.len()) {
                return Err(parse_err(
                    &file,
                    p.line,
                    format!(
                        "patch '{}' uses vertex {f} but there are {} vertices",
                        p.name,
                        vertices.len()
                    ),
                ));
            }
        }
        let (default_name, default_kind) = match dict.get_dict_opt("defaultPatch")? {
            Some(d) => {
                let name = d.get_or("name", "defaultFaces".to_string())?;
                let kind_name = d.get_or("type", "empty".to_string())?;
                let kind = PatchKind::from_foam(&kind_name)
                    .map_err(|msg| d.error(format!("defaultPatch: {msg}")))?;
                (name, kind)
            }
            None => ("defaultFaces".to_string(), PatchKind::Empty),
        };
        for unused in dict.unread() {
            log::warn!("{unused}: not used by fvpoisson's blockMesh, ignored");
        }
        Ok(Self {
            file,
            scale,
            vertices,
            blocks,
            block_lines,
            patches,
            default_name,
            default_kind,
        })
    }

    fn mesh(&self) -> Result<Mesh, MeshError> {
        self.mesh_with(false)
    }

    /// The mesh, its internal faces matched through their points when
    /// `match_faces` (else only where blocks share faces).
    fn mesh_with(&self, match_faces: bool) -> Result<Mesh, MeshError> {
        self.check_blocks()?;
        let (points, point_labels) = self.merged_points()?;
        let mut cell_offsets = Vec::with_capacity(self.blocks.len() + 1);
        cell_offsets.push(0);
        for block in &self.blocks {
            cell_offsets.push(cell_offsets.last().unwrap() + block.cells.iter().product::<usize>());
        }
        let mut cells: Vec<[Label; 8]> = vec![[0; 8]; *cell_offsets.last().unwrap()];
        let mut point_offset = 0;
        for (b, block) in self.blocks.iter().enumerate() {
            let [nx, ny, _] = block.cells;
            // Rows of cells (i fastest) on every core.
            cells[cell_offsets[b]..cell_offsets[b + 1]]
                .par_chunks_mut(nx)
                .enumerate()
                .for_each(|(row, out)| {
                    let (j, k) = (row % ny, row / ny);
                    for (cell, i) in out.iter_mut().zip(0..) {
                        *cell = HEX_CORNERS.map(|[a, b, c]| {
                            point_labels[point_offset + block.point_index(i + a, j + b, k + c)]
                        });
                    }
                });
            point_offset += block.n_points();
        }

        // The named patches' faces as (cell, hexahedron face).
        let mut patch_faces: Vec<Vec<(usize, usize)>> = Vec::new();
        let block_faces = self.block_faces();
        for p in &self.patches {
            let mut faces = Vec::new();
            for quad in &p.faces {
                let key = sorted_key(quad.map(|v| v as Label));
                let owners = block_faces.get(&key).map(Vec::as_slice).unwrap_or(&[]);
                let &(b, f) = match owners {
                    [one] => one,
                    [] => {
                        return Err(parse_err(
                            &self.file,
                            p.line,
                            format!(
                                "patch '{}': face {quad:?} is not a face of any block",
                                p.name
                            ),
                        ))
                    }
                    _ => {
                        return Err(parse_err(
                            &self.file,
                            p.line,
                            format!(
                                "patch '{}': face {quad:?} lies between two blocks, so it is \
                                 an internal face; it cannot be on a patch",
                                p.name
                            ),
                        ))
                    }
                };
                let offset = cell_offsets[b];
                faces.extend(
                    self.blocks[b]
                        .face_cells(f)
                        .into_iter()
                        .map(|c| (offset + c, f)),
                );
            }
            patch_faces.push(faces);
        }
        // Block faces on no patch and shared with no block: the default
        // patch, block by block, face by face.
        let named: std::collections::HashSet<[Label; 4]> = self
            .patches
            .iter()
            .flat_map(|p| &p.faces)
            .map(|quad| sorted_key(quad.map(|v| v as Label)))
            .collect();
        let mut default_faces = Vec::new();
        for (b, block) in self.blocks.iter().enumerate() {
            for (f, face) in HEX_FACES.iter().enumerate() {
                let key = sorted_key(face.map(|v| block.vertices[v] as Label));
                if block_faces[&key].len() == 1 && !named.contains(&key) {
                    let offset = cell_offsets[b];
                    default_faces.extend(block.face_cells(f).into_iter().map(|c| (offset + c, f)));
                }
            }
        }
        // Blocks that share no face have no merged points: every cell face
        // inside a block is shared with the next cell in its direction and
        // no other, and none between blocks, so the internal faces follow
        // from the block indices without matching faces by their points.
        let shared = block_faces.values().any(|owners| owners.len() > 1);
        let internal = if !(shared || match_faces) {
            self.block_internal_faces(&cells, &cell_offsets)
        } else {
            matched_internal_faces(&cells)?
        };
        self.assemble(points, &cells, internal, &patch_faces, &default_faces)
    }

    /// The internal faces of blocks that share no face, numbered as
    /// [`matched_internal_faces`] numbers them: cell by cell, each cell's
    /// faces with its higher neighbours (i + 1, j + 1, k + 1: increasing
    /// cell numbers) in that order. Computed by k-layers on every core.
    fn block_internal_faces(&self, cells: &[[Label; 8]], cell_offsets: &[usize]) -> InternalFaces {
        let layers: Vec<(usize, usize)> = (self.blocks.iter().enumerate())
            .flat_map(|(b, block)| (0..block.cells[2]).map(move |k| (b, k)))
            .collect();
        // Internal faces per k-layer: (nx − 1)·ny across x, nx·(ny − 1)
        // across y and, but in a block's last layer, nx·ny across z; each
        // layer writes its share of the arrays in place.
        let counts: Vec<usize> = (layers.iter())
            .map(|&(b, k)| {
                let [nx, ny, nz] = self.blocks[b].cells;
                (nx - 1) * ny + nx * (ny - 1) + if k + 1 < nz { nx * ny } else { 0 }
            })
            .collect();
        let total: usize = counts.iter().sum();
        let mut labels: Vec<Label> = vec![0; 4 * total];
        let mut owner: Vec<Label> = vec![0; total];
        let mut neighbour: Vec<Label> = vec![0; total];
        let mut parts = Vec::with_capacity(layers.len());
        let (mut l_rest, mut o_rest, mut n_rest) =
            (&mut labels[..], &mut owner[..], &mut neighbour[..]);
        for (&layer, &count) in layers.iter().zip(&counts) {
            let (l, l_tail) = std::mem::take(&mut l_rest).split_at_mut(4 * count);
            let (o, o_tail) = std::mem::take(&mut o_rest).split_at_mut(count);
            let (n, n_tail) = std::mem::take(&mut n_rest).split_at_mut(count);
            parts.push((layer, l, o, n));
            (l_rest, o_rest, n_rest) = (l_tail, o_tail, n_tail);
        }
        parts.into_par_iter().for_each(|((b, k), l, o, n)| {
            let [nx, ny, nz] = self.blocks[b].cells;
            let first = cell_offsets[b] + nx * ny * k;
            let mut next = 0;
            for ij in 0..nx * ny {
                let (i, j) = (ij % nx, ij / nx);
                let c = first + ij;
                let higher = [
                    (i + 1 < nx, 1, 1),
                    (j + 1 < ny, 3, nx),
                    (k + 1 < nz, 5, nx * ny),
                ];
                for (_, f, stride) in higher.into_iter().filter(|&(inside, _, _)| inside) {
                    l[4 * next..4 * next + 4].copy_from_slice(&HEX_FACES[f].map(|v| cells[c][v]));
                    o[next] = c as Label;
                    n[next] = (c + stride) as Label;
                    next += 1;
                }
            }
        });
        let mut assigned = vec![false; 6 * cells.len()];
        for (b, block) in self.blocks.iter().enumerate() {
            let [nx, ny, nz] = block.cells;
            assigned[6 * cell_offsets[b]..6 * cell_offsets[b + 1]]
                .par_chunks_mut(6)
                .enumerate()
                .for_each(|(c, a)| {
                    let (i, j, k) = (c % nx, c / nx % ny, c / (nx * ny));
                    a.copy_from_slice(&[i > 0, i + 1 < nx, j > 0, j + 1 < ny, k > 0, k + 1 < nz]);
                });
        }
        InternalFaces {
            labels,
            owner,
            neighbour,
            assigned,
        }
    }

    /// Every block's faces by their sorted vertex labels → (block, face).
    fn block_faces(&self) -> HashMap<[Label; 4], Vec<(usize, usize)>> {
        let mut map: HashMap<[Label; 4], Vec<(usize, usize)>> = HashMap::new();
        for (b, block) in self.blocks.iter().enumerate() {
            for (f, face) in HEX_FACES.iter().enumerate() {
                let key = sorted_key(face.map(|v| block.vertices[v] as Label));
                map.entry(key).or_default().push((b, f));
            }
        }
        map
    }

    fn check_blocks(&self) -> Result<(), MeshError> {
        for (b, block) in self.blocks.iter().enumerate() {
            let line = self.block_lines[b];
            let mut seen = block.vertices;
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return Err(parse_err(
                    &self.file,
                    line,
                    format!(
                        "block {b} repeats a vertex ({:?}): collapsed (wedge or prism) blocks \
                         are not supported by fvpoisson's blockMesh",
                        block.vertices
                    ),
                ));
            }
            let v = |i: usize| self.vertices[block.vertices[i]];
            let volume = (v(1) - v(0)).cross(&(v(3) - v(0))).dot(&(v(4) - v(0)));
            if volume <= 0.0 {
                return Err(parse_err(
                    &self.file,
                    line,
                    format!(
                        "block {b} {:?} is inside-out (left-handed): list its vertices so that \
                         0→1, 0→3 and 0→4 form a right-handed set",
                        block.vertices
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The mesh points and, per block point (blocks in order), its mesh point
    /// number: points on faces shared by two blocks are merged, numbered by
    /// first appearance, placed where the last block puts them.
    fn merged_points(&self) -> Result<(Vec<Vec3>, Vec<Label>), MeshError> {
        let mut offsets = Vec::with_capacity(self.blocks.len());
        let mut all = Vec::new();
        for block in &self.blocks {
            offsets.push(all.len());
            all.extend(block.points(&self.vertices));
        }
        // Union–find towards the lowest index.
        let mut parent: Vec<usize> = (0..all.len()).collect();
        fn root(parent: &mut [usize], mut p: usize) -> usize {
            while parent[p] != p {
                parent[p] = parent[parent[p]];
                p = parent[p];
            }
            p
        }
        for (key, owners) in self.block_faces() {
            let (a, fa, b, fb) = match owners.as_slice() {
                [_] => continue,
                [(a, fa), (b, fb)] => (*a, *fa, *b, *fb),
                _ => {
                    return Err(MeshError::InFile {
                        file: self.file.clone(),
                        msg: format!(
                            "the block face with vertices {key:?} belongs to {} blocks; a face \
                             can be shared by two blocks at most",
                            owners.len()
                        ),
                    })
                }
            };
            let points_a: Vec<usize> = self.blocks[a]
                .face_points(fa)
                .into_iter()
                .map(|p| offsets[a] + p)
                .collect();
            let points_b: Vec<usize> = self.blocks[b]
                .face_points(fb)
                .into_iter()
                .map(|p| offsets[b] + p)
                .collect();
            let mismatch = || MeshError::InFile {
                file: self.file.clone(),
                msg: format!(
                    "blocks {a} and {b} share the face with vertices {key:?} but their points on \
                     it do not match: give both blocks the same number of cells and the same \
                     grading along that face"
                ),
            };
            if points_a.len() != points_b.len() {
                return Err(mismatch());
            }
            // Tolerance: a small part of the shortest distance between two
            // points of the face.
            let mut shortest = f64::INFINITY;
            for (i, &p) in points_a.iter().enumerate() {
                for &q in &points_a[i + 1..points_a.len().min(i + 2)] {
                    shortest = shortest.min((all[p] - all[q]).norm());
                }
            }
            let block_a = &self.blocks[a];
            let stride = match fa / 2 {
                0 => block_a.cells[1] + 1,
                _ => block_a.cells[0] + 1,
            };
            for (i, &p) in points_a.iter().enumerate() {
                if let Some(&q) = points_a.get(i + stride) {
                    shortest = shortest.min((all[p] - all[q]).norm());
                }
            }
            let tolerance = 1e-3 * shortest;
            let mut sorted_b = points_b.clone();
            sorted_b.sort_by(|&p, &q| all[p].x.total_cmp(&all[q].x));
            for &p in &points_a {
                let x = all[p].x;
                let from = sorted_b.partition_point(|&q| all[q].x < x - tolerance);
                let found = sorted_b[from..]
                    .iter()
                    .take_while(|&&q| all[q].x <= x + tolerance)
                    .find(|&&q| (all[q] - all[p]).norm() <= tolerance);
                let Some(&q) = found else {
                    return Err(mismatch());
                };
                let (rp, rq) = (root(&mut parent, p), root(&mut parent, q));
                let (lo, hi) = (rp.min(rq), rp.max(rq));
                parent[hi] = lo;
            }
        }
        let mut labels = vec![0 as Label; all.len()];
        let mut points: Vec<Vec3> = Vec::new();
        for p in 0..all.len() {
            let r = root(&mut parent, p);
            if r == p {
                labels[p] = Label::try_from(points.len())
                    .map_err(|_| MeshError::invalid("blockMesh: more than 2^32 points"))?;
                points.push(all[p] * self.scale);
            } else {
                labels[p] = labels[r];
                points[labels[p] as usize] = all[p] * self.scale;
            }
        }
        Ok((points, labels))
    }

    /// The polyMesh of hexahedral `cells` with their `internal` faces and the
    /// named patches' faces given as (cell, hexahedron face), ordered as
    /// OpenFOAM orders a mesh built from cell shapes (see the module
    /// documentation).
    fn assemble(
        &self,
        points: Vec<Vec3>,
        cells: &[[Label; 8]],
        internal: InternalFaces,
        patch_faces: &[Vec<(usize, usize)>],
        default_faces: &[(usize, usize)],
    ) -> Result<Mesh, MeshError> {
        let cell_face = |c: usize, f: usize| HEX_FACES[f].map(|v| cells[c][v]);
        let InternalFaces {
            labels,
            mut owner,
            neighbour,
            mut assigned,
        } = internal;
        let mut faces = FaceList::uniform(4, labels)?;
        let mut patches = Vec::new();
        for (spec, list) in self.patches.iter().zip(patch_faces) {
            let start = owner.len();
            for &(c, f) in list {
                if std::mem::replace(&mut assigned[6 * c + f], true) {
                    return Err(parse_err(
                        &self.file,
                        spec.line,
                        format!(
                            "patch '{}': a face of cell {c} is already internal or on another \
                             patch (a block face listed twice?)",
                            spec.name
                        ),
                    ));
                }
                faces.push(&cell_face(c, f))?;
                owner.push(c as Label);
            }
            patches.push(
                Patch::new(&spec.name, spec.kind, start, owner.len() - start)
                    .with_groups(spec.in_groups.clone()),
            );
        }
        let default_start = owner.len();
        for &(c, f) in default_faces {
            if !std::mem::replace(&mut assigned[6 * c + f], true) {
                faces.push(&cell_face(c, f))?;
                owner.push(c as Label);
            }
        }
        if let Some(cf) = assigned.iter().position(|&a| !a) {
            return Err(MeshError::invalid(format!(
                "blockMesh: face {} of cell {} is neither internal nor on a block face (blocks \
                 that touch without sharing a face?)",
                cf % 6,
                cf / 6
            )));
        }
        let n_default = owner.len() - default_start;
        if n_default > 0 {
            match patches.iter().position(|p| p.name == self.default_name) {
                // An empty last patch of the default name takes the faces.
                Some(i) if i + 1 == patches.len() && patches[i].size == 0 => {
                    patches[i].start = default_start;
                    patches[i].size = n_default;
                }
                Some(_) => {
                    return Err(MeshError::InFile {
                        file: self.file.clone(),
                        msg: format!(
                            "{n_default} block faces are on no patch and would go to the default \
                             patch '{}', but a patch of that name already has faces or is not \
                             the last one",
                            self.default_name
                        ),
                    })
                }
                None => {
                    log::info!(
                        "blockMesh: {n_default} faces on no patch go to the default patch '{}' \
                         ({})",
                        self.default_name,
                        self.default_kind.foam_name()
                    );
                    patches.push(Patch::new(
                        self.default_name.clone(),
                        self.default_kind,
                        default_start,
                        n_default,
                    ));
                }
            }
        }
        Mesh::new(points, faces, owner, neighbour, patches)
    }
}

/// The internal faces of a hexahedral mesh: point labels (4 per face),
/// owner and neighbour, in upper-triangular order, and which cell faces
/// (6 per cell) they take.
struct InternalFaces {
    labels: Vec<Label>,
    owner: Vec<Label>,
    neighbour: Vec<Label>,
    assigned: Vec<bool>,
}

/// The internal faces of hexahedral `cells` found by matching every cell
/// face with the others through their sorted points: cell by cell, each
/// cell's faces shared with higher cells in increasing neighbour order,
/// points as the owner sees them. Used where blocks share faces.
fn matched_internal_faces(cells: &[[Label; 8]]) -> Result<InternalFaces, MeshError> {
    let n_cells = cells.len();
    let cell_face = |c: usize, f: usize| HEX_FACES[f].map(|v| cells[c][v]);
    // The other cell of each cell face, found through the faces' sorted points.
    let mut first_seen: HashMap<[Label; 4], usize> = HashMap::with_capacity(3 * n_cells);
    let mut other = vec![usize::MAX; 6 * n_cells];
    for c in 0..n_cells {
        for f in 0..6 {
            let key = sorted_key(cell_face(c, f));
            match first_seen.get(&key) {
                None => {
                    first_seen.insert(key, 6 * c + f);
                }
                Some(&cf) => {
                    if other[cf] != usize::MAX {
                        return Err(MeshError::invalid(format!(
                            "blockMesh: the face with points {key:?} belongs to more than \
                             two cells"
                        )));
                    }
                    other[cf] = 6 * c + f;
                    other[6 * c + f] = cf;
                }
            }
        }
    }
    drop(first_seen);
    let mut labels = Vec::new();
    let mut owner: Vec<Label> = Vec::new();
    let mut neighbour: Vec<Label> = Vec::new();
    let mut assigned = vec![false; 6 * n_cells];
    for c in 0..n_cells {
        let mut higher: Vec<(usize, usize)> = (0..6)
            .filter(|&f| other[6 * c + f] != usize::MAX && other[6 * c + f] / 6 > c)
            .map(|f| (other[6 * c + f] / 6, f))
            .collect();
        higher.sort_unstable();
        for (n, f) in higher {
            labels.extend_from_slice(&cell_face(c, f));
            owner.push(c as Label);
            neighbour.push(n as Label);
            assigned[6 * c + f] = true;
            assigned[other[6 * c + f]] = true;
        }
    }
    Ok(InternalFaces {
        labels,
        owner,
        neighbour,
        assigned,
    })
}

fn sorted_key(mut face: [Label; 4]) -> [Label; 4] {
    face.sort_unstable();
    face
}

/// `blocks ( hex (v0 … v7) [zone] (nx ny nz) simpleGrading (…) … )`.
/// Bytes a hexahedral cell of the mesh takes while it is built (points,
/// faces with their owner and neighbour, the shared-face merge's maps).
const BYTES_PER_BUILT_CELL: u128 = 400;

/// `Err` when block `b`'s counts `n` ask for more points than a label
/// numbers or more memory than this machine has: refused before the points
/// are allocated.
fn check_block_size(b: usize, n: &[usize]) -> Result<(), String> {
    let cells: u128 = n.iter().map(|&c| c as u128).product();
    let points: u128 = n.iter().map(|&c| c as u128 + 1).product();
    if points > Label::MAX as u128 {
        return Err(format!(
            "block {b}: {} cells ({} points), more than the {} points a mesh can number; \
             use fewer cells",
            cells,
            points,
            Label::MAX
        ));
    }
    crate::limits::check_memory(cells * BYTES_PER_BUILT_CELL, || {
        format!("block {b}: {cells} cells")
    })
    .map(|_| ())
    .map_err(|m| format!("{m}; use fewer cells"))
}

fn read_blocks(
    file: &Path,
    value: &Value,
    n_vertices: usize,
) -> Result<(Vec<Block>, Vec<usize>), MeshError> {
    let items = list_items(file, value, "blocks")?;
    let mut blocks = Vec::new();
    let mut lines = Vec::new();
    let mut rest = items;
    while let [shape, tail @ ..] = rest {
        let b = blocks.len();
        match &shape.kind {
            ValueKind::Word(w) if w == "hex" => {}
            other => {
                return Err(parse_err(
                    file,
                    shape.line,
                    format!(
                        "block {b}: expected 'hex', found {} (only hexahedral blocks are \
                         supported)",
                        other.describe()
                    ),
                ))
            }
        }
        let missing =
            |what: &str| parse_err(file, shape.line, format!("block {b}: missing its {what}"));
        let [vertex_list, tail @ ..] = tail else {
            return Err(missing("vertices"));
        };
        let labels = label_list(file, vertex_list, 8, &format!("block {b} vertices"))?;
        if let Some(v) = labels.iter().find(|&&v| v >= n_vertices) {
            return Err(parse_err(
                file,
                vertex_list.line,
                format!("block {b} uses vertex {v} but there are {n_vertices} vertices"),
            ));
        }
        let mut tail = tail;
        if let [Value {
            kind: ValueKind::Word(zone),
            ..
        }, t @ ..] = tail
        {
            log::warn!(
                "{}:{}: block {b}: cell zone '{zone}' ignored (fvpoisson's meshes have no zones)",
                file.display(),
                shape.line
            );
            tail = t;
        }
        let [counts, t @ ..] = tail else {
            return Err(missing("cell counts (nx ny nz)"));
        };
        let n = label_list(file, counts, 3, &format!("block {b} cell counts"))?;
        if n.contains(&0) {
            return Err(parse_err(
                file,
                counts.line,
                format!("block {b}: every cell count must be at least 1"),
            ));
        }
        check_block_size(b, &n).map_err(|msg| parse_err(file, counts.line, msg))?;
        tail = t;
        let uniform = || {
            vec![Section {
                length_fraction: 1.0,
                division_fraction: 1.0,
                expansion: 1.0,
            }]
        };
        let mut grading: [Grading; 12] = std::array::from_fn(|_| uniform());
        if let [Value {
            kind: ValueKind::Word(kind),
            line,
        }, ratios, t @ ..] = tail
        {
            let per_edge = match kind.as_str() {
                "simpleGrading" => 3,
                "edgeGrading" => 12,
                other => {
                    return Err(parse_err(
                        file,
                        *line,
                        format!(
                            "block {b}: unknown grading '{other}' (expected simpleGrading or \
                             edgeGrading)"
                        ),
                    ))
                }
            };
            let items = uncounted(
                list_items(file, ratios, &format!("block {b} {kind}"))?,
                per_edge,
            );
            if items.len() != per_edge {
                return Err(parse_err(
                    file,
                    ratios.line,
                    format!(
                        "block {b}: {kind} needs {per_edge} entries, found {}",
                        items.len()
                    ),
                ));
            }
            let parsed: Vec<Grading> = items
                .iter()
                .map(|v| read_grading(file, v, b))
                .collect::<Result<_, _>>()?;
            for (e, g) in grading.iter_mut().enumerate() {
                *g = parsed[if per_edge == 3 { e / 4 } else { e }].clone();
            }
            tail = t;
        }
        blocks.push(Block {
            vertices: labels.try_into().unwrap(),
            cells: n.try_into().unwrap(),
            grading,
        });
        lines.push(shape.line);
        rest = tail;
    }
    if blocks.is_empty() {
        return Err(parse_err(file, value.line, "'blocks' lists no block"));
    }
    Ok((blocks, lines))
}

/// The grading entries as written. The dictionary parser reads `N (...)` as a
/// list of N items, so an integer expansion ratio followed by a multi-grading
/// entry of as many sections (`2 ((0.3 0.4 3) (0.7 0.6 0.5))`) arrives as one
/// counted list; when entries are missing, such lists get their ratio back.
fn uncounted(items: &[Value], expected: usize) -> Vec<Value> {
    let mut out = items.to_vec();
    let mut i = 0;
    while out.len() < expected && i < out.len() {
        let sections = match &out[i].kind {
            ValueKind::List(l) if l.iter().all(|s| matches!(s.kind, ValueKind::List(_))) => l.len(),
            _ => 0,
        };
        if sections > 0 {
            let line = out[i].line;
            out.insert(
                i,
                Value {
                    line,
                    kind: ValueKind::Int(sections as i64),
                },
            );
            i += 1;
        }
        i += 1;
    }
    out
}

/// One grading entry: an expansion ratio, or multi-grading sections.
fn read_grading(file: &Path, v: &Value, b: usize) -> Result<Grading, MeshError> {
    let bad = |msg: String| parse_err(file, v.line, format!("block {b}: {msg}"));
    let positive = |x: Option<f64>, what: &str| match x {
        Some(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(bad(format!("{what} must be a positive number"))),
    };
    if let Some(r) = v.number() {
        return Ok(vec![Section {
            length_fraction: 1.0,
            division_fraction: 1.0,
            expansion: positive(Some(r), "an expansion ratio")?,
        }]);
    }
    let ValueKind::List(sections) = &v.kind else {
        return Err(bad(format!(
            "expected an expansion ratio or a list of grading sections, found {}",
            v.kind.describe()
        )));
    };
    let mut out = Vec::new();
    for s in sections {
        let numbers: Vec<Option<f64>> = match &s.kind {
            ValueKind::List(l) => l.iter().map(Value::number).collect(),
            _ => vec![],
        };
        let section = match numbers.as_slice() {
            [length, expansion] => Section {
                length_fraction: positive(*length, "a block fraction")?,
                division_fraction: positive(*length, "a block fraction")?,
                expansion: positive(*expansion, "an expansion ratio")?,
            },
            [length, divisions, expansion] => Section {
                length_fraction: positive(*length, "a block fraction")?,
                division_fraction: positive(*divisions, "a division fraction")?,
                expansion: positive(*expansion, "an expansion ratio")?,
            },
            _ => {
                return Err(bad(
                    "a grading section is (blockFraction nDivFraction expansionRatio) or \
                     (blockFraction expansionRatio)"
                        .into(),
                ))
            }
        };
        out.push(section);
    }
    if out.is_empty() {
        return Err(bad("an empty list of grading sections".into()));
    }
    let lengths: f64 = out.iter().map(|s| s.length_fraction).sum();
    let divisions: f64 = out.iter().map(|s| s.division_fraction).sum();
    for s in &mut out {
        s.length_fraction /= lengths;
        s.division_fraction /= divisions;
    }
    Ok(out)
}

fn patch_faces(file: &Path, v: &Value, name: &str) -> Result<Vec<[usize; 4]>, MeshError> {
    list_items(file, v, &format!("patch '{name}' faces"))?
        .iter()
        .map(|f| {
            label_list(file, f, 4, &format!("patch '{name}' face"))
                .map(|l| [l[0], l[1], l[2], l[3]])
        })
        .collect()
}

fn patch_kind(file: &Path, line: usize, name: &str, kind: &str) -> Result<PatchKind, MeshError> {
    PatchKind::from_foam(kind)
        .map_err(|msg| parse_err(file, line, format!("patch '{name}': {msg}")))
}

/// `boundary ( name { type T; faces ( (a b c d) ... ); } ... )`.
fn read_boundary(file: &Path, v: &Value) -> Result<Vec<PatchSpec>, MeshError> {
    let items = list_items(file, v, "boundary")?;
    let mut out = Vec::new();
    let mut rest = items;
    while let [name, body, tail @ ..] = rest {
        let (ValueKind::Word(name), ValueKind::Dict(d)) = (&name.kind, &body.kind) else {
            return Err(parse_err(
                file,
                name.line,
                "boundary: expected a patch name followed by { type ...; faces (...); }",
            ));
        };
        let entry = |key: &str| {
            d.get(key).ok_or_else(|| {
                parse_err(
                    file,
                    body.line,
                    format!("patch '{name}' has no '{key}' entry"),
                )
            })
        };
        let kind_name = entry("type")?.single_text(file)?;
        let kind = patch_kind(file, body.line, name, &kind_name)?;
        let faces = match &entry("faces")?.value {
            EntryValue::Stream(values) if values.len() == 1 => patch_faces(file, &values[0], name)?,
            _ => {
                return Err(parse_err(
                    file,
                    body.line,
                    format!("patch '{name}': 'faces' must be one list ( (a b c d) ... )"),
                ))
            }
        };
        warn_other_patch_keys(file, name, d);
        let in_groups = match d.get("inGroups") {
            Some(e) => e.words(file)?,
            None => Vec::new(),
        };
        out.push(PatchSpec {
            name: name.clone(),
            kind,
            in_groups,
            faces,
            line: body.line,
        });
        rest = tail;
    }
    if let [extra] = rest {
        return Err(parse_err(
            file,
            extra.line,
            "boundary: a patch name without its { ... }",
        ));
    }
    Ok(out)
}

fn warn_other_patch_keys(file: &Path, name: &str, d: &Dict) {
    for e in &d.entries {
        if !matches!(e.key.as_str(), "type" | "faces" | "inGroups") {
            log::warn!(
                "{}:{}: patch '{name}': '{}' not used by fvpoisson's blockMesh, ignored",
                file.display(),
                e.line,
                e.key
            );
        }
    }
}

/// The old `patches ( type name ( (a b c d) ... ) ... )`.
fn read_old_patches(file: &Path, v: &Value) -> Result<Vec<PatchSpec>, MeshError> {
    let items = list_items(file, v, "patches")?;
    if !items.len().is_multiple_of(3) {
        return Err(parse_err(
            file,
            v.line,
            "patches: expected entries 'type name ( (a b c d) ... )'",
        ));
    }
    items
        .chunks_exact(3)
        .map(|chunk| {
            let (ValueKind::Word(kind), ValueKind::Word(name)) = (&chunk[0].kind, &chunk[1].kind)
            else {
                return Err(parse_err(
                    file,
                    chunk[0].line,
                    "patches: expected 'type name ( (a b c d) ... )'",
                ));
            };
            Ok(PatchSpec {
                name: name.clone(),
                kind: patch_kind(file, chunk[0].line, name, kind)?,
                in_groups: Vec::new(),
                faces: patch_faces(file, &chunk[2], name)?,
                line: chunk[0].line,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(length: f64, divisions: f64, expansion: f64) -> Section {
        Section {
            length_fraction: length,
            division_fraction: divisions,
            expansion,
        }
    }

    #[test]
    fn uniform_and_simple_graded_divisions() {
        let d = divisions(4, &[section(1.0, 1.0, 1.0)]);
        assert_eq!(d, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        // Last cell 4 times the first: widths r^0..r^2 with r = 2.
        let d = divisions(3, &[section(1.0, 1.0, 4.0)]);
        let widths: Vec<f64> = d.windows(2).map(|w| w[1] - w[0]).collect();
        assert!((widths[2] / widths[0] - 4.0).abs() < 1e-12, "{widths:?}");
        assert!((widths[1] / widths[0] - 2.0).abs() < 1e-12, "{widths:?}");
    }

    #[test]
    fn multi_grading_gives_each_section_its_share() {
        // 10 divisions: 4 in the first 30 %, 6 in the rest.
        let g = [section(0.3, 0.4, 3.0), section(0.7, 0.6, 0.5)];
        let d = divisions(10, &g);
        assert!((d[4] - 0.3).abs() < 1e-12, "{d:?}");
        assert_eq!(d[10], 1.0);
        assert!(d.windows(2).all(|w| w[1] > w[0]));
    }

    /// Two blocks apart from each other (graded, one of them a single
    /// cell thick in x) and a single block: the internal faces found from
    /// the block indices make the mesh that matching faces through their
    /// points makes.
    #[test]
    fn block_internal_faces_equal_matched_ones() {
        let two_blocks = "convertToMeters 0.1;
            vertices ( (0 0 0) (1 0 0) (1 1 0) (0 1 0) (0 0 1) (1 0 1) (1 1 1) (0 1 1)
                       (2 0 0) (3 0 0) (3 1 0) (2 1 0) (2 0 1) (3 0 1) (3 1 1) (2 1 1) );
            blocks ( hex (0 1 2 3 4 5 6 7) (5 4 3) simpleGrading (2 0.5 3)
                     hex (8 9 10 11 12 13 14 15) (1 3 2) simpleGrading (1 1 1) );
            boundary ( lid { type wall; faces ( (3 7 6 2) (11 15 14 10) ); } );";
        let one_block =
            "vertices ( (0 0 0) (1 0 0) (1 1 0) (0 1 0) (0 0 1) (1 0 1) (1 1 1) (0 1 1) );
            blocks ( hex (0 1 2 3 4 5 6 7) (6 1 4) simpleGrading (1 1 1) );
            boundary ( walls { type wall; faces ( (0 4 7 3) (1 2 6 5) ); } );";
        let dir = crate::test_support::unique_temp_dir("fvpoisson_block_faces");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [("two_blocks", two_blocks), ("one_block", one_block)] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let description = Description::read(&FoamDict::read(&path).unwrap()).unwrap();
            let by_blocks = description.mesh_with(false).unwrap();
            let matched = description.mesh_with(true).unwrap();
            assert!(by_blocks.n_internal_faces() > 0, "{name}");
            assert_eq!(by_blocks, matched, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Counts no machine could hold, or no label could number, are refused
    /// at their line before any point is allocated.
    #[test]
    fn absurd_cell_counts_are_refused_at_their_line() {
        let dir = crate::test_support::unique_temp_dir("fvpoisson_block_sizes");
        std::fs::create_dir_all(&dir).unwrap();
        for (counts, expected) in [
            ("(1600 1600 1600)", "of memory"),
            ("(100000 100000 100000)", "points a mesh can number"),
            ("(4294967296 4294967296 1)", "points a mesh can number"),
        ] {
            let path = dir.join("blockMeshDict");
            let text = format!(
                "vertices ( (0 0 0) (1 0 0) (1 1 0) (0 1 0) (0 0 1) (1 0 1) (1 1 1) (0 1 1) );\n\
                 blocks\n(\n    hex (0 1 2 3 4 5 6 7) {counts} simpleGrading (1 1 1)\n);\n\
                 boundary ( );"
            );
            std::fs::write(&path, text).unwrap();
            let e = read_block_mesh_dict(&path).unwrap_err().to_string();
            assert!(
                e.contains(expected) && e.contains("blockMeshDict") && e.contains(":4"),
                "{counts}: {e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn edge_index_follows_blockmesh() {
        assert_eq!(edge_index(0, 1, 0), 1);
        assert_eq!(edge_index(1, 1, 1), 6);
        assert_eq!(edge_index(2, 0, 1), 11);
    }
}
