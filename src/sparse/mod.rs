//! Sparse matrix formats and orderings.

pub mod csr;

pub use csr::Csr;
