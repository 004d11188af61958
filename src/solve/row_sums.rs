//! Row sums of a CSR matrix in OpenFOAM's `sumA` order (the diagonal
//! first, then the off-diagonals by column), so that every backend's
//! normalisation factor rounds as OpenFOAM's does.

use rayon::prelude::*;

use crate::sparse::Csr;

/// Σ_c term(c, a_rc) over row r in OpenFOAM's `Amul`/`sumA` order: the
/// diagonal (slot `diag`, `usize::MAX` when there is none) first, then the
/// off-diagonals by increasing column (faces where r is the neighbour precede
/// those where it is the owner). The same order gives the same rounding as
/// OpenFOAM.
pub(crate) fn row_sum_by(a: &Csr, r: usize, diag: usize, term: impl Fn(usize, f64) -> f64) -> f64 {
    let range = a.row_ptr()[r]..a.row_ptr()[r + 1];
    let (cols, vals) = (a.cols(), a.values());
    let mut sum = if diag == usize::MAX {
        0.0
    } else {
        term(r, vals[diag])
    };
    for s in range.filter(|&s| s != diag) {
        sum += term(cols[s] as usize, vals[s]);
    }
    sum
}

pub(crate) fn diagonal_slots(a: &Csr) -> Vec<usize> {
    (0..a.n_rows())
        .map(|r| a.slot(r, r).unwrap_or(usize::MAX))
        .collect()
}

/// rowSum(A) in OpenFOAM's `sumA` order (diagonal first), as every backend's
/// normFactor uses it.
pub fn openfoam_row_sums(a: &Csr) -> Vec<f64> {
    let diag_slot = diagonal_slots(a);
    (0..a.n_rows())
        .into_par_iter()
        .map(|r| row_sum_by(a, r, diag_slot[r], |_, v| v))
        .collect()
}
