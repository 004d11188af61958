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
