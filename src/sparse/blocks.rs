//! Row blocks for block smoothers: a block is a run of `block` consecutive rows
//! (on the GPU a mod-SELL slice, Wikberg 2024, §4.3: one thread block per slice).
//!
//! A block-Jacobi smoother only helps where a block's rows are coupled to each
//! other. Cuthill–McKee orders rows by BFS level sets, and on 3-D meshes a level
//! set holds ~10⁴ cells, so a slice of 512 consecutive RCM rows has almost no
//! coupling inside (λ ≈ 0.001, kernels/NOTES.md): block Jacobi would be point
//! Jacobi. [`grown_blocks`] renumbers the rows so that every block is a compact
//! piece of the mesh instead (graph growing, as in the domain-decomposition
//! orderings Wikberg 2024 suggests in §3.2.1).

use std::collections::VecDeque;

use super::{Csr, Permutation};

/// Rows renumbered block by block: each block of `block` rows is grown breadth
/// first, over rows not yet taken, from the first untaken row in `base` order
/// (when the growth runs out of untaken neighbours it restarts from the next
/// untaken row in `base` order). With `base` a Cuthill–McKee ordering the
/// blocks advance along its front, so neighbouring blocks get nearby numbers.
/// `a` must be square with a structurally symmetric pattern.
pub fn grown_blocks(a: &Csr, block: usize, base: &Permutation) -> Permutation {
    assert_eq!(a.n_rows(), a.n_cols(), "grown_blocks: matrix not square");
    assert_eq!(base.len(), a.n_rows(), "grown_blocks: base ordering length");
    assert!(block > 0, "grown_blocks: empty blocks");
    let n = a.n_rows();
    let mut taken = vec![false; n];
    let mut order: Vec<u32> = Vec::with_capacity(n);
    let mut queue = VecDeque::new();
    let mut seeds = base.new_to_old().iter().map(|&r| r as usize);
    while order.len() < n {
        let end = (order.len() + block).min(n);
        queue.clear();
        while order.len() < end {
            let r = match queue.pop_front() {
                Some(r) => r,
                None => seeds
                    .by_ref()
                    .find(|&r| !taken[r])
                    .expect("an untaken row is left while the order is short"),
            };
            if std::mem::replace(&mut taken[r], true) {
                continue;
            }
            order.push(r as u32);
            queue.extend(
                a.row(r)
                    .0
                    .iter()
                    .map(|&c| c as usize)
                    .filter(|&c| !taken[c]),
            );
        }
    }
    Permutation::from_new_to_old(order).expect("each row is taken once")
}

/// For each slice of `slice_height` rows, the largest number of off-diagonal
/// entries of one of its rows whose column lies in the same slice (Wikberg's
/// (2024) `slice_mnz`, §3.2): the size of the slice's local matrix in shared memory.
pub fn in_slice_counts(a: &Csr, slice_height: usize) -> Vec<u32> {
    let h = slice_height;
    (0..a.n_rows().div_ceil(h))
        .map(|s| {
            (s * h..((s + 1) * h).min(a.n_rows()))
                .map(|r| {
                    a.row(r)
                        .0
                        .iter()
                        .filter(|&&c| c as usize != r && c as usize / h == s)
                        .count() as u32
                })
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// The fraction of off-diagonal entries whose column lies in the row's block
/// (λ of Wikberg 2024, Table 3.1 for slices of `block` rows; 0 without off-diagonals).
pub fn in_block_fraction(a: &Csr, block: usize) -> f64 {
    let (mut inside, mut all) = (0usize, 0usize);
    for r in 0..a.n_rows() {
        for &c in a.row(r).0 {
            let c = c as usize;
            if c != r {
                all += 1;
                inside += usize::from(c / block == r / block);
            }
        }
    }
    if all == 0 {
        0.0
    } else {
        inside as f64 / all as f64
    }
}

/// The block-diagonal part of `a` (square): the entries whose row and column
/// lie in the same block of `block` rows, in `a`'s order (the in-slice
/// entries of mod-SELL with slice height `block`, and the diagonal).
pub fn block_diagonal(a: &Csr, block: usize) -> Csr {
    assert!(block > 0, "block_diagonal: empty blocks");
    let mut row_ptr = Vec::with_capacity(a.n_rows() + 1);
    row_ptr.push(0);
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    for r in 0..a.n_rows() {
        let (c, v) = a.row(r);
        for (&c, &v) in c.iter().zip(v) {
            if c as usize / block == r / block {
                cols.push(c);
                values.push(v);
            }
        }
        row_ptr.push(cols.len());
    }
    Csr::new(a.n_cols(), row_ptr, cols, values).expect("a subset of a valid matrix")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::ordering::reverse_cuthill_mckee;
    use crate::sparse::testing::random_symmetric;
    use crate::sparse::ModSell;

    /// 7-point pattern of an n³ grid.
    fn cube(n: usize) -> Csr {
        let id = |i: usize, j: usize, k: usize| (k * n + j) * n + i;
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for k in 0..n {
            for j in 0..n {
                for i in 0..n {
                    let mut row = vec![id(i, j, k)];
                    for (d, lim) in [(i, 0), (j, 1), (k, 2)] {
                        let step = [1, n, n * n][lim];
                        if d > 0 {
                            row.push(id(i, j, k) - step);
                        }
                        if d + 1 < n {
                            row.push(id(i, j, k) + step);
                        }
                    }
                    row.sort_unstable();
                    for c in row {
                        cols.push(c as u32);
                        vals.push(if c == id(i, j, k) { 6.0 } else { -1.0 });
                    }
                    row_ptr.push(cols.len());
                }
            }
        }
        Csr::new(n * n * n, row_ptr, cols, vals).unwrap()
    }

    #[test]
    fn grown_blocks_are_compact_where_rcm_slices_are_not() {
        let a = cube(24);
        let rcm = reverse_cuthill_mckee(&a);
        let grown = grown_blocks(&a, 512, &rcm);
        let by_rcm = in_block_fraction(&rcm.apply_symmetric(&a), 512);
        let by_blocks = in_block_fraction(&grown.apply_symmetric(&a), 512);
        println!("lambda: RCM {by_rcm:.3}, grown blocks {by_blocks:.3}");
        assert!(by_blocks > 0.6, "{by_blocks}");
        assert!(by_blocks > 2.0 * by_rcm, "{by_blocks} vs {by_rcm}");
    }

    #[test]
    fn grown_blocks_is_a_permutation_on_disconnected_graphs() {
        // random_symmetric with few neighbours has isolated rows and components.
        for (n, block) in [(1, 32), (100, 32), (1000, 64)] {
            let a = random_symmetric(n, 1, n as u64);
            let p = grown_blocks(&a, block, &reverse_cuthill_mckee(&a));
            assert_eq!(p.len(), n);
        }
    }

    #[test]
    fn in_slice_counts_match_the_mod_sell_codes() {
        let a = random_symmetric(3000, 8, 5);
        for h in [32, 256] {
            let m = ModSell::from_csr(&a, h).unwrap();
            let counts = in_slice_counts(&a, h);
            for (s, &count) in counts.iter().enumerate() {
                let (start, end) = (m.slice_ptr()[s] as usize, m.slice_ptr()[s + 1] as usize);
                let max = (0..h)
                    .map(|t| {
                        (start + t..end)
                            .step_by(h)
                            .filter(|&k| m.codes()[k] < 0)
                            .count() as u32
                    })
                    .max()
                    .unwrap();
                assert_eq!(count, max, "slice {s}");
            }
            assert!((in_block_fraction(&a, h) - m.lambda()).abs() < 1e-15);
        }
    }

    #[test]
    fn block_diagonal_keeps_the_in_slice_entries() {
        let a = random_symmetric(300, 8, 9);
        let d = block_diagonal(&a, 64);
        let m = ModSell::from_csr(&a, 64).unwrap();
        let in_slice = m.codes().iter().filter(|&&c| c < 0).count();
        assert_eq!(d.nnz(), in_slice + a.n_rows());
        for r in 0..a.n_rows() {
            let (c, v) = d.row(r);
            for (&c, &v) in c.iter().zip(v) {
                assert_eq!(c as usize / 64, r / 64);
                assert_eq!(a.slot(r, c as usize).map(|s| a.values()[s]), Some(v));
            }
        }
    }
}
