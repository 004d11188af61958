//! Level scheduling (wavefronts) of a triangular sweep: the rows grouped in
//! levels so that a row reads only rows of earlier levels. A forward sweep
//! over the lower triangle (row r reads its lower columns c < r) puts row r
//! one level after the last level of its columns; the rows of one level are
//! then independent and may run on several threads, each row doing the
//! operations of the sequential sweep in the same order, so the result has
//! the same bits for any thread count (Anderson & Saad 1989; Saltz 1990).
//!
//! A backward sweep over the upper triangle of a matrix whose pattern is
//! symmetric runs the forward levels last to first: if row i reads c > i,
//! then i is a lower column of row c, so c's forward level is after i's,
//! and c is done before i.

/// Rows grouped by level, levels in sweep order, rows ascending in a level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Levels {
    /// Level l's rows are `rows[start[l]..start[l + 1]]`.
    start: Vec<usize>,
    rows: Vec<u32>,
    /// Each row's level.
    level_of: Vec<u32>,
}

impl Levels {
    /// The levels of a forward sweep over `n` rows where row r reads the
    /// rows `reads(r)`, all below r (a lower triangle's columns). Panics on
    /// a column that is not below its row (a triangle's invariant).
    pub fn forward<I: IntoIterator<Item = usize>>(n: usize, reads: impl Fn(usize) -> I) -> Self {
        let mut level = vec![0u32; n];
        let mut count = Vec::new();
        for r in 0..n {
            let l = reads(r)
                .into_iter()
                .map(|c| {
                    assert!(
                        c < r,
                        "Levels::forward: row {r} reads row {c}, not below it"
                    );
                    level[c] + 1
                })
                .max()
                .unwrap_or(0);
            level[r] = l;
            if l as usize == count.len() {
                count.push(0);
            }
            count[l as usize] += 1;
        }
        // Counting sort by level: rows stay ascending within a level.
        let mut start = Vec::with_capacity(count.len() + 1);
        start.push(0);
        for c in &count {
            start.push(start.last().unwrap() + c);
        }
        let mut next = start[..count.len()].to_vec();
        let mut rows = vec![0u32; n];
        for (r, &l) in level.iter().enumerate() {
            rows[next[l as usize]] = r as u32;
            next[l as usize] += 1;
        }
        Self {
            start,
            rows,
            level_of: level,
        }
    }

    /// Whether these levels, run last to first, schedule a backward sweep
    /// where row r reads the rows `reads(r)` above it: each of them is in a
    /// later level (true where the pattern is symmetric).
    pub fn serve_backward<I: IntoIterator<Item = usize>>(
        &self,
        reads: impl Fn(usize) -> I,
    ) -> bool {
        let level = &self.level_of;
        (0..level.len()).all(|r| reads(r).into_iter().all(|c| level[c] > level[r]))
    }

    /// The levels of a backward sweep over `n` rows where row r reads the
    /// rows `reads(r)`, all above r (an upper triangle's columns), in the
    /// order they run (row r is in a level after those of its columns).
    pub fn backward<I: IntoIterator<Item = usize>>(n: usize, reads: impl Fn(usize) -> I) -> Self {
        // The forward levels of the rows numbered from the last.
        let mirrored = Self::forward(n, |r| {
            reads(n - 1 - r).into_iter().map(move |c| {
                assert!(
                    c > n - 1 - r,
                    "Levels::backward: row {} reads row {c}, not above it",
                    n - 1 - r
                );
                n - 1 - c
            })
        });
        let flip = |r: u32| (n - 1 - r as usize) as u32;
        let mut rows: Vec<u32> = Vec::with_capacity(n);
        for l in 0..mirrored.count() {
            // Ascending in each level.
            rows.extend(mirrored.level(l).iter().rev().map(|&r| flip(r)));
        }
        let level_of = (0..n).map(|r| mirrored.level_of[n - 1 - r]).collect();
        Self {
            start: mirrored.start,
            rows,
            level_of,
        }
    }

    /// Number of rows.
    pub fn n(&self) -> usize {
        self.rows.len()
    }

    /// Number of levels (0 for no rows).
    pub fn count(&self) -> usize {
        self.start.len() - 1
    }

    /// The rows of level l, ascending.
    pub fn level(&self, l: usize) -> &[u32] {
        &self.rows[self.start[l]..self.start[l + 1]]
    }

    /// Rows per level on average (0 for no rows).
    pub fn mean_width(&self) -> usize {
        self.rows.len().checked_div(self.count()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_of_a_small_lower_pattern() {
        // 0 and 1 read nothing; 2 reads 0; 3 reads 1 and 2; 4 reads 0; 5 reads 3.
        let reads: [&[usize]; 6] = [&[], &[], &[0], &[1, 2], &[0], &[3]];
        let levels = Levels::forward(6, |r| reads[r].iter().copied());
        assert_eq!(levels.count(), 4);
        assert_eq!(levels.level(0), &[0, 1]);
        assert_eq!(levels.level(1), &[2, 4]);
        assert_eq!(levels.level(2), &[3]);
        assert_eq!(levels.level(3), &[5]);
        assert_eq!(levels.mean_width(), 1);
        let empty = Levels::forward(0, |_| std::iter::empty());
        assert_eq!((empty.count(), empty.mean_width()), (0, 0));
    }

    #[test]
    fn a_2d_grid_has_its_antidiagonals_as_levels() {
        // 3 × 2 grid, x fastest: row r = x + 3 y reads r − 1 (x > 0) and r − 3.
        let reads = |r: usize| {
            let (x, y) = (r % 3, r / 3);
            (x > 0)
                .then(|| r - 1)
                .into_iter()
                .chain((y > 0).then(|| r - 3))
        };
        let levels = Levels::forward(6, reads);
        let all: Vec<&[u32]> = (0..levels.count()).map(|l| levels.level(l)).collect();
        assert_eq!(all, [&[0][..], &[1, 3], &[2, 4], &[5]]);
    }

    #[test]
    fn backward_levels_and_reversed_forward_ones() {
        // Upper reads (row r reads c > r) mirroring the lower pattern of
        // `levels_of_a_small_lower_pattern`: 0 reads 2, 4; 1 reads 3; 2
        // reads 3; 3 reads 5.
        let lower: [&[usize]; 6] = [&[], &[], &[0], &[1, 2], &[0], &[3]];
        let upper: [&[usize]; 6] = [&[2, 4], &[3], &[3], &[5], &[], &[]];
        let forward = Levels::forward(6, |r| lower[r].iter().copied());
        assert!(forward.serve_backward(|r| upper[r].iter().copied()));
        let backward = Levels::backward(6, |r| upper[r].iter().copied());
        let all: Vec<&[u32]> = (0..backward.count()).map(|l| backward.level(l)).collect();
        assert_eq!(all, [&[4, 5][..], &[3], &[1, 2], &[0]]);
        // Row 2 reading row 4 is not scheduled by the reversed forward
        // levels: both are in level 1.
        let unmirrored: [&[usize]; 6] = [&[2], &[3], &[4], &[], &[], &[]];
        assert!(!forward.serve_backward(|r| unmirrored[r].iter().copied()));
    }

    #[test]
    #[should_panic(expected = "row 1 reads row 2")]
    fn a_column_above_its_row_is_refused() {
        Levels::forward(3, |r| if r == 1 { vec![2] } else { vec![] });
    }
}
