//! Bandwidth-reducing row orderings (Cuthill–McKee and its reverse) and
//! symmetric permutations of matrices and vectors.
//!
//! Cuthill–McKee as in seed 000 §3.2 (Wikberg 2024, after Cuthill & McKee
//! 1969): start from a node of smallest degree, visit breadth first, append
//! each node's unvisited neighbours by ascending degree (ties by index). Unlike
//! the seed's code, a graph with several components restarts from the
//! smallest-degree unvisited node, so every row is placed.

use std::collections::VecDeque;

use rayon::prelude::*;

use super::Csr;

/// A row ordering: `new_to_old[k]` is the original row placed at position k.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permutation {
    new_to_old: Vec<u32>,
    old_to_new: Vec<u32>,
}

impl Permutation {
    /// Builds a permutation from `new_to_old`, checking that it is one.
    pub fn from_new_to_old(new_to_old: Vec<u32>) -> Result<Self, String> {
        let n = new_to_old.len();
        let mut old_to_new = vec![u32::MAX; n];
        for (new, &old) in new_to_old.iter().enumerate() {
            let slot = old_to_new
                .get_mut(old as usize)
                .ok_or_else(|| format!("permutation entry {new} is {old}, out of range 0..{n}"))?;
            if *slot != u32::MAX {
                return Err(format!("row {old} appears twice in the permutation"));
            }
            *slot = new as u32;
        }
        Ok(Self {
            new_to_old,
            old_to_new,
        })
    }

    pub fn identity(n: usize) -> Self {
        let ids: Vec<u32> = (0..n as u32).collect();
        Self {
            new_to_old: ids.clone(),
            old_to_new: ids,
        }
    }

    pub fn len(&self) -> usize {
        self.new_to_old.len()
    }
    pub fn is_empty(&self) -> bool {
        self.new_to_old.is_empty()
    }
    pub fn new_to_old(&self) -> &[u32] {
        &self.new_to_old
    }
    pub fn old_to_new(&self) -> &[u32] {
        &self.old_to_new
    }

    /// The reversed ordering (Cuthill–McKee → reverse Cuthill–McKee).
    pub fn reversed(&self) -> Self {
        let new_to_old: Vec<u32> = self.new_to_old.iter().rev().copied().collect();
        Self::from_new_to_old(new_to_old).expect("the reverse of a permutation is one")
    }

    /// The inverse ordering: its `new_to_old` is this one's `old_to_new`, so
    /// `p.inverse().apply_symmetric(&p.apply_symmetric(a)) == a`.
    pub fn inverse(&self) -> Self {
        Self {
            new_to_old: self.old_to_new.clone(),
            old_to_new: self.new_to_old.clone(),
        }
    }

    /// v in the new order: out[k] = v[new_to_old[k]].
    pub fn to_new<T: Copy>(&self, v: &[T]) -> Vec<T> {
        assert_eq!(v.len(), self.len(), "permutation: vector length");
        self.new_to_old.iter().map(|&o| v[o as usize]).collect()
    }

    /// v back in the original order (the inverse of `to_new`).
    pub fn to_old<T: Copy>(&self, v: &[T]) -> Vec<T> {
        assert_eq!(v.len(), self.len(), "permutation: vector length");
        self.old_to_new.iter().map(|&k| v[k as usize]).collect()
    }

    /// P A Pᵀ: row and column k of the result are row and column
    /// new_to_old[k] of `a` (square), columns sorted in each row. Rows are
    /// filled in parallel.
    pub fn apply_symmetric(&self, a: &Csr) -> Csr {
        assert_eq!(a.n_rows(), self.len(), "permutation: matrix rows");
        assert_eq!(a.n_cols(), self.len(), "permutation: matrix columns");
        let mut row_ptr = Vec::with_capacity(a.n_rows() + 1);
        row_ptr.push(0);
        for &old in &self.new_to_old {
            let (c, _) = a.row(old as usize);
            row_ptr.push(row_ptr.last().unwrap() + c.len());
        }
        let mut cols = vec![0u32; a.nnz()];
        let mut values = vec![0.0f64; a.nnz()];
        let mut rows = Vec::with_capacity(a.n_rows());
        let (mut c_rest, mut v_rest) = (cols.as_mut_slice(), values.as_mut_slice());
        for k in 0..a.n_rows() {
            let len = row_ptr[k + 1] - row_ptr[k];
            let (c_row, c_tail) = c_rest.split_at_mut(len);
            let (v_row, v_tail) = v_rest.split_at_mut(len);
            rows.push((c_row, v_row));
            (c_rest, v_rest) = (c_tail, v_tail);
        }
        // Visit the rows in the old order (streaming reads of `a`), each
        // writing its own new row.
        let mut by_new: Vec<Option<_>> = rows.into_iter().map(Some).collect();
        let by_old: Vec<_> = self
            .old_to_new
            .iter()
            .map(|&k| {
                by_new[k as usize]
                    .take()
                    .expect("a permutation hits each row once")
            })
            .collect();
        by_old
            .into_par_iter()
            .enumerate()
            .for_each(|(old, (c_row, v_row))| {
                let (c, v) = a.row(old);
                // Insertion sort by new column: rows are short.
                for (k, (&c, &v)) in c.iter().zip(v).enumerate() {
                    let c = self.old_to_new[c as usize];
                    let mut at = k;
                    while at > 0 && c_row[at - 1] > c {
                        c_row[at] = c_row[at - 1];
                        v_row[at] = v_row[at - 1];
                        at -= 1;
                    }
                    c_row[at] = c;
                    v_row[at] = v;
                }
            });
        Csr::new(a.n_cols(), row_ptr, cols, values)
            .expect("a symmetric permutation of a valid matrix is valid")
    }
}

/// Off-diagonal neighbours of row r.
fn neighbours(a: &Csr, r: usize) -> impl Iterator<Item = usize> + '_ {
    a.row(r)
        .0
        .iter()
        .map(|&c| c as usize)
        .filter(move |&c| c != r)
}

/// Cuthill–McKee ordering of the graph of `a`'s pattern (square; a
/// structurally symmetric pattern is assumed, as FVM matrices are).
pub fn cuthill_mckee(a: &Csr) -> Permutation {
    assert_eq!(a.n_rows(), a.n_cols(), "cuthill_mckee: matrix not square");
    let n = a.n_rows();
    let degree: Vec<usize> = (0..n).map(|r| neighbours(a, r).count()).collect();
    // Component start candidates by (degree, index).
    let mut starts: Vec<u32> = (0..n as u32).collect();
    starts.sort_by_key(|&r| (degree[r as usize], r));
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut queue = VecDeque::new();
    let mut next: Vec<usize> = Vec::new();
    for &start in &starts {
        if visited[start as usize] {
            continue;
        }
        visited[start as usize] = true;
        queue.push_back(start as usize);
        while let Some(r) = queue.pop_front() {
            order.push(r as u32);
            next.clear();
            next.extend(neighbours(a, r).filter(|&c| !visited[c]));
            next.sort_unstable_by_key(|&c| (degree[c], c));
            next.dedup();
            for &c in &next {
                visited[c] = true;
                queue.push_back(c);
            }
        }
    }
    Permutation::from_new_to_old(order).expect("BFS visits each row once")
}

/// Reverse Cuthill–McKee (George 1971): the same bandwidth, usually less profile.
pub fn reverse_cuthill_mckee(a: &Csr) -> Permutation {
    cuthill_mckee(a).reversed()
}

/// max |r − c| over the stored entries.
pub fn bandwidth(a: &Csr) -> usize {
    (0..a.n_rows())
        .map(|r| {
            let cols = a.row(r).0;
            match (cols.first(), cols.last()) {
                (Some(&lo), Some(&hi)) => r.abs_diff(lo as usize).max(r.abs_diff(hi as usize)),
                _ => 0,
            }
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;

    #[test]
    fn permutation_round_trips_and_rejects_non_permutations() {
        let p = Permutation::from_new_to_old(vec![2, 0, 1]).unwrap();
        assert_eq!(p.old_to_new(), &[1, 2, 0]);
        assert_eq!(p.to_new(&[10, 11, 12]), vec![12, 10, 11]);
        assert_eq!(p.to_old(&p.to_new(&[10, 11, 12])), vec![10, 11, 12]);
        assert!(Permutation::from_new_to_old(vec![0, 0]).is_err());
        assert!(Permutation::from_new_to_old(vec![0, 5]).is_err());
        assert_eq!(p.reversed().new_to_old(), &[1, 0, 2]);
        assert_eq!(p.inverse().new_to_old(), p.old_to_new());
        assert_eq!(
            p.inverse().to_new(&p.to_new(&[10, 11, 12])),
            vec![10, 11, 12]
        );
    }

    #[test]
    fn symmetric_permutation_preserves_spmv() {
        let a = random_symmetric(300, 5, 7);
        let p = reverse_cuthill_mckee(&a);
        let b = p.apply_symmetric(&a);
        let x: Vec<f64> = (0..300).map(|i| (i as f64 * 0.37).sin()).collect();
        let (mut y, mut yp) = (vec![0.0; 300], vec![0.0; 300]);
        a.spmv(&x, &mut y);
        b.spmv(&p.to_new(&x), &mut yp);
        for (a, b) in p.to_old(&yp).iter().zip(&y) {
            assert!((a - b).abs() <= 1e-13 * b.abs().max(1.0), "{a} vs {b}");
        }
        assert_eq!(p.inverse().apply_symmetric(&b), a);
    }

    #[test]
    fn cuthill_mckee_of_a_shuffled_path_is_a_path_and_handles_components() {
        // Two paths 0-1-2-...-9 and 10..14, rows shuffled; plus an isolated row 15.
        let shuffle: Vec<u32> = (0..16u32).map(|i| (i * 7) % 16).collect();
        let edges: Vec<(u32, u32)> = (0..9).chain(10..14).map(|i| (i, i + 1)).collect();
        let mut rows: Vec<Vec<u32>> = (0..16u32).map(|j| vec![j]).collect();
        for (u, v) in edges {
            let (u, v) = (shuffle[u as usize], shuffle[v as usize]);
            rows[u as usize].push(v);
            rows[v as usize].push(u);
        }
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for mut r in rows {
            r.sort_unstable();
            vals.extend(r.iter().map(|_| 1.0));
            cols.extend(r);
            row_ptr.push(cols.len());
        }
        let a = Csr::new(16, row_ptr, cols, vals).unwrap();
        assert!(bandwidth(&a) > 1);
        for p in [cuthill_mckee(&a), reverse_cuthill_mckee(&a)] {
            assert_eq!(p.len(), 16);
            assert_eq!(bandwidth(&p.apply_symmetric(&a)), 1);
        }
        // The isolated row (degree 0) comes first in Cuthill–McKee.
        assert_eq!(cuthill_mckee(&a).new_to_old()[0], shuffle[15]);
    }
}
