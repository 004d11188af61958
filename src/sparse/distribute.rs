//! A square matrix distributed over ranks: each rank owns the rows
//! of one part (METIS k-way by default) and sees the rows it couples to on
//! other ranks as a halo.
//!
//! Local numbering is `[interior | boundary | halo]`:
//! - interior: owned rows coupled to owned rows only, so their part of A x can
//!   run while the halo is in flight;
//! - boundary: owned rows with at least one halo coupling;
//! - halo: the other ranks' rows this rank reads, grouped by neighbour rank
//!   (ascending) and within a neighbour by global row (ascending).
//!
//! The owned rows keep their global order inside each group, so a global RCM
//! ordering survives locally. A rank sends a neighbour its rows in the order
//! the neighbour stores them (ascending global row), so both sides derive the
//! exchange lists from the partition alone, with no handshake.

use std::ops::Range;

use super::ordering::Graph;
use rayon::prelude::*;

use super::partition::graph_parts;
use super::Csr;
use crate::slices::split_lengths;

/// The rank owning each global row.
#[derive(Clone, Debug, PartialEq)]
pub struct Decomposition {
    n_ranks: usize,
    owner: Vec<u32>,
}

impl Decomposition {
    /// METIS k-way over the graph of `a` (`sparse::partition::graph_parts`).
    pub fn metis(a: &Csr, n_ranks: usize) -> Result<Self, String> {
        let owner = graph_parts(&Graph::of_matrix(a), n_ranks)?;
        Self::from_owners(owner, n_ranks)
    }

    /// Rows in `n_ranks` contiguous blocks of equal size (within one row),
    /// in row order: for a banded row order (a structured mesh numbered
    /// along its axes), slabs whose interfaces are about as small as a graph
    /// partition's, at no cost where METIS takes seconds per million rows.
    pub fn contiguous(n_rows: usize, n_ranks: usize) -> Result<Self, String> {
        let ranks = n_ranks.max(1) as u128;
        let owner = (0..n_rows)
            .into_par_iter()
            .map(|row| (row as u128 * ranks / n_rows as u128) as u32)
            .collect();
        Self::from_owners(owner, n_ranks)
    }

    /// An explicit owner per row (a `decompose` file, a test's stripes).
    /// Every rank must own at least one row.
    pub fn from_owners(owner: Vec<u32>, n_ranks: usize) -> Result<Self, String> {
        if n_ranks == 0 {
            return Err("a decomposition needs at least one rank".into());
        }
        let mut count = vec![0usize; n_ranks];
        for (row, &r) in owner.iter().enumerate() {
            let r = r as usize;
            if r >= n_ranks {
                return Err(format!(
                    "row {row} is given to rank {r}, but there are only {n_ranks} ranks"
                ));
            }
            count[r] += 1;
        }
        if let Some(empty) = count.iter().position(|&c| c == 0) {
            return Err(format!(
                "rank {empty} of {n_ranks} owns no row ({} rows in all); use fewer ranks",
                owner.len()
            ));
        }
        Ok(Self { n_ranks, owner })
    }

    pub fn n_ranks(&self) -> usize {
        self.n_ranks
    }

    /// Rank of each global row.
    pub fn owners(&self) -> &[u32] {
        &self.owner
    }

    /// Rows owned by each rank.
    pub fn counts(&self) -> Vec<usize> {
        let mut count = vec![0; self.n_ranks];
        for &r in &self.owner {
            count[r as usize] += 1;
        }
        count
    }

    /// The local system of `rank` (see the module docs for its numbering).
    ///
    /// Built in parallel over the rank's rows: every global column is
    /// mapped to its local index through one dense table of the global rows
    /// (4 bytes a row), so each entry costs one read instead of a search of
    /// the owned rows (a 16 M-row rank's 112 M entries took seconds that
    /// way).
    pub fn local(&self, a: &Csr, rank: usize) -> Result<LocalMatrix, String> {
        if a.n_rows() != self.owner.len() || a.n_cols() != a.n_rows() {
            return Err(format!(
                "a decomposition of {} rows cannot distribute a {} x {} matrix",
                self.owner.len(),
                a.n_rows(),
                a.n_cols()
            ));
        }
        if rank >= self.n_ranks {
            return Err(format!("rank {rank} out of range ({} ranks)", self.n_ranks));
        }
        let me = rank as u32;
        let owner = &self.owner;
        let others = |row: usize| {
            a.row(row)
                .0
                .iter()
                .filter(move |&&c| owner[c as usize] != me)
        };
        // The owned rows in ascending order, each with whether it couples
        // to another rank (rayon's collect keeps the order).
        let owned: Vec<(u32, bool)> = owner
            .par_iter()
            .enumerate()
            .filter(|&(_, &o)| o == me)
            .map(|(row, _)| (row as u32, others(row).next().is_some()))
            .collect();
        let mut global: Vec<u32> = owned.iter().filter(|o| !o.1).map(|o| o.0).collect();
        let n_interior = global.len();
        global.extend(owned.iter().filter(|o| o.1).map(|o| o.0));
        drop(owned);
        let n_owned = global.len();
        let boundary_rows = &global[n_interior..];
        // The halo, (owner, global row), and what each neighbour reads of
        // ours, (reader, global row): both from the boundary rows only.
        let coupled = |rows: &[u32]| -> Vec<(u32, u32, u32)> {
            let mut pairs: Vec<(u32, u32, u32)> = rows
                .par_iter()
                .flat_map_iter(|&g| others(g as usize).map(move |&c| (owner[c as usize], c, g)))
                .collect();
            pairs.par_sort_unstable();
            pairs
        };
        let pairs = coupled(boundary_rows);
        let mut halo: Vec<(u32, u32)> = pairs.iter().map(|&(o, c, _)| (o, c)).collect();
        halo.dedup();
        let mut sends: Vec<(u32, u32)> = pairs.iter().map(|&(o, _, g)| (o, g)).collect();
        drop(pairs);
        sends.par_sort_unstable();
        sends.dedup();

        // Local index of every global row this rank reads.
        let mut index = vec![u32::MAX; self.owner.len()];
        for (local, &g) in global.iter().enumerate() {
            index[g as usize] = local as u32;
        }
        for (slot, &(_, g)) in halo.iter().enumerate() {
            index[g as usize] = (n_owned + slot) as u32;
        }

        let mut neighbours: Vec<Neighbour> = Vec::new();
        for (slot, &(o, _)) in halo.iter().enumerate() {
            let slot = n_owned + slot;
            match neighbours.last_mut() {
                Some(nb) if nb.rank == o as usize => nb.recv.end = slot + 1,
                _ => neighbours.push(Neighbour {
                    rank: o as usize,
                    send: Vec::new(),
                    recv: slot..slot + 1,
                }),
            }
        }
        // A neighbour reads our boundary rows coupled to it in ascending
        // global order (the order of its halo).
        for (reader, g) in sends {
            let local = index[g as usize];
            match neighbours.iter_mut().find(|nb| nb.rank == reader as usize) {
                Some(nb) => nb.send.push(local),
                // A one-sided coupling (nonsymmetric pattern): we send, and
                // read nothing back.
                None => neighbours.push(Neighbour {
                    rank: reader as usize,
                    send: vec![local],
                    recv: 0..0,
                }),
            }
        }
        neighbours.sort_by_key(|nb| nb.rank);
        global.extend(halo.iter().map(|&(_, g)| g));

        // A local row has its global row's entries, renumbered and sorted.
        let lengths: Vec<usize> = global[..n_owned]
            .par_iter()
            .map(|&g| a.row(g as usize).0.len())
            .collect();
        let mut row_ptr = Vec::with_capacity(n_owned + 1);
        row_ptr.push(0);
        for len in &lengths {
            row_ptr.push(row_ptr.last().unwrap() + len);
        }
        let nnz = row_ptr[n_owned];
        let (mut cols, mut values) = (vec![0u32; nnz], vec![0.0; nnz]);
        const BLOCK: usize = 4096;
        let block_lengths = || {
            (0..n_owned)
                .step_by(BLOCK)
                .map(|r| row_ptr[(r + BLOCK).min(n_owned)] - row_ptr[r])
        };
        split_lengths(&mut cols, block_lengths())
            .into_par_iter()
            .zip(split_lengths(&mut values, block_lengths()))
            .zip(global[..n_owned].par_chunks(BLOCK))
            .try_for_each(|((cols, values), rows)| -> Result<(), String> {
                let mut at = 0;
                let mut entries: Vec<(u32, f64)> = Vec::new();
                for &g in rows {
                    let (gc, gv) = a.row(g as usize);
                    entries.clear();
                    for (&c, &v) in gc.iter().zip(gv) {
                        let local = index[c as usize];
                        if local == u32::MAX {
                            return Err(format!(
                                "internal: column {c} of row {g} has no local index"
                            ));
                        }
                        entries.push((local, v));
                    }
                    entries.sort_unstable_by_key(|e| e.0);
                    for (k, &(c, v)) in entries.iter().enumerate() {
                        cols[at + k] = c;
                        values[at + k] = v;
                    }
                    at += entries.len();
                }
                Ok(())
            })?;
        let matrix = Csr::new(global.len(), row_ptr, cols, values)?;
        Ok(LocalMatrix {
            rank,
            n_ranks: self.n_ranks,
            n_global: self.owner.len(),
            n_interior,
            n_owned,
            global,
            matrix,
            neighbours,
        })
    }
}

/// One rank's rows of a distributed matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalMatrix {
    pub rank: usize,
    pub n_ranks: usize,
    /// Rows of the whole matrix.
    pub n_global: usize,
    /// Owned rows with no halo coupling: local rows `0..n_interior`.
    pub n_interior: usize,
    /// Owned rows: local rows `0..n_owned`; halo slots follow.
    pub n_owned: usize,
    /// Global row of each local index (owned, then halo).
    pub global: Vec<u32>,
    /// The owned rows, `n_owned` × (`n_owned` + halo), local columns.
    pub matrix: Csr,
    /// Ranks this one exchanges with, ascending.
    pub neighbours: Vec<Neighbour>,
}

/// The exchange with one neighbouring rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Neighbour {
    pub rank: usize,
    /// Local owned rows whose values the neighbour reads, in the order of its
    /// halo slots for this rank.
    pub send: Vec<u32>,
    /// Local halo slots filled from the neighbour.
    pub recv: Range<usize>,
}

impl LocalMatrix {
    /// Owned rows followed by halo slots.
    pub fn n_local(&self) -> usize {
        self.global.len()
    }

    pub fn n_halo(&self) -> usize {
        self.global.len() - self.n_owned
    }

    /// The owned part of a global vector, in local order.
    pub fn scatter(&self, global: &[f64]) -> Vec<f64> {
        self.global[..self.n_owned]
            .iter()
            .map(|&g| global[g as usize])
            .collect()
    }

    /// The square block of the owned rows and columns (the halo couplings
    /// dropped): what a block-Jacobi preconditioner over ranks factors.
    pub fn owned_block(&self) -> Csr {
        let n = self.n_owned;
        // Local columns are sorted, owned ones (< n_owned) first.
        row_parts(&self.matrix, 0..n, n, 0, |c| {
            0..c.partition_point(|&c| (c as usize) < n)
        })
    }

    /// The boundary rows' couplings to the halo: `n_owned − n_interior` rows
    /// × the halo slots (slot 0 is local index `n_owned`).
    pub fn halo_block(&self) -> Csr {
        let n = self.n_owned;
        row_parts(
            &self.matrix,
            self.n_interior..n,
            self.n_halo(),
            n as u32,
            |c| c.partition_point(|&c| (c as usize) < n)..c.len(),
        )
    }

    /// Writes the owned values `local` into their global places.
    pub fn gather_into(&self, local: &[f64], global: &mut [f64]) {
        for (&g, &v) in self.global[..self.n_owned].iter().zip(local) {
            global[g as usize] = v;
        }
    }
}

/// Rows `rows` of `m`, each cut to the run `part(columns)` of its sorted
/// columns, those shifted down by `shift`, as a matrix of `n_cols` columns;
/// built in parallel over blocks of rows.
fn row_parts(
    m: &Csr,
    rows: Range<usize>,
    n_cols: usize,
    shift: u32,
    part: impl Fn(&[u32]) -> Range<usize> + Sync,
) -> Csr {
    let first = rows.start;
    let kept: Vec<Range<usize>> = rows.into_par_iter().map(|r| part(m.row(r).0)).collect();
    let mut row_ptr = Vec::with_capacity(kept.len() + 1);
    row_ptr.push(0);
    for k in &kept {
        row_ptr.push(row_ptr.last().unwrap() + k.len());
    }
    let nnz = row_ptr[kept.len()];
    let (mut cols, mut values) = (vec![0u32; nnz], vec![0.0; nnz]);
    const BLOCK: usize = 4096;
    let block_lengths = || {
        (0..kept.len())
            .step_by(BLOCK)
            .map(|r| row_ptr[(r + BLOCK).min(kept.len())] - row_ptr[r])
    };
    split_lengths(&mut cols, block_lengths())
        .into_par_iter()
        .zip(split_lengths(&mut values, block_lengths()))
        .zip(kept.par_chunks(BLOCK).enumerate())
        .for_each(|((cols, values), (block, kept))| {
            let mut at = 0;
            for (i, k) in kept.iter().enumerate() {
                let (c, v) = m.row(first + block * BLOCK + i);
                let len = k.len();
                for (to, &c) in cols[at..at + len].iter_mut().zip(&c[k.clone()]) {
                    *to = c - shift;
                }
                values[at..at + len].copy_from_slice(&v[k.clone()]);
                at += len;
            }
        });
    Csr::new(n_cols, row_ptr, cols, values).expect("a sub-block of a valid CSR matrix")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::{grid_laplacian, random_symmetric};

    /// Contiguous blocks: ascending owners, sizes within one row of each
    /// other, the products of the split equal the global one; more ranks
    /// than rows refused.
    #[test]
    fn contiguous_blocks_are_balanced_slabs() {
        for (n, ranks) in [(10, 3), (12, 4), (7, 7), (1000, 8)] {
            let d = Decomposition::contiguous(n, ranks).unwrap();
            assert!(
                d.owners().windows(2).all(|w| w[0] <= w[1]),
                "{n} rows, {ranks} ranks"
            );
            let counts = d.counts();
            let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(most - least <= 1, "{counts:?}");
            assert_eq!(counts.iter().sum::<usize>(), n);
        }
        let a = grid_laplacian(6, 5, 4);
        check_products(&a, &Decomposition::contiguous(a.n_rows(), 3).unwrap());
        let refused = Decomposition::contiguous(3, 4).unwrap_err();
        assert!(refused.contains("owns no row"), "{refused}");
    }

    /// y = A x computed rank by rank with halos filled from the global x
    /// equals the global product, for every owner layout tried.
    fn check_products(a: &Csr, d: &Decomposition) {
        let n = a.n_rows();
        let x: Vec<f64> = (0..n).map(|i| ((i * 7919) % 113) as f64 - 50.0).collect();
        let mut expected = vec![0.0; n];
        a.spmv(&x, &mut expected);
        let mut y = vec![f64::NAN; n];
        let mut owned = 0;
        for rank in 0..d.n_ranks() {
            let local = d.local(a, rank).unwrap();
            owned += local.n_owned;
            // Halo values as the neighbours would send them.
            let mut xl = local.scatter(&x);
            xl.resize(local.n_local(), f64::NAN);
            for nb in &local.neighbours {
                let theirs = d.local(a, nb.rank).unwrap();
                let back = theirs.neighbours.iter().find(|m| m.rank == rank).unwrap();
                assert_eq!(back.send.len(), nb.recv.len());
                for (slot, &src) in nb.recv.clone().zip(&back.send) {
                    xl[slot] = x[theirs.global[src as usize] as usize];
                }
            }
            assert!(xl.iter().all(|v| v.is_finite()), "halo slot left unfilled");
            let mut yl = vec![0.0; local.n_owned];
            local.matrix.spmv(&xl, &mut yl);
            local.gather_into(&yl, &mut y);
            // Interior rows read no halo slot.
            for r in 0..local.n_interior {
                assert!(local
                    .matrix
                    .row(r)
                    .0
                    .iter()
                    .all(|&c| (c as usize) < local.n_owned));
            }
        }
        assert_eq!(owned, n);
        // Local column order differs from the global one, so the sums differ
        // in rounding only.
        for (i, (&yi, &ei)) in y.iter().zip(&expected).enumerate() {
            assert!(
                (yi - ei).abs() <= 1e-12 * ei.abs().max(1.0),
                "row {i}: {yi} vs {ei}"
            );
        }
    }

    #[test]
    fn local_products_equal_the_global_product() {
        let a = grid_laplacian(23, 17, 1);
        for ranks in [1, 2, 3, 5] {
            check_products(&a, &Decomposition::metis(&a, ranks).unwrap());
        }
        // Stripes of rows, and a scattered (round-robin) layout with many
        // neighbours per rank.
        let n = a.n_rows();
        let stripes = (0..n).map(|i| (i * 4 / n) as u32).collect();
        check_products(&a, &Decomposition::from_owners(stripes, 4).unwrap());
        let scattered = (0..n).map(|i| (i % 3) as u32).collect();
        check_products(&a, &Decomposition::from_owners(scattered, 3).unwrap());
        let r = random_symmetric(300, 6, 11);
        check_products(&r, &Decomposition::metis(&r, 4).unwrap());
    }

    #[test]
    fn bad_layouts_are_refused_with_the_reason() {
        let e = Decomposition::from_owners(vec![0, 0, 2], 3).unwrap_err();
        assert!(e.contains("rank 1 of 3 owns no row"), "{e}");
        let e = Decomposition::from_owners(vec![0, 4], 2).unwrap_err();
        assert!(e.contains("row 1 is given to rank 4"), "{e}");
        let a = grid_laplacian(3, 3, 1);
        let d = Decomposition::from_owners(vec![0; 4], 1).unwrap();
        assert!(d.local(&a, 0).unwrap_err().contains("cannot distribute"));
    }
}
