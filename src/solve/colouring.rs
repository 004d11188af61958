//! Colourings of a matrix graph for multicolour Gauss–Seidel (Wikberg 2024, §4.2.1:
//! discussed there and rejected; AmgX and HPCG use it): no two coupled rows
//! share a colour, so the rows of one colour update in parallel.
//!
//! Both colourings here are first-fit greedy colourings in some row order: a
//! row takes the smallest colour none of its already coloured neighbours has.
//! - [`Colouring::greedy`]: the rows in their given order.
//! - [`Colouring::jones_plassmann`]: the rows by decreasing [`jp_priority`]
//!   (ties by larger index). This is exactly what Jones–Plassmann (1993) with
//!   first-fit computes in parallel rounds: a row is coloured in the round when
//!   all its higher-priority neighbours are coloured and none of its
//!   lower-priority ones is yet, so it sees the same neighbour colours as in the
//!   sequential order. The GPU colouring (`kernels/smooth.cu` `jp_select`,
//!   `jp_assign`) therefore gives the identical colours.
//!
//! Greedy first-fit never needs more than max degree + 1 colours (Wikberg's
//! (2024) "bounded below by mnz" is an erratum).

use std::sync::Arc;

use rayon::prelude::*;

use crate::sparse::{Csr, Permutation};

/// Priority of row `i` in Jones–Plassmann: a 32-bit integer hash (the
/// "lowbias32" mixer), the same function as `jp_hash` in `kernels/smooth.cu`.
pub fn jp_priority(i: u32) -> u32 {
    let mut x = i;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// A colour per row and the rows grouped by colour. Cloning is cheap (the
/// arrays are shared): every preconditioner set up on one colour layout
/// (multicolour Gauss–Seidel, DIC and IC(0) in colour order, Eisenstat SGS)
/// takes the same colouring without copying n-row arrays on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Colouring {
    colour: Arc<[u32]>,
    /// The rows of colour k are `rows[ptr[k]..ptr[k + 1]]`, ascending.
    rows: Arc<[u32]>,
    ptr: Arc<[usize]>,
    /// Whether `rows` is 0..n (every colour a contiguous run of rows, as
    /// [`Self::contiguous`] makes them): found while grouping, so that a
    /// set-up checks it in O(1).
    contiguous: bool,
}

impl Colouring {
    /// Groups rows by the given colours (a counting sort, rows ascending in
    /// each colour). Colours must be used without gaps from 0; a gap is an error.
    pub fn from_colours(colour: Vec<u32>) -> Result<Self, String> {
        let n_colours = colour.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
        let (ptr, rows) = crate::slices::group_by_key(&colour, n_colours);
        if let Some(k) = (0..n_colours).find(|&k| ptr[k + 1] == ptr[k]) {
            return Err(format!("colour {k} of 0..{n_colours} has no row"));
        }
        let contiguous = rows.iter().enumerate().all(|(r, &row)| row as usize == r);
        Ok(Self {
            colour: colour.into(),
            rows: rows.into(),
            ptr: ptr.into(),
            contiguous,
        })
    }

    /// First-fit greedy colouring visiting the rows in `order` (a permutation
    /// of 0..n, as `new_to_old`).
    pub fn greedy_in_order(a: &Csr, order: &[u32]) -> Self {
        assert_eq!(order.len(), a.n_rows(), "colouring: order length");
        const NONE: u32 = u32::MAX;
        let mut colour = vec![NONE; a.n_rows()];
        // stamp[c] == v + 1: colour c is taken by a neighbour of v.
        let mut stamp: Vec<usize> = Vec::new();
        for &v in order {
            let v = v as usize;
            for &c in a.row(v).0 {
                let k = colour[c as usize];
                if c as usize != v && k != NONE {
                    if stamp.len() <= k as usize {
                        stamp.resize(k as usize + 1, 0);
                    }
                    stamp[k as usize] = v + 1;
                }
            }
            colour[v] = (0..)
                .find(|&k| stamp.get(k).is_none_or(|&s| s != v + 1))
                .unwrap() as u32;
        }
        Self::from_colours(colour).expect("first-fit uses colours without gaps")
    }

    /// First-fit greedy colouring in natural row order.
    pub fn greedy(a: &Csr) -> Self {
        let order: Vec<u32> = (0..a.n_rows() as u32).collect();
        Self::greedy_in_order(a, &order)
    }

    /// Jones–Plassmann colouring with [`jp_priority`] (module documentation):
    /// the colours the GPU computes.
    pub fn jones_plassmann(a: &Csr) -> Self {
        let mut order: Vec<u32> = (0..a.n_rows() as u32).collect();
        order.par_sort_unstable_by_key(|&i| std::cmp::Reverse((jp_priority(i), i)));
        Self::greedy_in_order(a, &order)
    }

    pub fn n_colours(&self) -> usize {
        self.ptr.len() - 1
    }
    /// The colour of each row.
    pub fn colours(&self) -> &[u32] {
        &self.colour
    }
    /// The rows of colour `k`, ascending.
    pub fn rows_of(&self, k: usize) -> &[u32] {
        &self.rows[self.ptr[k]..self.ptr[k + 1]]
    }
    /// All rows grouped by colour (colour 0 first).
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }
    /// Start of each colour's rows in [`Self::rows`] (n_colours + 1 entries).
    pub fn colour_ptr(&self) -> &[usize] {
        &self.ptr
    }
    /// Whether every colour is a contiguous run of rows ([`Self::rows`] is
    /// 0..n), as in the order [`Self::contiguous`] makes. O(1).
    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// The rows renumbered colour by colour (ascending within a colour, so
    /// the current order's locality is kept), and this colouring in the new
    /// numbering, where every colour is a contiguous run of rows.
    pub fn contiguous(&self) -> (Permutation, Colouring) {
        let p = Permutation::from_new_to_old(self.rows.to_vec()).expect("rows hold each row once");
        let c = Self::from_colours(p.to_new(&self.colour)).expect("the same colours");
        (p, c)
    }

    /// The first pair of coupled rows with the same colour, if any.
    pub fn conflict(&self, a: &Csr) -> Option<(usize, usize)> {
        (0..a.n_rows()).into_par_iter().find_map_first(|r| {
            a.row(r)
                .0
                .iter()
                .map(|&c| c as usize)
                .find(|&c| c != r && self.colour[c] == self.colour[r])
                .map(|c| (r, c))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::testing::random_symmetric;

    /// The 5-point Laplacian pattern of an nx × ny grid (values irrelevant).
    fn grid(nx: usize, ny: usize) -> Csr {
        let mut row_ptr = vec![0];
        let (mut cols, mut vals) = (vec![], vec![]);
        for j in 0..ny {
            for i in 0..nx {
                let r = j * nx + i;
                let mut row = vec![r];
                if j > 0 {
                    row.push(r - nx);
                }
                if i > 0 {
                    row.push(r - 1);
                }
                if i + 1 < nx {
                    row.push(r + 1);
                }
                if j + 1 < ny {
                    row.push(r + nx);
                }
                row.sort_unstable();
                for c in row {
                    cols.push(c as u32);
                    vals.push(if c == r { 4.0 } else { -1.0 });
                }
                row_ptr.push(cols.len());
            }
        }
        Csr::new(nx * ny, row_ptr, cols, vals).unwrap()
    }

    #[test]
    fn natural_greedy_on_a_grid_is_red_black() {
        let a = grid(7, 5);
        let c = Colouring::greedy(&a);
        assert_eq!(c.n_colours(), 2);
        for j in 0..5 {
            for i in 0..7 {
                assert_eq!(c.colours()[j * 7 + i], ((i + j) % 2) as u32);
            }
        }
        assert_eq!(c.rows_of(0).len(), 18);
        assert!(c.conflict(&a).is_none());
    }

    #[test]
    fn jones_plassmann_is_proper_and_bounded_by_degree() {
        for (n, seed) in [(1, 1), (50, 2), (3000, 3)] {
            let a = random_symmetric(n, 6, seed);
            let c = Colouring::jones_plassmann(&a);
            assert!(c.conflict(&a).is_none(), "n = {n}");
            let max_degree = (0..n).map(|r| a.row(r).0.len() - 1).max().unwrap();
            assert!(c.n_colours() <= max_degree + 1);
            // Rows grouped by colour, each group ascending, all rows once.
            let mut seen = vec![false; n];
            for k in 0..c.n_colours() {
                let rows = c.rows_of(k);
                assert!(rows.windows(2).all(|w| w[0] < w[1]));
                for &r in rows {
                    assert_eq!(c.colours()[r as usize], k as u32);
                    assert!(!std::mem::replace(&mut seen[r as usize], true));
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn jones_plassmann_rounds_give_the_greedy_colours() {
        // Simulate the parallel rounds of the GPU kernels on the host.
        let a = random_symmetric(2000, 8, 7);
        let n = a.n_rows();
        let above = |u: usize, v: usize| {
            (jp_priority(u as u32), u as u32) > (jp_priority(v as u32), v as u32)
        };
        let mut colour = vec![-1i64; n];
        let mut rounds = 0;
        while colour.iter().any(|&c| c < 0) {
            let selected: Vec<usize> = (0..n)
                .filter(|&v| {
                    colour[v] < 0
                        && a.row(v).0.iter().all(|&u| {
                            u as usize == v || colour[u as usize] >= 0 || !above(u as usize, v)
                        })
                })
                .collect();
            for &v in &selected {
                let used: Vec<i64> = a.row(v).0.iter().map(|&u| colour[u as usize]).collect();
                colour[v] = (0..).find(|k| !used.contains(k)).unwrap();
            }
            rounds += 1;
        }
        let expected = Colouring::jones_plassmann(&a);
        let got: Vec<u32> = colour.iter().map(|&c| c as u32).collect();
        assert_eq!(got, expected.colours());
        assert!(rounds > 1 && rounds < 100, "{rounds} rounds");
    }

    #[test]
    fn contiguous_colours_are_runs_of_the_same_classes() {
        let a = random_symmetric(500, 6, 4);
        let c = Colouring::jones_plassmann(&a);
        let (p, runs) = c.contiguous();
        assert_eq!(runs.rows(), (0..500).collect::<Vec<u32>>().as_slice());
        assert_eq!(runs.colour_ptr(), c.colour_ptr());
        assert!(runs.conflict(&p.apply_symmetric(&a)).is_none());
        for (new, &old) in p.new_to_old().iter().enumerate() {
            assert_eq!(runs.colours()[new], c.colours()[old as usize]);
        }
        // The O(1) flag agrees with the rows; RCM-free random rows are not runs.
        assert!(runs.is_contiguous());
        assert!(!c.is_contiguous());
        assert!(Colouring::from_colours(vec![0, 0, 1, 2])
            .unwrap()
            .is_contiguous());
        assert!(!Colouring::from_colours(vec![0, 1, 0])
            .unwrap()
            .is_contiguous());
        // A clone shares the arrays instead of copying n rows.
        let shared = runs.clone();
        assert!(std::ptr::eq(shared.rows().as_ptr(), runs.rows().as_ptr()));
        assert_eq!(shared, runs);
    }

    #[test]
    fn gaps_in_colours_are_refused() {
        assert!(Colouring::from_colours(vec![0, 2, 0]).is_err());
        assert_eq!(Colouring::from_colours(vec![]).unwrap().n_colours(), 0);
        // lowbias32, as in kernels/smooth.cu (values from an independent evaluation).
        assert_eq!(
            [jp_priority(1), jp_priority(2), jp_priority(12345)],
            [1753845952, 3507691905, 2435775735]
        );
    }
}
