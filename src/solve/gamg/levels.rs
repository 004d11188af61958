//! GAMG's coarse levels addressed by faces, the way OpenFOAM's
//! `GAMGAgglomeration::agglomerateLduAddressing` keeps them: a level is its
//! diagonal and one coefficient per face (an upper entry, owner < neighbour,
//! faces in upper-triangular order), and the agglomeration keeps, for each
//! face of the finer level, the coarse face it adds to (or that it lies
//! inside one cluster). Everything is made from the finer level's faces,
//! each seen once: the coarse faces, their weights for the next pairing,
//! and at every solve the coarse coefficients. The coarse level's layout
//! ([`SplitPattern`]) is the one its smoothers read: its upper rows are the
//! faces, its lower rows list each face again under its neighbour
//! (OpenFOAM's `losortAddr`), so that no other layout of the level (a CSR
//! pattern, a map from CSR entries to split positions) is made.
//!
//! The coarse coefficients are summed in OpenFOAM's order
//! (`GAMGAgglomeration::restrictField` and `agglomerateMatrix`): each
//! cluster's diagonal adds its cells' diagonals, cells ascending, then the
//! faces ascending add theirs: a face between two clusters its coefficient
//! to its coarse face, a face inside a cluster both of its coefficients
//! (a_ij + a_ji) to the cluster's diagonal. The coarse face weights of the
//! agglomeration are summed in the same face order.

use crate::solve::split::{SplitMatrix, SplitPattern};

/// `face_target` of a finer face whose two cells are in one cluster.
pub const INSIDE: u32 = u32::MAX;

/// Level k + 1 of an agglomeration, addressed by level k's faces.
#[derive(Clone, Debug, PartialEq)]
pub struct CoarseLevel {
    /// For each face of level k (its upper entries, in order): the coarse
    /// face it adds to, or [`INSIDE`].
    pub face_target: Vec<u32>,
    /// Level k + 1's faces and split layout.
    pub layout: SplitPattern,
}

impl CoarseLevel {
    /// The coarse level of `map` (cell of the finer level → cluster of
    /// 0..n_coarse) over the finer level's faces `finer` (upper rows: row
    /// starts and columns), and with `weights` (one per finer face) the
    /// coarse faces' weights, summed in face order (else none).
    ///
    /// Three passes over the finer faces: each face's clusters (a face
    /// inside one is marked), counted by their smaller cluster (the coarse
    /// face's owner); the faces between clusters bucketed by that owner,
    /// in face order; then each coarse owner's faces: its neighbours,
    /// sorted, become its coarse faces, and each finer face gets its own.
    pub fn build(
        finer: (&[usize], &[u32]),
        map: &[u32],
        n_coarse: usize,
        weights: Option<&[f64]>,
    ) -> (Self, Vec<f64>) {
        let (start, cols) = finer;
        let n = map.len();
        assert_eq!(start.len(), n + 1, "CoarseLevel: finer row starts");
        assert_eq!(start[n], cols.len(), "CoarseLevel: finer faces");
        if let Some(w) = weights {
            assert_eq!(w.len(), cols.len(), "CoarseLevel: one weight a face");
        }
        let clusters = |r: usize, f: usize| (map[r], map[cols[f] as usize]);
        let mut face_target = Vec::with_capacity(cols.len());
        let mut owner_start = vec![0usize; n_coarse + 1];
        for r in 0..n {
            for f in start[r]..start[r + 1] {
                let (a, b) = clusters(r, f);
                if a == b {
                    face_target.push(INSIDE);
                } else {
                    face_target.push(0);
                    owner_start[a.min(b) as usize + 1] += 1;
                }
            }
        }
        for c in 0..n_coarse {
            owner_start[c + 1] += owner_start[c];
        }
        // (the coarse neighbour, the finer face) of each face between
        // clusters, by coarse owner, faces ascending within each.
        let mut bucket = vec![(0u32, 0u32); owner_start[n_coarse]];
        let mut next: Vec<usize> = owner_start[..n_coarse].to_vec();
        for r in 0..n {
            let faces = start[r]..start[r + 1];
            for (f, &t) in faces.clone().zip(&face_target[faces]) {
                if t == INSIDE {
                    continue;
                }
                let (a, b) = clusters(r, f);
                let slot = &mut next[a.min(b) as usize];
                bucket[*slot] = (a.max(b), f as u32);
                *slot += 1;
            }
        }
        drop(next);
        let mut coarse_start = Vec::with_capacity(n_coarse + 1);
        coarse_start.push(0);
        let mut coarse_cols: Vec<u32> = Vec::with_capacity(bucket.len() / 2);
        let mut coarse_weights: Vec<f64> = Vec::with_capacity(if weights.is_some() {
            bucket.len() / 2
        } else {
            0
        });
        // position[J]: coarse face (I, J) of the current owner I; UNSET
        // between owners.
        const UNSET: u32 = u32::MAX;
        let mut position = vec![UNSET; n_coarse];
        for c in 0..n_coarse {
            let first = coarse_cols.len();
            let faces = &bucket[owner_start[c]..owner_start[c + 1]];
            for &(j, _) in faces {
                if position[j as usize] == UNSET {
                    position[j as usize] = 0;
                    coarse_cols.push(j);
                }
            }
            coarse_cols[first..].sort_unstable();
            for (k, &j) in coarse_cols[first..].iter().enumerate() {
                position[j as usize] = (first + k) as u32;
            }
            if weights.is_some() {
                // -0.0 + w is w for every w: a sum's first addend keeps its bits.
                coarse_weights.resize(coarse_cols.len(), -0.0);
            }
            for &(j, f) in faces {
                let p = position[j as usize];
                face_target[f as usize] = p;
                if let Some(w) = weights {
                    coarse_weights[p as usize] += w[f as usize];
                }
            }
            for &j in &coarse_cols[first..] {
                position[j as usize] = UNSET;
            }
            coarse_start.push(coarse_cols.len());
        }
        drop(bucket);
        let layout = SplitPattern::from_upper(n_coarse, coarse_start, coarse_cols);
        (
            Self {
                face_target,
                layout,
            },
            coarse_weights,
        )
    }

    /// The coarse matrix of `finer` (level k's matrix, whose upper rows are
    /// the faces this level was built from; `map` its cells' clusters),
    /// summed in OpenFOAM's order (module docs). A bitwise symmetric
    /// `finer` gives a bitwise symmetric coarse matrix (one coefficient a
    /// coarse face, the lower rows copied from it), as OpenFOAM's coarse
    /// levels are; otherwise each face's lower coefficient a_ji is summed
    /// beside its upper one, each into the coarse entry of its own
    /// orientation.
    pub fn matrix(&self, finer: &SplitMatrix, map: &[u32]) -> SplitMatrix {
        let n = map.len();
        assert_eq!(finer.n(), n, "CoarseLevel: finer matrix size");
        let (start, cols) = finer.upper_rows().pattern();
        let values = finer.upper_rows().values();
        assert_eq!(
            values.len(),
            self.face_target.len(),
            "CoarseLevel: finer matrix faces"
        );
        let negative_zeros = |len: usize| {
            let mut v = Vec::with_capacity(len);
            v.resize(len, -0.0);
            v
        };
        let mut diag = negative_zeros(self.layout.n());
        for (&c, &d) in map.iter().zip(finer.diag()) {
            diag[c as usize] += d;
        }
        let mut upper = negative_zeros(self.layout.n_faces());
        if finer.is_symmetric() {
            for r in 0..n {
                let cluster = map[r] as usize;
                for (&v, &t) in values[start[r]..start[r + 1]]
                    .iter()
                    .zip(&self.face_target[start[r]..start[r + 1]])
                {
                    if t == INSIDE {
                        diag[cluster] += v + v;
                    } else {
                        upper[t as usize] += v;
                    }
                }
            }
            let lower = self.layout.mirror_upper(&upper);
            return self.layout.matrix(diag, lower, upper, true);
        }
        let finer_lower = lower_by_face(finer);
        let mut lower_faces = negative_zeros(self.layout.n_faces());
        for r in 0..n {
            let cluster = map[r];
            for f in start[r]..start[r + 1] {
                let (u, l) = (values[f], finer_lower[f]);
                match self.face_target[f] {
                    INSIDE => diag[cluster as usize] += u + l,
                    t if cluster < map[cols[f] as usize] => {
                        upper[t as usize] += u;
                        lower_faces[t as usize] += l;
                    }
                    t => {
                        upper[t as usize] += l;
                        lower_faces[t as usize] += u;
                    }
                }
            }
        }
        let lower = self.layout.mirror_upper(&lower_faces);
        self.layout.matrix(diag, lower, upper, false)
    }
}

/// Each upper entry's (face's) lower coefficient a_ji in `m`, 0 where the
/// pattern has no mirror; a lower entry without a face is left out (the
/// solver's symmetry check lets through only zeros there). Rows ascending
/// meet each upper row's mirrors in column order: a cursor per row.
fn lower_by_face(m: &SplitMatrix) -> Vec<f64> {
    let n = m.n();
    let (upper_start, upper_cols) = m.upper_rows().pattern();
    let (lower_start, lower_cols) = m.lower_rows().pattern();
    let lower_values = m.lower_rows().values();
    let mut by_face = vec![0.0; upper_cols.len()];
    let mut next: Vec<usize> = upper_start[..n].to_vec();
    for r in 0..n {
        for k in lower_start[r]..lower_start[r + 1] {
            let c = lower_cols[k] as usize;
            let (end, mut t) = (upper_start[c + 1], next[c]);
            while t < end && (upper_cols[t] as usize) < r {
                t += 1;
            }
            if t < end && upper_cols[t] as usize == r {
                by_face[t] = lower_values[k];
                t += 1;
            }
            next[c] = t;
        }
    }
    by_face
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::amg::galerkin;
    use crate::sparse::testing::grid_laplacian;
    use crate::sparse::Csr;

    /// (row, column, value) of every entry of `m`, rows ascending, but for
    /// off-diagonal zeros (a coupling without a face adds only zeros and
    /// makes no coarse face).
    fn entries(m: &SplitMatrix) -> Vec<(usize, usize, f64)> {
        let csr = m.to_csr();
        (0..csr.n_rows())
            .flat_map(|r| {
                let (cols, values) = csr.row(r);
                cols.iter()
                    .zip(values)
                    .map(move |(&c, &v)| (r, c as usize, v))
                    .filter(|e| e.2 != 0.0 || e.0 == e.1)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn coarse_matrices_are_the_galerkin_products_in_face_order() {
        // A symmetric grid operator, the same with a_ji ≠ a_ij, and the
        // latter with an explicit zero that has no mirror.
        let symmetric = grid_laplacian(6, 5, 4);
        let mut unequal = symmetric.clone();
        let row_ptr = unequal.row_ptr().to_vec();
        let cols = unequal.cols().to_vec();
        for (r, rows) in row_ptr.windows(2).enumerate() {
            let values = &mut unequal.values_mut()[rows[0]..rows[1]];
            for (k, (v, &c)) in values.iter_mut().zip(&cols[rows[0]..rows[1]]).enumerate() {
                if (c as usize) < r {
                    *v *= 1.5 + ((rows[0] + k) % 7) as f64 * 0.125;
                }
            }
        }
        let mut triplets: Vec<(u32, u32, f64)> = (0..unequal.n_rows())
            .flat_map(|r| {
                let (c, v) = unequal.row(r);
                c.iter()
                    .zip(v)
                    .map(move |(&c, &v)| (r as u32, c, v))
                    .collect::<Vec<_>>()
            })
            .collect();
        triplets.push((20, 0, 0.0));
        let lopsided = Csr::from_triplets(120, 120, triplets).unwrap();
        // Clusters of up to five cells, numbered out of order.
        let map: Vec<u32> = (0..120u32).map(|i| (i / 5 * 7) % 24).collect();
        for (name, a) in [
            ("symmetric", &symmetric),
            ("unequal", &unequal),
            ("lopsided", &lopsided),
        ] {
            let fine = SplitMatrix::new(a);
            assert_eq!(fine.is_symmetric(), name == "symmetric");
            let (level, _) = CoarseLevel::build(fine.upper_rows().pattern(), &map, 24, None);
            let coarse = level.matrix(&fine, &map);
            assert_eq!(coarse.is_symmetric(), name == "symmetric", "{name}");
            let expected = galerkin(a, &map, 24);
            let (got, expected) = (entries(&coarse), entries(&SplitMatrix::new(&expected)));
            assert_eq!(got.len(), expected.len(), "{name}");
            for (g, e) in got.iter().zip(&expected) {
                assert_eq!((g.0, g.1), (e.0, e.1), "{name}");
                assert!(
                    (g.2 - e.2).abs() <= 1e-14 * e.2.abs(),
                    "{name}: {g:?} {e:?}"
                );
            }
        }
    }
}
