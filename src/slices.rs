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

/// The indices of `key` grouped by their key (a counting sort, stable):
/// group g's indices are `indices[starts[g]..starts[g + 1]]`, ascending.
/// Every key must be below `n_groups`; returns `(starts, indices)`.
pub fn group_by_key(key: &[u32], n_groups: usize) -> (Vec<usize>, Vec<u32>) {
    let mut starts = vec![0usize; n_groups + 1];
    for &k in key {
        starts[k as usize + 1] += 1;
    }
    for g in 0..n_groups {
        starts[g + 1] += starts[g];
    }
    let mut next = starts.clone();
    let mut indices = vec![0u32; key.len()];
    for (i, &k) in key.iter().enumerate() {
        indices[next[k as usize]] = i as u32;
        next[k as usize] += 1;
    }
    (starts, indices)
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

    #[test]
    fn indices_group_by_key_in_ascending_order() {
        let (starts, indices) = group_by_key(&[2, 0, 2, 1, 0], 4);
        assert_eq!(starts, [0, 2, 3, 5, 5]);
        assert_eq!(indices, [1, 4, 3, 0, 2]);
    }
}
