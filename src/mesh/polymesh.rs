//! OpenFOAM `constant/polyMesh` reader and writer: `points` (vectorField),
//! `faces` (faceList, or faceCompactList: offsets then labels), `owner`,
//! `neighbour` (labelList) and `boundary` (polyBoundaryMesh, always ascii).
//! Ascii, binary and gzip-compressed files are read; see `crate::foam`.

use super::{FaceList, Label, Mesh, MeshError, Patch, PatchKind, Vec3};
use crate::foam::dict::ValueKind;
use crate::foam::list::{binary_label, read_label_lists, read_list, ListItem};
use crate::foam::write::{write_atomic, write_footer, write_header, write_list, HeaderSpec};
use crate::foam::{Arch, FoamFile, Lexer, Token, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

pub use crate::foam::FoamFormat;

/// Reads a mesh from a case directory, a `constant/polyMesh` directory or its parent.
pub fn read_polymesh(path: &Path) -> Result<Mesh, MeshError> {
    let dir = polymesh_dir(path)?;
    let file = |name: &str| FoamFile::read(&dir.join(name));
    // The files are read side by side (each long list in parallel chunks
    // too); the faces are checked against the points, so they follow them.
    let points_and_faces = || -> Result<_, MeshError> {
        let points: Vec<Vec3> = file("points")?.list()?;
        let faces = read_faces(&file("faces")?, points.len())?;
        Ok((points, faces))
    };
    let owner = || -> Result<Vec<Label>, MeshError> { file("owner")?.list() };
    let neighbour = || read_neighbour(&file("neighbour")?);
    let (points_and_faces, (owner, (neighbour, patches))) = rayon::join(points_and_faces, || {
        rayon::join(owner, || {
            rayon::join(neighbour, || read_boundary(&file("boundary")?))
        })
    });
    // Errors in the order the files were read one after the other.
    let (points, faces) = points_and_faces?;
    let owner = owner?;
    let neighbour = neighbour?;
    let patches = patches?;
    // A face without its owner (an owner list cut short, or one of another
    // mesh) would read as a face ordering error further on.
    if owner.len() != faces.len() {
        return Err(MeshError::InFile {
            file: dir.join("owner"),
            msg: format!(
                "{} entries for the {} faces of 'faces': owner lists one cell per face \
                 (a file cut short, or owner and faces of different meshes?)",
                owner.len(),
                faces.len()
            ),
        });
    }
    check_cell_labels(&owner, &neighbour, &dir)?;
    let (faces, owner, neighbour) = upper_triangular(faces, owner, neighbour, &dir)?;
    Mesh::new(points, faces, owner, neighbour, patches).map_err(|e| e.in_file(&dir))
}

/// An entry of `neighbour`: old OpenFOAM versions list every face, with -1
/// for boundary faces.
#[derive(Clone)]
struct NeighbourEntry(Option<Label>);

impl ListItem for NeighbourEntry {
    const NAME: &'static str = "label";

    fn ascii(lx: &mut Lexer) -> Result<Self, MeshError> {
        if lx.peek_byte()? != Some(b'-') {
            return Label::ascii(lx).map(|l| Self(Some(l)));
        }
        match lx.next_token()? {
            Token::Number("-1") => Ok(Self(None)),
            t => Err(lx.error(format!(
                "expected a cell label, or -1 for a boundary face, found {}",
                t.describe()
            ))),
        }
    }

    fn binary_size(arch: Arch) -> usize {
        arch.label_bytes
    }

    fn binary(b: &[u8], arch: Arch) -> Result<Self, String> {
        match binary_label(b)? {
            -1 => Ok(Self(None)),
            _ => Label::binary(b, arch).map(|l| Self(Some(l))),
        }
    }
}

/// `neighbour`: internal faces only, or (old format) all faces with -1 on the boundary.
fn read_neighbour(file: &FoamFile) -> Result<Vec<Label>, MeshError> {
    let entries: Vec<NeighbourEntry> = file.list()?;
    let n_internal = entries.iter().take_while(|e| e.0.is_some()).count();
    if let Some(f) = entries[n_internal..].iter().position(|e| e.0.is_some()) {
        return Err(MeshError::InFile {
            file: file.path.clone(),
            msg: format!(
                "face {n_internal} has neighbour -1 (a boundary face) but face {} after it \
                 has a neighbour cell; internal faces must come first",
                n_internal + f
            ),
        });
    }
    Ok(entries.into_iter().filter_map(|e| e.0).collect())
}

/// The cell count of a polyMesh is the largest label in `owner` and
/// `neighbour` plus one, so one corrupt large label invents cells without
/// faces. Names the label and where it is, before any renumbering hides it.
fn check_cell_labels(owner: &[Label], neighbour: &[Label], dir: &Path) -> Result<(), MeshError> {
    let lists = [("owner", owner), ("neighbour", neighbour)];
    let entries = || {
        lists
            .iter()
            .flat_map(|&(name, list)| list.iter().enumerate().map(move |(i, &c)| (c, name, i)))
    };
    // The first entry holding the largest label.
    let Some((largest, file, entry)) = entries().reduce(|a, b| if b.0 > a.0 { b } else { a })
    else {
        return Ok(());
    };
    let n_cells = largest as usize + 1;
    let n_entries = owner.len() + neighbour.len();
    let (first_empty, empty) = if n_cells <= n_entries {
        let mut has_face = vec![false; n_cells];
        for (c, _, _) in entries() {
            has_face[c as usize] = true;
        }
        let Some(first_empty) = has_face.iter().position(|&h| !h) else {
            return Ok(());
        };
        (first_empty, has_face.iter().filter(|&&h| !h).count())
    } else {
        // More cells than entries: some are in no face. Found from the
        // entries alone, not a table as large as the corrupt label says.
        let mut used: Vec<Label> = owner.iter().chain(neighbour).copied().collect();
        used.sort_unstable();
        used.dedup();
        let first_empty = (0..used.len())
            .find(|&i| used[i] as usize != i)
            .unwrap_or(used.len());
        (first_empty, n_cells - used.len())
    };
    Err(MeshError::InFile {
        file: dir.join(file),
        msg: format!(
            "entry {entry} names cell {largest}, so the mesh would have {n_cells} cells, but \
             {empty} of them (the first is cell {first_empty}) are in no face: a cell label is \
             corrupt, or owner and neighbour belong to another mesh"
        ),
    })
}

/// Internal faces sorted by (owner, neighbour) when they are not already, as
/// `Mesh` needs. OpenFOAM accepts such meshes (checkMesh only notes "upper
/// triangular ordering OK" or not); renumbering internal faces changes no cell
/// or boundary face numbers.
fn upper_triangular(
    faces: FaceList,
    owner: Vec<Label>,
    neighbour: Vec<Label>,
    dir: &Path,
) -> Result<(FaceList, Vec<Label>, Vec<Label>), MeshError> {
    let n_internal = neighbour.len();
    if n_internal > owner.len() || n_internal > faces.len() {
        // Mesh::new reports the size mismatch.
        return Ok((faces, owner, neighbour));
    }
    let key = |f: usize| (owner[f], neighbour[f]);
    if (1..n_internal).all(|f| key(f - 1) < key(f)) {
        return Ok((faces, owner, neighbour));
    }
    // Faults are named by the file's face numbers, before renumbering hides them.
    let in_file = |name: &str, msg: String| MeshError::InFile {
        file: dir.join(name),
        msg,
    };
    if let Some(f) = (0..n_internal).find(|&f| owner[f] >= neighbour[f]) {
        return Err(in_file(
            "owner",
            format!(
                "internal face {f}: owner {} must be less than neighbour {}",
                owner[f], neighbour[f]
            ),
        ));
    }
    for f in 0..faces.len() {
        // Point labels are checked against the points by Mesh::new (faces keep
        // their numbers there only when no renumbering happens); the shape here.
        super::check_face(f, faces.face(f), usize::MAX)
            .map_err(|e| in_file("faces", e.to_string()))?;
    }
    log::warn!(
        "{}: internal faces are not in upper-triangular order; renumbering them",
        dir.display()
    );
    let mut order: Vec<usize> = (0..faces.len()).collect();
    order[..n_internal].sort_by_key(|&f| key(f));
    if let Some(i) = (1..n_internal).find(|&i| key(order[i - 1]) == key(order[i])) {
        let (a, b) = (order[i - 1].min(order[i]), order[i - 1].max(order[i]));
        return Err(in_file(
            "neighbour",
            format!(
                "internal faces {a} and {b} both join cells {} and {}: a face is duplicated",
                owner[a], neighbour[a]
            ),
        ));
    }
    let faces = faces.permuted(&order).map_err(|e| e.in_file(dir))?;
    let owner = order.iter().map(|&f| owner[f]).collect();
    let neighbour = order[..n_internal].iter().map(|&f| neighbour[f]).collect();
    Ok((faces, owner, neighbour))
}

/// Whether `path` is (or holds) a polyMesh directory that [`read_polymesh`] reads.
pub fn has_polymesh(path: &Path) -> bool {
    polymesh_dir(path).is_ok()
}

/// The polyMesh directory for `path`: `path/constant/polyMesh`, `path/polyMesh`,
/// or `path` itself when it holds the mesh files.
fn polymesh_dir(path: &Path) -> Result<PathBuf, MeshError> {
    let holds_mesh = |d: &Path| {
        let f = d.join("faces");
        f.is_file() || crate::foam::gz_path(&f).is_file()
    };
    for dir in [
        path.join("constant").join("polyMesh"),
        path.join("polyMesh"),
        path.to_path_buf(),
    ] {
        if holds_mesh(&dir) {
            return Ok(dir);
        }
    }
    Err(MeshError::InFile {
        file: path.to_path_buf(),
        msg: if path.is_dir() {
            "no OpenFOAM mesh here: expected a case directory (with constant/polyMesh/faces), \
             a constant directory or a polyMesh directory"
                .into()
        } else if path.exists() {
            "not a directory: expected an OpenFOAM case, constant or polyMesh directory".into()
        } else {
            "no such directory".into()
        },
    })
}

/// `faces`: class `faceCompactList` holds two lists (offsets, then point labels);
/// anything else is read as a `faceList` of label lists. Faces are checked
/// against `n_points` here, so the error can name the line.
fn read_faces(file: &FoamFile, n_points: usize) -> Result<FaceList, MeshError> {
    let (format, arch) = (file.header.format, file.header.arch);
    let check = |f: usize, face: &[Label]| -> Result<(), String> {
        if face.len() < 3 {
            return Err(format!(
                "face {f} has {} points; a face needs at least 3",
                face.len()
            ));
        }
        match face.iter().find(|&&p| p as usize >= n_points) {
            Some(p) => Err(format!(
                "face {f} uses point {p} but 'points' has {n_points} points"
            )),
            None => Ok(()),
        }
    };
    let mut lx = file.body();
    let faces = if file.header.class == "faceCompactList" {
        let offsets: Vec<u32> = read_list(&mut lx, format, arch)?;
        let labels_line = lx.line();
        let labels: Vec<Label> = read_list(&mut lx, format, arch)?;
        let faces = FaceList::from_compact(offsets, labels).map_err(|e| {
            let msg = e.to_string();
            MeshError::parse(&file.path, labels_line, msg)
        })?;
        if let Some(msg) = faces
            .iter()
            .enumerate()
            .find_map(|(f, face)| check(f, face).err())
        {
            return Err(MeshError::parse(&file.path, labels_line, msg));
        }
        faces
    } else {
        let (offsets, labels) = read_label_lists(&mut lx, format, arch, check)?;
        FaceList::from_compact(offsets, labels).map_err(|e| e.in_file(&file.path))?
    };
    lx.expect_eof("the face list")?;
    Ok(faces)
}

/// `boundary`: `N ( name { type T; nFaces n; startFace s; ... } ... )`.
fn read_boundary(file: &FoamFile) -> Result<Vec<Patch>, MeshError> {
    let path = file.path.as_path();
    let list = file.value()?;
    let ValueKind::List(items) = &list.kind else {
        return Err(MeshError::parse(
            path,
            list.line,
            format!(
                "expected a list of patches N ( name {{ ... }} ... ), found {}",
                list.kind.describe()
            ),
        ));
    };
    let mut patches = Vec::with_capacity(items.len() / 2);
    let mut rest = items.as_slice();
    while let [name, dict, tail @ ..] = rest {
        patches.push(read_patch(path, name, dict)?);
        rest = tail;
    }
    if let [extra] = rest {
        return Err(MeshError::parse(
            path,
            extra.line,
            format!(
                "expected a patch name followed by {{ ... }}, found only {}",
                extra.kind.describe()
            ),
        ));
    }
    Ok(patches)
}

fn read_patch(path: &Path, name: &Value, dict: &Value) -> Result<Patch, MeshError> {
    let (ValueKind::Word(name), ValueKind::Dict(d)) = (&name.kind, &dict.kind) else {
        return Err(MeshError::parse(
            path,
            name.line,
            format!(
                "expected a patch name followed by {{ ... }}, found {} and {}",
                name.kind.describe(),
                dict.kind.describe()
            ),
        ));
    };
    let entry = |key: &str| {
        d.get(key).ok_or_else(|| {
            MeshError::parse(
                path,
                dict.line,
                format!("patch '{name}' has no '{key}' entry"),
            )
        })
    };
    let type_entry = entry("type")?;
    let kind = PatchKind::from_foam(&type_entry.single_text(path)?)
        .map_err(|msg| MeshError::parse(path, type_entry.line, format!("patch '{name}': {msg}")))?;
    let number = |key: &str| -> Result<usize, MeshError> {
        let e = entry(key)?;
        usize::try_from(e.single_label(path)?)
            .map_err(|_| MeshError::parse(path, e.line, format!("'{key}' is too large")))
    };
    let groups = match d.get("inGroups") {
        Some(e) => e.words(path)?,
        None => Vec::new(),
    };
    Ok(Patch::new(name, kind, number("startFace")?, number("nFaces")?).with_groups(groups))
}

/// Writes `mesh` as `dir/{points,faces,owner,neighbour,boundary}` (`.gz` when `compress`).
///
/// Binary `faces` are a `faceCompactList`, as OpenFOAM writes them; ascii ones a
/// `faceList`. Ascii numbers are written with the shortest text that reads back
/// exactly. `boundary` is always ascii, as in OpenFOAM.
pub fn write_polymesh(
    mesh: &Mesh,
    dir: &Path,
    format: FoamFormat,
    compress: bool,
) -> Result<(), MeshError> {
    if let Some((p, _)) = mesh
        .points()
        .iter()
        .enumerate()
        .find(|(_, x)| !x.iter().all(|c| c.is_finite()))
    {
        return Err(MeshError::invalid(format!(
            "point {p} has a non-finite coordinate; cannot write the mesh"
        )));
    }
    let counts = [
        mesh.n_points(),
        mesh.n_faces(),
        mesh.n_cells(),
        mesh.faces().labels().len(),
    ];
    if format == FoamFormat::Binary && counts.iter().any(|&n| n > i32::MAX as usize) {
        return Err(MeshError::invalid(
            "mesh too large for a binary file with 32-bit labels (over 2^31 points, faces, \
             cells or face-point labels); write it as ascii",
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| MeshError::io(dir, e))?;
    let note = format!(
        "nPoints:{}  nCells:{}  nFaces:{}  nInternalFaces:{}",
        mesh.n_points(),
        mesh.n_cells(),
        mesh.n_faces(),
        mesh.n_internal_faces()
    );
    let write = |object: &str,
                 format: FoamFormat,
                 class: &str,
                 note: Option<&str>,
                 body: &dyn Fn(&mut dyn Write) -> std::io::Result<()>| {
        let header = HeaderSpec {
            format,
            class,
            note,
            location: "constant/polyMesh",
            object,
        };
        write_atomic(&dir.join(object), compress, |w| {
            write_header(w, &header)?;
            body(w)?;
            write_footer(w)
        })
    };
    write("points", format, "vectorField", None, &|w| {
        write_list(w, mesh.points(), format)
    })?;
    match format {
        FoamFormat::Ascii => write("faces", format, "faceList", None, &|w| {
            write_face_list(w, mesh)
        })?,
        FoamFormat::Binary => write("faces", format, "faceCompactList", None, &|w| {
            write_list(w, &mesh.faces().offsets(), format)?;
            write_list(w, mesh.faces().labels(), format)
        })?,
    };
    write("owner", format, "labelList", Some(&note), &|w| {
        write_list(w, mesh.owner(), format)
    })?;
    write("neighbour", format, "labelList", Some(&note), &|w| {
        write_list(w, mesh.neighbour(), format)
    })?;
    write(
        "boundary",
        FoamFormat::Ascii,
        "polyBoundaryMesh",
        None,
        &|w| write_boundary(w, mesh.patches()),
    )?;
    Ok(())
}

fn write_face_list(w: &mut dyn Write, mesh: &Mesh) -> std::io::Result<()> {
    write!(w, "\n{}\n(\n", mesh.n_faces())?;
    for face in mesh.faces().iter() {
        write!(w, "{}(", face.len())?;
        for (i, p) in face.iter().enumerate() {
            if i > 0 {
                w.write_all(b" ")?;
            }
            write!(w, "{p}")?;
        }
        w.write_all(b")\n")?;
    }
    w.write_all(b")\n")
}

fn write_boundary(w: &mut dyn Write, patches: &[Patch]) -> std::io::Result<()> {
    write!(w, "\n{}\n(\n", patches.len())?;
    for p in patches {
        writeln!(w, "    {}\n    {{", p.name)?;
        writeln!(w, "        type            {};", p.kind.foam_name())?;
        let groups = p.groups();
        if !groups.is_empty() {
            writeln!(
                w,
                "        inGroups        {}({});",
                groups.len(),
                groups.join(" ")
            )?;
        }
        writeln!(w, "        nFaces          {};", p.size)?;
        writeln!(w, "        startFace       {};\n    }}", p.start)?;
    }
    w.write_all(b")\n")
}
