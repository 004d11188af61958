//! The checks every solver's entry point makes on its inputs (square,
//! sizes, finite values, valid controls, symmetric), each failing with a
//! [`SolveError`] that names the entry at fault; and the copies of `b` and
//! `x` the entry points solve on ([`on_copies`]).

use rayon::prelude::*;

use super::error::check_finite;
use super::{SolveError, SolverControls};
use crate::sparse::Csr;

/// Checks that `a` is symmetric: every stored a_rc has a mirror a_cr equal to
/// it up to rounding in the last bits (a missing mirror counts as 0).
pub fn check_symmetric(a: &Csr) -> Result<(), SolveError> {
    let bad = (0..a.n_rows()).into_par_iter().find_map_first(|r| {
        let (cols, vals) = a.row(r);
        cols.iter().zip(vals).find_map(|(&c, &upper)| {
            let c = c as usize;
            let lower = a.slot(c, r).map_or(0.0, |s| a.values()[s]);
            let close = (upper - lower).abs() <= 1e-12 * upper.abs().max(lower.abs());
            (!close).then_some(SolveError::NotSymmetric {
                row: r,
                col: c,
                upper,
                lower,
            })
        })
    });
    bad.map_or(Ok(()), Err)
}

/// The checks every PCG entry point makes on its inputs: square, sizes,
/// finite values, valid controls, symmetric.
pub fn check_system(
    a: &Csr,
    b: &[f64],
    x: &[f64],
    controls: &SolverControls,
) -> Result<(), SolveError> {
    check_inputs(a, b, x, controls)?;
    check_symmetric(a)
}

/// An error unless `a` is square.
pub(crate) fn check_square(a: &Csr) -> Result<(), SolveError> {
    if a.n_rows() != a.n_cols() {
        return Err(SolveError::NotSquare {
            rows: a.n_rows(),
            cols: a.n_cols(),
        });
    }
    Ok(())
}

/// The size n of `a`: square with at least one row, else an error.
pub(crate) fn square_size(a: &Csr) -> Result<usize, SolveError> {
    check_square(a)?;
    match a.n_rows() {
        0 => Err(SolveError::Empty),
        n => Ok(n),
    }
}

/// [`check_system`] without the symmetry check: what a solver of
/// nonsymmetric systems (smoothSolver with a point smoother) needs.
pub fn check_inputs(
    a: &Csr,
    b: &[f64],
    x: &[f64],
    controls: &SolverControls,
) -> Result<(), SolveError> {
    let n = square_size(a)?;
    check_size("right-hand side b", n, b.len())?;
    check_size("initial guess x", n, x.len())?;
    check_finite_matrix(a)?;
    check_values(b, x, controls)
}

/// An error naming the row of `a`'s first value that is not finite: the
/// matrix check of [`check_inputs`], which AMG's set-up makes alone.
pub(crate) fn check_finite_matrix(a: &Csr) -> Result<(), SolveError> {
    if let Some(slot) = a.values().iter().position(|v| !v.is_finite()) {
        return Err(SolveError::NonFinite {
            what: "matrix",
            row: a.row_ptr().partition_point(|&p| p <= slot) - 1,
            value: a.values()[slot],
        });
    }
    Ok(())
}

/// An error naming `what` unless it has the `expected` number of entries
/// (`found`).
pub(crate) fn check_size(
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), SolveError> {
    if found != expected {
        return Err(SolveError::SizeMismatch {
            what,
            expected,
            found,
        });
    }
    Ok(())
}

/// The checks after the sizes, shared by the serial and the distributed
/// entries: `b` and `x` finite, `controls` valid.
pub(crate) fn check_values(
    b: &[f64],
    x: &[f64],
    controls: &SolverControls,
) -> Result<(), SolveError> {
    check_finite("right-hand side b", b)?;
    check_finite("initial guess x", x)?;
    controls.validate()
}

/// Runs `solve` on copies of `b` and `x` (`Vec<f64>`, the CPU backends'
/// vector) and copies the solution into `x` when it succeeds: an error
/// leaves `x` as given. The copies are freed on return.
pub(crate) fn on_copies<T, E>(
    b: &[f64],
    x: &mut [f64],
    solve: impl FnOnce(&Vec<f64>, &mut Vec<f64>) -> Result<T, E>,
) -> Result<T, E> {
    let mut x_work = x.to_vec();
    let solved = solve(&b.to_vec(), &mut x_work)?;
    x.copy_from_slice(&x_work);
    Ok(solved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asymmetry_is_reported_with_the_entry() {
        let a = Csr::new(2, vec![0, 2, 3], vec![0, 1, 1], vec![2., -1., 2.]).unwrap();
        let err = check_symmetric(&a).unwrap_err();
        assert_eq!(
            err,
            SolveError::NotSymmetric {
                row: 0,
                col: 1,
                upper: -1.0,
                lower: 0.0
            }
        );
    }
}
