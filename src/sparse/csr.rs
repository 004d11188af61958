//! Compressed sparse row matrix: the CPU reference format.

use rayon::prelude::*;
use std::sync::Arc;

/// Square or rectangular CSR matrix with sorted column indices in each row.
///
/// The pattern (row pointers and columns) never changes after construction
/// and is shared, not copied, by clones and by [`Csr::zeros_like`]: the
/// systems of one mesh (a flow case's momentum components and pressure)
/// hold one pattern and values of their own.
#[derive(Clone, Debug)]
pub struct Csr {
    n_cols: usize,
    row_ptr: Arc<Vec<usize>>,
    cols: Arc<Vec<u32>>,
    values: Vec<f64>,
    /// Which values the matrix holds ([`Csr::values_stamp`]).
    values_stamp: u64,
}

/// Equal shape, pattern and values (the stamps are not compared).
impl PartialEq for Csr {
    fn eq(&self, other: &Self) -> bool {
        self.n_cols == other.n_cols
            && self.row_ptr == other.row_ptr
            && self.cols == other.cols
            && self.values == other.values
    }
}

/// A stamp no matrix has held before.
fn fresh_stamp() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The pattern arrays of a [`Csr`], held to recognise its later values
/// ([`Csr::pattern`]).
#[derive(Clone, Debug)]
pub struct Pattern {
    row_ptr: Arc<Vec<usize>>,
    cols: Arc<Vec<u32>>,
}

impl Csr {
    /// Builds a matrix from its arrays, checking sizes, column range and that
    /// columns are strictly increasing within each row.
    pub fn new(
        n_cols: usize,
        row_ptr: Vec<usize>,
        cols: Vec<u32>,
        values: Vec<f64>,
    ) -> Result<Self, String> {
        if row_ptr.first() != Some(&0) || row_ptr.par_windows(2).any(|w| w[1] < w[0]) {
            return Err("row pointers must start at 0 and not decrease".into());
        }
        let nnz = *row_ptr.last().unwrap();
        if cols.len() != nnz || values.len() != nnz {
            return Err(format!(
                "row pointers end at {nnz} but there are {} columns and {} values",
                cols.len(),
                values.len()
            ));
        }
        // The rows are checked in parallel; the first bad one is reported.
        let row_error = |r: usize| {
            let row = &cols[row_ptr[r]..row_ptr[r + 1]];
            if row.windows(2).any(|w| w[1] <= w[0]) {
                return Some(format!("row {r}: column indices must increase strictly"));
            }
            row.last()
                .filter(|&&c| c as usize >= n_cols)
                .map(|&c| format!("row {r}: column {c} out of range (n_cols = {n_cols})"))
        };
        if let Some(error) = (0..row_ptr.len() - 1)
            .into_par_iter()
            .with_min_len(4096)
            .find_map_first(row_error)
        {
            return Err(error);
        }
        Ok(Self {
            n_cols,
            row_ptr: Arc::new(row_ptr),
            cols: Arc::new(cols),
            values,
            values_stamp: fresh_stamp(),
        })
    }

    /// Builds a matrix from its rows, each its (column, value) entries in
    /// ascending column order ([`Self::new`]'s checks).
    pub fn from_rows<R: AsRef<[(u32, f64)]>>(
        n_cols: usize,
        rows: impl IntoIterator<Item = R>,
    ) -> Result<Self, String> {
        // The rows first, so that the arrays are allocated once at their size.
        let rows: Vec<R> = rows.into_iter().collect();
        let nnz = rows.iter().map(|r| r.as_ref().len()).sum();
        let mut row_ptr = Vec::with_capacity(rows.len() + 1);
        row_ptr.push(0);
        let (mut cols, mut values) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
        for row in &rows {
            let row = row.as_ref();
            cols.extend(row.iter().map(|e| e.0));
            values.extend(row.iter().map(|e| e.1));
            row_ptr.push(cols.len());
        }
        Self::new(n_cols, row_ptr, cols, values)
    }

    /// The 0 × 0 matrix (a stand-in where a pattern is not built yet).
    pub fn empty() -> Self {
        Self {
            n_cols: 0,
            row_ptr: Arc::new(vec![0]),
            cols: Arc::new(Vec::new()),
            values: Vec::new(),
            values_stamp: fresh_stamp(),
        }
    }

    /// A matrix of this one's pattern (shared, not copied) with every value 0.
    pub fn zeros_like(&self) -> Self {
        self.with_values(vec![0.0; self.nnz()])
    }

    /// A matrix of this one's pattern (shared, not copied) with every value
    /// `value`, written at once. A fresh array of zeros (`zeros_like`) is
    /// mapped lazily, so a first `+=` on each of its pages traps twice (the
    /// read maps the zero page, the write copies it); written first, it
    /// traps once.
    pub fn filled_like(&self, value: f64) -> Self {
        let mut values = Vec::with_capacity(self.nnz());
        values.resize(self.nnz(), value);
        self.with_values(values)
    }

    /// A matrix of this one's pattern (shared, not copied) with `values`.
    pub fn with_values(&self, values: Vec<f64>) -> Self {
        assert_eq!(
            values.len(),
            self.nnz(),
            "Csr::with_values: one value per entry"
        );
        Self {
            n_cols: self.n_cols,
            row_ptr: Arc::clone(&self.row_ptr),
            cols: Arc::clone(&self.cols),
            values,
            values_stamp: fresh_stamp(),
        }
    }

    /// Whether `other` holds the same pattern arrays (not merely equal ones).
    pub fn shares_pattern_with(&self, other: &Csr) -> bool {
        Arc::ptr_eq(&self.row_ptr, &other.row_ptr) && Arc::ptr_eq(&self.cols, &other.cols)
    }

    /// A handle on this matrix's pattern arrays (shared, not copied), to
    /// recognise later matrices of the same pattern ([`Csr::has_pattern`])
    /// without keeping their values.
    pub fn pattern(&self) -> Pattern {
        Pattern {
            row_ptr: Arc::clone(&self.row_ptr),
            cols: Arc::clone(&self.cols),
        }
    }

    /// Which values the matrix holds: equal stamps mean equal values (a
    /// matrix and its clones, until one of them is lent mutably); each new
    /// matrix and each [`Csr::values_mut`] draws a stamp no matrix held
    /// before. What keeps a matrix's copy on a device compares stamps to
    /// know whether to copy the values again.
    pub fn values_stamp(&self) -> u64 {
        self.values_stamp
    }

    /// Whether this matrix holds the pattern arrays of `pattern`.
    pub fn has_pattern(&self, pattern: &Pattern) -> bool {
        Arc::ptr_eq(&self.row_ptr, &pattern.row_ptr) && Arc::ptr_eq(&self.cols, &pattern.cols)
    }

    #[inline]
    pub fn n_rows(&self) -> usize {
        self.row_ptr.len() - 1
    }
    #[inline]
    pub fn n_cols(&self) -> usize {
        self.n_cols
    }
    #[inline]
    pub fn nnz(&self) -> usize {
        self.cols.len()
    }
    #[inline]
    pub fn row_ptr(&self) -> &[usize] {
        &self.row_ptr
    }
    #[inline]
    pub fn cols(&self) -> &[u32] {
        &self.cols
    }
    #[inline]
    pub fn values(&self) -> &[f64] {
        &self.values
    }
    /// Values can change; the pattern cannot (re-assembly keeps the pattern).
    #[inline]
    pub fn values_mut(&mut self) -> &mut [f64] {
        self.values_stamp = fresh_stamp();
        &mut self.values
    }

    /// The row pointers with the values lent mutably (a fill of each row's
    /// values in parallel); draws a new values stamp as
    /// [`Self::values_mut`] does.
    pub fn row_ptr_and_values_mut(&mut self) -> (&[usize], &mut [f64]) {
        self.values_stamp = fresh_stamp();
        (&self.row_ptr, &mut self.values)
    }

    /// Takes the values out for a time, leaving the pattern: a solver that
    /// holds them in a layout of its own gives the memory of this copy back
    /// while it runs (`solve::solve_pcg_in_place`). Until
    /// [`Self::restore_values`], `values` is empty and nothing may read it.
    pub fn take_values(&mut self) -> Vec<f64> {
        std::mem::take(&mut self.values)
    }

    /// Puts back the values [`Self::take_values`] took (one per entry).
    pub fn restore_values(&mut self, values: Vec<f64>) {
        assert_eq!(
            values.len(),
            self.nnz(),
            "Csr::restore_values: one value per entry"
        );
        self.values = values;
        self.values_stamp = fresh_stamp();
    }

    /// Columns and values of row `r`.
    #[inline]
    pub fn row(&self, r: usize) -> (&[u32], &[f64]) {
        let s = self.row_ptr[r]..self.row_ptr[r + 1];
        (&self.cols[s.clone()], &self.values[s])
    }

    /// Slot of entry (r, c) in the value array, if it is in the pattern.
    #[inline]
    pub fn slot(&self, r: usize, c: usize) -> Option<usize> {
        let (cols, _) = self.row(r);
        cols.binary_search(&(c as u32))
            .ok()
            .map(|i| self.row_ptr[r] + i)
    }

    /// y = A x, rows in parallel.
    pub fn spmv(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.n_cols, "spmv: x has the wrong length");
        assert_eq!(y.len(), self.n_rows(), "spmv: y has the wrong length");
        y.par_iter_mut().enumerate().for_each(|(r, yr)| {
            let (cols, vals) = self.row(r);
            *yr = cols
                .iter()
                .zip(vals)
                .map(|(&c, &v)| v * x[c as usize])
                .sum();
        });
    }
}

impl Csr {
    /// Aᵀ, columns sorted in each row (entries of a column in row order).
    pub fn transpose(&self) -> Csr {
        let mut count = vec![0usize; self.n_cols + 1];
        for &c in self.cols.iter() {
            count[c as usize + 1] += 1;
        }
        for c in 0..self.n_cols {
            count[c + 1] += count[c];
        }
        let row_ptr = count.clone();
        let mut next = count;
        let mut cols = vec![0u32; self.nnz()];
        let mut values = vec![0.0; self.nnz()];
        for r in 0..self.n_rows() {
            let (rc, rv) = self.row(r);
            for (&c, &v) in rc.iter().zip(rv) {
                let at = next[c as usize];
                cols[at] = r as u32;
                values[at] = v;
                next[c as usize] += 1;
            }
        }
        Csr::new(self.n_rows(), row_ptr, cols, values).expect("a transpose has sorted rows")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clones share the stamp of their values; lending the values mutably,
    /// or a new matrix of the same pattern, draws a new one; equality does
    /// not look at stamps.
    #[test]
    fn values_stamps_follow_the_values() {
        let a = Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, 2.0]).unwrap();
        let mut b = a.clone();
        assert_eq!(a.values_stamp(), b.values_stamp());
        b.values_mut()[0] = 1.0;
        assert_ne!(a.values_stamp(), b.values_stamp());
        assert_eq!(a, b, "the same values under other stamps");
        let c = a.with_values(vec![1.0, 2.0]);
        assert!(c.has_pattern(&a.pattern()) && c.values_stamp() != a.values_stamp());
        assert!(!Csr::new(2, vec![0, 1, 2], vec![0, 1], vec![1.0, 2.0])
            .unwrap()
            .has_pattern(&a.pattern()));
    }

    #[test]
    fn spmv_and_slots() {
        // [2 -1 0; -1 2 -1; 0 -1 2]
        let a = Csr::new(
            3,
            vec![0, 2, 5, 7],
            vec![0, 1, 0, 1, 2, 1, 2],
            vec![2., -1., -1., 2., -1., -1., 2.],
        )
        .unwrap();
        let mut y = vec![0.0; 3];
        a.spmv(&[1.0, 2.0, 3.0], &mut y);
        assert_eq!(y, vec![0.0, 0.0, 4.0]);
        assert_eq!(a.slot(1, 2), Some(4));
        assert_eq!(a.slot(0, 2), None);
        assert!(Csr::new(3, vec![0, 2], vec![1, 0], vec![1., 1.]).is_err());
        assert!(Csr::new(1, vec![0, 1], vec![3], vec![1.]).is_err());
    }

    #[test]
    fn zeros_like_and_clones_share_the_pattern() {
        let a = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![4., -1., 3.]).unwrap();
        let mut z = a.zeros_like();
        assert!(z.shares_pattern_with(&a) && a.clone().shares_pattern_with(&a));
        assert_eq!(
            (z.row_ptr(), z.cols(), z.values()),
            (a.row_ptr(), a.cols(), &[0.0; 3][..])
        );
        z.values_mut()[1] = 7.0;
        assert_eq!(a.values(), &[4., -1., 3.]);
        let equal = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![0.; 3]).unwrap();
        assert!(!equal.shares_pattern_with(&a));
        let filled = a.filled_like(-0.0);
        assert!(filled.shares_pattern_with(&a));
        assert!(filled
            .values()
            .iter()
            .all(|v| v.to_bits() == (-0.0f64).to_bits()));
        assert_eq!(a.with_values(vec![1., 2., 3.]).values(), &[1., 2., 3.]);
    }
}
