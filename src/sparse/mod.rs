//! Sparse matrix formats and orderings.

mod coo;
pub mod csr;
pub mod mtx;

pub use csr::Csr;
