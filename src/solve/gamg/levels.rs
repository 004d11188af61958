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
    /// Three passes over the finer faces: each face's neighbour cluster
    /// (a face inside one cluster is marked), counted by the face's smaller
    /// cluster (the coarse face's owner); the faces between clusters
    /// bucketed by that owner as one key each, (coarse neighbour, finer
    /// face), in face order; then each owner's keys sorted (a few, nearly
    /// in order: by insertion), whose runs of one coarse neighbour are its
    /// coarse faces, each run's finer faces ascending. The keys carry all
    /// the last pass reads, so it makes no second lookup of the clusters
    /// and keeps no array over the coarse cells.
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
        assert!(
            cols.len() <= u32::MAX as usize && n_coarse < u32::MAX as usize,
            "CoarseLevel: faces and clusters are numbered in 32 bits"
        );
        if let Some(w) = weights {
            assert_eq!(w.len(), cols.len(), "CoarseLevel: one weight a face");
        }
        // face_target holds each face's neighbour cluster until the last
        // pass writes its coarse face there.
        let mut face_target = vec![INSIDE; cols.len()];
        let mut owner_start = vec![0usize; n_coarse + 1];
        for r in 0..n {
            let a = map[r];
            let faces = start[r]..start[r + 1];
            for (t, &c) in face_target[faces.clone()].iter_mut().zip(&cols[faces]) {
                let b = map[c as usize];
                if a != b {
                    *t = b;
                    owner_start[a.min(b) as usize + 1] += 1;
                }
            }
        }
        for c in 0..n_coarse {
            owner_start[c + 1] += owner_start[c];
        }
        let mut bucket = vec![0u64; owner_start[n_coarse]];
        let mut next: Vec<usize> = owner_start[..n_coarse].to_vec();
        for r in 0..n {
            let a = map[r];
            let faces = start[r]..start[r + 1];
            for (f, &b) in faces.clone().zip(&face_target[faces]) {
                if b == INSIDE {
                    continue;
                }
                let slot = &mut next[a.min(b) as usize];
                bucket[*slot] = face_key(a.max(b), f);
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
        for c in 0..n_coarse {
            let keys = &mut bucket[owner_start[c]..owner_start[c + 1]];
            sort_keys(keys);
            // The current coarse neighbour (no cluster is u32::MAX).
            let mut last = u32::MAX;
            for &key in keys.iter() {
                let (j, f) = ((key >> 32) as u32, key as u32 as usize);
                if j != last {
                    coarse_cols.push(j);
                    if weights.is_some() {
                        // -0.0 + w is w for every w: a sum's first addend
                        // keeps its bits.
                        coarse_weights.push(-0.0);
                    }
                    last = j;
                }
                let p = coarse_cols.len() - 1;
                face_target[f] = p as u32;
                if let Some(w) = weights {
                    coarse_weights[p] += w[f];
                }
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

/// A face between clusters as one sortable key: its coarse neighbour
/// (high half), then its finer face (low half).
#[inline(always)]
fn face_key(coarse_neighbour: u32, face: usize) -> u64 {
    (u64::from(coarse_neighbour) << 32) | face as u64
}

/// Sorts one coarse owner's keys ascending: by insertion where they are a
/// few (a coarse cell has some 6 to 20 finer faces to its neighbours,
/// nearly in order already: each finer row's columns ascend), else by the
/// library's sort.
#[inline]
fn sort_keys(keys: &mut [u64]) {
    if keys.len() > 32 {
        keys.sort_unstable();
        return;
    }
    for k in 1..keys.len() {
        let key = keys[k];
        let mut j = k;
        while j > 0 && keys[j - 1] > key {
            keys[j] = keys[j - 1];
            j -= 1;
        }
        keys[j] = key;
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
    use crate::sparse::testing::{bits, grid_laplacian};
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

    /// The coarse faces of `map` over the finer faces (start, cols) by
    /// their definition: a face per distinct pair of clusters (the smaller
    /// first), faces ascending by (owner, neighbour), each finer face's
    /// target, and each coarse face's weight summed over its finer faces in
    /// face order from -0.0.
    #[allow(clippy::type_complexity)]
    fn coarse_faces_by_definition(
        start: &[usize],
        cols: &[u32],
        map: &[u32],
        weights: &[f64],
    ) -> (Vec<(u32, u32)>, Vec<u32>, Vec<f64>) {
        let mut faces: std::collections::BTreeMap<(u32, u32), f64> = Default::default();
        for r in 0..map.len() {
            for f in start[r]..start[r + 1] {
                let (a, b) = (map[r], map[cols[f] as usize]);
                if a != b {
                    *faces.entry((a.min(b), a.max(b))).or_insert(-0.0) += weights[f];
                }
            }
        }
        let index: std::collections::BTreeMap<(u32, u32), u32> = faces
            .keys()
            .enumerate()
            .map(|(k, &face)| (face, k as u32))
            .collect();
        let target = (0..map.len())
            .flat_map(|r| (start[r]..start[r + 1]).map(move |f| (r, f)))
            .map(|(r, f)| {
                let (a, b) = (map[r], map[cols[f] as usize]);
                if a == b {
                    INSIDE
                } else {
                    index[&(a.min(b), a.max(b))]
                }
            })
            .collect();
        (
            faces.keys().copied().collect(),
            target,
            faces.values().copied().collect(),
        )
    }

    #[test]
    fn coarse_faces_targets_and_weights_are_those_of_the_definition_bit_for_bit() {
        use crate::sparse::testing::{random_symmetric, SplitMix};
        // Random patterns (rows of uneven length, far columns) under random
        // maps: clusters of any size, among them one cluster with faces to
        // more than 32 others (its keys take the library's sort), and the
        // grid operator under pairs; weights of varied magnitudes, so that
        // the order of a sum shows in its bits.
        let mut cases: Vec<(Csr, Vec<u32>, usize)> = Vec::new();
        for (seed, n, per_row, n_coarse) in [(1, 300, 6, 120), (2, 500, 12, 40), (3, 200, 4, 190)] {
            let a = random_symmetric(n, per_row, seed);
            let mut rng = SplitMix(seed + 10);
            let mut map: Vec<u32> = (0..n).map(|i| (i % n_coarse) as u32).collect();
            for i in (1..n).rev() {
                map.swap(i, rng.below(i + 1));
            }
            cases.push((a, map, n_coarse));
        }
        let grid = grid_laplacian(9, 7, 5);
        let pairs: Vec<u32> = (0..grid.n_rows() as u32).map(|i| i / 2).collect();
        let n_pairs = grid.n_rows().div_ceil(2);
        cases.push((grid, pairs, n_pairs));
        let mut many_faces = false;
        for (k, (a, map, n_coarse)) in cases.iter().enumerate() {
            let fine = SplitMatrix::new(a);
            let (start, cols) = fine.upper_rows().pattern();
            let mut rng = SplitMix(100 + k as u64);
            let weights: Vec<f64> = (0..cols.len())
                .map(|_| rng.next_f64() * 10f64.powi(rng.below(9) as i32 - 4))
                .collect();
            let (faces, target, coarse_weights) =
                coarse_faces_by_definition(start, cols, map, &weights);
            let (level, got_weights) =
                CoarseLevel::build((start, cols), map, *n_coarse, Some(&weights));
            let (coarse_start, coarse_cols) = level.layout.upper();
            let got_faces: Vec<(u32, u32)> = (0..*n_coarse)
                .flat_map(|c| {
                    coarse_cols[coarse_start[c]..coarse_start[c + 1]]
                        .iter()
                        .map(move |&j| (c as u32, j))
                })
                .collect();
            assert_eq!(got_faces, faces, "case {k}");
            assert_eq!(level.face_target, target, "case {k}");
            assert_eq!(bits(&got_weights), bits(&coarse_weights), "case {k}");
            let (unweighted, none) = CoarseLevel::build((start, cols), map, *n_coarse, None);
            assert!(none.is_empty());
            assert_eq!(unweighted, level, "case {k}");
            let mut keys = vec![0usize; *n_coarse];
            for r in 0..map.len() {
                for &c in &cols[start[r]..start[r + 1]] {
                    let (a, b) = (map[r], map[c as usize]);
                    if a != b {
                        keys[a.min(b) as usize] += 1;
                    }
                }
            }
            many_faces |= keys.iter().any(|&k| k > 32);
        }
        assert!(many_faces, "no cluster took the library's sort");
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
