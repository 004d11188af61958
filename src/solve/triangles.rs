//! A square matrix's rows split at the diagonal, as the triangular
//! preconditioners and smoothers read them; a missing or non-positive
//! diagonal entry is an error naming the row and the preconditioner.
//!
//! A leaf of `solve`: the preconditioners and smoothers import it, it
//! imports none of them.

use std::borrow::Cow;

use super::SolveError;
use crate::sparse::Csr;

/// Where each row's diagonal sits: row r's strictly lower entries are
/// `row_ptr[r]..diag_slot[r]`, its strictly upper ones `diag_slot[r]+1..row_ptr[r+1]`.
pub(super) struct Triangles<'a> {
    a: Cow<'a, Csr>,
    diag_slot: Vec<usize>,
}

impl<'a> Triangles<'a> {
    /// Fails when a diagonal entry is missing or not positive: every
    /// preconditioner here divides by it and needs it positive for SPD.
    pub(super) fn new(a: &'a Csr, precond: &'static str) -> Result<Self, SolveError> {
        Self::of(Cow::Borrowed(a), precond)
    }

    /// [`Self::new`] on a matrix it keeps (Schwarz's block matrices, block-IC's
    /// block diagonal).
    pub(super) fn owned(a: Csr, precond: &'static str) -> Result<Triangles<'static>, SolveError> {
        Triangles::of(Cow::Owned(a), precond)
    }

    fn of(a: Cow<'a, Csr>, precond: &'static str) -> Result<Self, SolveError> {
        let diag_slot = (0..a.n_rows())
            .map(|r| match a.slot(r, r) {
                Some(s) if a.values()[s] > 0.0 => Ok(s),
                found => Err(SolveError::NonPositiveDiagonal {
                    precond,
                    row: r,
                    value: found.map_or(0.0, |s| a.values()[s]),
                }),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { a, diag_slot })
    }

    pub(super) fn n(&self) -> usize {
        self.diag_slot.len()
    }
    pub(super) fn matrix(&self) -> &Csr {
        &self.a
    }
    pub(super) fn diag(&self, r: usize) -> f64 {
        self.a.values()[self.diag_slot[r]]
    }
    /// Slots of the strictly lower entries of row r, columns ascending.
    pub(super) fn lower(&self, r: usize) -> std::ops::Range<usize> {
        self.a.row_ptr()[r]..self.diag_slot[r]
    }
    /// Slots of the strictly upper entries of row r, columns ascending.
    pub(super) fn upper(&self, r: usize) -> std::ops::Range<usize> {
        self.diag_slot[r] + 1..self.a.row_ptr()[r + 1]
    }
    /// Slots of the off-diagonal entries of row r, columns ascending.
    pub(super) fn off_diagonal(&self, r: usize) -> impl Iterator<Item = usize> {
        self.lower(r).chain(self.upper(r))
    }
    pub(super) fn col(&self, slot: usize) -> usize {
        self.a.cols()[slot] as usize
    }
    pub(super) fn value(&self, slot: usize) -> f64 {
        self.a.values()[slot]
    }
}
