//! Mesh geometry computed exactly as OpenFOAM v1912 computes it
//! (`primitiveMeshFaceCentresAndAreas`, `primitiveMeshCellCentresAndVols`,
//! `surfaceInterpolation::makeWeights`, `primitiveMeshTools::faceSkewness`).
//!
//! Memory: the discretisation reads face area vectors, interpolation weights,
//! cell centres and volumes, and boundary face centres, so those are stored.
//! Internal face centres are recomputed from the points when asked for
//! (skewness, mesh checks): storing them would cost 24 bytes a face, a
//! quarter of a 10M-cell mesh's memory. A run whose device assembles the
//! matrix keeps less ([`Geometry::of_cells_and_boundary`]): the cells' and
//! the boundary's geometry, with the internal faces' area vectors and
//! weights computed where they are read, the same bits either way.

use super::{Label, Mesh, MeshError, Vec3};
use rayon::prelude::*;

/// OpenFOAM's `ROOTVSMALL` for double precision.
pub const ROOTVSMALL: f64 = 1e-150;
/// OpenFOAM's `VSMALL` for double precision.
pub const VSMALL: f64 = 1e-300;

/// Centre and area vector of a polygon, as OpenFOAM computes them: a triangle
/// fan about the point average, the centre weighted by triangle areas.
#[inline]
pub fn face_centre_and_area(points: &[Vec3], face: &[Label]) -> (Vec3, Vec3) {
    let p = |i: usize| points[face[i] as usize];
    let n = face.len();
    if n == 3 {
        let (p0, p1, p2) = (p(0), p(1), p(2));
        return ((p0 + p1 + p2) / 3.0, 0.5 * (p1 - p0).cross(&(p2 - p0)));
    }
    let mut centre = p(0);
    for i in 1..n {
        centre += p(i);
    }
    centre /= n as f64;
    let mut sum_n = Vec3::zeros();
    let mut sum_a = 0.0;
    let mut sum_ac = Vec3::zeros();
    for i in 0..n {
        let this = p(i);
        let next = p(if i + 1 == n { 0 } else { i + 1 });
        let c = this + next + centre;
        let tri_n = (next - this).cross(&(centre - this));
        let a = tri_n.norm();
        sum_n += tri_n;
        sum_a += a;
        sum_ac += a * c;
    }
    let fc = if sum_a < ROOTVSMALL {
        centre
    } else {
        sum_ac / (3.0 * sum_a)
    };
    (fc, 0.5 * sum_n)
}

/// The owner's interpolation weight on an internal face of centre `cf` and
/// area vector `sf` between the cell centres `owner` and `neighbour` (the
/// magnitudes keep it in [0, 1] even on badly non-orthogonal faces, as
/// OpenFOAM does).
#[inline]
fn internal_weight(cf: Vec3, sf: Vec3, owner: Vec3, neighbour: Vec3) -> f64 {
    let own = sf.dot(&(cf - owner)).abs();
    let nei = sf.dot(&(neighbour - cf)).abs();
    nei / (own + nei)
}

/// A face's pyramid about a cell's estimated centre `est`: three times its
/// volume, and that times its centroid (the owner's pyramid is on the side
/// the area vector points to), the terms a cell's faces add up.
#[inline]
fn pyramid(cf: Vec3, sf: Vec3, est: Vec3, is_owner: bool) -> (f64, Vec3) {
    let pyr3 = if is_owner {
        sf.dot(&(cf - est))
    } else {
        sf.dot(&(est - cf))
    };
    (pyr3, pyr3 * (0.75 * cf + 0.25 * est))
}

/// A cell's centre and volume from its pyramids' sums: centre =
/// Σ(pyr3 · pyramid centre) / Σ pyr3 (the estimate where the volume
/// vanishes); volume = Σ pyr3 / 3.
#[inline]
fn centre_and_volume(weighted: Vec3, pyr3_sum: f64, est: Vec3) -> (Vec3, f64) {
    let centre = if pyr3_sum.abs() > VSMALL {
        weighted / pyr3_sum
    } else {
        est
    };
    (centre, pyr3_sum / 3.0)
}

/// A usable cell volume: above `VSMALL`, and not NaN.
fn is_positive_volume(v: f64) -> bool {
    v.partial_cmp(&VSMALL) == Some(std::cmp::Ordering::Greater)
}

/// Geometry of a [`Mesh`].
#[derive(Clone, Debug)]
pub struct Geometry {
    /// Area vector `Sf` of every face (magnitude = area, direction owner →
    /// neighbour); empty where the geometry keeps the cells' and the
    /// boundary's only ([`Geometry::of_cells_and_boundary`]), which
    /// [`Geometry::area_vector`] reads alike.
    pub face_area_vectors: Vec<Vec3>,
    /// Centre of every boundary face, indexed by `face - n_internal_faces`.
    pub boundary_face_centres: Vec<Vec3>,
    /// Linear interpolation weight of the owner value on every internal
    /// face; empty where `face_area_vectors` is ([`Geometry::weight`]
    /// computes it then).
    pub weights: Vec<f64>,
    pub cell_centres: Vec<Vec3>,
    pub cell_volumes: Vec<f64>,
    /// The boundary faces' area vectors where `face_area_vectors` is empty,
    /// indexed by `face - n_internal_faces`; else empty.
    boundary_area_vectors: Vec<Vec3>,
    /// `face_area_vectors` and `weights` hold every face's.
    faces_kept: bool,
}

impl Geometry {
    /// Heap bytes of the geometry's arrays, by name.
    pub fn memory_account(&self) -> Vec<(&'static str, usize)> {
        use crate::slices::bytes;
        vec![
            ("face area vectors", bytes(&self.face_area_vectors)),
            ("boundary face centres", bytes(&self.boundary_face_centres)),
            ("interpolation weights", bytes(&self.weights)),
            ("cell centres", bytes(&self.cell_centres)),
            ("cell volumes", bytes(&self.cell_volumes)),
            ("boundary area vectors", bytes(&self.boundary_area_vectors)),
        ]
    }

    /// Whether the internal faces' area vectors and weights are stored
    /// ([`Self::compute`]) or computed where read
    /// ([`Self::of_cells_and_boundary`]).
    pub fn keeps_faces(&self) -> bool {
        self.faces_kept
    }

    /// The geometry with the bits of [`Self::compute`], keeping only what a
    /// run whose device assembles reads on the host: the cell centres and
    /// volumes and the boundary faces' centres and area vectors. The
    /// internal faces' area vectors and weights are computed where they are
    /// read ([`Self::area_vector`], [`Self::weight`]) instead of stored: 32
    /// bytes a face, and with the face centres [`Self::compute`] holds while
    /// it works, 0.8 GB of a 24 M-face mesh (8 M hexahedra).
    ///
    /// Each cell computes its own faces (in its ascending face list, the
    /// order in which [`Self::compute`] adds a cell's face sides), so an
    /// internal face is computed twice, once for each of its cells, and no
    /// face array exists.
    pub fn of_cells_and_boundary(mesh: &Mesh) -> Self {
        let (points, faces, owner) = (mesh.points(), mesh.faces(), mesh.owner());
        let n_internal = mesh.n_internal_faces();
        let (offsets, cell_faces) = mesh.cell_faces();
        let (cell_centres, cell_volumes): (Vec<Vec3>, Vec<f64>) = (0..mesh.n_cells())
            .into_par_iter()
            .map_init(Vec::new, |local: &mut Vec<(Vec3, Vec3)>, c| {
                let list = &cell_faces[offsets[c] as usize..offsets[c + 1] as usize];
                local.clear();
                local.extend(
                    list.iter()
                        .map(|&f| face_centre_and_area(points, faces.face(f as usize))),
                );
                // The estimated centre, the average of the face centres;
                // then the pyramids about it (as `compute`'s two passes).
                let mut estimated = Vec3::zeros();
                for (centre, _) in local.iter() {
                    estimated += centre;
                }
                estimated /= list.len().max(1) as f64;
                let (mut weighted, mut volume) = (Vec3::zeros(), 0.0f64);
                for (&f, &(cf, sf)) in list.iter().zip(local.iter()) {
                    let is_owner = owner[f as usize] as usize == c;
                    let (pyr3, moment) = pyramid(cf, sf, estimated, is_owner);
                    weighted += moment;
                    volume += pyr3;
                }
                centre_and_volume(weighted, volume, estimated)
            })
            .unzip();
        drop((offsets, cell_faces));
        let (boundary_face_centres, boundary_area_vectors): (Vec<Vec3>, Vec<Vec3>) = (n_internal
            ..mesh.n_faces())
            .into_par_iter()
            .map(|f| face_centre_and_area(points, faces.face(f)))
            .unzip();
        Self {
            face_area_vectors: Vec::new(),
            boundary_face_centres,
            weights: Vec::new(),
            cell_centres,
            cell_volumes,
            boundary_area_vectors,
            faces_kept: false,
        }
    }

    /// The area vector S_f of face `f`, stored or computed from the points.
    /// The stored read is all that is inlined into the callers' face loops:
    /// with the computation beside it the function stayed a call per face,
    /// about half of a cell gradient's time.
    #[inline]
    pub fn area_vector(&self, mesh: &Mesh, f: usize) -> Vec3 {
        if self.keeps_faces() {
            return self.face_area_vectors[f];
        }
        self.area_vector_unkept(mesh, f)
    }

    /// [`Self::area_vector`] where the internal faces are not stored.
    #[inline(never)]
    fn area_vector_unkept(&self, mesh: &Mesh, f: usize) -> Vec3 {
        match f.checked_sub(mesh.n_internal_faces()) {
            Some(b) => self.boundary_area_vectors[b],
            None => face_centre_and_area(mesh.points(), mesh.faces().face(f)).1,
        }
    }

    /// Computes the geometry without judging it (see [`Geometry::check_volumes`]).
    pub fn compute(mesh: &Mesh) -> Self {
        let n_faces = mesh.n_faces();
        let n_internal = mesh.n_internal_faces();
        let n_cells = mesh.n_cells();
        let points = mesh.points();
        let faces = mesh.faces();
        let owner = mesh.owner();
        let neighbour = mesh.neighbour();

        // Pass 1: face centres and area vectors, each face once. The centres
        // are kept through the passes below (24 bytes a face, dropped at the
        // end but for the boundary's): computing them again in each pass cost
        // more than the whole cell loops.
        let (mut face_centres, face_area_vectors): (Vec<Vec3>, Vec<Vec3>) = (0..n_faces)
            .into_par_iter()
            .map(|f| face_centre_and_area(points, faces.face(f)))
            .unzip();

        // Estimated cell centres, the average of their face centres. The sums
        // run in parallel over the cell parts, each part adding the faces of
        // its own cells in face order: the serial loop's bits.
        // Each part reads only its own cells' face sides (`PartSides`), not
        // every face.
        let sides = super::PartSides::new(mesh);
        let parts = sides.parts();
        let mut estimated = vec![Vec3::zeros(); n_cells];
        super::split_by_parts(&mut estimated, parts)
            .into_par_iter()
            .zip(parts)
            .enumerate()
            .for_each(|(part, (sums, cells))| {
                let mut counts = vec![0u32; cells.len()];
                sides.for_each(mesh, part, |f, c, _| {
                    sums[c - cells.start] += face_centres[f];
                    counts[c - cells.start] += 1;
                });
                for (s, &n) in sums.iter_mut().zip(&counts) {
                    *s /= n.max(1) as f64;
                }
            });

        // Pass 2: pyramid decomposition about the estimated centre.
        let mut cell_centres = vec![Vec3::zeros(); n_cells];
        let mut cell_volumes = vec![0.0f64; n_cells];
        super::split_by_parts(&mut cell_centres, parts)
            .into_par_iter()
            .zip(super::split_by_parts(&mut cell_volumes, parts))
            .zip(parts)
            .enumerate()
            .for_each(|(part, ((weighted, volumes), cells))| {
                sides.for_each(mesh, part, |f, c, is_owner| {
                    let est = estimated[c];
                    let (pyr3, moment) =
                        pyramid(face_centres[f], face_area_vectors[f], est, is_owner);
                    weighted[c - cells.start] += moment;
                    volumes[c - cells.start] += pyr3;
                });
                let estimated = &estimated[cells.clone()];
                for ((wc, v), &est) in weighted.iter_mut().zip(volumes.iter_mut()).zip(estimated) {
                    (*wc, *v) = centre_and_volume(*wc, *v, est);
                }
            });
        drop(estimated);
        drop(sides);

        // Pass 3: interpolation weights (the magnitudes keep them in [0, 1] even on
        // badly non-orthogonal faces, as OpenFOAM does).
        let weights: Vec<f64> = (0..n_internal)
            .into_par_iter()
            .map(|f| {
                internal_weight(
                    face_centres[f],
                    face_area_vectors[f],
                    cell_centres[owner[f] as usize],
                    cell_centres[neighbour[f] as usize],
                )
            })
            .collect();
        let boundary_face_centres = face_centres.split_off(n_internal);
        drop(face_centres);

        Self {
            face_area_vectors,
            boundary_face_centres,
            weights,
            cell_centres,
            cell_volumes,
            boundary_area_vectors: Vec::new(),
            faces_kept: true,
        }
    }

    /// Refuses inverted or degenerate cells, naming the first one found.
    pub fn check_volumes(&self, mesh: &Mesh) -> Result<(), MeshError> {
        let bad = self
            .cell_volumes
            .par_iter()
            .enumerate()
            .find_first(|(_, &v)| !is_positive_volume(v))
            .map(|(c, &v)| (c, v));
        if let Some((c, v)) = bad {
            let centre = self.cell_centres[c];
            let n_bad = self
                .cell_volumes
                .par_iter()
                .filter(|&&v| !is_positive_volume(v))
                .count();
            return Err(MeshError::invalid(format!(
                "cell {c} (near {:.6e} {:.6e} {:.6e}) has volume {v:e}: the cell is inverted or its \
                 faces are oriented inward ({n_bad} of {} cells); run check-mesh for details",
                centre.x,
                centre.y,
                centre.z,
                mesh.n_cells()
            )));
        }
        Ok(())
    }

    /// Centre of face `f` (recomputed from the points for internal faces).
    pub fn face_centre(&self, mesh: &Mesh, f: usize) -> Vec3 {
        let n_internal = mesh.n_internal_faces();
        if f >= n_internal {
            self.boundary_face_centres[f - n_internal]
        } else {
            face_centre_and_area(mesh.points(), mesh.faces().face(f)).0
        }
    }

    /// Owner-to-neighbour centre vector of an internal face; owner centre to
    /// face centre on a boundary face (OpenFOAM's `delta()`).
    pub fn delta(&self, mesh: &Mesh, f: usize) -> Vec3 {
        let o = self.cell_centres[mesh.owner()[f] as usize];
        if f < mesh.n_internal_faces() {
            self.cell_centres[mesh.neighbour()[f] as usize] - o
        } else {
            self.face_centre(mesh, f) - o
        }
    }

    /// The area vector and the owner's interpolation weight of internal
    /// face `f`, stored or computed from one evaluation of the face (the
    /// stored read inlined, as [`Self::area_vector`]'s).
    #[inline]
    pub fn internal_area_and_weight(&self, mesh: &Mesh, f: usize) -> (Vec3, f64) {
        if self.keeps_faces() {
            return (self.face_area_vectors[f], self.weights[f]);
        }
        self.internal_area_and_weight_unkept(mesh, f)
    }

    /// [`Self::internal_area_and_weight`] where the faces are not stored.
    #[inline(never)]
    fn internal_area_and_weight_unkept(&self, mesh: &Mesh, f: usize) -> (Vec3, f64) {
        let (cf, sf) = face_centre_and_area(mesh.points(), mesh.faces().face(f));
        let weight = internal_weight(
            cf,
            sf,
            self.cell_centres[mesh.owner()[f] as usize],
            self.cell_centres[mesh.neighbour()[f] as usize],
        );
        (sf, weight)
    }

    /// Interpolation weight of the owner value (1 on boundary faces),
    /// stored or computed as [`Self::compute`] computes it.
    #[inline]
    pub fn weight(&self, mesh: &Mesh, f: usize) -> f64 {
        if f >= mesh.n_internal_faces() {
            return 1.0;
        }
        self.internal_area_and_weight(mesh, f).1
    }

    /// Angle in degrees between the face area vector and the delta vector.
    pub fn non_orthogonality(&self, mesh: &Mesh, f: usize) -> f64 {
        let d = self.delta(mesh, f);
        let s = self.area_vector(mesh, f);
        let cos = d.dot(&s) / (d.norm() * s.norm() + ROOTVSMALL);
        cos.clamp(-1.0, 1.0).acos().to_degrees()
    }

    /// OpenFOAM's normalised face skewness: distance from the face centre to the
    /// point where the owner-neighbour line crosses the face plane, over the face's
    /// extent in that direction.
    pub fn skewness(&self, mesh: &Mesh, f: usize) -> f64 {
        let face = mesh.faces().face(f);
        let cf = self.face_centre(mesh, f);
        let sf = self.area_vector(mesh, f);
        let cpf = cf - self.cell_centres[mesh.owner()[f] as usize];
        let (d, scale) = if f < mesh.n_internal_faces() {
            (self.delta(mesh, f), 0.2)
        } else {
            let normal = sf / (sf.norm() + ROOTVSMALL);
            (normal * normal.dot(&cpf), 0.4)
        };
        let sv = cpf - (sf.dot(&cpf) / (sf.dot(&d) + ROOTVSMALL)) * d;
        let sv_hat = sv / (sv.norm() + ROOTVSMALL);
        let extent = face
            .iter()
            .map(|&p| sv_hat.dot(&(mesh.points()[p as usize] - cf)).abs())
            .fold(scale * d.norm() + ROOTVSMALL, f64::max);
        sv.norm() / extent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{FaceList, Patch, PatchKind};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-14 * (1.0 + a.abs().max(b.abs()))
    }

    /// OpenFOAM's loops as written (`primitiveMeshCellCentresAndVols`,
    /// `makeWeights`): every face in order adding into its owner, then its
    /// neighbour; the order whose bits [`Geometry::compute`] keeps.
    fn face_order_reference(mesh: &Mesh) -> Geometry {
        let (owner, neighbour) = (mesh.owner(), mesh.neighbour());
        let n = mesh.n_cells();
        let fc: Vec<(Vec3, Vec3)> = (0..mesh.n_faces())
            .map(|f| face_centre_and_area(mesh.points(), mesh.faces().face(f)))
            .collect();
        let mut est = vec![Vec3::zeros(); n];
        let mut count = vec![0.0; n];
        for (f, &(c, _)) in fc.iter().enumerate() {
            est[owner[f] as usize] += c;
            count[owner[f] as usize] += 1.0;
            if let Some(&nb) = neighbour.get(f) {
                est[nb as usize] += c;
                count[nb as usize] += 1.0;
            }
        }
        for (e, &k) in est.iter_mut().zip(&count) {
            *e /= k;
        }
        let mut centres = vec![Vec3::zeros(); n];
        let mut volumes = vec![0.0; n];
        for (f, &(c, s)) in fc.iter().enumerate() {
            let o = owner[f] as usize;
            let pyr3 = s.dot(&(c - est[o]));
            centres[o] += pyr3 * (0.75 * c + 0.25 * est[o]);
            volumes[o] += pyr3;
            if let Some(&nb) = neighbour.get(f) {
                let nb = nb as usize;
                let pyr3 = s.dot(&(est[nb] - c));
                centres[nb] += pyr3 * (0.75 * c + 0.25 * est[nb]);
                volumes[nb] += pyr3;
            }
        }
        for ((c, v), e) in centres.iter_mut().zip(volumes.iter_mut()).zip(&est) {
            *c = if v.abs() > VSMALL { *c / *v } else { *e };
            *v /= 3.0;
        }
        let weights = (0..mesh.n_internal_faces())
            .map(|f| {
                let (c, s) = fc[f];
                let own = s.dot(&(c - centres[owner[f] as usize])).abs();
                let nei = s.dot(&(centres[neighbour[f] as usize] - c)).abs();
                nei / (own + nei)
            })
            .collect();
        Geometry {
            face_area_vectors: fc.iter().map(|&(_, s)| s).collect(),
            boundary_face_centres: fc[mesh.n_internal_faces()..]
                .iter()
                .map(|&(c, _)| c)
                .collect(),
            weights,
            cell_centres: centres,
            cell_volumes: volumes,
            boundary_area_vectors: Vec::new(),
            faces_kept: true,
        }
    }

    /// The geometry on one and on several threads has the bits of OpenFOAM's
    /// face-order loops, and so do the cells' face lists: on a
    /// renumbered, perturbed tet box (neighbours far from their owners) and
    /// a hex box, each with enough cells for several parts.
    #[test]
    fn any_thread_count_gives_the_face_order_bits() {
        for spec in [
            "box:24x24x24:tet:perturb=0.2:renumber",
            "box:40x40x40:perturb=0.1",
        ] {
            let mesh = crate::mesh::load(spec).unwrap();
            let on = |threads: usize| {
                crate::test_support::on_threads(threads, || {
                    assert_eq!(
                        crate::mesh::cell_parts(mesh.n_cells()).len(),
                        threads.min(mesh.n_cells() >> 14).max(1)
                    );
                    (Geometry::compute(&mesh), mesh.cell_faces())
                })
            };
            let (serial, serial_faces) = on(1);
            let (parallel, parallel_faces) = on(5);
            let reference = face_order_reference(&mesh);
            let bits = |v: &[Vec3]| -> Vec<[u64; 3]> {
                v.iter()
                    .map(|p| [p.x.to_bits(), p.y.to_bits(), p.z.to_bits()])
                    .collect()
            };
            let scalar_bits = |v: &[f64]| -> Vec<u64> { v.iter().map(|x| x.to_bits()).collect() };
            // What the face-order reference computes, compared bit for bit:
            // cell centres and volumes, weights, boundary face centres.
            let computed = |g: &Geometry| {
                (
                    bits(&g.cell_centres),
                    scalar_bits(&g.cell_volumes),
                    scalar_bits(&g.weights),
                    bits(&g.boundary_face_centres),
                )
            };
            let assert_same_bits = |got: &Geometry, want: &Geometry, what: &str| {
                assert_eq!(computed(got), computed(want), "{spec}: {what}");
            };
            assert_same_bits(&serial, &reference, "one thread against the reference");
            assert_same_bits(&parallel, &serial, "five threads against one");
            assert_eq!(
                bits(&parallel.face_area_vectors),
                bits(&serial.face_area_vectors)
            );
            assert_eq!(parallel_faces, serial_faces, "{spec}");
            // Every cell lists its faces ascending, each face listed by its
            // owner and (internal faces) its neighbour.
            let (offsets, faces) = &serial_faces;
            let mut sides = 0;
            for c in 0..mesh.n_cells() {
                let list = &faces[offsets[c] as usize..offsets[c + 1] as usize];
                assert!(list.windows(2).all(|w| w[0] < w[1]), "cell {c}");
                for &f in list {
                    let f = f as usize;
                    let is_neighbour = mesh.neighbour().get(f) == Some(&(c as Label));
                    assert!(mesh.owner()[f] as usize == c || is_neighbour);
                }
                sides += list.len();
            }
            assert_eq!(sides, mesh.n_faces() + mesh.n_internal_faces());
        }
    }

    /// The geometry that keeps the cells and the boundary only has the
    /// bits of the whole one: cell centres and volumes, boundary face
    /// centres, and every face's area vector and weight as read through
    /// the accessors; on hex, perturbed and renumbered tet, prism and
    /// polyhedral meshes, on one thread and on several.
    #[test]
    fn cells_and_boundary_have_the_bits_of_the_whole_geometry() {
        for spec in [
            "box:24x24x24:tet:perturb=0.2:renumber",
            "box:30x20x10:perturb=0.1",
            "box:30x20x10:prism:perturb=0.2",
            "meshes/foam/polydual",
        ] {
            let mesh = crate::mesh::load(spec).unwrap();
            let whole = Geometry::compute(&mesh);
            for threads in [1, 3] {
                let lean = crate::test_support::on_threads(threads, || {
                    Geometry::of_cells_and_boundary(&mesh)
                });
                assert!(whole.keeps_faces() && !lean.keeps_faces());
                assert!(lean.face_area_vectors.is_empty() && lean.weights.is_empty());
                let bits = |v: &Vec3| [v.x.to_bits(), v.y.to_bits(), v.z.to_bits()];
                for c in 0..mesh.n_cells() {
                    assert_eq!(bits(&lean.cell_centres[c]), bits(&whole.cell_centres[c]));
                    assert_eq!(
                        lean.cell_volumes[c].to_bits(),
                        whole.cell_volumes[c].to_bits(),
                        "{spec}: cell {c}"
                    );
                }
                assert_eq!(
                    lean.boundary_face_centres
                        .iter()
                        .map(bits)
                        .collect::<Vec<_>>(),
                    whole
                        .boundary_face_centres
                        .iter()
                        .map(bits)
                        .collect::<Vec<_>>()
                );
                for f in 0..mesh.n_faces() {
                    assert_eq!(
                        bits(&lean.area_vector(&mesh, f)),
                        bits(&whole.face_area_vectors[f]),
                        "{spec}: face {f}"
                    );
                    assert_eq!(
                        lean.weight(&mesh, f).to_bits(),
                        whole.weight(&mesh, f).to_bits(),
                        "{spec}: face {f}"
                    );
                    if f < mesh.n_internal_faces() {
                        let (sf, w) = lean.internal_area_and_weight(&mesh, f);
                        assert_eq!(bits(&sf), bits(&whole.face_area_vectors[f]));
                        assert_eq!(w.to_bits(), whole.weights[f].to_bits());
                    }
                }
            }
        }
    }

    #[test]
    fn triangle_and_quad_faces() {
        let pts = vec![
            Vec3::new(0.0, 0.0, 0.0),
            Vec3::new(2.0, 0.0, 0.0),
            Vec3::new(2.0, 1.0, 0.0),
            Vec3::new(0.0, 1.0, 0.0),
        ];
        let (c, s) = face_centre_and_area(&pts, &[0, 1, 2]);
        assert!((c - Vec3::new(4.0 / 3.0, 1.0 / 3.0, 0.0)).norm() < 1e-15);
        assert!((s - Vec3::new(0.0, 0.0, 1.0)).norm() < 1e-15);
        let (c, s) = face_centre_and_area(&pts, &[0, 1, 2, 3]);
        assert!((c - Vec3::new(1.0, 0.5, 0.0)).norm() < 1e-15);
        assert!((s - Vec3::new(0.0, 0.0, 2.0)).norm() < 1e-15);
    }

    /// A warped quad: the area vector is half the cross product of the diagonals
    /// for any quad, and the centre is the area-weighted centroid of the fan.
    #[test]
    fn warped_quad_area_is_half_the_diagonal_cross_product() {
        let pts = vec![
            Vec3::new(0.0, 0.0, 0.0),
            Vec3::new(1.0, 0.0, 0.2),
            Vec3::new(1.1, 1.0, 0.0),
            Vec3::new(0.0, 0.9, 0.3),
        ];
        let (_, s) = face_centre_and_area(&pts, &[0, 1, 2, 3]);
        let expect = 0.5 * (pts[2] - pts[0]).cross(&(pts[3] - pts[1]));
        assert!((s - expect).norm() < 1e-15);
    }

    /// Square pyramid of base 2x2 at z=0 and apex (0.3, -0.2, 1.5): volume 4*1.5/3,
    /// centroid a quarter of the way from the base centroid to the apex.
    #[test]
    fn pyramid_volume_and_centroid() {
        let pts = vec![
            Vec3::new(-1.0, -1.0, 0.0),
            Vec3::new(1.0, -1.0, 0.0),
            Vec3::new(1.0, 1.0, 0.0),
            Vec3::new(-1.0, 1.0, 0.0),
            Vec3::new(0.3, -0.2, 1.5),
        ];
        let mut faces = FaceList::default();
        for f in [
            &[0, 3, 2, 1][..],
            &[0, 1, 4],
            &[1, 2, 4],
            &[2, 3, 4],
            &[3, 0, 4],
        ] {
            faces.push(f).unwrap();
        }
        let patches = vec![Patch::new("all", PatchKind::Wall, 0, 5)];
        let mesh = Mesh::new(pts, faces, vec![0; 5], vec![], patches).unwrap();
        let g = mesh.geometry().unwrap();
        assert!(close(g.cell_volumes[0], 2.0));
        let c = g.cell_centres[0];
        assert!(
            close(c.x, 0.075) && close(c.y, -0.05) && close(c.z, 0.375),
            "{c}"
        );
    }

    #[test]
    fn inverted_cell_is_named() {
        let (points, faces, owner, _, patches) = crate::mesh::tests::unit_cube().into_parts();
        let reversed: Vec<Label> = faces
            .iter()
            .flat_map(|f| f.iter().rev().copied().collect::<Vec<_>>())
            .collect();
        let faces = FaceList::uniform(4, reversed).unwrap();
        let mesh = Mesh::new(points, faces, owner, vec![], patches).unwrap();
        let err = mesh.geometry().unwrap_err().to_string();
        assert!(err.contains("cell 0") && err.contains("inverted"), "{err}");
    }
}
