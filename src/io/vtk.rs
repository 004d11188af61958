//! VTK XML output for ParaView ("VTK File Formats", VTK User's Guide, XML
//! formats; cell point orders from VTK's vtkTetra, vtkPyramid, vtkWedge and
//! vtkHexahedron documentation).
//!
//! [`VtkSeries::write_step`] writes, for step `k` of series `NAME` in `DIR`:
//!
//! ```text
//! DIR/NAME.pvd                        every step written so far: open this in ParaView
//! DIR/NAME_00000k.vtm                 multiblock: "internal" + block "boundary" (one per patch)
//! DIR/NAME_00000k/internal.vtu        cells with their real shapes, cell fields
//! DIR/NAME_00000k/boundary/PATCH.vtp  faces of one patch, boundary face fields
//! ```
//!
//! This is the layout of OpenFOAM's `foamToVTK`: ParaView shows the steps on
//! its time slider and one block per patch (Multiblock Inspector to toggle).
//!
//! A distributed run's series ([`VtkSeries::distributed`]) writes the cells
//! as pieces: rank K writes its cells (and the points they use) to
//! `DIR/NAME_00000k/processorK.vtu`, and rank 0 writes
//! `DIR/NAME_00000k/internal.pvtu` listing every piece (the `.vtm`'s
//! "internal" block), the boundary `.vtp` files, the `.vtm` and the `.pvd`.
//!
//! Data are raw binary appended (`header_type="UInt64"`, little endian), points
//! and fields as Float64 so that error norms computed from the files are exact.
//! The XML is written here rather than with the `vtkio` crate because vtkio
//! 0.7's XML cells have only connectivity, offsets and types: no `faces` and
//! `faceoffsets` arrays, so no VTK_POLYHEDRON cells.

use super::{create_dir_all, write_atomic, OutputError};
use crate::mesh::{CellShape, Label, Mesh, Patch, Vec3};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

pub const VTK_TETRA: u8 = 10;
pub const VTK_HEXAHEDRON: u8 = 12;
pub const VTK_WEDGE: u8 = 13;
pub const VTK_PYRAMID: u8 = 14;
pub const VTK_POLYHEDRON: u8 = 42;

/// Faces of VTK's linear cells in its local point numbers.
const TETRA_FACES: &[&[usize]] = &[&[0, 1, 2], &[0, 1, 3], &[1, 2, 3], &[0, 2, 3]];
const PYRAMID_FACES: &[&[usize]] = &[
    &[0, 1, 2, 3],
    &[0, 1, 4],
    &[1, 2, 4],
    &[2, 3, 4],
    &[3, 0, 4],
];
const WEDGE_FACES: &[&[usize]] = &[
    &[0, 1, 2],
    &[3, 4, 5],
    &[0, 1, 4, 3],
    &[1, 2, 5, 4],
    &[2, 0, 3, 5],
];
const HEXAHEDRON_FACES: &[&[usize]] = &[
    &[0, 1, 2, 3],
    &[4, 5, 6, 7],
    &[0, 1, 5, 4],
    &[1, 2, 6, 5],
    &[2, 3, 7, 6],
    &[3, 0, 4, 7],
];

/// Values of a field, one per cell or per face.
#[derive(Clone, Copy, Debug)]
pub enum FieldValues<'a> {
    Scalar(&'a [f64]),
    Vector(&'a [Vec3]),
}

/// A named field to write (`p`, `grad(p)`, `residual`, ...).
#[derive(Clone, Copy, Debug)]
pub struct Field<'a> {
    pub name: &'a str,
    pub values: FieldValues<'a>,
}

impl<'a> Field<'a> {
    pub fn scalar(name: &'a str, values: &'a [f64]) -> Self {
        Self {
            name,
            values: FieldValues::Scalar(values),
        }
    }

    pub fn vector(name: &'a str, values: &'a [Vec3]) -> Self {
        Self {
            name,
            values: FieldValues::Vector(values),
        }
    }

    pub fn len(&self) -> usize {
        match self.values {
            FieldValues::Scalar(v) => v.len(),
            FieldValues::Vector(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same field restricted to `range` (a patch's faces); `range` must lie in the field.
    fn slice(&self, range: Range<usize>) -> Self {
        let values = match self.values {
            FieldValues::Scalar(v) => FieldValues::Scalar(&v[range]),
            FieldValues::Vector(v) => FieldValues::Vector(&v[range]),
        };
        Self { values, ..*self }
    }
}

/// Writes `mesh` with cell fields (one value per cell each) as one `.vtu` file.
pub fn write_vtu(path: &Path, mesh: &Mesh, cell_fields: &[Field]) -> Result<(), OutputError> {
    check_fields(cell_fields, mesh.n_cells(), "cells", path)?;
    write_unstructured(path, mesh, &VtkCells::new(mesh), None, cell_fields)
}

/// One rank's cells of a distributed run's series.
#[derive(Debug)]
struct Piece {
    rank: usize,
    n_ranks: usize,
    /// The rank's cells (global, ascending).
    cells: Vec<Label>,
    vtk: VtkCells,
    /// The mesh points the cells use; `vtk` numbers them 0..len.
    points: Vec<Label>,
}

/// A cell field's values at some cells.
enum Restricted {
    Scalar(Vec<f64>),
    Vector(Vec<Vec3>),
}

impl Restricted {
    fn of(field: &Field, cells: &[Label]) -> Self {
        match field.values {
            FieldValues::Scalar(v) => Self::Scalar(cells.iter().map(|&c| v[c as usize]).collect()),
            FieldValues::Vector(v) => Self::Vector(cells.iter().map(|&c| v[c as usize]).collect()),
        }
    }

    fn field<'a>(&'a self, name: &'a str) -> Field<'a> {
        match self {
            Self::Scalar(v) => Field::scalar(name, v),
            Self::Vector(v) => Field::vector(name, v),
        }
    }
}

/// A time series of a mesh's cell and boundary fields: one `.vtm` per step,
/// all listed in `NAME.pvd` (layout in the module documentation).
#[derive(Debug)]
pub struct VtkSeries<'m> {
    mesh: &'m Mesh,
    cells: VtkCells,
    /// File stem and faces of every patch, in patch order.
    patches: Vec<(String, PatchPolygons)>,
    dir: PathBuf,
    name: String,
    /// Time and `.vtm` file (relative to `dir`) of every step written.
    steps: Vec<(f64, String)>,
    /// A rank's part of a distributed run (`None`: the whole mesh).
    piece: Option<Piece>,
}

impl<'m> VtkSeries<'m> {
    /// Prepares the series `dir/name.pvd`, creating `dir`. Nothing else is
    /// written until the first step; files of an earlier series of the same
    /// name are overwritten step by step.
    pub fn new(mesh: &'m Mesh, dir: impl Into<PathBuf>, name: &str) -> Result<Self, OutputError> {
        if name.is_empty() || name.starts_with('.') || file_stem(name) != name {
            return Err(OutputError::invalid(format!(
                "VTK series name '{name}' must be a plain file name \
                 (letters, digits, '_', '-', '.'; not starting with '.')"
            )));
        }
        let dir = dir.into();
        create_dir_all(&dir)?;
        let mut stems: Vec<String> = Vec::new();
        for (i, patch) in mesh.patches().iter().enumerate() {
            let mut stem = file_stem(&patch.name);
            while stem.is_empty() || stems.contains(&stem) {
                stem = format!("{stem}_{i}");
            }
            stems.push(stem);
        }
        let patches = stems
            .into_iter()
            .zip(mesh.patches())
            .map(|(stem, patch)| (stem, PatchPolygons::new(mesh, patch)))
            .collect();
        Ok(Self {
            mesh,
            cells: VtkCells::new(mesh),
            patches,
            dir,
            name: name.to_string(),
            steps: Vec::new(),
            piece: None,
        })
    }

    /// Rank `rank` of `n_ranks`' part of the series of a distributed run
    /// (module documentation): the rank writes `cells` (its global cells,
    /// ascending) as `processor{rank}.vtu`; rank 0 also the `.pvtu` of all
    /// pieces, the boundary, the `.vtm` and the `.pvd`. Every rank passes the
    /// whole mesh's fields to [`VtkSeries::write_step`].
    pub fn distributed(
        mesh: &'m Mesh,
        dir: impl Into<PathBuf>,
        name: &str,
        rank: usize,
        n_ranks: usize,
        cells: Vec<Label>,
    ) -> Result<Self, OutputError> {
        if rank >= n_ranks || cells.iter().any(|&c| c as usize >= mesh.n_cells()) {
            return Err(OutputError::invalid(format!(
                "VTK piece of rank {rank} of {n_ranks}: a rank or cell out of range"
            )));
        }
        let mut series = Self::new(mesh, dir, name)?;
        let (vtk, points) = series.cells.subset(&cells);
        series.piece = Some(Piece {
            rank,
            n_ranks,
            cells,
            vtk,
            points,
        });
        Ok(series)
    }

    /// The collection file listing the steps.
    pub fn pvd_path(&self) -> PathBuf {
        self.dir.join(format!("{}.pvd", self.name))
    }

    /// Writes one step at `time` (a time or an outer iteration; it must increase
    /// from step to step) and rewrites the `.pvd`. `cell_fields` have one value
    /// per cell; `boundary_fields` one per boundary face, indexed by
    /// `face - n_internal_faces` like `Geometry::boundary_face_centres`.
    /// Returns the step's `.vtm` path.
    pub fn write_step(
        &mut self,
        time: f64,
        cell_fields: &[Field],
        boundary_fields: &[Field],
    ) -> Result<PathBuf, OutputError> {
        let mesh = self.mesh;
        let stem = format!("{}_{:06}", self.name, self.steps.len());
        let vtm = self.dir.join(format!("{stem}.vtm"));
        if !time.is_finite() {
            return Err(OutputError::invalid(format!(
                "{}: time {time} is not a finite number",
                vtm.display()
            )));
        }
        if let Some(&(last, _)) = self.steps.last().filter(|(last, _)| time <= *last) {
            return Err(OutputError::invalid(format!(
                "{}: time {time} does not follow the previous step's time {last}; \
                 steps of a series need increasing times",
                vtm.display()
            )));
        }
        let n_internal = mesh.n_internal_faces();
        check_fields(cell_fields, mesh.n_cells(), "cells", &vtm)?;
        check_fields(
            boundary_fields,
            mesh.n_faces() - n_internal,
            "boundary faces",
            &vtm,
        )?;

        let internal = match &self.piece {
            None => {
                let internal = format!("{stem}/internal.vtu");
                let path = self.dir.join(&internal);
                create_dir_all(&self.dir.join(&stem))?;
                write_unstructured(&path, mesh, &self.cells, None, cell_fields)?;
                internal
            }
            Some(piece) => {
                create_dir_all(&self.dir.join(&stem))?;
                let restricted: Vec<Restricted> = cell_fields
                    .iter()
                    .map(|f| Restricted::of(f, &piece.cells))
                    .collect();
                let fields: Vec<Field> = cell_fields
                    .iter()
                    .zip(&restricted)
                    .map(|(f, r)| r.field(f.name))
                    .collect();
                let path = self.dir.join(format!("{stem}/processor{}.vtu", piece.rank));
                write_unstructured(&path, mesh, &piece.vtk, Some(&piece.points), &fields)?;
                if piece.rank != 0 {
                    // Rank 0 writes the rest.
                    self.steps.push((time, format!("{stem}.vtm")));
                    return Ok(vtm);
                }
                let internal = format!("{stem}/internal.pvtu");
                write_text(&self.dir.join(&internal), &pvtu(piece.n_ranks, cell_fields))?;
                internal
            }
        };
        let boundary_dir = self.dir.join(&stem).join("boundary");
        create_dir_all(&boundary_dir)?;
        let mut blocks = format!(
            "<vtkMultiBlockDataSet>\n<DataSet index=\"0\" name=\"internal\" file=\"{internal}\"/>\n\
             <Block index=\"1\" name=\"boundary\">\n"
        );
        for (i, ((file_stem, polygons), patch)) in
            self.patches.iter().zip(mesh.patches()).enumerate()
        {
            let faces = patch.boundary_faces(n_internal);
            let fields: Vec<Field> = boundary_fields
                .iter()
                .map(|f| f.slice(faces.clone()))
                .collect();
            let file = format!("{stem}/boundary/{file_stem}.vtp");
            write_polygons(&self.dir.join(&file), mesh, polygons, &fields)?;
            blocks += &format!(
                "<DataSet index=\"{i}\" name=\"{}\" file=\"{file}\"/>\n",
                escape(&patch.name)
            );
        }
        blocks += "</Block>\n</vtkMultiBlockDataSet>\n</VTKFile>\n";
        write_text(&vtm, &(vtk_file_header("vtkMultiBlockDataSet") + &blocks))?;

        self.steps.push((time, format!("{stem}.vtm")));
        let mut pvd = vtk_file_header("Collection") + "<Collection>\n";
        for (t, file) in &self.steps {
            // `{:?}` prints the shortest string that reads back to the same f64.
            pvd += &format!("<DataSet timestep=\"{t:?}\" part=\"0\" file=\"{file}\"/>\n");
        }
        pvd += "</Collection>\n</VTKFile>\n";
        write_text(&self.pvd_path(), &pvd)?;
        Ok(vtm)
    }
}

/// Cells in VTK form: linear cells with VTK's point order, the rest as
/// VTK_POLYHEDRON with their faces. Computed once per mesh.
#[derive(Clone, Debug, PartialEq)]
struct VtkCells {
    types: Vec<u8>,
    /// Cell `c` has the points `connectivity[offsets[c]..offsets[c + 1]]`.
    connectivity: Vec<Label>,
    offsets: Vec<i64>,
    /// Face streams of the polyhedra: `n_faces, (n_points, points...)*` each.
    faces: Vec<Label>,
    /// End of each cell's stream in `faces`, -1 for linear cells; both empty
    /// when there is no polyhedron (VTK's `faceoffsets` convention).
    face_offsets: Vec<i64>,
}

impl VtkCells {
    fn new(mesh: &Mesh) -> Self {
        let (cell_offsets, cell_faces) = mesh.cell_faces();
        let mut cells = Self {
            types: Vec::with_capacity(mesh.n_cells()),
            connectivity: Vec::new(),
            offsets: vec![0],
            faces: Vec::new(),
            face_offsets: Vec::with_capacity(mesh.n_cells()),
        };
        let mut faces = OutwardFaces::default();
        let mut order = Vec::new();
        for c in 0..mesh.n_cells() {
            faces.gather(
                mesh,
                c,
                &cell_faces[cell_offsets[c] as usize..cell_offsets[c + 1] as usize],
            );
            let cell_type = linear_cell(&faces, &mut order);
            if let Some(cell_type) = cell_type {
                cells.types.push(cell_type);
                cells.connectivity.extend_from_slice(&order);
                cells.face_offsets.push(-1);
            } else {
                cells.types.push(VTK_POLYHEDRON);
                order.clear();
                order.extend_from_slice(&faces.points);
                order.sort_unstable();
                order.dedup();
                cells.connectivity.extend_from_slice(&order);
                cells.faces.push(faces.len() as Label);
                for face in faces.iter() {
                    cells.faces.push(face.len() as Label);
                    cells.faces.extend_from_slice(face);
                }
                cells.face_offsets.push(cells.faces.len() as i64);
            }
            cells.offsets.push(cells.connectivity.len() as i64);
        }
        if cells.faces.is_empty() {
            cells.face_offsets.clear();
        }
        cells
    }
}

impl VtkCells {
    /// The cells `cells` (ascending) with their points numbered as in the
    /// returned list of the mesh points they use (ascending).
    fn subset(&self, cells: &[Label]) -> (Self, Vec<Label>) {
        let range = |c: usize| self.offsets[c] as usize..self.offsets[c + 1] as usize;
        let mut points: Vec<Label> = cells
            .iter()
            .flat_map(|&c| self.connectivity[range(c as usize)].iter().copied())
            .collect();
        points.sort_unstable();
        points.dedup();
        let local = |p: Label| match points.binary_search(&p) {
            Ok(i) => i as Label,
            Err(_) => unreachable!("every point of the cells is in the list"),
        };
        // Where each polyhedron's face stream starts.
        let mut stream_start = vec![0usize; self.face_offsets.len()];
        let mut end = 0usize;
        for (start, &offset) in stream_start.iter_mut().zip(&self.face_offsets) {
            *start = end;
            if offset >= 0 {
                end = offset as usize;
            }
        }
        let mut sub = Self {
            types: Vec::with_capacity(cells.len()),
            connectivity: Vec::new(),
            offsets: vec![0],
            faces: Vec::new(),
            face_offsets: Vec::new(),
        };
        for &c in cells {
            let c = c as usize;
            sub.types.push(self.types[c]);
            sub.connectivity
                .extend(self.connectivity[range(c)].iter().map(|&p| local(p)));
            sub.offsets.push(sub.connectivity.len() as i64);
            match self.face_offsets.get(c) {
                None => {}
                Some(&offset) if offset < 0 => sub.face_offsets.push(-1),
                Some(&offset) => {
                    // n_faces, then (n_points, points...) per face.
                    let stream = &self.faces[stream_start[c]..offset as usize];
                    sub.faces.push(stream[0]);
                    let mut at = 1;
                    while at < stream.len() {
                        let n = stream[at] as usize;
                        sub.faces.push(stream[at]);
                        sub.faces
                            .extend(stream[at + 1..at + 1 + n].iter().map(|&p| local(p)));
                        at += 1 + n;
                    }
                    sub.face_offsets.push(sub.faces.len() as i64);
                }
            }
        }
        if sub.faces.is_empty() {
            sub.face_offsets.clear();
        }
        (sub, points)
    }
}

/// One cell's faces, each oriented out of the cell (polyMesh faces point out
/// of their owner, so the neighbour's are reversed).
#[derive(Default)]
struct OutwardFaces {
    offsets: Vec<usize>,
    points: Vec<Label>,
}

impl OutwardFaces {
    fn gather(&mut self, mesh: &Mesh, cell: usize, faces: &[Label]) {
        self.offsets.clear();
        self.points.clear();
        self.offsets.push(0);
        for &f in faces {
            let face = mesh.faces().face(f as usize);
            if mesh.owner()[f as usize] as usize == cell {
                self.points.extend_from_slice(face);
            } else {
                self.points.extend(face.iter().rev());
            }
            self.offsets.push(self.points.len());
        }
    }

    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    fn face(&self, i: usize) -> &[Label] {
        &self.points[self.offsets[i]..self.offsets[i + 1]]
    }

    fn iter(&self) -> impl Iterator<Item = &[Label]> + '_ {
        (0..self.len()).map(|i| self.face(i))
    }
}

/// Puts the points of a tetrahedron, pyramid, prism or hexahedron in VTK's
/// order with positive volume and returns its VTK type; `None` for any other
/// cell, or one whose faces do not connect like that shape's.
fn linear_cell(faces: &OutwardFaces, order: &mut Vec<Label>) -> Option<u8> {
    order.clear();
    let with_size = |n: usize| faces.iter().find(|f| f.len() == n);
    let (cell_type, vtk_faces) = match CellShape::from_face_sizes(faces.iter().map(<[_]>::len)) {
        CellShape::Tetrahedron => {
            // VTK: the normal of (0, 1, 2) points to 3, so the base is an outward face reversed.
            let base = faces.face(0);
            order.extend([base[0], base[2], base[1]]);
            order.push(point_off(faces, base)?);
            (VTK_TETRA, TETRA_FACES)
        }
        CellShape::Pyramid => {
            // VTK: the normal of (0, 1, 2, 3) points to the apex 4.
            let base = with_size(4)?;
            order.extend([base[0], base[3], base[2], base[1]]);
            order.push(point_off(faces, base)?);
            (VTK_PYRAMID, PYRAMID_FACES)
        }
        CellShape::Prism => {
            // VTK: the normal of (0, 1, 2) points away from (3, 4, 5): an outward triangle as it is.
            // (vtkCellValidator accepts this order; VTK 9.2's MeshQuality wedge volume, which
            // follows Verdict's opposite convention, reports it negative.)
            let base = with_size(3)?;
            order.extend_from_slice(base);
            for &p in base {
                order.push(across_edge(faces, base, p)?);
            }
            (VTK_WEDGE, WEDGE_FACES)
        }
        CellShape::Hexahedron => {
            // VTK: the normal of (0, 1, 2, 3) points to (4, 5, 6, 7), point 4 above 0 and so on.
            let base = faces.face(0);
            order.extend([base[0], base[3], base[2], base[1]]);
            for i in 0..4 {
                order.push(across_edge(faces, base, order[i])?);
            }
            (VTK_HEXAHEDRON, HEXAHEDRON_FACES)
        }
        CellShape::Polyhedron => return None,
    };
    matches_faces(faces, order, vtk_faces).then_some(cell_type)
}

/// A point of the cell that is not on `base`.
fn point_off(faces: &OutwardFaces, base: &[Label]) -> Option<Label> {
    faces.points.iter().copied().find(|p| !base.contains(p))
}

/// The point joined to `p` by an edge that leaves `base`.
fn across_edge(faces: &OutwardFaces, base: &[Label], p: Label) -> Option<Label> {
    faces.iter().find_map(|face| {
        let n = face.len();
        let i = face.iter().position(|&q| q == p)?;
        [face[(i + 1) % n], face[(i + n - 1) % n]]
            .into_iter()
            .find(|q| !base.contains(q))
    })
}

/// Whether the cell's faces are exactly VTK's faces of `order` (as point sets):
/// then `order` is the cell, not just a guess from face sizes.
fn matches_faces(faces: &OutwardFaces, order: &[Label], vtk_faces: &[&[usize]]) -> bool {
    let distinct = order
        .iter()
        .enumerate()
        .all(|(i, p)| !order[..i].contains(p));
    distinct
        && faces.len() == vtk_faces.len()
        && vtk_faces.iter().all(|vtk_face| {
            faces.iter().any(|face| {
                face.len() == vtk_face.len() && vtk_face.iter().all(|&i| face.contains(&order[i]))
            })
        })
}

/// A patch as polygons over its own compact list of points.
#[derive(Debug)]
struct PatchPolygons {
    /// Mesh points used by the patch, sorted.
    points: Vec<Label>,
    /// Polygon points as positions in `points`.
    connectivity: Vec<Label>,
    offsets: Vec<i64>,
}

impl PatchPolygons {
    fn new(mesh: &Mesh, patch: &Patch) -> Self {
        let faces = || patch.faces().map(|f| mesh.faces().face(f));
        let mut points: Vec<Label> = faces().flatten().copied().collect();
        points.sort_unstable();
        points.dedup();
        let mut connectivity = Vec::new();
        let mut offsets = vec![0];
        for face in faces() {
            connectivity.extend(
                face.iter()
                    .map(|&p| points.partition_point(|&q| q < p) as Label),
            );
            offsets.push(connectivity.len() as i64);
        }
        Self {
            points,
            connectivity,
            offsets,
        }
    }
}

/// The cells `cells` of `mesh` (all of them, or a piece using only the
/// mesh points `points`) with their fields.
fn write_unstructured<'a>(
    path: &Path,
    mesh: &'a Mesh,
    cells: &'a VtkCells,
    points: Option<&'a [Label]>,
    cell_fields: &[Field<'a>],
) -> Result<(), OutputError> {
    let mut file = AppendedFile::new("UnstructuredGrid");
    file.xml += &format!(
        "<UnstructuredGrid>\n<Piece NumberOfPoints=\"{}\" NumberOfCells=\"{}\">\n",
        points.map_or(mesh.n_points(), <[_]>::len),
        cells.types.len()
    );
    file.points(mesh.points(), points);
    file.xml += "<Cells>\n";
    file.array("connectivity", 1, as_i64(&cells.connectivity));
    file.array("offsets", 1, cells.offsets[1..].iter().copied());
    file.array("types", 1, cells.types.iter().copied());
    if !cells.faces.is_empty() {
        file.array("faces", 1, as_i64(&cells.faces));
        file.array("faceoffsets", 1, cells.face_offsets.iter().copied());
    }
    file.xml += "</Cells>\n";
    file.cell_data(cell_fields);
    file.xml += "</Piece>\n</UnstructuredGrid>\n";
    file.write(path)
}

/// The `.pvtu` of `n_ranks` pieces `processorK.vtu` (in its directory) with
/// the cell fields `fields`.
fn pvtu(n_ranks: usize, fields: &[Field]) -> String {
    let mut xml = vtk_file_header("PUnstructuredGrid")
        + "<PUnstructuredGrid GhostLevel=\"0\">\n<PPoints>\n\
           <PDataArray type=\"Float64\" Name=\"Points\" NumberOfComponents=\"3\"/>\n\
           </PPoints>\n<PCellData>\n";
    for f in fields {
        let components = match f.values {
            FieldValues::Scalar(_) => 1,
            FieldValues::Vector(_) => 3,
        };
        xml += &format!(
            "<PDataArray type=\"Float64\" Name=\"{}\" NumberOfComponents=\"{components}\"/>\n",
            escape(f.name)
        );
    }
    xml += "</PCellData>\n";
    for rank in 0..n_ranks {
        xml += &format!("<Piece Source=\"processor{rank}.vtu\"/>\n");
    }
    xml + "</PUnstructuredGrid>\n</VTKFile>\n"
}

fn write_polygons<'a>(
    path: &Path,
    mesh: &'a Mesh,
    polygons: &'a PatchPolygons,
    face_fields: &[Field<'a>],
) -> Result<(), OutputError> {
    let mut file = AppendedFile::new("PolyData");
    file.xml += &format!(
        "<PolyData>\n<Piece NumberOfPoints=\"{}\" NumberOfVerts=\"0\" NumberOfLines=\"0\" \
         NumberOfStrips=\"0\" NumberOfPolys=\"{}\">\n",
        polygons.points.len(),
        polygons.offsets.len() - 1
    );
    file.points(mesh.points(), Some(&polygons.points));
    file.xml += "<Polys>\n";
    file.array("connectivity", 1, as_i64(&polygons.connectivity));
    file.array("offsets", 1, polygons.offsets[1..].iter().copied());
    file.xml += "</Polys>\n";
    file.cell_data(face_fields);
    file.xml += "</Piece>\n</PolyData>\n";
    file.write(path)
}

fn as_i64(labels: &[Label]) -> impl ExactSizeIterator<Item = i64> + '_ {
    labels.iter().map(|&p| i64::from(p))
}

/// The x, y, z of `points[i]` for each `i` in `ids`, or of all `points`.
fn coordinates<'a>(
    points: &'a [Vec3],
    ids: Option<&'a [Label]>,
) -> impl ExactSizeIterator<Item = f64> + 'a {
    let n = ids.map_or(points.len(), <[_]>::len);
    (0..3 * n).map(move |i| {
        let p = ids.map_or(i / 3, |ids| ids[i / 3] as usize);
        points[p][i % 3]
    })
}

/// Number types of VTK data arrays.
trait VtkNumber: Copy {
    const TYPE: &'static str;
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
}

impl VtkNumber for f64 {
    const TYPE: &'static str = "Float64";
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl VtkNumber for i64 {
    const TYPE: &'static str = "Int64";
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl VtkNumber for u8 {
    const TYPE: &'static str = "UInt8";
    const SIZE: usize = 1;
    fn put(self, out: &mut Vec<u8>) {
        out.push(self);
    }
}

/// Bytes encoded at a time while streaming an array to its file.
const CHUNK_BYTES: usize = 1 << 16;

/// Streams one data array's block (byte count, then the bytes) to a file.
type Block<'a> = Box<dyn FnOnce(&mut dyn Write) -> std::io::Result<()> + 'a>;

/// A VTK XML file being assembled: its XML, and the raw appended data that the
/// data arrays point into (each block a UInt64 byte count, then the bytes).
/// The data are encoded while the file is written, not held in memory: a
/// 10M-cell mesh's connectivity alone is 640 MB as Int64.
struct AppendedFile<'a> {
    xml: String,
    blocks: Vec<Block<'a>>,
    appended_bytes: u64,
}

impl<'a> AppendedFile<'a> {
    fn new(kind: &str) -> Self {
        Self {
            xml: vtk_file_header(kind),
            blocks: Vec::new(),
            appended_bytes: 0,
        }
    }

    fn array<T: VtkNumber>(
        &mut self,
        name: &str,
        components: usize,
        values: impl ExactSizeIterator<Item = T> + 'a,
    ) {
        self.xml += &format!(
            "<DataArray type=\"{}\" Name=\"{}\" NumberOfComponents=\"{components}\" \
             format=\"appended\" offset=\"{}\"/>\n",
            T::TYPE,
            escape(name),
            self.appended_bytes
        );
        let n_bytes = (values.len() * T::SIZE) as u64;
        self.appended_bytes += 8 + n_bytes;
        self.blocks.push(Box::new(move |out: &mut dyn Write| {
            let mut chunk = Vec::with_capacity(CHUNK_BYTES + 8);
            chunk.extend_from_slice(&n_bytes.to_le_bytes());
            for v in values {
                v.put(&mut chunk);
                if chunk.len() >= CHUNK_BYTES {
                    out.write_all(&chunk)?;
                    chunk.clear();
                }
            }
            out.write_all(&chunk)
        }));
    }

    /// The mesh points, or those listed in `ids`.
    fn points(&mut self, points: &'a [Vec3], ids: Option<&'a [Label]>) {
        self.xml += "<Points>\n";
        self.array("Points", 3, coordinates(points, ids));
        self.xml += "</Points>\n";
    }

    fn cell_data(&mut self, fields: &[Field<'a>]) {
        self.xml += "<CellData>\n";
        for field in fields {
            match field.values {
                FieldValues::Scalar(v) => self.array(field.name, 1, v.iter().copied()),
                FieldValues::Vector(v) => self.array(field.name, 3, coordinates(v, None)),
            }
        }
        self.xml += "</CellData>\n";
    }

    fn write(self, path: &Path) -> Result<(), OutputError> {
        write_atomic(path, |out| {
            out.write_all(self.xml.as_bytes())?;
            out.write_all(b"<AppendedData encoding=\"raw\">\n_")?;
            for block in self.blocks {
                block(&mut *out)?;
            }
            out.write_all(b"\n</AppendedData>\n</VTKFile>\n")
        })
    }
}

fn vtk_file_header(kind: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"{kind}\" version=\"1.0\" \
         byte_order=\"LittleEndian\" header_type=\"UInt64\">\n"
    )
}

fn write_text(path: &Path, text: &str) -> Result<(), OutputError> {
    write_atomic(path, |out| out.write_all(text.as_bytes()))
}

/// Refuses fields of the wrong length, without a name, or sharing a name.
fn check_fields(
    fields: &[Field],
    expected: usize,
    what: &str,
    file: &Path,
) -> Result<(), OutputError> {
    for (i, field) in fields.iter().enumerate() {
        let problem = if field.name.is_empty() {
            format!("field {i} has no name")
        } else if field.len() != expected {
            format!(
                "field '{}' has {} values but there are {expected} {what}",
                field.name,
                field.len()
            )
        } else if fields[..i].iter().any(|f| f.name == field.name) {
            format!("two fields are named '{}'", field.name)
        } else {
            continue;
        };
        return Err(OutputError::invalid(format!(
            "{}: {problem}",
            file.display()
        )));
    }
    Ok(())
}

/// `name` with every character other than ASCII letters, digits, '_', '-'
/// and '.' replaced by '_', safe as a file name on any system.
fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `text` escaped for an XML attribute value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&apos;",
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::geometry::face_centre_and_area;
    use crate::mesh::{mesh_from_unordered_faces, FaceList, FaceSide, PatchKind};
    use std::collections::HashMap;
    use std::fs;

    /// `face` ordered so that its normal points away from `inside`.
    fn facing_away(points: &[Vec3], face: &[Label], inside: Vec3) -> Vec<Label> {
        let (centre, area) = face_centre_and_area(points, face);
        let mut face = face.to_vec();
        if area.dot(&(centre - inside)) < 0.0 {
            face.reverse();
        }
        face
    }

    /// Five convex cells sharing faces: 0 unit-cube hexahedron, 1 pyramid on its
    /// top, 2 polyhedron (the cube at x < 0 with its x = -1 side split into four
    /// triangles), 3 prism on the x = 1 side, 4 tetrahedron on the prism's y = 0
    /// triangle. Patch "floor" has the faces on z = 0, "walls" the others.
    fn mixed_mesh() -> Mesh {
        let points: Vec<Vec3> = [
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [1.0, 1.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
            [1.0, 0.0, 1.0],
            [1.0, 1.0, 1.0],
            [0.0, 1.0, 1.0],
            [0.5, 0.5, 1.6],
            [-1.0, 0.0, 0.0],
            [-1.0, 1.0, 0.0],
            [-1.0, 1.0, 1.0],
            [-1.0, 0.0, 1.0],
            [-1.0, 0.5, 0.5],
            [1.7, 0.0, 0.5],
            [1.7, 1.0, 0.5],
            [1.3, -0.8, 0.5],
        ]
        .iter()
        .map(|p| Vec3::from(*p))
        .collect();
        let (floor, walls, cell) = (FaceSide::Patch(0), FaceSide::Patch(1), FaceSide::Cell);
        let spec: Vec<(&[Label], Label, FaceSide)> = vec![
            (&[0, 1, 2, 3], 0, floor),
            (&[4, 5, 6, 7], 0, cell(1)),
            (&[0, 1, 5, 4], 0, walls),
            (&[3, 2, 6, 7], 0, walls),
            (&[0, 3, 7, 4], 0, cell(2)),
            (&[1, 2, 6, 5], 0, cell(3)),
            (&[4, 5, 8], 1, walls),
            (&[5, 6, 8], 1, walls),
            (&[6, 7, 8], 1, walls),
            (&[7, 4, 8], 1, walls),
            (&[0, 3, 10, 9], 2, floor),
            (&[4, 7, 11, 12], 2, walls),
            (&[0, 4, 12, 9], 2, walls),
            (&[3, 7, 11, 10], 2, walls),
            (&[9, 10, 13], 2, walls),
            (&[10, 11, 13], 2, walls),
            (&[11, 12, 13], 2, walls),
            (&[12, 9, 13], 2, walls),
            (&[1, 5, 14], 3, cell(4)),
            (&[2, 6, 15], 3, walls),
            (&[1, 2, 15, 14], 3, walls),
            (&[5, 6, 15, 14], 3, walls),
            (&[1, 5, 16], 4, walls),
            (&[5, 14, 16], 4, walls),
            (&[14, 1, 16], 4, walls),
        ];
        let inside: Vec<Vec3> = (0..5)
            .map(|c| {
                let mut cell_points: Vec<Label> = spec
                    .iter()
                    .filter(|(_, owner, side)| *owner == c || *side == FaceSide::Cell(c))
                    .flat_map(|(face, _, _)| face.iter().copied())
                    .collect();
                cell_points.sort_unstable();
                cell_points.dedup();
                cell_points
                    .iter()
                    .map(|&p| points[p as usize])
                    .sum::<Vec3>()
                    / cell_points.len() as f64
            })
            .collect();
        let mut faces = FaceList::default();
        for (face, owner, _) in &spec {
            faces
                .push(&facing_away(&points, face, inside[*owner as usize]))
                .unwrap();
        }
        let owner = spec.iter().map(|s| s.1).collect();
        let side = spec.iter().map(|s| s.2).collect();
        let patches = vec![
            ("floor".into(), PatchKind::Wall),
            ("walls".into(), PatchKind::Wall),
        ];
        mesh_from_unordered_faces(points, faces, owner, side, patches).unwrap()
    }

    /// Splits of VTK's linear cells into tetrahedra (VTK local numbers), each of
    /// positive volume when the cell has VTK's orientation.
    fn tetrahedra(cell_type: u8) -> &'static [[usize; 4]] {
        match cell_type {
            VTK_TETRA => &[[0, 1, 2, 3]],
            VTK_PYRAMID => &[[0, 1, 2, 4], [0, 2, 3, 4]],
            // Base (0, 1, 2) turns clockwise seen from (3, 4, 5).
            VTK_WEDGE => &[[0, 2, 1, 3], [2, 1, 3, 5], [1, 3, 5, 4]],
            VTK_HEXAHEDRON => &[
                [0, 1, 2, 6],
                [0, 2, 3, 6],
                [0, 3, 7, 6],
                [0, 7, 4, 6],
                [0, 4, 5, 6],
                [0, 5, 1, 6],
            ],
            _ => panic!("not a linear cell type: {cell_type}"),
        }
    }

    /// Volume of linear cell `c` from its VTK point order; every tetrahedron of
    /// the split must be positive.
    fn linear_volume(points: &[Vec3], cells: &VtkCells, c: usize) -> f64 {
        let order = &cells.connectivity[cells.offsets[c] as usize..cells.offsets[c + 1] as usize];
        let p = |i: usize| points[order[i] as usize];
        tetrahedra(cells.types[c])
            .iter()
            .map(|t| {
                let v = (p(t[1]) - p(t[0]))
                    .cross(&(p(t[2]) - p(t[0])))
                    .dot(&(p(t[3]) - p(t[0])))
                    / 6.0;
                assert!(v > 0.0, "cell {c}: tetrahedron {t:?} has volume {v}");
                v
            })
            .sum()
    }

    /// Volume enclosed by polyhedron faces (divergence theorem); positive when
    /// they point outward.
    fn polyhedron_volume(points: &[Vec3], faces: &[Vec<Label>]) -> f64 {
        faces
            .iter()
            .map(|f| {
                let (centre, area) = face_centre_and_area(points, f);
                centre.dot(&area) / 3.0
            })
            .sum()
    }

    /// The faces of each polyhedron in VTK's face stream, by cell.
    fn polyhedron_faces(faces: &[Label], face_offsets: &[i64]) -> HashMap<usize, Vec<Vec<Label>>> {
        let mut start = 0;
        let mut out = HashMap::new();
        for (c, &end) in face_offsets.iter().enumerate() {
            if end < 0 {
                continue;
            }
            let stream = &faces[start..end as usize];
            let mut cell_faces = Vec::new();
            let mut i = 1;
            while i < stream.len() {
                let n = stream[i] as usize;
                cell_faces.push(
                    stream[i + 1..i + 1 + n]
                        .iter()
                        .map(|&p| p as Label)
                        .collect(),
                );
                i += 1 + n;
            }
            assert_eq!(cell_faces.len(), stream[0] as usize, "cell {c}");
            out.insert(c, cell_faces);
            start = end as usize;
        }
        out
    }

    #[test]
    fn cells_get_vtk_shapes_with_positive_volume() {
        let mesh = mixed_mesh();
        let volumes = mesh.geometry().unwrap().cell_volumes;
        let cells = VtkCells::new(&mesh);
        assert_eq!(
            cells.types,
            [
                VTK_HEXAHEDRON,
                VTK_PYRAMID,
                VTK_POLYHEDRON,
                VTK_WEDGE,
                VTK_TETRA
            ]
        );
        for c in [0, 1, 3, 4] {
            let v = linear_volume(mesh.points(), &cells, c);
            assert!(
                (v - volumes[c]).abs() < 1e-14,
                "cell {c}: {v} vs {}",
                volumes[c]
            );
            assert_eq!(cells.face_offsets[c], -1);
        }
        let poly = &polyhedron_faces(&cells.faces, &cells.face_offsets)[&2];
        assert_eq!(poly.len(), 9);
        let v = polyhedron_volume(mesh.points(), poly);
        assert!((v - volumes[2]).abs() < 1e-14, "{v} vs {}", volumes[2]);
        assert_eq!(
            &cells.connectivity[cells.offsets[2] as usize..cells.offsets[3] as usize],
            [0, 3, 4, 7, 9, 10, 11, 12, 13]
        );
    }

    /// Whichever face comes first and wherever each face starts, the hexahedron
    /// comes out the right way round.
    #[test]
    fn hexahedron_order_does_not_depend_on_face_order() {
        let (points, faces, owner, _, patches) = crate::mesh::tests::unit_cube().into_parts();
        for first in 0..6 {
            let mut rotated = FaceList::default();
            for f in (0..6).map(|i| (i + first) % 6) {
                let mut face = faces.face(f).to_vec();
                face.rotate_left((f + first) % 4);
                rotated.push(&face).unwrap();
            }
            let mesh = Mesh::new(
                points.clone(),
                rotated,
                owner.clone(),
                vec![],
                patches.clone(),
            )
            .unwrap();
            let cells = VtkCells::new(&mesh);
            assert_eq!(cells.types, [VTK_HEXAHEDRON]);
            assert!((linear_volume(mesh.points(), &cells, 0) - 1.0).abs() < 1e-15);
        }
    }

    /// Six quadrilaterals over eight points that are not a hexahedron's faces
    /// (the cube with point 3 of its bottom and point 5 of its top swapped)
    /// must become a polyhedron, not a wrong hexahedron.
    #[test]
    fn quadrilateral_cell_that_is_not_a_hexahedron_is_a_polyhedron() {
        let (points, faces, owner, _, patches) = crate::mesh::tests::unit_cube().into_parts();
        let mut labels = faces.labels().to_vec();
        labels.swap(1, 5); // face 0 takes point 5 of face 1 and gives it point 3
        let faces = FaceList::uniform(4, labels).unwrap();
        let mesh = Mesh::new(points, faces, owner, vec![], patches).unwrap();
        assert_eq!(VtkCells::new(&mesh).types, [VTK_POLYHEDRON]);
    }

    /// A VTK XML file with raw appended data, read back by hand: its XML and
    /// every data array by name (the points array is named "Points").
    struct ReadBack {
        xml: String,
        arrays: HashMap<String, (String, usize, Vec<u8>)>,
    }

    fn attr<'a>(tag: &'a str, key: &str) -> &'a str {
        let start = tag
            .find(&format!(" {key}=\""))
            .unwrap_or_else(|| panic!("no {key} in {tag}"));
        let value = &tag[start + key.len() + 3..];
        &value[..value.find('"').unwrap()]
    }

    /// The attributes of every `<name ...>` tag, each starting with a space.
    fn tags<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
        xml.split(&format!("<{name}"))
            .skip(1)
            .filter(|t| t.starts_with(' '))
            .map(|t| &t[..t.find('>').unwrap()])
            .collect()
    }

    fn read_back(path: &Path) -> ReadBack {
        let bytes = fs::read(path).unwrap();
        let marker = b"<AppendedData encoding=\"raw\">\n_";
        let at = bytes
            .windows(marker.len())
            .position(|w| w == marker)
            .unwrap();
        let xml = String::from_utf8(bytes[..at].to_vec()).unwrap();
        let data = &bytes[at + marker.len()..];
        let mut arrays = HashMap::new();
        let mut end = 0;
        for tag in tags(&xml, "DataArray") {
            let offset: usize = attr(tag, "offset").parse().unwrap();
            let n = u64::from_le_bytes(data[offset..offset + 8].try_into().unwrap()) as usize;
            end = end.max(offset + 8 + n);
            let value = (
                attr(tag, "type").to_string(),
                attr(tag, "NumberOfComponents").parse().unwrap(),
                data[offset + 8..offset + 8 + n].to_vec(),
            );
            arrays.insert(attr(tag, "Name").to_string(), value);
        }
        assert_eq!(&data[end..], b"\n</AppendedData>\n</VTKFile>\n");
        ReadBack { xml, arrays }
    }

    impl ReadBack {
        fn piece(&self, key: &str) -> usize {
            attr(tags(&self.xml, "Piece")[0], key).parse().unwrap()
        }

        fn array(&self, name: &str, vtk_type: &str, components: usize) -> &[u8] {
            let (t, n, bytes) = &self.arrays[name];
            assert_eq!((t.as_str(), *n), (vtk_type, components), "array {name}");
            bytes
        }

        fn f64s(&self, name: &str, components: usize) -> Vec<f64> {
            let bytes = self.array(name, "Float64", components);
            bytes
                .chunks(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect()
        }

        fn i64s(&self, name: &str) -> Vec<i64> {
            let bytes = self.array(name, "Int64", 1);
            bytes
                .chunks(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                .collect()
        }

        fn labels(&self, name: &str) -> Vec<Label> {
            self.i64s(name)
                .into_iter()
                .map(|p| Label::try_from(p).unwrap())
                .collect()
        }
    }

    fn flat(v: &[Vec3]) -> Vec<f64> {
        v.iter().flat_map(|p| [p.x, p.y, p.z]).collect()
    }

    /// A fresh directory for a test's files; `FVPOISSON_KEEP_VTK=DIR` writes
    /// them under DIR instead, kept for a look in ParaView.
    fn test_dir(name: &str) -> (PathBuf, bool) {
        match std::env::var_os("FVPOISSON_KEEP_VTK") {
            Some(dir) => (PathBuf::from(dir).join(name), true),
            None => {
                let dir =
                    std::env::temp_dir().join(format!("fvpoisson_{name}_{}", std::process::id()));
                let _ = fs::remove_dir_all(&dir);
                (dir, false)
            }
        }
    }

    /// The cells of `cells` (a subset) with their points mapped back to the
    /// mesh's: the types, connectivity and face streams of the whole mesh.
    fn assert_subset_maps_back(all: &VtkCells, cells: &[Label], sub: &VtkCells, points: &[Label]) {
        let back = |labels: &[Label]| -> Vec<Label> {
            labels.iter().map(|&p| points[p as usize]).collect()
        };
        let stream = |c: &VtkCells, k: usize| -> Vec<Label> {
            let end = c.face_offsets[k];
            if end < 0 {
                return Vec::new();
            }
            let start = c.face_offsets[..k].iter().rev().find(|&&o| o >= 0).copied();
            c.faces[start.unwrap_or(0) as usize..end as usize].to_vec()
        };
        for (k, &c) in cells.iter().enumerate() {
            let c = c as usize;
            assert_eq!(sub.types[k], all.types[c]);
            let own = &sub.connectivity[sub.offsets[k] as usize..sub.offsets[k + 1] as usize];
            let whole = &all.connectivity[all.offsets[c] as usize..all.offsets[c + 1] as usize];
            assert_eq!(back(own), whole);
            if all.types[c] == VTK_POLYHEDRON {
                let (mine, theirs) = (stream(sub, k), stream(all, c));
                assert_eq!(mine.len(), theirs.len());
                // Counts stay, point labels map back (n_faces, then per face n, points).
                let mut at = 1;
                assert_eq!(mine[0], theirs[0]);
                while at < mine.len() {
                    let n = mine[at] as usize;
                    assert_eq!(mine[at], theirs[at]);
                    assert_eq!(back(&mine[at + 1..at + 1 + n]), &theirs[at + 1..at + 1 + n]);
                    at += 1 + n;
                }
            }
        }
    }

    /// Subsets of the mixed mesh and of a polyhedral mesh (every cell a
    /// polyhedron) keep each cell's shape, points and faces.
    #[test]
    fn cell_subsets_keep_shapes_points_and_faces() {
        let polydual = crate::mesh::load("meshes/foam/polydual").unwrap();
        for mesh in [mixed_mesh(), polydual] {
            let all = VtkCells::new(&mesh);
            let n = mesh.n_cells() as Label;
            for ranks in [2, 3] {
                for rank in 0..ranks {
                    let cells: Vec<Label> =
                        (0..n).filter(|c| (c * 7 + 3) % ranks == rank).collect();
                    let (sub, points) = all.subset(&cells);
                    assert!(points.windows(2).all(|w| w[0] < w[1]));
                    assert_eq!(sub.offsets.len(), cells.len() + 1);
                    assert_subset_maps_back(&all, &cells, &sub, &points);
                }
            }
        }
    }

    /// A distributed series of 3 ranks: each rank's `processorK.vtu` holds
    /// its cells (shapes, points, field values), the cell counts add up to
    /// the mesh, rank 0's `.pvtu` lists every piece with the fields, and the
    /// `.vtm` reads the `.pvtu`.
    #[test]
    fn distributed_series_writes_a_piece_per_rank_and_a_pvtu() {
        let mesh = mixed_mesh();
        let (dir, keep) = test_dir("vtk_pieces");
        let n = mesh.n_cells() as Label;
        let all = VtkCells::new(&mesh);
        let p: Vec<f64> = (0..n).map(|c| f64::from(c) * 0.5 - 1.0).collect();
        let grad: Vec<Vec3> = (0..n).map(|c| Vec3::new(f64::from(c), 1.0, -2.0)).collect();
        let p_b = vec![3.0; mesh.n_faces() - mesh.n_internal_faces()];
        let mut total = 0;
        for rank in [2, 1, 0] {
            let cells: Vec<Label> = (0..n).filter(|c| (c * 7 + 3) % 3 == rank).collect();
            let mut series =
                VtkSeries::distributed(&mesh, &dir, "case", rank as usize, 3, cells.clone())
                    .unwrap();
            let fields = [Field::scalar("p", &p), Field::vector("grad(p)", &grad)];
            series
                .write_step(0.5, &fields, &[Field::scalar("p", &p_b)])
                .unwrap();
            let vtu = read_back(&dir.join(format!("case_000000/processor{rank}.vtu")));
            assert_eq!(vtu.piece("NumberOfCells"), cells.len());
            total += cells.len();
            let (sub, points) = all.subset(&cells);
            assert_eq!(vtu.piece("NumberOfPoints"), points.len());
            let xyz: Vec<Vec3> = points.iter().map(|&q| mesh.points()[q as usize]).collect();
            assert_eq!(vtu.f64s("Points", 3), flat(&xyz));
            assert_eq!(vtu.labels("connectivity"), sub.connectivity);
            let expected: Vec<f64> = cells.iter().map(|&c| p[c as usize]).collect();
            assert_eq!(vtu.f64s("p", 1), expected);
            let g: Vec<Vec3> = cells.iter().map(|&c| grad[c as usize]).collect();
            assert_eq!(vtu.f64s("grad(p)", 3), flat(&g));
            let rank0_files = dir.join("case_000000.vtm").exists();
            assert_eq!(rank0_files, rank == 0, "only rank 0 writes the .vtm");
        }
        assert_eq!(total, mesh.n_cells());
        let pvtu = fs::read_to_string(dir.join("case_000000/internal.pvtu")).unwrap();
        let sources: Vec<&str> = tags(&pvtu, "Piece")
            .iter()
            .map(|t| attr(t, "Source"))
            .collect();
        assert_eq!(
            sources,
            ["processor0.vtu", "processor1.vtu", "processor2.vtu"]
        );
        let arrays: Vec<&str> = tags(&pvtu, "PDataArray")
            .iter()
            .map(|t| attr(t, "Name"))
            .collect();
        assert_eq!(arrays, ["Points", "p", "grad(p)"]);
        let vtm = fs::read_to_string(dir.join("case_000000.vtm")).unwrap();
        assert!(vtm.contains("file=\"case_000000/internal.pvtu\""), "{vtm}");
        assert!(!dir.join("case_000000/internal.vtu").exists());
        assert!(dir.join("case.pvd").exists());
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn series_round_trips_through_the_files() {
        let mesh = mixed_mesh();
        let geometry = mesh.geometry().unwrap();
        let (dir, keep) = test_dir("vtk_series");
        let mut series = VtkSeries::new(&mesh, &dir, "case").unwrap();
        let n_boundary = mesh.n_faces() - mesh.n_internal_faces();
        let cell_id: Vec<f64> = (0..mesh.n_cells()).map(|c| c as f64).collect();
        let mut p: Vec<f64> = geometry
            .cell_centres
            .iter()
            .map(|c| (c.x * 3.1).sin() / 7.0)
            .collect();
        let grad: Vec<Vec3> = geometry
            .cell_centres
            .iter()
            .map(|c| c.map(|x| x.exp()))
            .collect();
        let p_b: Vec<f64> = geometry
            .boundary_face_centres
            .iter()
            .map(|c| c.z.cos())
            .collect();
        let wall_normal: Vec<Vec3> = geometry.face_area_vectors[mesh.n_internal_faces()..].to_vec();
        assert_eq!(p_b.len(), n_boundary);

        for (step, time) in [1e-7, 0.25].into_iter().enumerate() {
            p[0] = step as f64 + 0.1;
            let cell_fields = [
                Field::scalar("p", &p),
                Field::vector("grad(p)", &grad),
                Field::scalar("V", &geometry.cell_volumes),
                Field::scalar("cell id", &cell_id),
            ];
            let boundary_fields = [Field::scalar("p", &p_b), Field::vector("Sf", &wall_normal)];
            let vtm = series
                .write_step(time, &cell_fields, &boundary_fields)
                .unwrap();
            assert_eq!(vtm, dir.join(format!("case_{step:06}.vtm")));

            let vtu = read_back(&dir.join(format!("case_{step:06}/internal.vtu")));
            assert_eq!(vtu.piece("NumberOfCells"), mesh.n_cells());
            assert_eq!(vtu.piece("NumberOfPoints"), mesh.n_points());
            assert_eq!(vtu.f64s("Points", 3), flat(mesh.points()));
            let cells = VtkCells::new(&mesh);
            assert_eq!(vtu.array("types", "UInt8", 1), cells.types);
            let read = VtkCells {
                types: cells.types.clone(),
                connectivity: vtu.labels("connectivity"),
                offsets: [0].into_iter().chain(vtu.i64s("offsets")).collect(),
                faces: vtu.labels("faces"),
                face_offsets: vtu.i64s("faceoffsets"),
            };
            assert_eq!(read, cells);
            for c in [0, 1, 3, 4] {
                assert!(linear_volume(mesh.points(), &read, c) > 0.0);
            }
            assert_eq!(vtu.f64s("p", 1), p);
            assert_eq!(vtu.f64s("grad(p)", 3), flat(&grad));
            assert_eq!(vtu.f64s("cell id", 1), cell_id);

            let vtm_text = fs::read_to_string(&vtm).unwrap();
            let datasets = tags(&vtm_text, "DataSet");
            assert_eq!(datasets.len(), 1 + mesh.patches().len());
            for (patch, tag) in mesh.patches().iter().zip(&datasets[1..]) {
                assert_eq!(attr(tag, "name"), patch.name);
                let vtp = read_back(&dir.join(attr(tag, "file")));
                assert_eq!(vtp.piece("NumberOfPolys"), patch.size);
                let range = patch.start - mesh.n_internal_faces()
                    ..patch.start - mesh.n_internal_faces() + patch.size;
                assert_eq!(vtp.f64s("p", 1), p_b[range.clone()]);
                assert_eq!(vtp.f64s("Sf", 3), flat(&wall_normal[range]));
                // Polygons map back to the patch's faces, same points in the same order.
                let points = vtp.f64s("Points", 3);
                let (connectivity, offsets) = (vtp.i64s("connectivity"), vtp.i64s("offsets"));
                for (i, f) in patch.faces().enumerate() {
                    let start = if i == 0 { 0 } else { offsets[i - 1] as usize };
                    let polygon: Vec<f64> = connectivity[start..offsets[i] as usize]
                        .iter()
                        .flat_map(|&q| points[3 * q as usize..3 * q as usize + 3].to_vec())
                        .collect();
                    let face: Vec<Vec3> = mesh
                        .faces()
                        .face(f)
                        .iter()
                        .map(|&q| mesh.points()[q as usize])
                        .collect();
                    assert_eq!(polygon, flat(&face));
                }
            }
        }
        let pvd = fs::read_to_string(series.pvd_path()).unwrap();
        let steps: Vec<(&str, &str)> = tags(&pvd, "DataSet")
            .iter()
            .map(|t| (attr(t, "timestep"), attr(t, "file")))
            .collect();
        assert_eq!(
            steps,
            [("1e-7", "case_000000.vtm"), ("0.25", "case_000001.vtm")]
        );
        let leftovers: Vec<_> = walk(&dir)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        fs::read_dir(dir)
            .unwrap()
            .flat_map(|e| {
                let path = e.unwrap().path();
                if path.is_dir() {
                    walk(&path)
                } else {
                    vec![path]
                }
            })
            .collect()
    }

    #[test]
    fn bad_input_is_refused_with_reasons() {
        let mesh = crate::mesh::tests::unit_cube();
        let (dir, _) = test_dir("vtk_errors");
        let one = [1.0];
        let two = [1.0, 2.0];
        let err = |r: Result<PathBuf, OutputError>| r.unwrap_err().to_string();

        let mut series = VtkSeries::new(&mesh, &dir, "run").unwrap();
        let e = err(series.write_step(0.0, &[Field::scalar("p", &two)], &[]));
        assert!(
            e.contains("run_000000.vtm") && e.contains("'p' has 2 values") && e.contains("1 cells"),
            "{e}"
        );
        let e = err(series.write_step(0.0, &[], &[Field::scalar("pb", &one)]));
        assert!(
            e.contains("'pb' has 1 values but there are 6 boundary faces"),
            "{e}"
        );
        let e = err(series.write_step(
            0.0,
            &[Field::scalar("p", &one), Field::scalar("p", &one)],
            &[],
        ));
        assert!(e.contains("two fields are named 'p'"), "{e}");
        let e = err(series.write_step(f64::NAN, &[], &[]));
        assert!(e.contains("not a finite number"), "{e}");
        assert!(
            !series.pvd_path().exists(),
            "nothing is written for refused steps"
        );
        series
            .write_step(1.0, &[Field::scalar("p", &one)], &[])
            .unwrap();
        let e = err(series.write_step(1.0, &[], &[]));
        assert!(
            e.contains("does not follow") && e.contains("run_000001.vtm"),
            "{e}"
        );

        let e = VtkSeries::new(&mesh, &dir, "a/b").unwrap_err().to_string();
        assert!(e.contains("'a/b' must be a plain file name"), "{e}");
        let file = dir.join("run.pvd");
        let e = VtkSeries::new(&mesh, &file, "x").unwrap_err().to_string();
        assert!(e.contains("run.pvd"), "{e}");
        let e = write_vtu(&dir.join("missing").join("m.vtu"), &mesh, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.vtu.tmp"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
