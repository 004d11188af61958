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

/// `data` cut into consecutive parts of `lengths` (rows, slices or blocks of
/// them), each mutable on its own: for filling them in parallel. Panics
/// where the lengths add up to more than `data` holds.
pub fn split_lengths<T>(data: &mut [T], lengths: impl IntoIterator<Item = usize>) -> Vec<&mut [T]> {
    let mut rest = data;
    let mut parts = Vec::new();
    for len in lengths {
        let (part, tail) = std::mem::take(&mut rest).split_at_mut(len);
        parts.push(part);
        rest = tail;
    }
    parts
}
