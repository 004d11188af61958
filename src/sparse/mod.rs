//! Sparse matrix formats and row orderings (Cuthill–McKee, METIS slices).

pub mod blocks;
mod coo;
pub mod csr;
pub mod distribute;
pub mod fill;
pub mod levels;
pub mod modsell;
pub mod mtx;
pub mod ordering;
pub mod partition;
pub mod testing;

pub use csr::Csr;
pub use modsell::{ModSell, Sell};
pub use ordering::{Permutation, Reordered, RowOrdering};
