//! polyMesh reader/writer against meshes and geometry written by OpenFOAM v1912
//! (`meshes/foam/`, see its README.md).

mod common;

use fvpoisson::foam::{EntryValue, FoamFile, Value, ValueKind};
use fvpoisson::mesh::polymesh::{read_polymesh, write_polymesh, FoamFormat};
use fvpoisson::mesh::{Mesh, Vec3};
use std::path::{Path, PathBuf};

const CASES: [&str; 5] = ["cavity", "warped", "polydual", "warped_binary", "warped_gz"];
const MESH_FILES: [&str; 5] = ["points", "faces", "owner", "neighbour", "boundary"];

fn case(name: &str) -> PathBuf {
    common::repo("meshes/foam").join(name)
}

/// A fresh empty directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = common::unique_temp_dir(&format!("fvpoisson-polymesh-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A field written by `postProcess -func writeCell*`: `internalField` and the
/// boundary `value`s, each as (`uniform`?, value).
struct Field {
    path: PathBuf,
    internal: (bool, Value),
    boundary: Vec<(String, (bool, Value))>,
}

fn read_field(path: &Path) -> Field {
    let file = FoamFile::read(path).unwrap();
    let dict = file.dict().unwrap();
    let values = |key: &str, e: &EntryValue| -> (bool, Value) {
        let EntryValue::Stream(v) = e else {
            panic!("{key} is a dictionary")
        };
        let uniform = matches!(&v[0].kind, ValueKind::Word(w) if w == "uniform");
        (uniform, v.last().unwrap().clone())
    };
    let internal = values("internalField", &dict.get("internalField").unwrap().value);
    let bf = dict.sub_dict("boundaryField", path, 0).unwrap();
    let boundary = bf
        .entries
        .iter()
        .filter_map(|e| match &e.value {
            EntryValue::Dict(d) => d
                .get("value")
                .map(|v| (e.key.clone(), values("value", &v.value))),
            EntryValue::Stream(_) => None,
        })
        .collect();
    Field {
        path: file.path.clone(),
        internal,
        boundary,
    }
}

impl Field {
    fn scalars(&self, (uniform, v): &(bool, Value), n: usize) -> Vec<f64> {
        match v.kind {
            ValueKind::Float(x) if *uniform => vec![x; n],
            ValueKind::Int(i) if *uniform => vec![i as f64; n],
            _ => v.to_scalars(&self.path).unwrap(),
        }
    }

    fn vectors(&self, (uniform, v): &(bool, Value), n: usize) -> Vec<Vec3> {
        if *uniform {
            let one = Value {
                line: v.line,
                kind: ValueKind::List(vec![v.clone()]),
            };
            vec![one.to_vectors(&self.path).unwrap()[0]; n]
        } else {
            v.to_vectors(&self.path).unwrap()
        }
    }
}

fn field_path(case: &Path, name: &str) -> PathBuf {
    let plain = case.join("0").join(name);
    if plain.exists() {
        plain
    } else {
        case.join("0").join(format!("{name}.gz"))
    }
}

/// Our geometry against OpenFOAM's `writeCellCentres`/`writeCellVolumes`:
/// returns (max centre difference / mesh size, max relative volume difference,
/// max boundary face centre difference / mesh size).
fn compare_geometry(name: &str) -> (f64, f64, f64) {
    let dir = case(name);
    let mesh = read_polymesh(&dir).unwrap();
    let g = mesh.geometry().unwrap();
    let n = mesh.n_cells();
    let (lo, hi) = mesh.points().iter().fold(
        (Vec3::repeat(f64::MAX), Vec3::repeat(f64::MIN)),
        |(lo, hi), p| (lo.inf(p), hi.sup(p)),
    );
    let size = (hi - lo).norm();

    let c = read_field(&field_path(&dir, "C"));
    let centres = c.vectors(&c.internal, n);
    assert_eq!(centres.len(), n, "{name}: C has {} cells", centres.len());
    let dc = centres
        .iter()
        .zip(&g.cell_centres)
        .map(|(a, b)| (a - b).norm() / size)
        .fold(0.0, f64::max);

    let v = read_field(&field_path(&dir, "V"));
    let volumes = v.scalars(&v.internal, n);
    assert_eq!(volumes.len(), n);
    let dv = volumes
        .iter()
        .zip(&g.cell_volumes)
        .map(|(a, b)| ((a - b) / a).abs())
        .fold(0.0, f64::max);

    let mut db: f64 = 0.0;
    let mut patches_seen = 0;
    for (patch, value) in &c.boundary {
        let p = mesh
            .patch(patch)
            .unwrap_or_else(|| panic!("{name}: no patch {patch}"));
        let fc = c.vectors(value, p.size);
        assert_eq!(fc.len(), p.size, "{name}/{patch}");
        for (i, f) in p.faces().enumerate() {
            let ours = g.boundary_face_centres[f - mesh.n_internal_faces()];
            db = db.max((ours - fc[i]).norm() / size);
        }
        patches_seen += 1;
    }
    assert!(patches_seen > 0, "{name}: no boundary values in C");
    (dc, dv, db)
}

#[test]
fn geometry_matches_openfoam() {
    for name in CASES {
        let (dc, dv, db) = compare_geometry(name);
        println!("{name}: max |dC|/L {dc:.2e}, max |dV|/V {dv:.2e}, max |dCf|/L {db:.2e}");
        assert!(dc <= 1e-14, "{name}: cell centres differ by {dc:e}");
        assert!(dv <= 1e-14, "{name}: cell volumes differ by {dv:e}");
        assert!(
            db <= 1e-14,
            "{name}: boundary face centres differ by {db:e}"
        );
    }
}

#[test]
fn meshes_have_expected_sizes_and_shapes() {
    use fvpoisson::mesh::CellShape;
    let cavity = read_polymesh(&case("cavity")).unwrap();
    assert_eq!(
        (
            cavity.n_points(),
            cavity.n_cells(),
            cavity.n_faces(),
            cavity.n_internal_faces()
        ),
        (882, 400, 1640, 760)
    );
    assert_eq!(cavity.patch("frontAndBack").unwrap().size, 800);
    // The same mesh from the case dir, `constant` and the polyMesh dir itself.
    assert_eq!(
        read_polymesh(&case("cavity").join("constant")).unwrap(),
        cavity
    );
    assert_eq!(
        read_polymesh(&case("cavity").join("constant/polyMesh")).unwrap(),
        cavity
    );
    let dual = read_polymesh(&case("polydual")).unwrap();
    assert!(dual
        .cell_shapes()
        .iter()
        .all(|&s| s == CellShape::Polyhedron));
    assert_eq!(dual.n_cells(), 339);
}

#[test]
fn ascii_binary_and_gzip_read_the_same_mesh() {
    let ascii = read_polymesh(&case("warped")).unwrap();
    assert_eq!(ascii.n_cells(), 640);
    assert_eq!(read_polymesh(&case("warped_binary")).unwrap(), ascii);
    assert_eq!(read_polymesh(&case("warped_gz")).unwrap(), ascii);
}

#[test]
fn write_then_read_is_exact() {
    for name in ["cavity", "warped", "polydual"] {
        let mesh = read_polymesh(&case(name)).unwrap();
        for format in [FoamFormat::Ascii, FoamFormat::Binary] {
            for compress in [false, true] {
                let dir = temp_dir("roundtrip");
                write_polymesh(&mesh, &dir, format, compress).unwrap();
                let back = read_polymesh(&dir).unwrap();
                assert_eq!(back, mesh, "{name} {format:?} compress={compress}");
                let gz = dir.join("points.gz").exists();
                assert_eq!(gz, compress);
                assert_eq!(dir.join("points").exists(), !compress);
                std::fs::remove_dir_all(&dir).unwrap();
            }
        }
    }
}

#[test]
fn writing_replaces_the_other_compression() {
    let mesh = read_polymesh(&case("cavity")).unwrap();
    let dir = temp_dir("replace");
    write_polymesh(&mesh, &dir, FoamFormat::Ascii, true).unwrap();
    write_polymesh(&mesh, &dir, FoamFormat::Binary, false).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["boundary", "faces", "neighbour", "owner", "points"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// When OpenFOAM is installed (not in CI), its `checkMesh` must accept what we write.
#[test]
fn openfoam_check_mesh_accepts_written_meshes() {
    let check_mesh = Path::new("/usr/bin/checkMesh");
    if !check_mesh.exists() {
        eprintln!("checkMesh not installed: skipped");
        return;
    }
    let mesh = read_polymesh(&case("warped")).unwrap();
    for (format, compress) in [
        (FoamFormat::Ascii, false),
        (FoamFormat::Binary, false),
        (FoamFormat::Binary, true),
    ] {
        let dir = temp_dir("checkmesh");
        std::fs::create_dir_all(dir.join("system")).unwrap();
        for f in ["controlDict", "fvSchemes", "fvSolution"] {
            std::fs::copy(case("warped/system").join(f), dir.join("system").join(f)).unwrap();
        }
        write_polymesh(&mesh, &dir.join("constant/polyMesh"), format, compress).unwrap();
        let out = std::process::Command::new(check_mesh)
            .arg("-case")
            .arg(&dir)
            .env("WM_PROJECT_DIR", "/usr/share/openfoam")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && log.contains("Mesh OK.")
                && log.contains("cells:            640"),
            "{format:?} compress={compress}:\n{log}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A polyMesh dir holding `case`'s mesh files with `name` replaced by `bytes`.
fn mesh_with(case_name: &str, name: &str, bytes: &[u8], tag: &str) -> PathBuf {
    let src = case(case_name).join("constant/polyMesh");
    let dir = temp_dir(tag);
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    std::fs::write(dir.join(name), bytes).unwrap();
    dir
}

/// Error message of loading cavity with `file` edited by `edit`.
fn cavity_error(file: &str, edit: impl Fn(&str) -> String) -> String {
    let text = std::fs::read_to_string(case("cavity/constant/polyMesh").join(file)).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "edit of {file} changed nothing");
    let dir = mesh_with("cavity", file, edited.as_bytes(), "malformed");
    let err = match read_polymesh(&dir) {
        Ok(_) => panic!("edited {file} still loads"),
        Err(e) => e.to_string(),
    };
    std::fs::remove_dir_all(&dir).unwrap();
    err.replace(&format!("{}/", dir.display()), "")
}

#[test]
fn malformed_files_give_file_and_line() {
    // Truncated in the middle of the points list (line 500 is a point).
    let e = cavity_error("points", |t| {
        t.lines().take(500).collect::<Vec<_>>().join("\n")
    });
    assert_eq!(
        e,
        "points:500: list opened on line 20 declares 882 entries but the file ends after 480"
    );
    // Wrong count.
    let e = cavity_error("owner", |t| t.replacen("\n1640\n", "\n1641\n", 1));
    assert_eq!(
        e,
        "owner:1662: list opened on line 21 declares 1641 entries but has 1640"
    );
    // Bad token.
    let e = cavity_error("points", |t| {
        t.replacen(
            "(0.005000000000000001 0 0)",
            "(0.005000000000000001 0x 0)",
            1,
        )
    });
    assert_eq!(e, "points:22: expected a number, found '0x'");
    // Point index out of range.
    let e = cavity_error("faces", |t| {
        t.replacen("4(1 22 463 442)", "4(1 22 463 9999)", 1)
    });
    assert_eq!(
        e,
        "faces:21: face 0 uses point 9999 but 'points' has 882 points"
    );
    // Face with two points.
    let e = cavity_error("faces", |t| t.replacen("4(1 22 463 442)", "2(1 22)", 1));
    assert_eq!(e, "faces:21: face 0 has 2 points; a face needs at least 3");
    // Unsupported patch type.
    let e = cavity_error("boundary", |t| {
        t.replacen("type            empty;", "type cyclic;", 1)
    });
    assert!(e.starts_with("boundary:"), "{e}");
    assert!(
        e.contains("patch 'frontAndBack': patch type 'cyclic' is not supported"),
        "{e}"
    );
    // An owner list one entry short (count and list cut alike) is named as
    // such, not as a face ordering error.
    let e = cavity_error("owner", |t| {
        let cut = t.replacen("\n1640\n", "\n1639\n", 1);
        let end = cut.rfind("\n)").unwrap();
        let last = cut[..end].rfind('\n').unwrap();
        format!("{}{}", &cut[..last], &cut[end..])
    });
    assert_eq!(
        e,
        "owner: 1639 entries for the 1640 faces of 'faces': owner lists one cell per face (a \
         file cut short, or owner and faces of different meshes?)"
    );
    // A corrupt large cell label is named before renumbering hides it.
    let e = cavity_error("owner", |t| t.replacen("(\n0\n0\n", "(\n0\n99999\n", 1));
    assert_eq!(
        e,
        "owner: entry 1 names cell 99999, so the mesh would have 100000 cells, but 99599 of \
         them (the first is cell 400) are in no face: a cell label is corrupt, or owner and \
         neighbour belong to another mesh"
    );
    // Mesh-level error: names the polyMesh dir.
    let e = cavity_error("neighbour", |t| t.replacen("\n1\n", "\n0\n", 1));
    assert!(
        e.contains("internal face 0: owner 0 must be less than neighbour 0"),
        "{e}"
    );
}

#[test]
fn missing_file_is_named() {
    let dir = mesh_with("cavity", "points", b"", "missing");
    std::fs::remove_file(dir.join("neighbour")).unwrap();
    std::fs::write(
        dir.join("points"),
        std::fs::read(case("cavity/constant/polyMesh/points")).unwrap(),
    )
    .unwrap();
    let e = read_polymesh(&dir).unwrap_err().to_string();
    assert!(e.contains("/neighbour: no such file (nor "), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    let e = read_polymesh(Path::new("/nonexistent/case"))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "/nonexistent/case: no such directory");
    let points = case("cavity/constant/polyMesh/points");
    let e = read_polymesh(&points).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "points: not a directory: expected an OpenFOAM case, constant or polyMesh directory"
        ),
        "{e}"
    );
}

/// Binary files with 64-bit labels (`arch "LSB;label=64;scalar=64"`) are read.
#[test]
fn binary_64_bit_labels() {
    let src = case("warped_binary/constant/polyMesh/owner");
    let owner32 = FoamFile::read(&src).unwrap().list::<u32>().unwrap();
    let text = std::fs::read(&src).unwrap();
    let header_end = text.windows(3).position(|w| w == b"\n}\n").unwrap() + 3;
    let header = String::from_utf8_lossy(&text[..header_end]).replace("label=32", "label=64");
    let mut bytes = header.into_bytes();
    bytes.extend(format!("\n{}\n(", owner32.len()).as_bytes());
    for &o in &owner32 {
        bytes.extend(i64::from(o).to_le_bytes());
    }
    bytes.extend(b")\n");
    let dir = mesh_with("warped_binary", "owner", &bytes, "label64");
    assert_eq!(
        read_polymesh(&dir).unwrap(),
        read_polymesh(&case("warped_binary")).unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Corrupted copies of every shipped mesh file load to Ok or Err, never a panic.
#[test]
fn corrupted_files_never_panic() {
    let mut runs = 0;
    for name in ["cavity", "warped_binary", "warped_gz", "polydual"] {
        let src = case(name).join("constant/polyMesh");
        for file in MESH_FILES {
            let path = fvpoisson::foam::read_maybe_gz(&src.join(file)).unwrap().0;
            let bytes = std::fs::read(&path).unwrap();
            let file_name = path.file_name().unwrap().to_str().unwrap().to_string();
            let dir = mesh_with(name, &file_name, &bytes, "fuzz");
            for bad in common::corruptions(&bytes, 150) {
                std::fs::write(dir.join(&file_name), &bad).unwrap();
                let result = std::panic::catch_unwind(|| {
                    read_polymesh(&dir).and_then(|m: Mesh| m.geometry().map(|_| ()))
                });
                assert!(result.is_ok(), "panic on corrupted {name}/{file_name}");
                runs += 1;
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    assert!(runs > 5000);
}

/// Old OpenFOAM `neighbour` files list every face, with -1 on the boundary.
#[test]
fn old_neighbour_format_with_boundary_minus_ones() {
    let cavity = read_polymesh(&case("cavity")).unwrap();
    let mut text = String::from("FoamFile { format ascii; class labelList; }\n");
    text += &format!("{}\n(\n", cavity.n_faces());
    for &n in cavity.neighbour() {
        text += &format!("{n}\n");
    }
    text += &"-1\n".repeat(cavity.n_faces() - cavity.n_internal_faces());
    text += ")\n";
    let dir = mesh_with("cavity", "neighbour", text.as_bytes(), "oldneighbour");
    assert_eq!(read_polymesh(&dir).unwrap(), cavity);
    // -1 before an internal face is refused.
    let bad = text.replacen("\n1\n", "\n-1\n", 1);
    std::fs::write(dir.join("neighbour"), bad).unwrap();
    let e = read_polymesh(&dir).unwrap_err().to_string();
    assert!(
        e.contains("face 0 has neighbour -1 (a boundary face) but face 1"),
        "{e}"
    );
    let bad = text.replacen("\n1\n", "\n-2\n", 1);
    std::fs::write(dir.join("neighbour"), bad).unwrap();
    let e = read_polymesh(&dir).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "neighbour:4: expected a cell label, or -1 for a boundary face, found number -2"
        ),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Internal faces out of upper-triangular order (OpenFOAM accepts them) are
/// renumbered; cells, boundary faces and geometry are unchanged. Faces 0 and 1
/// of the cavity share their owner (cell 0); faces 1 and 2 do not, so the
/// owner list must be reordered with the faces.
#[test]
fn internal_faces_out_of_order_are_renumbered() {
    let src = case("cavity/constant/polyMesh");
    let cavity = read_polymesh(&case("cavity")).unwrap();
    for (a, name) in [(0, "order"), (1, "order_owner")] {
        let dir = mesh_with(
            "cavity",
            "owner",
            &std::fs::read(src.join("owner")).unwrap(),
            name,
        );
        // Swap internal faces a and a + 1 in faces, owner and neighbour (list
        // items start on line 21 of faces, 22 of owner and neighbour).
        for (file, first) in [("faces", 20), ("owner", 21), ("neighbour", 21)] {
            let text = std::fs::read_to_string(src.join(file)).unwrap();
            let mut lines: Vec<&str> = text.lines().collect();
            lines.swap(first + a, first + a + 1);
            std::fs::write(dir.join(file), lines.join("\n")).unwrap();
        }
        let swapped = read_polymesh(&dir).unwrap();
        assert_eq!(swapped, cavity, "faces {a} and {} swapped", a + 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
