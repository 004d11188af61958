//! A square matrix stored the way the CPU kernels read it: the diagonal in
//! its own array, the strictly lower entries by rows (columns ascending) in
//! one [`TriangleRows`] and the strictly upper entries likewise in another.
//!
//! This is the row-wise view of OpenFOAM's `lduMatrix` (diagonal, lower and
//! upper coefficients over owner/neighbour addressing, faces in
//! upper-triangular order): row r's lower entries are the faces where r is
//! the neighbour, in face order, and its upper entries the faces where r is
//! the owner, in face order. So a row product taken as "diagonal first, then
//! the lower entries, then the upper ones" adds the same terms in the same
//! order as OpenFOAM's `Amul` face loop, and a forward (backward) sweep over
//! the lower (upper) entries does the operations of its forward (backward)
//! face loop in the same order, while reading each row's entries
//! contiguously, with no search for the diagonal, and leaving the row's
//! accumulator in a register. A triangular sweep streams only its own
//! triangle.
//!
//! On one thread, a matrix whose upper triangle mirrors its lower one bit
//! for bit (every assembled Laplacian) is multiplied over the upper
//! triangle alone, as OpenFOAM's face loop does: row i adds a_ij x_j to its
//! own sum and a_ij x_i to row j's, which is ahead and still in cache. Row j
//! then receives its lower terms in ascending i, the order of the row-wise
//! product, so the result has the same bits while reading half the
//! off-diagonal entries. On more threads the rows are split between them
//! and each row gathers its own terms.
//!
//! The streaming kernels are bound by the bytes they read (one core's
//! memory bandwidth), so they read as few as the order allows: the row
//! starts in 4 bytes where they fit, and PCG's direction update fused into
//! the one-thread product ([`SplitMatrix::direction_apply_dot`]).

use std::sync::Arc;

use rayon::prelude::*;

use super::reduce::{sum_pairs, CHUNK};
use crate::sparse::Csr;

/// The diagonal and the two triangles of a square matrix (see the module docs).
#[derive(Clone, Debug)]
pub struct SplitMatrix {
    diag: Vec<f64>,
    lower: TriangleRows,
    upper: TriangleRows,
    /// a_ij and a_ji are the same bits for every entry, and the pattern is
    /// symmetric: one-thread products may run over the upper triangle alone.
    symmetric: bool,
    /// max |i − j| over the stored off-diagonal entries.
    bandwidth: usize,
}

impl SplitMatrix {
    /// Splits a square CSR matrix with columns ascending in each row; a
    /// missing diagonal entry is stored as 0. One pass over the rows
    /// ([`split_rows`]), then one over the triangles to see whether they
    /// mirror each other bit for bit.
    pub fn new(a: &Csr) -> Self {
        let (diag, lower, upper, bandwidth) = split_rows(a);
        let symmetric = mirrors(&lower, &upper);
        Self {
            diag,
            lower,
            upper,
            symmetric,
            bandwidth,
        }
    }

    pub fn n(&self) -> usize {
        self.diag.len()
    }
    pub fn diag(&self) -> &[f64] {
        &self.diag
    }
    /// The strictly lower entries, rows contiguous (a forward sweep's).
    pub fn lower_rows(&self) -> &TriangleRows {
        &self.lower
    }
    /// The strictly upper entries, rows contiguous (a backward sweep's).
    pub fn upper_rows(&self) -> &TriangleRows {
        &self.upper
    }
    /// Whether a_ij and a_ji are the same bits for every stored entry.
    pub fn is_symmetric(&self) -> bool {
        self.symmetric
    }

    /// This matrix in CSR: each row's lower entries, its diagonal, then its
    /// upper entries (columns ascending).
    pub fn to_csr(&self) -> Csr {
        let n = self.n();
        let nnz = n + self.lower.values.len() + self.upper.values.len();
        let mut row_ptr = Vec::with_capacity(n + 1);
        row_ptr.push(0);
        let (mut cols, mut values) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
        for r in 0..n {
            for (c, v) in self.lower.entries(r) {
                cols.push(c as u32);
                values.push(v);
            }
            cols.push(r as u32);
            values.push(self.diag[r]);
            for (c, v) in self.upper.entries(r) {
                cols.push(c as u32);
                values.push(v);
            }
            row_ptr.push(cols.len());
        }
        Csr::new(n, row_ptr, cols, values).expect("split rows are sorted and in range")
    }

    /// The values of the CSR matrix this was split from, in its order:
    /// each row's lower entries, its diagonal where `pattern` stores one,
    /// then its upper entries (the bits split from it). `pattern` is read
    /// for its row starts alone (its values may be lent out:
    /// [`Csr::take_values`]).
    pub fn csr_values(&self, pattern: &Csr) -> Vec<f64> {
        let (n, row_ptr) = (self.n(), pattern.row_ptr());
        assert_eq!(row_ptr.len(), n + 1, "SplitMatrix::csr_values: rows");
        let mut values = vec![0.0; pattern.nnz()];
        // Blocks of rows in parallel, each writing its own part.
        let mut parts = Vec::with_capacity(n.div_ceil(CHUNK));
        let mut rest = values.as_mut_slice();
        for first in (0..n).step_by(CHUNK) {
            let end = (first + CHUNK).min(n);
            let (part, tail) = rest.split_at_mut(row_ptr[end] - row_ptr[first]);
            parts.push((first..end, part));
            rest = tail;
        }
        parts.into_par_iter().for_each(|(rows, part)| {
            let mut k = 0;
            for r in rows {
                let (lower, upper) = self.row(r);
                let off_diagonal = lower.values.len() + upper.values.len();
                let stored = row_ptr[r + 1] - row_ptr[r];
                assert!(
                    stored == off_diagonal || stored == off_diagonal + 1,
                    "SplitMatrix::csr_values: not the pattern it was split from (row {r})"
                );
                part[k..k + lower.values.len()].copy_from_slice(lower.values);
                k += lower.values.len();
                if stored > off_diagonal {
                    part[k] = self.diag[r];
                    k += 1;
                }
                part[k..k + upper.values.len()].copy_from_slice(upper.values);
                k += upper.values.len();
            }
        });
        values
    }

    /// Row r's lower and upper columns and values. The row loops index
    /// with it from a slice's `enumerate` rather than zipping row
    /// iterators: a zip of the triangles' rows with the output slice
    /// compiled to a call of `Zip::next` per row, a third of the parallel
    /// product's time on 125 k rows.
    #[inline(always)]
    fn row(&self, r: usize) -> (Row<'_>, Row<'_>) {
        (self.lower.row_entries(r), self.upper.row_entries(r))
    }
    /// Σ_c a_rc x_c in OpenFOAM's order: the diagonal, then the lower
    /// entries, then the upper ones.
    #[inline]
    pub fn row_times(&self, r: usize, x: &[f64]) -> f64 {
        assert_eq!(x.len(), self.n(), "SplitMatrix::row_times: x size");
        let (lower, upper) = (self.lower.row_entries(r), self.upper.row_entries(r));
        upper.add_to(lower.add_to(self.diag[r] * x[r], x), x)
    }

    /// rowSum(A) in OpenFOAM's `sumA` order: the diagonal, then the lower
    /// entries, then the upper ones (the bits of
    /// [`openfoam_row_sums`](super::row_sums::openfoam_row_sums) of the CSR).
    pub fn row_sums(&self) -> Vec<f64> {
        let mut sums = vec![0.0; self.n()];
        sums.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, sums)| {
                for (k, s) in sums.iter_mut().enumerate() {
                    let r = c * CHUNK + k;
                    let (lower, upper) = self.row(r);
                    *s = row_sum(self.diag[r], lower, upper);
                }
            });
        sums
    }

    /// Row r's entry of [`Self::row_sums`] (the same bits), for a reader
    /// that needs each sum once and keeps none.
    #[inline]
    pub fn row_sum(&self, r: usize) -> f64 {
        row_sum(
            self.diag[r],
            self.lower.row_entries(r),
            self.upper.row_entries(r),
        )
    }

    /// Σ_{c≠r} a_rc x_c, the lower entries, then the upper ones.
    #[inline]
    pub fn off_diagonal_times(&self, r: usize, x: &[f64]) -> f64 {
        assert_eq!(x.len(), self.n(), "SplitMatrix::off_diagonal_times: x size");
        let (lower, upper) = (self.lower.row_entries(r), self.upper.row_entries(r));
        upper.add_to(lower.add_to(0.0, x), x)
    }

    /// Whether the products run over the upper triangle alone (one thread,
    /// bitwise symmetric: see the module docs).
    fn by_upper_triangle(&self) -> bool {
        self.symmetric && rayon::current_num_threads() == 1
    }

    /// The one-thread product over the upper triangle: `y` receives
    /// (A x)_i, and `finish(i, x_i, (A x)_i, &mut y_i, &mut partial)` is
    /// called for the rows in ascending order once each is complete, with
    /// the partial sum of the row's `CHUNK` (reduction chunk), which starts
    /// at `S::default()` and is returned in chunk order. Row j's entry of `y`
    /// holds d_j x_j plus the lower terms received so far from the time the
    /// sweep reaches the first row that couples to it. The partial sums
    /// stay in registers and the arrays are read without bounds checks: the
    /// loop is one chain of dependent row sums, and a sum kept in memory and
    /// a check per access made it a quarter longer (8.8 against 7.1 ms per
    /// product of 1 M rows).
    #[inline(always)]
    fn upper_product<S: Copy + Default>(
        &self,
        x: &[f64],
        y: &mut [f64],
        finish: impl FnMut(usize, f64, f64, &mut f64, &mut S),
    ) -> Vec<S> {
        assert_eq!(x.len(), self.n(), "SplitMatrix: x size");
        // SAFETY: x has length n, and with STORE = false the kernel only
        // reads through the pointer.
        unsafe { self.upper_product_raw::<S, false>(x.as_ptr().cast_mut(), y, |_, x| x, finish) }
    }

    /// [`Self::upper_product`] of the vector x' with x'_j = `load(j, x_j)`,
    /// each entry loaded once, rows ascending, before any row reads it;
    /// with `STORE` the loaded value is written back to x_j (x ← x' in the
    /// same pass: PCG's p = z + β p fused with A p).
    ///
    /// # Safety
    /// `x` points to n entries, not aliased by `y`; with `STORE = false`
    /// nothing is written through it (a shared slice may be passed).
    #[inline(always)]
    unsafe fn upper_product_raw<S: Copy + Default, const STORE: bool>(
        &self,
        x: *mut f64,
        y: &mut [f64],
        load: impl FnMut(usize, f64) -> f64,
        finish: impl FnMut(usize, f64, f64, &mut f64, &mut S),
    ) -> Vec<S> {
        // SAFETY: passed on (the caller's).
        unsafe {
            match self.upper.start32() {
                Some(start) => self.upper_product_by::<S, STORE, _>(start, x, y, load, finish),
                None => {
                    self.upper_product_by::<S, STORE, _>(&self.upper.start[..], x, y, load, finish)
                }
            }
        }
    }

    /// [`Self::upper_product_raw`] with the upper triangle's row starts
    /// `start` (in either width).
    ///
    /// # Safety
    /// As [`Self::upper_product_raw`]'s.
    #[inline(always)]
    unsafe fn upper_product_by<S: Copy + Default, const STORE: bool, T: RowStart>(
        &self,
        start: &[T],
        x: *mut f64,
        y: &mut [f64],
        mut load: impl FnMut(usize, f64) -> f64,
        mut finish: impl FnMut(usize, f64, f64, &mut f64, &mut S),
    ) -> Vec<S> {
        let n = self.n();
        assert_eq!(y.len(), n, "SplitMatrix: y size");
        let (diag, cols, values) = (&self.diag, &self.upper.cols, &self.upper.values);
        assert_eq!(start.len(), n + 1, "SplitMatrix: upper rows");
        let mut partials = Vec::with_capacity(n.div_ceil(CHUNK));
        // Rows below `ready` hold d_j x'_j plus what they have received, and
        // x'_j is loaded.
        let mut ready = 0;
        let mut i = 0;
        // SAFETY: i < n and ready ≤ reach < n index x, y, diag (length n)
        // and start (n + 1); k < start[n] = cols.len() = values.len(); every
        // column is below n (`x_at`), and ≤ reach < ready.
        unsafe {
            let mut first_entry = start.get_unchecked(0).at();
            while i < n {
                let chunk_end = (i + CHUNK).min(n);
                let mut partial = S::default();
                while i < chunk_end {
                    let end_entry = start.get_unchecked(i + 1).at();
                    let reach = if end_entry > first_entry {
                        *cols.get_unchecked(end_entry - 1) as usize
                    } else {
                        i
                    };
                    while ready <= reach {
                        let xj = load(ready, *x.add(ready));
                        if STORE {
                            *x.add(ready) = xj;
                        }
                        *y.get_unchecked_mut(ready) = diag.get_unchecked(ready) * xj;
                        ready += 1;
                    }
                    let xi = *x.add(i);
                    let mut sum = *y.get_unchecked(i);
                    for k in first_entry..end_entry {
                        let (c, v) = (*cols.get_unchecked(k), *values.get_unchecked(k));
                        sum += v * *x.add(c as usize);
                        *y.get_unchecked_mut(c as usize) += v * xi;
                    }
                    finish(i, xi, sum, y.get_unchecked_mut(i), &mut partial);
                    first_entry = end_entry;
                    i += 1;
                }
                partials.push(partial);
            }
        }
        partials
    }

    /// PCG's direction update and product in one pass where the product
    /// runs over the upper triangle (one thread, bitwise symmetric): p ←
    /// z + β p (p ← z for β = 0, whatever p held), q = A p, returning p · q
    /// with the bits of the two steps apart (each p_j formed by the same
    /// operation, before any row reads it). The product reads p_j a row or
    /// a band after it is formed, from cache, so p is read from memory
    /// once instead of twice. `None`, doing nothing, on the other paths.
    pub fn direction_apply_dot(
        &self,
        beta: f64,
        z: &[f64],
        p: &mut [f64],
        q: &mut [f64],
    ) -> Option<f64> {
        let n = self.n();
        assert_eq!(z.len(), n, "SplitMatrix::direction_apply_dot: z size");
        assert_eq!(p.len(), n, "SplitMatrix::direction_apply_dot: p size");
        assert_eq!(q.len(), n, "SplitMatrix::direction_apply_dot: q size");
        if !self.by_upper_triangle() {
            return None;
        }
        let finish = |_: usize, pi: f64, sum: f64, q: &mut f64, partial: &mut f64| {
            *q = sum;
            *partial += pi * sum;
        };
        // SAFETY: p has n entries and is borrowed mutably here alone (q is
        // another vector).
        let partials = unsafe {
            if beta == 0.0 {
                self.upper_product_raw::<f64, true>(
                    p.as_mut_ptr(),
                    q,
                    |j, _| *z.get_unchecked(j),
                    finish,
                )
            } else {
                self.upper_product_raw::<f64, true>(
                    p.as_mut_ptr(),
                    q,
                    |j, p| z.get_unchecked(j) + beta * p,
                    finish,
                )
            }
        };
        Some(partials.iter().sum())
    }

    /// y = A x on the calling thread whatever rayon's pool (a thread rank's
    /// owned block), over the upper triangle alone when the matrix is
    /// bitwise symmetric: the bits of the row-wise product either way.
    /// `row_done(i, y_i)` is called for the rows in ascending order, each
    /// once its value is final (a dot product taken on the way).
    pub fn apply_on_this_thread(
        &self,
        x: &[f64],
        y: &mut [f64],
        mut row_done: impl FnMut(usize, f64),
    ) {
        if self.symmetric {
            self.upper_product(x, y, |i, _, sum, y, _: &mut ()| {
                *y = sum;
                row_done(i, sum);
            });
            return;
        }
        assert_eq!(
            x.len(),
            self.n(),
            "SplitMatrix::apply_on_this_thread: x size"
        );
        assert_eq!(
            y.len(),
            self.n(),
            "SplitMatrix::apply_on_this_thread: y size"
        );
        for (r, y) in y.iter_mut().enumerate() {
            let (lower, upper) = self.row(r);
            *y = upper.add_to(lower.add_to(self.diag[r] * x[r], x), x);
            row_done(r, *y);
        }
    }

    /// y = A x by rows in parallel chunks of [`CHUNK`] rows (the product
    /// where [`Self::upper_product`] does not run): `finish(i, x_i, (A x)_i,
    /// &mut y_i, &mut partial)` as there, called for the rows of a chunk in
    /// ascending order, each chunk's partial starting at `S::default()`;
    /// the partials in chunk order.
    fn row_product<S: Default + Send>(
        &self,
        x: &[f64],
        y: &mut [f64],
        finish: impl Fn(usize, f64, f64, &mut f64, &mut S) + Sync,
    ) -> Vec<S> {
        y.par_chunks_mut(CHUNK)
            .enumerate()
            .map(|(c, y)| {
                let mut partial = S::default();
                for (k, y) in y.iter_mut().enumerate() {
                    let r = c * CHUNK + k;
                    let (lower, upper) = self.row(r);
                    let sum = upper.add_to(lower.add_to(self.diag[r] * x[r], x), x);
                    finish(r, x[r], sum, y, &mut partial);
                }
                partial
            })
            .collect()
    }

    /// The parallel products' one pass: [`Self::upper_product`] where it
    /// runs ([`Self::by_upper_triangle`]), else [`Self::row_product`] (the
    /// same bits either way).
    fn product<S: Copy + Default + Send>(
        &self,
        x: &[f64],
        y: &mut [f64],
        finish: impl Fn(usize, f64, f64, &mut f64, &mut S) + Sync,
    ) -> Vec<S> {
        if self.by_upper_triangle() {
            self.upper_product(x, y, &finish)
        } else {
            self.row_product(x, y, &finish)
        }
    }

    /// Panics unless each of `method`'s vectors (by name) has n entries.
    fn assert_sizes(&self, method: &str, vectors: &[(&str, &[f64])]) {
        for (name, v) in vectors {
            assert_eq!(v.len(), self.n(), "SplitMatrix::{method}: {name} size");
        }
    }

    /// y = A x, rows in parallel.
    pub fn apply(&self, x: &[f64], y: &mut [f64]) {
        self.assert_sizes("apply", &[("x", x), ("y", y)]);
        self.product(x, y, |_, _, sum, y, _: &mut ()| *y = sum);
    }

    /// y = A x, rows in parallel; returns x · y (fixed chunk order, each
    /// chunk summed as its rows are computed).
    pub fn apply_dot(&self, x: &[f64], y: &mut [f64]) -> f64 {
        self.assert_sizes("apply_dot", &[("x", x), ("y", y)]);
        let partials = self.product(x, y, |_, xi, sum, y, partial: &mut f64| {
            *y = sum;
            *partial += xi * sum;
        });
        partials.iter().sum()
    }

    /// y = A x, rows in parallel; returns the sums over the rows of the two
    /// terms `terms(i, y_i)` gives (fixed chunk order, each chunk summed as
    /// its rows are computed).
    pub fn apply_sums(
        &self,
        x: &[f64],
        y: &mut [f64],
        terms: impl Fn(usize, f64) -> (f64, f64) + Sync,
    ) -> (f64, f64) {
        self.assert_sizes("apply_sums", &[("x", x), ("y", y)]);
        let partials = self.product(x, y, |i, _, sum, y, p: &mut (f64, f64)| {
            *y = sum;
            let (a, b) = terms(i, sum);
            p.0 += a;
            p.1 += b;
        });
        sum_pairs(&partials)
    }

    /// r = b − A x, rows in parallel; returns Σ |r_i| (fixed chunk order).
    pub fn residual(&self, b: &[f64], x: &[f64], r: &mut [f64]) -> f64 {
        self.assert_sizes("residual", &[("b", b), ("x", x), ("r", r)]);
        let partials = self.product(x, r, |i, _, sum, r, partial: &mut f64| {
            *r = b[i] - sum;
            *partial += r.abs();
        });
        partials.iter().sum()
    }

    /// OpenFOAM's correction scaling in two passes: y = A x with s =
    /// (b · x)/(x · y) (both sums taken as the product is formed, with
    /// [`dot`](super::reduce::dot)'s bits), then x_i ← s x_i + (b_i − s y_i)/a_ii.
    /// Returns s. `stabilise` turns the denominator into one that is not
    /// zero (OpenFOAM's `stabilise(·, VSMALL)`).
    pub fn scale_correction(
        &self,
        b: &[f64],
        x: &mut [f64],
        y: &mut [f64],
        stabilise: impl Fn(f64) -> f64,
    ) -> f64 {
        assert_eq!(b.len(), self.n(), "SplitMatrix::scale_correction: b size");
        let (b_x, x_y) = self.apply_sums(x, y, |i, y_i| (b[i] * x[i], y_i * x[i]));
        let s = b_x / stabilise(x_y);
        let diag = &self.diag;
        x.par_chunks_mut(CHUNK).enumerate().for_each(|(c, x)| {
            let first = c * CHUNK;
            for (k, x) in x.iter_mut().enumerate() {
                let i = first + k;
                *x = s * *x + (b[i] - s * y[i]) / diag[i];
            }
        });
        s
    }

    /// `sweeps` forward Gauss–Seidel sweeps with the bits of as many calls
    /// of [`Self::gauss_seidel`]`(b, x, true)`, run interleaved: sweep s + 1
    /// follows sweep s `bandwidth + 1` rows behind. Row i of sweep s + 1
    /// reads the rows j < i of its own sweep and the rows c ≤ i + bandwidth
    /// of sweep s, all done and none yet overwritten by sweep s + 1; row k of
    /// sweep s reads rows k − bandwidth.. of its own sweep, which sweep s + 1
    /// has not reached. One sweep is a chain of dependent divisions (each
    /// row waits for the last); interleaved, the sweeps' chains overlap in
    /// the core, and the rows a later sweep reads are still in cache.
    ///
    /// The rows are visited by [`Self::gauss_seidel_row`] (4-byte row starts
    /// where both triangles have them, no bounds checks), and the steady
    /// part, where every sweep is under way, steps the sweeps' rows without
    /// a division per step: the overlapped chains only pay off where the
    /// row's own work is not what limits the sweep (some 80 instructions a
    /// visit over GAMG's levels, where checked visits took about 150).
    pub fn gauss_seidel_sweeps(&self, b: &[f64], x: &mut [f64], sweeps: usize) {
        self.assert_sizes("gauss_seidel_sweeps", &[("b", b), ("x", x)]);
        match (self.lower.start32(), self.upper.start32()) {
            (Some(lower), Some(upper)) => self.sweeps_by(lower, upper, b, x, sweeps),
            _ => self.sweeps_by(&self.lower.start[..], &self.upper.start[..], b, x, sweeps),
        }
    }

    /// [`Self::gauss_seidel_sweeps`] with the triangles' row starts (in
    /// either width); `b` and `x` have n entries (asserted by the caller).
    #[inline(always)]
    fn sweeps_by<T: RowStart>(
        &self,
        lower_start: &[T],
        upper_start: &[T],
        b: &[f64],
        x: &mut [f64],
        sweeps: usize,
    ) {
        let n = self.n();
        assert_eq!(lower_start.len(), n + 1, "SplitMatrix: lower rows");
        assert_eq!(upper_start.len(), n + 1, "SplitMatrix: upper rows");
        let lag = self.bandwidth + 1;
        // SAFETY (each visit): i < n, b and x have n entries (the caller's
        // asserts), and the row starts are those of the triangles (n + 1,
        // ascending, the last the entry count: `TriangleRows`' invariant).
        let visit = |x: &mut [f64], i: usize| unsafe {
            self.gauss_seidel_row(lower_start, upper_start, b, x, i)
        };
        if sweeps < 2 || lag >= n {
            for _ in 0..sweeps {
                for i in 0..n {
                    visit(x, i);
                }
            }
            return;
        }
        // Sweep s is at row t − s·lag; the sweeps that have started and not
        // finished are first..=last. From t = ramp to n − 1 all are.
        let ramp = (sweeps - 1) * lag;
        let mut t = 0;
        while t < n + ramp {
            if t >= ramp && t < n {
                for t in t..n {
                    let mut i = t;
                    visit(x, i);
                    for _ in 1..sweeps {
                        i -= lag;
                        visit(x, i);
                    }
                }
                t = n;
                continue;
            }
            let first = (t + 1).saturating_sub(n).div_ceil(lag);
            let last = (t / lag).min(sweeps - 1);
            for s in first..=last {
                visit(x, t - s * lag);
            }
            t += 1;
        }
    }

    /// One Gauss–Seidel row: x_i ← (b_i − Σ lower a_ic x_c − Σ upper a_ic
    /// x_c) / a_ii, one subtraction per entry, columns ascending in each
    /// triangle (OpenFOAM's order).
    ///
    /// # Safety
    /// i < n; `b` and `x` have n entries; `lower_start` and `upper_start`
    /// are this matrix's triangles' row starts (in either width).
    #[inline(always)]
    unsafe fn gauss_seidel_row<T: RowStart>(
        &self,
        lower_start: &[T],
        upper_start: &[T],
        b: &[f64],
        x: &mut [f64],
        i: usize,
    ) {
        // SAFETY: the caller's; every k lies below the triangle's entry
        // count and every column below n (`x_at`).
        unsafe {
            let mut acc = *b.get_unchecked(i);
            let (cols, values) = (&self.lower.cols, &self.lower.values);
            for k in lower_start.get_unchecked(i).at()..lower_start.get_unchecked(i + 1).at() {
                acc -= values.get_unchecked(k) * x_at(x, *cols.get_unchecked(k));
            }
            let (cols, values) = (&self.upper.cols, &self.upper.values);
            for k in upper_start.get_unchecked(i).at()..upper_start.get_unchecked(i + 1).at() {
                acc -= values.get_unchecked(k) * x_at(x, *cols.get_unchecked(k));
            }
            *x.get_unchecked_mut(i) = acc / self.diag.get_unchecked(i);
        }
    }

    /// Gauss–Seidel sweeps in natural row order on A x = b: x_i = (b_i −
    /// Σ_{j≠i} a_ij x_j) / a_ii, the lower entries then the upper ones;
    /// `forward` visits rows ascending, else descending.
    pub fn gauss_seidel(&self, b: &[f64], x: &mut [f64], forward: bool) {
        let n = self.n();
        assert_eq!(b.len(), n, "SplitMatrix::gauss_seidel: b size");
        assert_eq!(x.len(), n, "SplitMatrix::gauss_seidel: x size");
        if forward {
            return self.gauss_seidel_sweeps(b, x, 1);
        }
        let (lower, upper) = (&self.lower.start[..], &self.upper.start[..]);
        for i in (0..n).rev() {
            // SAFETY: i < n, b and x have n entries (asserted above), and
            // these are the triangles' row starts.
            unsafe { self.gauss_seidel_row(lower, upper, b, x, i) };
        }
    }
}

/// The diagonal and the two triangles of the square CSR `a` (columns
/// ascending per row; a missing diagonal entry is 0), and the bandwidth
/// (max |i − j| over the off-diagonal entries), in one pass over the rows:
/// each row's entries are copied as its diagonal is found, into arrays
/// sized for a structurally symmetric pattern with its diagonal stored
/// ((nnz − n) / 2 entries a triangle; others grow as they fill). Its two
/// passes (the triangles' row starts, then the entries into zeroed arrays
/// of their final size) and the bandwidth's third read the CSR's rows two
/// and the triangles' three times, and cleared the arrays first.
fn split_rows(a: &Csr) -> (Vec<f64>, TriangleRows, TriangleRows, usize) {
    let n = a.n_rows();
    assert_eq!(n, a.n_cols(), "SplitMatrix: matrix not square");
    let (row_ptr, cols, values) = (a.row_ptr(), a.cols(), a.values());
    let half = a.nnz().saturating_sub(n) / 2;
    let mut diag = Vec::with_capacity(n);
    let (mut lower_start, mut upper_start) = (Vec::with_capacity(n + 1), Vec::with_capacity(n + 1));
    lower_start.push(0);
    upper_start.push(0);
    let (mut lower_cols, mut upper_cols) = (Vec::with_capacity(half), Vec::with_capacity(half));
    let (mut lower_values, mut upper_values) = (Vec::with_capacity(half), Vec::with_capacity(half));
    let mut bandwidth = 0;
    for r in 0..n {
        let entries = row_ptr[r]..row_ptr[r + 1];
        let (row_cols, row_values) = (&cols[entries.clone()], &values[entries]);
        let below = row_cols.partition_point(|&c| (c as usize) < r);
        let has_diagonal = row_cols.get(below).is_some_and(|&c| c as usize == r);
        let above = below + usize::from(has_diagonal);
        diag.push(if has_diagonal { row_values[below] } else { 0.0 });
        // Entry by entry: a row holds a few, too few for a copy call each.
        for (&c, &v) in row_cols[..below].iter().zip(&row_values[..below]) {
            lower_cols.push(c);
            lower_values.push(v);
        }
        for (&c, &v) in row_cols[above..].iter().zip(&row_values[above..]) {
            upper_cols.push(c);
            upper_values.push(v);
        }
        lower_start.push(lower_cols.len());
        upper_start.push(upper_cols.len());
        if let Some(&c) = row_cols[..below].first() {
            bandwidth = bandwidth.max(r - c as usize);
        }
        if let Some(&c) = row_cols[above..].last() {
            bandwidth = bandwidth.max(c as usize - r);
        }
    }
    (
        diag,
        TriangleRows::of(lower_start, lower_cols, lower_values),
        TriangleRows::of(upper_start, upper_cols, upper_values),
        bandwidth,
    )
}

/// The split layout of a structurally symmetric pattern given by its upper
/// triangle alone, OpenFOAM's `lduAddressing`: the upper entries are the
/// faces (owner ascending, each owner's neighbours ascending), and the
/// lower rows list each face again under its neighbour, with the face it
/// mirrors (OpenFOAM's `losortAddr`). GAMG keeps one per coarse level with
/// its agglomeration: a coarse matrix is its diagonal and one value per
/// coarse face, summed from the finer level's faces, its lower rows copied
/// from the faces ([`SplitPattern::mirror_upper`]), and the row starts and
/// columns are shared, not copied, by the matrices of every solve.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitPattern {
    n: usize,
    lower_start: Arc<Vec<usize>>,
    lower_start32: Arc<Vec<u32>>,
    lower_cols: Arc<Vec<u32>>,
    upper_start: Arc<Vec<usize>>,
    upper_start32: Arc<Vec<u32>>,
    upper_cols: Arc<Vec<u32>>,
    /// `mirror[k]`: the upper entry (face) (j, i) of lower entry k = (i, j).
    mirror: Vec<u32>,
    bandwidth: usize,
}

impl SplitPattern {
    /// The layout of the `n`-row pattern whose upper entries (the faces)
    /// are row r's `upper_cols[upper_start[r]..upper_start[r + 1]]`
    /// (columns ascending, each above r) and whose lower entries are their
    /// mirrors. Two passes over the faces: the lower rows' lengths, then
    /// their columns and mirrors, written into arrays of their final size;
    /// rows i ascending give each lower row its columns ascending.
    pub fn from_upper(n: usize, upper_start: Vec<usize>, upper_cols: Vec<u32>) -> Self {
        assert_eq!(upper_start.len(), n + 1, "SplitPattern: row starts");
        assert_eq!(upper_start[n], upper_cols.len(), "SplitPattern: columns");
        assert!(
            upper_cols.len() <= u32::MAX as usize,
            "SplitPattern: more than 2^32 faces"
        );
        let mut lower_start = vec![0usize; n + 1];
        let mut bandwidth = 0;
        for r in 0..n {
            let row = &upper_cols[upper_start[r]..upper_start[r + 1]];
            for &c in row {
                debug_assert!(r < c as usize && (c as usize) < n, "SplitPattern: face");
                lower_start[c as usize + 1] += 1;
            }
            if let Some(&last) = row.last() {
                bandwidth = bandwidth.max(last as usize - r);
            }
        }
        for r in 0..n {
            lower_start[r + 1] += lower_start[r];
        }
        let mut next: Vec<usize> = lower_start[..n].to_vec();
        let (mut lower_cols, mut mirror) =
            (vec![0u32; upper_cols.len()], vec![0u32; upper_cols.len()]);
        for r in 0..n {
            for f in upper_start[r]..upper_start[r + 1] {
                let k = &mut next[upper_cols[f] as usize];
                lower_cols[*k] = r as u32;
                mirror[*k] = f as u32;
                *k += 1;
            }
        }
        Self {
            n,
            lower_start32: Arc::new(narrow_starts(&lower_start)),
            lower_start: Arc::new(lower_start),
            lower_cols: Arc::new(lower_cols),
            upper_start32: Arc::new(narrow_starts(&upper_start)),
            upper_start: Arc::new(upper_start),
            upper_cols: Arc::new(upper_cols),
            mirror,
            bandwidth,
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// The faces (upper entries).
    pub fn n_faces(&self) -> usize {
        self.upper_cols.len()
    }

    /// The upper rows: row starts and columns (the faces' neighbours).
    pub fn upper(&self) -> (&[usize], &[u32]) {
        (&self.upper_start, &self.upper_cols)
    }

    /// Lower entry k's values ← its mirror face's: the lower values of a
    /// symmetric matrix from its face values.
    pub fn mirror_upper(&self, upper: &[f64]) -> Vec<f64> {
        assert_eq!(
            upper.len(),
            self.n_faces(),
            "SplitPattern: one value a face"
        );
        let mut lower = Vec::with_capacity(self.mirror.len());
        lower.extend(self.mirror.iter().map(|&f| upper[f as usize]));
        lower
    }

    /// The triangles of this layout with the face values `upper` and the
    /// lower values `lower` (one per lower entry), the pattern shared.
    pub fn triangles(&self, lower: Vec<f64>, upper: Vec<f64>) -> (TriangleRows, TriangleRows) {
        assert_eq!(lower.len(), self.mirror.len(), "SplitPattern: lower values");
        assert_eq!(
            upper.len(),
            self.n_faces(),
            "SplitPattern: one value a face"
        );
        (
            TriangleRows {
                start: Arc::clone(&self.lower_start),
                start32: Arc::clone(&self.lower_start32),
                cols: Arc::clone(&self.lower_cols),
                values: lower,
            },
            TriangleRows {
                start: Arc::clone(&self.upper_start),
                start32: Arc::clone(&self.upper_start32),
                cols: Arc::clone(&self.upper_cols),
                values: upper,
            },
        )
    }

    /// The split matrix of the diagonal `diag`, the lower values `lower`
    /// and the face values `upper`; `symmetric`: whether they are known to
    /// mirror each other bit for bit (else they are compared).
    pub fn matrix(
        &self,
        diag: Vec<f64>,
        lower: Vec<f64>,
        upper: Vec<f64>,
        symmetric: bool,
    ) -> SplitMatrix {
        assert_eq!(diag.len(), self.n, "SplitPattern: diagonal size");
        let (lower, upper) = self.triangles(lower, upper);
        let symmetric = symmetric || mirrors(&lower, &upper);
        SplitMatrix {
            diag,
            lower,
            upper,
            symmetric,
            bandwidth: self.bandwidth,
        }
    }
}

/// Whether `upper` holds the mirror of `lower`, entry for entry and bit for
/// bit: row i's upper entry (i, j) is row j's lower entry (j, i). Rows i
/// ascending visit each row j's lower entries in column order, so one
/// cursor per row finds every mirror.
fn mirrors(lower: &TriangleRows, upper: &TriangleRows) -> bool {
    let mut next: Vec<usize> = lower.start[..lower.n()].to_vec();
    for (i, row) in upper.rows(0, upper.n()).enumerate() {
        for (&j, &v) in row.cols.iter().zip(row.values) {
            let j = j as usize;
            let s = next[j];
            if s == lower.start[j + 1]
                || lower.cols[s] as usize != i
                || lower.values[s].to_bits() != v.to_bits()
            {
                return false;
            }
            next[j] = s + 1;
        }
    }
    next.iter().zip(&lower.start[1..]).all(|(s, end)| s == end)
}

/// One row of a triangle: its columns (ascending) and values.
#[derive(Clone, Copy)]
pub struct Row<'a> {
    cols: &'a [u32],
    values: &'a [f64],
}

impl Row<'_> {
    /// `sum` + Σ v_k x[c_k], left to right (the order OpenFOAM adds them in).
    #[inline(always)]
    fn add_to(self, mut sum: f64, x: &[f64]) -> f64 {
        for (&c, &v) in self.cols.iter().zip(self.values) {
            // SAFETY: columns are below n and callers pass x of length n (`x_at`).
            sum += v * unsafe { x_at(x, c) };
        }
        sum
    }

    /// `acc` − Σ v_k x[c_k], one subtraction per entry, left to right.
    #[inline(always)]
    fn subtract_from(self, mut acc: f64, x: &[f64]) -> f64 {
        for (&c, &v) in self.cols.iter().zip(self.values) {
            // SAFETY: columns are below n and callers pass x of length n (`x_at`).
            acc -= v * unsafe { x_at(x, c) };
        }
        acc
    }
}

/// One triangle of a square matrix by rows: row r's entries (columns
/// ascending) are `start[r]..start[r + 1]`.
///
/// The pattern (row starts and columns) is shared, not copied, by the
/// triangles made from it with other values ([`TriangleRows::scaled`]: the
/// DIC factors of a matrix).
#[derive(Clone, Debug)]
pub struct TriangleRows {
    start: Arc<Vec<usize>>,
    /// `start` in 4 bytes an entry ([`narrow_starts`]), empty where the
    /// entries outnumber `u32`: the sweeps and the product stream the row
    /// starts once per row, so they read half the bytes (4 MB less per
    /// pass on 1 M rows).
    start32: Arc<Vec<u32>>,
    cols: Arc<Vec<u32>>,
    values: Vec<f64>,
}

impl TriangleRows {
    fn of(start: Vec<usize>, cols: Vec<u32>, values: Vec<f64>) -> Self {
        Self {
            start32: Arc::new(narrow_starts(&start)),
            start: Arc::new(start),
            cols: Arc::new(cols),
            values,
        }
    }

    /// The row starts in 4 bytes, where they fit.
    #[inline(always)]
    fn start32(&self) -> Option<&[u32]> {
        (self.start32.len() == self.start.len()).then_some(&self.start32[..])
    }

    pub fn n(&self) -> usize {
        self.start.len() - 1
    }

    /// The values in stored order (rows ascending, columns ascending).
    /// These rows with row r's values multiplied by `factor[r]`, in one
    /// pass (a factorisation's scaled copy, without a copy to rescale).
    pub fn scaled(&self, factor: &[f64]) -> TriangleRows {
        assert_eq!(factor.len(), self.n(), "TriangleRows::scaled: factor size");
        let mut values = Vec::with_capacity(self.values.len());
        for (r, f) in factor.iter().enumerate() {
            values.extend(self.values[self.row(r)].iter().map(|v| v * f));
        }
        self.with_values(values)
    }

    pub fn values_mut(&mut self) -> &mut [f64] {
        &mut self.values
    }

    /// The values, rows ascending, each row's columns ascending.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The row starts (n + 1) and the columns: the pattern.
    pub fn pattern(&self) -> (&[usize], &[u32]) {
        (&self.start, &self.cols)
    }

    /// These rows' pattern (shared, not copied) with `values`.
    pub fn with_values(&self, values: Vec<f64>) -> TriangleRows {
        assert_eq!(
            values.len(),
            self.cols.len(),
            "TriangleRows::with_values: one value per entry"
        );
        TriangleRows {
            start: Arc::clone(&self.start),
            start32: Arc::clone(&self.start32),
            cols: Arc::clone(&self.cols),
            values,
        }
    }

    /// Slots of row r.
    #[inline]
    pub fn row(&self, r: usize) -> std::ops::Range<usize> {
        self.start[r]..self.start[r + 1]
    }

    /// Row r's columns and values.
    #[inline(always)]
    fn row_entries(&self, r: usize) -> Row<'_> {
        let (lo, hi) = (self.start[r], self.start[r + 1]);
        Row {
            cols: &self.cols[lo..hi],
            values: &self.values[lo..hi],
        }
    }

    /// Rows `first..first + count`, the row pointers read as consecutive pairs.
    #[inline(always)]
    fn rows(
        &self,
        first: usize,
        count: usize,
    ) -> impl DoubleEndedIterator<Item = Row<'_>> + ExactSizeIterator {
        self.rows_by(&self.start[..], first, count)
    }

    /// [`Self::rows`] with the row starts `start` (this triangle's, in
    /// either width).
    #[inline(always)]
    fn rows_by<'a, T: RowStart>(
        &'a self,
        start: &'a [T],
        first: usize,
        count: usize,
    ) -> impl DoubleEndedIterator<Item = Row<'a>> + ExactSizeIterator {
        let starts = &start[first..=first + count];
        starts.iter().zip(&starts[1..]).map(|(&lo, &hi)| {
            let (lo, hi) = (lo.at(), hi.at());
            Row {
                cols: &self.cols[lo..hi],
                values: &self.values[lo..hi],
            }
        })
    }

    /// Row r's columns (ascending) and values, as two slices of one length:
    /// for a loop that reads them side by side with no iterator between.
    #[inline(always)]
    pub fn row_slices(&self, r: usize) -> (&[u32], &[f64]) {
        let row = self.row_entries(r);
        (row.cols, row.values)
    }

    /// (column, value) of every entry of row r, columns ascending.
    pub fn entries(&self, r: usize) -> impl DoubleEndedIterator<Item = (usize, f64)> + '_ {
        let row = self.row_entries(r);
        row.cols
            .iter()
            .zip(row.values)
            .map(|(&c, &v)| (c as usize, v))
    }

    /// Forward substitution: for each row j ascending, w_j = s_j −
    /// Σ_c t_jc w_c (columns ascending) with s_j = `first(j)`.
    #[inline]
    pub fn forward(&self, w: &mut [f64], first: impl Fn(usize) -> f64) {
        assert_eq!(w.len(), self.n(), "TriangleRows::forward: w size");
        match self.start32() {
            Some(start) => forward_rows(self.rows_by(start, 0, self.n()), w, first),
            None => forward_rows(self.rows(0, self.n()), w, first),
        }
    }

    /// [`Self::forward`] with row j's entries multiplied by `scale[j]` as
    /// they are read: w_j = s_j − Σ_c (t_jc · scale_j) w_c.
    #[inline]
    pub fn forward_scaled(&self, w: &mut [f64], scale: &[f64], first: impl Fn(usize) -> f64) {
        assert_eq!(w.len(), self.n(), "TriangleRows::forward_scaled: w size");
        assert_eq!(
            scale.len(),
            self.n(),
            "TriangleRows::forward_scaled: scale size"
        );
        match self.start32() {
            Some(start) => forward_scaled_rows(start, &self.cols, &self.values, w, scale, first),
            None => forward_scaled_rows(&self.start, &self.cols, &self.values, w, scale, first),
        }
    }

    /// [`Self::backward`] on the rows `rows` (descending) with row i's
    /// entries multiplied by `scale[i]` as they are read: w_i −= Σ_c
    /// (t_ic · scale_i) w_c, columns descending.
    #[inline]
    pub fn backward_scaled(&self, w: &mut [f64], scale: &[f64], rows: std::ops::Range<usize>) {
        assert_eq!(w.len(), self.n(), "TriangleRows::backward_scaled: w size");
        assert_eq!(
            scale.len(),
            self.n(),
            "TriangleRows::backward_scaled: scale size"
        );
        assert!(
            rows.end <= self.n(),
            "TriangleRows::backward_scaled: rows beyond the triangle"
        );
        match self.start32() {
            Some(start) => backward_scaled_rows(start, &self.cols, &self.values, rows, w, scale),
            None => backward_scaled_rows(&self.start, &self.cols, &self.values, rows, w, scale),
        }
    }

    /// Backward substitution on the rows `rows` (descending): w_i −= Σ_c
    /// t_ic w_c, columns descending.
    #[inline]
    pub fn backward(&self, w: &mut [f64], rows: std::ops::Range<usize>) {
        assert_eq!(w.len(), self.n(), "TriangleRows::backward: w size");
        let first = rows.start;
        match self.start32() {
            Some(start) => backward_rows(self.rows_by(start, first, rows.len()), first, w),
            None => backward_rows(self.rows(first, rows.len()), first, w),
        }
    }
}

/// [`TriangleRows::forward`] over `rows` (all of them, ascending).
#[inline(always)]
fn forward_rows<'a>(
    rows: impl Iterator<Item = Row<'a>>,
    w: &mut [f64],
    first: impl Fn(usize) -> f64,
) {
    for (j, row) in rows.enumerate() {
        w[j] = row.subtract_from(first(j), w);
    }
}

/// [`TriangleRows::backward`] over `rows`, the rows `first..`, descending.
/// `w` must have the triangle's n entries (`x_at`).
#[inline(always)]
fn backward_rows<'a>(
    rows: impl DoubleEndedIterator<Item = Row<'a>> + ExactSizeIterator,
    first: usize,
    w: &mut [f64],
) {
    for (k, row) in rows.enumerate().rev() {
        let i = first + k;
        let mut wi = w[i];
        for (&c, &v) in row.cols.iter().zip(row.values).rev() {
            // SAFETY: `x_at`'s argument holds (the caller asserted w.len() == n).
            wi -= v * unsafe { x_at(w, c) };
        }
        w[i] = wi;
    }
}

/// The diagonal, then the lower entries, then the upper ones, added left
/// to right (OpenFOAM's `sumA` order).
#[inline(always)]
fn row_sum(diag: f64, lower: Row<'_>, upper: Row<'_>) -> f64 {
    let lower_sum = lower.values.iter().fold(diag, |s, v| s + v);
    upper.values.iter().fold(lower_sum, |s, v| s + v)
}

/// [`TriangleRows::forward_scaled`] over all rows, ascending, of the
/// triangle with row starts `start` (either width), `cols` and `values`.
/// The product t_jc · scale_j is formed first, as a stored scaled copy's
/// entry would be, so the terms have that copy's bits. The arrays are read
/// without bounds checks: the sweep is a chain of dependent rows, and the
/// checks (some six per row, for rows of three or four entries) and the
/// slices made of each row were much of its instructions.
#[inline(always)]
fn forward_scaled_rows<T: RowStart>(
    start: &[T],
    cols: &[u32],
    values: &[f64],
    w: &mut [f64],
    scale: &[f64],
    first: impl Fn(usize) -> f64,
) {
    let n = w.len();
    assert_eq!(start.len(), n + 1, "TriangleRows: row starts");
    assert_eq!(scale.len(), n, "TriangleRows: scale size");
    // SAFETY: j < n indexes start (n + 1), scale and w (n); the row starts
    // ascend to the entry count, the length of cols and values
    // (`TriangleRows`' invariant), and every column is below n (`x_at`).
    unsafe {
        for j in 0..n {
            let (f, mut acc) = (*scale.get_unchecked(j), first(j));
            for k in start.get_unchecked(j).at()..start.get_unchecked(j + 1).at() {
                acc -= values.get_unchecked(k) * f * x_at(w, *cols.get_unchecked(k));
            }
            *w.get_unchecked_mut(j) = acc;
        }
    }
}

/// [`TriangleRows::backward_scaled`] over `rows` (below n), descending, of
/// the triangle with row starts `start` (either width), `cols` and
/// `values`; each row's entries descending (the products formed as in
/// [`forward_scaled_rows`], the arrays read as there).
#[inline(always)]
fn backward_scaled_rows<T: RowStart>(
    start: &[T],
    cols: &[u32],
    values: &[f64],
    rows: std::ops::Range<usize>,
    w: &mut [f64],
    scale: &[f64],
) {
    let n = w.len();
    assert_eq!(start.len(), n + 1, "TriangleRows: row starts");
    assert_eq!(scale.len(), n, "TriangleRows: scale size");
    assert!(rows.end <= n, "TriangleRows: rows beyond the triangle");
    // SAFETY: as in `forward_scaled_rows`, for i < rows.end ≤ n.
    unsafe {
        for i in rows.rev() {
            let (f, mut wi) = (*scale.get_unchecked(i), *w.get_unchecked(i));
            let entries = start.get_unchecked(i).at()..start.get_unchecked(i + 1).at();
            for k in entries.rev() {
                wi -= values.get_unchecked(k) * f * x_at(w, *cols.get_unchecked(k));
            }
            *w.get_unchecked_mut(i) = wi;
        }
    }
}

/// A row start of a [`TriangleRows`]: 8 bytes, or 4 where the entries fit.
trait RowStart: Copy {
    fn at(self) -> usize;
}

impl RowStart for usize {
    #[inline(always)]
    fn at(self) -> usize {
        self
    }
}

impl RowStart for u32 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

/// `start` in 4 bytes an entry, or empty where its last entry (the entry
/// count) does not fit.
fn narrow_starts(start: &[usize]) -> Vec<u32> {
    match start.last() {
        Some(&last) if u32::try_from(last).is_ok() => start.iter().map(|&s| s as u32).collect(),
        _ => Vec::new(),
    }
}

/// x[c] without a bounds check.
///
/// # Safety
/// `c < x.len()`: every column of a [`TriangleRows`] is below n (the CSR it
/// was split from checked each against its column count, equal to n for a
/// square matrix), and every kernel asserts that the vectors it reads have
/// length n.
#[inline(always)]
unsafe fn x_at(x: &[f64], c: u32) -> f64 {
    debug_assert!((c as usize) < x.len());
    *x.get_unchecked(c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::bits;
    use crate::test_support::on_threads;

    fn sample() -> Csr {
        // [4 -1 0 -2; -1 5 -1 0; 0 -1 6 -3; -2 0 -3 7]
        crate::sparse::testing::four_by_four(-3.0)
    }

    #[test]
    fn split_pattern_of_the_faces_lays_out_the_split_rows_of_the_matrix() {
        let triangle = |t: &TriangleRows| {
            (0..t.n())
                .flat_map(|r| t.entries(r).map(move |(c, v)| (r, c, v.to_bits())))
                .collect::<Vec<_>>()
        };
        for a in [grid_laplacian(4, 3, 2), grid_laplacian(1, 1, 3)] {
            let expected = SplitMatrix::new(&a);
            let (start, cols) = expected.upper_rows().pattern();
            let layout = SplitPattern::from_upper(a.n_rows(), start.to_vec(), cols.to_vec());
            assert_eq!(layout.n_faces(), expected.upper_rows().values().len());
            let upper = expected.upper_rows().values().to_vec();
            let lower = layout.mirror_upper(&upper);
            let got = layout.matrix(expected.diag().to_vec(), lower, upper, true);
            assert_eq!(triangle(got.lower_rows()), triangle(expected.lower_rows()));
            assert_eq!(triangle(got.upper_rows()), triangle(expected.upper_rows()));
            assert_eq!(got.bandwidth, expected.bandwidth);
            assert!(got.is_symmetric() && expected.is_symmetric());
            // Values that do not mirror each other are found out.
            let mut lower = got.lower_rows().values().to_vec();
            lower[0] = 0.25;
            let upper = got.upper_rows().values().to_vec();
            assert!(!layout
                .matrix(got.diag().to_vec(), lower, upper, false)
                .is_symmetric());
        }
    }

    #[test]
    fn split_rows_give_back_their_csr() {
        let a = sample();
        let back = SplitMatrix::new(&a).to_csr();
        assert_eq!(back.row_ptr(), a.row_ptr());
        assert_eq!(back.cols(), a.cols());
        assert_eq!(back.values(), a.values());
        // A row without its diagonal entry gets a zero there.
        let lopsided =
            Csr::from_triplets(3, 3, vec![(0, 0, 2.0), (0, 2, -1.0), (1, 0, -1.0)]).unwrap();
        let back = SplitMatrix::new(&lopsided).to_csr();
        assert_eq!(back.cols(), &[0, 2, 0, 1, 2]);
        assert_eq!(back.values(), &[2.0, -1.0, -1.0, 0.0, 0.0]);
        // Patterns whose triangles are not of (nnz − n) / 2 entries each
        // (one triangle only, no diagonal, uneven rows) and the bandwidth.
        use crate::sparse::testing::random_nonsymmetric;
        let mut strictly_lower = vec![(0, 0, 1.0)];
        for i in 1..40u32 {
            strictly_lower.extend((0..i).step_by(3).map(|j| (i, j, -(j as f64) - 1.0)));
        }
        for a in [
            Csr::from_triplets(40, 40, strictly_lower).unwrap(),
            random_nonsymmetric(200, 11, 3),
        ] {
            let split = SplitMatrix::new(&a);
            let back = split.to_csr();
            for r in 0..a.n_rows() {
                let stored = |m: &Csr| {
                    let (cols, values) = m.row(r);
                    cols.iter()
                        .zip(values)
                        .filter(|e| *e.0 as usize != r || *e.1 != 0.0)
                        .map(|(&c, &v)| (c, v.to_bits()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(stored(&back), stored(&a), "row {r}");
            }
            let reach = (0..a.n_rows())
                .flat_map(|r| a.row(r).0.iter().map(move |&c| r.abs_diff(c as usize)))
                .max()
                .unwrap();
            assert_eq!(split.bandwidth, reach);
        }
    }

    #[test]
    fn split_rows_keep_lower_then_upper_and_the_products_of_the_csr() {
        let a = sample();
        let s = SplitMatrix::new(&a);
        assert_eq!(s.diag(), &[4., 5., 6., 7.]);
        let cols = |t: &TriangleRows, r| t.entries(r).map(|(c, _)| c).collect::<Vec<_>>();
        assert_eq!(cols(s.lower_rows(), 3), [0, 2]);
        assert_eq!(cols(s.upper_rows(), 0), [1, 3]);
        assert!(s.upper_rows().row(3).is_empty() && s.lower_rows().row(0).is_empty());
        let x = [1.0, -2.0, 0.5, 3.0];
        let (mut y, mut z) = (vec![0.0; 4], vec![0.0; 4]);
        s.apply(&x, &mut y);
        a.spmv(&x, &mut z);
        assert_eq!(y, z);
        assert_eq!(s.row_sums(), crate::solve::row_sums::openfoam_row_sums(&a));
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

    /// A 7-point operator on an nx × ny × nz grid with a coefficient per
    /// face (the same bits in both rows: symmetric), rows in natural order.
    pub(crate) fn grid_laplacian(nx: usize, ny: usize, nz: usize) -> Csr {
        let n = nx * ny * nz;
        let face = |i: usize, j: usize| {
            let (lo, hi) = (i.min(j) as u64, i.max(j) as u64);
            -0.5 - ((lo * 7919 + hi * 104_729) % 1000) as f64 * 1e-3
        };
        let (mut row_ptr, mut cols, mut values) = (vec![0], Vec::new(), Vec::new());
        for i in 0..n {
            let (x, y, z) = (i % nx, (i / nx) % ny, i / (nx * ny));
            let mut row: Vec<(usize, f64)> = Vec::new();
            for (ok, j) in [
                (z > 0, i.wrapping_sub(nx * ny)),
                (y > 0, i.wrapping_sub(nx)),
                (x > 0, i.wrapping_sub(1)),
                (x + 1 < nx, i + 1),
                (y + 1 < ny, i + nx),
                (z + 1 < nz, i + nx * ny),
            ] {
                if ok {
                    row.push((j, face(i, j)));
                }
            }
            let diag = 0.25 - row.iter().map(|e| e.1).sum::<f64>();
            row.push((i, diag));
            row.sort_by_key(|e| e.0);
            cols.extend(row.iter().map(|e| e.0 as u32));
            values.extend(row.iter().map(|e| e.1));
            row_ptr.push(cols.len());
        }
        Csr::new(n, row_ptr, cols, values).unwrap()
    }

    #[test]
    fn upper_triangle_products_have_the_bits_of_the_row_products() {
        let a = grid_laplacian(23, 19, 21); // 9177 rows: three reduction chunks
        let n = a.n_rows();
        let s = SplitMatrix::new(&a);
        assert!(s.is_symmetric());
        let x: Vec<f64> = (0..n)
            .map(|i| ((i * 37) % 101) as f64 / 7.0 - 6.0)
            .collect();
        let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 29) as f64).collect();
        let run = |threads: usize| {
            on_threads(threads, || {
                let (mut y, mut q, mut r) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
                s.apply(&x, &mut y);
                let x_q = s.apply_dot(&x, &mut q);
                let r_sum = s.residual(&b, &x, &mut r);
                let mut t = vec![0.0; n];
                let (t_b, t_t) = s.apply_sums(&x, &mut t, |i, v| (v * b[i], v * v));
                assert_eq!(t, y);
                (
                    y,
                    q,
                    x_q.to_bits(),
                    r,
                    r_sum.to_bits(),
                    t_b.to_bits(),
                    t_t.to_bits(),
                )
            })
        };
        let (one, two) = (run(1), run(2));
        assert_eq!(one, two);
        let sums = |v: Vec<f64>| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            sums(s.row_sums()),
            sums(crate::solve::row_sums::openfoam_row_sums(&a))
        );
        let expected: Vec<f64> = (0..n).map(|i| s.row_times(i, &x)).collect();
        assert_eq!(one.0, expected);
        // A matrix whose mirror entries differ in the last bit is not symmetric.
        let mut values = a.values().to_vec();
        values[1] = f64::from_bits(values[1].to_bits() + 1);
        let b = Csr::new(n, a.row_ptr().to_vec(), a.cols().to_vec(), values).unwrap();
        assert!(!SplitMatrix::new(&b).is_symmetric());
        assert!(SplitMatrix::new(&sample()).is_symmetric());
        // On the calling thread (the global pool has two or more threads
        // here, or one), symmetric or not: each row's bits, rows in order.
        for m in [&a, &b] {
            let split = SplitMatrix::new(m);
            let mut y = vec![0.0; n];
            let mut done = Vec::new();
            split.apply_on_this_thread(&x, &mut y, |i, v| done.push((i, v.to_bits())));
            let rows: Vec<(usize, u64)> = (0..n)
                .map(|i| (i, split.row_times(i, &x).to_bits()))
                .collect();
            assert_eq!(done, rows);
            assert_eq!(sums(y), rows.iter().map(|r| r.1).collect::<Vec<_>>());
        }
    }

    /// One Gauss–Seidel sweep by its definition on the CSR `a`: x_i ← (b_i
    /// − Σ_{j≠i} a_ij x_j) / a_ii, the entries left to right (the lower
    /// ones, then the upper ones), rows ascending or descending.
    fn textbook_gauss_seidel(a: &Csr, b: &[f64], x: &mut [f64], forward: bool) {
        let n = a.n_rows();
        let rows: Vec<usize> = if forward {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for i in rows {
            let (cols, values) = a.row(i);
            let mut acc = b[i];
            let mut diagonal = 0.0;
            for (&c, &v) in cols.iter().zip(values) {
                if c as usize == i {
                    diagonal = v;
                } else {
                    acc -= v * x[c as usize];
                }
            }
            x[i] = acc / diagonal;
        }
    }

    #[test]
    fn gauss_seidel_sweeps_have_the_bits_of_the_textbook_sweep() {
        use crate::sparse::testing::{random_nonsymmetric, random_symmetric};
        for (name, a) in [
            ("grid", grid_laplacian(11, 9, 7)),
            ("symmetric", random_symmetric(400, 9, 5)),
            ("nonsymmetric", random_nonsymmetric(300, 7, 6)),
            ("sample", sample()),
        ] {
            let n = a.n_rows();
            let s = SplitMatrix::new(&a);
            let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 29) as f64 - 14.0).collect();
            let x0: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 7.0).collect();
            for forward in [true, false] {
                let (mut expected, mut got) = (x0.clone(), x0.clone());
                textbook_gauss_seidel(&a, &b, &mut expected, forward);
                s.gauss_seidel(&b, &mut got, forward);
                assert_eq!(bits(&got), bits(&expected), "{name}, forward {forward}");
            }
            for sweeps in 0..=4 {
                let mut expected = x0.clone();
                for _ in 0..sweeps {
                    textbook_gauss_seidel(&a, &b, &mut expected, true);
                }
                let mut got = x0.clone();
                s.gauss_seidel_sweeps(&b, &mut got, sweeps);
                assert_eq!(bits(&got), bits(&expected), "{name}, {sweeps} sweeps");
            }
        }
    }

    #[test]
    fn interleaved_gauss_seidel_sweeps_have_the_bits_of_one_sweep_after_another() {
        let a = grid_laplacian(23, 19, 21);
        let n = a.n_rows();
        let s = SplitMatrix::new(&a);
        assert_eq!(s.bandwidth, 23 * 19);
        let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 29) as f64 - 14.0).collect();
        let x0: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 7.0).collect();
        for sweeps in 0..=5 {
            let mut one_by_one = x0.clone();
            for _ in 0..sweeps {
                s.gauss_seidel(&b, &mut one_by_one, true);
            }
            let mut interleaved = x0.clone();
            s.gauss_seidel_sweeps(&b, &mut interleaved, sweeps);
            assert_eq!(bits(&interleaved), bits(&one_by_one), "{sweeps} sweeps");
        }
        // A bandwidth as large as the matrix sweeps one after another.
        let small = SplitMatrix::new(&sample());
        let mut x = vec![0.0; 4];
        let mut y = vec![0.0; 4];
        small.gauss_seidel_sweeps(&[1.0; 4], &mut x, 3);
        for _ in 0..3 {
            small.gauss_seidel(&[1.0; 4], &mut y, true);
        }
        assert_eq!(x, y);
    }

    #[test]
    fn scale_correction_has_the_bits_of_its_separate_passes() {
        use crate::solve::reduce::dot;
        let a = grid_laplacian(23, 19, 21); // three reduction chunks
        let n = a.n_rows();
        let s = SplitMatrix::new(&a);
        let b: Vec<f64> = (0..n).map(|i| ((i * 13) % 29) as f64 - 14.0).collect();
        let x0: Vec<f64> = (0..n).map(|i| ((i * 37) % 101) as f64 / 7.0).collect();
        let stabilise = |d: f64| d + 1e-300;
        let mut ax = vec![0.0; n];
        s.apply(&x0, &mut ax);
        let factor = dot(&b, &x0) / stabilise(dot(&ax, &x0));
        let expected: Vec<u64> = (0..n)
            .map(|i| (factor * x0[i] + (b[i] - factor * ax[i]) / s.diag()[i]).to_bits())
            .collect();
        for threads in [1, 2] {
            let (mut x, mut y) = (x0.clone(), vec![0.0; n]);
            let got = on_threads(threads, || {
                s.scale_correction(&b, &mut x, &mut y, stabilise)
            });
            assert_eq!(got.to_bits(), factor.to_bits(), "{threads} threads");
            let x: Vec<u64> = x.iter().map(|v| v.to_bits()).collect();
            assert!(x == expected, "{threads} threads");
        }
    }

    #[test]
    fn csr_values_give_back_the_split_matrix_values_with_or_without_diagonals() {
        let mut a = grid_laplacian(5, 4, 3);
        // Values of every kind of bits, so that a misplaced entry shows.
        for (k, v) in a.values_mut().iter_mut().enumerate() {
            *v = (k as f64 + 0.5).sqrt() - 3.0;
        }
        let s = SplitMatrix::new(&a);
        let expected = bits(a.values());
        let taken = a.take_values();
        assert!(a.values().is_empty());
        let back = s.csr_values(&a);
        assert_eq!(bits(&back), expected);
        a.restore_values(taken);
        // A row without its diagonal entry (stored as 0 in the split) gets
        // none back.
        let no_diagonal = Csr::new(
            3,
            vec![0, 2, 4, 6],
            vec![0, 1, 0, 2, 1, 2],
            vec![4.0, -1.0, -1.5, -2.0, -2.5, 3.0],
        )
        .unwrap();
        let s = SplitMatrix::new(&no_diagonal);
        assert_eq!(s.diag()[1], 0.0);
        assert_eq!(
            bits(&s.csr_values(&no_diagonal)),
            bits(no_diagonal.values())
        );
    }

    #[test]
    fn dic_factor_sweeps_on_the_split_rows_have_the_bits_of_the_stored_dic() {
        use crate::solve::ic::{Dic, DicFactor};
        use crate::solve::LinearOperator;
        let a = grid_laplacian(17, 16, 18);
        let n = a.n_rows();
        let s = SplitMatrix::new(&a);
        let (dic, factor) = (Dic::of_split(&s).unwrap(), DicFactor::of_split(&s).unwrap());
        let r: Vec<f64> = (0..n)
            .map(|i| ((i * 37) % 101) as f64 / 7.0 - 6.0)
            .collect();
        let (mut stored, mut formed) = (vec![0.0; n], vec![0.0; n]);
        dic.apply(&r, &mut stored);
        factor.sweeps(&s, &r, &mut formed);
        assert_eq!(bits(&formed), bits(&stored));
        // With r · w on the way (PCG's), over more than one chunk of rows.
        assert!(n > crate::solve::reduce::CHUNK);
        let (mut stored, mut formed) = (vec![0.0; n], vec![0.0; n]);
        let stored_dot = dic.apply_dot(&r, &mut stored);
        let formed_dot = factor.sweeps_dot(&s, &r, &mut formed);
        assert_eq!(formed_dot.to_bits(), stored_dot.to_bits());
        assert_eq!(bits(&formed), bits(&stored));
        // The same errors as the stored factor's.
        let mut bad = a.clone();
        let slot = bad.slot(5, 5).unwrap();
        bad.values_mut()[slot] = -1.0;
        let bad = SplitMatrix::new(&bad);
        assert_eq!(DicFactor::of_split(&bad).err(), Dic::of_split(&bad).err());
    }

    #[test]
    fn dic_sweeps_with_the_dot_product_fused_keep_its_bits() {
        use crate::solve::precond::Dic;
        use crate::solve::LinearOperator;
        let a = grid_laplacian(17, 16, 18); // 4896 rows: two reduction chunks
        let n = a.n_rows();
        let dic = Dic::new(&a).unwrap();
        let r: Vec<f64> = (0..n)
            .map(|i| ((i * 37) % 101) as f64 / 7.0 - 6.0)
            .collect();
        let (mut w, mut z) = (vec![0.0; n], vec![0.0; n]);
        dic.apply(&r, &mut w);
        let r_z = dic.apply_dot(&r, &mut z);
        assert_eq!(w, z);
        assert_eq!(r_z.to_bits(), super::super::reduce::dot(&r, &w).to_bits());
    }

    #[test]
    fn direction_and_product_in_one_pass_have_the_bits_of_the_two_steps() {
        let a = grid_laplacian(23, 19, 21); // 9177 rows: three reduction chunks
        let n = a.n_rows();
        let s = SplitMatrix::new(&a);
        let z: Vec<f64> = (0..n)
            .map(|i| ((i * 37) % 101) as f64 / 7.0 - 6.0)
            .collect();
        let p0: Vec<f64> = (0..n).map(|i| ((i * 13) % 29) as f64 - 9.5).collect();
        // β = 0 overwrites whatever p held (NaN here).
        for (beta, p_before) in [(0.0, vec![f64::NAN; n]), (0.37, p0.clone())] {
            let mut p = p_before.clone();
            let direction = |p: &mut [f64]| {
                for (p, z) in p.iter_mut().zip(&z) {
                    *p = if beta == 0.0 { *z } else { z + beta * *p };
                }
            };
            direction(&mut p);
            let mut q = vec![0.0; n];
            let p_q = s.apply_dot(&p, &mut q);
            let (mut fused_p, mut fused_q) = (p_before.clone(), vec![0.0; n]);
            let fused = on_threads(1, || {
                s.direction_apply_dot(beta, &z, &mut fused_p, &mut fused_q)
            })
            .expect("one thread, symmetric: the fused pass");
            assert_eq!(bits(&fused_p), bits(&p));
            assert_eq!(bits(&fused_q), bits(&q));
            assert_eq!(fused.to_bits(), p_q.to_bits());
            // On two threads the rows are split: no fused pass, p untouched.
            let mut untouched = p_before.clone();
            let two = on_threads(2, || {
                s.direction_apply_dot(beta, &z, &mut untouched, &mut q)
            });
            assert!(two.is_none());
            assert_eq!(bits(&untouched), bits(&p_before));
        }
    }

    #[test]
    fn row_starts_in_either_width_give_the_same_bits() {
        let a = grid_laplacian(17, 16, 18);
        let n = a.n_rows();
        let narrow = SplitMatrix::new(&a);
        assert!(narrow.upper_rows().start32().is_some());
        assert!(narrow.lower_rows().start32().is_some());
        let mut wide = narrow.clone();
        for t in [&mut wide.lower, &mut wide.upper] {
            t.start32 = Arc::new(Vec::new());
            assert!(t.start32().is_none());
        }
        let x: Vec<f64> = (0..n)
            .map(|i| ((i * 37) % 101) as f64 / 7.0 - 6.0)
            .collect();
        let run = |s: &SplitMatrix| {
            let one = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            let mut y = vec![0.0; n];
            let x_y = one.install(|| s.apply_dot(&x, &mut y));
            let mut w = vec![0.0; n];
            s.lower_rows().forward(&mut w, |j| x[j]);
            s.upper_rows().backward(&mut w, 0..n / 2);
            s.upper_rows().backward(&mut w, n / 2..n);
            let mut g = vec![1.0; n];
            s.gauss_seidel(&x, &mut g, true);
            s.gauss_seidel_sweeps(&x, &mut g, 3);
            let scale: Vec<f64> = (0..n).map(|i| 1.0 / (2.0 + (i % 5) as f64)).collect();
            let mut v = vec![0.0; n];
            s.lower_rows().forward_scaled(&mut v, &scale, |j| x[j]);
            s.upper_rows().backward_scaled(&mut v, &scale, n / 3..n);
            s.upper_rows().backward_scaled(&mut v, &scale, 0..n / 3);
            (bits(&y), x_y.to_bits(), bits(&w), bits(&g), bits(&v))
        };
        assert_eq!(run(&narrow), run(&wide));
        assert!(narrow_starts(&[0, 3, u32::MAX as usize + 1]).is_empty());
        assert_eq!(narrow_starts(&[0, 3, 7]), vec![0, 3, 7]);
    }
}
