//! Galerkin coarse operators A_c = Pᵀ A P for a piecewise-constant P
//! (aggregates), with the summation order fixed by `AMG_SPEC.md` so that the
//! GPU's product (`kernels/amg.cu`) gives the same bits: coarse row I takes
//! the rows of aggregate I in ascending order, each row's entries in stored
//! order; a_ij goes to coarse entry (I, aggregate[j]), created at its first
//! appearance and added to in encounter order; then the row is sorted by column.

use rayon::prelude::*;

use crate::sparse::Csr;

/// Coarse rows per parallel task.
const ROWS_PER_TASK: usize = 512;

/// The rows of each aggregate, ascending: aggregate I's rows are
/// `rows[ptr[I]..ptr[I + 1]]` (a counting sort of `aggregate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    pub ptr: Vec<usize>,
    pub rows: Vec<u32>,
}

impl Members {
    pub fn new(aggregate: &[u32], n_coarse: usize) -> Self {
        let (ptr, rows) = crate::slices::group_by_key(aggregate, n_coarse);
        Self { ptr, rows }
    }

    pub fn n_coarse(&self) -> usize {
        self.ptr.len() - 1
    }
    /// The rows of aggregate `c`, ascending.
    pub fn of(&self, c: usize) -> &[u32] {
        &self.rows[self.ptr[c]..self.ptr[c + 1]]
    }
}

/// The entries of `rows` of A summed by the group of their column
/// (`group[j]`) into `entries`: (group, sum) pairs sorted by group, each sum
/// in encounter order (rows in the order given, each row's entries in stored
/// order). For the rows of aggregate c and `group` the aggregates, coarse
/// row c of Pᵀ A P in the spec's order.
pub(crate) fn sum_by_column_group(
    a: &Csr,
    group: &[u32],
    rows: &[u32],
    entries: &mut Vec<(u32, f64)>,
) {
    entries.clear();
    for &i in rows {
        let (cols, vals) = a.row(i as usize);
        for (&j, &v) in cols.iter().zip(vals) {
            let target = group[j as usize];
            match entries.iter_mut().find(|e| e.0 == target) {
                Some(e) => e.1 += v,
                None => entries.push((target, v)),
            }
        }
    }
    entries.sort_unstable_by_key(|e| e.0);
}

/// Pᵀ A P for the piecewise-constant P of `aggregate` (row → coarse row of
/// 0..n_coarse, every coarse row used). Entries that sum to exactly 0.0 are kept.
pub fn galerkin(a: &Csr, aggregate: &[u32], n_coarse: usize) -> Csr {
    assert_eq!(aggregate.len(), a.n_rows(), "galerkin: aggregate length");
    let members = Members::new(aggregate, n_coarse);
    let tasks: Vec<(Vec<usize>, Vec<u32>, Vec<f64>)> = (0..n_coarse.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|t| {
            let (mut lengths, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
            let mut entries = Vec::new();
            for c in t * ROWS_PER_TASK..((t + 1) * ROWS_PER_TASK).min(n_coarse) {
                sum_by_column_group(a, aggregate, members.of(c), &mut entries);
                lengths.push(entries.len());
                cols.extend(entries.iter().map(|e| e.0));
                vals.extend(entries.iter().map(|e| e.1));
            }
            (lengths, cols, vals)
        })
        .collect();
    let nnz = tasks.iter().map(|t| t.1.len()).sum();
    let mut row_ptr = Vec::with_capacity(n_coarse + 1);
    row_ptr.push(0);
    let (mut cols, mut vals) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    for (lengths, c, v) in tasks {
        for len in lengths {
            row_ptr.push(row_ptr.last().unwrap() + len);
        }
        cols.extend(c);
        vals.extend(v);
    }
    Csr::new(n_coarse, row_ptr, cols, vals).expect("coarse rows are sorted and in range")
}

/// Recomputes the values of `coarse` = Pᵀ A P in place, its pattern kept (the
/// pattern of an earlier [`galerkin`] with the same `aggregate` and a matrix
/// of `a`'s pattern), with the same summation order, so the result has the
/// bits of a fresh [`galerkin`]. Fails with the coarse row that gets an
/// entry outside the pattern (`a`'s pattern is not the one of the setup).
pub fn galerkin_values(
    a: &Csr,
    aggregate: &[u32],
    members: &Members,
    coarse: &mut Csr,
) -> Result<(), usize> {
    assert_eq!(
        aggregate.len(),
        a.n_rows(),
        "galerkin_values: aggregate length"
    );
    assert_eq!(
        members.n_coarse(),
        coarse.n_rows(),
        "galerkin_values: coarse size"
    );
    let row_ptr = coarse.row_ptr().to_vec();
    let cols = coarse.cols().to_vec();
    let vals = coarse.values_mut();
    // Split the values by coarse row so that rows fill in parallel.
    let mut rows: Vec<&mut [f64]> = Vec::with_capacity(row_ptr.len() - 1);
    let mut rest = vals;
    for w in row_ptr.windows(2) {
        let (row, tail) = rest.split_at_mut(w[1] - w[0]);
        rows.push(row);
        rest = tail;
    }
    rows.par_iter_mut()
        .enumerate()
        .with_min_len(ROWS_PER_TASK)
        .try_for_each(|(c, row)| {
            let row_cols = &cols[row_ptr[c]..row_ptr[c + 1]];
            row.fill(0.0);
            for &i in members.of(c) {
                let (a_cols, a_vals) = a.row(i as usize);
                for (&j, &v) in a_cols.iter().zip(a_vals) {
                    let target = aggregate[j as usize];
                    let k = row_cols.binary_search(&target).map_err(|_| c)?;
                    row[k] += v;
                }
            }
            Ok(())
        })
}
