//! Random matrices for tests and benchmarks (deterministic from a seed), and
//! the dense form that tests compare with; the measures of agreement they
//! check ([`max_rel_diff`], [`relative_residual`], [`bits`]); Cuthill–McKee by its
//! definition ([`cuthill_mckee_by_queue`]).

use nalgebra::DMatrix;

use super::ordering::{Graph, Permutation};
use super::Csr;

/// splitmix64: a small, well-mixed generator; enough for test data.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A random permutation of 0..n (Fisher–Yates), drawn from `rng`.
pub fn random_permutation(n: usize, rng: &mut SplitMix) -> Permutation {
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    Permutation::from_new_to_old(order).expect("a shuffle of 0..n is a permutation")
}

/// A symmetric, strictly diagonally dominant (so SPD) n × n matrix: each row
/// draws up to `per_row` neighbours, mostly near the diagonal and some
/// anywhere, so rows have uneven lengths and some columns lie far away.
pub fn random_symmetric(n: usize, per_row: usize, seed: u64) -> Csr {
    let mut rng = SplitMix(seed);
    let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    for i in 0..n {
        for _ in 0..rng.below(per_row + 1) {
            let j = if rng.below(4) == 0 {
                rng.below(n)
            } else {
                (i + rng.below(64)).saturating_sub(32).min(n - 1)
            };
            if j != i {
                let v = -0.1 - rng.next_f64();
                rows[i].push((j as u32, v));
                rows[j].push((i as u32, v));
            }
        }
    }
    let mut row_ptr = vec![0];
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    for (i, mut row) in rows.into_iter().enumerate() {
        row.sort_unstable_by_key(|e| e.0);
        // Merge duplicates (both halves of a pair drawn twice).
        let mut merged: Vec<(u32, f64)> = Vec::with_capacity(row.len() + 1);
        for (c, v) in row {
            match merged.last_mut() {
                Some(last) if last.0 == c => last.1 += v,
                _ => merged.push((c, v)),
            }
        }
        let diag = 1.0 + rng.next_f64() + merged.iter().map(|e| e.1.abs()).sum::<f64>();
        let at = merged.partition_point(|e| (e.0 as usize) < i);
        merged.insert(at, (i as u32, diag));
        cols.extend(merged.iter().map(|e| e.0));
        values.extend(merged.iter().map(|e| e.1));
        row_ptr.push(cols.len());
    }
    Csr::new(n, row_ptr, cols, values).expect("generated rows are sorted and in range")
}

/// `n` values uniform in [−½, ½) drawn from `seed` (right-hand sides and
/// vectors to apply operators to).
pub fn random_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| rng.next_f64() - 0.5).collect()
}

/// Random SPD systems of 1, 1000 and 30 011 rows ([`random_symmetric`] with
/// up to 8 neighbours a row, seeds 1, 2, 3) with a [`random_vector`] of the
/// same seed as right-hand side, named by their size.
pub fn random_systems() -> Vec<(String, Csr, Vec<f64>)> {
    [(1usize, 1u64), (1000, 2), (30_011, 3)]
        .into_iter()
        .map(|(n, seed)| {
            let b = random_vector(n, seed);
            (format!("random n = {n}"), random_symmetric(n, 8, seed), b)
        })
        .collect()
}

/// The symmetric 4 × 4 matrix [4 −1 0 −2; −1 5 −1 0; 0 −1 6 c; −2 0 c 7]
/// (rows 2 and 3 coupled by `c`): row 0 couples to rows 1 and 3 but not 2,
/// small enough to check products, aggregates and factors by hand.
pub fn four_by_four(c: f64) -> Csr {
    Csr::new(
        4,
        vec![0, 3, 6, 9, 12],
        vec![0, 1, 3, 0, 1, 2, 1, 2, 3, 0, 2, 3],
        vec![4., -1., -2., -1., 5., -1., -1., 6., c, -2., c, 7.],
    )
    .unwrap()
}

/// `a` as a dense matrix (for exact inverses and products in tests).
pub fn dense(a: &Csr) -> DMatrix<f64> {
    let mut m = DMatrix::zeros(a.n_rows(), a.n_cols());
    for r in 0..a.n_rows() {
        let (cols, vals) = a.row(r);
        for (&c, &v) in cols.iter().zip(vals) {
            m[(r, c as usize)] = v;
        }
    }
    m
}

/// The 7-point Laplacian of an nx × ny × nz grid with Dirichlet boundaries
/// eliminated (5-point when nz = 1), natural order (x fastest): diagonal
/// 2·(dimensions), −1 per neighbour. At 120³ it is Yang 2015's 3D_Poisson
/// (Yang 2015, §3.2: 1,728,000 rows, 12,009,600 nonzeros).
pub fn grid_laplacian(nx: usize, ny: usize, nz: usize) -> Csr {
    let n = nx * ny * nz;
    let diag = if nz > 1 { 6.0 } else { 4.0 };
    let mut row_ptr = Vec::with_capacity(n + 1);
    row_ptr.push(0);
    let (mut cols, mut values) = (Vec::with_capacity(7 * n), Vec::with_capacity(7 * n));
    for k in 0..nz {
        for j in 0..ny {
            for i in 0..nx {
                let r = (k * ny + j) * nx + i;
                let mut push = |c: usize, v: f64| {
                    cols.push(c as u32);
                    values.push(v);
                };
                if k > 0 {
                    push(r - nx * ny, -1.0);
                }
                if j > 0 {
                    push(r - nx, -1.0);
                }
                if i > 0 {
                    push(r - 1, -1.0);
                }
                push(r, diag);
                if i + 1 < nx {
                    push(r + 1, -1.0);
                }
                if j + 1 < ny {
                    push(r + nx, -1.0);
                }
                if k + 1 < nz {
                    push(r + nx * ny, -1.0);
                }
                row_ptr.push(cols.len());
            }
        }
    }
    Csr::new(n, row_ptr, cols, values).expect("grid rows are sorted")
}

/// [`random_symmetric`] made nonsymmetric: every off-diagonal scaled by its
/// own factor in [0.5, 1) (the pattern stays symmetric, the rows and the
/// symmetric part stay strictly diagonally dominant).
pub fn random_nonsymmetric(n: usize, per_row: usize, seed: u64) -> Csr {
    let mut a = random_symmetric(n, per_row, seed);
    let mut rng = SplitMix(seed ^ 0x00a5_a5a5);
    let row_ptr = a.row_ptr().to_vec();
    let cols = a.cols().to_vec();
    let values = a.values_mut();
    for r in 0..n {
        for s in row_ptr[r]..row_ptr[r + 1] {
            if cols[s] as usize != r {
                values[s] *= 0.5 + 0.5 * rng.next_f64();
            }
        }
    }
    a
}

/// max_i |y_i − ref_i| / max_i |ref_i|; a non-finite y_i (an element never
/// written) gives infinity.
pub fn max_rel_diff(y: &[f64], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    y.iter()
        .zip(reference)
        .map(|(a, b)| {
            if a.is_finite() {
                (a - b).abs() / scale
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
}

/// The bit patterns of `v`: what tests compare where two paths must give
/// the same values bit for bit (and show the first that differs).
pub fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// ‖b − A x‖₂ / ‖b‖₂.
pub fn relative_residual(a: &Csr, b: &[f64], x: &[f64]) -> f64 {
    let mut ax = vec![0.0; b.len()];
    a.spmv(x, &mut ax);
    let r: f64 = ax.iter().zip(b).map(|(y, b)| (b - y) * (b - y)).sum();
    let nb: f64 = b.iter().map(|b| b * b).sum();
    (r / nb).sqrt()
}

/// Cuthill–McKee by its definition (Cuthill & McKee 1969): components
/// started from the unvisited vertex of smallest (degree, index), one queue,
/// each vertex's unvisited neighbours appended by (degree, index) when the
/// queue reaches it. The reference the parallel visit of
/// [`Graph::cuthill_mckee`] must reproduce; `new_to_old` of the ordering.
pub fn cuthill_mckee_by_queue(g: &Graph) -> Vec<u32> {
    let n = g.n();
    let key = |v: u32| (g.degree(v as usize), v);
    let mut starts: Vec<u32> = (0..n as u32).collect();
    starts.sort_by_key(|&v| key(v));
    let mut visited = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for start in starts {
        if visited[start as usize] {
            continue;
        }
        visited[start as usize] = true;
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            order.push(v);
            let mut next: Vec<u32> = g
                .neighbours(v as usize)
                .iter()
                .copied()
                .filter(|&u| !visited[u as usize])
                .collect();
            next.sort_unstable_by_key(|&u| key(u));
            for u in next {
                visited[u as usize] = true;
                queue.push_back(u);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_difference_counts_unwritten_elements_as_infinite() {
        assert_eq!(max_rel_diff(&[1.0, 2.0], &[1.0, 4.0]), 0.5);
        assert_eq!(max_rel_diff(&[1.0, f64::NAN], &[1.0, 4.0]), f64::INFINITY);
    }
}
