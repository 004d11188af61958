//! Galerkin coarse operators A_c = Pᵀ A P for a piecewise-constant P
//! (aggregates), with the summation order fixed by `AMG_SPEC.md` so that the
//! GPU's product (`kernels/amg.cu`) gives the same bits: coarse row I takes
//! the rows of aggregate I in ascending order, each row's entries in stored
//! order; a_ij goes to coarse entry (I, aggregate[j]), created at its first
//! appearance and added to in encounter order; then the row is sorted by column.
//! [`GalerkinAddressing`] keeps the coarse pattern and the coarse entry of
//! each fine entry, so that products for new values on the same pattern (a
//! GAMG level of each solve) are one pass over the values, in that order.

use rayon::prelude::*;

use crate::solve::split::{SplitPattern, SplitValues};
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
        let mut ptr = vec![0usize; n_coarse + 1];
        for &c in aggregate {
            ptr[c as usize + 1] += 1;
        }
        for k in 0..n_coarse {
            ptr[k + 1] += ptr[k];
        }
        let mut next = ptr.clone();
        let mut rows = vec![0u32; aggregate.len()];
        for (i, &c) in aggregate.iter().enumerate() {
            rows[next[c as usize]] = i as u32;
            next[c as usize] += 1;
        }
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

/// Coarse row `c` of Pᵀ A P in the spec's order: (column, value) pairs sorted
/// by column, values summed in encounter order.
fn coarse_row(a: &Csr, aggregate: &[u32], rows: &[u32], entries: &mut Vec<(u32, f64)>) {
    entries.clear();
    for &i in rows {
        let (cols, vals) = a.row(i as usize);
        for (&j, &v) in cols.iter().zip(vals) {
            let target = aggregate[j as usize];
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
                coarse_row(a, aggregate, members.of(c), &mut entries);
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

/// The coarse pattern of Pᵀ A P for a piecewise-constant P, and for each
/// entry of A the coarse entry it adds to: made once per pattern and
/// aggregation, it turns every later product into one pass over A's values
/// (OpenFOAM's GAMG likewise keeps, per level, the coarse face of each fine
/// face). The sums have [`galerkin`]'s bits: coarse row I adds the rows of
/// aggregate I ascending, each row's entries in stored order.
#[derive(Clone, Debug, PartialEq)]
pub struct GalerkinAddressing {
    /// The coarse pattern (values 0).
    pattern: Csr,
    members: Members,
    /// `slot[e]`: the coarse entry (index into the coarse values) to which
    /// the fine entry e adds.
    slot: Vec<u32>,
}

impl GalerkinAddressing {
    /// The addressing of `a`'s pattern under `aggregate` (row → coarse row of
    /// 0..n_coarse, every coarse row used): one pass over the entries, with a
    /// per-coarse-column marker instead of a search or a hash map; each coarse
    /// row's columns are sorted (they are few).
    pub fn new(a: &Csr, aggregate: &[u32], n_coarse: usize) -> Self {
        Self::build(a, aggregate, n_coarse, false).0
    }

    /// [`Self::new`] and Pᵀ `a` P ([`Self::product`]'s bits) made in the
    /// same pass: each coarse row's sums are added while its entries get
    /// their slots, where the row's entries are still in cache, instead of
    /// a second pass over `a` and the slots (GAMG's coarse face weights).
    pub fn with_product(a: &Csr, aggregate: &[u32], n_coarse: usize) -> (Self, Csr) {
        let (addressing, values) = Self::build(a, aggregate, n_coarse, true);
        let product = addressing.pattern.with_values(values);
        (addressing, product)
    }

    /// The addressing, and with `sum` the product's values (else none).
    fn build(a: &Csr, aggregate: &[u32], n_coarse: usize, sum: bool) -> (Self, Vec<f64>) {
        assert_eq!(aggregate.len(), a.n_rows(), "galerkin: aggregate length");
        let members = Members::new(aggregate, n_coarse);
        let (a_ptr, a_cols, a_values) = (a.row_ptr(), a.cols(), a.values());
        let mut slot = vec![0u32; a.nnz()];
        let mut row_ptr = Vec::with_capacity(n_coarse + 1);
        row_ptr.push(0);
        let mut cols: Vec<u32> = Vec::with_capacity(a.nnz() / 2);
        let mut values: Vec<f64> = Vec::with_capacity(if sum { a.nnz() / 2 } else { 0 });
        // position[J]: where coarse column J sits in the current row; UNSET
        // between rows.
        const UNSET: u32 = u32::MAX;
        let mut position = vec![UNSET; n_coarse];
        for c in 0..n_coarse {
            let start = cols.len();
            let rows = members.of(c);
            // Each entry's coarse column, kept in its slot until the row's
            // columns are sorted and the column becomes a position.
            for &i in rows {
                let entries = a_ptr[i as usize]..a_ptr[i as usize + 1];
                for (s, &j) in slot[entries.clone()].iter_mut().zip(&a_cols[entries]) {
                    let target = aggregate[j as usize];
                    *s = target;
                    if position[target as usize] == UNSET {
                        position[target as usize] = 0;
                        cols.push(target);
                    }
                }
            }
            let row = &mut cols[start..];
            row.sort_unstable();
            for (k, &target) in row.iter().enumerate() {
                position[target as usize] = (start + k) as u32;
            }
            if sum {
                // -0.0 + v is v for every v (0.0 + -0.0 would be +0.0): the
                // first addend of an entry is taken as it is, as in `galerkin`.
                values.resize(cols.len(), -0.0);
            }
            for &i in rows {
                let entries = a_ptr[i as usize]..a_ptr[i as usize + 1];
                for (s, e) in slot[entries.clone()].iter_mut().zip(entries) {
                    *s = position[*s as usize];
                    if sum {
                        values[*s as usize] += a_values[e];
                    }
                }
            }
            for &target in &cols[start..] {
                position[target as usize] = UNSET;
            }
            row_ptr.push(cols.len());
        }
        let nnz = cols.len();
        let pattern = Csr::new(n_coarse, row_ptr, cols, vec![0.0; nnz])
            .expect("coarse rows are sorted and in range");
        let addressing = Self {
            pattern,
            members,
            slot,
        };
        (addressing, values)
    }

    /// The coarse pattern (values 0).
    pub fn pattern(&self) -> &Csr {
        &self.pattern
    }

    /// [`Self::product`] written straight into `split`, the split layout
    /// of the coarse pattern: the same sums in the same order (the bits of
    /// the product's entries), with no coarse CSR values and no copy into
    /// split rows. `finer_row_ptr` is the row pointers of the finer pattern
    /// (the one this addressing was made for) and `finer_value(e)` the
    /// finer matrix's value of its entry e.
    pub fn split_product(
        &self,
        finer_row_ptr: &[usize],
        finer_value: impl Fn(usize) -> f64 + Sync,
        split: &SplitPattern,
    ) -> SplitValues {
        assert_eq!(
            finer_row_ptr.last().copied(),
            Some(self.slot.len()),
            "galerkin: fine pattern"
        );
        let n_coarse = self.members.n_coarse();
        assert_eq!(split.n(), n_coarse, "galerkin: split layout size");
        let mut values = split.negative_zeros();
        // Tasks of ROWS_PER_TASK coarse rows, each with its slices of the
        // diagonal and of both triangles' values.
        let mut tasks = Vec::with_capacity(n_coarse / ROWS_PER_TASK + 1);
        let (mut diag, mut lower, mut upper) = (
            values.diag.as_mut_slice(),
            values.lower.as_mut_slice(),
            values.upper.as_mut_slice(),
        );
        let n_lower = lower.len();
        for first in (0..n_coarse).step_by(ROWS_PER_TASK) {
            let end = (first + ROWS_PER_TASK).min(n_coarse);
            let (below, above) = split.value_ranges(first..end);
            let (d, d_rest) = diag.split_at_mut(end - first);
            let (l, l_rest) = lower.split_at_mut(below.len());
            let (u, u_rest) = upper.split_at_mut(above.len());
            tasks.push((first..end, (below.start, above.start), (d, l, u)));
            (diag, lower, upper) = (d_rest, l_rest, u_rest);
        }
        tasks
            .par_iter_mut()
            .for_each(|(rows, (lower_first, upper_first), (d, l, u))| {
                let fine_rows = self.members.ptr[rows.start]..self.members.ptr[rows.end];
                for &i in &self.members.rows[fine_rows] {
                    let entries = finer_row_ptr[i as usize]..finer_row_ptr[i as usize + 1];
                    for (e, &s) in entries.clone().zip(&self.slot[entries]) {
                        let v = finer_value(e);
                        match split.position(s as usize) {
                            p if p < n_coarse => d[p - rows.start] += v,
                            p if p < n_coarse + n_lower => l[p - n_coarse - *lower_first] += v,
                            p => u[p - n_coarse - n_lower - *upper_first] += v,
                        }
                    }
                }
            });
        values
    }

    /// Pᵀ A P for `a` of the pattern this addressing was made for, the
    /// coarse pattern shared: [`galerkin`]'s result, bit for bit.
    pub fn product(&self, a: &Csr) -> Csr {
        assert_eq!(a.nnz(), self.slot.len(), "galerkin: fine pattern");
        // -0.0 + v is v for every v (0.0 + -0.0 would be +0.0): the first
        // addend of an entry is taken as it is, as in `galerkin`.
        let mut coarse = self.pattern.filled_like(-0.0);
        let (a_ptr, a_values) = (a.row_ptr(), a.values());
        let row_ptr = self.pattern.row_ptr();
        // Tasks of ROWS_PER_TASK coarse rows, each with its slice of values.
        let n_coarse = self.members.n_coarse();
        let mut tasks: Vec<(usize, &mut [f64])> = Vec::with_capacity(n_coarse / ROWS_PER_TASK + 1);
        let mut rest = coarse.values_mut();
        for first in (0..n_coarse).step_by(ROWS_PER_TASK) {
            let end = (first + ROWS_PER_TASK).min(n_coarse);
            let (chunk, tail) = rest.split_at_mut(row_ptr[end] - row_ptr[first]);
            tasks.push((first, chunk));
            rest = tail;
        }
        tasks.par_iter_mut().for_each(|(first, values)| {
            let end = (*first + ROWS_PER_TASK).min(n_coarse);
            let offset = row_ptr[*first];
            for &i in &self.members.rows[self.members.ptr[*first]..self.members.ptr[end]] {
                let entries = a_ptr[i as usize]..a_ptr[i as usize + 1];
                for (&s, &v) in self.slot[entries.clone()].iter().zip(&a_values[entries]) {
                    values[s as usize - offset] += v;
                }
            }
        });
        coarse
    }
}
