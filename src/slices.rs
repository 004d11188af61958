//! Slice helpers shared by the mesh, the sparse formats and the device
//! set-up: filling consecutive parts of one array in parallel.

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

/// `parts` one after the other in one array, each copied by a thread of its
/// own (a serial join of per-block results is a pass over the whole array
/// on one core).
pub fn concat<T: Copy + Default + Send + Sync>(parts: &[Vec<T>]) -> Vec<T> {
    use rayon::prelude::*;
    let mut joined = vec![T::default(); parts.iter().map(Vec::len).sum()];
    split_lengths(&mut joined, parts.iter().map(Vec::len))
        .into_par_iter()
        .zip(parts)
        .for_each(|(to, from)| to.copy_from_slice(from));
    joined
}

/// The running totals of `lengths` from 0: where each part starts in the
/// joined array.
pub fn starts(lengths: impl IntoIterator<Item = usize>) -> Vec<usize> {
    lengths
        .into_iter()
        .scan(0, |before, len| {
            Some(std::mem::replace(before, *before + len))
        })
        .collect()
}

/// Heap bytes a vector holds (its capacity, not its length): the memory
/// account of a structure is the sum of its vectors'.
pub fn bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * std::mem::size_of::<T>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_join_in_order() {
        let parts = vec![vec![1, 2, 3], vec![], vec![4], vec![5, 6]];
        assert_eq!(concat(&parts), [1, 2, 3, 4, 5, 6]);
        assert_eq!(starts(parts.iter().map(Vec::len)), [0, 3, 3, 4]);
        assert!(concat::<u32>(&[]).is_empty());
    }
}
