//! Symbolic ILU(k): the pattern of the incomplete LU factors with level of
//! fill at most k (Yang 2015, §2.10, the decoupled ILU(k) of Algorithm 13 in the
//! sparse form of Saad's Algorithm 10.5).
//!
//! Every entry of A has level 0; a fill entry (i, j) created when row p
//! eliminates (i, p) gets the sum-rule level
//! `lev(i, j) = min over p of lev(i, p) + lev(p, j) + 1`, and entries with a
//! level above k are never inserted (so nothing is dropped afterwards). The
//! diagonal is always in the pattern (level 0 when A lacks it: the numeric
//! phase then meets a zero pivot and says so). The numeric phase
//! (`solve::ilu`) runs ILU(0) on A padded with explicit zeros at the fill
//! positions, as Yang 2015 does.

use std::collections::BTreeMap;

use super::Csr;

/// The ILU(k) pattern of a square matrix with A's values in place (zeros at
/// the fill positions) and each entry's level of fill.
#[derive(Clone, Debug, PartialEq)]
pub struct FillPattern {
    /// A padded to the pattern: every row holds its diagonal.
    pub matrix: Csr,
    /// Level of fill per slot of `matrix` (0 for the entries of A).
    pub levels: Vec<u32>,
    /// k.
    pub fill_level: u32,
}

impl FillPattern {
    /// Number of fill entries (pattern entries not in A, diagonals A lacked included).
    pub fn n_fill(&self) -> usize {
        self.levels.iter().filter(|&&l| l > 0).count()
    }
    /// Number of entries per level of fill, `[level 0, level 1, …, level k]`.
    pub fn per_level(&self) -> Vec<usize> {
        let mut counts = vec![0; self.fill_level as usize + 1];
        for &l in &self.levels {
            counts[l as usize] += 1;
        }
        counts
    }
}

/// The ILU(k) pattern of `a` (square), values of `a` copied in.
pub fn ilu_pattern(a: &Csr, k: u32) -> Result<FillPattern, String> {
    let n = a.n_rows();
    if n != a.n_cols() {
        return Err(format!(
            "ILU(k) needs a square matrix, this one is {n} x {}",
            a.n_cols()
        ));
    }
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0usize);
    let mut cols: Vec<u32> = Vec::with_capacity(a.nnz());
    let mut levels: Vec<u32> = Vec::with_capacity(a.nnz());
    // Slot of each finished row's diagonal: its upper part follows it.
    let mut diag = Vec::with_capacity(n);
    let mut row: BTreeMap<u32, u32> = BTreeMap::new();
    for i in 0..n {
        row.clear();
        row.extend(a.row(i).0.iter().map(|&c| (c, 0)));
        row.entry(i as u32).or_insert(0);
        if k > 0 {
            // Eliminate the lower entries in increasing column order; fill
            // inserted below i is visited in its turn.
            let mut next = row.range(..i as u32).next().map(|(&p, &l)| (p, l));
            while let Some((p, lev_ip)) = next {
                let upper = diag[p as usize] + 1..row_ptr[p as usize + 1];
                for (&j, &lev_pj) in cols[upper.clone()].iter().zip(&levels[upper]) {
                    let lev = lev_ip + lev_pj + 1;
                    if lev <= k {
                        let e = row.entry(j).or_insert(u32::MAX);
                        *e = (*e).min(lev);
                    }
                }
                next = row.range(p + 1..i as u32).next().map(|(&p, &l)| (p, l));
            }
        }
        for (&j, &l) in &row {
            if j as usize == i {
                diag.push(cols.len());
            }
            cols.push(j);
            levels.push(l);
        }
        row_ptr.push(cols.len());
    }
    let mut values = vec![0.0; cols.len()];
    for (i, &start) in row_ptr[..n].iter().enumerate() {
        let (acols, avals) = a.row(i);
        let mut s = start;
        for (&c, &v) in acols.iter().zip(avals) {
            while cols[s] != c {
                s += 1;
            }
            values[s] = v;
        }
    }
    let matrix = Csr::new(n, row_ptr, cols, values)?;
    Ok(FillPattern {
        matrix,
        levels,
        fill_level: k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;

    #[test]
    fn level_zero_is_the_pattern_of_a_with_its_diagonal() {
        let a = random_symmetric(50, 5, 3);
        let f = ilu_pattern(&a, 0).unwrap();
        assert_eq!(f.matrix, a);
        assert_eq!(f.n_fill(), 0);
        // A missing diagonal is added as a zero.
        let b = Csr::new(2, vec![0, 1, 2], vec![1, 0], vec![1.0, 2.0]).unwrap();
        let f = ilu_pattern(&b, 0).unwrap();
        assert_eq!(f.matrix.cols(), &[0, 1, 0, 1]);
        assert_eq!(f.matrix.values(), &[0.0, 1.0, 2.0, 0.0]);
        assert_eq!(f.levels, vec![0, 0, 0, 0]);
    }

    #[test]
    fn arrow_matrix_fills_with_the_sum_rule() {
        // Row 0 couples to every row: eliminating column 0 fills rows 1..n
        // completely at level 1; k = 0 keeps A.
        let n = 5;
        let mut row_ptr = vec![0];
        let mut cols = Vec::new();
        for i in 0..n as u32 {
            if i == 0 {
                cols.extend(0..n as u32);
            } else {
                cols.extend([0, i]);
            }
            row_ptr.push(cols.len());
        }
        let vals = vec![1.0; cols.len()];
        let a = Csr::new(n, row_ptr, cols, vals).unwrap();
        let f = ilu_pattern(&a, 1).unwrap();
        assert_eq!(f.matrix.nnz(), n * n);
        assert_eq!(f.per_level(), vec![a.nnz(), n * n - a.nnz()]);
        assert_eq!(f.matrix.slot(3, 2).map(|s| f.levels[s]), Some(1));
    }
}
