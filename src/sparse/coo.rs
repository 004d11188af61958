//! Building a CSR matrix from (row, column, value) triplets.

use super::Csr;

impl Csr {
    /// Builds an `n_rows` × `n_cols` matrix from triplets in any order;
    /// duplicates are summed in input order (so the result does not depend on
    /// the sort). Fails on an index out of range or when memory runs out.
    pub fn from_triplets(
        n_rows: usize,
        n_cols: usize,
        mut triplets: Vec<(u32, u32, f64)>,
    ) -> Result<Self, String> {
        if let Some(&(r, c, _)) = triplets
            .iter()
            .find(|&&(r, c, _)| r as usize >= n_rows || c as usize >= n_cols)
        {
            return Err(format!(
                "entry ({r}, {c}) is outside the {n_rows} x {n_cols} matrix (0-based)"
            ));
        }
        // Stable: duplicates stay in input order.
        triplets.sort_by_key(|&(r, c, _)| (r, c));
        let mut row_ptr = Vec::new();
        row_ptr
            .try_reserve_exact(n_rows + 1)
            .map_err(|_| format!("not enough memory for {n_rows} rows"))?;
        row_ptr.push(0);
        let (mut cols, mut values) = (Vec::new(), Vec::new());
        let mut rest = triplets.as_slice();
        for r in 0..n_rows as u32 {
            let in_row = rest.partition_point(|t| t.0 == r);
            let (row, tail) = rest.split_at(in_row);
            rest = tail;
            for &(_, c, v) in row {
                if cols.len() > row_ptr[r as usize] && cols.last() == Some(&c) {
                    *values.last_mut().expect("values grow with cols") += v;
                } else {
                    cols.push(c);
                    values.push(v);
                }
            }
            row_ptr.push(cols.len());
        }
        Csr::new(n_cols, row_ptr, cols, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triplets_sorted_and_duplicates_summed() {
        let a = Csr::from_triplets(
            3,
            2,
            vec![
                (2, 1, 1.0),
                (0, 1, 2.0),
                (0, 0, 3.0),
                (2, 1, 0.5),
                (0, 1, -2.0),
            ],
        )
        .unwrap();
        assert_eq!(a.row_ptr(), &[0, 2, 2, 3]);
        assert_eq!(a.cols(), &[0, 1, 1]);
        assert_eq!(a.values(), &[3.0, 0.0, 1.5]);
        let err = Csr::from_triplets(2, 2, vec![(0, 2, 1.0)]).unwrap_err();
        assert!(err.contains("(0, 2)"), "{err}");
    }
}
