//! Gmsh loader tests on files written by gmsh 4.8 (`meshes/gmsh/make.sh`), checked
//! against counts read independently from the files and against OpenFOAM's
//! `gmshToFoam` + `checkMesh` of the same MSH 2.2 files (`*.foam.txt`).

mod common;

use fvpoisson::mesh::gmsh::{parse_msh, read_msh};
use fvpoisson::mesh::{CellShape, Mesh, PatchKind};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MESHES: [&str; 4] = ["tet_cube", "hex_box", "prism_wedge", "pyramid_hybrid"];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("meshes/gmsh")
}

/// Every shipped .msh file of a mesh (the 2.2 ASCII one first).
fn versions(mesh: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(&format!("{mesh}.v")) && name.ends_with(".msh")
        })
        .collect();
    files.sort_by_key(|p| !p.to_str().unwrap().ends_with(".v22.msh"));
    assert!(files.len() >= 2, "{mesh}: expected a 2.2 and a 4.1 file");
    files
}

/// Element counts by Gmsh type and surface element counts by physical name, read
/// from an ASCII MSH 2.2 file with a minimal independent parser.
fn count_v22(path: &Path) -> (BTreeMap<u32, usize>, BTreeMap<String, usize>) {
    let text = std::fs::read_to_string(path).unwrap();
    let section = |name: &str| {
        let start = text.find(&format!("${name}\n")).unwrap() + name.len() + 2;
        let end = text.find(&format!("$End{name}")).unwrap();
        text[start..end]
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    let names: BTreeMap<String, String> = section("PhysicalNames")
        .filter(|t| t[0] == "2")
        .map(|t| (t[1].to_string(), t[2].trim_matches('"').to_string()))
        .collect();
    let mut types = BTreeMap::new();
    let mut surfaces = BTreeMap::new();
    for t in section("Elements") {
        *types.entry(t[1].parse().unwrap()).or_default() += 1;
        if let Some(name) = names.get(t[3]).filter(|_| t[1] == "2" || t[1] == "3") {
            *surfaces.entry(name.clone()).or_default() += 1;
        }
    }
    (types, surfaces)
}

/// Numbers of OpenFOAM's checkMesh kept in `<mesh>.foam.txt`: "key: value" lines,
/// patch lines "name faces points ...", and the total volume.
struct FoamNumbers {
    counts: BTreeMap<String, usize>,
    patches: BTreeMap<String, usize>,
    volume: f64,
}

fn foam_numbers(mesh: &str) -> FoamNumbers {
    let text = std::fs::read_to_string(dir().join(format!("{mesh}.foam.txt"))).unwrap();
    let mut out = FoamNumbers {
        counts: BTreeMap::new(),
        patches: BTreeMap::new(),
        volume: f64::NAN,
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(v) = line.split("Total volume = ").nth(1) {
            out.volume = v.split(".  ").next().unwrap().parse().unwrap();
        } else if let Some((k, v)) = line.split_once(':') {
            out.counts
                .insert(k.trim().to_string(), v.trim().parse().unwrap());
        } else {
            let t: Vec<&str> = line.split_whitespace().collect();
            out.patches.insert(t[0].to_string(), t[1].parse().unwrap());
        }
    }
    out
}

fn shape_counts(mesh: &Mesh) -> BTreeMap<CellShape, usize> {
    let mut counts = BTreeMap::new();
    for s in mesh.cell_shapes() {
        *counts.entry(s).or_default() += 1;
    }
    counts
}

fn assert_same_mesh(a: &Mesh, b: &Mesh, file: &Path) {
    let what = file.display();
    assert_eq!(a.faces(), b.faces(), "{what}");
    assert_eq!(a.owner(), b.owner(), "{what}");
    assert_eq!(a.neighbour(), b.neighbour(), "{what}");
    assert_eq!(a.patches(), b.patches(), "{what}");
    assert_eq!(a.n_points(), b.n_points(), "{what}");
    for (p, q) in a.points().iter().zip(b.points()) {
        assert!(
            (p - q).amax() <= 1e-15 * p.amax().max(1.0),
            "{what}: point {p} vs {q}"
        );
    }
}

/// Cell centres and volumes, rounded to 12 digits and sorted: the cells' geometry
/// independent of their order.
fn sorted_cells(mesh: &Mesh) -> Vec<[i64; 4]> {
    let g = mesh.geometry().unwrap();
    let round = |x: f64| (x * 1e12).round() as i64;
    let mut cells: Vec<[i64; 4]> = (0..mesh.n_cells())
        .map(|c| {
            let (x, v) = (g.cell_centres[c], g.cell_volumes[c]);
            [round(x.x), round(x.y), round(x.z), round(v)]
        })
        .collect();
    cells.sort_unstable();
    cells
}

fn total_volume(mesh: &Mesh) -> f64 {
    mesh.geometry().unwrap().cell_volumes.iter().sum()
}

#[test]
fn every_version_of_every_mesh_loads_and_matches_the_file_and_openfoam() {
    for mesh in MESHES {
        let files = versions(mesh);
        let reference = read_msh(&files[0]).unwrap_or_else(|e| panic!("{e}"));
        let (types, surfaces) = count_v22(&files[0]);
        let foam = foam_numbers(mesh);

        // Cells: one per volume element, shapes as in the file (Gmsh types 4..7).
        let shapes = shape_counts(&reference);
        let file_shapes: BTreeMap<CellShape, usize> = [
            (4, CellShape::Tetrahedron),
            (5, CellShape::Hexahedron),
            (6, CellShape::Prism),
            (7, CellShape::Pyramid),
        ]
        .iter()
        .filter_map(|(t, s)| types.get(t).map(|&n| (*s, n)))
        .collect();
        assert_eq!(shapes, file_shapes, "{mesh}");
        assert_eq!(reference.n_cells(), foam.counts["cells"], "{mesh}");
        for (shape, key) in [
            (CellShape::Tetrahedron, "tetrahedra"),
            (CellShape::Hexahedron, "hexahedra"),
            (CellShape::Prism, "prisms"),
            (CellShape::Pyramid, "pyramids"),
            (CellShape::Polyhedron, "polyhedra"),
        ] {
            assert_eq!(
                shapes.get(&shape).copied().unwrap_or(0),
                foam.counts[key],
                "{mesh} {key}"
            );
        }
        assert_eq!(reference.n_points(), foam.counts["points"], "{mesh}");
        assert_eq!(reference.n_faces(), foam.counts["faces"], "{mesh}");
        assert_eq!(
            reference.n_internal_faces(),
            foam.counts["internal faces"],
            "{mesh}"
        );

        // Patches: the physical surfaces, with their element counts.
        let patches: BTreeMap<String, usize> = reference
            .patches()
            .iter()
            .map(|p| (p.name.clone(), p.size))
            .collect();
        assert_eq!(patches, surfaces, "{mesh}");
        assert_eq!(patches, foam.patches, "{mesh}");
        for p in reference.patches() {
            let wall = p.name.to_lowercase().contains("wall");
            assert_eq!(
                p.kind,
                if wall {
                    PatchKind::Wall
                } else {
                    PatchKind::Patch
                },
                "{}",
                p.name
            );
        }

        let volume = total_volume(&reference);
        assert!(
            (volume - foam.volume).abs() < 1e-12 * foam.volume,
            "{mesh}: {volume} vs {}",
            foam.volume
        );

        // The 4.1 (ASCII and binary) files give the same mesh as the 2.2 one: the
        // same faces and patches, and the same points up to the 16 digits of ASCII.
        // Gmsh writes the elements of the hybrid mesh in another order in MSH 2.2
        // (by type, not by volume), so there only the cells' geometry is compared.
        for file in &files[1..] {
            let other = read_msh(file).unwrap_or_else(|e| panic!("{e}"));
            if mesh == "pyramid_hybrid" {
                assert_eq!(
                    sorted_cells(&other),
                    sorted_cells(&reference),
                    "{}",
                    file.display()
                );
            } else {
                assert_same_mesh(&other, &reference, file);
            }
        }
    }
}

#[test]
fn volumes_are_those_of_the_geometries() {
    let volume = |mesh: &str| total_volume(&read_msh(&versions(mesh)[0]).unwrap());
    assert!((volume("tet_cube") - 1.0).abs() < 1e-12);
    assert!((volume("hex_box") - 2.0 * 1.0 * 0.5).abs() < 1e-12);
    assert!((volume("pyramid_hybrid") - 1.0).abs() < 1e-12);
    // Quarter disc of radius 1 as a polygon of straight edges along the arc (the
    // arc's nodes are exactly on the circle), times the height 0.3; the arc has one
    // edge per face of the two-layer outer wall.
    let prisms = read_msh(&versions("prism_wedge")[0]).unwrap();
    let n_arc = prisms.patch("outerWall").unwrap().size as f64 / 2.0;
    let polygon = 0.5 * n_arc * (std::f64::consts::FRAC_PI_2 / n_arc).sin();
    assert!(
        (volume("prism_wedge") - 0.3 * polygon).abs() < 1e-12,
        "{}",
        volume("prism_wedge")
    );
}

/// A tiny MSH 2.2 file: two tetrahedra sharing the face (1, 2, 3), their other
/// faces on physical surface 1 "walls".
const TWO_TETS: &str = "$MeshFormat
2.2 0 8
$EndMeshFormat
$PhysicalNames
1
2 1 \"walls\"
$EndPhysicalNames
$Nodes
5
10 0 0 0
20 1 0 0
30 0 1 0
40 0 0 1
50 1 1 1
$EndNodes
$Elements
8
1 4 2 0 1 10 20 30 40
2 4 2 0 1 20 30 40 50
3 2 2 1 1 10 30 20
4 2 2 1 1 10 20 40
5 2 2 1 1 10 40 30
6 2 2 1 1 20 50 40
7 2 2 1 1 30 40 50
8 2 2 1 1 20 30 50
$EndElements
";

fn parse(text: &str) -> Result<Mesh, String> {
    parse_msh(Path::new("test.msh"), text.as_bytes()).map_err(|e| e.to_string())
}

#[test]
fn a_tiny_file_with_gaps_in_node_tags_loads() {
    let mesh = parse(TWO_TETS).unwrap();
    assert_eq!(mesh.n_cells(), 2);
    assert_eq!(mesh.n_internal_faces(), 1);
    assert_eq!(mesh.patches()[0].name, "walls");
    assert_eq!(mesh.patches()[0].kind, PatchKind::Wall);
    assert_eq!(mesh.patches()[0].size, 6);
    assert!((total_volume(&mesh) - (1.0 / 6.0 + 1.0 / 3.0)).abs() < 1e-15);
    // A boundary triangle on no physical surface goes to defaultFaces.
    let untagged = parse(&TWO_TETS.replace("6 2 2 1 1 20 50 40", "6 2 2 0 1 20 50 40")).unwrap();
    let sizes: Vec<(&str, usize)> = untagged
        .patches()
        .iter()
        .map(|p| (p.name.as_str(), p.size))
        .collect();
    assert_eq!(sizes, [("walls", 5), ("defaultFaces", 1)]);
    // A mirrored (negative-volume) node order is reordered, not refused.
    let mirrored =
        parse(&TWO_TETS.replace("1 4 2 0 1 10 20 30 40", "1 4 2 0 1 10 30 20 40")).unwrap();
    assert!((total_volume(&mirrored) - total_volume(&mesh)).abs() < 1e-15);
}

#[test]
fn malformed_files_are_refused_naming_file_and_line() {
    let cases: [(String, &str); 9] = [
        (
            TWO_TETS[..TWO_TETS.find("3 2 2 1").unwrap()].to_string(),
            "test.msh:20: unexpected end of file: expected an element tag",
        ),
        (
            TWO_TETS.replace("$EndNodes", ""),
            "test.msh:16: expected $EndNodes, found '$Elements'",
        ),
        (
            TWO_TETS.replace("$Nodes\n5", "$Nodes\n6"),
            "test.msh:15: expected a node tag, found '$EndNodes'",
        ),
        (
            TWO_TETS.replace("$Elements\n8", "$Elements\n7"),
            "test.msh:25: expected $EndElements, found '8'",
        ),
        (
            TWO_TETS.replace("2 4 2 0 1", "2 11 2 0 1"),
            "test.msh:19: element type 11 (10-node second-order tetrahedron) is not supported",
        ),
        (
            TWO_TETS.replace("2 4 2 0 1", "2 99 2 0 1"),
            "test.msh:19: unknown element type 99",
        ),
        (
            TWO_TETS.replace("2 4 2 0 1 20 30 40 50", "2 4 2 0 1 20 30 40 60"),
            "test.msh:19: element 2 uses node 60, which is not in $Nodes",
        ),
        (
            TWO_TETS.replace("10 0 0 0\n20", "10 0 0 0\n10"),
            "test.msh:9: node tag 10 is defined twice",
        ),
        (
            TWO_TETS.replace("2.2 0 8", "4.0 0 8"),
            "test.msh:2: MSH format 4.0 is not supported",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(&text).unwrap_err();
        assert!(
            err.starts_with(expected),
            "got: {err}\nexpected: {expected}"
        );
    }
}

#[test]
fn wrong_counts_in_msh41_are_refused_naming_the_line() {
    let path = dir().join("tet_cube.v41.msh");
    let text = std::fs::read_to_string(&path).unwrap();
    // Line of the end of the first occurrence of `pattern`.
    let line_of = |pattern: &str| {
        text[..text.find(pattern).unwrap() + pattern.len()]
            .lines()
            .count()
    };
    let cases = [
        (
            "$Elements\n7 633 1 633",
            "$Elements\n7 634 1 634",
            "$Elements\n7 633 1 633",
            "the element blocks hold 633 elements but 634 were announced",
        ),
        (
            "$Elements\n7 633 1 633",
            "$Elements\n7 632 1 632",
            "\n3 1 4 373",
            "element blocks hold more than the 632 elements announced",
        ),
        (
            "$Nodes\n27 141 1 141",
            "$Nodes\n27 142 1 142",
            "$Nodes\n27 141 1 141",
            "the node blocks hold 141 nodes but 142 were announced",
        ),
    ];
    for (from, to, at, msg) in cases {
        assert!(text.contains(from), "{from}");
        let err = parse_msh(&path, text.replace(from, to).as_bytes())
            .unwrap_err()
            .to_string();
        let expected = format!("{}:{}: {msg}", path.display(), line_of(at));
        assert_eq!(err, expected);
    }
}

#[test]
fn non_manifold_and_non_conformal_meshes_are_refused_naming_elements() {
    // A third tetrahedron on the shared face (1, 2, 3) of the first two.
    let three = TWO_TETS
        .replace("5\n10 0 0 0", "6\n10 0 0 0")
        .replace("50 1 1 1\n", "50 1 1 1\n60 0.2 0.2 0.2\n")
        .replace("$Elements\n8\n", "$Elements\n9\n9 4 2 0 1 20 40 30 60\n");
    let err = parse(&three).unwrap_err();
    assert!(
        err.starts_with("test.msh: non-manifold face at (0.3333333333333333, 0.3333333333333333, 0.3333333333333333): shared by 3 elements"),
        "{err}"
    );
    for element in ["element 1", "element 2", "element 9"] {
        assert!(err.contains(element), "{err}");
    }

    // A unit cube hexahedron with two tetrahedra on its top face, no pyramid between.
    let hanging = "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n9\n\
        1 0 0 0\n2 1 0 0\n3 1 1 0\n4 0 1 0\n5 0 0 1\n6 1 0 1\n7 1 1 1\n8 0 1 1\n9 0.5 0.5 1.5\n$EndNodes\n\
        $Elements\n3\n1 5 2 0 1 1 2 3 4 5 6 7 8\n2 4 2 0 1 5 6 7 9\n3 4 2 0 1 5 7 8 9\n$EndElements\n";
    let err = parse(hanging).unwrap_err();
    assert!(
        err.starts_with("test.msh: non-conformal interface at"),
        "{err}"
    );
    assert!(
        err.contains("element 1 (hexahedron)") && err.contains("(tetrahedron)"),
        "{err}"
    );
}

#[test]
fn binary_errors_give_the_byte_offset() {
    let path = dir().join("tet_cube.v41bin.msh");
    let bytes = std::fs::read(&path).unwrap();
    let cut = &bytes[..bytes.len() / 2];
    let err = parse_msh(&path, cut).unwrap_err().to_string();
    assert!(
        err.contains("tet_cube.v41bin.msh:0: unexpected end of file"),
        "{err}"
    );
    // The offset is that of the number cut short.
    let offset: usize = err
        .split("(at byte offset ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert!(offset <= cut.len() && offset + 8 > cut.len(), "{err}");
}

#[test]
fn corrupted_files_give_errors_not_panics() {
    let started = std::time::Instant::now();
    for mesh in MESHES {
        for file in versions(mesh) {
            let bytes = std::fs::read(&file).unwrap();
            for (i, bad) in common::corruptions(&bytes, 400).into_iter().enumerate() {
                let outcome = std::panic::catch_unwind(|| parse_msh(&file, &bad).map(|_| ()));
                assert!(
                    outcome.is_ok(),
                    "{} corruption {i} panicked",
                    file.display()
                );
            }
        }
    }
    assert!(
        started.elapsed().as_secs() < 20,
        "fuzz test took {:?}",
        started.elapsed()
    );
}
