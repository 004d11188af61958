//! Putting faces into polyMesh order: internal faces first, owner < neighbour,
//! sorted by (owner, neighbour); then boundary faces grouped by patch.

use super::{FaceList, Label, Mesh, MeshError, Patch, PatchKind, Vec3};
use rayon::prelude::*;

/// What lies on the far side of a face from its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaceSide {
    /// Another cell: the face is internal.
    Cell(Label),
    /// Boundary patch, by index into the patch list.
    Patch(u32),
}

/// Builds a [`Mesh`] from faces in any order. A face whose owner is larger than
/// its neighbour is flipped (points reversed) so its normal keeps pointing from
/// owner to neighbour. Boundary faces keep their relative order within a patch.
/// Patches that receive no face are dropped.
pub fn mesh_from_unordered_faces(
    points: Vec<Vec3>,
    faces: FaceList,
    mut owner: Vec<Label>,
    mut side: Vec<FaceSide>,
    patches: Vec<(String, PatchKind)>,
) -> Result<Mesh, MeshError> {
    let n = faces.len();
    if owner.len() != n || side.len() != n {
        return Err(MeshError::invalid(format!(
            "{n} faces but {} owners and {} face sides",
            owner.len(),
            side.len()
        )));
    }
    let mut flip = vec![false; n];
    for f in 0..n {
        match side[f] {
            FaceSide::Cell(nb) if nb == owner[f] => {
                return Err(MeshError::invalid(format!(
                    "face {f} has cell {nb} on both sides"
                )))
            }
            FaceSide::Cell(nb) if nb < owner[f] => {
                side[f] = FaceSide::Cell(owner[f]);
                owner[f] = nb;
                flip[f] = true;
            }
            FaceSide::Patch(p) if p as usize >= patches.len() => {
                return Err(MeshError::invalid(format!(
                    "face {f} is on patch {p} but there are {} patches",
                    patches.len()
                )))
            }
            _ => {}
        }
    }
    // Internal faces sort before boundary ones because `Cell` < `Patch`; within
    // the boundary, (patch, position) keeps the given order per patch.
    let mut order: Vec<usize> = (0..n).collect();
    order.par_sort_unstable_by_key(|&f| match side[f] {
        FaceSide::Cell(nb) => (0u8, owner[f], nb, 0usize),
        FaceSide::Patch(p) => (1u8, p, 0, f),
    });
    let mut labels = Vec::with_capacity(faces.labels().len());
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0u32);
    for &f in &order {
        let face = faces.face(f);
        if flip[f] {
            // Reverse orientation keeping the first point: OpenFOAM's face::reverseFace.
            labels.push(face[0]);
            labels.extend(face[1..].iter().rev());
        } else {
            labels.extend_from_slice(face);
        }
        offsets.push(
            u32::try_from(labels.len()).map_err(|_| {
                MeshError::invalid("mesh too large: more than 2^32 face-point labels")
            })?,
        );
    }
    let new_faces = FaceList::from_compact(offsets, labels)?;
    let new_owner: Vec<Label> = order.iter().map(|&f| owner[f]).collect();
    let mut neighbour = Vec::new();
    let mut counts = vec![0usize; patches.len()];
    for &f in &order {
        match side[f] {
            FaceSide::Cell(nb) => neighbour.push(nb),
            FaceSide::Patch(p) => counts[p as usize] += 1,
        }
    }
    let mut start = neighbour.len();
    let mut mesh_patches = Vec::new();
    for ((name, kind), size) in patches.into_iter().zip(counts) {
        if size > 0 {
            mesh_patches.push(Patch::new(name, kind, start, size));
            start += size;
        }
    }
    Mesh::new(points, new_faces, new_owner, neighbour, mesh_patches)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two unit cubes side by side in x, faces given shuffled and with the shared
    /// face owned by the higher cell.
    #[test]
    fn two_cells_are_put_in_polymesh_order() {
        let mut points = Vec::new();
        for z in 0..2 {
            for y in 0..2 {
                for x in 0..3 {
                    points.push(Vec3::new(x as f64, y as f64, z as f64));
                }
            }
        }
        let p = |x: u32, y: u32, z: u32| x + 3 * y + 6 * z;
        let mut faces = FaceList::default();
        let mut owner = Vec::new();
        let mut side = Vec::new();
        let mut add = |f: [u32; 4], o: u32, s: FaceSide| {
            faces.push(&f).unwrap();
            owner.push(o);
            side.push(s);
        };
        // Shared face x=1 oriented from cell 1 to cell 0 (-x normal).
        add(
            [p(1, 0, 0), p(1, 0, 1), p(1, 1, 1), p(1, 1, 0)],
            1,
            FaceSide::Cell(0),
        );
        for c in 0..2u32 {
            let x0 = c;
            add(
                [p(x0, 0, 0), p(x0, 1, 0), p(x0 + 1, 1, 0), p(x0 + 1, 0, 0)],
                c,
                FaceSide::Patch(1),
            );
            add(
                [p(x0, 0, 1), p(x0 + 1, 0, 1), p(x0 + 1, 1, 1), p(x0, 1, 1)],
                c,
                FaceSide::Patch(1),
            );
            add(
                [p(x0, 0, 0), p(x0 + 1, 0, 0), p(x0 + 1, 0, 1), p(x0, 0, 1)],
                c,
                FaceSide::Patch(1),
            );
            add(
                [p(x0, 1, 0), p(x0, 1, 1), p(x0 + 1, 1, 1), p(x0 + 1, 1, 0)],
                c,
                FaceSide::Patch(1),
            );
        }
        add(
            [p(0, 0, 0), p(0, 0, 1), p(0, 1, 1), p(0, 1, 0)],
            0,
            FaceSide::Patch(0),
        );
        add(
            [p(2, 0, 0), p(2, 1, 0), p(2, 1, 1), p(2, 0, 1)],
            1,
            FaceSide::Patch(0),
        );
        let patches = vec![
            ("ends".to_string(), PatchKind::Patch),
            ("sides".to_string(), PatchKind::Wall),
        ];
        let mesh = mesh_from_unordered_faces(points, faces, owner, side, patches).unwrap();
        assert_eq!(mesh.n_cells(), 2);
        assert_eq!(mesh.neighbour(), &[1]);
        assert_eq!(mesh.owner()[0], 0);
        assert_eq!(mesh.patches()[0].name, "ends");
        assert_eq!(mesh.patches()[0].faces(), 1..3);
        assert_eq!(mesh.patches()[1].faces(), 3..11);
        let g = mesh.geometry().unwrap();
        // The flipped shared face now points from cell 0 to cell 1 (+x).
        assert!(g.face_area_vectors[0].x > 0.99);
        assert!((g.cell_volumes[0] - 1.0).abs() < 1e-14 && (g.cell_volumes[1] - 1.0).abs() < 1e-14);
        assert!((g.weights[0] - 0.5).abs() < 1e-14);
    }
}
