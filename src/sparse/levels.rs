//! Level schedules of triangular sweeps: the rows of a forward (lower) or
//! backward (upper) substitution grouped so that each row depends only on
//! rows of earlier levels. The rows of one level are independent and run in
//! parallel (the GPU's incomplete Cholesky, `gpu::ic`); the number of levels
//! is the number of dependent steps, which the row order decides (a
//! multicolour order has as many as colours, a banded one about the bandwidth
//! sweeps).

use super::Csr;

/// Rows grouped by level, each level's rows ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelSchedule {
    /// Level k holds `rows[level_ptr[k]..level_ptr[k + 1]]`.
    level_ptr: Vec<usize>,
    rows: Vec<u32>,
}

impl LevelSchedule {
    /// The forward sweep through the strictly lower triangle: row i waits for
    /// every column j < i of its row.
    pub fn lower(a: &Csr) -> Self {
        let n = a.n_rows();
        let mut level = vec![0u32; n];
        for i in 0..n {
            let (cols, _) = a.row(i);
            level[i] = cols
                .iter()
                .filter(|&&j| (j as usize) < i)
                .map(|&j| level[j as usize] + 1)
                .max()
                .unwrap_or(0);
        }
        Self::from_levels(&level)
    }

    /// The backward sweep through the strictly upper triangle: row i waits
    /// for every column j > i of its row.
    pub fn upper(a: &Csr) -> Self {
        let n = a.n_rows();
        let mut level = vec![0u32; n];
        for i in (0..n).rev() {
            let (cols, _) = a.row(i);
            level[i] = cols
                .iter()
                .filter(|&&j| (j as usize) > i)
                .map(|&j| level[j as usize] + 1)
                .max()
                .unwrap_or(0);
        }
        Self::from_levels(&level)
    }

    /// Counting sort of the rows by level (stable: ascending within a level).
    fn from_levels(level: &[u32]) -> Self {
        let n_levels = level.iter().max().map_or(0, |&l| l as usize + 1);
        let (level_ptr, rows) = crate::slices::group_by_key(level, n_levels);
        Self { level_ptr, rows }
    }

    /// The level of each row.
    pub fn row_levels(&self) -> Vec<u32> {
        let mut level = vec![0u32; self.rows.len()];
        for k in 0..self.n_levels() {
            for &r in self.level(k) {
                level[r as usize] = k as u32;
            }
        }
        level
    }

    pub fn n_levels(&self) -> usize {
        self.level_ptr.len() - 1
    }
    pub fn level_ptr(&self) -> &[usize] {
        &self.level_ptr
    }
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }
    /// The rows of level k.
    pub fn level(&self, k: usize) -> &[u32] {
        &self.rows[self.level_ptr[k]..self.level_ptr[k + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 5-point Laplacian on an nx × ny grid, natural order (x fastest).
    fn laplacian_2d(nx: usize, ny: usize) -> Csr {
        let (mut row_ptr, mut cols, mut values) = (vec![0], Vec::new(), Vec::new());
        for j in 0..ny {
            for i in 0..nx {
                let r = j * nx + i;
                let mut row = vec![(r, 4.0)];
                if i > 0 {
                    row.push((r - 1, -1.0));
                }
                if i + 1 < nx {
                    row.push((r + 1, -1.0));
                }
                if j > 0 {
                    row.push((r - nx, -1.0));
                }
                if j + 1 < ny {
                    row.push((r + nx, -1.0));
                }
                row.sort_by_key(|&(c, _)| c);
                cols.extend(row.iter().map(|&(c, _)| c as u32));
                values.extend(row.iter().map(|&(_, v)| v));
                row_ptr.push(cols.len());
            }
        }
        Csr::new(nx * ny, row_ptr, cols, values).unwrap()
    }

    /// Every row's dependencies sit in earlier levels, every row appears
    /// once, and no level could start earlier (each row at level k > 0 has a
    /// dependency at level k − 1).
    fn check(a: &Csr, s: &LevelSchedule, depends: impl Fn(usize, usize) -> bool) {
        let n = a.n_rows();
        let mut level_of = vec![usize::MAX; n];
        for k in 0..s.n_levels() {
            assert!(!s.level(k).is_empty(), "level {k} is empty");
            assert!(s.level(k).windows(2).all(|w| w[0] < w[1]));
            for &r in s.level(k) {
                assert_eq!(level_of[r as usize], usize::MAX, "row {r} twice");
                level_of[r as usize] = k;
            }
        }
        for i in 0..n {
            let (cols, _) = a.row(i);
            let deps: Vec<usize> = cols
                .iter()
                .map(|&j| j as usize)
                .filter(|&j| depends(i, j))
                .collect();
            for &j in &deps {
                assert!(
                    level_of[j] < level_of[i],
                    "row {i} before its dependency {j}"
                );
            }
            if level_of[i] > 0 {
                assert!(deps.iter().any(|&j| level_of[j] + 1 == level_of[i]));
            }
        }
    }

    #[test]
    fn grid_levels_are_anti_diagonals() {
        // A 5-point Laplacian on an nx × ny grid in natural order: the forward
        // levels are the anti-diagonals i + j, nx + ny − 1 of them.
        let (nx, ny) = (6, 4);
        let a = laplacian_2d(nx, ny);
        let lower = LevelSchedule::lower(&a);
        let upper = LevelSchedule::upper(&a);
        assert_eq!(lower.n_levels(), nx + ny - 1);
        assert_eq!(upper.n_levels(), nx + ny - 1);
        assert_eq!(lower.level(0), &[0]);
        assert_eq!(lower.level(1), &[1, nx as u32]);
        check(&a, &lower, |i, j| j < i);
        check(&a, &upper, |i, j| j > i);
    }

    #[test]
    fn diagonal_matrix_has_one_level() {
        let a = Csr::new(3, vec![0, 1, 2, 3], vec![0, 1, 2], vec![1.0; 3]).unwrap();
        assert_eq!(LevelSchedule::lower(&a).n_levels(), 1);
        assert_eq!(LevelSchedule::upper(&a).rows(), &[0, 1, 2]);
    }
}
