//! Deterministic parallel reductions. Vectors are cut into chunks of a fixed
//! size, each chunk is summed left to right, and the chunk sums are added in
//! chunk order: the rounding, hence the bits, do not depend on rayon's thread
//! count. CPU-vs-GPU comparisons and run-to-run reproducibility rely on this.

use rayon::prelude::*;

/// Elements per partial sum; fixed, never derived from the thread count.
pub const CHUNK: usize = 4096;

/// Adds per-chunk partial sums in chunk order (`collect` keeps the order).
pub fn ordered_sum(partials: impl IndexedParallelIterator<Item = f64>) -> f64 {
    let partials: Vec<f64> = partials.collect();
    partials.iter().sum()
}

/// Σ_i f(i) for i in 0..n with the fixed chunked summation order.
pub fn sum_by(n: usize, f: impl Fn(usize) -> f64 + Sync) -> f64 {
    ordered_sum(
        (0..n.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| (c * CHUNK..((c + 1) * CHUNK).min(n)).map(&f).sum()),
    )
}

/// The sums of the first and of the second terms of per-chunk pairs, each
/// added in chunk order ([`ordered_sum`]'s bits).
pub fn sum_pairs(partials: &[(f64, f64)]) -> (f64, f64) {
    (
        partials.iter().map(|p| p.0).sum(),
        partials.iter().map(|p| p.1).sum(),
    )
}

/// Runs `f(i, &mut y_i)` over `y` in parallel chunks of [`CHUNK`] and
/// returns the sums of the two terms it gives for each i: left to right
/// within a chunk, the chunks in order ([`sum_pairs`]).
pub fn chunked_sums(y: &mut [f64], f: impl Fn(usize, &mut f64) -> (f64, f64) + Sync) -> (f64, f64) {
    let partials: Vec<(f64, f64)> = y
        .par_chunks_mut(CHUNK)
        .enumerate()
        .map(|(c, y)| {
            let (mut s0, mut s1) = (0.0, 0.0);
            for (k, y) in y.iter_mut().enumerate() {
                let (a, b) = f(c * CHUNK + k, y);
                s0 += a;
                s1 += b;
            }
            (s0, s1)
        })
        .collect();
    sum_pairs(&partials)
}

/// a · b.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    sum_by(a.len(), |i| a[i] * b[i])
}

/// Σ |a_i|.
pub fn sum_abs(a: &[f64]) -> f64 {
    sum_by(a.len(), |i| a[i].abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_sum_matches_sequential_chunk_order_for_any_thread_count() {
        let n = 3 * CHUNK + 17;
        let a: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f64 * 1e-3 + 1e-9)
            .collect();
        let expected: f64 = a
            .chunks(CHUNK)
            .map(|c| c.iter().map(|v| v * v).sum::<f64>())
            .collect::<Vec<_>>()
            .iter()
            .sum();
        for threads in [1, 2, 3] {
            let d = crate::test_support::on_threads(threads, || dot(&a, &a));
            assert_eq!(d.to_bits(), expected.to_bits(), "{threads} threads");
        }
        assert_eq!(sum_abs(&[-1.0, 2.0, -3.5]), 6.5);
        assert_eq!(dot(&[], &[]), 0.0);
    }
}
