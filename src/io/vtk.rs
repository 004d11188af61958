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
//! The files of a step (internal cells and every patch) are written in
//! parallel; the `.vtm` and the `.pvd` are written last, so a step is listed
//! only once all its files are on disk.
//!
//! A distributed run's series ([`VtkSeries::distributed`]) writes the cells
//! as pieces: rank K writes its cells (and the points they use) to
//! `DIR/NAME_00000k/processorK.vtu`; once every rank has written its piece
//! ([`VtkSeries::publish_step`], called after the ranks agreed), rank 0 writes
//! `DIR/NAME_00000k/internal.pvtu` listing every piece, the `.vtm` and the
//! `.pvd`. The `.vtm`'s "internal" entry is a multi-piece data set (a `<Piece>`
//! element listing the `processorK.vtu` files), which VTK's multiblock
//! reader opens with every cell; a `.pvtu` nested in a `.vtm` is not read by
//! it (only the boundary blocks load), so the `.pvtu` is there for opening on
//! its own.
//!
//! Encodings ([`VtkEncoding`]): raw binary appended data by default
//! (`<AppendedData encoding="raw">`, `header_type="UInt64"`, little endian);
//! `zlib`, the same with every array compressed in 32 KiB blocks as
//! ParaView's writer does with its `vtkZLibDataCompressor` (per array a
//! UInt64 header: number of blocks, block size, size of the last partial
//! block (0 when there is none), the compressed size of each block; then the
//! compressed blocks); and `ascii`, the values as text inside each
//! `<DataArray format="ascii">`. Points and fields are Float64 so that error
//! norms computed from the files are exact; connectivity and offsets are
//! Int32 when every value fits, else Int64.
//!
//! Raw arrays are written at the speed of the bytes
//! (`VtkFile::write_appended`): an array whose memory already is its file
//! bytes (on a little-endian host: every field, the points, the cell types,
//! Int32 connectivity, whose labels below 2^31 have the bytes of their
//! Int32) is written from the caller's slice in one `write`, with no
//! encoding; any other (Int32 offsets from i64, values gathered at a piece's
//! cells or a patch's points, uniform and index fields) is encoded in pieces
//! of a few MiB by several threads while the piece before it is written;
//! the XML and small arrays go out in one write. Nothing is held whole but
//! what the caller holds (a 10 M-cell mesh's connectivity alone is 320 MB).
//! zlib arrays are compressed (blocks in parallel, from memory where the
//! bytes lie there) before the file is written, since their sizes go into
//! the XML, so their compressed bytes are held until then. Ascii arrays are
//! written as text value by value in one stream (`VtkFile::write_streamed`),
//! whose per-value encoding of raw arrays is the reference the fast path's
//! bytes are tested against.
//!
//! The XML is written here rather than with the `vtkio` crate because vtkio
//! 0.7's XML cells have only connectivity, offsets and types: no `faces` and
//! `faceoffsets` arrays, so no VTK_POLYHEDRON cells.

use super::{create_dir_all, write_atomic, write_atomic_file, OutputError};
use crate::mesh::{CellShape, Label, Mesh, Patch, Vec3};
use rayon::prelude::*;
use std::fmt;
use std::io::Write;
use std::marker::PhantomData;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::mpsc::Receiver;

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

/// How the data arrays of a VTK XML file are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VtkEncoding {
    /// Raw binary appended data (the default: fastest to write and read).
    #[default]
    Binary,
    /// Raw binary appended data compressed by zlib in 32 KiB blocks, as
    /// ParaView writes it with compression on (smaller, slower to write).
    Zlib,
    /// Text in each data array (readable, about three times larger).
    Ascii,
}

impl VtkEncoding {
    /// The names accepted by [`FromStr`], for messages.
    pub const NAMES: &'static str = "binary, zlib or ascii";
}

impl FromStr for VtkEncoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "binary" => Ok(Self::Binary),
            "zlib" => Ok(Self::Zlib),
            "ascii" => Ok(Self::Ascii),
            other => Err(format!(
                "unknown VTK encoding '{other}' (expected {})",
                Self::NAMES
            )),
        }
    }
}

impl fmt::Display for VtkEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Binary => "binary",
            Self::Zlib => "zlib",
            Self::Ascii => "ascii",
        })
    }
}

/// Values of a field, one per cell or per face.
#[derive(Clone, Copy, Debug)]
pub enum FieldValues<'a> {
    Scalar(&'a [f64]),
    Vector(&'a [Vec3]),
    /// `len` times `value` (a uniform Γ): written without a list of them.
    Uniform {
        value: f64,
        len: usize,
    },
    /// Value `i` is `first + i` (cell numbers): written without a list.
    Index {
        first: usize,
        len: usize,
    },
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

    /// `len` times `value`, with no per-cell copy of it.
    pub fn uniform(name: &'a str, value: f64, len: usize) -> Self {
        Self {
            name,
            values: FieldValues::Uniform { value, len },
        }
    }

    /// The numbers `0..len` (as Float64), with no list of them.
    pub fn index(name: &'a str, len: usize) -> Self {
        Self {
            name,
            values: FieldValues::Index { first: 0, len },
        }
    }

    pub fn len(&self) -> usize {
        match self.values {
            FieldValues::Scalar(v) => v.len(),
            FieldValues::Vector(v) => v.len(),
            FieldValues::Uniform { len, .. } | FieldValues::Index { len, .. } => len,
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
            FieldValues::Uniform { value, .. } => FieldValues::Uniform {
                value,
                len: range.len(),
            },
            FieldValues::Index { first, .. } => FieldValues::Index {
                first: first + range.start,
                len: range.len(),
            },
        };
        Self { values, ..*self }
    }

    fn components(&self) -> usize {
        match self.values {
            FieldValues::Scalar(_) | FieldValues::Uniform { .. } | FieldValues::Index { .. } => 1,
            FieldValues::Vector(_) => 3,
        }
    }
}

/// Writes `mesh` with cell fields (one value per cell each) as one `.vtu`
/// file in `encoding`; returns the bytes written.
pub fn write_vtu(
    path: &Path,
    mesh: &Mesh,
    cell_fields: &[Field],
    encoding: VtkEncoding,
) -> Result<u64, OutputError> {
    check_fields(cell_fields, mesh.n_cells(), "cells", path)?;
    cells_file(
        mesh,
        &VtkCells::new(mesh),
        None,
        cell_fields,
        None,
        encoding,
    )
    .write(path)
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

/// A step of a distributed series whose piece is written but which is not
/// yet listed (see [`VtkSeries::publish_step`]).
#[derive(Debug)]
struct PendingStep {
    time: f64,
    stem: String,
    /// Rank 0: the texts of the `.pvtu` and of the `.vtm`.
    listing: Option<(String, String)>,
}

/// A time series of a mesh's cell and boundary fields: one `.vtm` per step,
/// all listed in `NAME.pvd` (layout in the module documentation).
#[derive(Debug)]
pub struct VtkSeries<'m> {
    mesh: &'m Mesh,
    /// The whole mesh's cells in VTK form: built when the first step is
    /// written and kept for the next, so that a run's set-up and solves do
    /// not hold them (and their build's temporaries do not add to the
    /// set-up's peak memory). Never built for a rank's piece, which keeps
    /// its own cells.
    cells: Option<VtkCells>,
    /// Cells being built by another thread ([`VtkSeries::with_cells_from`]),
    /// taken at the first step.
    cells_coming: Option<Receiver<PreparedCells>>,
    /// File stem and faces of every patch, in patch order.
    patches: Vec<(String, PatchPolygons)>,
    dir: PathBuf,
    name: String,
    encoding: VtkEncoding,
    /// Time and `.vtm` file (relative to `dir`) of every step written.
    steps: Vec<(f64, String)>,
    /// A rank's part of a distributed run (`None`: the whole mesh).
    piece: Option<Piece>,
    /// The distributed step written but not yet published.
    pending: Option<PendingStep>,
    /// Bytes of every file this series (this rank) wrote.
    bytes_written: u64,
    /// Wall time spent writing them.
    write_time: std::time::Duration,
}

impl<'m> VtkSeries<'m> {
    /// Prepares the series `dir/name.pvd`, creating `dir`. Nothing else is
    /// written until the first step; files of an earlier series of the same
    /// name are overwritten step by step. Arrays are raw binary until
    /// [`VtkSeries::with_encoding`] says otherwise.
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
            cells: None,
            cells_coming: None,
            patches,
            dir,
            name: name.to_string(),
            encoding: VtkEncoding::default(),
            steps: Vec::new(),
            piece: None,
            pending: None,
            bytes_written: 0,
            write_time: std::time::Duration::ZERO,
        })
    }

    /// The series with its arrays written in `encoding`.
    pub fn with_encoding(mut self, encoding: VtkEncoding) -> Self {
        self.encoding = encoding;
        self
    }

    /// Makes the whole mesh's cells ready for the first step (not for a
    /// rank's piece, which keeps its own): those built beside the run,
    /// waited for, else built here. A writer that makes large fields for
    /// the step calls it first, so that the build's temporaries are gone
    /// before the fields take their memory; [`Self::write_step`] calls it
    /// too.
    pub fn take_cells(&mut self) {
        if self.piece.is_some() || self.cells.is_some() {
            return;
        }
        let mesh = self.mesh;
        let prepared = self.cells_coming.take().and_then(|coming| {
            crate::timings::span("VTK cells built beside the run, waited for", || {
                coming.recv().ok()
            })
        });
        self.cells = Some(match prepared.filter(|p| p.is_of(mesh)) {
            Some(prepared) => prepared.cells,
            None => crate::timings::span("VTK cells", || VtkCells::new(mesh)),
        });
    }

    /// The series taking its cells, at the first step, from `coming`: a
    /// thread that sends [`PreparedCells::new`] of this series' mesh (a GPU
    /// run builds them on the host once its set-up is done, while the device
    /// solves). The first step waits for them; cells of another mesh, or
    /// none (the sender gone), are built then as without this call. A
    /// distributed series keeps its own piece and ignores them.
    pub fn with_cells_from(mut self, coming: Receiver<PreparedCells>) -> Self {
        self.cells_coming = Some(coming);
        self
    }

    /// The series continuing the one `NAME.pvd` already lists, as a run
    /// restarted at `time` needs: the listed steps up to `time` stay listed
    /// and the next step is numbered after them (a listed step after `time`
    /// is replaced by the one the restarted run writes in its place). With no
    /// listing, or one whose steps are not numbered as this writer numbers
    /// them (step `k` in `NAME_00000k.vtm`), the series starts anew (logged).
    pub fn continuing_until(mut self, time: f64) -> Self {
        let path = self.pvd_path();
        // Not a regular file (a FIFO would block the read): no listing.
        let Ok(text) = crate::limits::read_regular_text(&path) else {
            return self;
        };
        // The listed times are `{:?}` of the run's f64 time, the restart time
        // is read from a directory name: equal up to the last bits.
        let slack = 1e-9 * time.abs().max(f64::MIN_POSITIVE);
        let listed = pvd_datasets(&text).and_then(|entries| {
            entries
                .into_iter()
                .map(|(t, file)| Some((t.parse::<f64>().ok()?, file)))
                .collect::<Option<Vec<_>>>()
        });
        let Some(listed) = listed else {
            log::warn!(
                "{}: a step without a time or file; the VTK series starts anew",
                path.display()
            );
            return self;
        };
        let mut steps = Vec::new();
        for (t, file) in listed {
            if t > time + slack {
                break;
            }
            if file != format!("{}_{:06}.vtm", self.name, steps.len()) {
                log::warn!(
                    "{}: step {} is '{file}', not numbered as this writer numbers steps; \
                     the VTK series starts anew",
                    path.display(),
                    steps.len()
                );
                return self;
            }
            steps.push((t, file.to_string()));
        }
        self.steps = steps;
        self
    }

    /// Rank `rank` of `n_ranks`' part of the series of a distributed run
    /// (module documentation): the rank writes `cells` (its global cells,
    /// ascending) as `processor{rank}.vtu`; rank 0 also the boundary, and on
    /// [`VtkSeries::publish_step`] the `.pvtu` of all pieces, the `.vtm` and
    /// the `.pvd`. Every rank passes the whole mesh's fields to
    /// [`VtkSeries::write_step`].
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
        // The whole mesh's cells only for the time of the subset.
        let (vtk, points) = VtkCells::new(mesh).subset(&cells);
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

    /// Steps published so far.
    pub fn n_steps(&self) -> usize {
        self.steps.len()
    }

    /// Bytes of all files this series wrote (on this rank).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Wall time spent writing them (the steps' files and listings).
    pub fn write_time(&self) -> std::time::Duration {
        self.write_time
    }

    /// Writes one step at `time` (a time or an outer iteration; it must increase
    /// from step to step). `cell_fields` have one value per cell;
    /// `boundary_fields` one per boundary face, indexed by
    /// `face - n_internal_faces` like `Geometry::boundary_face_centres`.
    /// Returns the step's `.vtm` path. A whole-mesh series then lists the step
    /// in the `.vtm` and the `.pvd`; a distributed series writes its piece only
    /// (rank 0 also the boundary): the step is listed by
    /// [`VtkSeries::publish_step`] once every rank's piece is on disk.
    pub fn write_step(
        &mut self,
        time: f64,
        cell_fields: &[Field],
        boundary_fields: &[Field],
    ) -> Result<PathBuf, OutputError> {
        let start = std::time::Instant::now();
        let written = self.write_step_files(time, cell_fields, boundary_fields);
        self.write_time += start.elapsed();
        written
    }

    fn write_step_files(
        &mut self,
        time: f64,
        cell_fields: &[Field],
        boundary_fields: &[Field],
    ) -> Result<PathBuf, OutputError> {
        let mesh = self.mesh;
        let stem = format!("{}_{:06}", self.name, self.steps.len());
        let vtm = self.dir.join(format!("{stem}.vtm"));
        if self.pending.is_some() {
            return Err(OutputError::invalid(format!(
                "{}: the previous step of this distributed series was not published",
                vtm.display()
            )));
        }
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
        create_dir_all(&self.dir.join(&stem))?;

        // The internal cells (or this rank's piece) and, but on ranks other
        // than 0, every patch: one job each, written in parallel.
        let encoding = self.encoding;
        let internal_file = match &self.piece {
            None => format!("{stem}/internal.vtu"),
            Some(piece) => format!("{stem}/processor{}.vtu", piece.rank),
        };
        self.take_cells();
        let mut jobs: Vec<Job> = vec![Job::Cells(self.dir.join(&internal_file))];
        let mut patch_blocks = String::new();
        if self.piece.as_ref().is_none_or(|p| p.rank == 0) {
            create_dir_all(&self.dir.join(&stem).join("boundary"))?;
            for (i, ((file_stem, _), patch)) in self.patches.iter().zip(mesh.patches()).enumerate()
            {
                let file = format!("{stem}/boundary/{file_stem}.vtp");
                jobs.push(Job::Patch(i, self.dir.join(&file)));
                patch_blocks += &format!(
                    "<DataSet index=\"{i}\" name=\"{}\" file=\"{file}\"/>\n",
                    escape(&patch.name)
                );
            }
        }
        let written: Vec<u64> = jobs
            .into_par_iter()
            .map(|job| match job {
                Job::Cells(path) => match &self.piece {
                    None => {
                        let cells = self.cells.as_ref().expect("built above for the whole mesh");
                        cells_file(mesh, cells, None, cell_fields, None, encoding)
                    }
                    // The whole mesh's fields read at the piece's cells (no
                    // copy of them is made).
                    Some(piece) => cells_file(
                        mesh,
                        &piece.vtk,
                        Some(&piece.points),
                        cell_fields,
                        Some(&piece.cells),
                        encoding,
                    ),
                }
                .write(&path),
                Job::Patch(i, path) => {
                    let faces = mesh.patches()[i].boundary_faces(n_internal);
                    let fields: Vec<Field> = boundary_fields
                        .iter()
                        .map(|f| f.slice(faces.clone()))
                        .collect();
                    polygons_file(mesh, &self.patches[i].1, &fields, encoding).write(&path)
                }
            })
            .collect::<Result<_, _>>()?;
        self.bytes_written += written.iter().sum::<u64>();

        let internal = match &self.piece {
            None => format!("<DataSet index=\"0\" name=\"internal\" file=\"{internal_file}\"/>\n"),
            Some(piece) => {
                let mut xml = "<Piece index=\"0\" name=\"internal\">\n".to_string();
                for rank in 0..piece.n_ranks {
                    xml += &format!(
                        "<DataSet index=\"{rank}\" file=\"{stem}/processor{rank}.vtu\"/>\n"
                    );
                }
                xml + "</Piece>\n"
            }
        };
        let vtm_text = vtk_file_header("vtkMultiBlockDataSet", false)
            + "<vtkMultiBlockDataSet>\n"
            + &internal
            + "<Block index=\"1\" name=\"boundary\">\n"
            + &patch_blocks
            + "</Block>\n</vtkMultiBlockDataSet>\n</VTKFile>\n";
        match &self.piece {
            None => self.list_step(time, &stem, &vtm_text)?,
            Some(piece) => {
                let listing =
                    (piece.rank == 0).then(|| (pvtu(piece.n_ranks, cell_fields), vtm_text));
                self.pending = Some(PendingStep {
                    time,
                    stem,
                    listing,
                });
            }
        }
        Ok(vtm)
    }

    /// Lists the step written last by a distributed series, to be called
    /// (on every rank) once every rank's piece is on disk: rank 0 writes the
    /// `.pvtu`, the `.vtm` and the `.pvd`; the other ranks only count the
    /// step. A whole-mesh series has nothing to publish.
    pub fn publish_step(&mut self) -> Result<(), OutputError> {
        let start = std::time::Instant::now();
        let published = self.publish_pending();
        self.write_time += start.elapsed();
        published
    }

    fn publish_pending(&mut self) -> Result<(), OutputError> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let Some((pvtu_text, vtm_text)) = pending.listing else {
            self.steps
                .push((pending.time, format!("{}.vtm", pending.stem)));
            return Ok(());
        };
        let path = self.dir.join(format!("{}/internal.pvtu", pending.stem));
        self.bytes_written += write_text(&path, &pvtu_text)?;
        self.list_step(pending.time, &pending.stem, &vtm_text)
    }

    /// Writes the step's `.vtm` and the `.pvd` with the step added.
    fn list_step(&mut self, time: f64, stem: &str, vtm_text: &str) -> Result<(), OutputError> {
        self.bytes_written += write_text(&self.dir.join(format!("{stem}.vtm")), vtm_text)?;
        self.steps.push((time, format!("{stem}.vtm")));
        let mut pvd = vtk_file_header("Collection", false) + "<Collection>\n";
        for (t, file) in &self.steps {
            // `{:?}` prints the shortest string that reads back to the same f64.
            pvd += &format!("<DataSet timestep=\"{t:?}\" part=\"0\" file=\"{file}\"/>\n");
        }
        pvd += "</Collection>\n</VTKFile>\n";
        self.bytes_written += write_text(&self.pvd_path(), &pvd)?;
        Ok(())
    }
}

/// The whole mesh's cells in VTK form, built apart from a series (on
/// another thread, ahead of its first step): [`VtkSeries::with_cells_from`].
#[derive(Debug)]
pub struct PreparedCells {
    /// The address of the mesh they are of: a series takes only its own
    /// mesh's (both borrow it, so it cannot move in between).
    mesh: usize,
    cells: VtkCells,
}

impl PreparedCells {
    /// The cells of `mesh` (in parallel, on the global thread pool).
    pub fn new(mesh: &Mesh) -> Self {
        Self {
            mesh: std::ptr::from_ref(mesh) as usize,
            cells: VtkCells::new(mesh),
        }
    }

    fn is_of(&self, mesh: &Mesh) -> bool {
        self.mesh == std::ptr::from_ref(mesh) as usize
    }
}

/// One file of a step: the cells (or a piece), or patch `i`.
enum Job {
    Cells(PathBuf),
    Patch(usize, PathBuf),
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
    /// The cells of `mesh`, built in parallel over blocks of cells whose
    /// parts are joined in cell order (the same arrays as one pass).
    fn new(mesh: &Mesh) -> Self {
        Self::in_blocks(mesh, 16_384)
    }

    /// [`Self::new`] over blocks of `block` cells. The blocks are built a
    /// group at a time (a few per thread) and copied in order into the
    /// arrays, so that the memory of the blocks not yet joined stays a
    /// group's, not the mesh's.
    fn in_blocks(mesh: &Mesh, block: usize) -> Self {
        let n = mesh.n_cells();
        let cell_faces = mesh.cell_faces();
        let mut cells = Self {
            types: vec![0; n],
            connectivity: Vec::new(),
            offsets: vec![0; n + 1],
            faces: Vec::new(),
            // Made at the first polyhedron (`append`): 8 bytes a cell that
            // a mesh of linear cells never needs.
            face_offsets: Vec::new(),
        };
        let n_blocks = n.div_ceil(block);
        let group = 4 * rayon::current_num_threads();
        for first in (0..n_blocks).step_by(group) {
            let blocks: Vec<Self> = (first..(first + group).min(n_blocks))
                .into_par_iter()
                .map(|b| Self::of_range(mesh, &cell_faces, b * block..((b + 1) * block).min(n)))
                .collect();
            if first == 0 {
                // Room for the mesh's points as the first group has them per
                // cell (exact for a mesh of one shape), not grown by doubling.
                let (done, points) = (
                    blocks.iter().map(|b| b.types.len()).sum::<usize>(),
                    blocks.iter().map(|b| b.connectivity.len()).sum::<usize>(),
                );
                cells
                    .connectivity
                    .reserve_exact((points * n).div_ceil(done.max(1)));
            }
            cells.append(first * block, blocks);
        }
        cells
    }

    /// Writes `blocks`, the cells from `first_cell` on in order, each with
    /// offsets counted from its own start, into the arrays (sized for every
    /// cell but connectivity and faces, which grow, and the face offsets,
    /// made at the first polyhedron): each block by a thread.
    fn append(&mut self, first_cell: usize, blocks: Vec<Self>) {
        let (points_before, faces_before) = (self.connectivity.len(), self.faces.len());
        let count = |len: fn(&Self) -> usize| blocks.iter().map(len).collect::<Vec<_>>();
        let (n_cells, n_points, n_faces) = (
            count(|b| b.types.len()),
            count(|b| b.connectivity.len()),
            count(|b| b.faces.len()),
        );
        let (first_points, first_faces) = (
            crate::slices::starts(n_points.iter().copied()),
            crate::slices::starts(n_faces.iter().copied()),
        );
        let total = |lengths: &[usize]| lengths.iter().sum::<usize>();
        let cells_end = first_cell + total(&n_cells);
        self.connectivity
            .par_extend(rayon::iter::repeat_n(0, total(&n_points)));
        self.faces
            .par_extend(rayon::iter::repeat_n(0, total(&n_faces)));
        if self.face_offsets.is_empty() && total(&n_faces) > 0 {
            // The first polyhedron: every cell before these is linear.
            self.face_offsets = vec![-1; self.types.len()];
        }
        use crate::slices::split_lengths as split;
        let types = split(
            &mut self.types[first_cell..cells_end],
            n_cells.iter().copied(),
        );
        let offsets = split(
            &mut self.offsets[first_cell + 1..=cells_end],
            n_cells.iter().copied(),
        );
        let face_offsets = if self.face_offsets.is_empty() {
            split(&mut [], n_cells.iter().map(|_| 0))
        } else {
            split(
                &mut self.face_offsets[first_cell..cells_end],
                n_cells.iter().copied(),
            )
        };
        let connectivity = split(
            &mut self.connectivity[points_before..],
            n_points.iter().copied(),
        );
        let faces = split(&mut self.faces[faces_before..], n_faces.iter().copied());
        types
            .into_par_iter()
            .zip(offsets)
            .zip(face_offsets)
            .zip(connectivity)
            .zip(faces)
            .zip(blocks.par_iter().zip(first_points).zip(first_faces))
            .for_each(
                |(
                    ((((types, offsets), face_offsets), connectivity), faces),
                    ((block, points_at), faces_at),
                )| {
                    let (points_at, faces_at) = (
                        (points_before + points_at) as i64,
                        (faces_before + faces_at) as i64,
                    );
                    types.copy_from_slice(&block.types);
                    connectivity.copy_from_slice(&block.connectivity);
                    faces.copy_from_slice(&block.faces);
                    for (to, &o) in offsets.iter_mut().zip(&block.offsets[1..]) {
                        *to = o + points_at;
                    }
                    for (to, &o) in face_offsets.iter_mut().zip(&block.face_offsets) {
                        *to = if o < 0 { o } else { o + faces_at };
                    }
                },
            );
    }

    /// The cells `range` of `mesh` (whose `Mesh::cell_faces` are
    /// `cell_faces`), offsets counted from the range's start; `face_offsets`
    /// holds one entry per cell even without polyhedra.
    fn of_range(mesh: &Mesh, cell_faces: &(Vec<u32>, Vec<Label>), range: Range<usize>) -> Self {
        let (cell_offsets, cell_faces) = cell_faces;
        let mut cells = Self {
            types: Vec::with_capacity(range.len()),
            connectivity: Vec::new(),
            offsets: vec![0],
            faces: Vec::new(),
            face_offsets: Vec::with_capacity(range.len()),
        };
        // Room for hexahedra (the most points of a linear cell): no growth
        // for a block of linear cells.
        cells.connectivity.reserve(8 * range.len());
        let mut faces = OutwardFaces::default();
        let mut order = Vec::new();
        let mut points = LinearPoints::new();
        for c in range {
            let list = &cell_faces[cell_offsets[c] as usize..cell_offsets[c + 1] as usize];
            if let Some(cell_type) =
                SmallCell::gather(mesh, c, list).and_then(|small| linear_cell(&small, &mut points))
            {
                cells.types.push(cell_type);
                cells.connectivity.extend_from_slice(points.as_slice());
                cells.face_offsets.push(-1);
                cells.offsets.push(cells.connectivity.len() as i64);
            } else {
                faces.gather(mesh, c, list);
                cells.push_general(&faces, &mut order);
            }
        }
        cells
    }

    /// [`Self::of_range`] with every cell taken by the general path (the
    /// reference the fast path of the linear cells is tested against).
    #[cfg(test)]
    fn of_range_general(
        mesh: &Mesh,
        cell_faces: &(Vec<u32>, Vec<Label>),
        range: Range<usize>,
    ) -> Self {
        let (cell_offsets, cell_faces) = cell_faces;
        let mut cells = Self {
            types: Vec::new(),
            connectivity: Vec::new(),
            offsets: vec![0],
            faces: Vec::new(),
            face_offsets: Vec::new(),
        };
        let mut faces = OutwardFaces::default();
        let mut order = Vec::new();
        for c in range {
            faces.gather(
                mesh,
                c,
                &cell_faces[cell_offsets[c] as usize..cell_offsets[c + 1] as usize],
            );
            cells.push_general(&faces, &mut order);
        }
        cells
    }

    /// Adds the cell whose outward faces are `faces`: a linear cell when its
    /// faces connect like one, else a polyhedron (`order` is scratch space).
    fn push_general(&mut self, faces: &OutwardFaces, order: &mut Vec<Label>) {
        let mut points = LinearPoints::new();
        if let Some(cell_type) = linear_cell(faces, &mut points) {
            self.types.push(cell_type);
            self.connectivity.extend_from_slice(points.as_slice());
            self.face_offsets.push(-1);
        } else {
            self.types.push(VTK_POLYHEDRON);
            order.clear();
            order.extend_from_slice(&faces.points);
            order.sort_unstable();
            order.dedup();
            self.connectivity.extend_from_slice(order);
            self.faces.push(faces.len() as Label);
            for face in faces.iter() {
                self.faces.push(face.len() as Label);
                self.faces.extend_from_slice(face);
            }
            self.face_offsets.push(self.faces.len() as i64);
        }
        self.offsets.push(self.connectivity.len() as i64);
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

/// The points of a linear cell in VTK's order (at most a hexahedron's 8).
struct LinearPoints {
    points: [Label; 8],
    len: usize,
}

impl LinearPoints {
    fn new() -> Self {
        Self {
            points: [0; 8],
            len: 0,
        }
    }

    fn push(&mut self, p: Label) {
        self.points[self.len] = p;
        self.len += 1;
    }

    fn as_slice(&self) -> &[Label] {
        &self.points[..self.len]
    }
}

/// One cell of 4 to 6 faces of 3 or 4 points each (every cell that can be
/// linear), each face oriented out of the cell, held in fixed arrays: the
/// fast path of [`VtkCells::of_range`], which allocates nothing per cell;
/// [`linear_cell`] reads it as it reads the general path's [`OutwardFaces`].
struct SmallCell {
    n_faces: usize,
    sizes: [usize; 6],
    points: [[Label; 4]; 6],
}

impl SmallCell {
    /// The outward faces of `cell` (its mesh faces `faces`); `None` when it
    /// has fewer than 4 or more than 6 faces, or a face of more than 4 or
    /// fewer than 3 points (no linear cell: the general path takes it).
    fn gather(mesh: &Mesh, cell: usize, faces: &[Label]) -> Option<Self> {
        if !(4..=6).contains(&faces.len()) {
            return None;
        }
        let (mesh_faces, owner) = (mesh.faces(), mesh.owner());
        let mut small = Self {
            n_faces: faces.len(),
            sizes: [0; 6],
            points: [[0; 4]; 6],
        };
        for (k, &f) in faces.iter().enumerate() {
            let f = f as usize;
            let face = mesh_faces.face(f);
            if !(3..=4).contains(&face.len()) {
                return None;
            }
            let to = &mut small.points[k][..face.len()];
            to.copy_from_slice(face);
            // polyMesh faces point out of their owner.
            if owner[f] as usize != cell {
                to.reverse();
            }
            small.sizes[k] = face.len();
        }
        Some(small)
    }
}

impl CellFaces for SmallCell {
    fn n_faces(&self) -> usize {
        self.n_faces
    }

    fn face(&self, i: usize) -> &[Label] {
        &self.points[i][..self.sizes[i]]
    }
}

impl CellFaces for OutwardFaces {
    fn n_faces(&self) -> usize {
        self.len()
    }

    fn face(&self, i: usize) -> &[Label] {
        OutwardFaces::face(self, i)
    }
}

/// One cell's faces, each oriented out of the cell, as [`linear_cell`]
/// reads them: the general path's [`OutwardFaces`] or the fast path's
/// [`SmallCell`].
trait CellFaces {
    fn n_faces(&self) -> usize;

    fn face(&self, i: usize) -> &[Label];

    fn faces(&self) -> impl Iterator<Item = &[Label]> + '_ {
        (0..self.n_faces()).map(|i| self.face(i))
    }
}

/// Puts the points of a tetrahedron, pyramid, prism or hexahedron in VTK's
/// order with positive volume and returns its VTK type; `None` for any other
/// cell, or one whose faces do not connect like that shape's.
fn linear_cell(faces: &impl CellFaces, order: &mut LinearPoints) -> Option<u8> {
    order.len = 0;
    let with_size = |n: usize| faces.faces().find(|f| f.len() == n);
    let (cell_type, vtk_faces) = match CellShape::from_face_sizes(faces.faces().map(<[_]>::len)) {
        CellShape::Tetrahedron => {
            // VTK: the normal of (0, 1, 2) points to 3, so the base is an outward face reversed.
            let base = faces.face(0);
            for p in [base[0], base[2], base[1], point_off(faces, base)?] {
                order.push(p);
            }
            (VTK_TETRA, TETRA_FACES)
        }
        CellShape::Pyramid => {
            // VTK: the normal of (0, 1, 2, 3) points to the apex 4.
            let base = with_size(4)?;
            for p in [base[0], base[3], base[2], base[1], point_off(faces, base)?] {
                order.push(p);
            }
            (VTK_PYRAMID, PYRAMID_FACES)
        }
        CellShape::Prism => {
            // VTK: the normal of (0, 1, 2) points away from (3, 4, 5): an outward triangle as it is.
            // (vtkCellValidator accepts this order; VTK 9.2's MeshQuality wedge volume, which
            // follows Verdict's opposite convention, reports it negative.)
            let base = with_size(3)?;
            for &p in base {
                order.push(p);
            }
            for &p in base {
                order.push(across_edge(faces, base, p)?);
            }
            (VTK_WEDGE, WEDGE_FACES)
        }
        CellShape::Hexahedron => {
            // VTK: the normal of (0, 1, 2, 3) points to (4, 5, 6, 7), point 4 above 0 and so on.
            let base = faces.face(0);
            for p in [base[0], base[3], base[2], base[1]] {
                order.push(p);
            }
            for i in 0..4 {
                order.push(across_edge(faces, base, order.points[i])?);
            }
            (VTK_HEXAHEDRON, HEXAHEDRON_FACES)
        }
        CellShape::Polyhedron => return None,
    };
    matches_faces(faces.n_faces(), faces.faces(), order.as_slice(), vtk_faces).then_some(cell_type)
}

/// A point of the cell that is not on `base` (the first, face by face).
fn point_off(faces: &impl CellFaces, base: &[Label]) -> Option<Label> {
    faces.faces().flatten().copied().find(|p| !base.contains(p))
}

/// The point joined to `p` by an edge that leaves `base`.
fn across_edge(faces: &impl CellFaces, base: &[Label], p: Label) -> Option<Label> {
    faces.faces().find_map(|face| {
        let n = face.len();
        let i = face.iter().position(|&q| q == p)?;
        [face[(i + 1) % n], face[(i + n - 1) % n]]
            .into_iter()
            .find(|q| !base.contains(q))
    })
}

/// Whether the cell's faces are exactly VTK's faces of `order` (as point sets):
/// then `order` is the cell, not just a guess from face sizes.
///
/// Each face is taken once, as the set of the positions in `order` of its
/// points (one bit each: a linear cell has at most 8 points; none where a
/// point is not in `order`); a face of a VTK face's size holds all of that
/// face's points exactly when the two sets are equal, since the points of
/// `order` are distinct. (Was: every point of every VTK face looked up in
/// every face of the cell, the costliest step of the VTK cells.)
fn matches_faces<'f>(
    n_faces: usize,
    faces: impl Iterator<Item = &'f [Label]>,
    order: &[Label],
    vtk_faces: &[&[usize]],
) -> bool {
    if !distinct(order) || n_faces != vtk_faces.len() {
        return false;
    }
    // (size, positions) per face; VTK's linear cells have at most 6 faces.
    let mut face_sets = [(0, 0u16); 6];
    for (set, face) in face_sets.iter_mut().zip(faces) {
        let positions = face.iter().try_fold(0u16, |bits, p| {
            order.iter().position(|q| q == p).map(|i| bits | 1 << i)
        });
        *set = (face.len(), positions.unwrap_or(0));
    }
    vtk_faces.iter().all(|vtk_face| {
        let want = vtk_face.iter().fold(0u16, |bits, &i| bits | 1 << i);
        face_sets
            .iter()
            .any(|&(size, positions)| size == vtk_face.len() && positions == want)
    })
}

/// Whether the points of `order` are distinct (a cell's point order holds
/// each point once).
fn distinct(order: &[Label]) -> bool {
    order
        .iter()
        .enumerate()
        .all(|(i, p)| !order[..i].contains(p))
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

/// The `.vtu` of the cells `cells` of `mesh` (all of them, or a piece using
/// only the mesh points `points`) with their fields (one value per cell of
/// `cells`, or per mesh cell with `field_cells` giving the mesh cell of
/// each), ready to write.
fn cells_file<'a>(
    mesh: &'a Mesh,
    cells: &'a VtkCells,
    points: Option<&'a [Label]>,
    cell_fields: &[Field<'a>],
    field_cells: Option<&'a [Label]>,
    encoding: VtkEncoding,
) -> VtkFile<'a> {
    let mut file = VtkFile::new("UnstructuredGrid", encoding);
    file.xml += &format!(
        "<UnstructuredGrid>\n<Piece NumberOfPoints=\"{}\" NumberOfCells=\"{}\">\n",
        points.map_or(mesh.n_points(), <[_]>::len),
        cells.types.len()
    );
    file.points(mesh.points(), points);
    file.xml += "<Cells>\n";
    file.labels("connectivity", &cells.connectivity);
    file.integers("offsets", &cells.offsets[1..]);
    let types = &cells.types;
    file.array_in(
        "types",
        1,
        types.len(),
        move |i| types[i],
        memory_bytes(types),
    );
    if !cells.faces.is_empty() {
        file.labels("faces", &cells.faces);
        file.integers("faceoffsets", &cells.face_offsets);
    }
    file.xml += "</Cells>\n";
    file.cell_data(cell_fields, field_cells);
    file.xml += "</Piece>\n</UnstructuredGrid>\n";
    file
}

/// The `.pvtu` of `n_ranks` pieces `processorK.vtu` (in its directory) with
/// the cell fields `fields`.
fn pvtu(n_ranks: usize, fields: &[Field]) -> String {
    let mut xml = vtk_file_header("PUnstructuredGrid", false)
        + "<PUnstructuredGrid GhostLevel=\"0\">\n<PPoints>\n\
           <PDataArray type=\"Float64\" Name=\"Points\" NumberOfComponents=\"3\"/>\n\
           </PPoints>\n<PCellData>\n";
    for f in fields {
        xml += &format!(
            "<PDataArray type=\"Float64\" Name=\"{}\" NumberOfComponents=\"{}\"/>\n",
            escape(f.name),
            f.components()
        );
    }
    xml += "</PCellData>\n";
    for rank in 0..n_ranks {
        xml += &format!("<Piece Source=\"processor{rank}.vtu\"/>\n");
    }
    xml + "</PUnstructuredGrid>\n</VTKFile>\n"
}

/// The `.vtp` of a patch's faces with their fields, ready to write.
fn polygons_file<'a>(
    mesh: &'a Mesh,
    polygons: &'a PatchPolygons,
    face_fields: &[Field<'a>],
    encoding: VtkEncoding,
) -> VtkFile<'a> {
    let mut file = VtkFile::new("PolyData", encoding);
    file.xml += &format!(
        "<PolyData>\n<Piece NumberOfPoints=\"{}\" NumberOfVerts=\"0\" NumberOfLines=\"0\" \
         NumberOfStrips=\"0\" NumberOfPolys=\"{}\">\n",
        polygons.points.len(),
        polygons.offsets.len() - 1
    );
    file.points(mesh.points(), Some(&polygons.points));
    file.xml += "<Polys>\n";
    file.labels("connectivity", &polygons.connectivity);
    file.integers("offsets", &polygons.offsets[1..]);
    file.xml += "</Polys>\n";
    file.cell_data(face_fields, None);
    file.xml += "</Piece>\n</PolyData>\n";
    file
}

/// Number types of VTK data arrays.
trait VtkNumber: Copy + Send + Sync {
    const TYPE: &'static str;
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    /// The little-endian bytes into `out`, of exactly `SIZE` bytes.
    fn put_at(self, out: &mut [u8]);
    fn text(self, out: &mut String);
}

/// `VtkNumber` for a primitive number: VTK's type name, its little-endian
/// bytes, and its text (`{:?}` for floats: the shortest text that reads back
/// to the same value, with an exponent where shorter, which VTK parses).
macro_rules! vtk_number {
    ($($t:ty => $name:literal),*) => {$(
        impl VtkNumber for $t {
            const TYPE: &'static str = $name;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn put_at(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn text(self, out: &mut String) {
                use fmt::Write as _;
                let _ = write!(out, "{self:?}");
            }
        }
    )*};
}

vtk_number!(f64 => "Float64", i64 => "Int64", i32 => "Int32", u8 => "UInt8");

/// The values of one data array, read by index: encoded straight from the
/// caller's slices, in any order of ranges (zlib blocks in parallel).
trait ArrayValues: Sync {
    fn len(&self) -> usize;
    fn value_size(&self) -> usize;
    /// Little-endian bytes of values `range`, appended to `out`.
    fn bytes(&self, range: Range<usize>, out: &mut Vec<u8>);
    /// Little-endian bytes of values `range` into `out`, which has exactly
    /// their size.
    fn encode(&self, range: Range<usize>, out: &mut [u8]);
    /// Values `range` as text, each followed by a space.
    fn text(&self, range: Range<usize>, out: &mut String);
    /// Every value's little-endian bytes, in order, where they lie so in
    /// memory already (the caller's slice on a little-endian host): written
    /// as they are, with no encoding.
    fn in_memory(&self) -> Option<&[u8]> {
        None
    }
}

/// Value `i` is `get(i)`.
struct Indexed<T, F> {
    len: usize,
    get: F,
    number: PhantomData<T>,
}

impl<T: VtkNumber, F: Fn(usize) -> T + Sync> ArrayValues for Indexed<T, F> {
    fn len(&self) -> usize {
        self.len
    }
    fn value_size(&self) -> usize {
        T::SIZE
    }
    fn bytes(&self, range: Range<usize>, out: &mut Vec<u8>) {
        out.reserve(range.len() * T::SIZE);
        for i in range {
            (self.get)(i).put(out);
        }
    }
    fn encode(&self, range: Range<usize>, out: &mut [u8]) {
        debug_assert_eq!(out.len(), range.len() * T::SIZE);
        for (to, i) in out.chunks_exact_mut(T::SIZE).zip(range) {
            (self.get)(i).put_at(to);
        }
    }
    fn text(&self, range: Range<usize>, out: &mut String) {
        for i in range {
            (self.get)(i).text(out);
            out.push(' ');
        }
    }
}

/// Values read by index (`values`, for text and for other hosts) whose
/// bytes also lie in memory as the file stores them (`memory`).
struct InMemory<'a, V> {
    values: V,
    memory: &'a [u8],
}

impl<V: ArrayValues> ArrayValues for InMemory<'_, V> {
    fn len(&self) -> usize {
        self.values.len()
    }
    fn value_size(&self) -> usize {
        self.values.value_size()
    }
    fn bytes(&self, range: Range<usize>, out: &mut Vec<u8>) {
        self.values.bytes(range, out)
    }
    fn encode(&self, range: Range<usize>, out: &mut [u8]) {
        let size = self.value_size();
        out.copy_from_slice(&self.memory[range.start * size..range.end * size]);
    }
    fn text(&self, range: Range<usize>, out: &mut String) {
        self.values.text(range, out)
    }
    fn in_memory(&self) -> Option<&[u8]> {
        Some(self.memory)
    }
}

/// Numbers whose memory is their little-endian bytes on a little-endian
/// host, with no padding between or inside them.
///
/// # Safety
/// Implemented only for types of plain numbers without padding.
unsafe trait Plain: Copy {}
// SAFETY: primitive numbers.
unsafe impl Plain for f64 {}
// SAFETY: primitive numbers.
unsafe impl Plain for i64 {}
// SAFETY: primitive numbers.
unsafe impl Plain for u32 {}
// SAFETY: primitive numbers.
unsafe impl Plain for u8 {}
// SAFETY: nalgebra's column vector is `repr(C)` over `[[f64; 3]; 1]`:
// three f64 in a row, no padding (checked at compile time below).
unsafe impl Plain for Vec3 {}
const _: () = assert!(std::mem::size_of::<Vec3>() == 3 * std::mem::size_of::<f64>());

/// The bytes of `values` as they lie in memory when that is their
/// little-endian encoding (little-endian hosts); `None` elsewhere, where
/// they are encoded value by value.
fn memory_bytes<T: Plain>(values: &[T]) -> Option<&[u8]> {
    if cfg!(target_endian = "little") {
        // SAFETY: `T: Plain` has no padding, so every byte of the slice is
        // initialised; u8 has no alignment; the length is the slice's size.
        Some(unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        })
    } else {
        None
    }
}

/// Bytes encoded at a time while streaming an array to its file.
const CHUNK_BYTES: usize = 1 << 16;
/// Bytes of one write of [`VtkFile::write_appended`] (but arrays written
/// from memory, each in one write): few system calls, and two buffers of
/// this size per file written.
const WRITE_BYTES: usize = 8 << 20;
/// Bytes encoded by one thread at a time into a piece of [`WRITE_BYTES`].
const ENCODE_TASK_BYTES: usize = 256 << 10;
/// Uncompressed bytes per zlib block (VTK's default block size).
pub const ZLIB_BLOCK_BYTES: usize = 1 << 15;
/// zlib level: ParaView's default (vtkZLibDataCompressor).
const ZLIB_LEVEL: u32 = 5;
/// Values per line of an ascii array.
const ASCII_PER_LINE: usize = 6;

/// How one data array goes into its file.
enum Stored<'a> {
    /// Raw appended block or inline text, encoded while writing.
    Streamed(Box<dyn ArrayValues + 'a>),
    /// The zlib header and compressed blocks, ready to write.
    Compressed(Vec<u8>),
}

/// A VTK XML file being assembled: its XML, with the data arrays in order
/// (see the module documentation for the encodings).
struct VtkFile<'a> {
    encoding: VtkEncoding,
    /// XML before each array, and after the last one (`xml`).
    parts: Vec<(String, Stored<'a>)>,
    xml: String,
    appended_bytes: u64,
}

impl<'a> VtkFile<'a> {
    fn new(kind: &str, encoding: VtkEncoding) -> Self {
        Self {
            encoding,
            parts: Vec::new(),
            xml: vtk_file_header(kind, encoding == VtkEncoding::Zlib),
            appended_bytes: 0,
        }
    }

    /// Array `name` of `len` values `get(0..len)`, `components` per tuple.
    fn array<T: VtkNumber + 'a>(
        &mut self,
        name: &str,
        components: usize,
        len: usize,
        get: impl Fn(usize) -> T + Sync + 'a,
    ) {
        self.array_in(name, components, len, get, None);
    }

    /// [`Self::array`] whose values' bytes are `memory` where given (see
    /// [`memory_bytes`]): raw and zlib arrays are then written or
    /// compressed from it, text still value by value.
    fn array_in<T: VtkNumber + 'a>(
        &mut self,
        name: &str,
        components: usize,
        len: usize,
        get: impl Fn(usize) -> T + Sync + 'a,
        memory: Option<&'a [u8]>,
    ) {
        let values = Indexed {
            len,
            get,
            number: PhantomData,
        };
        let values: Box<dyn ArrayValues + 'a> = match memory {
            Some(memory) => {
                assert_eq!(memory.len(), len * T::SIZE, "the bytes of {len} values");
                Box::new(InMemory { values, memory })
            }
            None => Box::new(values),
        };
        let tag = format!(
            "<DataArray type=\"{}\" Name=\"{}\" NumberOfComponents=\"{components}\" format=",
            T::TYPE,
            escape(name)
        );
        let stored = match self.encoding {
            VtkEncoding::Ascii => {
                self.xml += &tag;
                self.xml += "\"ascii\">\n";
                Stored::Streamed(values)
            }
            VtkEncoding::Binary => {
                self.xml += &format!("{tag}\"appended\" offset=\"{}\"/>\n", self.appended_bytes);
                self.appended_bytes += 8 + (len * T::SIZE) as u64;
                Stored::Streamed(values)
            }
            VtkEncoding::Zlib => {
                self.xml += &format!("{tag}\"appended\" offset=\"{}\"/>\n", self.appended_bytes);
                let block = zlib_block(&*values);
                self.appended_bytes += block.len() as u64;
                Stored::Compressed(block)
            }
        };
        self.parts.push((std::mem::take(&mut self.xml), stored));
    }

    /// Point or face labels, Int32 when every label fits: then the labels'
    /// own bytes, since a label below 2^31 has the bytes of the same Int32.
    fn labels(&mut self, name: &str, labels: &'a [Label]) {
        if labels.par_iter().all(|&l| i32::try_from(l).is_ok()) {
            let memory = memory_bytes(labels);
            self.array_in(name, 1, labels.len(), move |i| labels[i] as i32, memory);
        } else {
            self.array(name, 1, labels.len(), move |i| i64::from(labels[i]));
        }
    }

    /// Offsets (-1 allowed), Int32 when every value fits.
    fn integers(&mut self, name: &str, values: &'a [i64]) {
        if values.par_iter().all(|&v| i32::try_from(v).is_ok()) {
            self.array(name, 1, values.len(), move |i| values[i] as i32);
        } else {
            let memory = memory_bytes(values);
            self.array_in(name, 1, values.len(), move |i| values[i], memory);
        }
    }

    /// The mesh points, or those listed in `ids`.
    fn points(&mut self, points: &'a [Vec3], ids: Option<&'a [Label]>) {
        self.xml += "<Points>\n";
        let n = ids.map_or(points.len(), <[_]>::len);
        match ids {
            None => self.array_in(
                "Points",
                3,
                3 * n,
                move |i| points[i / 3][i % 3],
                memory_bytes(points),
            ),
            Some(ids) => self.array("Points", 3, 3 * n, move |i| {
                points[ids[i / 3] as usize][i % 3]
            }),
        }
        self.xml += "</Points>\n";
    }

    /// Cell (or face) fields, read at `ids` when given.
    fn cell_data(&mut self, fields: &[Field<'a>], ids: Option<&'a [Label]>) {
        self.xml += "<CellData>\n";
        for field in fields {
            match (field.values, ids) {
                (FieldValues::Scalar(v), None) => {
                    self.array_in(field.name, 1, v.len(), |i| v[i], memory_bytes(v))
                }
                (FieldValues::Scalar(v), Some(ids)) => {
                    self.array(field.name, 1, ids.len(), |i| v[ids[i] as usize])
                }
                (FieldValues::Vector(v), None) => self.array_in(
                    field.name,
                    3,
                    3 * v.len(),
                    |i| v[i / 3][i % 3],
                    memory_bytes(v),
                ),
                (FieldValues::Vector(v), Some(ids)) => {
                    self.array(field.name, 3, 3 * ids.len(), |i| {
                        v[ids[i / 3] as usize][i % 3]
                    })
                }
                (FieldValues::Uniform { value, len }, ids) => {
                    self.array(field.name, 1, ids.map_or(len, <[_]>::len), move |_| value)
                }
                (FieldValues::Index { first, len }, None) => {
                    self.array(field.name, 1, len, move |i| (first + i) as f64)
                }
                (FieldValues::Index { first, .. }, Some(ids)) => {
                    self.array(field.name, 1, ids.len(), move |i| {
                        (first + ids[i] as usize) as f64
                    })
                }
            }
        }
        self.xml += "</CellData>\n";
    }

    /// Writes the file (atomically) and returns its size in bytes: appended
    /// data (raw or zlib) by [`Self::write_appended`], ascii in one stream.
    fn write(self, path: &Path) -> Result<u64, OutputError> {
        match self.encoding {
            VtkEncoding::Ascii => self.write_streamed(path),
            VtkEncoding::Binary | VtkEncoding::Zlib => self.write_appended(path, WRITE_BYTES),
        }
    }

    /// Writes a file with appended data (raw or zlib) in writes of about
    /// `write_bytes`: an array whose bytes lie in memory as the file stores
    /// them in one write from there; any other encoded in pieces, each by
    /// several threads while the piece before it is written; small arrays
    /// and the XML gathered into one buffer. The bytes are those of
    /// [`Self::write_streamed`].
    fn write_appended(self, path: &Path, write_bytes: usize) -> Result<u64, OutputError> {
        let mut head = String::new();
        let mut blocks = Vec::with_capacity(self.parts.len());
        for (xml, stored) in self.parts {
            head += &xml;
            blocks.push(stored);
        }
        head += &self.xml;
        head += "<AppendedData encoding=\"raw\">\n_";
        let mut size = 0;
        write_atomic_file(path, |file| {
            let mut out = Appender::new(file, write_bytes);
            out.put(head.as_bytes())?;
            for stored in &blocks {
                match stored {
                    Stored::Streamed(values) => {
                        let n_bytes = (values.len() * values.value_size()) as u64;
                        out.put(&n_bytes.to_le_bytes())?;
                        match values.in_memory() {
                            Some(bytes) => out.put(bytes)?,
                            None => out.encode(&**values)?,
                        }
                    }
                    Stored::Compressed(block) => out.put(block)?,
                }
            }
            out.put(b"\n</AppendedData>\n</VTKFile>\n")?;
            size = out.finish()?;
            Ok(())
        })?;
        Ok(size)
    }

    /// Writes the file in one stream, encoding raw and ascii arrays chunk
    /// by chunk.
    fn write_streamed(self, path: &Path) -> Result<u64, OutputError> {
        let mut bytes = 0u64;
        write_atomic(path, |out| {
            let mut out = CountingWriter {
                inner: out,
                count: 0,
            };
            let ascii = self.encoding == VtkEncoding::Ascii;
            let mut appended = Vec::new();
            for (xml, stored) in self.parts {
                out.write_all(xml.as_bytes())?;
                match stored {
                    Stored::Streamed(values) if ascii => {
                        write_text_values(&*values, &mut out)?;
                        out.write_all(b"\n</DataArray>\n")?;
                    }
                    stored => appended.push(stored),
                }
            }
            out.write_all(self.xml.as_bytes())?;
            if !ascii {
                out.write_all(b"<AppendedData encoding=\"raw\">\n_")?;
                for stored in appended {
                    match stored {
                        Stored::Streamed(values) => write_raw_block(&*values, &mut out)?,
                        Stored::Compressed(block) => out.write_all(&block)?,
                    }
                }
                out.write_all(b"\n</AppendedData>\n")?;
            }
            out.write_all(b"</VTKFile>\n")?;
            bytes = out.count;
            Ok(())
        })?;
        Ok(bytes)
    }
}

/// Writes a file front to back in large writes (see
/// [`VtkFile::write_appended`]): `pending` holds bytes not yet written, at
/// most about `write_bytes` of them.
struct Appender<'f> {
    file: &'f std::fs::File,
    write_bytes: usize,
    pending: Vec<u8>,
    /// The buffer a piece is encoded into while `pending` is written.
    spare: Vec<u8>,
    written: u64,
}

impl<'f> Appender<'f> {
    fn new(file: &'f std::fs::File, write_bytes: usize) -> Self {
        Self {
            file,
            write_bytes,
            pending: Vec::new(),
            spare: Vec::new(),
            written: 0,
        }
    }

    /// Appends `bytes`: into `pending` when they fit, else after it, in one
    /// write when they are many.
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.pending.len() + bytes.len() > self.write_bytes {
            self.flush()?;
            if bytes.len() >= self.write_bytes {
                (&*self.file).write_all(bytes)?;
                self.written += bytes.len() as u64;
                return Ok(());
            }
        }
        self.pending.extend_from_slice(bytes);
        Ok(())
    }

    /// Appends the values' bytes, encoded a piece of about `write_bytes` at
    /// a time by several threads while the bytes before it are written.
    fn encode(&mut self, values: &dyn ArrayValues) -> std::io::Result<()> {
        let size = values.value_size();
        let per_piece = (self.write_bytes / size).max(1);
        for start in (0..values.len()).step_by(per_piece) {
            let range = start..values.len().min(start + per_piece);
            // Grows only the first time: the pieces but the last are of one size.
            self.spare.resize(range.len() * size, 0);
            let (file, pending, spare) = (self.file, &self.pending, &mut self.spare);
            let (written, ()) = rayon::join(
                || (&*file).write_all(pending),
                || encode_in_parallel(values, range, spare),
            );
            written?;
            self.written += self.pending.len() as u64;
            std::mem::swap(&mut self.pending, &mut self.spare);
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.file).write_all(&self.pending)?;
        self.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Writes what is pending; returns the bytes written in all.
    fn finish(mut self) -> std::io::Result<u64> {
        self.flush()?;
        Ok(self.written)
    }
}

/// Encodes values `range` into `out` (their size exactly), in parallel
/// pieces of [`ENCODE_TASK_BYTES`].
fn encode_in_parallel(values: &dyn ArrayValues, range: Range<usize>, out: &mut [u8]) {
    let size = values.value_size();
    let per_task = (ENCODE_TASK_BYTES / size).max(1);
    out.par_chunks_mut(per_task * size)
        .enumerate()
        .for_each(|(k, piece)| {
            let start = range.start + k * per_task;
            values.encode(start..start + piece.len() / size, piece);
        });
}

/// Counts the bytes written through it.
struct CountingWriter<'w> {
    inner: &'w mut dyn Write,
    count: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A raw appended block: the UInt64 byte count, then the values.
fn write_raw_block(values: &dyn ArrayValues, out: &mut dyn Write) -> std::io::Result<()> {
    let per_chunk = CHUNK_BYTES / values.value_size();
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + 8);
    chunk.extend_from_slice(&((values.len() * values.value_size()) as u64).to_le_bytes());
    for start in (0..values.len()).step_by(per_chunk) {
        values.bytes(start..values.len().min(start + per_chunk), &mut chunk);
        out.write_all(&chunk)?;
        chunk.clear();
    }
    out.write_all(&chunk)
}

/// The values as text, a few per line.
fn write_text_values(values: &dyn ArrayValues, out: &mut dyn Write) -> std::io::Result<()> {
    let mut text = String::with_capacity(CHUNK_BYTES + 64);
    for start in (0..values.len()).step_by(ASCII_PER_LINE) {
        values.text(start..values.len().min(start + ASCII_PER_LINE), &mut text);
        text.push('\n');
        if text.len() >= CHUNK_BYTES {
            out.write_all(text.as_bytes())?;
            text.clear();
        }
    }
    out.write_all(text.as_bytes())
}

/// The values compressed as VTK's zlib compressor stores an appended array:
/// UInt64 header `[blocks, block size, last block size, compressed sizes...]`,
/// then the compressed blocks; the blocks are compressed in parallel.
fn zlib_block(values: &dyn ArrayValues) -> Vec<u8> {
    let size = values.value_size();
    let total = values.len() * size;
    let per_block = ZLIB_BLOCK_BYTES / size;
    let n_blocks = values.len().div_ceil(per_block);
    let compressed: Vec<Vec<u8>> = (0..n_blocks)
        .into_par_iter()
        .map_init(Vec::<u8>::new, |encoded, k| {
            let range = k * per_block..values.len().min((k + 1) * per_block);
            let raw = match values.in_memory() {
                Some(memory) => &memory[range.start * size..range.end * size],
                None => {
                    encoded.resize(range.len() * size, 0);
                    values.encode(range, encoded);
                    &encoded[..]
                }
            };
            let mut z = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(raw.len() / 2),
                flate2::Compression::new(ZLIB_LEVEL),
            );
            z.write_all(raw)
                .and_then(|()| z.finish())
                .expect("compressing into memory cannot fail")
        })
        .collect();
    let header = [n_blocks, ZLIB_BLOCK_BYTES, total % ZLIB_BLOCK_BYTES]
        .into_iter()
        .chain(compressed.iter().map(Vec::len));
    let mut out =
        Vec::with_capacity(8 * (3 + n_blocks) + compressed.iter().map(Vec::len).sum::<usize>());
    for n in header {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    for block in compressed {
        out.extend_from_slice(&block);
    }
    out
}

fn vtk_file_header(kind: &str, zlib: bool) -> String {
    let compressor = if zlib {
        " compressor=\"vtkZLibDataCompressor\""
    } else {
        ""
    };
    format!(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"{kind}\" version=\"1.0\" \
         byte_order=\"LittleEndian\" header_type=\"UInt64\"{compressor}>\n"
    )
}

/// Writes `text` to `path` atomically; returns its length.
fn write_text(path: &Path, text: &str) -> Result<u64, OutputError> {
    write_atomic(path, |out| out.write_all(text.as_bytes()))?;
    Ok(text.len() as u64)
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

/// The `(timestep, file)` attributes of each `<DataSet>` of a `.pvd`
/// collection's text, in file order, as written; `None` if an entry lacks
/// either (a series this writer did not write).
pub fn pvd_datasets(pvd_text: &str) -> Option<Vec<(&str, &str)>> {
    pvd_text
        .split("<DataSet")
        .skip(1)
        .map(|entry| {
            let attribute = |key: &str| {
                let at = entry.find(&format!("{key}=\""))? + key.len() + 2;
                let rest = &entry[at..];
                Some(&rest[..rest.find('"')?])
            };
            Some((attribute("timestep")?, attribute("file")?))
        })
        .collect()
}

/// The name of a case's VTK series: the case directory's name (of its
/// canonical path, so `.` names the directory), with characters other than
/// ASCII letters, digits, '_' and '-' replaced by '_'; `case` if none is left.
pub fn series_name_for(case_dir: &Path) -> String {
    let dir = case_dir
        .canonicalize()
        .unwrap_or_else(|_| case_dir.to_path_buf());
    let name: String = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "case".into()
    } else {
        name
    }
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

    #[test]
    fn pvd_datasets_reads_each_step_and_refuses_an_incomplete_one() {
        let text = "<VTKFile>\n<Collection>\n\
            <DataSet timestep=\"0.5\" group=\"\" part=\"0\" file=\"c_000000.vtm\"/>\n\
            <DataSet timestep=\"1\" group=\"\" part=\"0\" file=\"c_000001.vtm\"/>\n\
            </Collection>\n</VTKFile>\n";
        assert_eq!(
            pvd_datasets(text),
            Some(vec![("0.5", "c_000000.vtm"), ("1", "c_000001.vtm")])
        );
        assert_eq!(pvd_datasets("<Collection></Collection>"), Some(vec![]));
        let no_file = text.replace("file=\"c_000001.vtm\"", "");
        assert_eq!(pvd_datasets(&no_file), None);
    }

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
    fn cells_built_in_blocks_equal_one_block() {
        for mesh in [
            mixed_mesh(),
            crate::mesh::load("meshes/foam/polydual").unwrap(),
            crate::mesh::load("box:5x4x3:tet:perturb=0.2:renumber").unwrap(),
        ] {
            let whole = VtkCells::in_blocks(&mesh, mesh.n_cells());
            assert!(whole.types.len() == mesh.n_cells());
            // The one pass over the cells, unjoined.
            let mut one_pass = VtkCells::of_range(&mesh, &mesh.cell_faces(), 0..mesh.n_cells());
            if one_pass.faces.is_empty() {
                one_pass.face_offsets.clear();
            }
            assert_eq!(whole, one_pass);
            for block in [1, 2, 7] {
                assert_eq!(
                    VtkCells::in_blocks(&mesh, block),
                    whole,
                    "blocks of {block}"
                );
            }
        }
    }

    /// The fast path of the linear cells gives the arrays of the general
    /// path, bit for bit, on every shape and on cells that only look like a
    /// linear cell (which both make polyhedra).
    #[test]
    fn fast_path_gives_the_general_path_arrays() {
        let (points, faces, owner, _, patches) = crate::mesh::tests::unit_cube().into_parts();
        let mut labels = faces.labels().to_vec();
        labels.swap(1, 5);
        let not_a_hexahedron = Mesh::new(
            points,
            FaceList::uniform(4, labels).unwrap(),
            owner,
            vec![],
            patches,
        )
        .unwrap();
        let mut meshes: Vec<(&str, Mesh)> = [
            ("hexahedra", "box:6x5x4:perturb=0.2:renumber"),
            ("tetrahedra", "box:5x4x3:tet:perturb=0.2:renumber"),
            ("prisms", "box:5x4x3:prism:renumber"),
            ("2-D prisms", "box:6x5x1:2d:prism"),
            ("2-D", "box:6x5x1:2d"),
            ("Gmsh hybrid", "meshes/gmsh/pyramid_hybrid.v41.msh"),
            ("Gmsh prisms", "meshes/gmsh/prism_wedge.v22.msh"),
            ("polyhedra", "meshes/foam/polydual"),
        ]
        .into_iter()
        .map(|(name, spec)| (name, crate::mesh::load(spec).unwrap()))
        .collect();
        meshes.push(("mixed", mixed_mesh()));
        meshes.push(("not a hexahedron", not_a_hexahedron));
        let mut types = std::collections::BTreeSet::new();
        for (name, mesh) in &meshes {
            let cell_faces = mesh.cell_faces();
            let all = 0..mesh.n_cells();
            let general = VtkCells::of_range_general(mesh, &cell_faces, all.clone());
            let fast = VtkCells::of_range(mesh, &cell_faces, all);
            assert_eq!(fast, general, "{name}");
            types.extend(fast.types.iter().copied());
        }
        assert_eq!(
            types.into_iter().collect::<Vec<_>>(),
            [
                VTK_TETRA,
                VTK_HEXAHEDRON,
                VTK_WEDGE,
                VTK_PYRAMID,
                VTK_POLYHEDRON
            ],
            "every shape compared"
        );
    }

    /// [`matches_faces`] by its definition: every point of every VTK face
    /// is in a face of the cell of the same size.
    fn matches_faces_by_definition(
        faces: &OutwardFaces,
        order: &[Label],
        vtk_faces: &[&[usize]],
    ) -> bool {
        distinct(order)
            && faces.len() == vtk_faces.len()
            && vtk_faces.iter().all(|vtk_face| {
                faces.iter().any(|face| {
                    face.len() == vtk_face.len()
                        && vtk_face.iter().all(|&i| face.contains(&order[i]))
                })
            })
    }

    /// The face sets agree with the definition on every cell of linear and
    /// polyhedral meshes, for the cell's own point order and for orders
    /// with two points swapped, a point replaced or repeated.
    #[test]
    fn face_sets_match_as_the_definition() {
        let shapes: [(usize, &[&[usize]]); 4] = [
            (4, TETRA_FACES),
            (5, PYRAMID_FACES),
            (6, WEDGE_FACES),
            (8, HEXAHEDRON_FACES),
        ];
        let (mut agreed, mut matched) = (0, 0);
        for mesh in [
            mixed_mesh(),
            crate::mesh::load("meshes/foam/polydual").unwrap(),
            crate::mesh::load("box:3x3x2:tet:perturb=0.2").unwrap(),
            crate::mesh::load("box:3x2x2:perturb=0.2").unwrap(),
        ] {
            let (offsets, cell_faces) = mesh.cell_faces();
            let mut faces = OutwardFaces::default();
            for c in 0..mesh.n_cells() {
                faces.gather(
                    &mesh,
                    c,
                    &cell_faces[offsets[c] as usize..offsets[c + 1] as usize],
                );
                let mut linear = LinearPoints::new();
                linear_cell(&faces, &mut linear);
                let order = linear.as_slice().to_vec();
                let mut points = faces.points.clone();
                points.sort_unstable();
                points.dedup();
                for &(n, vtk_faces) in &shapes {
                    let mut orders = vec![order.clone(), points.clone()];
                    if order.len() == n {
                        for (i, j) in [(0, 1), (1, n - 1), (2, 3)] {
                            let mut swapped = order.clone();
                            swapped.swap(i, j);
                            orders.push(swapped);
                        }
                        let mut repeated = order.clone();
                        repeated[n - 1] = repeated[0];
                        orders.push(repeated);
                        let mut replaced = order.clone();
                        replaced[1] = Label::MAX;
                        orders.push(replaced);
                    }
                    for candidate in orders.iter().filter(|o| o.len() == n) {
                        let want = matches_faces_by_definition(&faces, candidate, vtk_faces);
                        assert_eq!(
                            matches_faces(faces.len(), faces.iter(), candidate, vtk_faces),
                            want,
                            "cell {c}"
                        );
                        agreed += 1;
                        matched += usize::from(want);
                    }
                }
            }
        }
        assert!(
            matched > 10 && agreed - matched > 10,
            "{matched} of {agreed}"
        );
    }

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

    /// Reads a VTK XML file of any of the three encodings back by hand,
    /// checking the byte layout: raw blocks (UInt64 count, bytes) and zlib
    /// blocks (UInt64 header, compressed blocks) laid end to end at the
    /// offsets the XML gives, nothing after the last; ascii text parsed back
    /// into the array's little-endian bytes.
    fn read_back(path: &Path) -> ReadBack {
        let bytes = fs::read(path).unwrap();
        let marker = b"<AppendedData encoding=\"raw\">\n_";
        let Some(at) = bytes.windows(marker.len()).position(|w| w == marker) else {
            return read_back_ascii(String::from_utf8(bytes).unwrap());
        };
        let xml = String::from_utf8(bytes[..at].to_vec()).unwrap();
        let zlib = tags(&xml, "VTKFile")[0].contains("compressor=\"vtkZLibDataCompressor\"");
        let data = &bytes[at + marker.len()..];
        let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap()) as usize;
        let mut arrays = HashMap::new();
        let mut offsets = Vec::new();
        let mut end = 0;
        for tag in tags(&xml, "DataArray") {
            assert_eq!(attr(tag, "format"), "appended");
            let offset: usize = attr(tag, "offset").parse().unwrap();
            offsets.push(offset);
            let values = if zlib {
                let (n_blocks, block, last) = (word(offset), word(offset + 8), word(offset + 16));
                assert_eq!(block, ZLIB_BLOCK_BYTES);
                let mut at = offset + 24 + 8 * n_blocks;
                let mut values = Vec::new();
                for k in 0..n_blocks {
                    let size = word(offset + 24 + 8 * k);
                    let mut z = flate2::read::ZlibDecoder::new(&data[at..at + size]);
                    let mut raw = Vec::new();
                    std::io::Read::read_to_end(&mut z, &mut raw).unwrap();
                    let expected = if k + 1 == n_blocks && last != 0 {
                        last
                    } else {
                        block
                    };
                    assert_eq!(raw.len(), expected, "block {k} of {n_blocks}");
                    values.extend(raw);
                    at += size;
                }
                end = end.max(at);
                values
            } else {
                let n = word(offset);
                end = end.max(offset + 8 + n);
                data[offset + 8..offset + 8 + n].to_vec()
            };
            let value = (
                attr(tag, "type").to_string(),
                attr(tag, "NumberOfComponents").parse().unwrap(),
                values,
            );
            arrays.insert(attr(tag, "Name").to_string(), value);
        }
        // Blocks in the order of the arrays, each right after the one before.
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
        assert_eq!(&data[end..], b"\n</AppendedData>\n</VTKFile>\n");
        ReadBack { xml, arrays }
    }

    fn read_back_ascii(text: String) -> ReadBack {
        let mut arrays = HashMap::new();
        for chunk in text.split("<DataArray").skip(1) {
            let tag = &chunk[..chunk.find('>').unwrap()];
            assert_eq!(attr(tag, "format"), "ascii");
            let body = &chunk[tag.len() + 1..chunk.find("</DataArray>").unwrap()];
            let vtk_type = attr(tag, "type");
            let mut bytes = Vec::new();
            for word in body.split_whitespace() {
                match vtk_type {
                    "Float64" => bytes.extend(word.parse::<f64>().unwrap().to_le_bytes()),
                    "Int64" => bytes.extend(word.parse::<i64>().unwrap().to_le_bytes()),
                    "Int32" => bytes.extend(word.parse::<i32>().unwrap().to_le_bytes()),
                    "UInt8" => bytes.push(word.parse::<u8>().unwrap()),
                    other => panic!("type {other}"),
                }
            }
            let value = (
                vtk_type.to_string(),
                attr(tag, "NumberOfComponents").parse().unwrap(),
                bytes,
            );
            arrays.insert(attr(tag, "Name").to_string(), value);
        }
        assert!(text.ends_with("</VTKFile>\n"));
        ReadBack { xml: text, arrays }
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

        /// An integer array (Int32 or Int64) as i64.
        fn i64s(&self, name: &str) -> Vec<i64> {
            let (t, n, bytes) = &self.arrays[name];
            assert_eq!(*n, 1, "array {name}");
            match t.as_str() {
                "Int32" => bytes
                    .chunks(4)
                    .map(|b| i64::from(i32::from_le_bytes(b.try_into().unwrap())))
                    .collect(),
                "Int64" => bytes
                    .chunks(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
                other => panic!("array {name} is {other}, not an integer type"),
            }
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
                let dir = crate::test_support::unique_temp_dir(&format!("fvpoisson_{name}"));
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
    /// the mesh; nothing lists the step until it is published; then rank 0's
    /// `.pvtu` lists every piece with the fields and the `.vtm`'s "internal"
    /// entry is a multi-piece data set of the pieces.
    #[test]
    fn distributed_series_writes_a_piece_per_rank_and_publishes_after_all() {
        let mesh = mixed_mesh();
        let (dir, keep) = test_dir("vtk_pieces");
        let n = mesh.n_cells() as Label;
        let all = VtkCells::new(&mesh);
        let p: Vec<f64> = (0..n).map(|c| f64::from(c) * 0.5 - 1.0).collect();
        let grad: Vec<Vec3> = (0..n).map(|c| Vec3::new(f64::from(c), 1.0, -2.0)).collect();
        let p_b = vec![3.0; mesh.n_faces() - mesh.n_internal_faces()];
        let mut total = 0;
        let mut ranks = Vec::new();
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
            ranks.push(series);
        }
        assert_eq!(total, mesh.n_cells());
        for listing in ["case_000000.vtm", "case.pvd", "case_000000/internal.pvtu"] {
            assert!(!dir.join(listing).exists(), "{listing} before publishing");
        }
        let e = ranks[2].write_step(1.0, &[], &[]).unwrap_err().to_string();
        assert!(e.contains("was not published"), "{e}");
        for series in &mut ranks {
            series.publish_step().unwrap();
        }
        assert!(ranks.iter().all(|s| s.n_steps() == 1));
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
        let internal = &vtm[vtm.find("<Piece").unwrap()..vtm.find("</Piece>").unwrap()];
        assert_eq!(attr(tags(&vtm, "Piece")[0], "name"), "internal");
        let pieces: Vec<&str> = tags(internal, "DataSet")
            .iter()
            .map(|t| attr(t, "file"))
            .collect();
        assert_eq!(
            pieces,
            [
                "case_000000/processor0.vtu",
                "case_000000/processor1.vtu",
                "case_000000/processor2.vtu"
            ]
        );
        assert_eq!(tags(&vtm, "DataSet").len(), 3 + mesh.patches().len());
        assert!(!dir.join("case_000000/internal.vtu").exists());
        assert!(dir.join("case.pvd").exists());
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// Every encoding writes the same values: raw, zlib (blocks of 32 KiB
    /// with the header VTK's reader expects) and ascii.
    #[test]
    fn series_round_trips_through_the_files() {
        for encoding in [VtkEncoding::Binary, VtkEncoding::Zlib, VtkEncoding::Ascii] {
            series_round_trips_in(encoding);
        }
    }

    fn series_round_trips_in(encoding: VtkEncoding) {
        let mesh = mixed_mesh();
        let geometry = mesh.geometry().unwrap();
        let (dir, keep) = test_dir(&format!("vtk_series_{encoding}"));
        let mut series = VtkSeries::new(&mesh, &dir, "case")
            .unwrap()
            .with_encoding(encoding);
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

    /// Arrays of many zlib blocks (a 20³ hex box: 70 KB of connectivity, 190 KB
    /// of points) read back equal to the raw ones, the last block partial
    /// or full as its size says.
    #[test]
    fn zlib_arrays_of_many_blocks_read_back() {
        let mesh = crate::mesh::load("box:20x20x20").unwrap();
        let (dir, keep) = test_dir("vtk_zlib_blocks");
        create_dir_all(&dir).unwrap();
        let p: Vec<f64> = (0..mesh.n_cells()).map(|c| (c as f64).sqrt()).collect();
        // 4096 values: exactly one full block, no partial one.
        let full: Vec<f64> = (0..ZLIB_BLOCK_BYTES / 8).map(|i| i as f64).collect();
        let mut sizes = Vec::new();
        for encoding in [VtkEncoding::Binary, VtkEncoding::Zlib] {
            let path = dir.join(format!("{encoding}.vtu"));
            let bytes = write_vtu(&path, &mesh, &[Field::scalar("p", &p)], encoding).unwrap();
            assert_eq!(bytes, fs::metadata(&path).unwrap().len());
            sizes.push(bytes);
            let vtu = read_back(&path);
            assert_eq!(vtu.f64s("p", 1), p);
            assert_eq!(vtu.f64s("Points", 3), flat(mesh.points()));
            assert_eq!(
                vtu.labels("connectivity"),
                VtkCells::new(&mesh).connectivity
            );
            let mut file = VtkFile::new("PolyData", encoding);
            file.array("full", 1, full.len(), |i| full[i]);
            let path = dir.join(format!("full_{encoding}.vtp"));
            file.write(&path).unwrap();
            assert_eq!(read_back(&path).f64s("full", 1), full);
        }
        assert!(
            sizes[1] < sizes[0] / 2,
            "zlib {} vs raw {} bytes",
            sizes[1],
            sizes[0]
        );
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// Files written in large writes, arrays from memory or encoded in
    /// parallel pieces, hold the bytes of the one-stream writer, which
    /// encodes value by value: raw and zlib; hexahedra, tetrahedra, prisms,
    /// polyhedra and a 2-D mesh; whole meshes, pieces (fields read at the
    /// piece's cells) and patches; writes of any size, so pieces cut values
    /// at every place.
    #[test]
    fn appended_writer_writes_the_bytes_of_the_streamed_one() {
        let meshes = [
            ("hex", crate::mesh::load("box:7x6x5:perturb=0.2").unwrap()),
            (
                "tet",
                crate::mesh::load("box:4x3x3:tet:perturb=0.2").unwrap(),
            ),
            ("prism", crate::mesh::load("box:4x4x3:prism").unwrap()),
            ("2d", crate::mesh::load("box:9x7x1:2d").unwrap()),
            ("mixed", mixed_mesh()),
        ];
        let (dir, keep) = test_dir("vtk_appended_writer");
        create_dir_all(&dir).unwrap();
        for (name, mesh) in &meshes {
            let geometry = mesh.geometry().unwrap();
            let cells = VtkCells::new(mesh);
            let p: Vec<f64> = geometry.cell_centres.iter().map(|c| c.x.sin()).collect();
            let grad: Vec<Vec3> = geometry
                .cell_centres
                .iter()
                .map(|c| c.map(f64::exp))
                .collect();
            let fields = [
                Field::scalar("p", &p),
                Field::vector("grad(p)", &grad),
                Field::uniform("Gamma", 0.5, p.len()),
                Field::index("cell", p.len()),
            ];
            let face_p: Vec<f64> = geometry
                .boundary_face_centres
                .iter()
                .map(|c| c.y.cos())
                .collect();
            let face_u: Vec<Vec3> = geometry.boundary_face_centres.clone();
            let face_fields = [Field::scalar("p", &face_p), Field::vector("U", &face_u)];
            let patch = &mesh.patches()[0];
            let polygons = PatchPolygons::new(mesh, patch);
            let patch_fields: Vec<Field> = face_fields
                .iter()
                .map(|f| f.slice(patch.boundary_faces(mesh.n_internal_faces())))
                .collect();
            // Every third cell, and the points they use.
            let piece_cells: Vec<Label> = (0..mesh.n_cells() as Label).step_by(3).collect();
            let (piece, piece_points) = cells.subset(&piece_cells);
            if *name == "mixed" {
                assert!(cells.types.contains(&VTK_POLYHEDRON) && !cells.faces.is_empty());
            }
            for encoding in [VtkEncoding::Binary, VtkEncoding::Zlib] {
                for write_bytes in [1, 100, 4096, WRITE_BYTES] {
                    let file = |what: &str| match what {
                        "whole" => cells_file(mesh, &cells, None, &fields, None, encoding),
                        "piece" => cells_file(
                            mesh,
                            &piece,
                            Some(&piece_points),
                            &fields,
                            Some(&piece_cells),
                            encoding,
                        ),
                        _ => polygons_file(mesh, &polygons, &patch_fields, encoding),
                    };
                    for what in ["whole", "piece", "patch"] {
                        let case = format!("{name} {what} {encoding} {write_bytes}");
                        let streamed = dir.join(format!("{name}_{what}_{encoding}_streamed"));
                        let appended = dir.join(format!("{name}_{what}_{encoding}_{write_bytes}"));
                        let n_streamed = file(what).write_streamed(&streamed).unwrap();
                        let n_appended = file(what).write_appended(&appended, write_bytes).unwrap();
                        let bytes = fs::read(&appended).unwrap();
                        assert_eq!(n_appended, bytes.len() as u64, "{case}");
                        assert_eq!(n_streamed, n_appended, "{case}");
                        assert!(
                            bytes == fs::read(&streamed).unwrap(),
                            "{case}: the files differ"
                        );
                    }
                }
            }
        }
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A uniform field and the cell numbers are written from their value
    /// and count alone: every cell's value, at a piece's cells too (global
    /// numbers), and a patch's slice of numbers starts at its first face.
    #[test]
    fn uniform_and_index_fields_write_every_value() {
        let mesh = crate::mesh::load("box:4x3x2").unwrap();
        let n = mesh.n_cells();
        let cells = VtkCells::new(&mesh);
        let (dir, keep) = test_dir("vtk_uniform_index");
        create_dir_all(&dir).unwrap();
        let fields = [Field::uniform("Gamma", 2.5, n), Field::index("cellId", n)];
        let piece_cells: Vec<Label> = (1..n as Label).step_by(2).collect();
        let (piece, piece_points) = cells.subset(&piece_cells);
        for encoding in [VtkEncoding::Binary, VtkEncoding::Zlib, VtkEncoding::Ascii] {
            let path = dir.join(format!("whole_{encoding}.vtu"));
            cells_file(&mesh, &cells, None, &fields, None, encoding)
                .write(&path)
                .unwrap();
            let whole = read_back(&path);
            assert_eq!(whole.f64s("Gamma", 1), vec![2.5; n]);
            assert_eq!(
                whole.f64s("cellId", 1),
                (0..n).map(|c| c as f64).collect::<Vec<_>>()
            );
            let path = dir.join(format!("piece_{encoding}.vtu"));
            let piece_file = cells_file(
                &mesh,
                &piece,
                Some(&piece_points),
                &fields,
                Some(&piece_cells),
                encoding,
            );
            piece_file.write(&path).unwrap();
            let read = read_back(&path);
            assert_eq!(read.f64s("Gamma", 1), vec![2.5; piece_cells.len()]);
            assert_eq!(
                read.f64s("cellId", 1),
                piece_cells
                    .iter()
                    .map(|&c| f64::from(c))
                    .collect::<Vec<_>>()
            );
        }
        match Field::index("faceId", 10).slice(3..7).values {
            FieldValues::Index { first, len } => assert_eq!((first, len), (3, 4)),
            other => panic!("slice of an index field is {other:?}"),
        }
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A series given cells built on another thread writes the bytes of one
    /// that builds them itself; cells of another mesh, or a sender that
    /// went away, make the series build its own.
    #[test]
    fn prepared_cells_write_the_same_files() {
        let mesh = mixed_mesh();
        let other = crate::mesh::load("box:3x2x2").unwrap();
        let n = mesh.n_cells();
        let p: Vec<f64> = (0..n).map(|c| (c as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = vec![1.5; mesh.n_faces() - mesh.n_internal_faces()];
        let (dir, keep) = test_dir("vtk_prepared_cells");
        let write = |name: &str, coming: Option<Receiver<PreparedCells>>| {
            let mut series = VtkSeries::new(&mesh, &dir, name).unwrap();
            if let Some(coming) = coming {
                series = series.with_cells_from(coming);
            }
            series
                .write_step(1.0, &[Field::scalar("p", &p)], &[Field::scalar("p", &b)])
                .unwrap();
            fs::read(dir.join(format!("{name}_000000/internal.vtu"))).unwrap()
        };
        let own = write("own", None);
        let prepared = std::thread::scope(|scope| {
            let (send, coming) = std::sync::mpsc::channel();
            let mesh = &mesh;
            scope.spawn(move || send.send(PreparedCells::new(mesh)).unwrap());
            write("prepared", Some(coming))
        });
        assert_eq!(prepared, own);
        let (send, coming) = std::sync::mpsc::channel();
        send.send(PreparedCells::new(&other)).unwrap();
        assert_eq!(write("other_mesh", Some(coming)), own);
        let (send, coming) = std::sync::mpsc::channel::<PreparedCells>();
        drop(send);
        assert_eq!(write("gone", Some(coming)), own);
        if !keep {
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// VTK's own readers open what is written (scripts/check_vtk.py through
    /// `python3 -c 'import vtk'`): the cells and fields of a serial series in
    /// every encoding, and a distributed one's `.pvd` with every cell. Where
    /// the build found no VTK Python module the test shows as ignored
    /// (`build.rs`); run anyway, it says it is skipped, or fails under
    /// `FVPOISSON_REQUIRE_VTK=1`.
    #[test]
    #[cfg_attr(
        not(vtk_reader_tests),
        ignore = "needs python3 with the vtk module (pip install vtk)"
    )]
    fn vtk_python_reader_opens_every_encoding_and_the_pieces() {
        let python = std::process::Command::new("python3")
            .args(["-c", "import vtk"])
            .output();
        if !python.is_ok_and(|o| o.status.success()) {
            assert!(
                !std::env::var("FVPOISSON_REQUIRE_VTK").is_ok_and(|v| v == "1"),
                "FVPOISSON_REQUIRE_VTK=1 but python3 cannot import vtk"
            );
            eprintln!("skipped: python3 with the vtk module is not available (pip install vtk)");
            return;
        }
        let mesh = crate::mesh::load("meshes/foam/polydual").unwrap();
        let (dir, keep) = test_dir("vtk_python");
        let n = mesh.n_cells();
        let p: Vec<f64> = (0..n).map(|c| c as f64 * 0.25).collect();
        let u: Vec<Vec3> = (0..n).map(|c| Vec3::new(c as f64, -1.0, 2.0)).collect();
        let p_b = vec![1.5; mesh.n_faces() - mesh.n_internal_faces()];
        let fields = [Field::scalar("p", &p), Field::vector("U", &u)];
        let mut pvds = Vec::new();
        for encoding in [VtkEncoding::Binary, VtkEncoding::Zlib, VtkEncoding::Ascii] {
            let mut series = VtkSeries::new(&mesh, dir.join(encoding.to_string()), "case")
                .unwrap()
                .with_encoding(encoding);
            series
                .write_step(1.0, &fields, &[Field::scalar("p", &p_b)])
                .unwrap();
            series
                .write_step(2.0, &fields, &[Field::scalar("p", &p_b)])
                .unwrap();
            pvds.push(series.pvd_path());
        }
        let mut ranks: Vec<VtkSeries> = (0..3)
            .map(|rank| {
                let cells = (0..n as Label).filter(|c| c % 3 == rank).collect();
                VtkSeries::distributed(&mesh, dir.join("pieces"), "case", rank as usize, 3, cells)
                    .unwrap()
                    .with_encoding(VtkEncoding::Zlib)
            })
            .collect();
        for series in &mut ranks {
            series
                .write_step(1.0, &fields, &[Field::scalar("p", &p_b)])
                .unwrap();
        }
        for series in &mut ranks {
            series.publish_step().unwrap();
        }
        pvds.push(ranks[0].pvd_path());
        let sum_p: f64 = p.iter().sum();
        for pvd in pvds {
            let out = std::process::Command::new("python3")
                .arg("scripts/check_vtk.py")
                .arg(&pvd)
                .args(["--cells", &n.to_string(), "--field", "p"])
                .args(["--sum", &format!("{sum_p:?}"), "--field", "U"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}{}",
                pvd.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
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
        let e = write_vtu(
            &dir.join("missing").join("m.vtu"),
            &mesh,
            &[],
            VtkEncoding::Binary,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing") && e.contains("m.vtu."), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
