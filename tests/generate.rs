//! Built-in box generator: topology, exact geometry, perturbation, renumbering, 2-D.

use fvpoisson::mesh::generate::BoxSpec;
use fvpoisson::mesh::{CellShape, Geometry, Mesh, PatchKind, Vec3};
use std::collections::HashMap;

fn generate(spec: &str) -> Mesh {
    spec.parse::<BoxSpec>()
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .generate()
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
}

fn rel_close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-300)
}

/// Sum of each cell's outward face area vectors, largest magnitude over the cells,
/// relative to the largest face area.
fn worst_cell_closure(mesh: &Mesh, g: &Geometry) -> f64 {
    let mut sum = vec![Vec3::zeros(); mesh.n_cells()];
    for (f, s) in g.face_area_vectors.iter().enumerate() {
        sum[mesh.owner()[f] as usize] += s;
        if f < mesh.n_internal_faces() {
            sum[mesh.neighbour()[f] as usize] -= s;
        }
    }
    let largest = g
        .face_area_vectors
        .iter()
        .map(|s| s.norm())
        .fold(0.0, f64::max);
    sum.iter().map(|s| s.norm()).fold(0.0, f64::max) / largest
}

/// Internal and boundary face counts of an `n` hex lattice (quads).
fn hex_face_counts(n: [usize; 3]) -> (usize, usize) {
    let [x, y, z] = n;
    let internal = (x - 1) * y * z + x * (y - 1) * z + x * y * (z - 1);
    (internal, 2 * (x * y + y * z + z * x))
}

fn max_non_orthogonality(mesh: &Mesh, g: &Geometry) -> f64 {
    (0..mesh.n_internal_faces())
        .map(|f| g.non_orthogonality(mesh, f))
        .fold(0.0, f64::max)
}

#[test]
fn hex_box_is_exact() {
    let n = [4, 3, 2];
    let mesh = generate("box:4x3x2:size=2x1x0.5:origin=-1x0x3");
    let g = mesh.geometry().unwrap();
    assert_eq!(mesh.n_cells(), 24);
    assert_eq!(mesh.n_points(), 5 * 4 * 3);
    let (internal, boundary) = hex_face_counts(n);
    assert_eq!(mesh.n_internal_faces(), internal);
    assert_eq!(mesh.n_faces(), internal + boundary);
    assert!(mesh
        .cell_shapes()
        .iter()
        .all(|&s| s == CellShape::Hexahedron));
    let cell_volume = 0.5 * (1.0 / 3.0) * 0.25;
    for &v in &g.cell_volumes {
        assert!(rel_close(v, cell_volume, 1e-14), "{v} vs {cell_volume}");
    }
    assert!(rel_close(g.cell_volumes.iter().sum(), 1.0, 1e-14));
    // Cell (i, j, k) in natural order is centred at origin + (i + 1/2) * spacing.
    for (c, centre) in g.cell_centres.iter().enumerate() {
        let (i, j, k) = (c % 4, (c / 4) % 3, c / 12);
        let expect = Vec3::new(
            -1.0 + 0.5 * (i as f64 + 0.5),
            (j as f64 + 0.5) / 3.0,
            3.0 + 0.25 * (k as f64 + 0.5),
        );
        assert!(
            (centre - expect).norm() < 1e-14,
            "cell {c}: {centre} vs {expect}"
        );
    }
    let names: Vec<_> = mesh
        .patches()
        .iter()
        .map(|p| (p.name.as_str(), p.size, p.kind))
        .collect();
    let [x, y, z] = n;
    assert_eq!(
        names,
        [
            ("xmin", y * z, PatchKind::Patch),
            ("xmax", y * z, PatchKind::Patch),
            ("ymin", x * z, PatchKind::Patch),
            ("ymax", x * z, PatchKind::Patch),
            ("zmin", x * y, PatchKind::Patch),
            ("zmax", x * y, PatchKind::Patch),
        ]
    );
    // Boundary normals point out of the box.
    for (p, outward) in mesh.patches().iter().zip([
        -Vec3::x(),
        Vec3::x(),
        -Vec3::y(),
        Vec3::y(),
        -Vec3::z(),
        Vec3::z(),
    ]) {
        for f in p.faces() {
            let s = g.face_area_vectors[f];
            assert!(
                (s.normalize() - outward).norm() < 1e-14,
                "patch {} face {f}: {s}",
                p.name
            );
        }
    }
    // Internal normals point from owner to neighbour.
    for f in 0..mesh.n_internal_faces() {
        assert!(g.face_area_vectors[f].dot(&g.delta(&mesh, f)) > 0.0);
    }
    assert!(worst_cell_closure(&mesh, &g) < 1e-14);
}

/// The sorted point labels of every cell.
fn cell_points(mesh: &Mesh) -> Vec<Vec<u32>> {
    let (offsets, cell_faces) = mesh.cell_faces();
    (0..mesh.n_cells())
        .map(|c| {
            let mut pts: Vec<u32> = cell_faces[offsets[c] as usize..offsets[c + 1] as usize]
                .iter()
                .flat_map(|&f| mesh.faces().face(f as usize).iter().copied())
                .collect();
            pts.sort_unstable();
            pts.dedup();
            pts
        })
        .collect()
}

/// Every tetrahedron's four triangles, from its points alone (not its faces):
/// internal triangles must be shared by exactly two tetrahedra.
fn check_tet_conformity(mesh: &Mesh) {
    let mut count: HashMap<[u32; 3], usize> = HashMap::new();
    for (c, pts) in cell_points(mesh).into_iter().enumerate() {
        assert_eq!(
            pts.len(),
            4,
            "cell {c} is not a tetrahedron: points {pts:?}"
        );
        for omit in 0..4 {
            let mut tri = [0; 3];
            for (slot, &p) in tri.iter_mut().zip(
                pts.iter()
                    .enumerate()
                    .filter(|&(i, _)| i != omit)
                    .map(|(_, p)| p),
            ) {
                *slot = p;
            }
            *count.entry(tri).or_default() += 1;
        }
    }
    assert!(
        count.values().all(|&n| n == 1 || n == 2),
        "a triangle is shared by more than 2 tetrahedra"
    );
    let shared = count.values().filter(|&&n| n == 2).count();
    let single = count.values().filter(|&&n| n == 1).count();
    assert_eq!(shared, mesh.n_internal_faces());
    assert_eq!(single, mesh.n_faces() - mesh.n_internal_faces());
    // Every face of the mesh is one of those triangles.
    for face in mesh.faces().iter() {
        let mut tri = [face[0], face[1], face[2]];
        tri.sort_unstable();
        assert!(
            count.contains_key(&tri),
            "face {face:?} is no tetrahedron's triangle"
        );
    }
}

#[test]
fn tet_box_is_exact_and_conforming() {
    let n = [3, 2, 4];
    let mesh = generate("box:3x2x4:tet:size=1.5x2x0.7");
    let g = mesh.geometry().unwrap();
    let hexes = 24;
    assert_eq!(mesh.n_cells(), 6 * hexes);
    assert!(mesh
        .cell_shapes()
        .iter()
        .all(|&s| s == CellShape::Tetrahedron));
    let (hex_internal, hex_boundary) = hex_face_counts(n);
    assert_eq!(mesh.n_internal_faces(), 2 * hex_internal + 6 * hexes);
    assert_eq!(mesh.n_faces() - mesh.n_internal_faces(), 2 * hex_boundary);
    for p in mesh.patches() {
        let axis = (p.name.as_bytes()[0] - b'x') as usize;
        assert_eq!(p.size, 2 * hexes / n[axis], "patch {}", p.name);
    }
    let box_volume = 1.5 * 2.0 * 0.7;
    let hex_volume = box_volume / hexes as f64;
    for &v in &g.cell_volumes {
        assert!(rel_close(v, hex_volume / 6.0, 1e-13), "{v}");
    }
    assert!(rel_close(g.cell_volumes.iter().sum(), box_volume, 1e-12));
    assert!(worst_cell_closure(&mesh, &g) < 1e-14);
    check_tet_conformity(&mesh);
}

#[test]
fn perturbed_boxes_stay_valid_and_keep_the_box() {
    for (spec, volume) in [
        ("box:6x5x4:size=3x1x2:perturb=0.45:seed=3", 6.0),
        ("box:5x4x4:tet:perturb=0.3:seed=3", 1.0),
    ] {
        let mesh = generate(spec);
        let g = mesh.geometry().unwrap();
        assert!(g.cell_volumes.iter().all(|&v| v > 0.0), "{spec}");
        assert!(
            rel_close(g.cell_volumes.iter().sum(), volume, 1e-12),
            "{spec}"
        );
        let non_orth = max_non_orthogonality(&mesh, &g);
        assert!(non_orth > 1.0 && non_orth < 90.0, "{spec}: {non_orth}");
        assert!(worst_cell_closure(&mesh, &g) < 1e-13, "{spec}");
        // Boundary points stay on the box (origin 0).
        let size: BoxSpec = spec.parse().unwrap();
        for p in mesh.patches() {
            let axis = (p.name.as_bytes()[0] - b'x') as usize;
            let plane = if p.name.ends_with("max") {
                size.size[axis]
            } else {
                0.0
            };
            for f in p.faces() {
                for &q in mesh.faces().face(f) {
                    assert_eq!(
                        mesh.points()[q as usize][axis],
                        plane,
                        "{spec} patch {}",
                        p.name
                    );
                }
            }
        }
    }
}

/// A perturbation near the limit on many cells: no cell may invert.
#[test]
fn strongest_perturbation_inverts_no_cell() {
    for spec in [
        "box:24x24x24:perturb=0.499:seed=11",
        "box:12x12x12:tet:perturb=0.499:seed=11",
    ] {
        let mesh = generate(spec);
        let g = mesh.geometry().unwrap_or_else(|e| panic!("{spec}: {e}"));
        let min = g.cell_volumes.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(min > 0.0, "{spec}: smallest volume {min}");
    }
}

#[test]
fn perturbation_is_reproducible_and_thread_independent() {
    let spec = "box:5x4x3:perturb=0.3:seed=7:renumber";
    let in_pool = |threads: usize, spec: &str| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| generate(spec))
    };
    let one = in_pool(1, spec);
    assert_eq!(one, in_pool(2, spec));
    assert_eq!(one, generate(spec));
    let other = generate("box:5x4x3:perturb=0.3:seed=8:renumber");
    assert_ne!(one.points(), other.points());
    assert_ne!(one.owner(), other.owner());
    let tet = "box:4x3x3:tet:perturb=0.2:seed=5:renumber";
    assert_eq!(in_pool(1, tet), in_pool(2, tet));
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

#[test]
fn renumbering_permutes_cells_only() {
    for base in [
        "box:5x4x3:perturb=0.3:seed=4",
        "box:3x3x2:tet:perturb=0.2:seed=4",
    ] {
        let plain = generate(base);
        let renumbered = generate(&format!("{base}:renumber"));
        assert_eq!(plain.points(), renumbered.points());
        assert_eq!(plain.n_faces(), renumbered.n_faces());
        assert_eq!(plain.patches(), renumbered.patches());
        assert_ne!(plain.owner(), renumbered.owner());
        let (gp, gr) = (plain.geometry().unwrap(), renumbered.geometry().unwrap());
        // Same cells (identified by their points) with the same volumes and
        // centres, up to rounding: face order and orientation within a cell change.
        let by_points = |mesh: &Mesh, g: &Geometry| {
            let mut cells: Vec<_> = cell_points(mesh)
                .into_iter()
                .zip(
                    g.cell_volumes
                        .iter()
                        .copied()
                        .zip(g.cell_centres.iter().copied()),
                )
                .collect();
            cells.sort_by(|a, b| a.0.cmp(&b.0));
            cells
        };
        let (cp, cr) = (by_points(&plain, &gp), by_points(&renumbered, &gr));
        for ((pp, (vp, cp)), (pr, (vr, cr))) in cp.iter().zip(&cr) {
            assert_eq!(pp, pr);
            assert!(
                rel_close(*vp, *vr, 1e-13) && (cp - cr).norm() < 1e-14,
                "{base}"
            );
        }
        let (vp, vr) = (
            sorted(gp.cell_volumes.clone()),
            sorted(gr.cell_volumes.clone()),
        );
        assert!(vp.iter().zip(&vr).all(|(a, b)| rel_close(*a, *b, 1e-13)));
        assert!(worst_cell_closure(&renumbered, &gr) < 1e-13);
        // The numbering is far from natural: most internal faces join distant cells.
        let far = (0..renumbered.n_internal_faces())
            .filter(|&f| renumbered.neighbour()[f] - renumbered.owner()[f] > 8)
            .count();
        assert!(far * 2 > renumbered.n_internal_faces(), "{base}");
    }
}

#[test]
fn two_d_box_has_one_layer_and_an_empty_patch() {
    let mesh = generate("box:5x4x1:2d:size=1x1x0.1:perturb=0.3");
    let g = mesh.geometry().unwrap();
    assert_eq!(mesh.n_cells(), 20);
    assert!(mesh
        .cell_shapes()
        .iter()
        .all(|&s| s == CellShape::Hexahedron));
    let names: Vec<_> = mesh
        .patches()
        .iter()
        .map(|p| (p.name.as_str(), p.size, p.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("xmin", 4, PatchKind::Patch),
            ("xmax", 4, PatchKind::Patch),
            ("ymin", 5, PatchKind::Patch),
            ("ymax", 5, PatchKind::Patch),
            ("frontAndBack", 40, PatchKind::Empty),
        ]
    );
    // One layer: every cell has a front and a back face, and the perturbation
    // moves the front and back copies of a point together (extruded cells).
    let back = &mesh.patch("frontAndBack").unwrap();
    let mut z_faces = vec![0; mesh.n_cells()];
    for f in back.faces() {
        z_faces[mesh.owner()[f] as usize] += 1;
        let s = g.face_area_vectors[f];
        assert!(
            s.x == 0.0 && s.y == 0.0,
            "face {f} is not in a z plane: {s}"
        );
    }
    assert!(z_faces.iter().all(|&n| n == 2));
    let layer = mesh.n_points() / 2;
    for p in 0..layer {
        let (front, rear) = (mesh.points()[p], mesh.points()[p + layer]);
        assert_eq!(
            (front.x, front.y, front.z, rear.z),
            (rear.x, rear.y, 0.0, 0.1)
        );
    }
    assert!(max_non_orthogonality(&mesh, &g) > 1.0);
    assert!(rel_close(g.cell_volumes.iter().sum(), 0.1, 1e-12));
}

#[test]
fn specs_parse_and_bad_parts_are_named() {
    let spec: BoxSpec =
        "box:64x32x16:size=2x1x0.5:origin=-1x0x1e-3:tet:perturb=0.2:seed=7:renumber"
            .parse()
            .unwrap();
    assert_eq!(spec.cells, [64, 32, 16]);
    assert_eq!(spec.size, [2.0, 1.0, 0.5]);
    assert_eq!(spec.origin, [-1.0, 0.0, 1e-3]);
    assert!(spec.tet && spec.renumber && !spec.two_d);
    assert_eq!((spec.perturb, spec.seed), (0.2, 7));
    let plain: BoxSpec = "box:2x3x4".parse().unwrap();
    assert_eq!(plain, BoxSpec::new([2, 3, 4]));
    assert!("box:8x8x1:2d".parse::<BoxSpec>().unwrap().two_d);
    // Mesh sources on the command line and in case files go through the same parser.
    assert_eq!(
        fvpoisson::mesh::load("box:2x2x2:tet").unwrap().n_cells(),
        48
    );
    let err = fvpoisson::mesh::load("box:2x2x2:tetra")
        .unwrap_err()
        .to_string();
    assert!(err.contains("option 'tetra'"), "{err}");

    for (bad, named) in [
        ("cube:4x4x4", "expected 'box:NXxNYxNZ'"),
        ("box:4x4", "cell counts '4x4'"),
        ("box:4x4x4x4", "cell counts '4x4x4x4'"),
        ("box:4xax4", "cell counts '4xax4'"),
        ("box:4x0x4", "4x0x4: every cell count"),
        ("box:4x4x4:foo", "option 'foo': unknown option"),
        ("box:4x4x4:tet=1", "option 'tet=1': takes no value"),
        ("box:4x4x4:size", "option 'size': needs a value"),
        ("box:4x4x4:size=1x1", "option 'size=1x1'"),
        (
            "box:4x4x4:size=1x-1x1",
            "size=1x-1x1: box lengths must be positive",
        ),
        (
            "box:4x4x4:origin=0x0xinf",
            "origin=0x0xinf: coordinates must be finite",
        ),
        (
            "box:4x4x4:perturb=0.5",
            "perturb=0.5: must be at least 0 and less than 0.5",
        ),
        ("box:4x4x4:perturb=-0.1", "perturb=-0.1"),
        (
            "box:4x4x4:perturb=big",
            "option 'perturb=big': expected a number",
        ),
        ("box:4x4x4:seed=-1", "option 'seed=-1'"),
        ("box:4x4x4:tet:tet", "option 'tet': given twice"),
        ("box:4x4x2:2d", "2d: a 2-D mesh has one cell layer"),
        ("box:4x4x1:2d:tet", "2d: cannot be combined with tet"),
        ("box:4x4x4:", "option '': unknown option"),
    ] {
        let err = bad.parse::<BoxSpec>().unwrap_err().to_string();
        assert!(
            err.contains(named),
            "{bad}: '{err}' does not name '{named}'"
        );
        assert!(err.contains(bad), "{bad}: '{err}' does not quote the spec");
    }
}

#[test]
fn oversized_boxes_are_refused_before_allocating() {
    let err = BoxSpec::new([100_000, 100_000, 100_000])
        .generate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("too large"), "{err}");
    let err = BoxSpec::new([usize::MAX, 2, 2])
        .generate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("too large"), "{err}");
}

/// Two prisms per hex, cut along the x-y diagonal: exact volumes and centroids,
/// triangles on the z sides, quads elsewhere, and across x and y faces the
/// centres sit off the normal by atan(1/2) = 26.57 degrees.
#[test]
fn prism_box_is_exact() {
    let mesh = generate("box:3x2x2:prism:size=3x2x4");
    let g = mesh.geometry().unwrap();
    assert_eq!(mesh.n_cells(), 24);
    assert_eq!(mesh.n_points(), 4 * 3 * 3);
    assert!(mesh.cell_shapes().iter().all(|&s| s == CellShape::Prism));
    let (hex_internal, _) = hex_face_counts([3, 2, 2]);
    // One diagonal quad inside each hex, z faces doubled.
    assert_eq!(mesh.n_internal_faces(), hex_internal + 12 + 3 * 2);
    for p in mesh.patches() {
        let expect = match &p.name[..1] {
            "x" => (4, 4),
            "y" => (6, 4),
            _ => (12, 3),
        };
        assert_eq!(p.size, expect.0, "{}", p.name);
        for f in p.faces() {
            assert_eq!(mesh.faces().face(f).len(), expect.1, "{}", p.name);
        }
    }
    for &v in &g.cell_volumes {
        assert!(rel_close(v, 1.0, 1e-14), "{v}");
    }
    // Unit hexes: prism 0 centred at (2/3, 1/3, 1) in its hex, prism 1 at (1/3, 2/3, 1).
    for (c, centre) in g.cell_centres.iter().enumerate() {
        let hex = c / 2;
        let (i, j, k) = (hex % 3, (hex / 3) % 2, hex / 6);
        let (dx, dy) = if c % 2 == 0 { (2.0, 1.0) } else { (1.0, 2.0) };
        let expect = Vec3::new(
            i as f64 + dx / 3.0,
            j as f64 + dy / 3.0,
            2.0 * k as f64 + 1.0,
        );
        assert!((centre - expect).norm() < 1e-13, "cell {c}: {centre}");
    }
    assert!(worst_cell_closure(&mesh, &g) < 1e-14);
    for f in 0..mesh.n_internal_faces() {
        assert!(g.face_area_vectors[f].dot(&g.delta(&mesh, f)) > 0.0);
    }
    let non_orth = max_non_orthogonality(&mesh, &g);
    assert!(
        (non_orth - 0.5f64.atan().to_degrees()).abs() < 1e-9,
        "{non_orth}"
    );
    for spec in [
        "box:4x4x1:prism:2d:perturb=0.3",
        "box:4x4x4:prism:perturb=0.3:renumber",
    ] {
        let mesh = generate(spec);
        let g = mesh.geometry().unwrap();
        assert!(rel_close(g.cell_volumes.iter().sum(), 1.0, 1e-12), "{spec}");
        assert!(g.cell_volumes.iter().all(|&v| v > 0.0), "{spec}");
        assert!(worst_cell_closure(&mesh, &g) < 1e-13, "{spec}");
    }
    let err = "box:2x2x2:prism:tet"
        .parse::<BoxSpec>()
        .unwrap_err()
        .to_string();
    assert!(err.contains("prism: cannot be combined with tet"), "{err}");
}
