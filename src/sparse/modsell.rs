//! Sliced ELLPACK (SELL, Monakov et al. 2010) and the modified SELL of Wikberg 2024
//! §3.2 (Wikberg 2024): the diagonal stored apart and in-slice columns coded
//! so that a GPU block reads their x from shared memory.
//!
//! Both store, per slice of `slice_height` consecutive rows, the slice's rows
//! column-major (the k-th entry of rows s·H .. s·H+H−1 contiguous, so a warp
//! reads them coalesced), padded to the slice's longest row. The last slice is
//! allocated in full. `slice_ptr[s]` is the first slot of slice s.

use super::{Csr, Permutation};
use rayon::prelude::*;

/// A slice is one block of whole warps.
pub fn check_slice_height(slice_height: usize) -> Result<(), String> {
    if slice_height == 0 || !slice_height.is_multiple_of(32) || slice_height > 1024 {
        return Err(format!(
            "slice height {slice_height} must be a multiple of 32 between 32 and 1024"
        ));
    }
    Ok(())
}

/// Both formats need 32-bit column codes and whole warps per slice.
fn check_shape(a: &Csr, slice_height: usize) -> Result<(), String> {
    check_slice_height(slice_height)?;
    if a.n_rows().max(a.n_cols()) >= i32::MAX as usize {
        return Err(format!(
            "{} x {} matrix is too large for 32-bit column codes",
            a.n_rows(),
            a.n_cols()
        ));
    }
    Ok(())
}

/// Places row `first + i` of a slice of height `h` starting at row `first`:
/// its diagonal into `d`, its off-diagonal entries (ascending columns, in
/// the order given) at the row's slots `i, i + h, …` of the slice's `codes`
/// and `values`, a column inside the slice coded as its negative local index
/// − 1, another as the column + 1. Returns the off-diagonals placed and how
/// many of them lie inside the slice.
fn place_row(
    first: usize,
    h: usize,
    i: usize,
    entries: impl Iterator<Item = (usize, f64)>,
    d: &mut f64,
    codes: &mut [i32],
    values: &mut [f64],
) -> (usize, usize) {
    let r = first + i;
    let (mut slot, mut off_diagonals, mut in_slice) = (i, 0, 0);
    for (c, v) in entries {
        if c == r {
            *d = v;
            continue;
        }
        codes[slot] = if (first..first + h).contains(&c) {
            in_slice += 1;
            -((c - first) as i32) - 1
        } else {
            c as i32 + 1
        };
        values[slot] = v;
        off_diagonals += 1;
        slot += h;
    }
    (off_diagonals, in_slice)
}

/// Slot pointers of `n` rows in slices of `h` rows, each slice as long as
/// its longest row (`row_len(r)` entries), the lengths found in parallel.
fn slice_pointers(n: usize, h: usize, row_len: impl Fn(usize) -> usize + Sync) -> Vec<u64> {
    let lens: Vec<usize> = (0..n.div_ceil(h))
        .into_par_iter()
        .map(|s| {
            (s * h..((s + 1) * h).min(n))
                .map(&row_len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut ptr = Vec::with_capacity(lens.len() + 1);
    ptr.push(0u64);
    for (s, len) in lens.into_iter().enumerate() {
        ptr.push(ptr[s] + (len * h) as u64);
    }
    ptr
}

/// Plain SELL: every stored entry (diagonal included); padding column −1, value 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Sell {
    slice_height: usize,
    n_rows: usize,
    n_cols: usize,
    slice_ptr: Vec<u64>,
    cols: Vec<i32>,
    values: Vec<f64>,
}

impl Sell {
    pub fn from_csr(a: &Csr, slice_height: usize) -> Result<Self, String> {
        check_shape(a, slice_height)?;
        let h = slice_height;
        let n = a.n_rows();
        let row_len = |r: usize| a.row_ptr()[r + 1] - a.row_ptr()[r];
        let slice_ptr = slice_pointers(n, h, row_len);
        let slots = *slice_ptr.last().unwrap() as usize;
        let (mut cols, mut values) = (vec![-1i32; slots], vec![0.0; slots]);
        for r in 0..n {
            let base = slice_ptr[r / h] as usize + r % h;
            let (c, v) = a.row(r);
            for (k, (&c, &v)) in c.iter().zip(v).enumerate() {
                cols[base + k * h] = c as i32;
                values[base + k * h] = v;
            }
        }
        Ok(Self {
            slice_height,
            n_rows: n,
            n_cols: a.n_cols(),
            slice_ptr,
            cols,
            values,
        })
    }

    pub fn slice_height(&self) -> usize {
        self.slice_height
    }
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn slice_ptr(&self) -> &[u64] {
        &self.slice_ptr
    }
    pub fn cols(&self) -> &[i32] {
        &self.cols
    }
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// y = A x, walking the slots as the GPU kernel does.
    pub fn spmv(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.n_cols, "sell spmv: x has the wrong length");
        assert_eq!(y.len(), self.n_rows, "sell spmv: y has the wrong length");
        let h = self.slice_height;
        for (r, y) in y.iter_mut().enumerate() {
            let (start, end) = (self.slice_ptr[r / h], self.slice_ptr[r / h + 1]);
            let mut acc = 0.0;
            for slot in (start as usize + r % h..end as usize).step_by(h) {
                let c = self.cols[slot];
                if c >= 0 {
                    acc += self.values[slot] * x[c as usize];
                }
            }
            *y = acc;
        }
    }
}

/// Modified SELL (Wikberg 2024, §3.2): `diag` apart; off-diagonals per slice with
/// column codes `c + 1` (column outside the slice: x from global memory),
/// `−(c − s·H) − 1` (inside: x from shared memory at offset c − s·H) and `0`
/// (padding, value 0). Off-diagonals of a row are in ascending column order.
#[derive(Clone, Debug, PartialEq)]
pub struct ModSell {
    slice_height: usize,
    n_rows: usize,
    diag: Vec<f64>,
    slice_ptr: Vec<u64>,
    codes: Vec<i32>,
    values: Vec<f64>,
    off_diagonals: usize,
    in_slice: usize,
}

impl ModSell {
    /// `a` must be square (rows already in the wanted order, e.g. RCM). A row
    /// with no stored diagonal gets a zero diagonal.
    pub fn from_csr(a: &Csr, slice_height: usize) -> Result<Self, String> {
        check_shape(a, slice_height)?;
        if a.n_rows() != a.n_cols() {
            return Err(format!(
                "modified SELL needs a square matrix, this one is {} x {}",
                a.n_rows(),
                a.n_cols()
            ));
        }
        let h = slice_height;
        let n = a.n_rows();
        let off_len = |r: usize| {
            let (c, _) = a.row(r);
            c.len() - usize::from(c.binary_search(&(r as u32)).is_ok())
        };
        let slice_ptr = slice_pointers(n, h, off_len);
        Ok(Self::fill_slices(h, n, slice_ptr, |r, entries| {
            let (c, v) = a.row(r);
            entries.extend(c.iter().zip(v).map(|(&c, &v)| (c as usize, v)));
        }))
    }

    /// `from_csr(&ordering.apply_symmetric(a), slice_height)` without the
    /// permuted CSR: each slice sorts its rows' renumbered columns (values
    /// alongside) on the fly and writes them to its own slots, so the
    /// permuted copy of `a` (12 bytes per entry plus its row pointers) is
    /// never held. `a` is read twice: in order for the row lengths, then in
    /// the new row order (at random: about twice the time of the two-step
    /// build on one thread, which reads `a` in order and scatters).
    pub fn from_csr_permuted(
        a: &Csr,
        ordering: &Permutation,
        slice_height: usize,
    ) -> Result<Self, String> {
        check_shape(a, slice_height)?;
        if a.n_rows() != a.n_cols() || ordering.len() != a.n_rows() {
            return Err(format!(
                "modified SELL of a {} x {} matrix permuted by an ordering of {} rows: \
                 expected a square matrix of the ordering's size",
                a.n_rows(),
                a.n_cols(),
                ordering.len()
            ));
        }
        let h = slice_height;
        let n = a.n_rows();
        let (new_to_old, old_to_new) = (ordering.new_to_old(), ordering.old_to_new());
        // A row keeps its length and its diagonal under a symmetric
        // permutation. The lengths are found reading `a` in order, then
        // looked up per new row: found in the new order, they read every
        // row's pointers and columns at random once more than the fill
        // below does, part of what made this slower than `apply_symmetric`
        // (which reads `a` in order) followed by `from_csr`.
        let off_lens: Vec<u32> = (0..n)
            .into_par_iter()
            .map(|r| {
                let (c, _) = a.row(r);
                (c.len() - usize::from(c.binary_search(&(r as u32)).is_ok())) as u32
            })
            .collect();
        let slice_ptr = slice_pointers(n, h, |r| off_lens[new_to_old[r] as usize] as usize);
        drop(off_lens);
        Ok(Self::fill_slices(h, n, slice_ptr, |r, entries| {
            let (c, v) = a.row(new_to_old[r] as usize);
            // Insertion sort by new column as `Permutation::apply_symmetric`
            // sorts (rows are short; distinct columns stay distinct).
            for (&c, &v) in c.iter().zip(v) {
                let c = old_to_new[c as usize] as usize;
                let mut at = entries.len();
                entries.push((c, v));
                while at > 0 && entries[at - 1].0 > c {
                    entries[at] = entries[at - 1];
                    at -= 1;
                }
                entries[at] = (c, v);
            }
        }))
    }

    /// The matrix of `n` rows in slices of `h` rows at `slice_ptr`, its
    /// slices filled in parallel (disjoint parts of the arrays), each with
    /// one buffer for its rows: `row(r, entries)` appends row r's entries
    /// (column, value) in ascending column order to the empty `entries`, the
    /// diagonal among them or not (then it is zero).
    fn fill_slices(
        h: usize,
        n: usize,
        slice_ptr: Vec<u64>,
        row: impl Fn(usize, &mut Vec<(usize, f64)>) + Sync,
    ) -> Self {
        let slots = *slice_ptr.last().unwrap() as usize;
        let (mut codes, mut values) = (vec![0i32; slots], vec![0.0; slots]);
        let mut diag = vec![0.0; n];
        let lengths = || slice_ptr.windows(2).map(|w| (w[1] - w[0]) as usize);
        let (off_diagonals, in_slice) = crate::slices::split_lengths(&mut codes, lengths())
            .into_par_iter()
            .zip(crate::slices::split_lengths(&mut values, lengths()))
            .zip(diag.par_chunks_mut(h))
            .enumerate()
            .map(|(s, ((codes, values), diag))| {
                let first = s * h;
                let (mut off_diagonals, mut in_slice) = (0usize, 0usize);
                let mut entries = Vec::new();
                for (i, d) in diag.iter_mut().enumerate() {
                    entries.clear();
                    row(first + i, &mut entries);
                    let entries = entries.iter().copied();
                    let (off, inside) = place_row(first, h, i, entries, d, codes, values);
                    off_diagonals += off;
                    in_slice += inside;
                }
                (off_diagonals, in_slice)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        Self {
            slice_height: h,
            n_rows: n,
            diag,
            slice_ptr,
            codes,
            values,
            off_diagonals,
            in_slice,
        }
    }

    /// A matrix from its arrays (e.g. read back from the device), checking
    /// the shapes: `diag` of length n, `slice_ptr` of ⌈n/H⌉ + 1 multiples of
    /// H, codes and values of its last length, every code a column in range.
    pub fn from_parts(
        slice_height: usize,
        diag: Vec<f64>,
        slice_ptr: Vec<u64>,
        codes: Vec<i32>,
        values: Vec<f64>,
    ) -> Result<Self, String> {
        check_slice_height(slice_height)?;
        let (h, n) = (slice_height, diag.len());
        if slice_ptr.len() != n.div_ceil(h) + 1
            || slice_ptr[0] != 0
            || slice_ptr
                .windows(2)
                .any(|w| w[1] < w[0] || (w[1] - w[0]) % h as u64 != 0)
        {
            return Err(format!(
                "{} slice pointers for {n} rows in slices of {h}: expected {} non-decreasing \
                 multiples of {h} from 0",
                slice_ptr.len(),
                n.div_ceil(h) + 1
            ));
        }
        let slots = *slice_ptr.last().unwrap() as usize;
        if codes.len() != slots || values.len() != slots {
            return Err(format!(
                "slice pointers end at {slots} but there are {} codes and {} values",
                codes.len(),
                values.len()
            ));
        }
        // Slices checked and counted in parallel; the first bad slot in
        // slot order is the one reported.
        let counts: Vec<Result<(usize, usize), String>> = (0..slice_ptr.len() - 1)
            .into_par_iter()
            .map(|s| {
                let (mut off_diagonals, mut in_slice) = (0, 0);
                let slots = slice_ptr[s] as usize..slice_ptr[s + 1] as usize;
                for (slot, &code) in slots.clone().zip(&codes[slots]) {
                    let column = match code {
                        0 => continue,
                        c if c > 0 => c as usize - 1,
                        c => {
                            in_slice += 1;
                            s * h + (-(c + 1)) as usize
                        }
                    };
                    if column >= n {
                        return Err(format!(
                            "slot {slot}: code {code} names column {column} of {n}"
                        ));
                    }
                    off_diagonals += 1;
                }
                Ok((off_diagonals, in_slice))
            })
            .collect();
        let (mut off_diagonals, mut in_slice) = (0, 0);
        for count in counts {
            let (off, inside) = count?;
            off_diagonals += off;
            in_slice += inside;
        }
        Ok(Self {
            slice_height,
            n_rows: n,
            diag,
            slice_ptr,
            codes,
            values,
            off_diagonals,
            in_slice,
        })
    }

    /// The matrix as CSR (diagonal included, columns sorted), padding dropped.
    pub fn to_csr(&self) -> Csr {
        let h = self.slice_height;
        let mut row_ptr = Vec::with_capacity(self.n_rows + 1);
        row_ptr.push(0);
        let mut entries: Vec<(u32, f64)> = Vec::new();
        let (mut cols, mut values) = (Vec::new(), Vec::new());
        for r in 0..self.n_rows {
            entries.clear();
            entries.push((r as u32, self.diag[r]));
            let (start, end) = (self.slice_ptr[r / h], self.slice_ptr[r / h + 1]);
            for slot in (start as usize + r % h..end as usize).step_by(h) {
                let code = self.codes[slot];
                let column = match code {
                    0 => continue,
                    c if c > 0 => c as usize - 1,
                    c => (r / h) * h + (-(c + 1)) as usize,
                };
                entries.push((column as u32, self.values[slot]));
            }
            entries.sort_unstable_by_key(|e| e.0);
            cols.extend(entries.iter().map(|e| e.0));
            values.extend(entries.iter().map(|e| e.1));
            row_ptr.push(cols.len());
        }
        Csr::new(self.n_rows, row_ptr, cols, values)
            .expect("mod-SELL holds each column of a row once, in range")
    }

    pub fn slice_height(&self) -> usize {
        self.slice_height
    }
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    pub fn diag(&self) -> &[f64] {
        &self.diag
    }
    pub fn slice_ptr(&self) -> &[u64] {
        &self.slice_ptr
    }
    pub fn codes(&self) -> &[i32] {
        &self.codes
    }
    pub fn values(&self) -> &[f64] {
        &self.values
    }
    /// Stored off-diagonal entries (padding excluded).
    pub fn off_diagonals(&self) -> usize {
        self.off_diagonals
    }

    /// λ of Wikberg 2024, Table 3.1: the fraction of off-diagonals whose x comes
    /// from shared memory (0 for a diagonal matrix).
    pub fn lambda(&self) -> f64 {
        if self.off_diagonals == 0 {
            0.0
        } else {
            self.in_slice as f64 / self.off_diagonals as f64
        }
    }

    /// y = A x, decoding the column codes as the GPU kernel does (the slice's
    /// x[s·H ..] standing in for shared memory).
    pub fn spmv(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(
            x.len(),
            self.n_rows,
            "mod-SELL spmv: x has the wrong length"
        );
        assert_eq!(
            y.len(),
            self.n_rows,
            "mod-SELL spmv: y has the wrong length"
        );
        let h = self.slice_height;
        for (r, y) in y.iter_mut().enumerate() {
            let shared = &x[(r / h) * h..];
            let (start, end) = (self.slice_ptr[r / h], self.slice_ptr[r / h + 1]);
            let mut acc = self.diag[r] * x[r];
            for slot in (start as usize + r % h..end as usize).step_by(h) {
                let code = self.codes[slot];
                if code > 0 {
                    acc += self.values[slot] * x[code as usize - 1];
                } else if code < 0 {
                    acc += self.values[slot] * shared[(-(code + 1)) as usize];
                }
            }
            *y = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;

    /// The 9 × 9 example of Wikberg 2024, §3.1 (sliced there with H = 3; the
    /// codes below are worked by hand for one slice of H = 32).
    fn seed_example() -> Csr {
        let rows: [&[(u32, f64)]; 9] = [
            &[(0, 2.5), (1, 3.2)],
            &[(0, 3.2), (1, 0.2), (2, 0.4), (3, 3.9)],
            &[(1, 0.4), (2, 2.7), (3, 2.1), (4, 1.1)],
            &[(1, 3.9), (2, 2.1), (3, -4.5), (6, 1.7)],
            &[(2, 1.1), (4, 1.2), (5, 3.3)],
            &[(4, 3.3), (5, 2.8), (7, 0.8), (8, 1.4)],
            &[(3, 1.7), (6, 1.1), (7, -2.6)],
            &[(5, 0.8), (6, -2.6), (7, 0.2), (8, 3.1)],
            &[(5, 1.4), (7, 3.1), (8, 2.0)],
        ];
        Csr::from_rows(9, rows).unwrap()
    }

    /// A random permutation of 0..n drawn from `seed`.
    fn shuffled(n: usize, seed: u64) -> Permutation {
        crate::sparse::testing::random_permutation(n, &mut crate::sparse::testing::SplitMix(seed))
    }

    #[test]
    fn the_permuted_build_equals_the_build_of_the_permuted_matrix() {
        // Rows without a diagonal: the seed example with rows 0 and 5's dropped.
        let seed = seed_example();
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for r in 0..9 {
            let (c, v) = seed.row(r);
            for (&c, &v) in c.iter().zip(v) {
                if !(c as usize == r && (r == 0 || r == 5)) {
                    cols.push(c);
                    vals.push(v);
                }
            }
            row_ptr.push(cols.len());
        }
        let no_diagonal = Csr::new(9, row_ptr, cols, vals).unwrap();
        let cases = [
            seed,
            no_diagonal,
            random_symmetric(300, 7, 1),
            crate::sparse::testing::random_nonsymmetric(1000, 12, 2),
        ];
        for (i, a) in cases.iter().enumerate() {
            let n = a.n_rows();
            for ordering in [Permutation::identity(n), shuffled(n, 3 + i as u64)] {
                let reversed = ordering.reversed();
                for h in [32, 64, 256] {
                    for ordering in [&ordering, &reversed] {
                        let expected = ModSell::from_csr(&ordering.apply_symmetric(a), h).unwrap();
                        let got = ModSell::from_csr_permuted(a, ordering, h).unwrap();
                        assert_eq!(got, expected, "case {i}, h {h}");
                    }
                }
            }
        }
        let a = &cases[2];
        assert!(ModSell::from_csr_permuted(a, &Permutation::identity(299), 32).is_err());
        assert!(ModSell::from_csr_permuted(a, &Permutation::identity(300), 48).is_err());
    }

    #[test]
    fn codes_follow_the_seed_rule() {
        let a = seed_example();
        let m = ModSell::from_csr(&a, 32).unwrap();
        assert_eq!(m.diag(), &[2.5, 0.2, 2.7, -4.5, 1.2, 2.8, 1.1, 0.2, 2.0]);
        // One slice, longest row has 3 off-diagonals.
        assert_eq!(m.slice_ptr(), &[0, 96]);
        // Row 1: columns 0, 2, 3 → codes −1, −3, −4 (all in the slice).
        assert_eq!([m.codes()[1], m.codes()[33], m.codes()[65]], [-1, -3, -4]);
        // Row 0 has one off-diagonal: the rest of its column is padding.
        assert_eq!([m.codes()[0], m.codes()[32]], [-2, 0]);
        assert_eq!(m.lambda(), 1.0);
        assert_eq!(m.off_diagonals(), a.nnz() - 9);
    }

    #[test]
    fn out_of_slice_columns_are_shifted_by_one() {
        // Slices of 32 on a 64-row matrix with a_{0,40} and a_{40,0}.
        let n = 64;
        let rows = (0..n as u32).map(|r| {
            let mut row = vec![(r, 4.0)];
            if r == 0 {
                row.push((40, -1.0));
            }
            if r == 40 {
                row.insert(0, (0, -1.0));
            }
            row
        });
        let a = Csr::from_rows(n, rows).unwrap();
        let m = ModSell::from_csr(&a, 32).unwrap();
        assert_eq!(m.slice_ptr(), &[0, 32, 64]);
        assert_eq!(m.codes()[0], 41);
        assert_eq!(m.codes()[32 + 8], 1);
        assert_eq!(m.lambda(), 0.0);
    }

    #[test]
    fn sell_and_mod_sell_spmv_match_csr_on_random_matrices() {
        for (n, h, seed) in [(1, 32, 1), (37, 32, 2), (1000, 64, 3), (5000, 256, 4)] {
            let a = random_symmetric(n, 6, seed);
            let x: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
                .collect();
            let mut reference = vec![0.0; n];
            a.spmv(&x, &mut reference);
            let mut y = vec![f64::NAN; n];
            Sell::from_csr(&a, h).unwrap().spmv(&x, &mut y);
            assert_close(&y, &reference);
            let mut y = vec![f64::NAN; n];
            let m = ModSell::from_csr(&a, h).unwrap();
            m.spmv(&x, &mut y);
            assert_close(&y, &reference);
            assert_eq!(m.to_csr(), a);
            let parts = ModSell::from_parts(
                h,
                m.diag().to_vec(),
                m.slice_ptr().to_vec(),
                m.codes().to_vec(),
                m.values().to_vec(),
            )
            .unwrap();
            assert_eq!(parts, m);
        }
    }

    fn assert_close(y: &[f64], reference: &[f64]) {
        for (i, (a, b)) in y.iter().zip(reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-13 * b.abs().max(1.0),
                "row {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let a = seed_example();
        assert!(ModSell::from_csr(&a, 48).is_err());
        assert!(Sell::from_csr(&a, 0).is_err());
        let rect = Csr::new(3, vec![0, 1], vec![2], vec![1.0]).unwrap();
        assert!(ModSell::from_csr(&rect, 32).is_err());
        let m = ModSell::from_csr(&a, 32).unwrap();
        let parts = |ptr: Vec<u64>, codes: Vec<i32>| {
            ModSell::from_parts(32, m.diag().to_vec(), ptr, codes, m.values().to_vec())
        };
        assert!(parts(vec![0, 64], m.codes().to_vec()).is_err());
        assert!(parts(vec![0, 95], m.codes().to_vec()).is_err());
        let mut codes = m.codes().to_vec();
        codes[0] = 10; // column 9 of 9
        assert!(parts(m.slice_ptr().to_vec(), codes)
            .unwrap_err()
            .contains("column 9"));
    }
}
