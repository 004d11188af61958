//! Sparse matrix formats and orderings.

pub mod blocks;
mod coo;
pub mod csr;
pub mod modsell;
pub mod mtx;
pub mod ordering;
pub mod testing;

pub use csr::Csr;
pub use modsell::{ModSell, Sell};
pub use ordering::Permutation;
