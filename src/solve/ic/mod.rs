//! Incomplete Cholesky preconditioners: OpenFOAM's DIC (diagonal incomplete
//! Cholesky) and IC(0) (no fill-in).
//!
//! The sweeps read rows in the given (natural) order and the lower triangle
//! of a row for the forward sweep, the upper triangle for the backward
//! sweep, which for a symmetric matrix is the same as OpenFOAM's
//! face-ordered loops over lower/upper coefficients. [`PlacedDic`] runs
//! DIC's sweeps in the factor's row order over vectors that hold the rows
//! in another (a rank's block DIC in global order on its local vectors,
//! `solve::distributed`).

mod cpu;

pub(crate) use cpu::check_positive_diagonal;
pub use cpu::{Dic, DicFactor, Ic0, PlacedDic};
