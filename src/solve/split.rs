//! A square matrix stored the way the CPU kernels read it: the diagonal in
//! its own array and, per row, the off-diagonal entries, strictly lower ones
//! (columns ascending) followed by strictly upper ones (columns ascending).
//!
//! This is the row-wise view of OpenFOAM's `lduMatrix` (diagonal, lower and
//! upper coefficients over owner/neighbour addressing, faces in
//! upper-triangular order): row r's lower entries are the faces where r is
//! the neighbour, in face order, and its upper entries the faces where r is
//! the owner, in face order. So a row product taken as "diagonal first, then
//! the off-diagonals in stored order" adds the same terms in the same order
//! as OpenFOAM's `Amul` face loop, and a forward (backward) sweep over the
//! lower (upper) entries does the operations of its forward (backward) face
//! loop in the same order, while reading each row's entries contiguously,
//! with no search for the diagonal and no diagonal entry in the middle of
//! the row, and leaving the row's accumulator in a register.

use rayon::prelude::*;

use super::reduce::{ordered_sum, CHUNK};
use crate::sparse::Csr;

/// The diagonal and the off-diagonal rows of a square matrix (see the module docs).
#[derive(Clone, Debug)]
pub struct SplitMatrix {
    diag: Vec<f64>,
    /// Row r's off-diagonal entries are `start[r]..start[r + 1]`.
    start: Vec<usize>,
    /// Row r's upper entries begin at `upper_start[r]`.
    upper_start: Vec<usize>,
    cols: Vec<u32>,
    values: Vec<f64>,
}

impl SplitMatrix {
    /// Splits a square CSR matrix with columns ascending in each row; a
    /// missing diagonal entry is stored as 0.
    pub fn new(a: &Csr) -> Self {
        let n = a.n_rows();
        assert_eq!(n, a.n_cols(), "SplitMatrix: matrix not square");
        let mut diag = vec![0.0; n];
        let mut start = Vec::with_capacity(n + 1);
        let mut upper_start = Vec::with_capacity(n);
        let mut cols = Vec::with_capacity(a.nnz());
        let mut values = Vec::with_capacity(a.nnz());
        start.push(0);
        for (r, d) in diag.iter_mut().enumerate() {
            let (row_cols, row_values) = a.row(r);
            let mut upper = None;
            for (&c, &v) in row_cols.iter().zip(row_values) {
                let c_index = c as usize;
                if c_index == r {
                    *d = v;
                    continue;
                }
                if c_index > r && upper.is_none() {
                    upper = Some(cols.len());
                }
                cols.push(c);
                values.push(v);
            }
            upper_start.push(upper.unwrap_or(cols.len()));
            start.push(cols.len());
        }
        Self {
            diag,
            start,
            upper_start,
            cols,
            values,
        }
    }

    /// The same pattern with other off-diagonal values (in stored order) and
    /// another diagonal.
    pub fn with_values(&self, diag: Vec<f64>, values: Vec<f64>) -> Self {
        assert_eq!(diag.len(), self.diag.len(), "SplitMatrix: diagonal size");
        assert_eq!(values.len(), self.values.len(), "SplitMatrix: values size");
        Self {
            diag,
            values,
            ..self.clone()
        }
    }

    pub fn n(&self) -> usize {
        self.diag.len()
    }
    pub fn diag(&self) -> &[f64] {
        &self.diag
    }
    /// The off-diagonal values in stored order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }
    pub fn cols(&self) -> &[u32] {
        &self.cols
    }
    /// Slots of row r's off-diagonal entries, lower then upper.
    #[inline]
    pub fn row(&self, r: usize) -> std::ops::Range<usize> {
        self.start[r]..self.start[r + 1]
    }
    /// Slots of row r's strictly lower entries, columns ascending.
    #[inline]
    pub fn lower(&self, r: usize) -> std::ops::Range<usize> {
        self.start[r]..self.upper_start[r]
    }
    /// Slots of row r's strictly upper entries, columns ascending.
    #[inline]
    pub fn upper(&self, r: usize) -> std::ops::Range<usize> {
        self.upper_start[r]..self.start[r + 1]
    }

    /// Σ_c a_rc x_c in OpenFOAM's order: the diagonal, then the off-diagonals.
    #[inline]
    pub fn row_times(&self, r: usize, x: &[f64]) -> f64 {
        let range = self.row(r);
        let (cols, values) = (&self.cols[range.clone()], &self.values[range]);
        let mut sum = self.diag[r] * x[r];
        for (&c, &v) in cols.iter().zip(values) {
            sum += v * x[c as usize];
        }
        sum
    }

    /// Σ_{c≠r} a_rc x_c, the off-diagonals in stored order.
    #[inline]
    pub fn off_diagonal_times(&self, r: usize, x: &[f64]) -> f64 {
        let range = self.row(r);
        let (cols, values) = (&self.cols[range.clone()], &self.values[range]);
        let mut sum = 0.0;
        for (&c, &v) in cols.iter().zip(values) {
            sum += v * x[c as usize];
        }
        sum
    }

    /// y = A x, rows in parallel.
    pub fn apply(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.n(), "SplitMatrix::apply: x size");
        assert_eq!(y.len(), self.n(), "SplitMatrix::apply: y size");
        y.par_chunks_mut(CHUNK).enumerate().for_each(|(c, y)| {
            for (k, y) in y.iter_mut().enumerate() {
                *y = self.row_times(c * CHUNK + k, x);
            }
        });
    }

    /// r = b − A x, rows in parallel; returns Σ |r_i| (fixed chunk order).
    pub fn residual(&self, b: &[f64], x: &[f64], r: &mut [f64]) -> f64 {
        assert_eq!(b.len(), self.n(), "SplitMatrix::residual: b size");
        ordered_sum(r.par_chunks_mut(CHUNK).enumerate().map(|(c, r)| {
            let mut sum = 0.0;
            for (k, r) in r.iter_mut().enumerate() {
                let i = c * CHUNK + k;
                *r = b[i] - self.row_times(i, x);
                sum += r.abs();
            }
            sum
        }))
    }

    /// Gauss–Seidel sweeps in natural row order on A x = b: x_i = (b_i −
    /// Σ_{j≠i} a_ij x_j) / a_ii, the off-diagonals by column; `forward`
    /// visits rows ascending, else descending.
    pub fn gauss_seidel(&self, b: &[f64], x: &mut [f64], forward: bool) {
        let n = self.n();
        let mut visit = |i: usize| {
            let range = self.row(i);
            let (cols, values) = (&self.cols[range.clone()], &self.values[range]);
            let mut acc = b[i];
            for (&c, &v) in cols.iter().zip(values) {
                acc -= v * x[c as usize];
            }
            x[i] = acc / self.diag[i];
        };
        if forward {
            (0..n).for_each(&mut visit);
        } else {
            (0..n).rev().for_each(&mut visit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Csr {
        // [4 -1 0 -2; -1 5 -1 0; 0 -1 6 -3; -2 0 -3 7]
        Csr::new(
            4,
            vec![0, 3, 6, 9, 12],
            vec![0, 1, 3, 0, 1, 2, 1, 2, 3, 0, 2, 3],
            vec![4., -1., -2., -1., 5., -1., -1., 6., -3., -2., -3., 7.],
        )
        .unwrap()
    }

    #[test]
    fn split_rows_keep_lower_then_upper_and_the_products_of_the_csr() {
        let a = sample();
        let s = SplitMatrix::new(&a);
        assert_eq!(s.diag(), &[4., 5., 6., 7.]);
        assert_eq!(s.lower(3).map(|k| s.cols()[k]).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(s.upper(0).map(|k| s.cols()[k]).collect::<Vec<_>>(), [1, 3]);
        assert!(s.upper(3).is_empty() && s.lower(0).is_empty());
        let x = [1.0, -2.0, 0.5, 3.0];
        let (mut y, mut z) = (vec![0.0; 4], vec![0.0; 4]);
        s.apply(&x, &mut y);
        a.spmv(&x, &mut z);
        assert_eq!(y, z);
        let b = [1.0; 4];
        let mut r = vec![0.0; 4];
        let sum = s.residual(&b, &x, &mut r);
        assert_eq!(sum, r.iter().map(|v: &f64| v.abs()).sum::<f64>());
        assert_eq!(r[0], 1.0 - z[0]);
    }

    #[test]
    fn gauss_seidel_sweeps_solve_a_diagonally_dominant_system() {
        let s = SplitMatrix::new(&sample());
        let b = [1.0, 2.0, 3.0, 4.0];
        let mut x = vec![0.0; 4];
        for k in 0..200 {
            s.gauss_seidel(&b, &mut x, k % 2 == 0);
        }
        let mut r = vec![0.0; 4];
        assert!(s.residual(&b, &x, &mut r) < 1e-12);
    }
}
