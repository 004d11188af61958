//! blockMeshDict → mesh against the meshes OpenFOAM v1912's blockMesh writes
//! (`tests/data/block_mesh/*/polyMesh`, made by `scripts/block_mesh_reference.sh`).

mod common;
use common::Scratch;

use fvpoisson::mesh::block_mesh::read_block_mesh_dict;
use fvpoisson::mesh::polymesh::read_polymesh;
use fvpoisson::mesh::{Mesh, MeshSource};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    common::repo("tests/data/block_mesh").join(name)
}

/// Points to round-off (the reference is written with 17 digits), and
/// faces, owner, neighbour and patches exactly.
fn assert_same_mesh(ours: &Mesh, foam: &Mesh, name: &str) {
    assert_eq!(ours.n_points(), foam.n_points(), "{name}: points");
    assert_eq!(ours.n_cells(), foam.n_cells(), "{name}: cells");
    let extent = foam.points().iter().fold(0.0f64, |m, p| m.max(p.amax()));
    for (i, (a, b)) in ours.points().iter().zip(foam.points()).enumerate() {
        assert!(
            (a - b).amax() <= 1e-13 * extent,
            "{name}: point {i}: {a:?} vs OpenFOAM {b:?}"
        );
    }
    for (f, (a, b)) in ours.faces().iter().zip(foam.faces().iter()).enumerate() {
        assert_eq!(a, b, "{name}: face {f}");
    }
    assert_eq!(ours.faces().len(), foam.faces().len(), "{name}: faces");
    assert_eq!(ours.owner(), foam.owner(), "{name}: owner");
    assert_eq!(ours.neighbour(), foam.neighbour(), "{name}: neighbour");
    assert_eq!(ours.patches(), foam.patches(), "{name}: patches");
}

#[test]
fn meshes_equal_openfoam_blockmesh_output() {
    for name in ["cavity", "three_block"] {
        let dir = data(name);
        let ours = read_block_mesh_dict(&dir.join("blockMeshDict")).unwrap();
        let foam = read_polymesh(&dir.join("polyMesh")).unwrap();
        assert_same_mesh(&ours, &foam, name);
    }
}

#[test]
fn old_patches_syntax_equals_openfoam_output() {
    let dir = data("cavity_old_patches");
    let ours = read_block_mesh_dict(&dir.join("blockMeshDict")).unwrap();
    let foam = read_polymesh(&dir.join("polyMesh")).unwrap();
    assert_same_mesh(&ours, &foam, "cavity_old_patches");
    // The same mesh as the `boundary` form of the dictionary.
    let cavity = read_block_mesh_dict(&data("cavity").join("blockMeshDict")).unwrap();
    assert_same_mesh(&ours, &cavity, "cavity_old_patches vs cavity");
}

#[test]
fn case_without_polymesh_builds_it_from_blockmeshdict() {
    let case = Scratch::new("block_mesh_case");
    std::fs::create_dir_all(case.join("system")).unwrap();
    std::fs::copy(
        data("three_block").join("blockMeshDict"),
        case.join("system/blockMeshDict"),
    )
    .unwrap();
    let mesh = MeshSource::parse(case.to_str().unwrap())
        .unwrap()
        .load()
        .unwrap();
    let foam = read_polymesh(&data("three_block").join("polyMesh")).unwrap();
    assert_same_mesh(&mesh, &foam, "case");
}

/// The cavity dictionary with `from` replaced by `to`, built; the error text.
fn error_of_edit(tag: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(data("three_block").join("blockMeshDict")).unwrap();
    assert!(text.contains(from), "{from}");
    let dir = Scratch::new(&format!("block_mesh_{tag}"));
    let path = dir.join("blockMeshDict");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    read_block_mesh_dict(&path).unwrap_err().to_string()
}

#[test]
fn unsupported_and_bad_dictionaries_are_refused_by_name() {
    let err = error_of_edit("arc", "edges\n(\n", "edges\n(\n    arc 0 1 (0.5 -0.1 0)\n");
    assert!(err.contains("curved edges"), "{err}");
    assert!(err.contains("'edges'"), "{err}");
    let err = error_of_edit(
        "merge",
        "mergePatchPairs\n(\n",
        "mergePatchPairs\n(\n    (inlet outlet)\n",
    );
    assert!(err.contains("merging patch pairs"), "{err}");
    // Vertices 0 and 1 swapped: the first block turns left-handed.
    let err = error_of_edit(
        "inside-out",
        "hex (0 1 4 3 6 7 10 9)",
        "hex (1 0 3 4 7 6 9 10)",
    );
    assert!(err.contains("inside-out"), "{err}");
    // The third block's cells along the face it shares with the first differ.
    let err = error_of_edit(
        "mismatch",
        "(3 4 2) simpleGrading (2 1 1.5)",
        "(3 5 2) simpleGrading (2 1 1.5)",
    );
    assert!(
        err.contains("do not match") && err.contains("blocks 0 and 2"),
        "{err}"
    );
    let err = error_of_edit("no-face", "(2 5 11 8)", "(2 5 11 9)");
    assert!(
        err.contains("patch 'outlet'") && err.contains("not a face of any block"),
        "{err}"
    );
    let err = error_of_edit("wedge", "hex (0 1 4 3 6 7 10 9)", "hex (0 1 4 3 6 7 10 10)");
    assert!(err.contains("repeats a vertex"), "{err}");
    // A block cut short: the line of its shape word names it.
    let last_block = "hex (4 13 12 3 10 15 14 9) (3 4 2) simpleGrading (2 1 1.5)";
    let err = error_of_edit("no-vertices", last_block, &format!("{last_block} hex"));
    assert!(
        err.ends_with("blockMeshDict:45: block 3: missing its vertices"),
        "{err}"
    );
    let err = error_of_edit("no-counts", last_block, "hex (4 13 12 3 10 15 14 9)");
    assert!(
        err.ends_with("blockMeshDict:45: block 2: missing its cell counts (nx ny nz)"),
        "{err}"
    );
}
